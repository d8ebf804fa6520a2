//! The retry budget, as Finagle and Envoy keep one: over a sliding 10 s window, retries may be
//! at most `ratio` times the first attempts plus `min_per_s` per second (so a quiet client can
//! still retry). When a dependency fails for everyone, the retries stop growing with the
//! failures instead of multiplying the load. Pure: the caller passes `now` (lab ms).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// The sliding window the budget counts over.
pub const BUDGET_WINDOW_MS: u64 = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetSettings {
    /// Retries allowed per first attempt in the window, 0 to 1.
    pub ratio: f64,
    /// Retries allowed per second regardless of traffic.
    pub min_per_s: f64,
}

/// First attempts and retries of the last window, by the lab time they were made.
#[derive(Debug, Clone, Default)]
pub struct RetryBudget {
    firsts: VecDeque<u64>,
    retries: VecDeque<u64>,
}

impl RetryBudget {
    pub fn first_attempt(&mut self, now_ms: u64) {
        self.forget_before(now_ms);
        self.firsts.push_back(now_ms);
    }

    /// Whether a retry may be made now; if so, it is counted.
    pub fn try_retry(&mut self, settings: &BudgetSettings, now_ms: u64) -> bool {
        self.forget_before(now_ms);
        let window_s = BUDGET_WINDOW_MS as f64 / 1000.0;
        let allowed = settings.ratio * self.firsts.len() as f64 + settings.min_per_s * window_s;
        if (self.retries.len() as f64) < allowed {
            self.retries.push_back(now_ms);
            true
        } else {
            false
        }
    }

    fn forget_before(&mut self, now_ms: u64) {
        let start = now_ms.saturating_sub(BUDGET_WINDOW_MS);
        for times in [&mut self.firsts, &mut self.retries] {
            while times.front().is_some_and(|&t| t < start) {
                times.pop_front();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_stay_within_the_ratio_of_first_attempts_plus_the_floor() {
        let settings = BudgetSettings { ratio: 0.2, min_per_s: 0.1 };
        let mut budget = RetryBudget::default();
        for t in 0..100 {
            budget.first_attempt(t);
        }
        // 0.2 x 100 + 0.1 x 10 = 21 retries in the window.
        let allowed = (0..100).filter(|&t| budget.try_retry(&settings, 100 + t)).count();
        assert_eq!(allowed, 21);
        // Ten seconds later the window has moved on: the first attempts are gone, the floor stays.
        let later = (0..10).filter(|&t| budget.try_retry(&settings, 20_300 + t)).count();
        assert_eq!(later, 1);
    }
}

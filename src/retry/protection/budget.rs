//! The retry budget, as Finagle and Envoy keep one: over a sliding 10 s window, retries may be
//! at most `ratio` times the first attempts plus `min_per_s` per second (so a quiet client can
//! still retry). When a dependency fails for everyone, the retries stop growing with the
//! failures instead of multiplying the load. Pure: the caller passes `now` (lab ms).
//!
//! A parameter left out takes tower's `TpsBudget::default()` (tower `retry/budget/
//! tps_budget.rs`: a 10 s TTL, `min_per_sec` 10, `retry_percent` 0.2), which is Finagle's
//! `RetryBudget` default as well.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::{Ended, Protection, Report, KindSettings, OutOfRange, within};

/// The sliding window the budget counts over.
pub const BUDGET_WINDOW_MS: u64 = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetSettings {
    /// Retries allowed per first attempt in the window, 0 to 1.
    pub ratio: f64,
    /// Retries allowed per second regardless of traffic.
    pub min_per_s: f64,
}

impl Default for BudgetSettings {
    /// tower's `TpsBudget::default()`: 20 % of requests, and 10 retries a second.
    fn default() -> Self {
        BudgetSettings { ratio: 0.2, min_per_s: 10.0 }
    }
}

/// Its words, and its parameters' ranges (a policy listing it out of them is a 422 naming the
/// parameter).
impl KindSettings for BudgetSettings {
    const WORDS: &'static str = "retry budget";

    fn check(&self) -> Result<(), OutOfRange> {
        within("ratio", self.ratio, 0.0, 1.0)?;
        within("min_per_s", self.min_per_s, 0.0, 10_000.0)
    }
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
        if (self.retries.len() as f64) < allowance(settings, self.firsts.len()) {
            self.retries.push_back(now_ms);
            true
        } else {
            false
        }
    }

    /// The retry last counted was not made after all.
    pub fn retry_not_made(&mut self) {
        self.retries.pop_back();
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

/// The retries a window with `firsts` first attempts allows, those made included.
fn allowance(settings: &BudgetSettings, firsts: usize) -> f64 {
    let window_s = BUDGET_WINDOW_MS as f64 / 1000.0;
    settings.ratio * firsts as f64 + settings.min_per_s * window_s
}

impl Protection for RetryBudget {
    type Settings = BudgetSettings;

    fn sent(&mut self, _settings: &BudgetSettings, n: u32, now_ms: u64) {
        if n == 1 {
            self.first_attempt(now_ms);
        }
    }

    fn retry(
        &mut self,
        settings: &BudgetSettings,
        _after: &Ended,
        now_ms: u64,
        _rng: &mut dyn rand::Rng,
    ) -> Result<(), String> {
        match self.try_retry(settings, now_ms) {
            true => Ok(()),
            false => Err("the client retried too much in 10 s".into()),
        }
    }

    fn retry_undone(&mut self, _settings: &BudgetSettings, _after: &Ended) {
        self.retry_not_made();
    }

    /// The retries left in the window: what it allows less what was made, as of the last call
    /// (a report does not move the window).
    fn report(&self, settings: &BudgetSettings, _now_ms: u64) -> Report {
        let left = (allowance(settings, self.firsts.len()) - self.retries.len() as f64).max(0.0);
        Report { state: None, level: Some(left), ceiling: None }
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

//! Envoy's retry budget (`envoy.config.cluster.v3.CircuitBreakers.Thresholds.RetryBudget`,
//! `circuit_breaker.proto`; `ResourceManagerImpl::RetryBudgetImpl` and the router's
//! `RetryStateImpl`): a retry is made only while the retries outstanding are fewer than
//! max(`min_retry_concurrency` (3), `budget_percent` (20 %) of the active requests), the
//! product rounded down. A retry is outstanding from when it is granted (through its backoff)
//! until the attempt it makes ends, as `RetryStateImpl` holds the cluster's retry resource from
//! `shouldRetry` until the next `shouldRetry` or the request's end. The active requests are the
//! attempts in flight (Envoy's `rq_active`, `rq_pending` being none here).
//!
//! Envoy's other retry defaults are the policy's: one retry (`num_retries` 1, `max_attempts` 2)
//! and a fully jittered wait from 25 ms capped at 250 ms (`JitteredBackOffStrategy`), which the
//! `envoy` preset sets.

use serde::{Deserialize, Serialize};

use super::{Ended, Protection, Report, KindSettings, OutOfRange, within};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EnvoySettings {
    /// The share of the active requests that may be retries, in percent: Envoy's 20.
    pub budget_percent: f64,
    /// Retries allowed outstanding whatever the active requests: Envoy's 3.
    pub min_retry_concurrency: u32,
}

impl Default for EnvoySettings {
    fn default() -> Self {
        EnvoySettings { budget_percent: 20.0, min_retry_concurrency: 3 }
    }
}

/// Its words, and its parameters' ranges (a policy listing it out of them is a 422 naming the
/// parameter).
impl KindSettings for EnvoySettings {
    const WORDS: &'static str = "Envoy retry budget";

    fn check(&self) -> Result<(), OutOfRange> {
        within("budget_percent", self.budget_percent, 0.0, 100.0)?;
        within("min_retry_concurrency", f64::from(self.min_retry_concurrency), 0.0, 100_000.0)
    }
}

#[derive(Debug, Clone, Default)]
pub struct EnvoyBudget {
    /// Attempts sent that have not ended.
    active: u64,
    /// Retries granted whose attempt has not ended.
    retries: u64,
}

impl EnvoyBudget {
    /// `RetryBudgetImpl::max()`.
    fn most(&self, settings: &EnvoySettings) -> u64 {
        let share = (settings.budget_percent / 100.0 * self.active as f64) as u64;
        share.max(u64::from(settings.min_retry_concurrency))
    }
}

impl Protection for EnvoyBudget {
    type Settings = EnvoySettings;

    fn sent(&mut self, _settings: &EnvoySettings, _n: u32, _now_ms: u64) {
        self.active += 1;
    }

    fn ended(&mut self, _settings: &EnvoySettings, ended: &Ended, _now_ms: u64) {
        self.active = self.active.saturating_sub(1);
        if ended.n > 1 {
            self.retries = self.retries.saturating_sub(1);
        }
    }

    /// A cancelled request is no longer active, nor a cancelled retry outstanding.
    fn cancelled(&mut self, settings: &EnvoySettings, n: u32) {
        self.ended(settings, &Ended { n, ..Ended::default() }, 0);
    }

    /// `canCreate()`: fewer outstanding than the most; the grant counts at once.
    fn retry(
        &mut self,
        settings: &EnvoySettings,
        _after: &Ended,
        _now_ms: u64,
        _rng: &mut dyn rand::Rng,
    ) -> Result<(), String> {
        let most = self.most(settings);
        if self.retries < most {
            self.retries += 1;
            Ok(())
        } else {
            let (retries, active) = (self.retries, self.active);
            Err(format!(
                "Envoy's retry budget allows {most} retries at once ({active} requests active), {retries} are out"
            ))
        }
    }

    fn retry_undone(&mut self, _settings: &EnvoySettings, _after: &Ended) {
        self.retries = self.retries.saturating_sub(1);
    }

    fn interrupted(&mut self, _settings: &EnvoySettings) {
        *self = EnvoyBudget::default();
    }

    fn report(&self, settings: &EnvoySettings, _now_ms: u64) -> Report {
        Report { state: None, level: Some(self.retries as f64), ceiling: Some(self.most(settings) as f64) }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    fn retry(budget: &mut EnvoyBudget, settings: &EnvoySettings) -> Result<(), String> {
        budget.retry(settings, &Ended::failure(1), 0, &mut StdRng::seed_from_u64(0))
    }

    #[test]
    fn three_retries_at_once_whatever_the_traffic_below_fifteen_active() {
        let settings = EnvoySettings::default();
        let mut budget = EnvoyBudget::default();
        for _ in 0..14 {
            budget.sent(&settings, 1, 0);
        }
        // 20 % of 14 is 2.8, rounded down 2: the floor of 3 holds.
        assert_eq!(budget.most(&settings), 3);
        for _ in 0..3 {
            retry(&mut budget, &settings).unwrap();
        }
        let refused = retry(&mut budget, &settings).unwrap_err();
        assert_eq!(refused, "Envoy's retry budget allows 3 retries at once (14 requests active), 3 are out");
        // A granted retry stays out through its backoff, until the attempt it makes ends.
        budget.sent(&settings, 2, 0);
        assert!(retry(&mut budget, &settings).is_err());
        budget.ended(&settings, &Ended::failure(2), 0);
        assert!(retry(&mut budget, &settings).is_ok(), "one fewer out");
        // A first attempt ending frees no retry.
        budget.ended(&settings, &Ended::success(1), 0);
        assert!(retry(&mut budget, &settings).is_err());
    }

    #[test]
    fn a_fifth_of_the_active_requests_past_fifteen() {
        let settings = EnvoySettings::default();
        let mut budget = EnvoyBudget::default();
        for _ in 0..100 {
            budget.sent(&settings, 1, 0);
        }
        let granted = (0..50).filter(|_| retry(&mut budget, &settings).is_ok()).count();
        assert_eq!(granted, 20, "20 % of 100");
        for _ in 0..5 {
            budget.sent(&settings, 1, 0);
        }
        assert!(retry(&mut budget, &settings).is_ok(), "21 of 105");
        assert_eq!(
            budget.report(&settings, 0),
            Report { state: None, level: Some(21.0), ceiling: Some(21.0) }
        );
    }

    #[test]
    fn the_defaults_are_envoys_and_a_crash_frees_everything() {
        let read: EnvoySettings = serde_json::from_str("{}").unwrap();
        assert_eq!((read.budget_percent, read.min_retry_concurrency), (20.0, 3));
        let mut budget = EnvoyBudget::default();
        for _ in 0..3 {
            retry(&mut budget, &read).unwrap();
        }
        budget.interrupted(&read);
        assert!(retry(&mut budget, &read).is_ok());
    }
}

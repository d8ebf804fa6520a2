//! A circuit breaker on the failure ratio, as Polly v8 has it (`CircuitBreakerStrategyOptions`,
//! pollydocs.org/strategies/circuit-breaker; `AdvancedCircuitBehavior` in Polly.Core): while
//! closed it counts the attempts that ended and those that failed over the last
//! `sampling_duration_ms`; a failure opens it when at least `minimum_throughput` attempts
//! ended in that window and failures are at least `failure_ratio` of them. Open, it refuses
//! every attempt for `break_duration_ms`; then it is half-open and lets one probe through, as
//! Polly does: the probe's success closes it with its counts cleared, its failure opens it again.
//! Polly's defaults: 0.1, 30 s, 100, 5 s. Polly rolls the window in slices; here it is exact.
//!
//! `retries_only` makes it Brooker's breaker ("Fixing retries with token buckets and circuit
//! breakers"): first attempts always go out and are counted; only retries are refused while it
//! is open, and no probe is needed: it closes when the window's ratio falls under the threshold.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::{Ended, Protection, Report, KindSettings, OutOfRange, within};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RatioBreakerSettings {
    /// The share of failed attempts that opens it: Polly's `FailureRatio`, 0.1.
    pub failure_ratio: f64,
    /// The window the counts cover, in ms of lab time: Polly's `SamplingDuration`, 30 s.
    pub sampling_duration_ms: u64,
    /// The fewest attempts in the window before it may open: Polly's `MinimumThroughput`, 100.
    pub minimum_throughput: u32,
    /// How long it stays open: Polly's `BreakDuration`, 5 s.
    pub break_duration_ms: u64,
    /// Refuses only retries, never a first attempt, and needs no probe (Brooker's breaker).
    pub retries_only: bool,
}

impl Default for RatioBreakerSettings {
    fn default() -> Self {
        RatioBreakerSettings {
            failure_ratio: 0.1,
            sampling_duration_ms: 30_000,
            minimum_throughput: 100,
            break_duration_ms: 5_000,
            retries_only: false,
        }
    }
}

/// Its words, and its parameters' ranges (a policy listing it out of them is a 422 naming the
/// parameter).
impl KindSettings for RatioBreakerSettings {
    const WORDS: &'static str = "ratio breaker";

    fn check(&self) -> Result<(), OutOfRange> {
        within("failure_ratio", self.failure_ratio, 0.001, 1.0)?;
        within("sampling_duration_ms", self.sampling_duration_ms as f64, 100.0, 3_600_000.0)?;
        within("minimum_throughput", f64::from(self.minimum_throughput), 2.0, 1_000_000.0)?;
        within("break_duration_ms", self.break_duration_ms as f64, 1.0, 3_600_000.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    #[default]
    Closed,
    Open {
        until_ms: u64,
    },
    /// Half-open: whether its one probe is out.
    HalfOpen {
        probing: bool,
    },
}

#[derive(Debug, Clone, Default)]
pub struct RatioBreaker {
    phase: Phase,
    /// Attempts that ended in the window: when, and whether they failed.
    ended: VecDeque<(u64, bool)>,
    failures: u32,
}

impl RatioBreaker {
    fn forget_before(&mut self, settings: &RatioBreakerSettings, now_ms: u64) {
        let start = now_ms.saturating_sub(settings.sampling_duration_ms);
        while let Some(&(at, failed)) = self.ended.front() {
            if at >= start {
                break;
            }
            self.ended.pop_front();
            self.failures -= u32::from(failed);
        }
    }

    /// The window's failure ratio and attempts.
    fn health(&self) -> (f64, usize) {
        let total = self.ended.len();
        (if total == 0 { 0.0 } else { f64::from(self.failures) / total as f64 }, total)
    }

    /// Polly's `OnActionFailure`: throughput at least the minimum and the ratio at least the
    /// threshold.
    fn breaks(&self, settings: &RatioBreakerSettings) -> bool {
        let (ratio, total) = self.health();
        total >= settings.minimum_throughput as usize && ratio >= settings.failure_ratio
    }

    fn refusal(&self, settings: &RatioBreakerSettings) -> String {
        let (ratio, total) = self.health();
        let threshold = settings.failure_ratio * 100.0;
        format!(
            "the ratio breaker is open: {:.0} % of the last {total} attempts failed (opens at {threshold:.0} %)",
            ratio * 100.0
        )
    }
}

impl Protection for RatioBreaker {
    type Settings = RatioBreakerSettings;

    fn gate(
        &mut self,
        settings: &RatioBreakerSettings,
        _n: u32,
        now_ms: u64,
        _rng: &mut dyn rand::Rng,
    ) -> Result<(), String> {
        if settings.retries_only {
            return Ok(());
        }
        if let Phase::Open { until_ms } = self.phase
            && now_ms >= until_ms
        {
            self.phase = Phase::HalfOpen { probing: false };
        }
        match self.phase {
            Phase::Closed => Ok(()),
            Phase::HalfOpen { probing: false } => {
                self.phase = Phase::HalfOpen { probing: true };
                Ok(())
            }
            Phase::Open { .. } | Phase::HalfOpen { probing: true } => Err(self.refusal(settings)),
        }
    }

    fn ended(&mut self, settings: &RatioBreakerSettings, ended: &Ended, now_ms: u64) {
        match self.phase {
            Phase::HalfOpen { .. } if !settings.retries_only => {
                self.phase = if ended.failed {
                    Phase::Open { until_ms: now_ms.saturating_add(settings.break_duration_ms) }
                } else {
                    self.ended.clear();
                    self.failures = 0;
                    Phase::Closed
                };
                return;
            }
            // Answers to attempts sent before it opened change nothing.
            Phase::Open { .. } if !settings.retries_only => return,
            _ => {}
        }
        self.forget_before(settings, now_ms);
        self.ended.push_back((now_ms, ended.failed));
        self.failures += u32::from(ended.failed);
        if settings.retries_only {
            self.phase =
                if self.breaks(settings) { Phase::Open { until_ms: u64::MAX } } else { Phase::Closed };
        } else if ended.failed && self.breaks(settings) {
            self.phase = Phase::Open { until_ms: now_ms.saturating_add(settings.break_duration_ms) };
        }
    }

    /// A probe that was cut off never answers: let another through.
    fn interrupted(&mut self, _settings: &RatioBreakerSettings) {
        if let Phase::HalfOpen { probing } = &mut self.phase {
            *probing = false;
        }
    }

    /// The gate lets an attempt go while closed, or as the one probe it hands out half-open:
    /// half-open and probing now, the probe was this attempt's, and it is handed back.
    fn gate_undone(&mut self, settings: &RatioBreakerSettings, _n: u32) {
        self.interrupted(settings);
    }

    /// A probe cancelled before its answer proves nothing: it is handed back, as one not sent is.
    fn cancelled(&mut self, settings: &RatioBreakerSettings, n: u32) {
        self.gate_undone(settings, n);
    }

    fn retry(
        &mut self,
        settings: &RatioBreakerSettings,
        _after: &Ended,
        now_ms: u64,
        _rng: &mut dyn rand::Rng,
    ) -> Result<(), String> {
        if !settings.retries_only {
            return Ok(());
        }
        self.forget_before(settings, now_ms);
        if self.breaks(settings) {
            self.phase = Phase::Open { until_ms: u64::MAX };
            Err(self.refusal(settings))
        } else {
            self.phase = Phase::Closed;
            Ok(())
        }
    }

    fn report(&self, settings: &RatioBreakerSettings, _now_ms: u64) -> Report {
        let state = match self.phase {
            Phase::Closed => "closed",
            Phase::Open { .. } => "open",
            Phase::HalfOpen { .. } => "half_open",
        };
        let (ratio, _) = self.health();
        Report { state: Some(state), level: Some(ratio), ceiling: Some(settings.failure_ratio) }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    fn polly() -> RatioBreakerSettings {
        RatioBreakerSettings::default()
    }

    /// `count` attempts ending at `at`, `failed` of them failures (the failures last).
    fn feed(breaker: &mut RatioBreaker, settings: &RatioBreakerSettings, count: u32, failed: u32, at: u64) {
        for i in 0..count {
            let ended = if i >= count - failed { Ended::failure(1) } else { Ended::success(1) };
            breaker.ended(settings, &ended, at);
        }
    }

    fn state(breaker: &RatioBreaker) -> Option<&'static str> {
        breaker.report(&polly(), 0).state
    }

    #[test]
    fn the_defaults_are_pollys() {
        let read: RatioBreakerSettings = serde_json::from_str("{}").unwrap();
        assert_eq!(
            (read.failure_ratio, read.sampling_duration_ms, read.minimum_throughput, read.break_duration_ms),
            (0.1, 30_000, 100, 5_000)
        );
        assert!(!read.retries_only);
    }

    #[test]
    fn it_opens_at_a_tenth_failed_of_a_hundred_and_not_before() {
        let settings = polly();
        // 99 attempts, all failed: under the minimum throughput, it stays closed.
        let mut breaker = RatioBreaker::default();
        feed(&mut breaker, &settings, 99, 99, 1_000);
        assert_eq!(state(&breaker), Some("closed"));
        // The hundredth attempt reaches the throughput: 100 of 100 failed, it opens.
        feed(&mut breaker, &settings, 1, 1, 1_000);
        assert_eq!(state(&breaker), Some("open"));

        // 100 attempts, 9 failed: 9 % is under 10 %.
        let mut breaker = RatioBreaker::default();
        feed(&mut breaker, &settings, 100, 9, 1_000);
        assert_eq!(state(&breaker), Some("closed"));
        // The tenth failure makes 10 of 101, still under; the eleventh 11 of 102, over.
        feed(&mut breaker, &settings, 1, 1, 1_000);
        assert_eq!(state(&breaker), Some("closed"), "10 of 101 is 9.9 %");
        feed(&mut breaker, &settings, 1, 1, 1_000);
        assert_eq!(state(&breaker), Some("open"));

        // Exactly 10 of 100 opens it, as Polly's test (throughput 10, minimum 10, rate 0.1) does.
        let mut breaker = RatioBreaker::default();
        feed(&mut breaker, &settings, 100, 10, 1_000);
        assert_eq!(state(&breaker), Some("open"));
    }

    #[test]
    fn attempts_older_than_the_sampling_duration_are_forgotten() {
        let settings = polly();
        let mut breaker = RatioBreaker::default();
        feed(&mut breaker, &settings, 95, 5, 0);
        // 30 s later the first 95 are just in the window; a millisecond more and they are gone.
        feed(&mut breaker, &settings, 5, 5, 30_001);
        assert_eq!(state(&breaker), Some("closed"), "5 in the window, under the throughput");
        let mut breaker = RatioBreaker::default();
        feed(&mut breaker, &settings, 95, 5, 0);
        feed(&mut breaker, &settings, 5, 5, 30_000);
        assert_eq!(state(&breaker), Some("open"), "10 of 100 within 30 s");
    }

    #[test]
    fn open_for_five_seconds_then_one_probe_decides() {
        let settings = polly();
        let mut rng = StdRng::seed_from_u64(0);
        let mut breaker = RatioBreaker::default();
        feed(&mut breaker, &settings, 100, 100, 1_000);
        let refused = breaker.gate(&settings, 1, 5_999, &mut rng).unwrap_err();
        assert_eq!(
            refused,
            "the ratio breaker is open: 100 % of the last 100 attempts failed (opens at 10 %)"
        );
        assert!(breaker.gate(&settings, 1, 6_000, &mut rng).is_ok(), "the probe, 5 s after it opened");
        assert!(breaker.gate(&settings, 1, 6_001, &mut rng).is_err(), "one probe at a time");
        breaker.ended(&settings, &Ended::failure(1), 6_010);
        assert_eq!(state(&breaker), Some("open"), "a failed probe opens it again");
        assert!(breaker.gate(&settings, 1, 11_009, &mut rng).is_err());
        assert!(breaker.gate(&settings, 1, 11_010, &mut rng).is_ok());
        // A probe cut off by a crash never answers: another may go.
        breaker.interrupted(&settings);
        assert!(breaker.gate(&settings, 1, 11_011, &mut rng).is_ok());
        breaker.ended(&settings, &Ended::success(1), 11_020);
        assert_eq!(state(&breaker), Some("closed"), "a successful probe closes it");
        assert_eq!(breaker.health(), (0.0, 0), "with its counts cleared");
        assert!(breaker.gate(&settings, 1, 11_021, &mut rng).is_ok());
    }

    #[test]
    fn retries_only_lets_every_first_attempt_through_and_refuses_retries_while_over() {
        let settings = RatioBreakerSettings { retries_only: true, ..polly() };
        let mut rng = StdRng::seed_from_u64(0);
        let mut breaker = RatioBreaker::default();
        feed(&mut breaker, &settings, 100, 50, 1_000);
        assert_eq!(state(&breaker), Some("open"));
        assert!(breaker.gate(&settings, 1, 1_001, &mut rng).is_ok());
        assert!(breaker.gate(&settings, 2, 1_001, &mut rng).is_ok(), "its gate never refuses");
        assert!(breaker.retry(&settings, &Ended::failure(1), 1_001, &mut rng).is_err());
        // Successes bring the ratio under a tenth: 50 of 501 failed.
        feed(&mut breaker, &settings, 401, 0, 2_000);
        assert_eq!(state(&breaker), Some("closed"));
        assert!(breaker.retry(&settings, &Ended::failure(1), 2_001, &mut rng).is_ok());
        // Once the window has passed, what it saw is forgotten.
        feed(&mut breaker, &settings, 100, 100, 3_000);
        assert!(breaker.retry(&settings, &Ended::failure(1), 3_001, &mut rng).is_err());
        assert!(breaker.retry(&settings, &Ended::failure(1), 33_001, &mut rng).is_ok());
    }
}

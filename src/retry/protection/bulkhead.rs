//! resilience4j's semaphore bulkhead (resilience4j.readme.io/docs/bulkhead, "Create and configure
//! a Bulkhead"; `io.github.resilience4j.bulkhead.internal.SemaphoreBulkhead`): a call must take
//! one of `maxConcurrentCalls` (25) permits before it runs and gives it back when it completes,
//! whatever its result (`onComplete`). With `maxWaitDuration` at its default, 0, a call that
//! finds no permit free is refused at once (`BulkheadFullException`), without waiting.
//!
//! Here each attempt is a call: its gate takes the permit, its end gives it back, and an attempt
//! let go but not sent after all (a later protection refused it) gives it back unsent. The
//! client never waits for a permit: `maxWaitDuration` is 0, as the default has it, and is not a
//! parameter.

use serde::{Deserialize, Serialize};

use super::{Ended, KindSettings, OutOfRange, Protection, Report, within};

/// resilience4j's `BulkheadConfig` defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct BulkheadSettings {
    /// The most attempts in flight at once (`maxConcurrentCalls`).
    pub max_concurrent_calls: u32,
}

impl Default for BulkheadSettings {
    fn default() -> Self {
        BulkheadSettings { max_concurrent_calls: 25 }
    }
}

/// Its words, and its parameter's range (a policy listing it out of it is a 422 naming the
/// parameter).
impl KindSettings for BulkheadSettings {
    const WORDS: &'static str = "bulkhead";

    fn check(&self) -> Result<(), OutOfRange> {
        within("max_concurrent_calls", f64::from(self.max_concurrent_calls), 1.0, 100_000.0)
    }
}

/// The permits taken: attempts let go that have not ended.
#[derive(Debug, Clone, Default)]
pub struct SemaphoreBulkhead {
    in_flight: u32,
}

impl Protection for SemaphoreBulkhead {
    type Settings = BulkheadSettings;

    /// `tryAcquirePermission()`: a permit when one is free, else refused at once.
    fn gate(
        &mut self,
        settings: &BulkheadSettings,
        _n: u32,
        _now_ms: u64,
        _rng: &mut dyn rand::Rng,
    ) -> Result<(), String> {
        let most = settings.max_concurrent_calls;
        if self.in_flight >= most {
            return Err(format!("the bulkhead is full: {} attempts in flight, at most {most}", self.in_flight));
        }
        self.in_flight += 1;
        Ok(())
    }

    /// `onComplete()`: the attempt's permit is given back, whatever its answer.
    fn ended(&mut self, _settings: &BulkheadSettings, _ended: &Ended, _now_ms: u64) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// `releasePermission()`: let go, but not sent.
    fn gate_undone(&mut self, _settings: &BulkheadSettings, _n: u32) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// A call cancelled while in flight leaves the bulkhead.
    fn cancelled(&mut self, _settings: &BulkheadSettings, _n: u32) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// The client died: none of the attempts in flight will end.
    fn interrupted(&mut self, _settings: &BulkheadSettings) {
        self.in_flight = 0;
    }

    fn report(&self, settings: &BulkheadSettings, _now_ms: u64) -> Report {
        let ceiling = f64::from(settings.max_concurrent_calls);
        Report { state: None, level: Some(f64::from(self.in_flight)), ceiling: Some(ceiling) }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn the_twenty_sixth_attempt_in_flight_is_refused_at_once_and_an_end_frees_a_permit() {
        let settings = BulkheadSettings::default();
        let mut bulkhead = SemaphoreBulkhead::default();
        let mut rng = StdRng::seed_from_u64(0);
        let let_go = (0..30).filter(|&n| bulkhead.gate(&settings, n, 0, &mut rng).is_ok()).count();
        assert_eq!(let_go, 25, "resilience4j's maxConcurrentCalls");
        let refused = bulkhead.gate(&settings, 1, 0, &mut rng).unwrap_err();
        assert_eq!(refused, "the bulkhead is full: 25 attempts in flight, at most 25");
        bulkhead.ended(&settings, &Ended::failure(1), 5);
        assert!(bulkhead.gate(&settings, 1, 5, &mut rng).is_ok(), "a failure's end frees its permit too");
        assert_eq!(bulkhead.report(&settings, 5).level, Some(25.0));
    }

    #[test]
    fn an_attempt_not_sent_gives_its_permit_back_and_a_crash_frees_them_all() {
        let settings = BulkheadSettings { max_concurrent_calls: 2 };
        let mut bulkhead = SemaphoreBulkhead::default();
        let mut rng = StdRng::seed_from_u64(0);
        assert!(bulkhead.gate(&settings, 1, 0, &mut rng).is_ok());
        assert!(bulkhead.gate(&settings, 1, 0, &mut rng).is_ok());
        assert!(bulkhead.gate(&settings, 1, 0, &mut rng).is_err());
        bulkhead.gate_undone(&settings, 1);
        assert!(bulkhead.gate(&settings, 1, 0, &mut rng).is_ok());
        bulkhead.interrupted(&settings);
        assert_eq!(bulkhead.report(&settings, 0).level, Some(0.0));
        bulkhead.ended(&settings, &Ended::success(1), 0);
        assert_eq!(bulkhead.report(&settings, 0).level, Some(0.0), "never below none");
    }
}

//! Client-side adaptive throttling and the per-client retry budget, as Google's SRE book has
//! them ("Site Reliability Engineering", chapter 21, "Handling Overload",
//! sre.google/sre-book/handling-overload): over the last two minutes a client counts its
//! `requests` (every attempt it meant to make, those it refused itself included) and its
//! `accepts` (attempts the backend accepted), and refuses a new attempt locally with
//! probability max(0, (requests − K × accepts) / (requests + 1)), K = 2. A request is retried
//! only while retries are under 10 % of its requests. The book's "at most 3 attempts per
//! request" is the policy's `max_attempts`.
//!
//! The two minutes are `window_ms` (120,000), so a lab run can use seconds. An attempt is
//! accepted when it got an answer that does not say the backend is unhealthy (a 2xx, or a 4xx
//! other than 408 and 429): a 503 or a timeout is a rejection.

use std::collections::VecDeque;

use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};

use super::{Ended, Protection, Report, KindSettings, OutOfRange, within};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SreSettings {
    /// The multiplier of accepts (K): 2 in the book; lower throttles sooner.
    pub k: f64,
    /// The window the counts cover, in ms of lab time: the book's two minutes.
    pub window_ms: u64,
    /// Retries are made only while under this share of the requests: the book's 10 %.
    pub retry_ratio: f64,
}

impl Default for SreSettings {
    fn default() -> Self {
        SreSettings { k: 2.0, window_ms: 120_000, retry_ratio: 0.1 }
    }
}

/// Its words, and its parameters' ranges (a policy listing it out of them is a 422 naming the
/// parameter).
impl KindSettings for SreSettings {
    const WORDS: &'static str = "SRE adaptive throttling";

    fn check(&self) -> Result<(), OutOfRange> {
        within("k", self.k, 1.0, 10.0)?;
        within("window_ms", self.window_ms as f64, 100.0, 3_600_000.0)?;
        within("retry_ratio", self.retry_ratio, 0.0, 1.0)
    }
}

/// What happened at a time: a request (a retry or not), or an accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Count {
    Request { retry: bool },
    Accept,
}

#[derive(Debug, Clone, Default)]
pub struct AdaptiveThrottle {
    counts: VecDeque<(u64, Count)>,
    requests: u64,
    retries: u64,
    accepts: u64,
}

impl AdaptiveThrottle {
    fn forget_before(&mut self, settings: &SreSettings, now_ms: u64) {
        let start = now_ms.saturating_sub(settings.window_ms);
        while let Some(&(at, count)) = self.counts.front().filter(|(at, _)| *at < start) {
            let _ = at;
            self.counts.pop_front();
            match count {
                Count::Request { retry } => {
                    self.requests -= 1;
                    self.retries -= u64::from(retry);
                }
                Count::Accept => self.accepts -= 1,
            }
        }
    }

    fn note(&mut self, now_ms: u64, count: Count) {
        self.counts.push_back((now_ms, count));
        match count {
            Count::Request { retry } => {
                self.requests += 1;
                self.retries += u64::from(retry);
            }
            Count::Accept => self.accepts += 1,
        }
    }

    /// The chance that the next attempt is refused locally.
    fn rejection(&self, settings: &SreSettings) -> f64 {
        let (requests, accepts) = (self.requests as f64, self.accepts as f64);
        ((requests - settings.k * accepts) / (requests + 1.0)).max(0.0)
    }
}

impl Protection for AdaptiveThrottle {
    type Settings = SreSettings;

    fn gate(&mut self, settings: &SreSettings, n: u32, now_ms: u64, rng: &mut dyn Rng) -> Result<(), String> {
        self.forget_before(settings, now_ms);
        let p = self.rejection(settings);
        self.note(now_ms, Count::Request { retry: n > 1 });
        match p > 0.0 && rng.random::<f64>() < p {
            false => Ok(()),
            true => {
                let (requests, accepts) = (self.requests - 1, self.accepts);
                Err(format!(
                    "adaptive throttling refused it with probability {p:.2} ({requests} requests, {accepts} accepted)"
                ))
            }
        }
    }

    fn ended(&mut self, settings: &SreSettings, ended: &Ended, now_ms: u64) {
        self.forget_before(settings, now_ms);
        if !ended.failed {
            self.note(now_ms, Count::Accept);
        }
    }

    fn retry(
        &mut self,
        settings: &SreSettings,
        _after: &Ended,
        now_ms: u64,
        _rng: &mut dyn Rng,
    ) -> Result<(), String> {
        self.forget_before(settings, now_ms);
        let share = self.retries as f64 / self.requests.max(1) as f64;
        match share < settings.retry_ratio {
            true => Ok(()),
            false => Err(format!(
                "retries are {:.0} % of the client's requests, the budget {:.0} %",
                share * 100.0,
                settings.retry_ratio * 100.0
            )),
        }
    }

    /// The attempt it counted as a request was refused by a protection asked after it, so it
    /// was never meant to reach the backend: it leaves the count (the newest request of its
    /// kind; with a shared throttle another client's may have come since, and any of the same
    /// kind counts the same).
    fn gate_undone(&mut self, _settings: &SreSettings, n: u32) {
        let retry = n > 1;
        let newest = self.counts.iter().rposition(|&(_, count)| count == Count::Request { retry });
        if let Some(i) = newest {
            self.counts.remove(i);
            self.requests -= 1;
            self.retries -= u64::from(retry);
        }
    }

    /// The chance of refusing the next attempt, out of 1.
    fn report(&self, settings: &SreSettings, _now_ms: u64) -> Report {
        Report { state: None, level: Some(self.rejection(settings)), ceiling: Some(1.0) }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    fn throttle_with(settings: &SreSettings, requests: u64, accepts: u64) -> AdaptiveThrottle {
        let mut throttle = AdaptiveThrottle::default();
        for i in 0..requests {
            throttle.note(0, Count::Request { retry: false });
            if i < accepts {
                throttle.note(0, Count::Accept);
            }
        }
        let _ = settings;
        throttle
    }

    #[test]
    fn the_rejection_probability_is_the_books_formula() {
        let settings = SreSettings::default();
        // Healthy: twice the requests are accepted before anything is refused.
        assert_eq!(throttle_with(&settings, 100, 50).rejection(&settings), 0.0);
        assert_eq!(throttle_with(&settings, 100, 100).rejection(&settings), 0.0);
        // (100 - 2 x 25) / 101
        assert!((throttle_with(&settings, 100, 25).rejection(&settings) - 50.0 / 101.0).abs() < 1e-12);
        // A backend that accepts nothing: 100 / 101.
        assert!((throttle_with(&settings, 100, 0).rejection(&settings) - 100.0 / 101.0).abs() < 1e-12);
        let lenient = SreSettings { k: 1.1, ..settings };
        assert!((throttle_with(&lenient, 100, 50).rejection(&lenient) - 45.0 / 101.0).abs() < 1e-12);
    }

    #[test]
    fn refusals_come_at_the_formulas_rate_and_count_as_requests() {
        let settings = SreSettings::default();
        let mut throttle = throttle_with(&settings, 1000, 250);
        let mut rng = StdRng::seed_from_u64(9);
        // About (1000 - 500) / 1001 at first, rising as the refused attempts count as requests.
        let refused = (0..200).filter(|_| throttle.gate(&settings, 1, 1, &mut rng).is_err()).count();
        assert!((90..140).contains(&refused), "{refused} of 200");
        assert_eq!(throttle.requests, 1200);
    }

    #[test]
    fn an_attempt_a_later_protection_refused_leaves_the_count() {
        let settings = SreSettings::default();
        let mut throttle = throttle_with(&settings, 10, 10);
        let mut rng = StdRng::seed_from_u64(2);
        throttle.gate(&settings, 2, 5, &mut rng).unwrap();
        throttle.gate(&settings, 1, 6, &mut rng).unwrap();
        assert_eq!((throttle.requests, throttle.retries), (12, 1));
        // The breaker refused the retry: it was never meant to reach the backend.
        throttle.gate_undone(&settings, 2);
        assert_eq!((throttle.requests, throttle.retries, throttle.counts.len()), (11, 0, 21));
        assert_eq!(throttle.counts.back(), Some(&(6, Count::Request { retry: false })));
        // With nothing of its kind left, an undo changes nothing.
        throttle.gate_undone(&settings, 2);
        assert_eq!((throttle.requests, throttle.retries), (11, 0));
    }

    #[test]
    fn the_counts_cover_the_window_only() {
        let settings = SreSettings { window_ms: 1_000, ..SreSettings::default() };
        let mut throttle = AdaptiveThrottle::default();
        let mut rng = StdRng::seed_from_u64(1);
        for t in 0..10 {
            throttle.gate(&settings, 1, t, &mut rng).unwrap_or_default();
        }
        assert!(throttle.rejection(&settings) > 0.8, "10 requests, none accepted");
        throttle.gate(&settings, 1, 1_500, &mut rng).unwrap();
        assert_eq!((throttle.requests, throttle.accepts), (1, 0), "the first ten left the window");
    }

    #[test]
    fn retries_stop_at_a_tenth_of_the_requests() {
        let settings = SreSettings::default();
        let mut throttle = throttle_with(&settings, 9, 9);
        let mut rng = StdRng::seed_from_u64(2);
        // 9 first attempts and 1 retry: 10 %, the budget is spent.
        throttle.gate(&settings, 2, 0, &mut rng).unwrap();
        assert_eq!(
            throttle.retry(&settings, &Ended::failure(2), 0, &mut rng).unwrap_err(),
            "retries are 10 % of the client's requests, the budget 10 %"
        );
        throttle.gate(&settings, 1, 0, &mut rng).unwrap();
        assert!(throttle.retry(&settings, &Ended::failure(2), 0, &mut rng).is_ok(), "1 of 11");
    }
}

//! Admission control as Envoy's admission control filter keeps it
//! (`source/extensions/filters/http/admission_control/`, after the SRE book's client-side
//! throttling, ch. 21): over a sliding window, the requests it let through and how many of them
//! succeeded; a new request is refused (503 at once) with probability
//!
//! ```text
//! p = ((requests - successes / sr_threshold) / (requests + 1)) ^ (1 / aggression), at most max_rejection_probability
//! ```
//!
//! Envoy's defaults: `sr_threshold` 95 %, `aggression` 1 (and never under 1: the filter takes
//! `max(1, aggression)`), `rps_threshold` 0 (with fewer requests per second in the window than
//! it, nothing is refused), `max_rejection_probability` 80 %, and a success any answer under 500
//! (its default `http_criteria`); an answer never sent (the client hung up) is a failure, as the
//! filter records a failure for a request it let through and never saw answered. Refused
//! requests are not counted. The window is Envoy's 30 s divided by 10, 3 s, kept in buckets of
//! 100 ms (Envoy's are 1 s): a lab's run lasts tens of seconds, and with 30 s a trigger's
//! failures would still be refusing work half a minute after it ended.

use std::collections::VecDeque;

use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};

use super::{Defence, Defences, Dropped, Kind, Said};
use crate::domain::DropCause;

/// The filter's parameters (its defaults, the window scaled: see the module's note).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
#[schema(as = AdmissionSettings)]
pub struct AdmissionControlSettings {
    /// The sliding window the counts are kept over, ms.
    pub window_ms: u64,
    /// The lowest success rate at which nothing is refused, 0 to 1 (Envoy: 95 %).
    pub sr_threshold: f64,
    /// How steeply refusals rise as the success rate falls; 1 is linear, at least 1.
    pub aggression: f64,
    /// Below this many requests per second in the window, nothing is refused.
    pub rps_threshold: u32,
    /// The highest share refused, 0 to 1 (Envoy: 80 %).
    pub max_rejection_probability: f64,
}

impl Default for AdmissionControlSettings {
    fn default() -> Self {
        AdmissionControlSettings {
            window_ms: 3_000,
            sr_threshold: 0.95,
            aggression: 1.0,
            rps_threshold: 0,
            max_rejection_probability: 0.8,
        }
    }
}

/// The width of one bucket of the window, ms.
const BUCKET_MS: u64 = 100;

impl AdmissionControlSettings {
    /// The first parameter out of range, as `(field, detail)`.
    pub fn invalid(&self) -> Option<(&'static str, String)> {
        if !(BUCKET_MS..=crate::downstream::MAX_LATENCY_MS).contains(&self.window_ms) {
            return Some((
                "window_ms",
                format!("window_ms must be {BUCKET_MS} to {}", crate::downstream::MAX_LATENCY_MS),
            ));
        }
        // Envoy refuses a threshold under 1 %.
        if !(0.01..=1.0).contains(&self.sr_threshold) {
            return Some(("sr_threshold", "sr_threshold must be 0.01 to 1".into()));
        }
        if !(1.0..=100.0).contains(&self.aggression) {
            return Some(("aggression", "aggression must be 1 to 100".into()));
        }
        if !(0.0..=1.0).contains(&self.max_rejection_probability) {
            return Some(("max_rejection_probability", "max_rejection_probability must be 0 to 1".into()));
        }
        if self.rps_threshold > 100_000 {
            return Some(("rps_threshold", "rps_threshold must be 0 to 100000".into()));
        }
        None
    }

    /// `shouldRejectRequest`'s probability at these counts.
    pub fn probability(&self, requests: u64, successes: u64) -> f64 {
        let (total, ok) = (requests as f64, successes as f64);
        let mut p = (total - ok / self.sr_threshold) / (total + 1.0);
        if self.aggression != 1.0 {
            p = p.max(0.0).powf(1.0 / self.aggression);
        }
        p.min(self.max_rejection_probability).max(0.0)
    }
}

/// Refused by admission control's draw, as it came.
const REFUSED: Dropped = Dropped::new(
    Kind::AdmissionControl,
    &Said {
        event: "refused by admission control",
        answer: "refused by admission control: too few recent requests succeeded (Envoy's admission control \
                 filter); nothing was applied",
        counted: DropCause::Admission,
        timed_out: false,
    },
);

/// Admission control in force: its parameters and its window.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionControl {
    settings: AdmissionControlSettings,
    window: Window,
}

impl Defence for AdmissionControl {
    /// The window is kept while admission control stays on, whatever its parameters.
    fn arm(defences: &Defences, kept: Option<Self>) -> Option<Self> {
        let settings = defences.admission?;
        Some(AdmissionControl { settings, window: kept.map(|kept| kept.window).unwrap_or_default() })
    }

    fn field() -> &'static str {
        "admission"
    }

    fn flag(defences: &Defences) -> Option<String> {
        let a = defences.admission?;
        Some(format!("admission control under {} % success", (a.sr_threshold * 100.0).round()))
    }

    fn invalid(defences: &Defences) -> Option<(String, String)> {
        let (name, detail) = defences.admission?.invalid()?;
        Some((format!("admission.{name}"), detail))
    }

    fn filter(&mut self, now_ms: u64, rng: &mut dyn Rng) -> Option<Dropped> {
        self.window.refuses(&self.settings, now_ms, rng.random_range(0..10_000)).then_some(REFUSED)
    }

    fn hears_answers(&self) -> bool {
        true
    }

    fn answered(&mut self, now_ms: u64, success: bool) {
        self.window.record(now_ms, success);
    }
}

/// The window's counts: per bucket, its start, the requests let through and their successes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Window {
    buckets: VecDeque<(u64, u64, u64)>,
}

impl Window {
    /// The requests and successes in the window ending at `now_ms`, older buckets let go.
    pub fn counts(&mut self, settings: &AdmissionControlSettings, now_ms: u64) -> (u64, u64) {
        let from = now_ms.saturating_sub(settings.window_ms);
        while self.buckets.front().is_some_and(|&(at, ..)| at + BUCKET_MS <= from) {
            self.buckets.pop_front();
        }
        self.buckets.iter().fold((0, 0), |(n, s), &(_, rn, rs)| (n + rn, s + rs))
    }

    /// Whether a request arriving at `now_ms` is refused, for a `draw` in 0..10,000 (Envoy's
    /// four significant figures: refused when 10,000 × p > draw).
    pub fn refuses(&mut self, settings: &AdmissionControlSettings, now_ms: u64, draw: u64) -> bool {
        let (requests, successes) = self.counts(settings, now_ms);
        let window_s = settings.window_ms as f64 / 1_000.0;
        if (requests as f64) < f64::from(settings.rps_threshold) * window_s {
            return false;
        }
        10_000.0 * settings.probability(requests, successes) > draw as f64
    }

    /// A request it let through was answered at `now_ms`: a success or not.
    pub fn record(&mut self, now_ms: u64, success: bool) {
        let at = now_ms - now_ms % BUCKET_MS;
        match self.buckets.back_mut() {
            Some((start, n, s)) if *start == at => {
                *n += 1;
                *s += u64::from(success);
            }
            _ => self.buckets.push_back((at, 1, u64::from(success))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probability_is_envoys_formula_at_given_counts() {
        let envoy = AdmissionControlSettings::default();
        // All successes: (100 - 100 / 0.95) / 101 < 0, nothing refused.
        assert_eq!(envoy.probability(100, 100), 0.0);
        // 95 of 100 succeeded: exactly the threshold, 0.
        assert!(envoy.probability(100, 95).abs() < 1e-12);
        // Half succeeded: (100 - 50 / 0.95) / 101 = 0.46894...
        let half = (100.0 - 50.0 / 0.95) / 101.0;
        assert!((envoy.probability(100, 50) - half).abs() < 1e-12);
        // None succeeded: 100 / 101, held at 80 %.
        assert_eq!(envoy.probability(100, 0), 0.8);
        // Aggression 2 takes the square root: a higher refusal for the same rate.
        let steep = AdmissionControlSettings { aggression: 2.0, ..envoy };
        assert!((steep.probability(100, 50) - half.sqrt()).abs() < 1e-12);
        let all = AdmissionControlSettings { max_rejection_probability: 1.0, ..envoy };
        assert!((all.probability(100, 0) - 100.0 / 101.0).abs() < 1e-12);
    }

    #[test]
    fn the_window_forgets_what_is_older_and_the_draw_decides() {
        let settings = AdmissionControlSettings { window_ms: 1_000, ..Default::default() };
        let mut admission = Window::default();
        for at in 0..10 {
            admission.record(at * 10, false);
        }
        for at in 0..10 {
            admission.record(500 + at * 10, true);
        }
        assert_eq!(admission.counts(&settings, 990), (20, 10));
        // p = (20 - 10 / 0.95) / 21 = 0.4511...: a draw of 4,510 is refused, 4,512 is not.
        assert!(admission.refuses(&settings, 990, 4_510));
        assert!(!admission.refuses(&settings, 990, 4_512));
        // At 1,150 ms the failures' bucket (0-100 ms) has left the 1 s window.
        assert_eq!(admission.counts(&settings, 1_150), (10, 10));
        assert!(!admission.refuses(&settings, 1_150, 0));
        let quiet = AdmissionControlSettings { rps_threshold: 11, ..settings };
        let mut failing = Window::default();
        for at in 0..10 {
            failing.record(at, false);
        }
        assert!(!failing.refuses(&quiet, 10, 0), "10 requests in 1 s is under 11 per second");
        assert!(failing.refuses(&settings, 10, 0));
    }

    #[test]
    fn parameters_are_validated_naming_them() {
        let field = |s: AdmissionControlSettings| s.invalid().map(|(f, _)| f);
        assert_eq!(field(AdmissionControlSettings::default()), None);
        assert_eq!(
            field(AdmissionControlSettings { sr_threshold: 0.0, ..Default::default() }),
            Some("sr_threshold")
        );
        assert_eq!(
            field(AdmissionControlSettings { aggression: 0.5, ..Default::default() }),
            Some("aggression")
        );
        assert_eq!(
            field(AdmissionControlSettings { max_rejection_probability: 1.5, ..Default::default() }),
            Some("max_rejection_probability")
        );
        assert_eq!(
            field(AdmissionControlSettings { window_ms: 10, ..Default::default() }),
            Some("window_ms")
        );
    }
}

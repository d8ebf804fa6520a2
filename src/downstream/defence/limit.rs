//! The adaptive concurrency limit in front of the overloaded endpoint's line and workers, as
//! Netflix's concurrency-limits library keeps it (github.com/Netflix/concurrency-limits, read at
//! commit 78a74b9): a request over the limit of requests in flight (waiting in line or in work)
//! is refused at once (503), and every request let on gives the limit one sample when it
//! leaves: how long it was in flight, how many were in flight when it came in (itself
//! included, as `AbstractLimiter.createListener` counts), and whether it was dropped. As the
//! library's gRPC server interceptor has it, a request whose client gave up (`onCancel`) or
//! that ran out of time (`DEADLINE_EXCEEDED`) is a drop; any other answer is a success; one the
//! limiter let on that the endpoint refused before its handler (the line full) gives no sample
//! (`onIgnore`).
//!
//! The library's defaults are for services answering in a few ms with hundreds of requests in
//! flight: limits of 20 to 200, starting at 20. The lab's endpoint works 4 to 8 requests at
//! once, each for 60-240 ms, so the bounds are divided by 10 (2 to 20, starting at 2) and
//! AIMD's 5 s timeout by 5 (1 s: a lab's clients wait 0.5-1 s, not minutes); the ratios
//! (AIMD's 0.9, Gradient2's tolerance 1.5, smoothing 0.2, queue size 4 and its 600-sample long
//! window with 10 to warm up) are kept.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{Defence, Defences, Dropped, Kind, Said};
use crate::domain::DropCause;

/// Over the adaptive concurrency limit: refused as it came.
const OVER_LIMIT: Dropped = Dropped::new(
    Kind::Limit,
    &Said {
        event: "refused: over the adaptive concurrency limit",
        answer: "refused: more requests in flight than the adaptive concurrency limit allows; nothing was \
                 applied",
        counted: DropCause::OverLimit,
        timed_out: false,
    },
);

/// An adaptive limit in force: its state, and the requests it let on, by key: since when, and
/// how many were in flight as each came in (itself included).
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    adaptive: Adaptive,
    flight: HashMap<String, (u64, u32)>,
}

impl Limit {
    /// Requests in flight with one more.
    fn with_one_more(&self) -> u32 {
        self.flight.len() as u32 + 1
    }
}

impl Defence for Limit {
    /// A limit other than the one kept starts afresh; the requests already in flight stay
    /// counted.
    fn arm(defences: &Defences, kept: Option<Self>) -> Option<Self> {
        let settings = defences.limit;
        match kept {
            Some(kept) if kept.adaptive.follows(settings) => Some(kept),
            kept => Some(Limit {
                adaptive: Adaptive::start(settings)?,
                flight: kept.map(|kept| kept.flight).unwrap_or_default(),
            }),
        }
    }

    fn field() -> &'static str {
        "limit"
    }

    fn flag(defences: &Defences) -> Option<String> {
        match defences.limit {
            LimitSettings::Fixed => None,
            LimitSettings::Aimd(a) => Some(format!("AIMD limit {}-{}", a.min_limit, a.max_limit)),
            LimitSettings::Gradient2(g) => Some(format!("Gradient2 limit {}-{}", g.min_limit, g.max_limit)),
        }
    }

    fn invalid(defences: &Defences) -> Option<(String, String)> {
        use crate::downstream::{MAX_CAPACITY, MAX_QUEUE};
        let (name, detail) = defences.limit.invalid(MAX_CAPACITY + MAX_QUEUE)?;
        Some((format!("limit.{name}"), detail))
    }

    /// Over the limit, a request is refused before the line (`SimpleLimiter.tryAcquire`
    /// returning empty: 503 at once, and no sample).
    fn refuse_entry(&mut self) -> Option<Dropped> {
        (self.with_one_more() > self.adaptive.limit()).then_some(OVER_LIMIT)
    }

    fn entered(&mut self, key: &str, now_ms: u64) {
        let inflight = self.with_one_more();
        self.flight.insert(key.to_owned(), (now_ms, inflight));
    }

    /// The request's sample (`dropped` when its client gave up or it ran out of time).
    fn left(&mut self, key: &str, now_ms: u64, dropped: bool) {
        if let Some((since_ms, inflight)) = self.flight.remove(key) {
            self.adaptive.sample(Sample { rtt_ms: now_ms.saturating_sub(since_ms), inflight, dropped });
        }
    }

    fn limit(&self) -> Option<u32> {
        Some(self.adaptive.limit())
    }
}

/// Which limit stands in front of the line, and its parameters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LimitSettings {
    /// No adaptive limit: the workers (`capacity`) and the line (`queue`) alone.
    #[default]
    Fixed,
    /// `AIMDLimit`: × `backoff_ratio` on a drop or a sample over `timeout_ms`, + 1 when the
    /// requests in flight were at least half the limit.
    Aimd(AimdSettings),
    /// `Gradient2Limit`: follows the ratio of the long-run RTT to the latest one.
    Gradient2(Gradient2Settings),
}

/// `AIMDLimit.Builder`'s parameters (scaled bounds and timeout: see the module's note).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AimdSettings {
    pub initial_limit: u32,
    pub min_limit: u32,
    pub max_limit: u32,
    /// The factor a drop multiplies the limit by, in [0.5, 1) as the library checks.
    pub backoff_ratio: f64,
    /// A sample longer than this counts as a drop (the library's 5 s, divided by 5).
    pub timeout_ms: u64,
}

impl Default for AimdSettings {
    fn default() -> Self {
        AimdSettings { initial_limit: 2, min_limit: 2, max_limit: 20, backoff_ratio: 0.9, timeout_ms: 1_000 }
    }
}

/// `Gradient2Limit.Builder`'s parameters (scaled bounds: see the module's note).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Gradient2Settings {
    pub initial_limit: u32,
    pub min_limit: u32,
    pub max_limit: u32,
    /// Added to the limit at each update: the queueing it allows.
    pub queue_size: u32,
    /// The weight of a new limit against the old one.
    pub smoothing: f64,
    /// How much longer than the long-run RTT the latest may be before the limit falls (≥ 1).
    pub rtt_tolerance: f64,
    /// The samples the long-run RTT's exponential average spans.
    pub long_window: u32,
}

impl Default for Gradient2Settings {
    fn default() -> Self {
        Gradient2Settings {
            initial_limit: 2,
            min_limit: 2,
            max_limit: 20,
            queue_size: 4,
            smoothing: 0.2,
            rtt_tolerance: 1.5,
            long_window: 600,
        }
    }
}

impl LimitSettings {
    /// The first parameter out of range, as `(field under limit, detail)`.
    pub fn invalid(&self, most: u32) -> Option<(&'static str, String)> {
        let bounds = match self {
            LimitSettings::Fixed => return None,
            LimitSettings::Aimd(a) => (a.initial_limit, a.min_limit, a.max_limit),
            LimitSettings::Gradient2(g) => (g.initial_limit, g.min_limit, g.max_limit),
        };
        let (initial, min, max) = bounds;
        if !(1..=most).contains(&min) {
            return Some(("min_limit", format!("min_limit must be 1 to {most}")));
        }
        if !(min..=most).contains(&max) {
            return Some(("max_limit", format!("max_limit must be min_limit to {most}")));
        }
        if !(min..=max).contains(&initial) {
            return Some(("initial_limit", "initial_limit must be min_limit to max_limit".into()));
        }
        match self {
            LimitSettings::Aimd(a) if !(0.5..1.0).contains(&a.backoff_ratio) => {
                Some(("backoff_ratio", "backoff_ratio must be at least 0.5 and below 1".into()))
            }
            LimitSettings::Aimd(a) if !(1..=crate::downstream::MAX_LATENCY_MS).contains(&a.timeout_ms) => {
                Some(("timeout_ms", format!("timeout_ms must be 1 to {}", crate::downstream::MAX_LATENCY_MS)))
            }
            LimitSettings::Gradient2(g) if g.queue_size > most => {
                Some(("queue_size", format!("queue_size must be 0 to {most}")))
            }
            LimitSettings::Gradient2(g) if !(g.smoothing > 0.0 && g.smoothing <= 1.0) => {
                Some(("smoothing", "smoothing must be above 0 and at most 1".into()))
            }
            LimitSettings::Gradient2(g) if !(1.0..=100.0).contains(&g.rtt_tolerance) => {
                Some(("rtt_tolerance", "rtt_tolerance must be 1 to 100".into()))
            }
            LimitSettings::Gradient2(g) if !(1..=100_000).contains(&g.long_window) => {
                Some(("long_window", "long_window must be 1 to 100000".into()))
            }
            _ => None,
        }
    }
}

/// One request's sample, as the limiter's listener gives it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// From its arrival to its leaving, ms.
    pub rtt_ms: u64,
    /// Requests in flight when it came in, itself included.
    pub inflight: u32,
    /// Its client gave up, or it ran out of time.
    pub dropped: bool,
}

/// An adaptive limit's state.
#[derive(Debug, Clone, PartialEq)]
pub enum Adaptive {
    Aimd { settings: AimdSettings, limit: u32 },
    Gradient2 { settings: Gradient2Settings, estimated: f64, long_rtt: ExpAvg },
}

impl Adaptive {
    /// The limit `settings` start at, or none for the fixed one.
    pub fn start(settings: LimitSettings) -> Option<Adaptive> {
        match settings {
            LimitSettings::Fixed => None,
            LimitSettings::Aimd(settings) => Some(Adaptive::Aimd { settings, limit: settings.initial_limit }),
            LimitSettings::Gradient2(settings) => Some(Adaptive::Gradient2 {
                settings,
                estimated: f64::from(settings.initial_limit),
                long_rtt: ExpAvg::new(settings.long_window, 10),
            }),
        }
    }

    /// Whether this state was started from `settings` (so a settings change keeps what it learnt).
    pub fn follows(&self, settings: LimitSettings) -> bool {
        match (self, settings) {
            (Adaptive::Aimd { settings: mine, .. }, LimitSettings::Aimd(theirs)) => *mine == theirs,
            (Adaptive::Gradient2 { settings: mine, .. }, LimitSettings::Gradient2(theirs)) => *mine == theirs,
            _ => false,
        }
    }

    /// The requests allowed in flight now.
    pub fn limit(&self) -> u32 {
        match self {
            Adaptive::Aimd { limit, .. } => *limit,
            // `(int) newLimit`, as `_update` returns it.
            Adaptive::Gradient2 { estimated, .. } => *estimated as u32,
        }
    }

    /// `AbstractLimit.onSample`: the limit after one request's sample.
    pub fn sample(&mut self, Sample { rtt_ms, inflight, dropped }: Sample) {
        match self {
            // AIMDLimit._update.
            Adaptive::Aimd { settings, limit } => {
                let mut current = *limit;
                if dropped || rtt_ms > settings.timeout_ms {
                    current = (f64::from(current) * settings.backoff_ratio) as u32;
                } else if inflight * 2 >= current {
                    current += 1;
                }
                *limit = current.clamp(settings.min_limit, settings.max_limit);
            }
            // Gradient2Limit._update (it reads neither the drop nor the timeout).
            Adaptive::Gradient2 { settings, estimated, long_rtt } => {
                let queue_size = f64::from(settings.queue_size);
                // The library's RTTs are in ns, never 0; a sample under 1 ms counts as 1 ms.
                let short = rtt_ms.max(1) as f64;
                let long = long_rtt.add(short);
                // Latency back to normal after a long overload: the long RTT is cut faster.
                if long / short > 2.0 {
                    long_rtt.value *= 0.95;
                }
                // Don't grow the limit while the app itself is the limit.
                if f64::from(inflight) < *estimated / 2.0 {
                    return;
                }
                let gradient = (settings.rtt_tolerance * long / short).clamp(0.5, 1.0);
                let new = *estimated * gradient + queue_size;
                let new = *estimated * (1.0 - settings.smoothing) + new * settings.smoothing;
                *estimated = new.clamp(f64::from(settings.min_limit), f64::from(settings.max_limit));
            }
        }
    }
}

/// `ExpAvgMeasurement`: the mean of the first `warmup` samples, then an exponential average
/// with the factor 2 / (window + 1).
#[derive(Debug, Clone, PartialEq)]
pub struct ExpAvg {
    value: f64,
    sum: f64,
    count: u32,
    window: u32,
    warmup: u32,
}

impl ExpAvg {
    fn new(window: u32, warmup: u32) -> Self {
        ExpAvg { value: 0.0, sum: 0.0, count: 0, window, warmup }
    }

    fn add(&mut self, sample: f64) -> f64 {
        if self.count < self.warmup {
            self.count += 1;
            self.sum += sample;
            self.value = self.sum / f64::from(self.count);
        } else {
            let factor = 2.0 / (f64::from(self.window) + 1.0);
            self.value = self.value * (1.0 - factor) + sample * factor;
        }
        self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(rtt_ms: u64, inflight: u32) -> Sample {
        Sample { rtt_ms, inflight, dropped: false }
    }

    #[test]
    fn aimd_adds_one_when_half_full_and_takes_a_tenth_off_on_a_drop_or_a_timeout() {
        let settings = AimdSettings { initial_limit: 10, min_limit: 2, max_limit: 12, ..Default::default() };
        let mut aimd = Adaptive::start(LimitSettings::Aimd(settings)).unwrap();
        aimd.sample(ok(100, 4));
        assert_eq!(aimd.limit(), 10, "4 in flight is under half of 10: no growth");
        aimd.sample(ok(100, 5));
        assert_eq!(aimd.limit(), 11, "5 is half of 10");
        aimd.sample(ok(100, 11));
        aimd.sample(ok(100, 12));
        assert_eq!(aimd.limit(), 12, "held at max_limit");
        aimd.sample(Sample { rtt_ms: 10, inflight: 12, dropped: true });
        assert_eq!(aimd.limit(), 10, "12 × 0.9 = 10.8, truncated as (int) does");
        aimd.sample(ok(1_001, 12));
        assert_eq!(aimd.limit(), 9, "over the 1 s timeout counts as a drop");
        aimd.sample(ok(1_000, 12));
        assert_eq!(aimd.limit(), 10, "exactly the timeout is not over it");
        for _ in 0..20 {
            aimd.sample(Sample { rtt_ms: 10, inflight: 1, dropped: true });
        }
        assert_eq!(aimd.limit(), 2, "held at min_limit");
    }

    #[test]
    fn gradient2_grows_by_its_queue_size_smoothed_and_falls_when_the_rtt_rises() {
        let settings = Gradient2Settings {
            initial_limit: 10,
            min_limit: 2,
            max_limit: 40,
            long_window: 600,
            ..Default::default()
        };
        let mut g = Adaptive::start(LimitSettings::Gradient2(settings)).unwrap();
        // App-limited: 4 in flight is under half of 10; the RTT is learnt, the limit kept.
        g.sample(ok(100, 4));
        assert_eq!(g.limit(), 10);
        // RTT steady at 100 ms: gradient = min(1, 1.5 × 100 / 100) = 1, new = 10 + 4 = 14,
        // smoothed: 10 × 0.8 + 14 × 0.2 = 10.8.
        g.sample(ok(100, 10));
        let Adaptive::Gradient2 { estimated, .. } = &g else { panic!() };
        assert!((estimated - 10.8).abs() < 1e-9, "{estimated}");
        assert_eq!(g.limit(), 10);
        for _ in 0..8 {
            g.sample(ok(100, 20));
        }
        // Ten samples of 100 ms warm the long RTT to 100; now the RTT is 400 ms: the long one
        // moves by 2 / 601 of the gap (100.998...), gradient = max(0.5, 1.5 × 100.998 / 400) =
        // 0.5, and the limit goes to L × 0.8 + (L × 0.5 + 4) × 0.2 = 0.9 L + 0.8.
        let Adaptive::Gradient2 { estimated: before, .. } = g.clone() else { panic!() };
        g.sample(ok(400, 20));
        let Adaptive::Gradient2 { estimated, long_rtt, .. } = &g else { panic!() };
        let long = 100.0 + (400.0 - 100.0) * 2.0 / 601.0;
        assert!((long_rtt.value - long).abs() < 1e-9, "{long_rtt:?}");
        assert!((estimated - (0.9 * before + 0.8)).abs() < 1e-9, "{before} -> {estimated}");
        for _ in 0..20 {
            g.sample(ok(400, 20));
        }
        // While 1.5 × the long RTT stays under half the latest, 0.9 L + 0.8 falls toward 8.
        let limit = g.limit();
        assert!((8..before as u32).contains(&limit), "{before} -> {limit}");
        for _ in 0..100 {
            g.sample(ok(400, 1));
        }
        assert_eq!(g.limit(), limit, "app-limited samples leave it");
    }

    #[test]
    fn gradient2_cuts_a_long_rtt_far_above_the_latest() {
        let mut g = Adaptive::start(LimitSettings::Gradient2(Gradient2Settings::default())).unwrap();
        for _ in 0..10 {
            g.sample(ok(1_000, 1));
        }
        // Warm: the long RTT is 1,000. A sample of 100 ms moves it to 1,000 - 900 × 2 / 601;
        // that is over twice 100, so it is cut by 5 % too.
        g.sample(ok(100, 1));
        let Adaptive::Gradient2 { long_rtt, .. } = &g else { panic!() };
        let moved = 1_000.0 - 900.0 * 2.0 / 601.0;
        assert!((long_rtt.value - moved * 0.95).abs() < 1e-9, "{long_rtt:?}");
    }

    #[test]
    fn limits_are_validated_naming_the_parameter() {
        let aimd = |a: AimdSettings| LimitSettings::Aimd(a).invalid(100).map(|(f, _)| f);
        assert_eq!(aimd(AimdSettings::default()), None);
        assert_eq!(aimd(AimdSettings { min_limit: 0, ..Default::default() }), Some("min_limit"));
        assert_eq!(aimd(AimdSettings { max_limit: 1, ..Default::default() }), Some("max_limit"));
        assert_eq!(aimd(AimdSettings { initial_limit: 30, ..Default::default() }), Some("initial_limit"));
        assert_eq!(aimd(AimdSettings { backoff_ratio: 1.0, ..Default::default() }), Some("backoff_ratio"));
        assert_eq!(aimd(AimdSettings { timeout_ms: 0, ..Default::default() }), Some("timeout_ms"));
        let g = |g: Gradient2Settings| LimitSettings::Gradient2(g).invalid(100).map(|(f, _)| f);
        assert_eq!(g(Gradient2Settings::default()), None);
        assert_eq!(g(Gradient2Settings { rtt_tolerance: 0.9, ..Default::default() }), Some("rtt_tolerance"));
        assert_eq!(g(Gradient2Settings { smoothing: 0.0, ..Default::default() }), Some("smoothing"));
        assert_eq!(g(Gradient2Settings { long_window: 0, ..Default::default() }), Some("long_window"));
    }
}

//! Steady traffic, as an open system receives it: new messages at a rate, whether or not the
//! endpoint keeps up. The schedule is pure and seeded: Poisson arrivals (exponential gaps, as
//! independent users produce them) or even ones (a fixed gap), each arrival at a planned instant;
//! the caller says what time it is, and the schedule hands out the arrivals that are due and
//! how late each one is against its plan.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

/// The slowest rate a lab's traffic or a redrive may be given (per second): one every 100 s.
/// Below it the gap between two sends is no usable duration (at 1e-300/s it overflows any
/// clock), so a smaller positive rate is refused, and one read back from an older store is
/// raised to it.
pub const MIN_RATE_PER_S: f64 = 0.01;

/// `rate_per_s` as the pacing code may use it: at least `MIN_RATE_PER_S` (a NaN too).
pub fn paced_rate(rate_per_s: f64) -> f64 {
    rate_per_s.max(MIN_RATE_PER_S)
}

/// How the gaps between arrivals are drawn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Arrivals {
    /// Exponential gaps with mean `1 / rate`: arrivals independent of each other.
    #[default]
    Poisson,
    /// One arrival every `1 / rate`.
    Even,
}

/// Traffic as it is set: a rate, how arrivals fall, and (for a while only) when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TrafficSettings {
    pub rate_per_s: f64,
    pub arrivals: Arrivals,
    /// Lab time at which the traffic stops by itself; `None` runs until stopped.
    pub until_ms: Option<u64>,
}

/// `PUT /api/labs/{lab}/traffic`: `rate_per_s: 0` stops it.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TrafficUpdate {
    /// New messages per second: 0 stops the traffic; otherwise from 0.01 (`MIN_RATE_PER_S`)
    /// up to `max_traffic_rate_per_s`.
    pub rate_per_s: f64,
    #[serde(default)]
    pub arrivals: Arrivals,
    /// Runs this long, then stops; absent or null runs until stopped.
    #[serde(default)]
    pub for_ms: Option<u64>,
}

/// The caps a traffic update is held to (each a named setting).
#[derive(Debug, Clone, Copy)]
pub struct TrafficCaps {
    pub max_rate_per_s: f64,
    pub max_for_ms: u64,
}

/// Why a traffic update was refused: the field, the limit it broke (a named setting; none for
/// the fixed `MIN_RATE_PER_S`), and what to do.
#[derive(Debug, Clone, PartialEq)]
pub struct TrafficRefusal {
    pub field: &'static str,
    pub limit: Option<&'static str>,
    pub detail: String,
}

impl TrafficUpdate {
    /// The settings this update makes at lab time `now_ms`; `Ok(None)` stops the traffic.
    pub fn settings(
        &self,
        caps: TrafficCaps,
        now_ms: u64,
    ) -> Result<Option<TrafficSettings>, TrafficRefusal> {
        let rate = self.rate_per_s;
        if !(rate.is_finite() && (0.0..=caps.max_rate_per_s).contains(&rate)) {
            return Err(TrafficRefusal {
                field: "rate_per_s",
                limit: Some("max_traffic_rate_per_s"),
                detail: format!(
                    "rate_per_s must be 0 (to stop) up to {} new messages per second (max_traffic_rate_per_s)",
                    caps.max_rate_per_s
                ),
            });
        }
        if rate > 0.0 && rate < MIN_RATE_PER_S {
            return Err(TrafficRefusal {
                field: "rate_per_s",
                limit: None,
                detail: format!(
                    "rate_per_s {rate} is below the lowest rate, {MIN_RATE_PER_S} new messages per second \
                     (one every {} s); give 0 to stop, or a rate of at least {MIN_RATE_PER_S}",
                    1.0 / MIN_RATE_PER_S
                ),
            });
        }
        if let Some(ms) = self.for_ms
            && !(1..=caps.max_for_ms).contains(&ms)
        {
            return Err(TrafficRefusal {
                field: "for_ms",
                limit: Some("max_traffic_for_ms"),
                detail: format!(
                    "for_ms must be 1 to {} ms (max_traffic_for_ms), or null to run until stopped",
                    caps.max_for_ms
                ),
            });
        }
        if rate == 0.0 {
            return Ok(None);
        }
        Ok(Some(TrafficSettings {
            rate_per_s: rate,
            arrivals: self.arrivals,
            until_ms: self.for_ms.map(|ms| now_ms + ms),
        }))
    }
}

/// The planned instants of arrivals, in ms since the schedule began.
#[derive(Debug)]
pub struct Schedule {
    gap_ms: f64,
    arrivals: Arrivals,
    rng: StdRng,
    next_ms: f64,
}

impl Schedule {
    /// Arrivals at `rate_per_s`; a seeded schedule repeats exactly.
    pub fn new(rate_per_s: f64, arrivals: Arrivals, seed: Option<u64>) -> Schedule {
        // Its own stream, apart from the messages' jitter, which are seeded from the same seed.
        let rng = match seed {
            Some(seed) => StdRng::seed_from_u64(seed ^ 0xA441_7A15_5EED_0001),
            None => StdRng::from_rng(&mut rand::rng()),
        };
        let gap_ms = 1000.0 / paced_rate(rate_per_s);
        let mut schedule = Schedule { gap_ms, arrivals, rng, next_ms: 0.0 };
        schedule.next_ms = schedule.gap();
        schedule
    }

    /// When the next arrival is planned.
    pub fn next_ms(&self) -> f64 {
        self.next_ms
    }

    /// Takes every arrival planned at or before `now_ms`; returns how late each one is.
    pub fn take_due(&mut self, now_ms: f64) -> Vec<f64> {
        let mut late = Vec::new();
        while self.next_ms <= now_ms {
            late.push(now_ms - self.next_ms);
            self.next_ms += self.gap();
        }
        late
    }

    fn gap(&mut self) -> f64 {
        match self.arrivals {
            Arrivals::Even => self.gap_ms,
            // Inverse transform: -ln(U) is exponential with mean 1, for U uniform in (0, 1].
            Arrivals::Poisson => -(1.0 - self.rng.random::<f64>()).ln() * self.gap_ms,
        }
    }
}

/// How late the most recent arrivals were, for a p99. The room for all `LATENESS_KEPT` is
/// taken with the first, in 32 bits each (the p99 is shown to 0.1 ms, and an `f32` keeps
/// that up to about a quarter of an hour late): a lab at 10 arrivals a second filled its list for
/// seven minutes, and a list that doubles as it fills held up to 32 kB at 64 bits each
/// (BENCHMARKS.md, "Session 27").
#[derive(Debug, Clone, Default)]
pub struct Lateness {
    recent: std::collections::VecDeque<f32>,
}

/// Arrivals whose lateness the p99 is taken over.
const LATENESS_KEPT: usize = 4_096;

impl Lateness {
    pub fn record(&mut self, late_ms: f64) {
        if self.recent.len() == LATENESS_KEPT {
            self.recent.pop_front();
        } else if self.recent.capacity() == 0 {
            self.recent.reserve_exact(LATENESS_KEPT);
        }
        self.recent.push_back(late_ms as f32);
    }

    /// The 99th percentile (nearest rank) of the recent lateness, ms; `None` before any arrival.
    pub fn p99_ms(&self) -> Option<f64> {
        if self.recent.is_empty() {
            return None;
        }
        let mut sorted: Vec<f64> = self.recent.iter().map(|late| f64::from(*late)).collect();
        sorted.sort_by(f64::total_cmp);
        let rank = (99 * sorted.len()).div_ceil(100).max(1);
        Some((sorted[rank - 1] * 10.0).round() / 10.0)
    }

    /// Forgets the arrivals, and the room they took.
    pub fn clear(&mut self) {
        self.recent = Default::default();
    }
}

/// A lab's traffic: how it is set, and what it has done so far.
#[derive(Debug, Default)]
pub struct Traffic {
    pub settings: Option<TrafficSettings>,
    /// New messages created by the traffic.
    pub sent: u64,
    /// Arrivals refused at the source: the lab (or the whole server) owed too many
    /// deliveries, or the lab held too many messages, when they were due (or the store could
    /// not keep them). Both counts are kept in the store and carry on after a restart.
    pub refused: u64,
    pub lateness: Lateness,
    /// Changed since the last `traffic` event.
    pub changed: bool,
}

/// The traffic as the snapshot and the `traffic` event show it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, utoipa::ToSchema)]
pub struct TrafficView {
    /// 0 when no traffic runs.
    pub rate_per_s: f64,
    pub arrivals: Arrivals,
    /// Lab time at which it stops by itself; `null` runs until stopped.
    pub until_ms: Option<u64>,
    /// New messages the traffic created, since the lab was made or reset (a restart carries on).
    pub sent: u64,
    /// Arrivals refused at the source, counted the same way: the lab owed
    /// `--max-active-messages-per-lab` deliveries, the server `--max-active-messages`, or the
    /// lab held `--max-messages-per-lab` messages when they were due.
    pub refused: u64,
    /// How late the recent arrivals were against their schedule, 99th percentile, ms.
    pub late_ms_p99: Option<f64>,
}

impl Traffic {
    pub fn view(&self) -> TrafficView {
        let settings = self.settings;
        TrafficView {
            rate_per_s: settings.map_or(0.0, |s| s.rate_per_s),
            arrivals: settings.map_or_else(Arrivals::default, |s| s.arrivals),
            until_ms: settings.and_then(|s| s.until_ms),
            sent: self.sent,
            refused: self.refused,
            late_ms_p99: self.lateness.p99_ms(),
        }
    }

    /// The settings in a few words, for a marker.
    pub fn describe(settings: Option<&TrafficSettings>, now_ms: u64) -> String {
        match settings {
            None => "traffic stopped".into(),
            Some(s) => {
                let arrivals = match s.arrivals {
                    Arrivals::Poisson => "Poisson",
                    Arrivals::Even => "even",
                };
                match s.until_ms {
                    Some(until) => format!(
                        "traffic: {} msg/s, {arrivals}, for {} ms",
                        s.rate_per_s,
                        until.saturating_sub(now_ms)
                    ),
                    None => format!("traffic: {} msg/s, {arrivals}", s.rate_per_s),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: TrafficCaps = TrafficCaps { max_rate_per_s: 5_000.0, max_for_ms: 3_600_000 };

    #[test]
    fn poisson_arrivals_average_the_rate_and_repeat_with_the_seed() {
        let mut schedule = Schedule::new(200.0, Arrivals::Poisson, Some(7));
        let due = schedule.take_due(10_000.0).len();
        // 2,000 expected in 10 s; a Poisson count's standard deviation is about 45.
        assert!((1_850..=2_150).contains(&due), "{due} arrivals in 10 s at 200/s");
        let mut again = Schedule::new(200.0, Arrivals::Poisson, Some(7));
        assert_eq!(again.take_due(10_000.0).len(), due, "the same seed, the same arrivals");
        let mut other = Schedule::new(200.0, Arrivals::Poisson, Some(8));
        assert_ne!(other.take_due(10_000.0).len(), due, "another seed, other arrivals");
    }

    #[test]
    fn poisson_gaps_vary_as_exponential_ones_do() {
        let mut schedule = Schedule::new(100.0, Arrivals::Poisson, Some(1));
        let mut times = Vec::new();
        let mut last = 0.0;
        for _ in 0..5_000 {
            let next = schedule.next_ms();
            times.push(next - last);
            last = next;
            schedule.take_due(next);
        }
        let mean = times.iter().sum::<f64>() / times.len() as f64;
        let variance = times.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / times.len() as f64;
        // Exponential: the standard deviation equals the mean (10 ms here).
        assert!((9.0..11.0).contains(&mean), "mean gap {mean}");
        assert!((8.5..11.5).contains(&variance.sqrt()), "gap deviation {}", variance.sqrt());
    }

    #[test]
    fn even_arrivals_come_one_per_gap_and_lateness_is_measured_against_the_plan() {
        let mut schedule = Schedule::new(100.0, Arrivals::Even, None);
        assert_eq!(schedule.take_due(9.0), Vec::<f64>::new());
        assert_eq!(schedule.take_due(10.0), vec![0.0]);
        // Woken 25 ms late: the arrivals planned at 20 and 30 ms are due, 15 and 5 ms late.
        assert_eq!(schedule.take_due(35.0), vec![15.0, 5.0]);
        assert_eq!(schedule.next_ms(), 40.0);
    }

    #[test]
    fn the_p99_of_lateness_is_over_the_recent_arrivals() {
        let mut lateness = Lateness::default();
        assert_eq!(lateness.p99_ms(), None);
        for i in 0..100 {
            lateness.record(if i == 99 { 50.0 } else { 1.0 });
        }
        assert_eq!(lateness.p99_ms(), Some(1.0), "one late arrival in 100 is the 1 %");
        lateness.record(40.0);
        assert_eq!(lateness.p99_ms(), Some(40.0));
        // The room for the whole window is taken at once, and stays that, whatever the count.
        assert_eq!(lateness.recent.capacity(), LATENESS_KEPT);
        for _ in 0..2 * LATENESS_KEPT {
            lateness.record(2.25);
        }
        assert_eq!((lateness.recent.len(), lateness.recent.capacity()), (LATENESS_KEPT, LATENESS_KEPT));
        assert_eq!(lateness.p99_ms(), Some(2.3), "the oldest went; 2.25 is shown to 0.1 ms");
        lateness.clear();
        assert_eq!((lateness.p99_ms(), lateness.recent.capacity()), (None, 0));
    }

    #[test]
    fn a_schedule_from_a_rate_too_small_to_pace_runs_at_the_lowest_rate() {
        for tiny in [1e-300, 5e-324, 0.0, f64::NAN] {
            let schedule = Schedule::new(tiny, Arrivals::Even, Some(1));
            assert_eq!(schedule.next_ms(), 1000.0 / MIN_RATE_PER_S, "{tiny}");
        }
    }

    #[test]
    fn updates_name_the_field_and_limit_they_break() {
        let update = |rate_per_s, for_ms| TrafficUpdate { rate_per_s, arrivals: Arrivals::Even, for_ms };
        assert_eq!(update(-1.0, None).settings(CAPS, 0).unwrap_err().field, "rate_per_s");
        let over = update(5_001.0, None).settings(CAPS, 0).unwrap_err();
        assert_eq!((over.field, over.limit), ("rate_per_s", Some("max_traffic_rate_per_s")));
        assert!(over.detail.contains("5000"), "{}", over.detail);
        assert_eq!(update(f64::NAN, None).settings(CAPS, 0).unwrap_err().field, "rate_per_s");
        let long = update(10.0, Some(3_600_001)).settings(CAPS, 0).unwrap_err();
        assert_eq!((long.field, long.limit), ("for_ms", Some("max_traffic_for_ms")));
        for tiny in [1e-300, 5e-324, 0.009] {
            let below = update(tiny, None).settings(CAPS, 0).unwrap_err();
            assert_eq!((below.field, below.limit), ("rate_per_s", None), "{tiny}");
            assert!(below.detail.contains("0.01"), "{}", below.detail);
        }
        assert!(update(MIN_RATE_PER_S, None).settings(CAPS, 0).is_ok(), "the lowest rate itself");
        assert_eq!(update(10.0, Some(0)).settings(CAPS, 0).unwrap_err().field, "for_ms");
        assert_eq!(update(0.0, None).settings(CAPS, 0), Ok(None), "0 stops it");
        let set = update(10.0, Some(500)).settings(CAPS, 1_000).unwrap().unwrap();
        assert_eq!(set.until_ms, Some(1_500));
    }
}

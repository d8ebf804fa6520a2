//! Pure retry math: the backoff formulas with their jitter, the `Retry-After` floor, and the
//! classification of an attempt's result. Nothing here does I/O or reads a clock: every
//! function takes the attempt number, the previous delay and an RNG, so the formulas can be
//! checked with seeded RNGs and read next to the reference formulas.
//!
//! Formulas (attempt `a` is the 1-based number of the attempt that just failed):
//! - nominal: `min(cap, base * multiplier^(a-1))` (800, 1600, 3200 ms with the defaults;
//!   multiplier 1 is a fixed interval)
//! - none: `nominal`
//! - full: `uniform(0, nominal)` (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015)
//! - equal: `nominal/2 + uniform(0, nominal/2)`
//! - decorrelated: `min(cap, uniform(base, 3 * previous))`, previous starting at `base`
//! - additive: `min(cap, nominal + uniform(0, jitter_ms))` (got's `noise`, stamina's
//!   `wait_jitter`)
//! - proportional: `nominal * (1 + uniform(0, jitter_ratio))` (axios-retry's
//!   `exponentialDelay`, 0-20 %)
//! - `first_at_once`: the wait after the first attempt is 0, the later ones as above (urllib3's
//!   `Retry.get_backoff_time`)

mod policy;
pub mod protection;

pub use policy::{Policy, PolicyUpdate, PolicyView, WaitBand};
pub use protection::{Breaker, BreakerSettings, BreakerState, BudgetSettings, Refused, RetryBudget};
use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};

/// How a wait is spread around its nominal value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Jitter {
    None,
    Full,
    Equal,
    Decorrelated,
    /// `nominal + uniform(0, jitter_ms)`, capped: a fixed amount of noise on top of the curve.
    Additive,
    /// `nominal * (1 + uniform(0, jitter_ratio))`: noise in proportion to the delay.
    Proportional,
}

/// The backoff formula: a jitter kind over an exponential curve with a ceiling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub jitter: Jitter,
    pub base_ms: u64,
    pub cap_ms: u64,
    /// How much each nominal delay grows over the one before: 2 doubles, 1 keeps it fixed.
    pub multiplier: f64,
    /// The most `Jitter::Additive` adds.
    pub jitter_ms: u64,
    /// The most `Jitter::Proportional` adds, as a share of the delay.
    pub jitter_ratio: f64,
    /// The first retry goes at once (a wait of 0); the curve starts at the second.
    pub first_at_once: bool,
}

/// The range a jittered wait is drawn from, inclusive at both ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Band {
    pub low_ms: u64,
    pub high_ms: u64,
}

impl Backoff {
    /// `min(cap, base * multiplier^(attempt-1))`, saturating at the cap instead of overflowing.
    pub fn nominal_ms(&self, attempt: u32) -> u64 {
        let exponent = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
        let nominal = self.base_ms as f64 * self.multiplier.powi(exponent);
        if nominal.is_finite() && nominal < self.cap_ms as f64 { nominal.round() as u64 } else { self.cap_ms }
    }

    /// The band the wait after `attempt` is drawn from. `previous_ms` is the wait chosen
    /// last time (only decorrelated jitter uses it; it starts at `base`).
    pub fn band(&self, attempt: u32, previous_ms: Option<u64>) -> Band {
        if self.first_at_once && attempt <= 1 {
            return Band { low_ms: 0, high_ms: 0 };
        }
        let nominal = self.nominal_ms(attempt);
        self.band_around(nominal, previous_ms)
    }

    /// The band the jitter draws from around `nominal` (a raised nominal too, when a
    /// `Retry-After` raises it).
    fn band_around(&self, nominal: u64, previous_ms: Option<u64>) -> Band {
        match self.jitter {
            Jitter::None => Band { low_ms: nominal, high_ms: nominal },
            Jitter::Full => Band { low_ms: 0, high_ms: nominal },
            Jitter::Equal => Band { low_ms: nominal / 2, high_ms: nominal },
            Jitter::Decorrelated => {
                let previous = previous_ms.unwrap_or(self.base_ms).max(self.base_ms);
                let high = previous.saturating_mul(3).min(self.cap_ms);
                Band { low_ms: self.base_ms.min(high), high_ms: high }
            }
            Jitter::Additive => Band {
                low_ms: nominal,
                high_ms: nominal.saturating_add(self.jitter_ms).min(self.cap_ms.max(nominal)),
            },
            Jitter::Proportional => {
                let high = (nominal as f64 * (1.0 + self.jitter_ratio)).round();
                Band { low_ms: nominal, high_ms: if high.is_finite() { high as u64 } else { u64::MAX } }
            }
        }
    }

    /// A wait drawn from `band`. Additive jitter is drawn over its whole width and then
    /// capped, as stamina's `min(wait_max, nominal + uniform(0, wait_jitter))` is, so the cap
    /// holds a share of the draws rather than narrowing the spread.
    fn draw(&self, band: Band, rng: &mut impl Rng) -> u64 {
        match self.jitter {
            Jitter::Additive => {
                band.low_ms.saturating_add(rng.random_range(0..=self.jitter_ms)).min(band.high_ms)
            }
            _ => rng.random_range(band.low_ms..=band.high_ms),
        }
    }
}

/// Why the client waited as long as it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// The jittered backoff decided.
    Backoff,
    /// The server's `Retry-After` was longer than the jittered backoff and set the floor.
    RetryAfter,
    /// The server's pushback named the wait (gRFC A6: a pushback of 0 ms or more).
    Pushback,
}

/// The plan for one pause between attempts, with every number that went into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Wait {
    pub nominal_ms: u64,
    pub low_ms: u64,
    pub high_ms: u64,
    /// The value sampled from the band.
    pub chosen_ms: u64,
    /// The honoured `Retry-After`, after its cap; `None` when there was none or it is ignored.
    pub floor_ms: Option<u64>,
    /// What the client means to wait: `max(chosen, floor)`, or `floor + chosen` when the
    /// policy puts the jitter above the `Retry-After`.
    pub planned_ms: u64,
    pub reason: WaitReason,
}

/// How an honoured `Retry-After` combines with the jittered wait.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RetryAfterMode {
    /// Wait `max(jittered, Retry-After)`: when the header is longer than the band, every
    /// client comes back at the same instant.
    #[default]
    Floor,
    /// Wait `Retry-After + jittered`: the header sets the earliest time, the jitter still
    /// spreads the clients after it.
    JitterAbove,
    /// Wait exactly a positive `Retry-After`, whatever the backoff says, with nothing random
    /// on top; a header of 0 counts as none and the backoff decides (urllib3's
    /// `sleep_for_retry`, got's `calculateRetryDelay`, httpx-retries' `_calculate_sleep`).
    Exact,
    /// As `Exact`, but a header of 0 is waited too: the retry goes at once
    /// (go-retryablehttp's `DefaultBackoff`).
    ExactIncludingZero,
    /// The header raises the nominal delay, `max(nominal, Retry-After)`, and the jitter is drawn
    /// on the raised value (axios-retry's `exponentialDelay`: at least the header, up to 20 %
    /// more).
    NominalFloor,
}

impl RetryAfterMode {
    pub const ALL: [RetryAfterMode; 5] = [
        RetryAfterMode::Floor,
        RetryAfterMode::JitterAbove,
        RetryAfterMode::Exact,
        RetryAfterMode::ExactIncludingZero,
        RetryAfterMode::NominalFloor,
    ];
}

/// How the client treats a `Retry-After` it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfterRule {
    pub honor: bool,
    /// A server cannot make the client wait longer than this.
    pub cap_ms: u64,
    pub mode: RetryAfterMode,
}

/// Plans the wait after the failed attempt number `attempt` (1-based).
///
/// `Retry-After` (RFC 9110 §10.2.3) is a floor, not a replacement: the jittered wait still
/// spreads clients out, and the server's hint only stops them coming back too early.
pub fn plan_wait(
    backoff: &Backoff,
    rule: RetryAfterRule,
    attempt: u32,
    previous_ms: Option<u64>,
    retry_after_s: Option<u64>,
    rng: &mut impl Rng,
) -> Wait {
    let floor_ms = retry_after_s.filter(|_| rule.honor).map(|s| s.saturating_mul(1000).min(rule.cap_ms));
    let nominal_ms = if backoff.first_at_once && attempt <= 1 { 0 } else { backoff.nominal_ms(attempt) };
    let exact = match (floor_ms, rule.mode) {
        (Some(floor), RetryAfterMode::Exact) if floor > 0 => Some(floor),
        (Some(floor), RetryAfterMode::ExactIncludingZero) => Some(floor),
        _ => None,
    };
    if let Some(exact) = exact {
        // The header alone decides: no band, nothing drawn.
        return Wait {
            nominal_ms,
            low_ms: exact,
            high_ms: exact,
            chosen_ms: exact,
            floor_ms,
            planned_ms: exact,
            reason: WaitReason::RetryAfter,
        };
    }
    let raised = match (floor_ms, rule.mode) {
        (Some(floor), RetryAfterMode::NominalFloor) if floor > nominal_ms => Some(floor),
        _ => None,
    };
    let band = match raised {
        Some(floor) => backoff.band_around(floor, previous_ms),
        None => backoff.band(attempt, previous_ms),
    };
    let chosen_ms = backoff.draw(band, rng);
    let (planned_ms, reason) = match (floor_ms, rule.mode) {
        _ if raised.is_some() => (chosen_ms, WaitReason::RetryAfter),
        (Some(floor), RetryAfterMode::JitterAbove) => {
            (floor.saturating_add(chosen_ms), WaitReason::RetryAfter)
        }
        (Some(floor), RetryAfterMode::Floor) if floor > chosen_ms => (floor, WaitReason::RetryAfter),
        _ => (chosen_ms, WaitReason::Backoff),
    };
    Wait { nominal_ms, low_ms: band.low_ms, high_ms: band.high_ms, chosen_ms, floor_ms, planned_ms, reason }
}

/// How one attempt ended, as the client saw it; the status, when an answer came, stands beside
/// it (an attempt records both). This is what the store keeps, so its names are a contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    HttpError,
    Timeout,
    TransportError,
    /// The client died mid-attempt (a crash or a restart); it counts as a failed attempt.
    Interrupted,
    /// The circuit breaker was open: no request was sent, and it counts as a failed attempt.
    ShortCircuited,
    /// A hedge (gRFC A6 hedging) the client hung up on because a sibling's answer settled the
    /// call first: not a failure of the downstream's, and no answer of its own.
    Cancelled,
}

impl Outcome {
    /// An answer's outcome: a 2xx is `Ok`, anything else an HTTP error.
    pub fn of_status(status: u16) -> Outcome {
        if (200..300).contains(&status) { Outcome::Ok } else { Outcome::HttpError }
    }

    /// Whether it says the downstream is unhealthy: the circuit breaker counts these. A 4xx
    /// other than 408 and 429 is the client's own fault, not the downstream's; `status` is the
    /// answer's, when one came.
    pub fn is_failure(self, status: Option<u16>) -> bool {
        match self {
            Outcome::Ok => false,
            Outcome::HttpError => status.is_none_or(|s| s >= 500 || s == 408 || s == 429),
            Outcome::Timeout | Outcome::TransportError | Outcome::Interrupted => true,
            Outcome::ShortCircuited | Outcome::Cancelled => false,
        }
    }
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Delivered,
    /// Transient: worth another attempt if the budget allows.
    Retry,
    /// Permanent: retrying cannot help, dead-letter now.
    GiveUp,
}

/// Transport errors, timeouts, 5xx, 408 (request timeout), 409 (the key is still being
/// processed) and 429 (throttled) are transient; every other 4xx is the client's own fault
/// and will fail the same way again.
pub fn classify(outcome: Outcome, status: Option<u16>) -> Verdict {
    match (outcome, status) {
        (Outcome::Ok, _) => Verdict::Delivered,
        (Outcome::HttpError, Some(408 | 409 | 429)) => Verdict::Retry,
        (Outcome::HttpError, Some(status)) if status >= 500 => Verdict::Retry,
        (Outcome::HttpError, _) => Verdict::GiveUp,
        // A cancelled hedge's round was settled by a sibling: nothing follows it.
        (Outcome::Cancelled, _) => Verdict::GiveUp,
        (Outcome::Timeout | Outcome::TransportError | Outcome::Interrupted | Outcome::ShortCircuited, _) => {
            Verdict::Retry
        }
    }
}

/// As `classify`, with the statuses a policy lists in place of the lab's own rule when it lists
/// them (a library's `status_forcelist`, got's `statusCodes`): an answer with a listed status is
/// retried, any other answer but a 2xx is given up on. Outcomes without an answer (timeouts,
/// transport errors) are classified as `classify` does.
pub fn classify_with(outcome: Outcome, status: Option<u16>, statuses: Option<&[u16]>) -> Verdict {
    match (outcome, status, statuses) {
        (Outcome::HttpError, Some(status), Some(listed)) if listed.contains(&status) => Verdict::Retry,
        (Outcome::HttpError, Some(_), Some(_)) => Verdict::GiveUp,
        _ => classify(outcome, status),
    }
}

/// Reads a `Retry-After` given as delay-seconds. HTTP-dates are not parsed: this lab's
/// downstream only sends seconds, and an unreadable value is treated as absent.
pub fn parse_retry_after(value: &str) -> Option<u64> {
    value.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const DEFAULT: Backoff = Backoff {
        jitter: Jitter::Equal,
        base_ms: 800,
        cap_ms: 30_000,
        multiplier: 2.0,
        jitter_ms: 100,
        jitter_ratio: 0.2,
        first_at_once: false,
    };
    const HONOR: RetryAfterRule = RetryAfterRule { honor: true, cap_ms: 30_000, mode: RetryAfterMode::Floor };

    #[test]
    fn nominal_doubles_from_the_base_and_stops_at_the_cap() {
        let nominal: Vec<u64> = (1..=3).map(|a| DEFAULT.nominal_ms(a)).collect();
        assert_eq!(nominal, [800, 1600, 3200]);
        let capped = Backoff { cap_ms: 2000, ..DEFAULT };
        assert_eq!(capped.nominal_ms(3), 2000);
        assert_eq!(capped.nominal_ms(200), 2000, "a huge attempt number must not overflow");
    }

    #[test]
    fn equal_jitter_fills_the_upper_half_of_the_nominal_delay() {
        let mut rng = StdRng::seed_from_u64(7);
        for attempt in 1..=3 {
            let nominal = DEFAULT.nominal_ms(attempt);
            let (mut lower_half, mut upper_half) = (0, 0);
            for _ in 0..10_000 {
                let wait = plan_wait(&DEFAULT, HONOR, attempt, None, None, &mut rng);
                assert!(
                    (nominal / 2..=nominal).contains(&wait.chosen_ms),
                    "attempt {attempt}: {} outside [{}, {nominal}]",
                    wait.chosen_ms,
                    nominal / 2
                );
                assert_eq!((wait.low_ms, wait.high_ms), (nominal / 2, nominal));
                assert_eq!(wait.planned_ms, wait.chosen_ms);
                assert_eq!(wait.reason, WaitReason::Backoff);
                if wait.chosen_ms < nominal * 3 / 4 {
                    lower_half += 1;
                } else {
                    upper_half += 1;
                }
            }
            // Uniform over the band: each half holds about 5,000 of the 10,000 samples.
            assert!(lower_half > 4_000 && upper_half > 4_000, "{lower_half} / {upper_half}");
        }
    }

    #[test]
    fn full_and_decorrelated_jitter_stay_in_their_bands() {
        let mut rng = StdRng::seed_from_u64(11);
        let full = Backoff { jitter: Jitter::Full, ..DEFAULT };
        let decorrelated = Backoff { jitter: Jitter::Decorrelated, base_ms: 100, cap_ms: 5_000, ..DEFAULT };
        let mut previous = None;
        for attempt in 1..=2_000 {
            let f = plan_wait(&full, HONOR, 2, None, None, &mut rng);
            assert!(f.chosen_ms <= 1600);
            let d = plan_wait(&decorrelated, HONOR, attempt, previous, None, &mut rng);
            let prev = previous.unwrap_or(100).max(100);
            assert!(d.chosen_ms >= 100 && d.chosen_ms <= (prev * 3).min(5_000), "{d:?}");
            previous = Some(d.chosen_ms);
        }
        let none = Backoff { jitter: Jitter::None, ..DEFAULT };
        assert_eq!(plan_wait(&none, HONOR, 2, None, None, &mut rng).chosen_ms, 1600);
    }

    #[test]
    fn retry_after_is_a_floor_under_the_jittered_wait() {
        let mut rng = StdRng::seed_from_u64(3);
        for _ in 0..1_000 {
            // Attempt 1: the band is [400, 800], so a 1 s Retry-After always wins.
            let wait = plan_wait(&DEFAULT, HONOR, 1, None, Some(1), &mut rng);
            assert_eq!(wait.floor_ms, Some(1000));
            assert_eq!(wait.planned_ms, 1000);
            assert_eq!(wait.reason, WaitReason::RetryAfter);
            assert!(wait.chosen_ms <= 800, "the jittered value is still recorded");
            // Attempt 3: the band is [1600, 3200], above the floor, so backoff decides.
            let wait = plan_wait(&DEFAULT, HONOR, 3, None, Some(1), &mut rng);
            assert_eq!(wait.planned_ms, wait.chosen_ms);
            assert_eq!(wait.reason, WaitReason::Backoff);
        }
    }

    #[test]
    fn retry_after_is_capped_and_can_be_ignored() {
        let mut rng = StdRng::seed_from_u64(5);
        let capped = RetryAfterRule { cap_ms: 2_500, ..HONOR };
        let wait = plan_wait(&DEFAULT, capped, 1, None, Some(3600), &mut rng);
        assert_eq!((wait.floor_ms, wait.planned_ms), (Some(2_500), 2_500));
        let ignored = RetryAfterRule { honor: false, ..HONOR };
        let wait = plan_wait(&DEFAULT, ignored, 1, None, Some(5), &mut rng);
        assert_eq!(wait.floor_ms, None);
        assert!(wait.planned_ms <= 800);
    }

    #[test]
    fn a_multiplier_of_one_is_a_fixed_interval_and_others_grow_by_it() {
        let fixed = Backoff { multiplier: 1.0, ..DEFAULT };
        assert_eq!((1..=5).map(|a| fixed.nominal_ms(a)).collect::<Vec<_>>(), [800; 5]);
        let triple = Backoff { multiplier: 3.0, base_ms: 10, ..DEFAULT };
        assert_eq!((1..=4).map(|a| triple.nominal_ms(a)).collect::<Vec<_>>(), [10, 30, 90, 270]);
        assert_eq!(triple.nominal_ms(u32::MAX), 30_000, "saturates at the cap");
    }

    #[test]
    fn jitter_above_spreads_waits_over_the_band_after_the_retry_after() {
        let mut rng = StdRng::seed_from_u64(9);
        let above = RetryAfterRule { mode: RetryAfterMode::JitterAbove, ..HONOR };
        let planned: Vec<u64> =
            (0..1_000).map(|_| plan_wait(&DEFAULT, above, 1, None, Some(1), &mut rng).planned_ms).collect();
        assert!(planned.iter().all(|&p| (1_400..=1_800).contains(&p)), "1 s plus the [400, 800] band");
        let spread = planned.iter().max().unwrap() - planned.iter().min().unwrap();
        assert!(spread > 300, "spread over the band, not one instant: {spread}");
        let floor: Vec<u64> =
            (0..1_000).map(|_| plan_wait(&DEFAULT, HONOR, 1, None, Some(1), &mut rng).planned_ms).collect();
        assert!(floor.iter().all(|&p| p == 1_000), "a plain floor sends them all back together");
    }

    #[test]
    fn additive_jitter_adds_up_to_jitter_ms_and_the_cap_holds_after_it() {
        let mut rng = StdRng::seed_from_u64(21);
        let got = Backoff { jitter: Jitter::Additive, base_ms: 1000, cap_ms: 600_000, ..DEFAULT };
        let waits: Vec<u64> =
            (0..2_000).map(|_| plan_wait(&got, HONOR, 2, None, None, &mut rng).planned_ms).collect();
        assert!(waits.iter().all(|w| (2_000..=2_100).contains(w)), "2 s plus 0 to 100 ms");
        assert!(waits.iter().max().unwrap() - waits.iter().min().unwrap() > 80, "spread over the 100 ms");
        // stamina: 3.2 s plus up to 1 s, capped at 5 s; 6.4 s is held at the cap.
        let stamina =
            Backoff { jitter: Jitter::Additive, base_ms: 100, cap_ms: 5_000, jitter_ms: 1_000, ..DEFAULT };
        let band = stamina.band(6, None);
        assert_eq!((band.low_ms, band.high_ms), (3_200, 4_200));
        assert_eq!(stamina.band(8, None), Band { low_ms: 5_000, high_ms: 5_000 });
        let capped: Vec<u64> =
            (0..500).map(|_| plan_wait(&stamina, HONOR, 8, None, None, &mut rng).planned_ms).collect();
        assert!(capped.iter().all(|&w| w == 5_000), "{capped:?}");
    }

    #[test]
    fn proportional_jitter_adds_up_to_its_share_of_the_delay() {
        let mut rng = StdRng::seed_from_u64(22);
        let axios = Backoff { jitter: Jitter::Proportional, base_ms: 200, cap_ms: 600_000, ..DEFAULT };
        for (attempt, nominal) in [(1, 200), (2, 400), (3, 800)] {
            let waits: Vec<u64> = (0..2_000)
                .map(|_| plan_wait(&axios, HONOR, attempt, None, None, &mut rng).planned_ms)
                .collect();
            let high = nominal * 6 / 5;
            assert!(waits.iter().all(|w| (nominal..=high).contains(w)), "{attempt}: [{nominal}, {high}]");
            assert!(*waits.iter().max().unwrap() > nominal + (high - nominal) * 9 / 10);
        }
    }

    #[test]
    fn the_first_retry_can_go_at_once() {
        let mut rng = StdRng::seed_from_u64(23);
        let urllib3 =
            Backoff { jitter: Jitter::None, base_ms: 500, cap_ms: 120_000, first_at_once: true, ..DEFAULT };
        let waits: Vec<u64> =
            (1..=5).map(|n| plan_wait(&urllib3, HONOR, n, None, None, &mut rng).planned_ms).collect();
        assert_eq!(waits, [0, 1_000, 2_000, 4_000, 8_000], "backoff_factor * 2 ** (n - 1), 0 for the first");
    }

    #[test]
    fn an_exact_retry_after_replaces_the_backoff_and_zero_is_the_mode_s_to_say() {
        let mut rng = StdRng::seed_from_u64(24);
        let exact = RetryAfterRule { mode: RetryAfterMode::Exact, ..HONOR };
        let full = Backoff { jitter: Jitter::Full, base_ms: 100, ..DEFAULT };
        for _ in 0..200 {
            let wait = plan_wait(&full, exact, 4, None, Some(2), &mut rng);
            assert_eq!(
                (wait.planned_ms, wait.low_ms, wait.high_ms, wait.reason),
                (2_000, 2_000, 2_000, WaitReason::RetryAfter)
            );
            // Shorter than the backoff's 800 ms nominal: still the header, nothing else.
            let long = Backoff { base_ms: 8_000, ..full };
            assert_eq!(plan_wait(&long, exact, 1, None, Some(1), &mut rng).planned_ms, 1_000);
            // A header of 0: the backoff decides.
            let zero = plan_wait(&full, exact, 4, None, Some(0), &mut rng);
            assert!(zero.planned_ms <= 800 && zero.reason == WaitReason::Backoff, "{zero:?}");
            // go-retryablehttp waits a 0 too.
            let with_zero = RetryAfterRule { mode: RetryAfterMode::ExactIncludingZero, ..HONOR };
            assert_eq!(plan_wait(&full, with_zero, 4, None, Some(0), &mut rng).planned_ms, 0);
        }
        let capped = RetryAfterRule { cap_ms: 1_500, ..exact };
        assert_eq!(plan_wait(&full, capped, 1, None, Some(60), &mut rng).planned_ms, 1_500);
    }

    #[test]
    fn a_nominal_floor_draws_the_jitter_on_the_raised_delay() {
        let mut rng = StdRng::seed_from_u64(25);
        let axios = Backoff { jitter: Jitter::Proportional, base_ms: 200, cap_ms: 600_000, ..DEFAULT };
        let rule = RetryAfterRule { mode: RetryAfterMode::NominalFloor, ..HONOR };
        let raised: Vec<Wait> =
            (0..1_000).map(|_| plan_wait(&axios, rule, 1, None, Some(1), &mut rng)).collect();
        assert!(
            raised
                .iter()
                .all(|w| (1_000..=1_200).contains(&w.planned_ms) && w.reason == WaitReason::RetryAfter)
        );
        assert!(raised.iter().map(|w| w.planned_ms).max().unwrap() > 1_150, "up to 20 % above the header");
        // A header under the nominal leaves the backoff as it is.
        let wait = plan_wait(&axios, rule, 4, None, Some(1), &mut rng);
        assert!((1_600..=1_920).contains(&wait.planned_ms) && wait.reason == WaitReason::Backoff, "{wait:?}");
    }

    #[test]
    fn classification_retries_transients_and_gives_up_on_client_errors() {
        let answered = |status| classify(Outcome::of_status(status), Some(status));
        for status in [200, 201, 204] {
            assert_eq!(answered(status), Verdict::Delivered);
        }
        for status in [408, 409, 429, 500, 502, 503, 504] {
            assert_eq!(answered(status), Verdict::Retry, "{status}");
        }
        for status in [301, 400, 401, 403, 404, 413, 422] {
            assert_eq!(answered(status), Verdict::GiveUp, "{status}");
        }
        assert_eq!(classify(Outcome::Timeout, None), Verdict::Retry);
        assert_eq!(classify(Outcome::TransportError, None), Verdict::Retry);
    }

    #[test]
    fn a_listed_set_of_statuses_replaces_the_labs_rule_for_answers_only() {
        let got: &[u16] = &[408, 413, 429, 500, 502, 503, 504, 521, 522, 524];
        let answered = |status| classify_with(Outcome::of_status(status), Some(status), Some(got));
        assert_eq!(answered(413), Verdict::Retry, "listed, though the lab's own rule gives up");
        assert_eq!(answered(409), Verdict::GiveUp, "not listed, though the lab's own rule retries");
        assert_eq!(answered(501), Verdict::GiveUp);
        assert_eq!(answered(200), Verdict::Delivered);
        assert_eq!(classify_with(Outcome::Timeout, None, Some(got)), Verdict::Retry, "no answer: as before");
        assert_eq!(
            classify_with(Outcome::HttpError, Some(409), None),
            Verdict::Retry,
            "none listed: the lab's rule"
        );
    }

    #[test]
    fn retry_after_reads_delay_seconds_only() {
        assert_eq!(parse_retry_after("1"), Some(1));
        assert_eq!(parse_retry_after(" 120 "), Some(120));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
    }
}

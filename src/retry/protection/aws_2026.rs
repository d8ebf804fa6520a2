//! The AWS SDKs' `standard` retry mode as it changes in 2026 (mode version 2.1, opt-in with
//! `AWS_NEW_RETRIES_2026=true`), as botocore has it behind `NEW_RETRIES_ENABLED`
//! (`botocore/retries/standard.py`, `RetryQuotaChecker` and `ExponentialBackoff`, over
//! `botocore/retries/quota.py`; its tests in `tests/unit/retries/test_standard_retry_v2_1.py`):
//!
//! - the retry quota starts at 500 (`RetryQuota.INITIAL_CAPACITY`) and never holds more; a
//!   retry takes `retry_cost` 14 (`_RETRY_COST_V2`), or `throttling_retry_cost` 5
//!   (`_THROTTLING_RETRY_COST`) after a throttling answer, and is not made when the quota holds
//!   less; a timeout is priced as any other failure; a 2xx on the first try gives back
//!   `no_retry_increment` 1, one after retries what its last retry took;
//! - the wait before retry `i` (the attempt that failed being `i`) is
//!   `random(0, 1) × min(scale × 2^(i−1), 20 s)`, the scale 50 ms
//!   (`non_throttling_base_scale` 0.05) or 1 s after a throttling answer
//!   (`throttling_base_scale`);
//! - a retry-after from the server is honoured within `[t, t + 5 s]` (`max(t, min(retry_after,
//!   t + _RETRY_AFTER_MAX_ADDITIONAL))`).
//!
//! Two things are the lab's, not botocore's: a throttling answer is the endpoint's 429 (botocore
//! reads error codes such as `Throttling`, which the lab's endpoint does not send), and the
//! server's retry-after is its `Retry-After` in seconds (botocore reads `x-amz-retry-after` in
//! milliseconds). The mode's 3 attempts are the policy's `max_attempts`.

use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};

use super::{AwsQuota, Ended, Protection, Report, KindSettings, OutOfRange, within};
use crate::retry::{Wait, WaitReason};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Aws2026Settings {
    /// The quota it starts with, and the most it holds (`INITIAL_CAPACITY`).
    pub initial_retry_tokens: u32,
    /// What a retry takes (`_RETRY_COST_V2`).
    pub retry_cost: u32,
    /// What a retry after a throttling answer takes (`_THROTTLING_RETRY_COST`).
    pub throttling_retry_cost: u32,
    /// What a success on the first try gives back (`_NO_RETRY_INCREMENT`).
    pub no_retry_increment: u32,
    /// The wait's scale after a failure that is not throttling, in ms
    /// (`non_throttling_base_scale`, 0.05 s).
    pub base_scale_ms: u64,
    /// The wait's scale after a throttling answer, in ms (`throttling_base_scale`, 1 s).
    pub throttling_base_scale_ms: u64,
    /// The longest wait drawn, in ms (`_MAX_BACKOFF`, 20 s).
    pub max_backoff_ms: u64,
    /// How far past the drawn wait a server's retry-after is honoured, in ms
    /// (`_RETRY_AFTER_MAX_ADDITIONAL`, 5 s).
    pub retry_after_max_additional_ms: u64,
}

impl Default for Aws2026Settings {
    fn default() -> Self {
        Aws2026Settings {
            initial_retry_tokens: 500,
            retry_cost: 14,
            throttling_retry_cost: 5,
            no_retry_increment: 1,
            base_scale_ms: 50,
            throttling_base_scale_ms: 1_000,
            max_backoff_ms: 20_000,
            retry_after_max_additional_ms: 5_000,
        }
    }
}

/// Its words, and its parameters' ranges (a policy listing it out of them is a 422 naming the
/// parameter).
impl KindSettings for Aws2026Settings {
    const WORDS: &'static str = "AWS retry quota (2026)";

    fn check(&self) -> Result<(), OutOfRange> {
        let most = f64::from(self.initial_retry_tokens);
        within("initial_retry_tokens", most, 1.0, 100_000.0)?;
        within("retry_cost", f64::from(self.retry_cost), 1.0, most)?;
        within("throttling_retry_cost", f64::from(self.throttling_retry_cost), 1.0, most)?;
        within("no_retry_increment", f64::from(self.no_retry_increment), 0.0, most)?;
        within("base_scale_ms", self.base_scale_ms as f64, 1.0, 60_000.0)?;
        within("throttling_base_scale_ms", self.throttling_base_scale_ms as f64, 1.0, 60_000.0)?;
        within("max_backoff_ms", self.max_backoff_ms as f64, 1.0, 300_000.0)?;
        within("retry_after_max_additional_ms", self.retry_after_max_additional_ms as f64, 0.0, 60_000.0)
    }
}

impl Aws2026Settings {
    /// What a retry after a throttling answer, or after any other failure, takes.
    fn cost(&self, throttled: bool) -> u32 {
        if throttled { self.throttling_retry_cost } else { self.retry_cost }
    }

    /// `min(scale × 2^(n−1), max_backoff)` for the wait after attempt `n`.
    fn nominal_ms(&self, n: u32, throttled: bool) -> u64 {
        let scale = if throttled { self.throttling_base_scale_ms } else { self.base_scale_ms };
        let grown = scale.saturating_mul(1u64.checked_shl(n.saturating_sub(1)).unwrap_or(u64::MAX));
        grown.min(self.max_backoff_ms)
    }
}

/// The 2026 mode's quota and waits; the quota is the same as the standard mode's.
#[derive(Debug, Clone, Default)]
pub struct Aws2026(AwsQuota);

impl Protection for Aws2026 {
    type Settings = Aws2026Settings;

    /// `release_retry_quota`: only a 2xx gives back.
    fn ended(&mut self, settings: &Aws2026Settings, ended: &Ended, _now_ms: u64) {
        if ended.ok {
            let amount = match ended.n {
                1 => settings.no_retry_increment,
                _ => settings.cost(ended.after_throttled),
            };
            self.0.release(settings.initial_retry_tokens, amount);
        }
    }

    /// `acquire_retry_quota` with `NEW_RETRIES_ENABLED`.
    fn retry(
        &mut self,
        settings: &Aws2026Settings,
        after: &Ended,
        _now_ms: u64,
        _rng: &mut dyn Rng,
    ) -> Result<(), String> {
        self.0.acquire(settings.initial_retry_tokens, settings.cost(after.throttled))
    }

    fn retry_undone(&mut self, settings: &Aws2026Settings, after: &Ended) {
        self.0.release(settings.initial_retry_tokens, settings.cost(after.throttled));
    }

    /// `ExponentialBackoff.delay_amount` with `NEW_RETRIES_ENABLED`.
    fn wait(
        &self,
        settings: &Aws2026Settings,
        after: &Ended,
        retry_after_s: Option<u64>,
        rng: &mut dyn Rng,
    ) -> Option<Wait> {
        let nominal_ms = settings.nominal_ms(after.n, after.throttled);
        let chosen_ms = (rng.random::<f64>() * nominal_ms as f64) as u64;
        let honoured = retry_after_s.map(|s| {
            let most = chosen_ms.saturating_add(settings.retry_after_max_additional_ms);
            s.saturating_mul(1_000).min(most)
        });
        let planned_ms = honoured.map_or(chosen_ms, |ms| ms.max(chosen_ms));
        let reason = if planned_ms > chosen_ms { WaitReason::RetryAfter } else { WaitReason::Backoff };
        let floor_ms = honoured;
        Some(Wait { nominal_ms, low_ms: 0, high_ms: nominal_ms, chosen_ms, floor_ms, planned_ms, reason })
    }

    fn report(&self, settings: &Aws2026Settings, _now_ms: u64) -> Report {
        self.0.level(settings.initial_retry_tokens)
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn the_quota_allows_35_retries_from_500_or_100_after_throttling_and_prices_timeouts_alike() {
        let settings = Aws2026Settings::default();
        let mut rng = StdRng::seed_from_u64(0);
        for (failure, allowed, left) in
            [(Ended::failure(1), 35, 10), (Ended::timeout(1), 35, 10), (Ended::throttled(1), 100, 0)]
        {
            let mut quota = Aws2026::default();
            let made = (0..200).filter(|_| quota.retry(&settings, &failure, 0, &mut rng).is_ok()).count();
            assert_eq!(made, allowed, "{failure:?}");
            assert_eq!(quota.report(&settings, 0).level, Some(f64::from(left)));
        }
        let mut quota = Aws2026::default();
        (0..35).for_each(|_| quota.retry(&settings, &Ended::failure(1), 0, &mut rng).unwrap());
        let refused = quota.retry(&settings, &Ended::failure(1), 0, &mut rng).unwrap_err();
        assert_eq!(refused, "AWS retry quota has 10, a retry takes 14");
        // A success after a retry that followed a throttling answer gives back 5; after any
        // other failure 14; on the first try 1.
        quota.ended(&settings, &Ended { after_throttled: true, ..Ended::success(2) }, 0);
        assert_eq!(quota.report(&settings, 0).level, Some(15.0));
        quota.ended(&settings, &Ended::success(3), 0);
        assert_eq!(quota.report(&settings, 0).level, Some(29.0));
        quota.ended(&settings, &Ended::success(1), 0);
        assert_eq!(quota.report(&settings, 0).level, Some(30.0));
    }

    /// botocore's `test_range_of_exponential_backoff` (every draw at its top): 0.05, 0.1,
    /// 0.2, ... 12.8, then 20 s from attempt 10; 1 s, 2 s, ... after throttling answers.
    #[test]
    fn the_waits_grow_from_50_ms_or_1_s_after_throttling_up_to_20_s() {
        let settings = Aws2026Settings::default();
        let top = |after: Ended| settings.nominal_ms(after.n, after.throttled);
        let waits: Vec<u64> = (1..12).map(|n| top(Ended::failure(n))).collect();
        assert_eq!(waits, [50, 100, 200, 400, 800, 1_600, 3_200, 6_400, 12_800, 20_000, 20_000]);
        let throttled: Vec<u64> = (1..7).map(|n| top(Ended::throttled(n))).collect();
        assert_eq!(throttled, [1_000, 2_000, 4_000, 8_000, 16_000, 20_000]);
        assert_eq!(top(Ended::timeout(2)), 100, "a timeout waits as any failure");
        // Drawn under its top, over the whole of it.
        let mut rng = StdRng::seed_from_u64(5);
        let waits: Vec<Wait> = (0..200)
            .map(|_| Aws2026::default().wait(&settings, &Ended::failure(3), None, &mut rng).unwrap())
            .collect();
        for wait in &waits {
            assert_eq!((wait.nominal_ms, wait.low_ms, wait.high_ms), (200, 0, 200));
            assert!(wait.chosen_ms <= 200 && wait.planned_ms == wait.chosen_ms, "{wait:?}");
            assert_eq!(wait.reason, WaitReason::Backoff);
        }
        assert!(waits.iter().any(|w| w.chosen_ms < 20) && waits.iter().any(|w| w.chosen_ms > 180));
    }

    /// `max(t, min(retry_after, t + 5 s))`.
    #[test]
    fn a_servers_retry_after_is_honoured_within_5_s_past_the_drawn_wait() {
        let settings = Aws2026Settings::default();
        let mut rng = StdRng::seed_from_u64(9);
        for _ in 0..50 {
            let quota = Aws2026::default();
            let long = quota.wait(&settings, &Ended::failure(1), Some(30), &mut rng).unwrap();
            assert_eq!(long.planned_ms, long.chosen_ms + 5_000, "{long:?}");
            assert_eq!(long.reason, WaitReason::RetryAfter);
            let short = quota.wait(&settings, &Ended::failure(1), Some(2), &mut rng).unwrap();
            assert_eq!(short.planned_ms, 2_000, "{short:?}");
            let none = quota.wait(&settings, &Ended::throttled(4), Some(0), &mut rng).unwrap();
            assert_eq!(none.planned_ms, none.chosen_ms, "a zero retry-after is under any wait");
            assert!(none.chosen_ms <= 8_000);
        }
    }
}

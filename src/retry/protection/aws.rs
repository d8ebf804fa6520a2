//! The AWS SDKs' retry quota of the `standard` retry mode, as botocore has it
//! (`botocore/retries/standard.py`, `RetryQuotaChecker`, over `botocore/retries/quota.py`,
//! `RetryQuota`; aws-sdk-go-v2 `aws/retry` and the Rust SDK's `TokenBucket` use the same
//! numbers): the quota starts at `initial_retry_tokens` (500) and never holds more; a retry
//! takes `retry_cost` (5), or `timeout_retry_cost` (10) after a timeout, and is not made when
//! the quota holds less; a success on the first try gives back `no_retry_increment` (1), and a
//! success after retries gives back what its last retry took. Only a 2xx gives anything back.
//!
//! The rest of the standard mode (3 attempts; waits of random(0, 1) × min(2^(n−1) s, 20 s)) is
//! the policy's: `max_attempts` 3, `jitter` full, `base_ms` 1000, `cap_ms` 20000.

use serde::{Deserialize, Serialize};

use super::{Ended, Protection, Report, KindSettings, OutOfRange, within};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AwsQuotaSettings {
    /// The quota it starts with, and the most it holds (`INITIAL_RETRY_TOKENS`).
    pub initial_retry_tokens: u32,
    /// What a retry takes (`RETRY_COST`).
    pub retry_cost: u32,
    /// What a retry after a timeout takes (`TIMEOUT_RETRY_COST`).
    pub timeout_retry_cost: u32,
    /// What a success on the first try gives back (`NO_RETRY_INCREMENT`).
    pub no_retry_increment: u32,
}

impl Default for AwsQuotaSettings {
    fn default() -> Self {
        AwsQuotaSettings {
            initial_retry_tokens: 500,
            retry_cost: 5,
            timeout_retry_cost: 10,
            no_retry_increment: 1,
        }
    }
}

/// Its words, and its parameters' ranges (a policy listing it out of them is a 422 naming the
/// parameter).
impl KindSettings for AwsQuotaSettings {
    const WORDS: &'static str = "AWS retry quota";

    fn check(&self) -> Result<(), OutOfRange> {
        let most = f64::from(self.initial_retry_tokens);
        within("initial_retry_tokens", most, 1.0, 100_000.0)?;
        within("retry_cost", f64::from(self.retry_cost), 1.0, most)?;
        within("timeout_retry_cost", f64::from(self.timeout_retry_cost), 1.0, most)?;
        within("no_retry_increment", f64::from(self.no_retry_increment), 0.0, most)
    }
}

impl AwsQuotaSettings {
    /// What a retry after `failure` takes.
    fn cost(&self, after_timeout: bool) -> u32 {
        if after_timeout { self.timeout_retry_cost } else { self.retry_cost }
    }
}

/// The quota left (botocore `quota.py`, `RetryQuota`), for either mode.
#[derive(Debug, Clone, Default)]
pub struct AwsQuota {
    /// `None` until first touched: a full quota.
    available: Option<u32>,
}

impl AwsQuota {
    /// What it holds, of `most`.
    pub(super) fn left(&self, most: u32) -> u32 {
        self.available.unwrap_or(most)
    }

    /// `RetryQuota.acquire`: takes `cost`, or says what it holds when that is less.
    pub(super) fn acquire(&mut self, most: u32, cost: u32) -> Result<(), String> {
        let available = self.left(most);
        if cost > available {
            return Err(format!("AWS retry quota has {available}, a retry takes {cost}"));
        }
        self.available = Some(available - cost);
        Ok(())
    }

    /// `RetryQuota.release`: gives back `amount`, never past `most`.
    pub(super) fn release(&mut self, most: u32, amount: u32) {
        self.available = Some(self.left(most).saturating_add(amount).min(most));
    }

    pub(super) fn level(&self, most: u32) -> Report {
        Report { state: None, level: Some(f64::from(self.left(most))), ceiling: Some(f64::from(most)) }
    }
}

impl Protection for AwsQuota {
    type Settings = AwsQuotaSettings;

    /// `release_retry_quota`: only a 2xx gives back.
    fn ended(&mut self, settings: &AwsQuotaSettings, ended: &Ended, _now_ms: u64) {
        if ended.ok {
            let amount = match ended.n {
                1 => settings.no_retry_increment,
                _ => settings.cost(ended.after_timeout),
            };
            self.release(settings.initial_retry_tokens, amount);
        }
    }

    /// `acquire_retry_quota`: the cost, or no retry when the quota holds less.
    fn retry(
        &mut self,
        settings: &AwsQuotaSettings,
        after: &Ended,
        _now_ms: u64,
        _rng: &mut dyn rand::Rng,
    ) -> Result<(), String> {
        self.acquire(settings.initial_retry_tokens, settings.cost(after.timed_out))
    }

    fn retry_undone(&mut self, settings: &AwsQuotaSettings, after: &Ended) {
        self.release(settings.initial_retry_tokens, settings.cost(after.timed_out));
    }

    fn report(&self, settings: &AwsQuotaSettings, _now_ms: u64) -> Report {
        self.level(settings.initial_retry_tokens)
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn the_quota_is_empty_after_100_failed_retries_or_50_after_timeouts() {
        let settings = AwsQuotaSettings::default();
        let mut rng = StdRng::seed_from_u64(0);
        for (failure, allowed) in [(Ended::failure(1), 100), (Ended::timeout(1), 50)] {
            let mut quota = AwsQuota::default();
            let made = (0..200).filter(|_| quota.retry(&settings, &failure, 0, &mut rng).is_ok()).count();
            assert_eq!(made, allowed, "{failure:?}");
            assert_eq!(quota.report(&settings, 0).level, Some(0.0));
        }
    }

    #[test]
    fn a_success_gives_back_one_or_what_its_last_retry_took_and_never_past_the_start() {
        let settings = AwsQuotaSettings::default();
        let mut rng = StdRng::seed_from_u64(0);
        let mut quota = AwsQuota::default();
        quota.ended(&settings, &Ended::success(1), 0);
        assert_eq!(quota.left(settings.initial_retry_tokens), 500, "a full quota stays full");
        quota.retry(&settings, &Ended::timeout(1), 0, &mut rng).unwrap();
        quota.retry(&settings, &Ended::failure(2), 0, &mut rng).unwrap();
        assert_eq!(quota.left(settings.initial_retry_tokens), 485);
        // Attempt 3 succeeds after a retry that followed a plain failure: 5 back.
        quota.ended(&settings, &Ended { after_timeout: false, ..Ended::success(3) }, 0);
        assert_eq!(quota.left(settings.initial_retry_tokens), 490);
        // Attempt 2 succeeds after a timeout's retry: 10 back.
        quota.ended(&settings, &Ended { after_timeout: true, ..Ended::success(2) }, 0);
        assert_eq!(quota.left(settings.initial_retry_tokens), 500);
        // A failure gives nothing back, nor does a 4xx.
        quota.retry(&settings, &Ended::failure(1), 0, &mut rng).unwrap();
        quota.ended(&settings, &Ended::failure(2), 0);
        quota.ended(&settings, &Ended { ok: false, ..Ended::success(1) }, 0);
        assert_eq!(quota.left(settings.initial_retry_tokens), 495);
    }

    #[test]
    fn a_refusal_says_what_the_quota_holds_and_what_a_retry_takes() {
        let settings = AwsQuotaSettings { initial_retry_tokens: 13, ..AwsQuotaSettings::default() };
        let mut rng = StdRng::seed_from_u64(0);
        let mut quota = AwsQuota::default();
        quota.retry(&settings, &Ended::failure(1), 0, &mut rng).unwrap();
        quota.retry(&settings, &Ended::failure(1), 0, &mut rng).unwrap();
        let refused = quota.retry(&settings, &Ended::failure(1), 0, &mut rng).unwrap_err();
        assert_eq!(refused, "AWS retry quota has 3, a retry takes 5");
    }
}

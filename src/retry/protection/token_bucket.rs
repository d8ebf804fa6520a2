//! Marc Brooker's retry token bucket, as his simulator has it (github.com/mbrooker/
//! simulator_example, `retry_sim/retry_strategy.py`, `AdaptiveRetryStrategy`; the blog post
//! "Fixing retries with token buckets and circuit breakers", 2022): the bucket starts full;
//! each new call deposits `deposit` (0.1) tokens, up to `size` (5); a retry is made only while
//! the bucket holds more than one retry's `cost` (1), which it takes. Under a steady failure
//! rate the retries settle near a tenth of the calls, however many each call was allowed.

use serde::{Deserialize, Serialize};

use super::{Ended, Protection, Report, KindSettings, OutOfRange, within};

/// Brooker's numbers are the defaults: `AdaptiveRetryFactory(0.1, 5)`, a retry taking 1.0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TokenBucketSettings {
    /// Tokens each new call puts in.
    pub deposit: f64,
    /// The most the bucket holds, and what it starts with.
    pub size: f64,
    /// What a retry takes out.
    pub cost: f64,
}

impl Default for TokenBucketSettings {
    fn default() -> Self {
        TokenBucketSettings { deposit: 0.1, size: 5.0, cost: 1.0 }
    }
}

/// Its words, and its parameters' ranges (a policy listing it out of them is a 422 naming the
/// parameter).
impl KindSettings for TokenBucketSettings {
    const WORDS: &'static str = "token bucket";

    fn check(&self) -> Result<(), OutOfRange> {
        within("size", self.size, 1.0, 10_000.0)?;
        within("deposit", self.deposit, 0.0, self.size)?;
        within("cost", self.cost, 0.01, self.size)
    }
}

#[derive(Debug, Clone, Default)]
pub struct TokenBucket {
    tokens: f64,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(settings: &TokenBucketSettings) -> Self {
        TokenBucket { tokens: settings.size }
    }
}

impl Protection for TokenBucket {
    type Settings = TokenBucketSettings;

    fn fresh(settings: &TokenBucketSettings) -> Self {
        TokenBucket::new(settings)
    }

    /// `start()`: a new call deposits, capped at the size.
    fn sent(&mut self, settings: &TokenBucketSettings, n: u32, _now_ms: u64) {
        if n == 1 {
            self.tokens = (self.tokens + settings.deposit).min(settings.size);
        }
    }

    /// `should_retry()`: strictly more than a retry's cost, as the simulator compares.
    fn retry(
        &mut self,
        settings: &TokenBucketSettings,
        _after: &Ended,
        _now_ms: u64,
        _rng: &mut dyn rand::Rng,
    ) -> Result<(), String> {
        if self.tokens > settings.cost {
            self.tokens -= settings.cost;
            Ok(())
        } else {
            let (tokens, cost) = (self.tokens, settings.cost);
            Err(format!("the token bucket has {tokens:.1} tokens, a retry takes more than {cost}"))
        }
    }

    fn retry_undone(&mut self, settings: &TokenBucketSettings, _after: &Ended) {
        self.tokens = (self.tokens + settings.cost).min(settings.size);
    }

    fn report(&self, settings: &TokenBucketSettings, _now_ms: u64) -> Report {
        Report { state: None, level: Some(self.tokens), ceiling: Some(settings.size) }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn a_full_bucket_allows_four_retries_and_new_calls_earn_more() {
        let settings = TokenBucketSettings::default();
        let mut bucket = TokenBucket::new(&settings);
        let mut rng = StdRng::seed_from_u64(0);
        // 5 tokens: 4 retries leave 1.0, which is not more than a retry's cost.
        let allowed =
            (0..10).filter(|_| bucket.retry(&settings, &Ended::failure(1), 0, &mut rng).is_ok()).count();
        assert_eq!(allowed, 4);
        let refused = bucket.retry(&settings, &Ended::failure(1), 0, &mut rng).unwrap_err();
        assert_eq!(refused, "the token bucket has 1.0 tokens, a retry takes more than 1");
        // Retries add nothing; eleven new calls put in 1.1 tokens (2.1): two more retries.
        for _ in 0..5 {
            bucket.sent(&settings, 2, 0);
        }
        assert!(bucket.retry(&settings, &Ended::failure(1), 0, &mut rng).is_err());
        for _ in 0..11 {
            bucket.sent(&settings, 1, 0);
        }
        assert!(bucket.retry(&settings, &Ended::failure(1), 0, &mut rng).is_ok());
        assert!(bucket.retry(&settings, &Ended::failure(1), 0, &mut rng).is_ok());
        assert!(bucket.retry(&settings, &Ended::failure(1), 0, &mut rng).is_err());
    }

    #[test]
    fn the_bucket_never_holds_more_than_its_size() {
        let settings = TokenBucketSettings::default();
        let mut bucket = TokenBucket::new(&settings);
        for _ in 0..100 {
            bucket.sent(&settings, 1, 0);
        }
        assert_eq!(bucket.report(&settings, 0), Report { state: None, level: Some(5.0), ceiling: Some(5.0) });
    }

    #[test]
    fn at_half_failing_calls_retries_settle_near_a_tenth_of_the_calls() {
        // Brooker's steady state: a call fails half the time, each retry too.
        let settings = TokenBucketSettings::default();
        let mut bucket = TokenBucket::new(&settings);
        let mut rng = StdRng::seed_from_u64(42);
        let (calls, mut requests) = (100_000, 0u64);
        for _ in 0..calls {
            bucket.sent(&settings, 1, 0);
            requests += 1;
            let mut tries = 1;
            while rand::RngExt::random_bool(&mut rng, 0.5)
                && tries <= 3
                && bucket.retry(&settings, &Ended::failure(1), 0, &mut rng).is_ok()
            {
                requests += 1;
                tries += 1;
            }
        }
        let amplification = requests as f64 / calls as f64;
        assert!((1.09..1.11).contains(&amplification), "{amplification}");
    }
}

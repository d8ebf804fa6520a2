//! gRPC's retry throttling, as gRFC A6 ("gRPC Retry Design", github.com/grpc/proposal,
//! `A6-client-retries.md`, `retryThrottling`) specifies it: a token count starts at
//! `max_tokens` and stays between 0 and `max_tokens`; every failed attempt takes 1 token,
//! every successful one adds `token_ratio`; while the count is at or below `max_tokens / 2`,
//! no retry is made. The defaults are the proposal's example, 10 and 0.1 ("throttles retry
//! attempts ... when the client's ratio of failures to successes exceeds ~10%").
//!
//! The proposal allows up to 3 decimal places in `token_ratio`, and grpc-java counts in
//! thousandths of a token so the sums stay exact: so does this. The backoff and the attempts
//! are the policy's (`max_attempts`, `base_ms`, ...), as gRPC's `retryPolicy` is apart from
//! its `retryThrottling`.

use serde::{Deserialize, Serialize};

use super::{Ended, Protection, Report, KindSettings, OutOfRange, within};

/// Thousandths of a token.
const SCALE: f64 = 1000.0;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcSettings {
    /// The tokens it starts with and the most it holds (`maxTokens`).
    pub max_tokens: f64,
    /// What a successful attempt adds (`tokenRatio`).
    pub token_ratio: f64,
}

impl Default for GrpcSettings {
    fn default() -> Self {
        GrpcSettings { max_tokens: 10.0, token_ratio: 0.1 }
    }
}

/// Its words, and its parameters' ranges (a policy listing it out of them is a 422 naming the
/// parameter).
impl KindSettings for GrpcSettings {
    const WORDS: &'static str = "gRPC retry throttling";

    fn check(&self) -> Result<(), OutOfRange> {
        within("max_tokens", self.max_tokens, 1.0, 1_000.0)?;
        within("token_ratio", self.token_ratio, 0.001, self.max_tokens)
    }
}

impl GrpcSettings {
    fn max(&self) -> i64 {
        (self.max_tokens * SCALE).round() as i64
    }
}

#[derive(Debug, Clone, Default)]
pub struct GrpcThrottle {
    /// In thousandths of a token; `None` until the first call, when it starts full.
    tokens: Option<i64>,
}

impl GrpcThrottle {
    fn tokens(&self, settings: &GrpcSettings) -> i64 {
        self.tokens.unwrap_or(settings.max())
    }
}

impl Protection for GrpcThrottle {
    type Settings = GrpcSettings;

    fn ended(&mut self, settings: &GrpcSettings, ended: &Ended, _now_ms: u64) {
        // gRFC A6: a failed RPC takes a token, a successful one gives back `token_ratio`; an
        // answer that is neither (a 4xx the client does not count as the server's failure)
        // changes nothing.
        let change = match (ended.ok, ended.failed) {
            // A6: "Decimal places beyond 3 are ignored. (eg. 0.5466 is treated as 0.546.)"
            // (the nudge keeps 0.29, stored as 0.28999..., at 290).
            (true, _) => (settings.token_ratio * SCALE + 1e-6).floor() as i64,
            (false, true) => -(SCALE as i64),
            (false, false) => 0,
        };
        self.tokens = Some((self.tokens(settings) + change).clamp(0, settings.max()));
    }

    fn retry(
        &mut self,
        settings: &GrpcSettings,
        _after: &Ended,
        _now_ms: u64,
        _rng: &mut dyn rand::Rng,
    ) -> Result<(), String> {
        let tokens = self.tokens(settings);
        if 2 * tokens > settings.max() {
            Ok(())
        } else {
            let (tokens, threshold) = (tokens as f64 / SCALE, settings.max_tokens / 2.0);
            Err(format!("gRPC retry throttling has {tokens} tokens, retries need more than {threshold}"))
        }
    }

    fn report(&self, settings: &GrpcSettings, _now_ms: u64) -> Report {
        let level = self.tokens(settings) as f64 / SCALE;
        Report { state: None, level: Some(level), ceiling: Some(settings.max_tokens) }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn retries_stop_at_half_the_tokens_and_ten_successes_earn_back_one_failure() {
        let settings = GrpcSettings::default();
        let mut throttle = GrpcThrottle::default();
        let mut rng = StdRng::seed_from_u64(0);
        assert_eq!(throttle.report(&settings, 0).level, Some(10.0), "it starts full");
        for _ in 0..4 {
            throttle.ended(&settings, &Ended::failure(1), 0);
        }
        assert!(
            throttle.retry(&settings, &Ended::failure(1), 0, &mut rng).is_ok(),
            "6 of 10 tokens: above the threshold"
        );
        throttle.ended(&settings, &Ended::failure(1), 0);
        let refused = throttle.retry(&settings, &Ended::failure(1), 0, &mut rng).unwrap_err();
        assert_eq!(refused, "gRPC retry throttling has 5 tokens, retries need more than 5");
        // 0.1 a success, counted exactly: one success takes it just over the threshold.
        throttle.ended(&settings, &Ended::success(1), 0);
        assert_eq!(throttle.report(&settings, 0).level, Some(5.1));
        assert!(throttle.retry(&settings, &Ended::failure(1), 0, &mut rng).is_ok());
    }

    #[test]
    fn the_count_stays_between_zero_and_the_most() {
        let settings = GrpcSettings::default();
        let mut throttle = GrpcThrottle::default();
        for _ in 0..100 {
            throttle.ended(&settings, &Ended::success(1), 0);
        }
        assert_eq!(throttle.report(&settings, 0).level, Some(10.0));
        for _ in 0..100 {
            throttle.ended(&settings, &Ended::failure(1), 0);
        }
        assert_eq!(throttle.report(&settings, 0).level, Some(0.0));
        // From empty, 51 successes (5.1 tokens) are needed before a retry goes again.
        for _ in 0..50 {
            throttle.ended(&settings, &Ended::success(1), 0);
        }
        let mut rng = StdRng::seed_from_u64(0);
        assert!(throttle.retry(&settings, &Ended::failure(1), 0, &mut rng).is_err());
        throttle.ended(&settings, &Ended::success(1), 0);
        assert!(throttle.retry(&settings, &Ended::failure(1), 0, &mut rng).is_ok());
    }

    /// An answer that is neither a success nor the server's failure (a 409, say) is no success
    /// to the throttle: it earns nothing back.
    #[test]
    fn an_answer_that_is_not_a_success_earns_nothing() {
        let settings = GrpcSettings::default();
        let mut throttle = GrpcThrottle::default();
        throttle.ended(&settings, &Ended::failure(1), 0);
        for _ in 0..20 {
            throttle.ended(&settings, &Ended { n: 1, ..Ended::default() }, 0);
        }
        assert_eq!(throttle.report(&settings, 0).level, Some(9.0));
    }
}

//! The AWS SDKs' `adaptive` retry mode, as botocore has it: the `standard` mode's retry quota
//! (`AwsQuota`, `retries/standard.py`) plus a client-side rate limiter (`retries/adaptive.py`,
//! `ClientRateLimiter`, over `retries/throttling.py`, `CubicCalculator`, and
//! `retries/bucket.py`, `TokenBucket`):
//!
//! - every answer (and every attempt that got none) is heard: `RateClocker.record` measures the
//!   client's send rate, counted in half-second buckets and smoothed (0.8 of the newest);
//! - an answer that is not throttling moves the allowed rate along CUBIC's curve,
//!   `C × (t − t_fail − K)³ + W_max` with `K = ∛(W_max × (1 − β) / C)`, `C` 0.4, `β` 0.7;
//! - a throttling answer (the lab's 429) makes the rate it was sending at (the measured rate,
//!   no more than the bucket's once on) the new `W_max`, cuts the rate to `β ×` it and turns the
//!   limiter on; it is off until the first one;
//! - after each, the bucket's rate is the new rate but at most `2 ×` the measured rate, never
//!   under 0.5 a second; it holds at most that many tokens (at least 1) and starts empty;
//! - while on, every attempt, first ones too, takes a token before it is sent, waiting for one
//!   at the bucket's rate.
//!
//! botocore blocks the sending thread in a loop: refill, take the token if it is there, else
//! sleep until it would be and ask again. Here the attempt is told how long to sleep, and asks
//! again when it wakes (`delay`, called until it says 0); botocore also wakes its sleepers
//! when the rate changes, these wake when they planned to. Times are the lab's, in seconds;
//! the clock starts when the protection is first used (botocore's at the client's creation).

use serde::{Deserialize, Serialize};

use super::{AwsQuota, AwsQuotaSettings, Ended, Protection, Report, KindSettings, OutOfRange, within};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AwsAdaptiveSettings {
    /// The standard mode's quota (`INITIAL_RETRY_TOKENS`, 500).
    pub initial_retry_tokens: u32,
    /// What a retry takes (`RETRY_COST`, 5).
    pub retry_cost: u32,
    /// What a retry after a timeout takes (`TIMEOUT_RETRY_COST`, 10).
    pub timeout_retry_cost: u32,
    /// What a first-try success gives back (`NO_RETRY_INCREMENT`, 1).
    pub no_retry_increment: u32,
    /// CUBIC's multiplicative decrease (`_BETA`, 0.7).
    pub beta: f64,
    /// CUBIC's scale (`_SCALE_CONSTANT`, 0.4).
    pub scale_constant: f64,
    /// The bucket's lowest rate, a second (`TokenBucket._MIN_RATE`, 0.5).
    pub min_rate: f64,
    /// The rate never above this times the measured rate (`_MAX_RATE_ADJUST_SCALE`, 2).
    pub max_rate_adjust_scale: f64,
    /// The newest half-second's weight in the measured rate (`_DEFAULT_SMOOTHING`, 0.8).
    pub smoothing: f64,
    /// The send rate's buckets, in ms (`_TIME_BUCKET_RANGE`, 0.5 s).
    pub time_bucket_range_ms: u64,
}

impl Default for AwsAdaptiveSettings {
    fn default() -> Self {
        AwsAdaptiveSettings {
            initial_retry_tokens: 500,
            retry_cost: 5,
            timeout_retry_cost: 10,
            no_retry_increment: 1,
            beta: 0.7,
            scale_constant: 0.4,
            min_rate: 0.5,
            max_rate_adjust_scale: 2.0,
            smoothing: 0.8,
            time_bucket_range_ms: 500,
        }
    }
}

/// Its words, and its parameters' ranges (a policy listing it out of them is a 422 naming the
/// parameter).
impl KindSettings for AwsAdaptiveSettings {
    const WORDS: &'static str = "AWS retry quota (adaptive)";

    fn check(&self) -> Result<(), OutOfRange> {
        let most = f64::from(self.initial_retry_tokens);
        within("initial_retry_tokens", most, 1.0, 100_000.0)?;
        within("retry_cost", f64::from(self.retry_cost), 1.0, most)?;
        within("timeout_retry_cost", f64::from(self.timeout_retry_cost), 1.0, most)?;
        within("no_retry_increment", f64::from(self.no_retry_increment), 0.0, most)?;
        within("beta", self.beta, 0.01, 0.99)?;
        within("scale_constant", self.scale_constant, 0.01, 100.0)?;
        within("min_rate", self.min_rate, 0.01, 10_000.0)?;
        within("max_rate_adjust_scale", self.max_rate_adjust_scale, 1.0, 100.0)?;
        within("smoothing", self.smoothing, 0.01, 1.0)?;
        within("time_bucket_range_ms", self.time_bucket_range_ms as f64, 10.0, 60_000.0)
    }
}

impl AwsAdaptiveSettings {
    fn quota(&self) -> AwsQuotaSettings {
        AwsQuotaSettings {
            initial_retry_tokens: self.initial_retry_tokens,
            retry_cost: self.retry_cost,
            timeout_retry_cost: self.timeout_retry_cost,
            no_retry_increment: self.no_retry_increment,
        }
    }
}

/// `CubicCalculator`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Cubic {
    w_max: f64,
    k: f64,
    last_fail: f64,
}

impl Cubic {
    fn new(settings: &AwsAdaptiveSettings, starting_max_rate: f64, start_time: f64) -> Self {
        let mut cubic = Cubic { w_max: starting_max_rate, k: 0.0, last_fail: start_time };
        cubic.k = cubic.zero_point(settings);
        cubic
    }

    /// `_calculate_zero_point`.
    fn zero_point(&self, settings: &AwsAdaptiveSettings) -> f64 {
        (self.w_max * (1.0 - settings.beta) / settings.scale_constant).powf(1.0 / 3.0)
    }

    /// `success_received`.
    fn success(&self, settings: &AwsAdaptiveSettings, t: f64) -> f64 {
        settings.scale_constant * (t - self.last_fail - self.k).powi(3) + self.w_max
    }

    /// `error_received`.
    fn error(&mut self, settings: &AwsAdaptiveSettings, current_rate: f64, t: f64) -> f64 {
        self.w_max = current_rate;
        self.k = self.zero_point(settings);
        self.last_fail = t;
        current_rate * settings.beta
    }
}

/// `TokenBucket`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bucket {
    fill_rate: f64,
    max_capacity: f64,
    capacity: f64,
    last: Option<f64>,
}

impl Bucket {
    /// `TokenBucket(max_rate=1)`: empty.
    fn new(settings: &AwsAdaptiveSettings, t: f64) -> Self {
        let mut bucket = Bucket { fill_rate: 0.0, max_capacity: 0.0, capacity: 0.0, last: None };
        bucket.set_max_rate(settings, 1.0, t);
        bucket
    }

    /// `_refill`.
    fn refill(&mut self, t: f64) {
        if let Some(last) = self.last {
            self.capacity = self.max_capacity.min(self.capacity + (t - last) * self.fill_rate);
        }
        self.last = Some(t);
    }

    /// The `max_rate` setter.
    fn set_max_rate(&mut self, settings: &AwsAdaptiveSettings, value: f64, t: f64) {
        self.refill(t);
        self.fill_rate = value.max(settings.min_rate);
        self.max_capacity = if value >= 1.0 { value } else { 1.0 };
        self.capacity = self.capacity.min(self.max_capacity);
    }

    /// One turn of `_acquire(1)`'s loop: takes the token when it is there (0), or says how
    /// long to sleep before asking again (`_sleep_amount`), in seconds.
    fn acquire(&mut self, t: f64) -> f64 {
        self.refill(t);
        if self.capacity >= 1.0 {
            self.capacity -= 1.0;
            return 0.0;
        }
        (1.0 - self.capacity) / self.fill_rate
    }
}

/// `RateClocker`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Clocker {
    measured_rate: f64,
    last_bucket: f64,
    count: f64,
}

impl Clocker {
    fn new(t: f64) -> Self {
        Clocker { measured_rate: 0.0, last_bucket: t.floor(), count: 0.0 }
    }

    /// `record`: the smoothed send rate, a second.
    fn record(&mut self, settings: &AwsAdaptiveSettings, t: f64) -> f64 {
        let scale = 1000.0 / settings.time_bucket_range_ms as f64;
        let bucket = (t * scale).floor() / scale;
        self.count += 1.0;
        if bucket > self.last_bucket {
            let current_rate = self.count / (bucket - self.last_bucket);
            self.measured_rate =
                current_rate * settings.smoothing + self.measured_rate * (1.0 - settings.smoothing);
            self.count = 0.0;
            self.last_bucket = bucket;
        }
        self.measured_rate
    }
}

/// `ClientRateLimiter`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Limiter {
    enabled: bool,
    cubic: Cubic,
    bucket: Bucket,
    clocker: Clocker,
}

impl Limiter {
    /// As `register_retry_handler` makes it at `t`.
    fn new(settings: &AwsAdaptiveSettings, t: f64) -> Self {
        Limiter {
            enabled: false,
            cubic: Cubic::new(settings, 0.0, t),
            bucket: Bucket::new(settings, t),
            clocker: Clocker::new(t),
        }
    }

    /// `on_receiving_response`.
    fn heard(&mut self, settings: &AwsAdaptiveSettings, throttled: bool, t: f64) {
        let measured = self.clocker.record(settings, t);
        let new_rate = if throttled {
            let rate = if self.enabled { measured.min(self.bucket.fill_rate) } else { measured };
            self.enabled = true;
            self.cubic.error(settings, rate, t)
        } else {
            self.cubic.success(settings, t)
        };
        self.bucket.set_max_rate(settings, new_rate.min(settings.max_rate_adjust_scale * measured), t);
    }
}

/// The standard mode's quota and the adaptive mode's limiter.
#[derive(Debug, Clone, Default)]
pub struct AwsAdaptive {
    quota: AwsQuota,
    /// `None` until first used.
    limiter: Option<Limiter>,
}

fn seconds(now_ms: u64) -> f64 {
    now_ms as f64 / 1000.0
}

impl AwsAdaptive {
    fn limiter(&mut self, settings: &AwsAdaptiveSettings, t: f64) -> &mut Limiter {
        self.limiter.get_or_insert_with(|| Limiter::new(settings, t))
    }
}

impl Protection for AwsAdaptive {
    type Settings = AwsAdaptiveSettings;

    /// `on_sending_request`: while on, a token before every attempt; when there is none yet,
    /// how long to sleep before asking again.
    fn delay(&mut self, settings: &AwsAdaptiveSettings, _n: u32, now_ms: u64) -> u64 {
        let t = seconds(now_ms);
        let limiter = self.limiter(settings, t);
        match limiter.enabled {
            true => (limiter.bucket.acquire(t) * 1000.0).ceil() as u64,
            false => 0,
        }
    }

    fn ended(&mut self, settings: &AwsAdaptiveSettings, ended: &Ended, now_ms: u64) {
        self.quota.ended(&settings.quota(), ended, now_ms);
        let t = seconds(now_ms);
        self.limiter(settings, t).heard(settings, ended.throttled, t);
    }

    fn retry(
        &mut self,
        settings: &AwsAdaptiveSettings,
        after: &Ended,
        now_ms: u64,
        rng: &mut dyn rand::Rng,
    ) -> Result<(), String> {
        self.quota.retry(&settings.quota(), after, now_ms, rng)
    }

    fn retry_undone(&mut self, settings: &AwsAdaptiveSettings, after: &Ended) {
        self.quota.retry_undone(&settings.quota(), after);
    }

    /// The limiter off or on, and the send rate its bucket fills at (a second; while off it
    /// follows the answers but holds nothing back).
    fn report(&self, _settings: &AwsAdaptiveSettings, _now_ms: u64) -> Report {
        let enabled = self.limiter.is_some_and(|limiter| limiter.enabled);
        let level = self.limiter.map(|limiter| limiter.bucket.fill_rate);
        Report { state: Some(if enabled { "on" } else { "off" }), level, ceiling: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    /// botocore's `test_throttling.py`: K for W_max 10 is 1.9574338205844317; throttled at 8 a
    /// second at t = 1, the rate is 5.6 and K 1.8171205928321397; at t = K the curve is back
    /// at W_max.
    #[test]
    fn cubic_follows_botocores_numbers() {
        let settings = AwsAdaptiveSettings::default();
        let mut cubic = Cubic::new(&settings, 10.0, 0.0);
        assert!(close(cubic.k, 1.9574338205844317), "{}", cubic.k);
        assert!(close(cubic.success(&settings, cubic.k), 10.0));
        assert!(cubic.success(&settings, cubic.k / 2.0) <= 10.0);
        assert!(cubic.success(&settings, cubic.k * 2.0) >= 10.0);
        assert!(close(cubic.error(&settings, 8.0, 1.0), 5.6));
        assert_eq!((cubic.w_max, cubic.last_fail), (8.0, 1.0));
        assert!(close(cubic.k, 1.8171205928321397), "{}", cubic.k);
        let beta = AwsAdaptiveSettings { beta: 0.6, ..settings };
        let mut cubic = Cubic::new(&beta, 10.0, 0.0);
        assert!(close(cubic.error(&beta, 10.0, 1.0), 6.0));
        assert!(close(cubic.success(&beta, 1.0), 6.0));
    }

    /// botocore's `test_adaptive.py`, `TestRateClocker`: one record a second after the start
    /// measures 0.8 (the smoothing of 1 a second), one a second for 20 s about 1; six in the
    /// first half-second, measured when the next begins, 12 × 0.8.
    #[test]
    fn the_send_rate_is_measured_per_half_second_and_smoothed() {
        let settings = AwsAdaptiveSettings::default();
        let mut clocker = Clocker::new(0.0);
        assert!(close(clocker.record(&settings, 1.0), 0.8));
        let mut clocker = Clocker::new(0.0);
        (1..=20).for_each(|t| _ = clocker.record(&settings, f64::from(t)));
        assert!((clocker.measured_rate - 1.0).abs() < 1e-6, "{}", clocker.measured_rate);
        let mut clocker = Clocker::new(0.0);
        for t in [0.1, 0.2, 0.3, 0.4, 0.49] {
            clocker.record(&settings, t);
        }
        assert_eq!(clocker.measured_rate, 0.0, "grouped in the first bucket");
        assert!(close(clocker.record(&settings, 0.5), 12.0 * 0.8));
    }

    /// botocore's `ClientRateLimiter` on a fake clock (numbers from its own code): answers
    /// every 50 ms for 2 s leave the limiter off (the curve from 0 is at 0.4 × 2³ = 3.2 a
    /// second, but no attempt waits); a 429 at 2.05 s, sending at a measured 19.968 a second,
    /// turns it on at 0.7 × that, 13.9776, with 2.1226 tokens in the bucket; then first
    /// attempts wait too, the third 0.8774 / 13.9776 s, asking again until it is there; an answer a second later, the measured
    /// rate down to 5.5936, holds the rate at twice that, 11.1872.
    #[test]
    fn the_rate_limiter_is_off_until_a_throttle_then_cubic_within_twice_the_measured_rate() {
        let settings = AwsAdaptiveSettings::default();
        let mut aws = AwsAdaptive::default();
        assert_eq!(aws.delay(&settings, 1, 0), 0, "off");
        for i in 1..=40 {
            aws.ended(&settings, &Ended::success(1), i * 50);
            assert_eq!(aws.delay(&settings, 1, i * 50), 0, "off at {i}");
        }
        let limiter = aws.limiter.unwrap();
        assert!(!limiter.enabled && close(limiter.bucket.fill_rate, 3.2), "{limiter:?}");
        assert_eq!(aws.report(&settings, 2_000).state, Some("off"));
        aws.ended(&settings, &Ended::throttled(1), 2_050);
        let limiter = aws.limiter.unwrap();
        assert!(limiter.enabled);
        assert!(close(limiter.clocker.measured_rate, 19.968), "{limiter:?}");
        assert!(close(limiter.bucket.fill_rate, 13.9776), "{limiter:?}");
        assert!((limiter.bucket.capacity - 2.1225975).abs() < 1e-6, "{limiter:?}");
        assert!((limiter.cubic.k - 2.4648960591).abs() < 1e-9, "{limiter:?}");
        let report = aws.report(&settings, 2_050);
        assert_eq!(report.state, Some("on"));
        assert!(close(report.level.unwrap(), 13.9776));
        let delays: Vec<u64> = (0..3).map(|_| aws.delay(&settings, 1, 2_050)).collect();
        let third = ((1.0 - 0.1225975) / 13.9776 * 1000.0_f64).ceil() as u64;
        assert_eq!(delays, [0, 0, third], "two tokens there, the third to come");
        assert_eq!(third, 63);
        assert_eq!(aws.delay(&settings, 1, 2_050 + 30), 33, "not there yet: asked again, still owed");
        assert_eq!(aws.delay(&settings, 1, 2_050 + 63), 0, "there: taken");
        assert_eq!(aws.delay(&settings, 1, 2_050 + 63), 72, "the next a whole token away");
        aws.ended(&settings, &Ended::success(1), 3_050);
        let limiter = aws.limiter.unwrap();
        assert!(close(limiter.clocker.measured_rate, 5.5936), "{limiter:?}");
        assert!(close(limiter.bucket.fill_rate, 11.1872), "{limiter:?}");
    }
}

//! The fault-injectable downstream: its modes (healthy, flaky, slow, down, and the struggling
//! ones: throttled by a rate limit, overloaded past its capacity), the `Idempotency-Key` it requires, and the
//! idempotency contract it keeps (IETF draft "The Idempotency-Key HTTP Header Field", and
//! Stripe's contract): a key's first successful request applies the write once; a repeat with
//! the same body gets the stored answer back, flagged as a replay; a repeat with another body is
//! refused; a repeat while the first is still being processed is told to come back later.

mod capacity;
mod defence;
mod endpoint;
mod ledger;
mod pipeline;

use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};

use crate::domain::MessageKey;
use crate::invalid::Invalid;

pub use capacity::Gcra;
pub use defence::{
    AdmissionControlSettings, AimdSettings, Defences, Discipline, Dropped, Gradient2Settings,
    Kind as DefenceKind, LimitSettings,
};
pub use endpoint::{Clock, Endpoint, KeyChanges, LineView, Request};
pub use ledger::{BodyDigest, HeldKeys, KeyNaming, KeyRow, Ledger, LedgerCounts, Lookup, StoredResponse};
pub use pipeline::{Hints, Moved, Passage, Pipeline, Rate, Stages, Turn, Waiter, Work};

/// The longest latency any mode may be given, so a lab cannot hang for hours.
pub(crate) const MAX_LATENCY_MS: u64 = 60_000;
const MAX_RETRY_AFTER_S: u64 = 3_600;
const MAX_RATE_PER_S: f64 = 100_000.0;
/// The lowest throttled rate, as the lab's traffic has it: a rate of 1e-300 was taken and
/// answered `Retry-After: 18446744073709552`.
const MIN_RATE_PER_S: f64 = 0.01;
const MAX_BURST: u32 = 100_000;
pub(crate) const MAX_CAPACITY: u32 = 10_000;
pub(crate) const MAX_QUEUE: u32 = 100_000;
/// The longest a timed setting (`for_ms`) may last before the downstream goes back.
pub const MAX_FOR_MS: u64 = 60 * 60 * 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Answers 200 after `latency_ms`.
    Healthy,
    /// Fails a `failure_rate` share of new requests with 503 + `Retry-After`.
    Flaky,
    /// Applies the write at once but answers only after `slow_ms`, past the client's timeout.
    Slow,
    /// 503 + `Retry-After` to every new request; nothing is applied.
    Down,
    /// A rate limit shared by every caller: `rate_per_s` with bursts of `burst`; a request
    /// over it gets 429 + `Retry-After` and applies nothing.
    Throttled,
    /// `capacity` requests processed at once, each taking `latency_ms`; `queue` more wait in
    /// line (their work is done even if their client gave up); the rest get 503 at once.
    Overloaded,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Healthy => "healthy",
            Mode::Flaky => "flaky",
            Mode::Slow => "slow",
            Mode::Down => "down",
            Mode::Throttled => "throttled",
            Mode::Overloaded => "overloaded",
        }
    }

    /// Whether it keeps a line in front of its workers: only then do the defences (which act
    /// on it) apply.
    pub fn has_queue(self) -> bool {
        self == Mode::Overloaded
    }
}

/// The modes with a queue, in words, for the refusal of defences on another.
const MODES_WITH_A_QUEUE: &str = "only the overloaded mode has a queue";

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct DownstreamSettings {
    pub mode: Mode,
    pub latency_ms: [u64; 2],
    pub failure_rate: f64,
    pub slow_ms: [u64; 2],
    /// The `Retry-After` (seconds) sent with the down and flaky modes' 503s and the overloaded
    /// mode's sheds and drops; null sends none, so a client's own backoff shows.
    pub retry_after_s: Option<u64>,
    /// Throttled: requests allowed per second, sustained.
    pub rate_per_s: f64,
    /// Throttled: requests allowed at once after a quiet spell.
    pub burst: u32,
    /// Overloaded: requests processed at once.
    pub capacity: u32,
    /// Overloaded: requests that wait in line for a worker.
    pub queue: u32,
    /// Overloaded: the endpoint's own defences against overload; none by default.
    pub defences: Defences,
}

impl Default for DownstreamSettings {
    fn default() -> Self {
        DownstreamSettings {
            mode: Mode::Healthy,
            latency_ms: [60, 240],
            failure_rate: 0.5,
            slow_ms: [2_600, 3_500],
            retry_after_s: Some(1),
            rate_per_s: 10.0,
            burst: 5,
            capacity: 4,
            queue: 0,
            defences: Defences::default(),
        }
    }
}

/// A timed setting: when it runs out, at `at_ms` of lab time, the downstream goes back to
/// `to`, the settings it had before.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Revert {
    pub at_ms: u64,
    pub to: DownstreamSettings,
}

/// The downstream as the page and the store see it: its settings and, while a timed setting
/// lasts, when and to what it goes back.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DownstreamView {
    #[serde(flatten)]
    pub settings: DownstreamSettings,
    pub revert: Option<Revert>,
}

/// A partial update: absent fields keep their value.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DownstreamUpdate {
    pub mode: Option<Mode>,
    pub latency_ms: Option<[u64; 2]>,
    pub failure_rate: Option<f64>,
    pub slow_ms: Option<[u64; 2]>,
    /// `null` sends no `Retry-After`; absent keeps it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u64>)]
    pub retry_after_s: Option<Option<u64>>,
    pub rate_per_s: Option<f64>,
    pub burst: Option<u32>,
    pub capacity: Option<u32>,
    pub queue: Option<u32>,
    /// The overloaded mode's defences, whole (absent keeps them; on another mode they go).
    #[serde(default, deserialize_with = "crate::invalid::object::or_null")]
    pub defences: Option<Defences>,
    /// The new setting lasts this long, then the downstream goes back to what it was. An
    /// update without it ends a timed setting early, unless it names only `defences`: then the
    /// timed setting ends when it was to, and the defences stay after it.
    pub for_ms: Option<u64>,
}

/// A field given, as its value or `null` (`Some(None)`), told from one left out (`None`).
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

impl DownstreamSettings {
    /// The settings with `update` applied, or the first reason they would be unusable.
    pub fn updated(&self, update: &DownstreamUpdate) -> Result<DownstreamSettings, Invalid> {
        let invalid = |field: &str, detail: String| Err(Invalid::new(format!("downstream.{field}"), detail));
        let mode = update.mode.unwrap_or(self.mode);
        // A change to a mode without a queue, not naming defences, leaves them behind: they
        // mean nothing without its line.
        let defences = match update.defences {
            Some(defences) => defences,
            None if mode.has_queue() => self.defences,
            None => Defences::default(),
        };
        let next = DownstreamSettings {
            mode,
            latency_ms: update.latency_ms.unwrap_or(self.latency_ms),
            failure_rate: update.failure_rate.unwrap_or(self.failure_rate),
            slow_ms: update.slow_ms.unwrap_or(self.slow_ms),
            retry_after_s: update.retry_after_s.unwrap_or(self.retry_after_s),
            rate_per_s: update.rate_per_s.unwrap_or(self.rate_per_s),
            burst: update.burst.unwrap_or(self.burst),
            capacity: update.capacity.unwrap_or(self.capacity),
            queue: update.queue.unwrap_or(self.queue),
            defences,
        };
        for (name, [min, max]) in [("latency_ms", next.latency_ms), ("slow_ms", next.slow_ms)] {
            if min > max || max > MAX_LATENCY_MS {
                return invalid(
                    name,
                    format!("{name} must be [min, max] with min <= max <= {MAX_LATENCY_MS}"),
                );
            }
        }
        if !(0.0..=1.0).contains(&next.failure_rate) {
            return invalid("failure_rate", "failure_rate must be between 0 and 1".into());
        }
        if next.retry_after_s.is_some_and(|s| s > MAX_RETRY_AFTER_S) {
            return invalid("retry_after_s", format!("retry_after_s must be at most {MAX_RETRY_AFTER_S}"));
        }
        if !(MIN_RATE_PER_S..=MAX_RATE_PER_S).contains(&next.rate_per_s) {
            return invalid(
                "rate_per_s",
                format!(
                    "rate_per_s must be {MIN_RATE_PER_S} to {MAX_RATE_PER_S} requests a second: at the \
                     lowest, one in {} s, so the Retry-After it answers stays within hours",
                    1.0 / MIN_RATE_PER_S
                ),
            );
        }
        if !(1..=MAX_BURST).contains(&next.burst) {
            return invalid("burst", format!("burst must be 1 to {MAX_BURST}"));
        }
        if !(1..=MAX_CAPACITY).contains(&next.capacity) {
            return invalid("capacity", format!("capacity must be 1 to {MAX_CAPACITY}"));
        }
        if next.queue > MAX_QUEUE {
            return invalid("queue", format!("queue must be 0 to {MAX_QUEUE}"));
        }
        let d = next.defences;
        if let Some((name, detail)) = d.invalid() {
            return invalid(&format!("defences.{name}"), detail);
        }
        if !next.mode.has_queue() && d != Defences::default() {
            // Named by the first defence on, or as a whole when only its times were changed.
            let field =
                d.first_on().map_or("defences".to_owned(), |kind| format!("defences.{}", kind.field()));
            let detail = format!(
                "defences act on the line in front of the workers, and {MODES_WITH_A_QUEUE} (the {} mode has \
                 none): set mode to overloaded, or leave defences out",
                next.mode.as_str()
            );
            return invalid(&field, detail);
        }
        if update.for_ms.is_some_and(|ms| !(1..=MAX_FOR_MS).contains(&ms)) {
            return invalid("for_ms", format!("for_ms must be 1 to {MAX_FOR_MS}"));
        }
        Ok(next)
    }
}

/// A validated `Idempotency-Key`: 1 to 255 visible ASCII characters, with the form the ledger
/// holds it in (a UUID's 16 bytes, or the text), made once as the request is read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    text: String,
    held: MessageKey,
}

impl IdempotencyKey {
    pub const MAX_LEN: usize = 255;

    pub fn parse(raw: &str) -> Result<Self, String> {
        if raw.is_empty() || raw.len() > Self::MAX_LEN {
            return Err(format!("Idempotency-Key must be 1 to {} characters", Self::MAX_LEN));
        }
        if !raw.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err("Idempotency-Key must be visible ASCII without spaces".into());
        }
        Ok(IdempotencyKey { text: raw.to_owned(), held: MessageKey::from(raw) })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The key as the ledger holds it.
    pub fn held(&self) -> &MessageKey {
        &self.held
    }
}

/// What the downstream does with one request, decided atomically against the ledger.
#[derive(Debug)]
pub enum Decision {
    /// A repeat of a key that already succeeded: send the stored answer again.
    Replay(StoredResponse),
    /// The key's first request is still being processed (409).
    InProgress,
    /// The key was first used with another body (422).
    BodyMismatch,
    /// Refused before any work (503 + `Retry-After`); the key stays unused.
    Unavailable { retry_after_s: Option<u64> },
    /// The key is reserved; apply the write after `latency_ms`, then answer.
    Process { latency_ms: u64 },
    /// No latency to wait out: the write was applied in the same step as the check; answer
    /// once it is committed.
    Applied(StoredResponse),
    /// Slow mode: the write is already applied; the answer goes out after `answer_after_ms`.
    AppliedEarly { response: StoredResponse, answer_after_ms: u64 },
    /// A new key from outside, past a limit on the keys kept for outside callers (507).
    StorageFull { limit: &'static str },
    /// The key was applied at `applied_unix_ms` and is held cold: read its row from the store,
    /// give it to the ledger (`Ledger::recall`), and decide again. With no time, the ledger
    /// let older keys go: find the key's row by name (`Ledger::found`), and decide again with
    /// `Request::asked`.
    Recall { applied_unix_ms: Option<u64> },
}

/// Who is calling the endpoint, and whether a new key of theirs still fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// The lab's own client: never held to the limits on outside callers.
    Lab,
    /// Anyone else; `Err(limit)` when their new keys are over the named limit.
    Outside(Result<(), &'static str>),
}

/// Decides one request that got past the mode's gate (the rate limit, the workers). A new
/// key is reserved in the same step as the check, so two concurrent requests with one key
/// can never both apply it.
pub fn decide(
    ledger: &mut Ledger,
    settings: &DownstreamSettings,
    key: &IdempotencyKey,
    Request { digest, caller, worked, asked }: Request,
    Clock { now_ms, unix_ms }: Clock,
    rng: &mut impl Rng,
) -> Decision {
    match ledger.lookup(key, &digest) {
        Lookup::Done(response) => return Decision::Replay(response),
        Lookup::InProgress => return Decision::InProgress,
        Lookup::BodyMismatch => return Decision::BodyMismatch,
        Lookup::Stored { applied_unix_ms: None } if asked => {}
        Lookup::Stored { applied_unix_ms } => return Decision::Recall { applied_unix_ms },
        Lookup::New => {}
    }
    let unavailable = Decision::Unavailable { retry_after_s: settings.retry_after_s };
    let outside = matches!(caller, Caller::Outside(_));
    let full = match caller {
        Caller::Outside(Err(limit)) => Some(Decision::StorageFull { limit }),
        _ => None,
    };
    match settings.mode {
        Mode::Down => unavailable,
        Mode::Flaky if rng.random_bool(settings.failure_rate) => unavailable,
        _ if full.is_some() => full.expect("checked"),
        Mode::Healthy | Mode::Flaky | Mode::Throttled | Mode::Overloaded => {
            ledger.reserve(key, digest, outside);
            match if worked { 0 } else { sample(settings.latency_ms, rng) } {
                0 => Decision::Applied(ledger.complete(key, now_ms, unix_ms)),
                latency_ms => Decision::Process { latency_ms },
            }
        }
        Mode::Slow => {
            ledger.reserve(key, digest, outside);
            let response = ledger.complete(key, now_ms, unix_ms);
            // A request a worker already held (the mode changed while it waited) has waited.
            let answer_after_ms = if worked { 0 } else { sample(settings.slow_ms, rng) };
            Decision::AppliedEarly { response, answer_after_ms }
        }
    }
}

fn sample([min, max]: [u64; 2], rng: &mut impl Rng) -> u64 {
    rng.random_range(min..=max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use serde_json::json;

    /// `super::decide` with the request and the clock as pairs, for short tests.
    fn decide(
        ledger: &mut Ledger,
        settings: &DownstreamSettings,
        key: &IdempotencyKey,
        (digest, caller): (BodyDigest, Caller),
        (now_ms, unix_ms): (u64, u64),
        rng: &mut impl Rng,
    ) -> Decision {
        let request = Request { digest, caller, worked: false, asked: false };
        super::decide(ledger, settings, key, request, Clock { now_ms, unix_ms }, rng)
    }

    fn lab(body: &serde_json::Value) -> (BodyDigest, Caller) {
        (BodyDigest::of(body), Caller::Lab)
    }

    #[test]
    fn an_outside_caller_over_its_key_limit_gets_no_new_key_but_its_repeats() {
        let mut rng = StdRng::seed_from_u64(4);
        let mut ledger = Ledger::default();
        let healthy = DownstreamSettings::default();
        let (key, body) = (IdempotencyKey::parse("outside-1").unwrap(), json!({"n": 1}));
        let outside = (BodyDigest::of(&body), Caller::Outside(Ok(())));
        assert!(matches!(
            decide(&mut ledger, &healthy, &key, outside, (0, 0), &mut rng),
            Decision::Process { .. }
        ));
        assert_eq!(ledger.outside_keys(), 1);
        ledger.complete(&key, 1, 1);
        let full = (BodyDigest::of(&body), Caller::Outside(Err("max_outside_keys_per_lab")));
        let repeat = decide(&mut ledger, &healthy, &key, full, (2, 2), &mut rng);
        assert!(matches!(repeat, Decision::Replay(_)), "a repeat still gets its stored answer");
        let other = IdempotencyKey::parse("outside-2").unwrap();
        let refused = decide(&mut ledger, &healthy, &other, full, (3, 3), &mut rng);
        assert!(matches!(refused, Decision::StorageFull { limit: "max_outside_keys_per_lab" }));
        assert_eq!(ledger.outside_keys(), 1, "nothing was kept for the refused key");
        let mine = IdempotencyKey::parse("lab-1").unwrap();
        assert!(matches!(
            decide(&mut ledger, &healthy, &mine, lab(&body), (4, 4), &mut rng),
            Decision::Process { .. }
        ));
    }

    #[test]
    fn keys_must_be_short_visible_ascii() {
        assert!(IdempotencyKey::parse("order-42").is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(255)).is_ok());
        assert!(IdempotencyKey::parse("").is_err());
        assert!(IdempotencyKey::parse(&"k".repeat(256)).is_err());
        assert!(IdempotencyKey::parse("has space").is_err());
    }

    #[test]
    fn a_key_is_applied_once_and_then_replayed() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut ledger = Ledger::default();
        let healthy = DownstreamSettings::default();
        let key = IdempotencyKey::parse("k1").unwrap();
        let body = json!({"n": 1});
        assert!(matches!(
            decide(&mut ledger, &healthy, &key, lab(&body), (0, 0), &mut rng),
            Decision::Process { latency_ms: 60..=240 }
        ));
        assert!(matches!(
            decide(&mut ledger, &healthy, &key, lab(&body), (0, 0), &mut rng),
            Decision::InProgress
        ));
        let first = ledger.complete(&key, 5, 0);
        let Decision::Replay(again) = decide(&mut ledger, &healthy, &key, lab(&body), (9, 0), &mut rng)
        else {
            panic!("expected a replay")
        };
        assert_eq!(again, first);
        assert!(matches!(
            decide(&mut ledger, &healthy, &key, lab(&json!({"n": 2})), (9, 0), &mut rng),
            Decision::BodyMismatch
        ));
        assert_eq!(ledger.counts(), LedgerCounts { requests: 0, applied: 1, applied_twice: 0 });
    }

    #[test]
    fn with_no_latency_the_write_is_applied_in_the_decision() {
        let mut rng = StdRng::seed_from_u64(5);
        let mut ledger = Ledger::default();
        let instant = DownstreamSettings { latency_ms: [0, 0], ..Default::default() };
        let key = IdempotencyKey::parse("k").unwrap();
        let Decision::Applied(first) = decide(&mut ledger, &instant, &key, lab(&json!({})), (7, 0), &mut rng)
        else {
            panic!("applied at once")
        };
        let Decision::Replay(again) = decide(&mut ledger, &instant, &key, lab(&json!({})), (9, 0), &mut rng)
        else {
            panic!("then replayed")
        };
        assert_eq!(again, first);
        assert_eq!(ledger.counts().applied, 1);
    }

    #[test]
    fn down_refuses_without_touching_the_key() {
        let mut rng = StdRng::seed_from_u64(2);
        let mut ledger = Ledger::default();
        let down = DownstreamSettings { mode: Mode::Down, ..Default::default() };
        let key = IdempotencyKey::parse("k").unwrap();
        for _ in 0..3 {
            let decision = decide(&mut ledger, &down, &key, lab(&json!({})), (0, 0), &mut rng);
            assert!(matches!(decision, Decision::Unavailable { retry_after_s: Some(1) }));
        }
        assert_eq!(ledger.counts().applied, 0);
    }

    #[test]
    fn flaky_fails_about_its_failure_rate() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut ledger = Ledger::default();
        let flaky = DownstreamSettings { mode: Mode::Flaky, ..Default::default() };
        let failures = (0..2_000)
            .filter(|i| {
                let key = IdempotencyKey::parse(&format!("k{i}")).unwrap();
                let decision = decide(&mut ledger, &flaky, &key, lab(&json!({})), (0, 0), &mut rng);
                matches!(decision, Decision::Unavailable { .. })
            })
            .count();
        assert!((800..1_200).contains(&failures), "{failures} of 2000 failed");
    }

    #[test]
    fn settings_updates_are_validated() {
        let settings = DownstreamSettings::default();
        let bad_rate = DownstreamUpdate { failure_rate: Some(1.5), ..Default::default() };
        assert_eq!(settings.updated(&bad_rate).unwrap_err().field, "downstream.failure_rate");
        let inverted = DownstreamUpdate { latency_ms: Some([300, 10]), ..Default::default() };
        assert_eq!(settings.updated(&inverted).unwrap_err().field, "downstream.latency_ms");
        let down = DownstreamUpdate { mode: Some(Mode::Down), ..Default::default() };
        assert_eq!(settings.updated(&down).unwrap().mode, Mode::Down);
        for (update, field) in [
            (DownstreamUpdate { capacity: Some(0), ..Default::default() }, "capacity"),
            (DownstreamUpdate { rate_per_s: Some(0.0), ..Default::default() }, "rate_per_s"),
            (DownstreamUpdate { rate_per_s: Some(-3.0), ..Default::default() }, "rate_per_s"),
            (DownstreamUpdate { burst: Some(0), ..Default::default() }, "burst"),
            (DownstreamUpdate { for_ms: Some(MAX_FOR_MS + 1), ..Default::default() }, "for_ms"),
        ] {
            let refused = settings.updated(&update).unwrap_err();
            assert!(refused.detail.contains(field), "{field}: {refused}");
            assert_eq!(refused.field, format!("downstream.{field}"));
        }
    }
}

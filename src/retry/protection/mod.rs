//! Client protections: what may stop an attempt or a retry before it is sent. Each is a small
//! state machine in a file of its own behind one trait, `Protection`, fed the lab's time and
//! the message's seeded random stream, in the shape of tower's `retry::budget::TpsBudget`
//! (`deposit`, `withdraw`). The policy names them through `ProtectionSettings`, a closed enum
//! tagged by `kind` that serialises as `{"kind": "token_bucket", ...}` and dispatches to the
//! protection's state (`Guard`). Each kind is named once, in the `kinds!` table below, which
//! makes the enum, the guard, the dispatch and `ProtectionKind` (its name and words); each
//! kind's file holds its source, rule, defaults, ranges (`KindSettings::check`) and words.
//!
//! Per client or shared is a matter of construction, as tower's `ConcurrencyLimit::new` and
//! `new_shared` are: a client holds a `Handle` on each guard; `Handle::new` makes one for that
//! client alone, and cloning a handle hands the same guard to another client.
//!
//! The policy's own `breaker` and `retry_budget` fields are protections too, kept where they
//! were so that stored policies read and write as before: each client holds its own (a
//! budget's window counts first attempts even while the policy has no budget, so one put in
//! mid-run starts from the last 10 s); the client asks them with the listed ones, through the
//! same trait, in one order (`client::ORDER`). Pure: no I/O, no clock of its own.

mod breaker;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub use breaker::{Breaker, BreakerAnswer, BreakerSettings, BreakerState, Refused};
pub use budget::BUDGET_WINDOW_MS;
pub use grpc_hedging::{
    AllFailed, Answer, HedgeRound, MAX_HEDGED_ATTEMPTS, MAX_NON_FATAL_STATUSES, Settled, Statuses,
};
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::invalid::Invalid;
use crate::retry::Wait;

/// The most protections a policy may list, besides its `breaker` and `retry_budget`.
pub const MAX_PROTECTIONS: usize = 4;

/// How a sent attempt ended, as the protections hear of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ended {
    /// Its number in its round (1 is a new request).
    pub n: u32,
    /// Answered 2xx.
    pub ok: bool,
    /// It says the downstream is unhealthy: a 5xx, 408 or 429, a timeout, no connection.
    pub failed: bool,
    /// No answer came within the client's timeout.
    pub timed_out: bool,
    /// Answered 429: a throttling answer (the AWS SDKs price and wait for these apart).
    pub throttled: bool,
    /// For a retry: the failure it followed had timed out (what the retry cost, to some).
    pub after_timeout: bool,
    /// For a retry: the failure it followed was a throttling answer.
    pub after_throttled: bool,
    /// The answer's HTTP status, when one came (hedging's non-fatal statuses are listed).
    pub status: Option<u16>,
    /// The answer carried a pushback not to retry (gRFC A6 counts it as a failure).
    pub pushed_back: bool,
    /// The answer's pushback named a wait, in ms (a hedge waits it before the next goes).
    pub pushback_ms: Option<u32>,
}

impl Ended {
    /// Attempt `n` failed with an answer.
    pub fn failure(n: u32) -> Self {
        Ended { n, failed: true, ..Ended::default() }
    }

    /// Attempt `n` timed out.
    pub fn timeout(n: u32) -> Self {
        Ended { timed_out: true, ..Ended::failure(n) }
    }

    /// Attempt `n` was answered 429.
    pub fn throttled(n: u32) -> Self {
        Ended { throttled: true, ..Ended::failure(n) }
    }

    /// Attempt `n` was answered 2xx.
    pub fn success(n: u32) -> Self {
        Ended { n, ok: true, ..Ended::default() }
    }
}

/// One protection's rule. Every method has the protection's settings and the lab's time;
/// those that may draw (a probabilistic refusal) have the message's random stream.
pub trait Protection: Default {
    type Settings;

    /// A fresh state for these settings (most start from nothing; a token bucket starts full).
    fn fresh(_settings: &Self::Settings) -> Self {
        Self::default()
    }

    /// May attempt `n` of a message be sent now? When not, says why: the attempt fails fast,
    /// unsent, as the breaker's short circuit does.
    fn gate(
        &mut self,
        _settings: &Self::Settings,
        _n: u32,
        _now_ms: u64,
        _rng: &mut dyn Rng,
    ) -> Result<(), String> {
        Ok(())
    }

    /// Attempt `n` was sent (the first attempt of a message is a new request).
    fn sent(&mut self, _settings: &Self::Settings, _n: u32, _now_ms: u64) {}

    /// How long attempt `n`, which every protection let go, must wait before it is sent, in
    /// ms: 0 when it may go now (a client-side rate limiter took its token), else the time
    /// to sleep before asking again.
    fn delay(&mut self, _settings: &Self::Settings, _n: u32, _now_ms: u64) -> u64 {
        0
    }

    /// A sent attempt ended.
    fn ended(&mut self, _settings: &Self::Settings, _ended: &Ended, _now_ms: u64) {}

    /// May a retry follow the failed attempt? Counts it when so; when not, says why in words
    /// for the trace and the dead letter ("a retry takes 1 token, the bucket has 0.4").
    /// `after` is the failed attempt.
    fn retry(
        &mut self,
        _settings: &Self::Settings,
        _after: &Ended,
        _now_ms: u64,
        _rng: &mut dyn Rng,
    ) -> Result<(), String> {
        Ok(())
    }

    /// The wait before the retry after `after`, when the protection sets it itself (the AWS
    /// 2026 mode waits by the kind of failure); `None` leaves it to the policy's backoff.
    /// `retry_after_s` is the failed answer's `Retry-After`.
    fn wait(
        &self,
        _settings: &Self::Settings,
        _after: &Ended,
        _retry_after_s: Option<u64>,
        _rng: &mut dyn Rng,
    ) -> Option<Wait> {
        None
    }

    /// Every attempt in flight was cut off (the client died): none of them will end.
    fn interrupted(&mut self, _settings: &Self::Settings) {}

    /// This one let attempt `n` go, but a protection asked after it refused it: the attempt is
    /// not sent, so what the gate handed out (a half-open breaker's probe) is given back.
    fn gate_undone(&mut self, _settings: &Self::Settings, _n: u32) {}

    /// This one allowed the retry after `after`, but a protection asked after it refused it:
    /// the retry is not made, so what it took (tokens, a place in a window) is given back.
    fn retry_undone(&mut self, _settings: &Self::Settings, _after: &Ended) {}

    /// Attempt `n` was sent and then cancelled before its answer (a hedged round settled while
    /// it was out): it will never end. What it holds while in flight (a permit, a place among
    /// the active requests, a half-open probe) is given back; it counts as neither a success
    /// nor a failure (gRFC A6: a hedge cancelled because another settled the call is no failure).
    fn cancelled(&mut self, _settings: &Self::Settings, _n: u32) {}

    /// Its live state, for the snapshot and the protection lane.
    fn report(&self, settings: &Self::Settings, now_ms: u64) -> Report;
}

/// A protection's live state as the page draws it: a named state (the breaker's `open`) and a
/// level with its ceiling (the tokens left of a bucket).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, utoipa::ToSchema)]
pub struct Report {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<f64>,
}

/// Whether a protection is each client's own or one for all of a lab's clients.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Each client has its own, as the libraries do.
    #[default]
    PerClient,
    /// One shared by all the lab's clients.
    Shared,
}

/// A protection the policy lists: its kind and settings, and its scope.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProtectionSpec {
    #[serde(flatten)]
    pub settings: ProtectionSettings,
    #[serde(default)]
    pub scope: Scope,
}

/// Every protection a policy may list, each named once: its variant, its `kind` on the wire,
/// its file, its settings and its state. From this one table come the settings enum
/// (`ProtectionSettings`, tagged by `kind`), the kind (`ProtectionKind`, with its name and
/// words), the guard (`Guard`, settings with state) and the dispatch to each `Protection`. A
/// new protection is its file and one line here.
macro_rules! kinds {
    ($(
        $(#[$doc:meta])*
        $variant:ident = $tag:tt in $module:ident: $settings:ident, $state:ident;
    )*) => {
        $(
            mod $module;
            pub use $module::{$settings, $state};
        )*

        /// The protections there are, tagged by `kind`.
        #[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
        #[serde(tag = "kind")]
        pub enum ProtectionSettings {
            $(
                $(#[$doc])*
                #[serde(rename = $tag)]
                $variant($settings),
            )*
        }

        /// A kind of protection, as `kind` names it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ProtectionKind {
            $($variant,)*
        }

        impl ProtectionKind {
            /// Every kind, in the table's order.
            pub const ALL: &'static [ProtectionKind] = &[$(ProtectionKind::$variant,)*];

            /// The name `kind` gives it on the wire, in a dead letter's cause and in the counts.
            pub fn name(self) -> &'static str {
                match self {
                    $(ProtectionKind::$variant => $tag,)*
                }
            }

            /// The protection in words, as its own file says them.
            pub fn words(self) -> &'static str {
                match self {
                    $(ProtectionKind::$variant => <$settings as KindSettings>::WORDS,)*
                }
            }
        }

        impl ProtectionSettings {
            /// Its kind.
            pub fn kind(&self) -> ProtectionKind {
                match self {
                    $(ProtectionSettings::$variant(_) => ProtectionKind::$variant,)*
                }
            }

            /// A fresh state for these settings.
            fn fresh(self) -> Guard {
                match self {
                    $(ProtectionSettings::$variant(s) => Guard::$variant(s, <$state as Protection>::fresh(&s)),)*
                }
            }

            /// The first parameter out of its range, and the range, as its own file checks it.
            fn check(&self) -> Result<(), OutOfRange> {
                match self {
                    $(ProtectionSettings::$variant(s) => s.check(),)*
                }
            }
        }

        /// A protection's settings with its state: the closed set of kinds, each dispatched to
        /// its own `Protection`.
        #[derive(Debug, Clone)]
        pub enum Guard {
            $($variant($settings, $state),)*
        }

        impl Guard {
            pub fn settings(&self) -> ProtectionSettings {
                match *self {
                    $(Guard::$variant(s, _) => ProtectionSettings::$variant(s),)*
                }
            }

            pub fn gate(&mut self, n: u32, now_ms: u64, rng: &mut dyn Rng) -> Result<(), String> {
                match self {
                    $(Guard::$variant(s, p) => p.gate(s, n, now_ms, rng),)*
                }
            }

            pub fn delay(&mut self, n: u32, now_ms: u64) -> u64 {
                match self {
                    $(Guard::$variant(s, p) => p.delay(s, n, now_ms),)*
                }
            }

            pub fn sent(&mut self, n: u32, now_ms: u64) {
                match self {
                    $(Guard::$variant(s, p) => p.sent(s, n, now_ms),)*
                }
            }

            pub fn ended(&mut self, ended: &Ended, now_ms: u64) {
                match self {
                    $(Guard::$variant(s, p) => p.ended(s, ended, now_ms),)*
                }
            }

            pub fn retry(&mut self, after: &Ended, now_ms: u64, rng: &mut dyn Rng) -> Result<(), String> {
                match self {
                    $(Guard::$variant(s, p) => p.retry(s, after, now_ms, rng),)*
                }
            }

            pub fn wait(&self, after: &Ended, retry_after_s: Option<u64>, rng: &mut dyn Rng) -> Option<Wait> {
                match self {
                    $(Guard::$variant(s, p) => p.wait(s, after, retry_after_s, rng),)*
                }
            }

            pub fn interrupted(&mut self) {
                match self {
                    $(Guard::$variant(s, p) => p.interrupted(s),)*
                }
            }

            pub fn gate_undone(&mut self, n: u32) {
                match self {
                    $(Guard::$variant(s, p) => p.gate_undone(s, n),)*
                }
            }

            pub fn retry_undone(&mut self, after: &Ended) {
                match self {
                    $(Guard::$variant(s, p) => p.retry_undone(s, after),)*
                }
            }

            pub fn cancelled(&mut self, n: u32) {
                match self {
                    $(Guard::$variant(s, p) => p.cancelled(s, n),)*
                }
            }

            pub fn report(&self, now_ms: u64) -> Report {
                match self {
                    $(Guard::$variant(s, p) => p.report(s, now_ms),)*
                }
            }
        }
    };
}

kinds! {
    /// Retries within a ratio of first attempts over 10 s (as the policy's `retry_budget`).
    RetryBudget = "retry_budget" in budget: BudgetSettings, RetryBudget;
    /// Brooker's retry token bucket.
    TokenBucket = "token_bucket" in token_bucket: TokenBucketSettings, TokenBucket;
    /// gRPC's retry throttling (gRFC A6).
    Grpc = "grpc" in grpc: GrpcSettings, GrpcThrottle;
    /// The SRE book's client-side adaptive throttling and per-client retry budget.
    Sre = "sre" in sre: SreSettings, AdaptiveThrottle;
    /// The AWS SDKs' retry quota (standard mode).
    AwsStandard = "aws_standard" in aws: AwsQuotaSettings, AwsQuota;
    /// A breaker on the failure ratio over a window (Polly v8's circuit breaker).
    RatioBreaker = "ratio_breaker" in ratio_breaker: RatioBreakerSettings, RatioBreaker;
    /// Envoy's retry budget: retries outstanding within a share of the active requests.
    Envoy = "envoy" in envoy: EnvoySettings, EnvoyBudget;
    /// The AWS SDKs' standard mode as of 2026 (mode version 2.1): its quota and its waits.
    AwsStandard2026 = "aws_standard_2026" in aws_2026: Aws2026Settings, Aws2026;
    /// The AWS SDKs' adaptive mode: the standard quota and a client-side rate limiter.
    AwsAdaptive = "aws_adaptive" in aws_adaptive: AwsAdaptiveSettings, AwsAdaptive;
    /// gRPC's hedging (gRFC A6 `hedgingPolicy`), throttled by gRPC's tokens.
    GrpcHedging = "grpc_hedging" in grpc_hedging: GrpcHedgingSettings, GrpcHedging;
    /// resilience4j's semaphore bulkhead: at most so many attempts in flight, the rest refused.
    Bulkhead = "bulkhead" in bulkhead: BulkheadSettings, SemaphoreBulkhead;
}

impl fmt::Display for ProtectionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl ProtectionKind {
    /// The kind `name` names; `None` for a name no protection has (nothing falls back).
    pub fn parse(name: &str) -> Option<ProtectionKind> {
        ProtectionKind::ALL.iter().copied().find(|kind| kind.name() == name)
    }
}

/// A parameter out of its range, and the range in words (`size must be 1 to 10000`).
pub type OutOfRange = (&'static str, String);

/// What one kind's settings say of themselves, in the kind's own file: its words and its ranges.
pub trait KindSettings {
    /// The protection in words, as the page and a dead letter's cause name it.
    const WORDS: &'static str;

    /// The first parameter out of its range, and the range.
    fn check(&self) -> Result<(), OutOfRange>;
}

/// `Ok` when `value` of `param` is within `low..=high`; else the range in words.
fn within(param: &'static str, value: f64, low: f64, high: f64) -> Result<(), OutOfRange> {
    match (low..=high).contains(&value) {
        true => Ok(()),
        false => Err((param, format!("{param} must be {low} to {high}"))),
    }
}

/// What stopped an attempt or a retry: the policy's breaker, or a protection of a kind (the
/// policy's `retry_budget` refuses as the listed one does, under its kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refuser {
    Breaker,
    Kind(ProtectionKind),
}

impl Refuser {
    /// Its name in the counts and the trace: `breaker`, or the kind's.
    pub fn name(self) -> &'static str {
        match self {
            Refuser::Breaker => "breaker",
            Refuser::Kind(kind) => kind.name(),
        }
    }
}

impl fmt::Display for Refuser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl ProtectionSpec {
    /// Reads the `i`-th protection a policy lists, naming the field at fault
    /// (`policy.protections[0].kind`, `policy.protections[0].size`) when it is unusable.
    pub fn read(i: usize, value: &serde_json::Value) -> Result<ProtectionSpec, Invalid> {
        let at = format!("policy.protections[{i}]");
        let Some(object) = value.as_object() else {
            return Err(Invalid::new(at, "a protection is an object with its kind"));
        };
        if object.get("kind").and_then(|k| k.as_str()).and_then(ProtectionKind::parse).is_none() {
            let kinds: Vec<&str> = ProtectionKind::ALL.iter().map(|kind| kind.name()).collect();
            let kinds = kinds.join(", ");
            return Err(Invalid::new(format!("{at}.kind"), format!("kind must be one of: {kinds}")));
        }
        if object.get("scope").is_some_and(|scope| scope != "per_client" && scope != "shared") {
            return Err(Invalid::new(format!("{at}.scope"), "scope must be per_client or shared"));
        }
        let spec: ProtectionSpec = serde_json::from_value(value.clone()).map_err(|e| {
            // serde names an unknown or missing parameter between backticks; a value of the
            // wrong type ("expected f64") it does not name, so each is read alone with the kind
            // until one fails.
            let message = e.to_string();
            let named = message.split('`').nth(1).filter(|p| object.contains_key(*p));
            let fails_alone = |(param, value): &(&String, &serde_json::Value)| {
                let one = serde_json::json!({ "kind": object["kind"], *param: value });
                *param != "kind" && serde_json::from_value::<ProtectionSpec>(one).is_err()
            };
            let param = named.or_else(|| object.iter().find(fails_alone).map(|(param, _)| param.as_str()));
            match param {
                Some(p) => Invalid::new(format!("{at}.{p}"), format!("{p}: {message}")),
                None => Invalid::new(at.clone(), message),
            }
        })?;
        spec.settings.check().map_err(|(param, detail)| Invalid::new(format!("{at}.{param}"), detail))?;
        Ok(spec)
    }
}

/// A client's hold on a guard: its own (`new`) or one it shares (a clone of another's).
#[derive(Debug, Clone)]
pub struct Handle(Arc<Mutex<Guard>>);

impl Handle {
    /// A guard for one client alone.
    pub fn new(settings: ProtectionSettings) -> Self {
        Handle(Arc::new(Mutex::new(settings.fresh())))
    }

    /// The guard. The lab's lock is held around every call, so this one is never contended;
    /// it exists so that clients can share a guard.
    pub fn lock(&self) -> MutexGuard<'_, Guard> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether two handles hold the same guard.
    pub fn same(&self, other: &Handle) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// The listed protections as a lab's clients hold them: the shared ones made once, here; the
/// per-client ones made for each client that asks.
#[derive(Debug, Clone, Default)]
pub struct Guards {
    specs: Vec<ProtectionSpec>,
    shared: Vec<Option<Handle>>,
}

impl Guards {
    pub fn new(specs: &[ProtectionSpec]) -> Self {
        let shared =
            specs.iter().map(|spec| (spec.scope == Scope::Shared).then(|| Handle::new(spec.settings)));
        Guards { specs: specs.to_vec(), shared: shared.collect() }
    }

    /// What they were made for.
    pub fn specs(&self) -> &[ProtectionSpec] {
        &self.specs
    }

    /// One client's handles, in the policy's order: its own guard for each per-client
    /// protection, the one for all for each shared one.
    pub fn for_client(&self) -> Vec<Handle> {
        let handles = self.specs.iter().zip(&self.shared);
        handles.map(|(spec, shared)| shared.clone().unwrap_or_else(|| Handle::new(spec.settings))).collect()
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    fn bucket() -> ProtectionSpec {
        serde_json::from_str(r#"{"kind": "token_bucket"}"#).unwrap()
    }

    /// The table gives each kind one name: every name reads as the protection its serde tag
    /// says, writes back under that tag, and the kind gives it again; an unknown name reads as
    /// no kind at all.
    #[test]
    fn every_kind_s_name_is_its_serde_tag() {
        for &kind in ProtectionKind::ALL {
            let name = kind.name();
            let spec: ProtectionSpec = serde_json::from_value(serde_json::json!({ "kind": name }))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(spec.settings.kind(), kind);
            assert_eq!(serde_json::to_value(spec.settings).unwrap()["kind"], name);
            assert_eq!(ProtectionKind::parse(name), Some(kind));
            assert_eq!(Handle::new(spec.settings).lock().settings(), spec.settings, "its guard keeps it");
            assert!(!kind.words().is_empty(), "{name} has words");
        }
        let mut names: Vec<&str> = ProtectionKind::ALL.iter().map(|kind| kind.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ProtectionKind::ALL.len(), "a name listed twice");
        assert_eq!(ProtectionKind::parse("breaker"), None, "the policy's breaker is no listed kind");
        assert_eq!(ProtectionKind::parse("nope"), None);
    }

    #[test]
    fn a_protection_reads_and_writes_tagged_by_its_kind_with_its_sources_defaults() {
        let spec = bucket();
        assert_eq!(spec.scope, Scope::PerClient);
        assert_eq!(spec.settings, ProtectionSettings::TokenBucket(TokenBucketSettings::default()));
        let written = serde_json::to_value(spec).unwrap();
        assert_eq!(
            written,
            serde_json::json!({"kind": "token_bucket", "deposit": 0.1, "size": 5.0, "cost": 1.0,
                "scope": "per_client"})
        );
        let shared: ProtectionSpec =
            serde_json::from_str(r#"{"kind": "retry_budget", "scope": "shared", "ratio": 0.5}"#).unwrap();
        assert_eq!(shared.scope, Scope::Shared);
        assert_eq!(
            shared.settings,
            ProtectionSettings::RetryBudget(BudgetSettings { ratio: 0.5, min_per_s: 10.0 })
        );
        for bad in [r#"{"kind": "nope"}"#, r#"{"kind": "token_bucket", "sise": 3}"#, r#"{"size": 3}"#] {
            assert!(serde_json::from_str::<ProtectionSpec>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_unusable_protection_names_its_field() {
        let field = |json: &str| ProtectionSpec::read(2, &serde_json::from_str(json).unwrap()).unwrap_err();
        let unknown = field(r#"{"kind": "nope"}"#);
        assert_eq!(unknown.field, "policy.protections[2].kind");
        let names: Vec<&str> = ProtectionKind::ALL.iter().map(|kind| kind.name()).collect();
        assert_eq!(unknown.detail, format!("kind must be one of: {}", names.join(", ")));
        assert!(unknown.detail.contains("retry_budget, token_bucket, grpc, sre"), "in the table's order");
        assert_eq!(field(r#"{"size": 3}"#).field, "policy.protections[2].kind");
        let scope = field(r#"{"kind": "token_bucket", "scope": "global"}"#);
        assert_eq!(
            (scope.field.as_str(), scope.detail.as_str()),
            ("policy.protections[2].scope", "scope must be per_client or shared")
        );
        let range = field(r#"{"kind": "token_bucket", "size": 0.5}"#);
        assert_eq!(
            (range.field.as_str(), range.detail.as_str()),
            ("policy.protections[2].size", "size must be 1 to 10000")
        );
        assert_eq!(field(r#"{"kind": "retry_budget", "ratio": 2}"#).field, "policy.protections[2].ratio");
        let beta = field(r#"{"kind": "aws_adaptive", "beta": 1.5}"#);
        assert_eq!(
            (beta.field.as_str(), beta.detail.as_str()),
            ("policy.protections[2].beta", "beta must be 0.01 to 0.99")
        );
        let cost = field(r#"{"kind": "aws_standard_2026", "initial_retry_tokens": 10}"#);
        assert_eq!(
            (cost.field.as_str(), cost.detail.as_str()),
            ("policy.protections[2].retry_cost", "retry_cost must be 1 to 10")
        );
        let unknown = field(r#"{"kind": "aws_standard_2026", "timeout_retry_cost": 10}"#);
        assert_eq!(
            unknown.field, "policy.protections[2].timeout_retry_cost",
            "not a parameter of the 2026 mode"
        );
        assert_eq!(field(r#"{"kind": "token_bucket", "sise": 3}"#).field, "policy.protections[2].sise");
        // A value of the wrong type is named down to its parameter too (issue 61).
        let typed = field(r#"{"kind": "token_bucket", "cost": "one"}"#);
        assert_eq!(
            (typed.field.as_str(), typed.detail.starts_with("cost: ")),
            ("policy.protections[2].cost", true)
        );
        assert_eq!(field("3").field, "policy.protections[2]");
        let fine = ProtectionSpec::read(0, &serde_json::json!({"kind": "token_bucket", "scope": "shared"}));
        assert_eq!(fine.unwrap().scope, Scope::Shared);
    }

    #[test]
    fn per_client_guards_are_each_clients_own_and_a_shared_one_is_one_for_all() {
        let shared = ProtectionSpec { scope: Scope::Shared, ..bucket() };
        let guards = Guards::new(&[bucket(), shared]);
        let handles: Vec<Vec<Handle>> = (0..3).map(|_| guards.for_client()).collect();
        assert!(!handles[0][0].same(&handles[1][0]));
        assert!(handles[0][1].same(&handles[1][1]) && handles[1][1].same(&handles[2][1]));
        // A retry through one client's shared handle spends the bucket the others see.
        let mut rng = StdRng::seed_from_u64(1);
        handles[0][1].lock().retry(&Ended::failure(1), 0, &mut rng).unwrap();
        assert_eq!(handles[2][1].lock().report(0).level, Some(4.0));
        assert_eq!(handles[2][0].lock().report(0).level, Some(5.0));
    }
}

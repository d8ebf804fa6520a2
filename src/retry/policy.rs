//! The lab's retry policy: which backoff formula, how many attempts, how long each may take,
//! and how a `Retry-After` is treated. Updates are partial and validated before they apply.

use serde::{Deserialize, Serialize};

use serde::Deserializer;

use super::protection::{
    GrpcHedgingSettings, MAX_PROTECTIONS, ProtectionKind, ProtectionSettings, ProtectionSpec,
};
use super::{Backoff, BreakerSettings, BudgetSettings, Jitter, RetryAfterMode, RetryAfterRule};
use crate::invalid::Invalid;

/// Upper bounds that keep a policy inside what a lab can show (and a person can wait for).
const MAX_ATTEMPTS: u32 = 20;
const MAX_DELAY_MS: u64 = 10 * 60 * 1000;
const MAX_TIMEOUT_MS: u64 = 60 * 1000;
const MAX_QUARANTINE_AFTER: u32 = 100;
const MAX_MULTIPLIER: f64 = 10.0;
const MAX_TOTAL_MS: u64 = 60 * 60 * 1000;
const MAX_FAILURE_THRESHOLD: u32 = 1_000;
const MAX_PROBES: u32 = 100;
const MAX_MIN_PER_S: f64 = 10_000.0;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct Policy {
    pub jitter: Jitter,
    pub base_ms: u64,
    pub cap_ms: u64,
    /// Attempts per round, the first included; after the last, the message is dead-lettered.
    pub max_attempts: u32,
    /// Whole-request deadline of one attempt; running past it is a failed attempt.
    pub timeout_ms: u64,
    pub honor_retry_after: bool,
    pub retry_after_cap_ms: u64,
    /// A message dead-lettered in its N-th replay (or later) is quarantined: replaying it
    /// again without a diagnosis would only fail again.
    pub quarantine_after: u32,
    /// Each nominal delay is this many times the one before (1: a fixed interval).
    pub multiplier: f64,
    /// A round stops retrying when its next wait would end later than this many ms after its
    /// first attempt started; 0 for no time budget.
    pub max_total_ms: u64,
    /// The client's circuit breaker, shared by all its messages; `None` for none.
    pub breaker: Option<BreakerSettings>,
    /// The client's retry budget over a sliding 10 s window; `None` for none.
    pub retry_budget: Option<BudgetSettings>,
    pub retry_after_mode: RetryAfterMode,
    /// Seeds the jitter, so a run can be repeated draw for draw; `None` draws fresh
    /// randomness.
    pub seed: Option<u64>,
    /// How many independent clients run this policy, as the instances of a scaled-out service
    /// would: each message belongs to one (round-robin), and each has its own breaker, retry
    /// budget and jitter stream. 1 is one client for every message.
    pub clients: u32,
    /// Protections beyond the `breaker` and the `retry_budget`, each tagged by its `kind`,
    /// per client or shared (`scope`); at most `MAX_PROTECTIONS`. Left out when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub protections: Vec<ProtectionSpec>,
    /// The most `"additive"` jitter adds to a wait, in ms (got's `noise`: 100).
    #[serde(skip_serializing_if = "is_default_jitter_ms")]
    pub jitter_ms: u64,
    /// The most `"proportional"` jitter adds, as a share of the wait (axios-retry's: 0.2).
    #[serde(skip_serializing_if = "is_default_jitter_ratio")]
    pub jitter_ratio: f64,
    /// The first retry goes at once; the backoff applies from the second (urllib3's `Retry`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub first_retry_at_once: bool,
    /// The statuses an answer is retried on, in place of the lab's own rule (408, 409, 429,
    /// 5xx); any other answer but a 2xx ends the round. `None`: the lab's rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_statuses: Option<Vec<u16>>,
}

const DEFAULT_JITTER_MS: u64 = 100;
const DEFAULT_JITTER_RATIO: f64 = 0.2;
const MAX_JITTER_RATIO: f64 = 10.0;
const MAX_RETRY_STATUSES: usize = 500;

// Left out of the JSON at their defaults, so a policy that never uses them reads as before.
fn is_default_jitter_ms(ms: &u64) -> bool {
    *ms == DEFAULT_JITTER_MS
}

fn is_default_jitter_ratio(ratio: &f64) -> bool {
    *ratio == DEFAULT_JITTER_RATIO
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            jitter: Jitter::Equal,
            base_ms: 800,
            cap_ms: 30_000,
            max_attempts: 4,
            timeout_ms: 2_000,
            honor_retry_after: true,
            retry_after_cap_ms: 30_000,
            quarantine_after: 3,
            multiplier: 2.0,
            max_total_ms: 0,
            breaker: None,
            retry_budget: None,
            retry_after_mode: RetryAfterMode::Floor,
            seed: None,
            clients: 1,
            protections: Vec::new(),
            jitter_ms: DEFAULT_JITTER_MS,
            jitter_ratio: DEFAULT_JITTER_RATIO,
            first_retry_at_once: false,
            retry_statuses: None,
        }
    }
}

/// The policy as the page receives it: its settings and, for each wait, the band the
/// jitter draws from, computed here so the page never re-implements the formulas.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct PolicyView {
    #[serde(flatten)]
    pub policy: Policy,
    /// One per wait: after attempt 1 .. `max_attempts - 1`.
    pub bands: Vec<WaitBand>,
}

/// The nominal delay of the wait after attempt `n` and the band its jitter draws from. For
/// decorrelated jitter, whose band depends on the previous wait, the widest it can reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct WaitBand {
    pub n: u32,
    pub nominal_ms: u64,
    pub low_ms: u64,
    pub high_ms: u64,
}

/// A partial update: absent fields keep their value.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyUpdate {
    pub jitter: Option<Jitter>,
    pub base_ms: Option<u64>,
    pub cap_ms: Option<u64>,
    pub max_attempts: Option<u32>,
    pub timeout_ms: Option<u64>,
    pub honor_retry_after: Option<bool>,
    pub retry_after_cap_ms: Option<u64>,
    pub quarantine_after: Option<u32>,
    pub multiplier: Option<f64>,
    pub max_total_ms: Option<u64>,
    /// `null` turns the breaker off.
    #[serde(default, deserialize_with = "crate::invalid::object::present_or_null")]
    #[schema(value_type = Option<BreakerSettings>)]
    pub breaker: Option<Option<BreakerSettings>>,
    /// `null` turns the retry budget off.
    #[serde(default, deserialize_with = "crate::invalid::object::present_or_null")]
    #[schema(value_type = Option<BudgetSettings>)]
    pub retry_budget: Option<Option<BudgetSettings>>,
    pub retry_after_mode: Option<RetryAfterMode>,
    /// `null` goes back to fresh randomness.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u64>)]
    pub seed: Option<Option<u64>>,
    /// 1 to `--max-clients`.
    pub clients: Option<u32>,
    /// The whole list; `[]` for none. Read as JSON first, so that an unusable one is named by
    /// its field (`policy.protections[0].kind`).
    #[serde(default, deserialize_with = "crate::invalid::unique_keys::list_or_absent")]
    #[schema(value_type = Option<Vec<ProtectionSpec>>)]
    pub protections: Option<Vec<serde_json::Value>>,
    /// 0 to `cap_ms`'s limit (600,000).
    pub jitter_ms: Option<u64>,
    /// 0 to 10.
    pub jitter_ratio: Option<f64>,
    pub first_retry_at_once: Option<bool>,
    /// 100 to 599, at most 500 of them; `null` goes back to the lab's own rule.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<u16>>)]
    pub retry_statuses: Option<Option<Vec<u16>>>,
}

impl PolicyUpdate {
    /// This update with every field `over` gives written over it.
    pub fn then(self, over: PolicyUpdate) -> PolicyUpdate {
        PolicyUpdate {
            jitter: over.jitter.or(self.jitter),
            base_ms: over.base_ms.or(self.base_ms),
            cap_ms: over.cap_ms.or(self.cap_ms),
            max_attempts: over.max_attempts.or(self.max_attempts),
            timeout_ms: over.timeout_ms.or(self.timeout_ms),
            honor_retry_after: over.honor_retry_after.or(self.honor_retry_after),
            retry_after_cap_ms: over.retry_after_cap_ms.or(self.retry_after_cap_ms),
            quarantine_after: over.quarantine_after.or(self.quarantine_after),
            multiplier: over.multiplier.or(self.multiplier),
            max_total_ms: over.max_total_ms.or(self.max_total_ms),
            breaker: over.breaker.or(self.breaker),
            retry_budget: over.retry_budget.or(self.retry_budget),
            retry_after_mode: over.retry_after_mode.or(self.retry_after_mode),
            seed: over.seed.or(self.seed),
            clients: over.clients.or(self.clients),
            protections: over.protections.or(self.protections),
            jitter_ms: over.jitter_ms.or(self.jitter_ms),
            jitter_ratio: over.jitter_ratio.or(self.jitter_ratio),
            first_retry_at_once: over.first_retry_at_once.or(self.first_retry_at_once),
            retry_statuses: over.retry_statuses.or(self.retry_statuses),
        }
    }
}

/// The protections a policy lists, each read and checked, at most `MAX_PROTECTIONS`.
fn read_protections(listed: &[serde_json::Value]) -> Result<Vec<ProtectionSpec>, Invalid> {
    if listed.len() > MAX_PROTECTIONS {
        let detail = format!("a policy lists at most {MAX_PROTECTIONS} protections (MAX_PROTECTIONS)");
        return Err(Invalid::new("policy.protections", detail));
    }
    listed.iter().enumerate().map(|(i, value)| ProtectionSpec::read(i, value)).collect()
}

/// Tells a field given as `null` (`Some(None)`) from one left out (`None`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

impl Policy {
    pub fn backoff(&self) -> Backoff {
        Backoff {
            jitter: self.jitter,
            base_ms: self.base_ms,
            cap_ms: self.cap_ms,
            multiplier: self.multiplier,
            jitter_ms: self.jitter_ms,
            jitter_ratio: self.jitter_ratio,
            first_at_once: self.first_retry_at_once,
        }
    }

    pub fn retry_after_rule(&self) -> RetryAfterRule {
        RetryAfterRule {
            honor: self.honor_retry_after,
            cap_ms: self.retry_after_cap_ms,
            mode: self.retry_after_mode,
        }
    }

    pub fn view(&self) -> PolicyView {
        let backoff = self.backoff();
        let mut previous = None;
        let bands = (1..self.max_attempts)
            .map(|n| {
                let band = backoff.band(n, previous);
                // The widest decorrelated band: each wait at the top of the one before.
                previous = Some(band.high_ms);
                let nominal_ms = if backoff.first_at_once && n == 1 { 0 } else { backoff.nominal_ms(n) };
                WaitBand { n, nominal_ms, low_ms: band.low_ms, high_ms: band.high_ms }
            })
            .collect();
        PolicyView { policy: self.clone(), bands }
    }

    /// The policy with `update` applied, or the first reason it would be unusable.
    pub fn updated(&self, update: &PolicyUpdate) -> Result<Policy, Invalid> {
        let next = Policy {
            jitter: update.jitter.unwrap_or(self.jitter),
            base_ms: update.base_ms.unwrap_or(self.base_ms),
            cap_ms: update.cap_ms.unwrap_or(self.cap_ms),
            max_attempts: update.max_attempts.unwrap_or(self.max_attempts),
            timeout_ms: update.timeout_ms.unwrap_or(self.timeout_ms),
            honor_retry_after: update.honor_retry_after.unwrap_or(self.honor_retry_after),
            retry_after_cap_ms: update.retry_after_cap_ms.unwrap_or(self.retry_after_cap_ms),
            quarantine_after: update.quarantine_after.unwrap_or(self.quarantine_after),
            multiplier: update.multiplier.unwrap_or(self.multiplier),
            max_total_ms: update.max_total_ms.unwrap_or(self.max_total_ms),
            breaker: update.breaker.unwrap_or(self.breaker),
            retry_budget: update.retry_budget.unwrap_or(self.retry_budget),
            retry_after_mode: update.retry_after_mode.unwrap_or(self.retry_after_mode),
            seed: update.seed.unwrap_or(self.seed),
            clients: update.clients.unwrap_or(self.clients),
            protections: match &update.protections {
                Some(listed) => read_protections(listed)?,
                None => self.protections.clone(),
            },
            jitter_ms: update.jitter_ms.unwrap_or(self.jitter_ms),
            jitter_ratio: update.jitter_ratio.unwrap_or(self.jitter_ratio),
            first_retry_at_once: update.first_retry_at_once.unwrap_or(self.first_retry_at_once),
            retry_statuses: update.retry_statuses.clone().unwrap_or_else(|| self.retry_statuses.clone()),
        };
        next.validate()?;
        Ok(next)
    }

    /// The hedging the policy lists (gRFC A6 `hedgingPolicy`), if any: its rounds are hedged,
    /// not retried.
    pub fn hedging(&self) -> Option<GrpcHedgingSettings> {
        self.protections.iter().find_map(|spec| match spec.settings {
            ProtectionSettings::GrpcHedging(settings) => Some(settings),
            _ => None,
        })
    }

    /// The attempts a round may make: the hedging's when it hedges, else `max_attempts`.
    pub fn attempts_per_round(&self) -> u32 {
        self.hedging().map_or(self.max_attempts, |hedging| hedging.attempts())
    }

    fn validate(&self) -> Result<(), Invalid> {
        let invalid = |field: &str, detail: String| Err(Invalid::new(format!("policy.{field}"), detail));
        if self.clients == 0 {
            return invalid("clients", "clients must be at least 1".into());
        }
        if !(1..=MAX_ATTEMPTS).contains(&self.max_attempts) {
            return invalid("max_attempts", format!("max_attempts must be 1 to {MAX_ATTEMPTS}"));
        }
        if self.base_ms > MAX_DELAY_MS || self.cap_ms > MAX_DELAY_MS {
            let field = if self.base_ms > MAX_DELAY_MS { "base_ms" } else { "cap_ms" };
            return invalid(field, format!("base_ms and cap_ms must be at most {MAX_DELAY_MS}"));
        }
        if self.base_ms > self.cap_ms {
            return invalid("base_ms", "base_ms must not exceed cap_ms".into());
        }
        if !(1..=MAX_TIMEOUT_MS).contains(&self.timeout_ms) {
            return invalid("timeout_ms", format!("timeout_ms must be 1 to {MAX_TIMEOUT_MS}"));
        }
        if !(1..=MAX_QUARANTINE_AFTER).contains(&self.quarantine_after) {
            return invalid(
                "quarantine_after",
                format!("quarantine_after must be 1 to {MAX_QUARANTINE_AFTER}"),
            );
        }
        if self.retry_after_cap_ms > MAX_DELAY_MS {
            return invalid(
                "retry_after_cap_ms",
                format!("retry_after_cap_ms must be at most {MAX_DELAY_MS}"),
            );
        }
        if !(1.0..=MAX_MULTIPLIER).contains(&self.multiplier) {
            return invalid(
                "multiplier",
                format!("multiplier must be 1 to {MAX_MULTIPLIER} (1 is a fixed interval)"),
            );
        }
        if self.jitter_ms > MAX_DELAY_MS {
            return invalid("jitter_ms", format!("jitter_ms must be at most {MAX_DELAY_MS}"));
        }
        if !(0.0..=MAX_JITTER_RATIO).contains(&self.jitter_ratio) {
            return invalid("jitter_ratio", format!("jitter_ratio must be 0 to {MAX_JITTER_RATIO}"));
        }
        if let Some(statuses) = &self.retry_statuses {
            if statuses.len() > MAX_RETRY_STATUSES {
                let detail = format!("retry_statuses lists at most {MAX_RETRY_STATUSES} statuses");
                return invalid("retry_statuses", detail);
            }
            if let Some(bad) = statuses.iter().find(|s| !(100..=599).contains(*s)) {
                return invalid(
                    "retry_statuses",
                    format!("retry_statuses: {bad} is not an HTTP status (100 to 599)"),
                );
            }
        }
        if self.max_total_ms > MAX_TOTAL_MS {
            return invalid(
                "max_total_ms",
                format!("max_total_ms must be at most {MAX_TOTAL_MS} (0 for no time budget)"),
            );
        }
        if let Some(breaker) = self.breaker {
            if !(1..=MAX_FAILURE_THRESHOLD).contains(&breaker.failure_threshold) {
                let detail = format!("breaker.failure_threshold must be 1 to {MAX_FAILURE_THRESHOLD}");
                return invalid("breaker.failure_threshold", detail);
            }
            if !(1..=MAX_DELAY_MS).contains(&breaker.open_ms) {
                return invalid("breaker.open_ms", format!("breaker.open_ms must be 1 to {MAX_DELAY_MS}"));
            }
            if !(1..=MAX_PROBES).contains(&breaker.half_open_probes) {
                let detail = format!("breaker.half_open_probes must be 1 to {MAX_PROBES}");
                return invalid("breaker.half_open_probes", detail);
            }
        }
        for (i, spec) in self.protections.iter().enumerate() {
            let kind = spec.settings.kind();
            let twice = self.protections[..i].iter().any(|before| before.settings.kind() == kind);
            if twice || (kind == ProtectionKind::RetryBudget && self.retry_budget.is_some()) {
                let detail = format!("{kind} is listed already: a policy has each kind once");
                return invalid(&format!("protections[{i}].kind"), detail);
            }
            // gRFC A6: "Throttling also applies to hedged RPCs", with one token count: hedging
            // carries gRPC's retryThrottling itself, so the throttle beside it would count every
            // answer twice (and hedging already takes the place of the retries).
            let (grpc, hedging) = (ProtectionKind::Grpc, ProtectionKind::GrpcHedging);
            let other = if kind == grpc { hedging } else { grpc };
            let clash = self.protections[..i].iter().any(|before| before.settings.kind() == other);
            if clash && (kind == grpc || kind == hedging) {
                let detail = format!(
                    "{grpc} and {hedging} cannot both be listed: {hedging} carries gRPC's retry throttling \
                     itself, and both would count every answer twice"
                );
                return invalid(&format!("protections[{i}].kind"), detail);
            }
        }
        if let Some(budget) = self.retry_budget {
            if !(0.0..=1.0).contains(&budget.ratio) {
                return invalid("retry_budget.ratio", "retry_budget.ratio must be between 0 and 1".into());
            }
            if !(0.0..=MAX_MIN_PER_S).contains(&budget.min_per_s) {
                let detail = format!("retry_budget.min_per_s must be 0 to {MAX_MIN_PER_S}");
                return invalid("retry_budget.min_per_s", detail);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Policy`'s fields are written in `Policy`, its `Default`, `PolicyUpdate`, `then` and
    /// `updated`: this holds the lists equal. The policy below names every field (no `..`), so a
    /// new field does not compile until it is set here to a value other than its default; then
    /// its JSON must read back as an update (`PolicyUpdate` denies unknown fields), and the
    /// update, merged either way, must give the same policy back.
    #[test]
    fn every_field_of_a_policy_reads_back_through_an_update() {
        fn read<T: serde::de::DeserializeOwned>(json: serde_json::Value) -> T {
            serde_json::from_value(json).unwrap()
        }
        let every = Policy {
            jitter: Jitter::Full,
            base_ms: 300,
            cap_ms: 9_000,
            max_attempts: 6,
            timeout_ms: 700,
            honor_retry_after: false,
            retry_after_cap_ms: 5_000,
            quarantine_after: 5,
            multiplier: 3.0,
            max_total_ms: 20_000,
            breaker: Some(read(
                serde_json::json!({ "failure_threshold": 4, "open_ms": 900, "half_open_probes": 2 }),
            )),
            retry_budget: Some(read(serde_json::json!({ "ratio": 0.3, "min_per_s": 4.0 }))),
            retry_after_mode: RetryAfterMode::JitterAbove,
            seed: Some(7),
            clients: 3,
            protections: read_protections(&[serde_json::json!({ "kind": "token_bucket" })]).unwrap(),
            jitter_ms: 250,
            jitter_ratio: 0.5,
            first_retry_at_once: true,
            retry_statuses: Some(vec![503]),
        };
        every.validate().unwrap();
        let json = serde_json::to_value(&every).unwrap();
        let default = serde_json::to_value(Policy::default()).unwrap();
        for (field, value) in json.as_object().unwrap() {
            assert_ne!(
                default.get(field),
                Some(value),
                "{field} is set to its default here: set it to another value"
            );
        }
        let update: PolicyUpdate =
            serde_json::from_value(json.clone()).unwrap_or_else(|e| panic!("not an update: {e}: {json}"));
        assert_eq!(Policy::default().updated(&update).unwrap(), every, "updated");
        let over = PolicyUpdate::default().then(update.clone());
        assert_eq!(Policy::default().updated(&over).unwrap(), every, "then, the update over nothing");
        let under = update.then(PolicyUpdate::default());
        assert_eq!(Policy::default().updated(&under).unwrap(), every, "then, nothing over the update");
        // The API guide's row for `PUT /policy` lists the same fields.
        let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/api.md")).unwrap();
        let row = guide.lines().find(|l| l.starts_with("| `PUT /api/labs/{lab}/policy`")).unwrap();
        let listed = row.split("`{").nth(1).and_then(|rest| rest.split("}`").next()).unwrap();
        let mut listed: Vec<&str> = listed.split(',').map(|f| f.trim().trim_matches('"')).collect();
        let mut fields: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        listed.sort();
        fields.sort();
        assert_eq!(listed, fields, "docs/api.md's PUT /policy row (left) against Policy's fields (right)");
    }

    #[test]
    fn updates_merge_and_reject_unusable_values() {
        let policy = Policy::default();
        let faster = PolicyUpdate { base_ms: Some(10), timeout_ms: Some(50), ..Default::default() };
        let next = policy.updated(&faster).unwrap();
        assert_eq!((next.base_ms, next.timeout_ms, next.max_attempts), (10, 50, 4));

        let zero = PolicyUpdate { max_attempts: Some(0), ..Default::default() };
        let refused = policy.updated(&zero).unwrap_err();
        assert_eq!(refused.field, "policy.max_attempts");
        assert!(refused.detail.contains("max_attempts"), "{refused}");
        let inverted = PolicyUpdate { base_ms: Some(5_000), cap_ms: Some(100), ..Default::default() };
        assert_eq!(policy.updated(&inverted).unwrap_err().field, "policy.base_ms");
        let breaker = BreakerSettings {
            failure_threshold: 1,
            open_ms: 0,
            half_open_probes: 1,
            refused: crate::retry::Refused::Retry,
        };
        let closed_at_once = PolicyUpdate { breaker: Some(Some(breaker)), ..Default::default() };
        assert_eq!(policy.updated(&closed_at_once).unwrap_err().field, "policy.breaker.open_ms");
    }

    #[test]
    fn the_view_carries_one_band_per_wait() {
        let view = Policy::default().view();
        let bands: Vec<(u32, u64, u64, u64)> =
            view.bands.iter().map(|b| (b.n, b.nominal_ms, b.low_ms, b.high_ms)).collect();
        assert_eq!(bands, [(1, 800, 400, 800), (2, 1600, 800, 1600), (3, 3200, 1600, 3200)]);
        let decorrelated =
            Policy { jitter: Jitter::Decorrelated, base_ms: 100, cap_ms: 1_000, ..Default::default() };
        let highs: Vec<u64> = decorrelated.view().bands.iter().map(|b| b.high_ms).collect();
        assert_eq!(highs, [300, 900, 1_000], "3x the widest previous wait, capped");
    }
}

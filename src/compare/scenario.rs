//! The scenarios a comparison runs and the policy presets it compares. A scenario sets up the
//! downstream, a base policy with small, watchable timings, and a script of what happens when
//! (bursts, outages); a preset changes only what makes it that policy.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One kind of trouble for the downstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// Down for a while, then healthy again.
    Outage,
    /// An overloaded downstream with a capacity well below the burst, and no queue.
    Overload,
    /// A rate limit below the offered load.
    Throttled,
    /// Half of all new requests fail.
    Flaky,
    /// An overloaded downstream with a queue, under steady load, tipped over by a short outage.
    Metastable,
}

pub const SCENARIOS: &[&str] = &["outage", "overload", "throttled", "flaky", "metastable"];

/// The policy presets, by name, with what each changes over the scenario's base policy.
pub const PRESETS: &[(&str, &str)] = &[
    ("fixed", "a fixed interval: no growth, no jitter"),
    ("none", "exponential backoff without jitter"),
    ("full", "exponential backoff, full jitter"),
    ("equal", "exponential backoff, equal jitter"),
    ("decorrelated", "decorrelated jitter"),
    ("breaker", "equal jitter and a circuit breaker"),
    ("budget", "equal jitter and a retry budget"),
    ("ignore-retry-after", "equal jitter, Retry-After ignored"),
];

/// One step of a scenario's script, `at_ms` after the start.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Burst { at_ms: u64, count: usize },
    Downstream { at_ms: u64, update: Value },
}

impl Step {
    pub fn at_ms(&self) -> u64 {
        match self {
            Step::Burst { at_ms, .. } | Step::Downstream { at_ms, .. } => *at_ms,
        }
    }
}

impl Scenario {
    pub fn parse(name: &str) -> Result<Scenario, String> {
        serde_json::from_value(json!(name))
            .map_err(|_| format!("unknown scenario '{name}'; choose one of: {}", SCENARIOS.join(", ")))
    }

    /// The downstream the scenario starts with, for a burst of `burst` messages.
    pub fn downstream(self, burst: usize) -> Value {
        let base = json!({"latency_ms": [10, 30], "retry_after_s": 1});
        let mode = match self {
            Scenario::Outage => json!({"mode": "healthy"}),
            // Work of 40 ms, long beside the scheduling noise of a busy machine, so a wave of
            // retries that arrives together really does meet the same few workers.
            Scenario::Overload => json!({
                "mode": "overloaded", "capacity": (burst / 10).max(2), "queue": 0,
                "latency_ms": [40, 40], "retry_after_s": 0,
            }),
            Scenario::Throttled => {
                json!({"mode": "throttled", "rate_per_s": (burst as f64 / 4.0).max(5.0), "burst": 5})
            }
            Scenario::Flaky => json!({"mode": "flaky", "failure_rate": 0.5, "retry_after_s": 0}),
            // The burst arrives over 3 s; workers of 20 ms (50 requests/s each) enough to keep
            // up at about 70 % busy, so only the outage tips it over.
            Scenario::Metastable => json!({
                "mode": "overloaded", "capacity": (burst as f64 / 3.0 / 35.0).ceil().max(1.0) as u64,
                "queue": 60, "latency_ms": [20, 20], "retry_after_s": 0,
            }),
        };
        merge(base, mode)
    }

    /// The policy every column starts from, before its preset.
    pub fn base_policy(self, seed: u64) -> Value {
        let base = json!({
            "jitter": "equal", "base_ms": 50, "cap_ms": 2000, "multiplier": 2, "max_attempts": 8,
            "timeout_ms": 1000, "honor_retry_after": true, "max_total_ms": 0, "breaker": null,
            "retry_budget": null, "retry_after_mode": "floor", "seed": seed,
        });
        match self {
            // Waits that start at twice the work's 40 ms.
            Scenario::Overload => merge(base, json!({"base_ms": 80})),
            // Short timeouts, many attempts: what tips a queued service over.
            Scenario::Metastable => {
                merge(base, json!({"base_ms": 10, "cap_ms": 40, "max_attempts": 10, "timeout_ms": 100}))
            }
            _ => base,
        }
    }

    /// What happens when. The metastable scenario offers its burst steadily, a share every
    /// 100 ms over 3 s, and takes the downstream down for 300 ms after half a second.
    pub fn script(self, burst: usize) -> Vec<Step> {
        match self {
            Scenario::Outage => vec![
                Step::Downstream { at_ms: 0, update: json!({"mode": "down", "for_ms": 1500}) },
                Step::Burst { at_ms: 0, count: burst },
            ],
            Scenario::Metastable => {
                const STEPS: usize = 30;
                let mut steps: Vec<Step> = (0..STEPS)
                    .map(|i| Step::Burst { at_ms: i as u64 * 100, count: share(burst, STEPS, i) })
                    .filter(|s| !matches!(s, Step::Burst { count: 0, .. }))
                    .collect();
                steps.push(Step::Downstream { at_ms: 500, update: json!({"mode": "down", "for_ms": 300}) });
                steps.sort_by_key(Step::at_ms);
                steps
            }
            _ => vec![Step::Burst { at_ms: 0, count: burst }],
        }
    }
}

/// The `i`-th of `parts` near-equal shares of `total`.
fn share(total: usize, parts: usize, i: usize) -> usize {
    total / parts + usize::from(i < total % parts)
}

/// What a preset changes over the base policy; an unknown name is an error listing them all.
pub fn preset(name: &str) -> Result<Value, String> {
    let changes = match name {
        "fixed" => json!({"jitter": "none", "multiplier": 1}),
        "none" => json!({"jitter": "none"}),
        "full" => json!({"jitter": "full"}),
        "equal" => json!({"jitter": "equal"}),
        "decorrelated" => json!({"jitter": "decorrelated"}),
        "breaker" => json!({"breaker": {"failure_threshold": 5, "open_ms": 500, "half_open_probes": 2}}),
        "budget" => json!({"retry_budget": {"ratio": 0.1, "min_per_s": 1}}),
        "ignore-retry-after" => json!({"honor_retry_after": false}),
        _ => {
            let names: Vec<&str> = PRESETS.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "unknown policy preset '{name}'; choose one of: {}, or a custom policy as JSON",
                names.join(", ")
            ));
        }
    };
    Ok(changes)
}

/// `base` with every field of `over` written over it.
pub fn merge(mut base: Value, over: Value) -> Value {
    if let (Value::Object(base), Value::Object(over)) = (&mut base, over) {
        base.extend(over);
    }
    base
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_list_the_valid_ones() {
        let error = Scenario::parse("meltdown").unwrap_err();
        assert!(error.contains("outage, overload, throttled, flaky, metastable"), "{error}");
        let error = preset("yolo").unwrap_err();
        assert!(
            error.contains("fixed, none, full, equal, decorrelated, breaker, budget, ignore-retry-after")
        );
        assert_eq!(Scenario::parse("metastable"), Ok(Scenario::Metastable));
    }

    #[test]
    fn the_metastable_script_offers_the_whole_burst_steadily() {
        let steps = Scenario::Metastable.script(100);
        let sent: usize =
            steps.iter().map(|s| if let Step::Burst { count, .. } = s { *count } else { 0 }).sum();
        assert_eq!(sent, 100);
        assert!(steps.windows(2).all(|w| w[0].at_ms() <= w[1].at_ms()));
        assert!(steps.iter().any(|s| matches!(s, Step::Downstream { at_ms: 500, .. })));
    }
}

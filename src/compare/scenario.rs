//! The scenarios a comparison runs and the policy presets it compares. A scenario sets up the
//! downstream, a base policy with small, watchable timings, and a script of what happens when
//! (bursts, outages); a preset changes only what makes it that policy.

use serde::{Deserialize, Serialize};

use crate::downstream::{DownstreamUpdate, Mode};
use crate::retry::{BreakerSettings, BudgetSettings, Jitter, PolicyUpdate, RetryAfterMode};

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
    Downstream { at_ms: u64, update: DownstreamUpdate },
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
        serde_json::from_value(serde_json::json!(name))
            .map_err(|_| format!("unknown scenario '{name}'; choose one of: {}", SCENARIOS.join(", ")))
    }

    /// The downstream the scenario starts with, for a burst of `burst` messages.
    pub fn downstream(self, burst: usize) -> DownstreamUpdate {
        let base =
            DownstreamUpdate { latency_ms: Some([10, 30]), retry_after_s: Some(1), ..Default::default() };
        match self {
            Scenario::Outage => DownstreamUpdate { mode: Some(Mode::Healthy), ..base },
            // Work of 40 ms, long beside the scheduling noise of a busy machine, so a wave of
            // retries that arrives together really does meet the same few workers.
            Scenario::Overload => DownstreamUpdate {
                mode: Some(Mode::Overloaded),
                capacity: Some((burst / 10).max(2) as u32),
                queue: Some(0),
                latency_ms: Some([40, 40]),
                retry_after_s: Some(0),
                ..base
            },
            Scenario::Throttled => DownstreamUpdate {
                mode: Some(Mode::Throttled),
                rate_per_s: Some((burst as f64 / 4.0).max(5.0)),
                burst: Some(5),
                ..base
            },
            Scenario::Flaky => DownstreamUpdate {
                mode: Some(Mode::Flaky),
                failure_rate: Some(0.5),
                retry_after_s: Some(0),
                ..base
            },
            // The burst arrives over 3 s; workers of 20 ms (50 requests/s each) enough to keep
            // up at about 70 % busy, so only the outage tips it over.
            Scenario::Metastable => DownstreamUpdate {
                mode: Some(Mode::Overloaded),
                capacity: Some((burst as f64 / 3.0 / 35.0).ceil().max(1.0) as u32),
                queue: Some(60),
                latency_ms: Some([20, 20]),
                retry_after_s: Some(0),
                ..base
            },
        }
    }

    /// The policy every column starts from, before its preset.
    pub fn base_policy(self, seed: u64) -> PolicyUpdate {
        let base = PolicyUpdate {
            jitter: Some(Jitter::Equal),
            base_ms: Some(50),
            cap_ms: Some(2000),
            multiplier: Some(2.0),
            max_attempts: Some(8),
            timeout_ms: Some(1000),
            honor_retry_after: Some(true),
            max_total_ms: Some(0),
            breaker: Some(None),
            retry_budget: Some(None),
            retry_after_mode: Some(RetryAfterMode::Floor),
            seed: Some(Some(seed)),
            ..Default::default()
        };
        match self {
            // Waits that start at twice the work's 40 ms.
            Scenario::Overload => PolicyUpdate { base_ms: Some(80), ..base },
            // Short timeouts, many attempts: what tips a queued service over.
            Scenario::Metastable => PolicyUpdate {
                base_ms: Some(10),
                cap_ms: Some(40),
                max_attempts: Some(10),
                timeout_ms: Some(100),
                ..base
            },
            _ => base,
        }
    }

    /// What happens when. The metastable scenario offers its burst steadily, a share every
    /// 100 ms over 3 s, and takes the downstream down for 300 ms after half a second.
    pub fn script(self, burst: usize) -> Vec<Step> {
        let down_for =
            |ms| DownstreamUpdate { mode: Some(Mode::Down), for_ms: Some(ms), ..Default::default() };
        match self {
            Scenario::Outage => vec![
                Step::Downstream { at_ms: 0, update: down_for(1500) },
                Step::Burst { at_ms: 0, count: burst },
            ],
            Scenario::Metastable => {
                const STEPS: usize = 30;
                let mut steps: Vec<Step> = (0..STEPS)
                    .map(|i| Step::Burst { at_ms: i as u64 * 100, count: share(burst, STEPS, i) })
                    .filter(|s| !matches!(s, Step::Burst { count: 0, .. }))
                    .collect();
                steps.push(Step::Downstream { at_ms: 500, update: down_for(300) });
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
pub fn preset(name: &str) -> Result<PolicyUpdate, String> {
    let jitter = |jitter| PolicyUpdate { jitter: Some(jitter), ..Default::default() };
    let changes = match name {
        "fixed" => PolicyUpdate { multiplier: Some(1.0), ..jitter(Jitter::None) },
        "none" => jitter(Jitter::None),
        "full" => jitter(Jitter::Full),
        "equal" => jitter(Jitter::Equal),
        "decorrelated" => jitter(Jitter::Decorrelated),
        "breaker" => PolicyUpdate {
            breaker: Some(Some(BreakerSettings { failure_threshold: 5, open_ms: 500, half_open_probes: 2 })),
            ..Default::default()
        },
        "budget" => PolicyUpdate {
            retry_budget: Some(Some(BudgetSettings { ratio: 0.1, min_per_s: 1.0 })),
            ..Default::default()
        },
        "ignore-retry-after" => PolicyUpdate { honor_retry_after: Some(false), ..Default::default() },
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

    #[test]
    fn every_scenario_and_preset_is_a_setting_the_lab_takes() {
        use crate::downstream::DownstreamSettings;
        use crate::retry::Policy;
        for name in SCENARIOS {
            let scenario = Scenario::parse(name).unwrap();
            for burst in [1, 100, 2_000] {
                DownstreamSettings::default().updated(&scenario.downstream(burst)).unwrap();
            }
            for (preset_name, _) in PRESETS {
                let policy = scenario.base_policy(7).then(preset(preset_name).unwrap());
                let taken = Policy::default().updated(&policy).unwrap();
                assert_eq!(taken.seed, Some(7), "{name} {preset_name}");
            }
        }
    }
}

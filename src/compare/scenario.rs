//! The scenarios a comparison runs. A scenario sets up the downstream, a base policy with
//! small, watchable timings, and a script of what happens when (bursts, steady traffic, outages
//! and slowdowns); a preset (`presets`, the table the lab shares) changes only what makes it
//! that policy.

use serde::{Deserialize, Serialize};

use crate::domain::{Arrivals, TrafficUpdate};
use crate::downstream::{DownstreamUpdate, Mode};
use crate::retry::{Jitter, PolicyUpdate, RetryAfterMode};

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
    /// An overloaded downstream with a queue under steady traffic at 70 % of its capacity,
    /// tipped over by a short slowdown (tests/api/metastable.rs holds the same set-up).
    Metastable,
}

pub const SCENARIOS: &[&str] = &["outage", "overload", "throttled", "flaky", "metastable"];

/// One step of a scenario's script, `at_ms` after the start.
#[derive(Debug, Clone, PartialEq)]
// A downstream step carries the endpoint's defences; a script has a handful of steps.
#[allow(clippy::large_enum_variant)]
pub enum Step {
    Burst {
        at_ms: u64,
        count: usize,
    },
    Downstream {
        at_ms: u64,
        update: DownstreamUpdate,
    },
    /// Steady traffic from then on (for its `for_ms`, or until the next traffic step).
    Traffic {
        at_ms: u64,
        update: TrafficUpdate,
    },
}

impl Step {
    pub fn at_ms(&self) -> u64 {
        match self {
            Step::Burst { at_ms, .. } | Step::Downstream { at_ms, .. } | Step::Traffic { at_ms, .. } => {
                *at_ms
            }
        }
    }
}

/// The metastable scenario's traffic: 28 new messages a second (70 % of eight workers of
/// 200 ms) for 16 s; after 3 s the work takes five times as long for 2 s.
const METASTABLE_RATE_PER_S: f64 = 28.0;
const METASTABLE_FOR_MS: u64 = 16_000;
const METASTABLE_TRIGGER_AT_MS: u64 = 3_000;

impl Scenario {
    pub fn parse(name: &str) -> Result<Scenario, String> {
        serde_json::from_value(serde_json::json!(name))
            .map_err(|_| format!("unknown scenario '{name}'; choose one of: {}", SCENARIOS.join(", ")))
    }

    /// The downstream the scenario starts with, for a burst of `burst` messages.
    pub fn downstream(self, burst: usize) -> DownstreamUpdate {
        let base = DownstreamUpdate {
            latency_ms: Some([10, 30]),
            retry_after_s: Some(Some(1)),
            ..Default::default()
        };
        match self {
            Scenario::Outage => DownstreamUpdate { mode: Some(Mode::Healthy), ..base },
            // Work of 40 ms, long beside the scheduling noise of a busy machine, so a wave of
            // retries that arrives together really does meet the same few workers.
            Scenario::Overload => DownstreamUpdate {
                mode: Some(Mode::Overloaded),
                capacity: Some((burst / 10).max(2) as u32),
                queue: Some(0),
                latency_ms: Some([40, 40]),
                retry_after_s: Some(Some(0)),
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
                retry_after_s: Some(Some(0)),
                ..base
            },
            // A queue of 40 before eight workers of 200 ms (40 requests/s): a full queue takes
            // 1 s to drain, twice the client's 500 ms timeout.
            Scenario::Metastable => DownstreamUpdate {
                mode: Some(Mode::Overloaded),
                capacity: Some(8),
                queue: Some(40),
                latency_ms: Some([200, 200]),
                retry_after_s: Some(Some(0)),
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
            first_retry_at_once: Some(false),
            retry_statuses: Some(None),
            ..Default::default()
        };
        match self {
            // Waits that start at twice the work's 40 ms.
            Scenario::Overload => PolicyUpdate { base_ms: Some(80), ..base },
            // A timeout shorter than a full queue takes to drain, quick retries: what keeps a
            // queued service overloaded once it is.
            Scenario::Metastable => PolicyUpdate {
                base_ms: Some(800),
                cap_ms: Some(3200),
                max_attempts: Some(5),
                timeout_ms: Some(500),
                honor_retry_after: Some(false),
                ..base
            },
            _ => base,
        }
    }

    /// What happens when. The metastable scenario has no burst: steady traffic, and a
    /// slowdown once the load has settled.
    pub fn script(self, burst: usize) -> Vec<Step> {
        let down_for =
            |ms| DownstreamUpdate { mode: Some(Mode::Down), for_ms: Some(ms), ..Default::default() };
        match self {
            Scenario::Outage => vec![
                Step::Downstream { at_ms: 0, update: down_for(1500) },
                Step::Burst { at_ms: 0, count: burst },
            ],
            Scenario::Metastable => vec![
                Step::Traffic {
                    at_ms: 0,
                    update: TrafficUpdate {
                        rate_per_s: METASTABLE_RATE_PER_S,
                        arrivals: Arrivals::Poisson,
                        for_ms: Some(METASTABLE_FOR_MS),
                    },
                },
                Step::Downstream {
                    at_ms: METASTABLE_TRIGGER_AT_MS,
                    update: DownstreamUpdate {
                        latency_ms: Some([1000, 1000]),
                        for_ms: Some(2000),
                        ..Default::default()
                    },
                },
            ],
            _ => vec![Step::Burst { at_ms: 0, count: burst }],
        }
    }

    /// The figures a comparison on this scenario is judged on, in order, with `true` when less
    /// is better: the one question the scenario asks. A second figure is judged only among the
    /// policies the first left (see `verdict`).
    pub fn key_figures(self) -> &'static [(&'static str, bool)] {
        match self {
            // Did the endpoint recover once the slowdown ended?
            Scenario::Metastable => &[("goodput_after_trigger", false)],
            // What did each delivered message cost the overloaded endpoint?
            Scenario::Overload => &[("requests_per_delivered", true)],
            // How soon was everything settled, without giving messages up to get there?
            Scenario::Outage => &[("dead_letter", true), ("drain_ms", true)],
            // How often did the client knock on a door that said "not now"?
            Scenario::Throttled => &[("throttled_per_delivered", true)],
            // Were the messages delivered, and at what cost?
            Scenario::Flaky => &[("delivered", false), ("requests_per_delivered", true)],
        }
    }

    /// Whether the scenario can have this figure at all: only a rate-limited downstream
    /// answers 429, and only a scenario with a trigger has goodput after it.
    pub fn has_figure(self, figure: &str) -> bool {
        match figure {
            "throttled" | "throttled_per_delivered" => self == Scenario::Throttled,
            "goodput_after_trigger" => self == Scenario::Metastable,
            _ => true,
        }
    }

    /// Whether its load is steady traffic rather than a burst (then `burst` is not used).
    pub fn has_traffic(self) -> bool {
        self.script(1).iter().any(|s| matches!(s, Step::Traffic { .. }))
    }

    /// When its timed change of the endpoint (the outage, the slowdown) starts and ends, ms
    /// after the start.
    pub fn trigger_ms(self, burst: usize) -> Option<[u64; 2]> {
        self.script(burst).iter().find_map(|s| match s {
            Step::Downstream { at_ms, update } => update.for_ms.map(|ms| [*at_ms, at_ms + ms]),
            _ => None,
        })
    }

    /// When the script's last step ends (a traffic's `for_ms` included), ms after the start.
    pub fn script_ends_ms(self, burst: usize) -> u64 {
        self.script(burst)
            .iter()
            .map(|s| match s {
                Step::Traffic { at_ms, update } => at_ms + update.for_ms.unwrap_or(0),
                step => step.at_ms(),
            })
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::presets;

    #[test]
    fn unknown_names_list_the_valid_ones() {
        let error = Scenario::parse("meltdown").unwrap_err();
        assert!(error.contains("outage, overload, throttled, flaky, metastable"), "{error}");
        assert_eq!(Scenario::parse("metastable"), Ok(Scenario::Metastable));
    }

    #[test]
    fn the_metastable_script_is_steady_traffic_and_a_slowdown_after_it_settles() {
        let steps = Scenario::Metastable.script(100);
        assert!(Scenario::Metastable.has_traffic() && !Scenario::Outage.has_traffic());
        let Step::Traffic { at_ms: 0, update } = &steps[0] else { panic!("traffic first: {steps:?}") };
        assert_eq!(update.rate_per_s, 28.0);
        assert!(
            matches!(&steps[1], Step::Downstream { at_ms: 3_000, update } if update.for_ms == Some(2_000))
        );
        assert_eq!(Scenario::Metastable.script_ends_ms(100), 16_000);
        assert_eq!(Scenario::Metastable.trigger_ms(100), Some([3_000, 5_000]));
        assert_eq!(Scenario::Outage.trigger_ms(100), Some([0, 1_500]));
        assert_eq!(Scenario::Overload.trigger_ms(100), None);
        let caps = crate::domain::TrafficCaps { max_rate_per_s: 5_000.0, max_for_ms: 3_600_000 };
        update.settings(caps, 0).unwrap();
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
            for preset in presets::all() {
                let policy = scenario.base_policy(7).then(presets::changes(&preset.name).unwrap());
                let taken = Policy::default().updated(&policy).unwrap();
                assert_eq!(taken.seed, Some(7), "{name} {}", preset.name);
            }
        }
    }
}

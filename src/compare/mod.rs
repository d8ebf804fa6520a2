//! Retry policies compared side by side: the same scenario, several policies at once, each in
//! a lab of its own against a downstream of its own, with the same seed, all started together.
//! A comparison is saved when it starts and survives a restart like its labs do; its figures
//! are measured from the labs whenever they are asked for.

pub mod report;
pub mod scenario;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::Limits;
use crate::domain::LabId;
use crate::lab::{Lab, Labs, unix_now_ms};
use crate::producer::Producer;
use crate::retry::PolicyUpdate;
use crate::store::Store;
pub use report::{Figures, ROWS};
pub use scenario::{PRESETS, SCENARIOS, Scenario, Step};

/// Most policies in one comparison.
pub const MAX_POLICIES: usize = 5;

/// A row's best is marked only when it is better than the others by more than this share;
/// values closer than that are a tie (a 3 ms difference in a 2 s drain says nothing).
pub const BEST_TOLERANCE: f64 = 0.05;

/// A comparison's id: made like a lab's (a random UUID, then the instance that owns it past
/// one machine), so a request for it can be sent on to that instance.
pub type ComparisonId = LabId;

/// The first name two of `names` share, if any: a column per name, so names must differ.
pub fn duplicate_name<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut seen = std::collections::HashSet::new();
    names.into_iter().find(|name| !seen.insert(*name))
}

/// What to say about a policy name used twice.
pub fn duplicate_refusal(name: &str) -> String {
    format!(
        "the policy name '{name}' is used more than once: each policy is a column named by it, so give each a name of its own"
    )
}

/// A policy to compare: a preset's name, or a custom policy (the JSON of `PUT /policy`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum PolicyChoice {
    Preset(String),
    Custom {
        name: String,
        #[schema(value_type = Object)]
        policy: Value,
    },
}

impl PolicyChoice {
    pub fn name(&self) -> &str {
        match self {
            PolicyChoice::Preset(name) | PolicyChoice::Custom { name, .. } => name,
        }
    }

    /// The policy update this choice makes over the scenario's base policy.
    fn changes(&self) -> Result<PolicyUpdate, String> {
        match self {
            PolicyChoice::Preset(name) => scenario::preset(name),
            PolicyChoice::Custom { policy, .. } => parse_policy(policy.clone()),
        }
    }
}

/// What to compare.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ComparisonRequest {
    pub scenario: String,
    pub burst: usize,
    pub policies: Vec<PolicyChoice>,
    #[serde(default = "default_seed")]
    pub seed: u64,
}

fn default_seed() -> u64 {
    1
}

/// A comparison as it is saved: what was asked, and the lab each policy runs in.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    pub id: ComparisonId,
    pub scenario: Scenario,
    pub burst: usize,
    pub seed: u64,
    pub columns: Vec<Column>,
    pub created_unix_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Column {
    pub policy: String,
    pub lab: LabId,
    /// When the scenario started, in the lab's own time.
    pub started_ms: u64,
}

/// A comparison's table, as `GET /api/comparisons/{id}` sends it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ComparisonReport {
    pub id: String,
    pub url: String,
    #[schema(value_type = String)]
    pub scenario: Scenario,
    pub burst: usize,
    pub seed: u64,
    /// Every column has drained (or its lab is gone).
    pub done: bool,
    pub columns: Vec<ColumnReport>,
    /// For each row, the policies that did best on it.
    pub best: HashMap<String, Vec<String>>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ColumnReport {
    pub policy: String,
    pub lab: String,
    pub lab_url: String,
    pub started_ms: u64,
    pub done: bool,
    /// The lab was deleted (idle too long, or evicted): nothing left to measure.
    pub gone: bool,
    pub figures: Figures,
}

/// Why a comparison was refused.
#[derive(Debug)]
pub enum Refusal {
    Invalid(String),
    /// The store could not keep the comparison's labs (they were removed again).
    Storage,
    Limit {
        limit: &'static str,
        detail: String,
    },
}

/// Every comparison this server holds.
#[derive(Default)]
pub struct Comparisons {
    all: RwLock<HashMap<ComparisonId, Comparison>>,
}

impl Comparisons {
    /// The comparisons the store kept; unreadable rows are skipped with a warning.
    pub fn restore(rows: Vec<(String, String)>) -> Comparisons {
        let mut all = HashMap::new();
        for (id, body) in rows {
            match serde_json::from_str::<Comparison>(&body) {
                Ok(comparison) => {
                    all.insert(comparison.id, comparison);
                }
                Err(e) => tracing::warn!(comparison = %id, error = %e, "skipping an unreadable comparison"),
            }
        }
        Comparisons { all: RwLock::new(all) }
    }

    pub fn get(&self, id: &ComparisonId) -> Option<Comparison> {
        self.all.read().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
    }

    /// Sets up one lab per policy, saves the comparison, and starts the scenario in all of
    /// them at once.
    pub async fn start(
        &self,
        request: ComparisonRequest,
        (labs, producer, store): (&Labs, &Producer, &Store),
        limits: &Limits,
    ) -> Result<Comparison, Refusal> {
        let max_burst = limits.max_burst;
        let scenario = Scenario::parse(&request.scenario).map_err(Refusal::Invalid)?;
        if !(2..=MAX_POLICIES).contains(&request.policies.len()) {
            return Err(Refusal::Invalid(format!("compare 2 to {MAX_POLICIES} policies")));
        }
        if let Some(name) = duplicate_name(request.policies.iter().map(PolicyChoice::name)) {
            return Err(Refusal::Invalid(duplicate_refusal(name)));
        }
        if request.burst == 0 {
            return Err(Refusal::Limit {
                limit: "max_burst",
                detail: format!("burst must be at least 1 (and at most {max_burst}, max_burst)"),
            });
        }
        if request.burst > max_burst {
            return Err(Refusal::Limit {
                limit: "max_burst",
                detail: format!("burst must be 1 to {max_burst} (max_burst); choose a smaller burst"),
            });
        }
        let (active, adding) = (labs.active_messages(), request.burst * request.policies.len());
        if active + adding > limits.max_active_messages {
            return Err(Refusal::Limit {
                limit: "max_active_messages",
                detail: format!(
                    "the server is delivering {active} messages and takes at most {} (max_active_messages); \
                     this comparison would add {adding}: try a smaller burst or again in a few seconds",
                    limits.max_active_messages
                ),
            });
        }
        // Every policy is checked before any lab is made.
        let mut setups = Vec::new();
        for choice in &request.policies {
            let changes = choice.changes().map_err(|e| match choice {
                PolicyChoice::Preset(_) => Refusal::Invalid(e),
                PolicyChoice::Custom { name, .. } => Refusal::Invalid(format!("policy '{name}': {e}")),
            })?;
            let policy = scenario.base_policy(request.seed).then(changes);
            let downstream = scenario.downstream(request.burst);
            setups.push((choice.name().to_owned(), policy, downstream));
        }
        let mut made: Vec<(String, Arc<Lab>)> = Vec::new();
        for (name, policy, downstream) in setups {
            let lab = match labs.create() {
                Ok(lab) => lab,
                Err(max) => {
                    for (_, lab) in &made {
                        labs.remove(&lab.id);
                    }
                    return Err(Refusal::Limit {
                        limit: "max_labs",
                        detail: format!("this server already holds {max} labs (max_labs); try again later"),
                    });
                }
            };
            lab.set_policy(&policy).map_err(|e| Refusal::Invalid(format!("policy '{name}': {e}")))?;
            lab.set_downstream(&downstream).map_err(Refusal::Invalid)?;
            made.push((name, lab));
        }
        let comparison = Comparison {
            id: LabId::new(labs.instance),
            scenario,
            burst: request.burst,
            seed: request.seed,
            columns: made
                .iter()
                .map(|(policy, lab)| Column { policy: policy.clone(), lab: lab.id, started_ms: lab.now_ms() })
                .collect(),
            created_unix_ms: unix_now_ms(),
        };
        for (_, lab) in &made {
            lab.persisted()
                .await
                .map_err(|_| Refusal::Invalid("the store did not confirm in time".into()))?;
        }
        let body = serde_json::to_string(&comparison).expect("a comparison serializes");
        let (writer, id, created) = (store.clone(), comparison.id.to_string(), comparison.created_unix_ms);
        tokio::task::spawn_blocking(move || writer.save_comparison(&id, created, &body))
            .await
            .map_err(|e| Refusal::Invalid(format!("saving the comparison failed: {e}")))?
            .map_err(|e| Refusal::Invalid(format!("saving the comparison failed: {e}")))?;
        self.all.write().unwrap_or_else(|p| p.into_inner()).insert(comparison.id, comparison.clone());
        let script = scenario.script(request.burst);
        for (_, lab) in made {
            tokio::spawn(run(lab, producer.clone(), script.clone()));
        }
        Ok(comparison)
    }

    /// The comparison's table, measured now.
    pub fn report(&self, comparison: &Comparison, labs: &Labs) -> ComparisonReport {
        let columns: Vec<ColumnReport> = comparison
            .columns
            .iter()
            .map(|column| {
                let lab = labs.get(&column.lab);
                let figures = lab
                    .as_ref()
                    .map(|lab| {
                        lab.read(|record, letters, counters| {
                            report::figures(record, letters, counters, column.started_ms)
                        })
                    })
                    .unwrap_or_default();
                let expected = comparison.burst as u64;
                let done = lab.is_none() || (figures.drain_ms.is_some() && figures.messages >= expected);
                ColumnReport {
                    policy: column.policy.clone(),
                    lab: column.lab.to_string(),
                    lab_url: format!("/labs/{}", column.lab),
                    started_ms: column.started_ms,
                    done,
                    gone: lab.is_none(),
                    figures,
                }
            })
            .collect();
        let done = columns.iter().all(|c| c.done);
        ComparisonReport {
            id: comparison.id.to_string(),
            url: format!("/compare/{}", comparison.id),
            scenario: comparison.scenario,
            burst: comparison.burst,
            seed: comparison.seed,
            done,
            // A best among runs still going would crown whoever is ahead for now.
            best: if done { best(&columns) } else { HashMap::new() },
            columns,
        }
    }
}

/// For each row, the policies with the best value, and every policy within `BEST_TOLERANCE`
/// of it (a tie shares it; a row every policy shares is "the same for all"); rows nobody has
/// a value for yet are left out.
fn best(columns: &[ColumnReport]) -> HashMap<String, Vec<String>> {
    // Each column's figures as JSON once, read row by row below.
    let figures: Vec<(Value, &str)> = columns
        .iter()
        .filter(|c| !c.gone)
        .map(|c| (serde_json::to_value(&c.figures).unwrap_or_default(), c.policy.as_str()))
        .collect();
    let mut best = HashMap::new();
    for &(row, less_is_better) in ROWS {
        let values: Vec<(f64, &str)> =
            figures.iter().filter_map(|(f, policy)| Some((f.get(row)?.as_f64()?, *policy))).collect();
        let pick = |a: f64, b: f64| if less_is_better { a.min(b) } else { a.max(b) };
        let Some(top) = values.iter().map(|v| v.0).reduce(pick) else { continue };
        let close = |v: f64| (v - top).abs() <= BEST_TOLERANCE * v.abs().max(top.abs());
        let winners = values.iter().filter(|v| close(v.0)).map(|v| v.1.to_owned()).collect();
        best.insert(row.to_owned(), winners);
    }
    best
}

/// Reads a policy update, naming the field that cannot be read.
fn parse_policy(policy: Value) -> Result<PolicyUpdate, String> {
    serde_json::from_value(policy.clone()).map_err(|error| {
        let fields = policy.as_object().into_iter().flatten();
        let culprit = fields
            .map(|(name, value)| (name, serde_json::json!({ name: value })))
            .find(|(_, alone)| serde_json::from_value::<PolicyUpdate>(alone.clone()).is_err());
        match culprit {
            Some((name, _)) => format!("{name}: {error}"),
            None => error.to_string(),
        }
    })
}

/// Plays the scenario's script in one lab: bursts and downstream changes at their times.
async fn run(lab: Arc<Lab>, producer: Producer, script: Vec<Step>) {
    let start = tokio::time::Instant::now();
    for step in script {
        tokio::time::sleep_until(start + Duration::from_millis(step.at_ms())).await;
        match step {
            Step::Burst { count, .. } => match lab.accept_burst(count) {
                Ok(ids) => match lab.persisted().await {
                    Ok(()) => producer.start(&lab, ids),
                    Err(_) => {
                        tracing::warn!(lab = %lab.id, "the store could not keep a comparison's burst; it was taken back");
                        lab.withdraw_burst(&ids);
                    }
                },
                Err(e) => tracing::warn!(lab = %lab.id, error = ?e, "a comparison's burst was refused"),
            },
            Step::Downstream { update, .. } => {
                if let Err(e) = lab.set_downstream(&update) {
                    tracing::warn!(lab = %lab.id, error = %e, "a comparison's step was refused");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(policy: &str, drain_ms: u64, requests: u64) -> ColumnReport {
        ColumnReport {
            policy: policy.into(),
            lab: String::new(),
            lab_url: String::new(),
            started_ms: 0,
            done: true,
            gone: false,
            figures: Figures { drain_ms: Some(drain_ms), requests, ..Default::default() },
        }
    }

    #[test]
    fn a_best_within_the_tolerance_of_another_is_a_tie() {
        // A 3 ms difference in a 2 s drain is a tie; 300 requests against 400 is not.
        let columns = [column("none", 2_000, 300), column("full", 2_003, 400), column("equal", 2_600, 300)];
        let best = best(&columns);
        assert_eq!(best["drain_ms"], ["none", "full"]);
        assert_eq!(best["requests"], ["none", "equal"]);
        let close = [column("a", 1_000, 300), column("b", 1_040, 310)];
        let best = super::best(&close);
        assert_eq!((best["drain_ms"].len(), best["requests"].len()), (2, 2), "the same for all: {best:?}");
    }

    #[test]
    fn a_name_used_twice_is_found() {
        assert_eq!(duplicate_name(["none", "full", "none"]), Some("none"));
        assert_eq!(duplicate_name(["none", "full"]), None);
    }
}

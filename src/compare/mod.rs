//! Retry policies compared side by side: the same scenario, several policies at once, each in
//! a lab of its own against a downstream of its own, with the same seed, all started together.
//! A comparison is saved when it starts and survives a restart like its labs do; its figures
//! are measured from the labs whenever they are asked for. With `runs` above 1 each policy runs
//! that many times with seeds derived from the one given, and the table gives each figure's
//! median with its range: a policy is best on a row only when it beats the others beyond their
//! ranges, else the policies whose ranges overlap the best one's are tied. How late the
//! script's steps and the traffic's arrivals ran against their schedule says how busy the
//! machine was, and the report warns when that was too busy for the figures to mean much.

pub mod report;
pub mod scenario;
pub mod stats;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::Limits;
use crate::domain::{LabId, Lateness};
use crate::lab::{Lab, Labs, unix_now_ms};
use crate::producer::Producer;
use crate::retry::PolicyUpdate;
use crate::store::Store;
pub use report::{Figures, ROWS};
pub use scenario::{PRESETS, SCENARIOS, Scenario, Step};

/// Most policies in one comparison.
pub const MAX_POLICIES: usize = 5;
/// Past this lateness (p99, ms) of the script's steps or the traffic's arrivals, the report
/// warns that the machine was too busy for the figures to mean much.
pub const BUSY_LATE_MS: f64 = 20.0;

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
    /// Messages each policy sends, for the scenarios whose load is a burst (not `metastable`,
    /// whose load is steady traffic).
    #[serde(default = "default_burst")]
    pub burst: usize,
    pub policies: Vec<PolicyChoice>,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// How many times each policy runs, each with its own seed derived from `seed`: 1 to
    /// `--max-compare-runs`.
    #[serde(default = "one")]
    pub runs: u32,
}

fn default_seed() -> u64 {
    1
}

fn default_burst() -> usize {
    100
}

fn one() -> u32 {
    1
}

/// The seed of run `run` (0-based): the first run has the seed given.
pub fn run_seed(seed: u64, run: u32) -> u64 {
    seed.wrapping_add(u64::from(run).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// A comparison as it is saved: what was asked, and the lab each policy runs in.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    pub id: ComparisonId,
    pub scenario: Scenario,
    pub burst: usize,
    pub seed: u64,
    #[serde(default = "one")]
    pub runs: u32,
    pub columns: Vec<Column>,
    pub created_unix_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Column {
    pub policy: String,
    /// Which run of the policy this is, 0-based.
    #[serde(default)]
    pub run: u32,
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
    pub runs: u32,
    /// Every column has drained (or its lab is gone).
    pub done: bool,
    /// One per lab: each run of each policy.
    pub columns: Vec<ColumnReport>,
    /// One per policy: each row's median over its runs, with the range.
    pub policies: Vec<PolicySummary>,
    /// For each row, the policies that did best on it: one when it beat the others beyond
    /// their ranges, several when their ranges overlap (a tie).
    pub best: HashMap<String, Vec<String>>,
    pub machine: MachineLoad,
}

/// One policy over its runs: for each row with a value, the median, the least and the most;
/// also `messages`, `offered`, and `dead_letter_by_cause.<cause>` for each cause any run of
/// any policy had (0 in a run without it), which no policy is best on.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PolicySummary {
    pub policy: String,
    pub runs: u32,
    pub figures: HashMap<String, Spread>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// How busy the machine was while the comparison ran: how late its script's steps and its
/// traffic's arrivals were against their schedule (p99, ms), and a warning past 20 ms.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MachineLoad {
    pub late_ms_p99: Option<f64>,
    pub warning: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ColumnReport {
    pub policy: String,
    pub run: u32,
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
    /// How late each running comparison's script steps were (in memory: a restart forgets).
    steps_late: RwLock<HashMap<ComparisonId, Arc<Mutex<Lateness>>>>,
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
        Comparisons { all: RwLock::new(all), steps_late: Default::default() }
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
        let max_runs = limits.max_compare_runs;
        if !(1..=max_runs).contains(&request.runs) {
            return Err(Refusal::Limit {
                limit: "max_compare_runs",
                detail: format!("runs must be 1 to {max_runs} (max_compare_runs)"),
            });
        }
        let runs = request.runs;
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
        let columns = request.policies.len() * runs as usize;
        let (active, adding) = (labs.active_messages(), request.burst * columns);
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
            for run in 0..runs {
                let policy = scenario.base_policy(run_seed(request.seed, run)).then(changes.clone());
                let downstream = scenario.downstream(request.burst);
                setups.push(((choice.name().to_owned(), run), policy, downstream));
            }
        }
        let mut made: Vec<((String, u32), Arc<Lab>)> = Vec::new();
        for ((name, run), policy, downstream) in setups {
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
            lab.set_downstream(&downstream).map_err(|e| Refusal::Invalid(e.to_string()))?;
            made.push(((name, run), lab));
        }
        let comparison = Comparison {
            id: LabId::new(labs.instance),
            scenario,
            burst: request.burst,
            seed: request.seed,
            runs,
            columns: made
                .iter()
                .map(|((policy, run), lab)| Column {
                    policy: policy.clone(),
                    run: *run,
                    lab: lab.id,
                    started_ms: lab.now_ms(),
                })
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
        let late = Arc::new(Mutex::new(Lateness::default()));
        self.steps_late.write().unwrap_or_else(|p| p.into_inner()).insert(comparison.id, late.clone());
        for (_, lab) in made {
            tokio::spawn(run(lab, producer.clone(), script.clone(), late.clone()));
        }
        Ok(comparison)
    }

    /// The comparison's table, measured now.
    pub fn report(&self, comparison: &Comparison, labs: &Labs) -> ComparisonReport {
        let scenario = comparison.scenario;
        let ends_ms = scenario.script_ends_ms(comparison.burst);
        let mut traffic_late: Vec<f64> = Vec::new();
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
                let done = match &lab {
                    None => true,
                    // Steady traffic: done once its script has run to the end and drained.
                    Some(lab) if scenario.has_traffic() => {
                        figures.drain_ms.is_some()
                            && lab.traffic().is_none()
                            && lab.now_ms() >= column.started_ms + ends_ms
                    }
                    Some(_) => figures.drain_ms.is_some() && figures.messages >= comparison.burst as u64,
                };
                if let Some(late) = lab.as_ref().and_then(|lab| lab.traffic_view().late_ms_p99) {
                    traffic_late.push(late);
                }
                ColumnReport {
                    policy: column.policy.clone(),
                    run: column.run,
                    lab: column.lab.to_string(),
                    lab_url: format!("/labs/{}", column.lab),
                    started_ms: column.started_ms,
                    done,
                    gone: lab.is_none(),
                    figures,
                }
            })
            .collect();
        let policies = summaries(&columns);
        let steps = self.steps_late.read().unwrap_or_else(|p| p.into_inner()).get(&comparison.id).cloned();
        let steps_p99 = steps.and_then(|late| late.lock().unwrap_or_else(|p| p.into_inner()).p99_ms());
        let late_ms_p99 = traffic_late.into_iter().chain(steps_p99).reduce(f64::max);
        let warning = late_ms_p99.filter(|&late| late > BUSY_LATE_MS).map(|late| {
            format!(
                "the machine was busy: arrivals and steps ran up to {late:.0} ms behind their schedule \
                 (p99), so these figures measure the machine as much as the policies; run again on a \
                 quieter machine, or with --runs to see the spread"
            )
        });
        let done = columns.iter().all(|c| c.done);
        ComparisonReport {
            id: comparison.id.to_string(),
            url: format!("/compare/{}", comparison.id),
            scenario,
            burst: comparison.burst,
            seed: comparison.seed,
            runs: comparison.runs,
            done,
            // A best among runs still going would crown whoever is ahead for now.
            best: if done { best(&policies) } else { HashMap::new() },
            policies,
            machine: MachineLoad { late_ms_p99, warning },
            columns,
        }
    }
}

/// Figures summarized over the runs as the table's rows are, though no policy is best on them:
/// how many messages there were, and (as `dead_letter_by_cause.<cause>`) each cause of dead
/// letters that any run had.
const ALSO_SUMMED: &[&str] = &["messages", "offered"];

/// The median, least and most of `values`; `None` when there are none.
fn spread(mut values: Vec<f64>) -> Option<Spread> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 };
    Some(Spread { median, min: values[0], max: values[n - 1] })
}

/// Each policy's rows over its runs (labs that are gone left out): median, least, most.
fn summaries(columns: &[ColumnReport]) -> Vec<PolicySummary> {
    let causes: std::collections::BTreeSet<&str> = columns
        .iter()
        .filter(|c| !c.gone)
        .flat_map(|c| c.figures.dead_letter_by_cause.keys().map(String::as_str))
        .collect();
    let mut order: Vec<&str> = Vec::new();
    for column in columns {
        if !order.contains(&column.policy.as_str()) {
            order.push(&column.policy);
        }
    }
    order
        .into_iter()
        .map(|policy| {
            let runs: Vec<Value> = columns
                .iter()
                .filter(|c| c.policy == policy && !c.gone)
                .map(|c| serde_json::to_value(&c.figures).unwrap_or_default())
                .collect();
            let mut figures = HashMap::new();
            let rows = ROWS.iter().map(|&(row, _)| row).chain(ALSO_SUMMED.iter().copied());
            for row in rows {
                let values = runs.iter().filter_map(|f| f.get(row)?.as_f64()).collect();
                if let Some(spread) = spread(values) {
                    figures.insert(row.to_owned(), spread);
                }
            }
            // A cause no run of this policy had counts 0 in each: another policy had it.
            for cause in &causes {
                let values = runs
                    .iter()
                    .map(|f| f["dead_letter_by_cause"].get(cause).and_then(Value::as_f64).unwrap_or(0.0))
                    .collect();
                if let Some(spread) = spread(values) {
                    figures.insert(format!("dead_letter_by_cause.{cause}"), spread);
                }
            }
            let runs = columns.iter().filter(|c| c.policy == policy).count() as u32;
            PolicySummary { policy: policy.to_owned(), runs, figures }
        })
        .collect()
}

/// For each row, the policy whose median is best, alone when it beat every other beyond their
/// spread, or with every policy that ties with it: whose range overlaps its own, or whose
/// median is within `BEST_TOLERANCE` of its median (a row every policy shares is "the same for
/// all"); rows nobody has a value for yet are left out. With one run each, a range is a
/// point: the tolerance alone decides.
fn best(policies: &[PolicySummary]) -> HashMap<String, Vec<String>> {
    let mut best = HashMap::new();
    for &(row, less_is_better) in ROWS {
        let spreads: Vec<(&Spread, &str)> =
            policies.iter().filter_map(|p| Some((p.figures.get(row)?, p.policy.as_str()))).collect();
        let better = |a: f64, b: f64| if less_is_better { a < b } else { a > b };
        let Some(&(top, _)) =
            spreads.iter().reduce(|a, b| if better(b.0.median, a.0.median) { b } else { a })
        else {
            continue;
        };
        // Another policy ties with the top one when it is not beaten beyond the spread (its
        // best run reaches the top one's worst), or not by more than the tolerance.
        let worst_of_top = if less_is_better { top.max } else { top.min };
        let reach = |s: &Spread| if less_is_better { s.min } else { s.max };
        let close = |v: f64| (v - top.median).abs() <= BEST_TOLERANCE * v.abs().max(top.median.abs());
        let winners = spreads
            .iter()
            .filter(|(s, _)| std::ptr::eq(*s, top) || !better(worst_of_top, reach(s)) || close(s.median))
            .map(|(_, policy)| (*policy).to_owned())
            .collect();
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

/// Plays the scenario's script in one lab: bursts, traffic and downstream changes at their
/// times, noting how late each step came against its plan.
async fn run(lab: Arc<Lab>, producer: Producer, script: Vec<Step>, late: Arc<Mutex<Lateness>>) {
    let start = tokio::time::Instant::now();
    for step in script {
        let due = start + Duration::from_millis(step.at_ms());
        tokio::time::sleep_until(due).await;
        let behind = due.elapsed().as_secs_f64() * 1000.0;
        late.lock().unwrap_or_else(|p| p.into_inner()).record(behind);
        match step {
            Step::Traffic { update, .. } => match lab.set_traffic(&update) {
                Ok(_) => producer.drive_traffic(&lab),
                Err(e) => {
                    tracing::warn!(lab = %lab.id, error = %e.detail, "a comparison's traffic was refused")
                }
            },
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

    fn summary(policy: &str, row: &str, (median, min, max): (f64, f64, f64)) -> PolicySummary {
        let figures = HashMap::from([(row.to_owned(), Spread { median, min, max })]);
        PolicySummary { policy: policy.into(), runs: 3, figures }
    }

    #[test]
    fn best_only_beyond_the_spread_and_ties_when_the_ranges_overlap() {
        // Fewer requests is better. "a" beats "b" beyond both ranges: best alone.
        let clear =
            [summary("a", "requests", (100.0, 90.0, 110.0)), summary("b", "requests", (150.0, 120.0, 170.0))];
        assert_eq!(best(&clear)["requests"], ["a"]);
        // "a" has the better median, but "b"'s best run is within "a"'s range: a tie.
        let overlap =
            [summary("a", "requests", (100.0, 90.0, 130.0)), summary("b", "requests", (140.0, 120.0, 170.0))];
        assert_eq!(best(&overlap)["requests"], ["a", "b"]);
        // More delivered is better: the same rule the other way round.
        let more =
            [summary("a", "delivered", (80.0, 70.0, 85.0)), summary("b", "delivered", (95.0, 90.0, 99.0))];
        assert_eq!(best(&more)["delivered"], ["b"]);
        // One run each: a range is a point, so only equal values tie.
        let points = [
            summary("a", "wasted", (3.0, 3.0, 3.0)),
            summary("b", "wasted", (3.0, 3.0, 3.0)),
            summary("c", "wasted", (4.0, 4.0, 4.0)),
        ];
        assert_eq!(best(&points)["wasted"], ["a", "b"]);
    }

    #[test]
    fn the_first_run_keeps_the_seed_and_the_others_differ() {
        assert_eq!(run_seed(7, 0), 7);
        let seeds: std::collections::HashSet<u64> = (0..5).map(|run| run_seed(7, run)).collect();
        assert_eq!(seeds.len(), 5);
    }

    fn column(policy: &str, drain_ms: u64, requests: u64) -> ColumnReport {
        ColumnReport {
            policy: policy.into(),
            run: 0,
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
        let best = best(&summaries(&columns));
        assert_eq!(best["drain_ms"], ["none", "full"]);
        assert_eq!(best["requests"], ["none", "equal"]);
        let close = [column("a", 1_000, 300), column("b", 1_040, 310)];
        let best = super::best(&summaries(&close));
        assert_eq!((best["drain_ms"].len(), best["requests"].len()), (2, 2), "the same for all: {best:?}");
    }

    #[test]
    fn a_policy_over_its_runs_has_the_median_and_range_of_every_row_and_cause() {
        let run = |policy: &str, requests: u64, timed_out: u64| {
            let mut c = column(policy, 1_000, requests);
            c.figures.messages = 20;
            if timed_out > 0 {
                c.figures.dead_letter_by_cause.insert("time_budget".into(), timed_out);
            }
            c
        };
        let columns = [run("a", 30, 2), run("a", 50, 0), run("a", 40, 5), run("b", 25, 0)];
        let summaries = summaries(&columns);
        let a = &summaries[0].figures;
        assert_eq!(a["requests"], Spread { median: 40.0, min: 30.0, max: 50.0 });
        assert_eq!(a["messages"], Spread { median: 20.0, min: 20.0, max: 20.0 });
        assert_eq!(a["dead_letter_by_cause.time_budget"], Spread { median: 2.0, min: 0.0, max: 5.0 });
        // A cause only another policy had is 0 in each run of this one.
        let b = &summaries[1].figures;
        assert_eq!(b["dead_letter_by_cause.time_budget"], Spread { median: 0.0, min: 0.0, max: 0.0 });
        assert!(!best(&summaries).contains_key("messages"), "nobody is best on how many messages there were");
    }

    #[test]
    fn a_name_used_twice_is_found() {
        assert_eq!(duplicate_name(["none", "full", "none"]), Some("none"));
        assert_eq!(duplicate_name(["none", "full"]), None);
    }
}

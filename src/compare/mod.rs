//! Retry policies compared side by side: the same scenario, several policies, each run of each
//! policy in a lab of its own against a downstream of its own. The runs go one after another,
//! each run's policies together with one seed, so they share the moment's conditions and the
//! machine runs one run at a time. A comparison is saved when it starts and survives a restart
//! like its labs do (runs that had not started by then never will, and say so); its figures
//! are measured from the labs whenever they are asked for.
//!
//! Each scenario asks one question, its key figure (`Scenario::key_figures`), and the verdict
//! answers it alone, by a stated test over the runs (`verdict`); the other figures are medians
//! and ranges. How late the driver's clock, the script's steps and the traffic's arrivals ran
//! against their schedule says how busy the machine was: a run later than its threshold
//! (`LATE_RUN_MS` unless the request names another) is left out and reported.
//!
//! With `defences` a comparison is a grid: each (defence, policy) cell is a column of its own
//! whose endpoint has the row's defences (`defences`), and the report lists each cell's medians
//! and ranges (`Grid`). No test is run across defences, so no cell is named best; within a row
//! the policies get the verdict a comparison of them alone would.

pub mod defences;
pub mod presets;
pub mod report;
pub mod scenario;
pub mod stats;
pub mod verdict;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::Limits;
use crate::domain::{LabId, Lateness};
use crate::downstream::DownstreamUpdate;
use crate::lab::{Lab, Labs, unix_now_ms};
use crate::producer::Producer;
use crate::retry::PolicyUpdate;
use crate::store::Store;
pub use defences::{MAX_DEFENCES, MAX_GRID_POLICIES, NamedDefences};
pub use report::{Figures, ROWS};
pub use scenario::{SCENARIOS, Scenario, Step};
pub use verdict::Verdict;

/// Most policies in one comparison.
pub const MAX_POLICIES: usize = 5;
/// Past this lateness (p99, ms) of the driver's clock ticks, the script's steps or the
/// traffic's arrivals, a run is left out of the medians and the verdict: the machine, not the
/// policy, would be what it measured.
pub const LATE_RUN_MS: f64 = 20.0;
/// The most lenient threshold a request may name.
pub const MAX_LATE_RUN_MS: f64 = 1_000.0;

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
            PolicyChoice::Preset(name) => presets::changes(name),
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
    /// How many times each policy runs, each with its own seed derived from `seed` (run `r` of
    /// every policy shares one seed): 1 to `--max-compare-runs`. By default the fewest with
    /// which the verdict's test can find a difference (4 for two policies on a scenario with
    /// one key figure; more with more policies or two key figures).
    #[serde(default)]
    pub runs: Option<u32>,
    /// Past this lateness (p99, ms) a run is left out of the medians and the verdict: 1 to
    /// 1000, by default 20. Lenient thresholds let a busy machine's noise into the figures.
    #[serde(default)]
    pub late_threshold_ms: Option<f64>,
    /// The grid: the endpoint's defences to cross with the policies, each a row under its name
    /// (1 to 3; then 1 to 3 policies). Every (defence, policy) cell runs as a column does: in
    /// a lab of its own, its runs one after another with every cell of a run together. Only
    /// the scenarios whose endpoint has a line (`overload`, `metastable`) take defences other
    /// than none. Absent: a comparison of policies alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defences: Option<Vec<NamedDefences>>,
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
    #[serde(default = "late_run_ms")]
    pub late_threshold_ms: f64,
    /// The grid's rows, in the order asked; empty for a comparison of policies alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub defences: Vec<NamedDefences>,
}

fn late_run_ms() -> f64 {
    LATE_RUN_MS
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Column {
    pub policy: String,
    /// In a grid, the name of the defences its endpoint has (its row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defence: Option<String>,
    /// Which run of the policy this is, 0-based.
    #[serde(default)]
    pub run: u32,
    pub lab: LabId,
    /// When the scenario started, in the lab's own time (while `waiting`, when the lab was made).
    pub started_ms: u64,
    /// Its run has not started yet. Comparisons from before runs went one after another
    /// started every run at once: `false`.
    #[serde(default)]
    pub waiting: bool,
    /// 0 for a run's first try; each re-run of a run the machine kept late counts one up.
    #[serde(default)]
    pub attempt: u32,
    /// The steps of the script known to have run in its lab, saved as each runs; `None` in
    /// comparisons saved before steps were counted (they are judged as they always were).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub played: Option<u32>,
    /// A restart cut the run short: the first step of its script it lost (0-based; the
    /// script's length when the script had run and only its drain was lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_step: Option<u32>,
    /// The driver saw the run finish: a restart leaves it be, whatever its lab does later.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub finished: bool,
}

/// A comparison, as `GET /api/comparisons/{id}` sends it and `retrylab compare --json` prints
/// it: one document.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ComparisonReport {
    pub id: String,
    pub url: String,
    #[schema(value_type = String)]
    pub scenario: Scenario,
    /// Messages each run of each policy sends (not used by `metastable`, whose load is steady
    /// traffic).
    pub burst: usize,
    pub seed: u64,
    /// Runs of each policy.
    pub runs: u32,
    /// The figures the verdict is judged on, in the order they are judged: the scenario's one
    /// question.
    pub key_figure: Vec<String>,
    /// When the scenario's timed change of the endpoint (the outage, the slowdown) starts and
    /// ends, ms after each run's start; `None` for a scenario without one.
    #[schema(required = true)]
    pub trigger_ms: Option<[u64; 2]>,
    /// Every run has finished (or its lab is gone).
    pub done: bool,
    /// One per policy, in the order asked.
    pub policies: Vec<PolicyReport>,
    pub verdict: Verdict,
    /// The figures on which every valid run of every policy gave one value: "the same for all".
    pub same_for_all: Vec<String>,
    /// How late the comparison's clock ticks, script steps and traffic arrivals ran against
    /// their schedule (p99, ms): the latest of its runs, those left out included; `None`
    /// before any was measured.
    #[schema(required = true)]
    pub lateness_ms_p99: Option<f64>,
    /// The lateness past which a run is left out of the verdict.
    pub late_threshold_ms: f64,
    /// The runs left out because the machine kept them waiting past `late_threshold_ms`.
    pub invalid_runs: Vec<InvalidRun>,
    /// Said when runs were left out, or when runs never started.
    #[schema(required = true)]
    pub warning: Option<String>,
    /// Why the policies cannot differ on this scenario, when that can be seen from their
    /// settings alone: every one honours the endpoint's `Retry-After` as a floor above every
    /// wait its own backoff would choose, so the header sets all their waits alike.
    #[schema(required = true)]
    pub tie_reason: Option<String>,
    /// One per lab: each run of each policy.
    pub columns: Vec<ColumnReport>,
    /// A comparison over defences × policies: its cells. Then `policies` lists each policy's
    /// settings and runs, with no medians (a policy's runs met different endpoints), and
    /// `verdict` names no best: the cells carry the figures, and each row its own verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grid: Option<Grid>,
}

/// Defences × policies: a row per defence, a column per policy, each cell a policy's runs
/// against an endpoint with that row's defences.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Grid {
    /// The rows, in the order asked.
    pub rows: Vec<GridRow>,
    /// The columns: the policies' names, in the order asked.
    pub policies: Vec<String>,
    /// One per (defence, policy), row by row.
    pub cells: Vec<Cell>,
    /// What the grid judges and what it does not, in a sentence.
    pub judged: String,
}

/// One row of the grid: a defence, and the verdict among the policies against it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct GridRow {
    pub name: String,
    pub defences: crate::downstream::Defences,
    /// The comparison's test among this row's policies, as a comparison of them alone would
    /// judge them; `None` with one policy.
    #[schema(required = true)]
    pub verdict: Option<Verdict>,
}

/// One cell of the grid: one policy against one defence, over its runs.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Cell {
    pub defence: String,
    pub policy: String,
    /// Each figure's median over the cell's valid runs, the key figure (`key_figure`) among
    /// them.
    pub median: BTreeMap<String, f64>,
    /// Each figure's least and most over the cell's valid runs.
    pub range: BTreeMap<String, [f64; 2]>,
    /// On metastable: whether the cell ended the failure (as `PolicyReport::ends_failure`).
    #[schema(required = true)]
    pub ends_failure: Option<bool>,
    /// The runs its medians are over.
    pub valid_runs: u32,
    /// Its labs, one per run (and per try of a run run again).
    pub labs: Vec<String>,
}

/// One policy over its runs.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PolicyReport {
    pub name: String,
    /// Its full settings, as its first run's lab holds them (the runs differ only in `seed`);
    /// `None` once that lab is gone.
    #[schema(value_type = Option<Object>, required = true)]
    pub policy: Option<Value>,
    /// Each run's figures, in run order.
    pub runs: Vec<PolicyRun>,
    /// Each figure's median over the valid runs (also `messages`, `offered`, and
    /// `dead_letter_by_cause.<cause>` for each cause any run had).
    pub median: BTreeMap<String, f64>,
    /// Each figure's least and most over the valid runs.
    pub range: BTreeMap<String, [f64; 2]>,
    /// On a scenario with a trigger (metastable): whether this policy ended the failure, its
    /// median goodput after the trigger at least `FAILURE_ENDED_AT` (half the new messages of
    /// the 10 s after the slowdown delivered); `None` on other scenarios or before it is
    /// measured.
    pub ends_failure: Option<bool>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PolicyRun {
    pub run: u32,
    /// In a grid, the defences this run's endpoint had.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub defence: Option<String>,
    pub attempt: u32,
    /// Counted in the medians and the verdict: finished, its lab kept, and on time.
    pub valid: bool,
    pub figures: Figures,
}

/// A run (one attempt of it) left out: how late the machine ran while it did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, utoipa::ToSchema)]
pub struct InvalidRun {
    pub run: u32,
    pub attempt: u32,
    pub lateness_ms_p99: f64,
    /// A later attempt ran in its place.
    pub re_run: bool,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ColumnReport {
    pub policy: String,
    /// In a grid, the defences its endpoint had (its row).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub defence: Option<String>,
    pub run: u32,
    /// 0 for the run's first try; a run the machine kept late is run again as attempt 1, 2.
    pub attempt: u32,
    pub lab: String,
    pub lab_url: String,
    pub started_ms: u64,
    /// Its run has not started yet: runs go one after another.
    pub waiting: bool,
    pub done: bool,
    /// The lab was deleted (idle too long, or evicted): nothing left to measure.
    pub gone: bool,
    /// The server stopped before this run could start, or while it ran (`lost_step`): it
    /// will not run again, and counts in no median and no verdict.
    pub interrupted: bool,
    /// Interrupted while it ran: the first step of the scenario's script it lost, 0-based (the
    /// script's length when its script had run and only its drain was lost).
    #[schema(required = true)]
    pub lost_step: Option<u32>,
    pub figures: Figures,
}

/// Why a comparison was refused.
#[derive(Debug)]
pub enum Refusal {
    Invalid(String),
    /// A field of the request that cannot be used, named as the request has it
    /// (`defences[1].defences.queue`).
    Field(crate::invalid::Invalid),
    /// The store could not keep the comparison's labs (they were removed again).
    Storage,
    Limit {
        limit: &'static str,
        detail: String,
    },
    /// The requesting address has created its labs for now (`lab_creates_per_hour`): a
    /// comparison's labs count as `POST /api/labs`'s do. Nothing was made.
    Allowance {
        retry_after_s: u64,
    },
}

/// One run of one column: its policy's name, its defence's in a grid, and the run.
type CellRun = (String, Option<String>, u32);

/// How late each attempt of each run's clock ticks and script steps were, by `(run, attempt)`.
type RunLateness = Arc<Mutex<HashMap<(u32, u32), Lateness>>>;

/// Makes a new lab for a late run to be run again in; `None` when the server holds
/// `max_labs` or the address that asked has no lab left in its allowance.
pub type MakeLab = Arc<dyn Fn() -> Option<Arc<Lab>> + Send + Sync>;

/// Takes `n` labs from the allowance of the address that asked for the comparison (the one
/// `POST /api/labs` draws on), or refuses them all.
pub type Allowance = Box<dyn FnOnce(u32) -> Result<(), Refusal> + Send>;

/// The most times one run is run again after the machine kept it late.
pub const MAX_RE_RUNS: u32 = 1;

/// Every comparison this server holds.
#[derive(Default)]
pub struct Comparisons {
    all: Arc<RwLock<HashMap<ComparisonId, Comparison>>>,
    /// How late each running comparison's clock ticks and script steps were (in memory: a
    /// restart forgets, and a comparison without it here is not being driven).
    late: Arc<RwLock<HashMap<ComparisonId, RunLateness>>>,
    /// The comparisons whose driver is still going: one is not done before its driver is,
    /// since a late run's re-run is added only once its first try has finished.
    driving: Arc<Mutex<std::collections::HashSet<ComparisonId>>>,
}

/// Takes a comparison off `driving` when its driver ends, however it ends.
struct Driving {
    driving: Arc<Mutex<std::collections::HashSet<ComparisonId>>>,
    id: ComparisonId,
}

impl Drop for Driving {
    fn drop(&mut self) {
        self.driving.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
    }
}

impl Comparisons {
    /// The comparisons the store kept; unreadable rows are skipped with a warning. Nothing
    /// drives them after a restart: a run that was going when the server stopped is marked
    /// with the step it lost (and saved so), unless its whole script had run and its lab had
    /// settled, as its lab says before any delivery resumes.
    pub async fn restore(rows: Vec<(String, String)>, labs: &Labs, store: &Store) -> Comparisons {
        let mut all = HashMap::new();
        for (id, body) in rows {
            match serde_json::from_str::<Comparison>(&body) {
                Ok(mut comparison) => {
                    if cut_short(&mut comparison, labs)
                        && let Err(e) = save(store, &comparison).await
                    {
                        tracing::warn!(comparison = %id, error = %e, "could not save a comparison's lost steps");
                    }
                    all.insert(comparison.id, comparison);
                }
                Err(e) => tracing::warn!(comparison = %id, error = %e, "skipping an unreadable comparison"),
            }
        }
        Comparisons { all: Arc::new(RwLock::new(all)), late: Default::default(), driving: Default::default() }
    }

    pub fn get(&self, id: &ComparisonId) -> Option<Comparison> {
        self.all.read().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
    }

    /// Sets up one lab per run of each policy, saves the comparison, and starts its runs one
    /// after another, each run's policies together.
    pub async fn start(
        &self,
        request: ComparisonRequest,
        (labs, producer, store): (&Labs, &Producer, &Store),
        limits: &Limits,
        (allowance, make_lab): (Allowance, MakeLab),
    ) -> Result<Comparison, Refusal> {
        let max_burst = limits.max_burst;
        let named = |field: &str, detail: String| Refusal::Field(crate::invalid::Invalid::new(field, detail));
        let scenario = Scenario::parse(&request.scenario).map_err(|e| named("scenario", e))?;
        let rows = grid_rows(scenario, &request)?;
        if rows.is_empty() && !(2..=MAX_POLICIES).contains(&request.policies.len()) {
            return Err(named("policies", format!("compare 2 to {MAX_POLICIES} policies")));
        }
        if let Some(name) = duplicate_name(request.policies.iter().map(PolicyChoice::name)) {
            let i = request.policies.iter().rposition(|p| p.name() == name).unwrap_or(0);
            return Err(named(&format!("policies[{i}]"), duplicate_refusal(name)));
        }
        let max_runs = limits.max_compare_runs;
        // Each cell of a grid is a column of its own: its labs count as a policy's do.
        let policies = (request.policies.len() * rows.len().max(1)) as u32;
        // Each run of each policy is a lab, drawn from the address's allowance: by default as
        // many runs as one run of the allowance (`lab_create_burst`) holds, up to the test's need.
        let burst = limits.lab_create_burst;
        let runs = request.runs.unwrap_or_else(|| {
            default_runs(scenario, request.policies.len().max(2)).min(max_runs).min(burst / policies).max(1)
        });
        if !(1..=max_runs).contains(&runs) {
            return Err(Refusal::Limit {
                limit: "max_compare_runs",
                detail: format!("runs must be 1 to {max_runs} (max_compare_runs)"),
            });
        }
        if runs * policies > burst {
            return Err(Refusal::Limit {
                limit: "lab_create_burst",
                detail: format!(
                    "this comparison needs {} labs ({runs} runs of {policies} policies or cells) and one address may create \
                     at most {burst} at once (lab_create_burst): ask for fewer runs or policies",
                    runs * policies
                ),
            });
        }
        let late_threshold_ms = request.late_threshold_ms.unwrap_or(LATE_RUN_MS);
        if !(1.0..=MAX_LATE_RUN_MS).contains(&late_threshold_ms) {
            return Err(named(
                "late_threshold_ms",
                format!(
                    "late_threshold_ms must be 1 to {MAX_LATE_RUN_MS} (ms of lateness, p99, past which a run is left out)"
                ),
            ));
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
        // Runs go one after another: at most one run's messages are in flight at a time.
        let (active, adding) = (labs.active_messages(), request.burst * policies as usize);
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
        // Without a grid, one row with the scenario's own endpoint.
        let row_defences: Vec<Option<&NamedDefences>> =
            if rows.is_empty() { vec![None] } else { rows.iter().map(Some).collect() };
        for run in 0..runs {
            for row in &row_defences {
                for (i, choice) in request.policies.iter().enumerate() {
                    let changes = choice.changes().map_err(|e| match choice {
                        PolicyChoice::Preset(_) => named(&format!("policies[{i}]"), e),
                        PolicyChoice::Custom { name, .. } => {
                            // `parse_policy` says the setting at fault first ("clients: ...").
                            let setting = e.split_once(": ").map(|(s, _)| s).filter(|s| !s.contains(' '));
                            let at = setting.map_or(String::new(), |s| format!(".{s}"));
                            named(&format!("policies[{i}].policy{at}"), format!("policy '{name}': {e}"))
                        }
                    })?;
                    let policy = scenario.base_policy(run_seed(request.seed, run)).then(changes);
                    let mut downstream = scenario.downstream(request.burst);
                    if let Some(row) = row {
                        downstream.defences = Some(row.defences);
                    }
                    // Checked as a lab would check them, before any lab is made or any of the
                    // allowance spent: a typo in a custom policy costs nothing.
                    if run == 0 {
                        settled_in_a_lab(i, choice, &policy, &downstream, limits)?;
                    }
                    let cell = (choice.name().to_owned(), row.map(|r| r.name.clone()), run);
                    setups.push((cell, policy, downstream));
                }
            }
        }
        // All the labs are taken from the allowance before the first is made, or none.
        allowance(runs * policies)?;
        let mut made: Vec<(CellRun, Arc<Lab>)> = Vec::new();
        let mut settings = Vec::new();
        for ((name, defence, run), policy, downstream) in setups {
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
            let set = lab
                .set_policy(&policy)
                .map_err(|e| Refusal::Invalid(format!("policy '{name}': {e}")))
                .and_then(|_| lab.set_downstream(&downstream).map_err(|e| Refusal::Invalid(e.to_string())));
            if let Err(refused) = set {
                // Checked before (`settled_in_a_lab`): a refusal here leaves no lab behind either.
                labs.remove(&lab.id);
                for (_, lab) in &made {
                    labs.remove(&lab.id);
                }
                return Err(refused);
            }
            made.push(((name, defence, run), lab));
            settings.push((policy, downstream));
        }
        let comparison = Comparison {
            id: LabId::new(labs.instance),
            scenario,
            burst: request.burst,
            seed: request.seed,
            runs,
            columns: made
                .iter()
                .map(|((policy, defence, run), lab)| Column {
                    policy: policy.clone(),
                    defence: defence.clone(),
                    run: *run,
                    lab: lab.id,
                    started_ms: lab.now_ms(),
                    // The first run starts now; the driver marks each later one as it starts.
                    waiting: *run > 0,
                    attempt: 0,
                    played: Some(0),
                    lost_step: None,
                    finished: false,
                })
                .collect(),
            created_unix_ms: unix_now_ms(),
            late_threshold_ms,
            defences: rows,
        };
        for (_, lab) in &made {
            lab.persisted()
                .await
                .map_err(|_| Refusal::Invalid("the store did not confirm in time".into()))?;
        }
        save(store, &comparison)
            .await
            .map_err(|e| Refusal::Invalid(format!("saving the comparison failed: {e}")))?;
        self.all.write().unwrap_or_else(|p| p.into_inner()).insert(comparison.id, comparison.clone());
        let late = RunLateness::default();
        self.late.write().unwrap_or_else(|p| p.into_inner()).insert(comparison.id, late.clone());
        let driver = Driver {
            all: self.all.clone(),
            id: comparison.id,
            scenario,
            burst: request.burst,
            labs: made.into_iter().map(|(_, lab)| lab).collect(),
            settings,
            producer: producer.clone(),
            store: store.clone(),
            late,
            late_threshold_ms,
            make_lab,
            turn: Default::default(),
        };
        self.driving.lock().unwrap_or_else(|p| p.into_inner()).insert(comparison.id);
        let driving = Driving { driving: self.driving.clone(), id: comparison.id };
        tokio::spawn(async move {
            driver.drive().await;
            drop(driving);
        });
        Ok(comparison)
    }

    /// The comparison's document, measured now.
    pub fn report(&self, comparison: &Comparison, labs: &Labs) -> ComparisonReport {
        let scenario = comparison.scenario;
        let late = self.late.read().unwrap_or_else(|p| p.into_inner()).get(&comparison.id).cloned();
        let driven = late.is_some();
        // Each attempt of each run: how late the machine kept it (p99, ms).
        let mut run_late: BTreeMap<(u32, u32), f64> = late
            .map(|late| {
                let late = late.lock().unwrap_or_else(|p| p.into_inner());
                late.iter().filter_map(|(key, l)| Some((*key, l.p99_ms()?))).collect()
            })
            .unwrap_or_default();
        let columns: Vec<ColumnReport> = comparison
            .columns
            .iter()
            .map(|column| {
                let lab = labs.get(&column.lab);
                let waiting = column.waiting;
                let figures = match &lab {
                    Some(lab) if !waiting => lab.read(|record, letters, counters| {
                        report::figures(record, letters, counters, column.started_ms)
                    }),
                    _ => Figures::default(),
                };
                let interrupted = (waiting && !driven) || column.lost_step.is_some();
                let done = lab.as_ref().is_none_or(|lab| {
                    interrupted
                        || column.finished
                        || (!waiting && column_done(scenario, comparison.burst, column, lab, &figures))
                });
                if let Some(traffic) = lab.as_ref().and_then(|lab| lab.traffic_view().late_ms_p99) {
                    let slot = run_late.entry((column.run, column.attempt)).or_insert(traffic);
                    *slot = slot.max(traffic);
                }
                ColumnReport {
                    policy: column.policy.clone(),
                    defence: column.defence.clone(),
                    run: column.run,
                    attempt: column.attempt,
                    lab: column.lab.to_string(),
                    lab_url: format!("/labs/{}", column.lab),
                    started_ms: column.started_ms,
                    // A column that never started and never will (the server stopped) is
                    // interrupted, not waiting.
                    waiting: waiting && !interrupted,
                    done,
                    gone: lab.is_none(),
                    interrupted,
                    lost_step: column.lost_step,
                    figures,
                }
            })
            .collect();
        let last_attempt = |run: u32| columns.iter().filter(|c| c.run == run).map(|c| c.attempt).max();
        let invalid_runs: Vec<InvalidRun> = run_late
            .iter()
            .filter(|(_, late)| **late > comparison.late_threshold_ms)
            .map(|(&(run, attempt), &late)| InvalidRun {
                run,
                attempt,
                lateness_ms_p99: late,
                re_run: last_attempt(run) > Some(attempt),
            })
            .collect();
        let left_out = |run: u32, attempt: u32| {
            invalid_runs.iter().any(|r| (r.run, r.attempt) == (run, attempt))
                || last_attempt(run) > Some(attempt)
        };
        let valid = |c: &ColumnReport| {
            !c.gone && !c.waiting && !c.interrupted && c.done && !left_out(c.run, c.attempt)
        };
        let lateness_ms_p99 = run_late.values().copied().reduce(f64::max);
        let driving = self.driving.lock().unwrap_or_else(|p| p.into_inner()).contains(&comparison.id);
        let done = !driving && columns.iter().all(|c| c.done);
        // A policy's settings, as its first run's lab holds them.
        let settings = |name: &str| {
            let first = comparison.columns.iter().find(|c| c.policy == name)?;
            serde_json::to_value(labs.get(&first.lab)?.policy()).ok()
        };
        let mut policies = policy_reports(&columns, valid, settings, |figure| scenario.has_figure(figure));
        let key = scenario.key_figures();
        let grid =
            (!comparison.defences.is_empty()).then(|| grid(comparison, &columns, valid, settings, done));
        if grid.is_some() {
            // A policy's runs met different endpoints: its figures are the cells'.
            for policy in &mut policies {
                policy.median.clear();
                policy.range.clear();
                policy.ends_failure = None;
            }
        }
        let verdict = if grid.is_some() {
            verdict::pending(
                policies.len(),
                key.len(),
                "a grid names no best cell: each row has its own verdict among its policies, and no test is run across defences".into(),
            )
        } else if done {
            judged(key, &columns, valid)
        } else {
            let finished = (0..comparison.runs)
                .filter(|&run| columns.iter().filter(|c| c.run == run).all(|c| c.done))
                .count();
            verdict::pending(
                policies.len(),
                key.len(),
                format!("no verdict yet: {finished} of {} runs finished", comparison.runs),
            )
        };
        let kept_out: Vec<&InvalidRun> = invalid_runs.iter().filter(|r| !r.re_run).collect();
        let warning = if !kept_out.is_empty() {
            Some(late_warning(&kept_out, comparison.late_threshold_ms, done))
        } else if let Some(cut) = columns.iter().find(|c| c.lost_step.is_some()) {
            let lost = lost_what(scenario, comparison.burst, cut.lost_step.unwrap_or_default());
            Some(format!(
                "the server stopped while run {} went: it lost {lost}, and it and any run that never \
                 started are left out of the medians and the verdict",
                cut.run + 1
            ))
        } else if columns.iter().any(|c| c.interrupted) {
            Some(
                "the server stopped before every run could start: the runs that never started are left out"
                    .into(),
            )
        } else {
            None
        };
        let tie_reason = if done { floor_ties(scenario, comparison.burst, &columns, valid) } else { None };
        ComparisonReport {
            id: comparison.id.to_string(),
            url: format!("/compare/{}", comparison.id),
            scenario,
            burst: comparison.burst,
            seed: comparison.seed,
            runs: comparison.runs,
            key_figure: key.iter().map(|(f, _)| (*f).to_owned()).collect(),
            trigger_ms: scenario.trigger_ms(comparison.burst),
            done,
            same_for_all: if done { same_for_all(&policies) } else { Vec::new() },
            policies,
            verdict,
            lateness_ms_p99,
            late_threshold_ms: comparison.late_threshold_ms,
            invalid_runs,
            warning,
            tie_reason,
            columns,
            grid,
        }
    }
}

/// Says why the policies tie when the endpoint's `Retry-After` set every wait they made: in
/// every valid run of every policy, each wait was the header's floor, longer than what the
/// policy's own backoff and jitter chose, so those changed nothing the endpoint saw.
fn floor_ties(
    scenario: Scenario,
    burst: usize,
    columns: &[ColumnReport],
    valid: impl Fn(&ColumnReport) -> bool,
) -> Option<String> {
    let retry_after_s = scenario.downstream(burst).retry_after_s.flatten().filter(|&s| s > 0)?;
    let counted: Vec<&Figures> = columns.iter().filter(|c| valid(c)).map(|c| &c.figures).collect();
    let policies = policy_names(columns).len();
    let (waits, floors) =
        counted.iter().fold((0, 0), |(w, f), c| (w + c.waits, f + c.waits_set_by_retry_after));
    let all = policies >= 2 && !counted.is_empty() && waits > 0 && floors == waits;
    all.then(|| {
        format!(
            "every one of the {waits} waits in these runs was the endpoint's Retry-After: {retry_after_s} s, \
             longer than what each policy's own backoff and jitter chose, so those changed nothing the \
             endpoint saw; on flaky or overload (Retry-After: 0) they can differ"
        )
    })
}

/// The grid's rows a request asks for, checked; none without `defences`.
fn grid_rows(scenario: Scenario, request: &ComparisonRequest) -> Result<Vec<NamedDefences>, Refusal> {
    let Some(rows) = &request.defences else { return Ok(Vec::new()) };
    let field = |field: &str, detail: String| Refusal::Field(crate::invalid::Invalid::new(field, detail));
    if !(1..=MAX_DEFENCES).contains(&rows.len()) {
        return Err(field("defences", format!("a grid has 1 to {MAX_DEFENCES} defences (its rows)")));
    }
    if !(1..=MAX_GRID_POLICIES).contains(&request.policies.len()) {
        return Err(field(
            "policies",
            format!(
                "a grid has 1 to {MAX_GRID_POLICIES} policies (its columns): this machine runs at most nine cells together"
            ),
        ));
    }
    if rows.len() * request.policies.len() < 2 {
        return Err(field(
            "defences",
            "a grid of one cell compares nothing: give two defences or two policies".into(),
        ));
    }
    for (row, named) in rows.iter().enumerate() {
        if let Some(refused) = defences::refusal(scenario, request.burst, row, named) {
            return Err(Refusal::Field(refused));
        }
    }
    if let Some(name) = duplicate_name(rows.iter().map(|r| r.name.as_str())) {
        let row = rows.iter().rposition(|r| r.name == name).unwrap_or(0);
        return Err(field(
            &format!("defences[{row}].name"),
            format!(
                "the defence name '{name}' is used more than once: each names a row, so give each its own"
            ),
        ));
    }
    Ok(rows.clone())
}

/// The grid of a comparison with defences: each cell's figures over its valid runs, and each
/// row's verdict among its policies once every run has finished.
fn grid(
    comparison: &Comparison,
    columns: &[ColumnReport],
    valid: impl Fn(&ColumnReport) -> bool + Copy,
    settings: impl Fn(&str) -> Option<Value> + Copy,
    done: bool,
) -> Grid {
    let scenario = comparison.scenario;
    let key = scenario.key_figures();
    let names: Vec<String> = policy_names(columns).into_iter().map(str::to_owned).collect();
    let (mut rows, mut cells) = (Vec::new(), Vec::new());
    for named in &comparison.defences {
        let own: Vec<ColumnReport> =
            columns.iter().filter(|c| c.defence.as_deref() == Some(named.name.as_str())).cloned().collect();
        for report in policy_reports(&own, valid, settings, |figure| scenario.has_figure(figure)) {
            let labs = own.iter().filter(|c| c.policy == report.name).map(|c| c.lab.clone()).collect();
            cells.push(Cell {
                defence: named.name.clone(),
                valid_runs: report.runs.iter().filter(|r| r.valid).count() as u32,
                policy: report.name,
                median: report.median,
                range: report.range,
                ends_failure: report.ends_failure,
                labs,
            });
        }
        let verdict = (names.len() >= 2).then(|| {
            if done {
                judged(key, &own, valid)
            } else {
                verdict::pending(names.len(), key.len(), "no verdict yet: the runs are still going".into())
            }
        });
        rows.push(GridRow { name: named.name.clone(), defences: named.defences, verdict });
    }
    Grid {
        rows,
        policies: names,
        cells,
        judged: "each cell is the median [least-most] of its valid runs; policies are judged against each \
                 other only within a row, by the comparison's test, and no test is run across rows, so no \
                 cell is named best"
            .into(),
    }
}

/// Marks each run of `comparison` that was going when the server stopped with the first step
/// it lost; true when any was marked.
fn cut_short(comparison: &mut Comparison, labs: &Labs) -> bool {
    let (scenario, burst) = (comparison.scenario, comparison.burst);
    let steps = scenario.script(burst).len() as u32;
    let mut marked = false;
    for column in comparison.columns.iter_mut().filter(|c| !c.waiting && c.lost_step.is_none()) {
        if column.finished {
            continue;
        }
        let (Some(played), Some(lab)) = (column.played, labs.get(&column.lab)) else { continue };
        let figures = lab
            .read(|record, letters, counters| report::figures(record, letters, counters, column.started_ms));
        if played >= steps && column_done(scenario, burst, column, &lab, &figures) {
            continue;
        }
        tracing::warn!(lab = %column.lab, played, steps, "a comparison's run was cut short by a restart");
        column.lost_step = Some(played.min(steps));
        marked = true;
    }
    marked
}

/// What a run cut short lost, for the warning: step `lost` of the scenario's script.
fn lost_what(scenario: Scenario, burst: usize, lost: u32) -> String {
    match scenario.script(burst).get(lost as usize) {
        None => "only the end of its drain".to_owned(),
        Some(Step::Burst { at_ms, .. }) => format!("its burst at {at_ms} ms and all after it"),
        Some(Step::Traffic { at_ms, .. }) => format!("its traffic from {at_ms} ms and all after it"),
        Some(Step::Downstream { at_ms, .. }) => {
            format!("the downstream's change at {at_ms} ms and all after it")
        }
    }
}

/// The default number of runs: the fewest with which the test can find a difference.
pub fn default_runs(scenario: Scenario, policies: usize) -> u32 {
    verdict::runs_needed(policies, scenario.key_figures().len())
}

/// Whether a started column has finished: drained, and for steady traffic, its script ended.
fn column_done(scenario: Scenario, burst: usize, column: &Column, lab: &Lab, figures: &Figures) -> bool {
    if scenario.has_traffic() {
        figures.drain_ms.is_some()
            && lab.traffic().is_none()
            && lab.now_ms() >= column.started_ms + scenario.script_ends_ms(burst)
    } else {
        figures.drain_ms.is_some() && figures.messages >= burst as u64
    }
}

async fn save(store: &Store, comparison: &Comparison) -> Result<(), String> {
    let body = serde_json::to_string(comparison).expect("a comparison serializes");
    let (writer, id, created) = (store.clone(), comparison.id.to_string(), comparison.created_unix_ms);
    tokio::task::spawn_blocking(move || writer.save_comparison(&id, created, &body))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

/// Figures summarized over the runs as the table's rows are: how many messages there were, and
/// (as `dead_letter_by_cause.<cause>`) each cause of dead letters that any run had.
const ALSO_SUMMED: &[&str] = &["messages", "offered"];

/// The median, least and most of `values`; `None` when there are none.
fn spread(mut values: Vec<f64>) -> Option<(f64, [f64; 2])> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 };
    Some((median, [values[0], values[n - 1]]))
}

/// The policies in the order they were asked for.
fn policy_names(columns: &[ColumnReport]) -> Vec<&str> {
    let mut order: Vec<&str> = Vec::new();
    for column in columns {
        if !order.contains(&column.policy.as_str()) {
            order.push(&column.policy);
        }
    }
    order
}

/// What the machine's lateness did to a comparison, in words: which runs ran late and were
/// left out, and for each whether it was run again (a re-run that ran late too) or not (no lab
/// was left for a re-run: the address's allowance or the server's `max_labs` was spent).
fn late_warning(kept_out: &[&InvalidRun], threshold_ms: f64, done: bool) -> String {
    let listed = |runs: &[&&InvalidRun]| {
        let which: Vec<String> =
            runs.iter().map(|r| format!("run {} ({:.0} ms)", r.run + 1, r.lateness_ms_p99)).collect();
        which.join(", ")
    };
    let (again, once): (Vec<&&InvalidRun>, Vec<&&InvalidRun>) = kept_out.iter().partition(|r| r.attempt > 0);
    let not_again = match done {
        true => {
            "was not run again (no lab was left for it: this address's lab allowance or the server's max_labs was spent)"
        }
        false => "has not been run again",
    };
    let late = format!("ran more than {threshold_ms:.0} ms behind schedule (p99)");
    let mut said = Vec::new();
    if !again.is_empty() {
        said.push(format!("{} {late} even when run again", listed(&again)));
    }
    if !once.is_empty() {
        said.push(format!("{} {late} and {not_again}", listed(&once)));
    }
    let are = if kept_out.len() == 1 { "is" } else { "are" };
    format!("the machine was busy: {}, and {are} left out of the medians and the verdict", said.join("; "))
}

/// Each policy over its runs: the runs' figures, and each figure's median and range over the
/// valid ones.
fn policy_reports(
    columns: &[ColumnReport],
    valid: impl Fn(&ColumnReport) -> bool,
    settings: impl Fn(&str) -> Option<Value>,
    has: impl Fn(&str) -> bool,
) -> Vec<PolicyReport> {
    let causes: std::collections::BTreeSet<&str> = columns
        .iter()
        .filter(|c| valid(c))
        .flat_map(|c| c.figures.dead_letter_by_cause.keys().map(String::as_str))
        .collect();
    policy_names(columns)
        .into_iter()
        .map(|name| {
            let own: Vec<&ColumnReport> = columns.iter().filter(|c| c.policy == name).collect();
            let values: Vec<Value> = own
                .iter()
                .filter(|c| valid(c))
                .map(|c| serde_json::to_value(&c.figures).unwrap_or_default())
                .collect();
            let (mut median, mut range) = (BTreeMap::new(), BTreeMap::new());
            let mut put = |figure: String, sample: Vec<f64>| {
                if let Some((m, r)) = spread(sample) {
                    median.insert(figure.clone(), m);
                    range.insert(figure, r);
                }
            };
            for row in ROWS.iter().chain(ALSO_SUMMED).filter(|row| has(row)) {
                put((*row).to_owned(), values.iter().filter_map(|f| f.get(row)?.as_f64()).collect());
            }
            // A cause no run of this policy had counts 0 in each: another policy had it.
            for cause in &causes {
                let sample = values
                    .iter()
                    .map(|f| f["dead_letter_by_cause"].get(cause).and_then(Value::as_f64).unwrap_or(0.0))
                    .collect();
                put(format!("dead_letter_by_cause.{cause}"), sample);
            }
            PolicyReport {
                name: name.to_owned(),
                policy: settings(name),
                runs: own
                    .iter()
                    .map(|c| PolicyRun {
                        run: c.run,
                        defence: c.defence.clone(),
                        attempt: c.attempt,
                        valid: valid(c),
                        figures: c.figures.clone(),
                    })
                    .collect(),
                ends_failure: report::failure_ended(median.get("goodput_after_trigger").copied()),
                median,
                range,
            }
        })
        .collect()
}

/// Each key figure's values over each policy's valid runs, for the verdict.
/// Refuses policy `i` of a comparison, naming its field, when a lab would refuse its settings.
fn settled_in_a_lab(
    i: usize,
    choice: &PolicyChoice,
    policy: &PolicyUpdate,
    downstream: &DownstreamUpdate,
    limits: &Limits,
) -> Result<(), Refusal> {
    let named = |invalid: crate::invalid::Invalid| {
        let detail = match choice {
            PolicyChoice::Custom { name, .. } => format!("policy '{name}': {}", invalid.detail),
            PolicyChoice::Preset(_) => invalid.detail,
        };
        Refusal::Field(crate::invalid::Invalid::new(format!("policies[{i}].{}", invalid.field), detail))
    };
    let checked = crate::retry::Policy::default().updated(policy).map_err(named)?;
    let max = limits.max_clients;
    if checked.clients > max {
        return Err(named(crate::invalid::Invalid::new(
            "policy.clients",
            format!("clients must be 1 to {max} (max_clients)"),
        )));
    }
    crate::downstream::DownstreamSettings::default().updated(downstream).map_err(named)?;
    Ok(())
}

/// The verdict on the key figures, with every policy crowned on a cost figure that delivered
/// fewer messages taken out (`verdict::veto_dropped_work`).
fn judged(
    key: &[(&str, bool)],
    columns: &[ColumnReport],
    valid: impl Fn(&ColumnReport) -> bool + Copy,
) -> Verdict {
    let mut verdict = verdict::judge(key, &samples(key, columns, valid));
    let delivery = samples(&[("delivered", false), ("offered", false)], columns, valid);
    verdict::veto_dropped_work(&mut verdict, &delivery[0], &delivery[1]);
    verdict
}

fn samples<'a>(
    key: &[(&str, bool)],
    columns: &'a [ColumnReport],
    valid: impl Fn(&ColumnReport) -> bool,
) -> Vec<Vec<verdict::Sample<'a>>> {
    let names = policy_names(columns);
    key.iter()
        .map(|(figure, _)| {
            names
                .iter()
                .map(|&policy| {
                    let values = columns
                        .iter()
                        .filter(|c| c.policy == policy && valid(c))
                        .map(|c| serde_json::to_value(&c.figures).ok()?.get(*figure)?.as_f64())
                        .collect();
                    verdict::Sample { policy, values }
                })
                .collect()
        })
        .collect()
}

/// The figures on which every valid run of every policy gave the same value (and there was at
/// least one run with a value): only then is a row "the same for all".
fn same_for_all(policies: &[PolicyReport]) -> Vec<String> {
    let Some(first) = policies.first() else { return Vec::new() };
    first
        .range
        .iter()
        .filter(|(figure, range)| {
            range[0] == range[1] && policies.iter().all(|p| p.range.get(*figure) == Some(*range))
        })
        .map(|(figure, _)| figure.clone())
        .collect()
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

/// Runs a comparison's runs one after another, each run's policies together so they share
/// the moment's conditions, notes how late the machine kept each run, and runs a late one
/// again (up to `MAX_RE_RUNS` times) in new labs.
struct Driver {
    all: Arc<RwLock<HashMap<ComparisonId, Comparison>>>,
    id: ComparisonId,
    scenario: Scenario,
    burst: usize,
    /// In the order of the comparison's columns, with each column's settings.
    labs: Vec<Arc<Lab>>,
    settings: Vec<(PolicyUpdate, DownstreamUpdate)>,
    producer: Producer,
    store: Store,
    late: RunLateness,
    late_threshold_ms: f64,
    make_lab: MakeLab,
    /// Held while a change is saved, so a later save never carries an older copy.
    turn: Arc<tokio::sync::Mutex<()>>,
}

/// Saves changes to one driven comparison, one at a time.
#[derive(Clone)]
struct Saver {
    all: Arc<RwLock<HashMap<ComparisonId, Comparison>>>,
    id: ComparisonId,
    store: Store,
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Saver {
    /// Makes `change` and saves the comparison with it; `None` when it is gone.
    async fn change(&self, what: &str, change: impl FnOnce(&mut Comparison)) -> Option<Comparison> {
        let _turn = self.turn.lock().await;
        let saved = {
            let mut all = self.all.write().unwrap_or_else(|p| p.into_inner());
            let saved = all.get_mut(&self.id)?;
            change(saved);
            saved.clone()
        };
        if let Err(e) = save(&self.store, &saved).await {
            tracing::warn!(comparison = %self.id, error = %e, "could not save a comparison's {what}");
        }
        Some(saved)
    }
}

/// How often the driver's clock ticks while a run goes: each tick's lateness is how long the
/// machine kept it waiting.
const TICK_MS: u64 = 10;
/// Longest a run may take before the next one starts anyway (a lab deleted mid-run never
/// drains).
const RUN_PATIENCE: Duration = Duration::from_secs(600);

impl Driver {
    async fn drive(mut self) {
        let Some(runs) = self.comparison().map(|c| c.runs) else { return };
        for run in 0..runs {
            let mut attempt = 0;
            loop {
                let Some(comparison) = self.comparison() else { return };
                let ours: Vec<usize> = comparison
                    .columns
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| (c.run, c.attempt) == (run, attempt))
                    .map(|(i, _)| i)
                    .collect();
                self.play_run(&ours, (run, attempt)).await;
                let late = self.lateness(&ours, (run, attempt));
                if late.is_none_or(|late| late <= self.late_threshold_ms) || attempt == MAX_RE_RUNS {
                    break;
                }
                tracing::info!(comparison = %self.id, run, attempt, late, "a comparison's run ran late; running it again");
                if !self.again(&ours, run, attempt + 1).await {
                    break;
                }
                attempt += 1;
            }
        }
    }

    /// Starts the columns `ours` (one attempt of one run) together and waits until all have
    /// finished, ticking the clock whose lateness is the machine's.
    async fn play_run(&self, ours: &[usize], key: (u32, u32)) {
        let start = |saved: &mut Comparison| {
            for &i in ours {
                saved.columns[i].started_ms = self.labs[i].now_ms();
                saved.columns[i].waiting = false;
            }
        };
        let Some(started) = self.saver().change("run start", start).await else { return };
        let script = self.scenario.script(self.burst);
        for &i in ours {
            let (lab, producer) = (self.labs[i].clone(), self.producer.clone());
            let steps = (self.saver(), i);
            tokio::spawn(play(lab, producer, script.clone(), (self.late.clone(), key), steps));
        }
        let begun = tokio::time::Instant::now();
        let mut due = begun;
        let mut tick = 0u64;
        loop {
            due += Duration::from_millis(TICK_MS);
            tokio::time::sleep_until(due).await;
            record(&self.late, key, due.elapsed().as_secs_f64() * 1000.0);
            tick += 1;
            // A busy machine may fall behind by more than a tick: catch up, not burst.
            if due.elapsed() > Duration::from_millis(TICK_MS) {
                due = tokio::time::Instant::now();
            }
            if !tick.is_multiple_of(10) {
                continue;
            }
            if ours.iter().all(|&i| self.done(&started.columns[i], &self.labs[i])) {
                let finish =
                    |saved: &mut Comparison| ours.iter().for_each(|&i| saved.columns[i].finished = true);
                self.saver().change("run's end", finish).await;
                break;
            }
            if begun.elapsed() > RUN_PATIENCE {
                tracing::warn!(comparison = %self.id, run = key.0, "a comparison's run did not finish in time; going on");
                break;
            }
        }
    }

    /// How late the machine kept one attempt of a run: its ticks and steps, and its labs'
    /// traffic arrivals (p99, ms).
    fn lateness(&self, ours: &[usize], key: (u32, u32)) -> Option<f64> {
        let ticks = self.late.lock().unwrap_or_else(|p| p.into_inner()).get(&key).and_then(Lateness::p99_ms);
        ours.iter().filter_map(|&i| self.labs[i].traffic_view().late_ms_p99).chain(ticks).reduce(f64::max)
    }

    /// Sets up new labs for the columns `ours` as attempt `attempt` of `run`, waiting; false
    /// when the server cannot make them (the late run is then left out).
    async fn again(&mut self, ours: &[usize], run: u32, attempt: u32) -> bool {
        let mut made = Vec::new();
        for &i in ours {
            let Some(lab) = (self.make_lab)() else { return false };
            let (policy, downstream) = self.settings[i].clone();
            if lab.set_policy(&policy).is_err() || lab.set_downstream(&downstream).is_err() {
                return false;
            }
            if lab.persisted().await.is_err() {
                return false;
            }
            made.push((i, lab, (policy, downstream)));
        }
        let mut settings = Vec::new();
        let add = |saved: &mut Comparison| {
            for (i, lab, column_settings) in made {
                let (policy, defence) = (saved.columns[i].policy.clone(), saved.columns[i].defence.clone());
                saved.columns.push(Column {
                    policy,
                    defence,
                    run,
                    lab: lab.id,
                    started_ms: lab.now_ms(),
                    waiting: true,
                    attempt,
                    played: Some(0),
                    lost_step: None,
                    finished: false,
                });
                settings.push((lab, column_settings));
            }
        };
        if self.saver().change("re-run", add).await.is_none() {
            return false;
        }
        for (lab, column_settings) in settings {
            self.labs.push(lab);
            self.settings.push(column_settings);
        }
        true
    }

    fn saver(&self) -> Saver {
        Saver { all: self.all.clone(), id: self.id, store: self.store.clone(), turn: self.turn.clone() }
    }

    fn comparison(&self) -> Option<Comparison> {
        self.all.read().unwrap_or_else(|p| p.into_inner()).get(&self.id).cloned()
    }

    fn done(&self, column: &Column, lab: &Lab) -> bool {
        let figures = lab
            .read(|record, letters, counters| report::figures(record, letters, counters, column.started_ms));
        column_done(self.scenario, self.burst, column, lab, &figures)
    }
}

fn record(late: &RunLateness, key: (u32, u32), behind_ms: f64) {
    late.lock().unwrap_or_else(|p| p.into_inner()).entry(key).or_default().record(behind_ms);
}

/// Plays the scenario's script in one lab: bursts, traffic and downstream changes at their
/// times, noting how late each step came against its plan.
/// Each step that ran is saved as played, so a restart knows which it lost.
async fn play(
    lab: Arc<Lab>,
    producer: Producer,
    script: Vec<Step>,
    (late, key): (RunLateness, (u32, u32)),
    (saver, column): (Saver, usize),
) {
    let start = tokio::time::Instant::now();
    let mut counting = true;
    for (played, step) in (1..).zip(script) {
        let due = start + Duration::from_millis(step.at_ms());
        tokio::time::sleep_until(due).await;
        let behind = due.elapsed().as_secs_f64() * 1000.0;
        record(&late, key, behind);
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
        // Counted once what it changed in the lab is kept, and only while every step before
        // it was: a step counted has run.
        counting = counting && lab.persisted().await.is_ok();
        let count = |saved: &mut Comparison| saved.columns[column].played = Some(played);
        if counting && saver.change("steps", count).await.is_none() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 61, item 8: the warning says "even when run again" only of a run that was run
    /// again; one left without a lab for its re-run says so.
    #[test]
    fn the_late_warning_says_which_runs_were_run_again() {
        let late = |run, attempt| InvalidRun { run, attempt, lateness_ms_p99: 340.0, re_run: false };
        let (first, again) = (late(0, 0), late(1, 1));
        let once = late_warning(&[&first], 20.0, true);
        assert!(!once.contains("even when run again"), "{once}");
        assert!(
            once.contains("run 1 (340 ms) ran more than 20 ms behind schedule (p99) and was not run again"),
            "{once}"
        );
        assert!(
            once.contains("max_labs") && once.ends_with("and is left out of the medians and the verdict"),
            "{once}"
        );
        let both = late_warning(&[&first, &again], 20.0, true);
        assert!(
            both.contains("run 2 (340 ms) ran more than 20 ms behind schedule (p99) even when run again"),
            "{both}"
        );
        assert!(both.contains("run 1 (340 ms) ran more than") && both.contains("and are left out"), "{both}");
        // As a stored comparison's report said it (tests/fixtures/stored-protections).
        assert_eq!(
            late_warning(&[&again], 20.0, true),
            "the machine was busy: run 2 (340 ms) ran more than 20 ms behind schedule (p99) even when run again, and is left out of the medians and the verdict"
        );
        assert!(late_warning(&[&first], 20.0, false).contains("has not been run again"));
    }

    #[test]
    fn the_first_run_keeps_the_seed_and_the_others_differ() {
        assert_eq!(run_seed(7, 0), 7);
        let seeds: std::collections::HashSet<u64> = (0..5).map(|run| run_seed(7, run)).collect();
        assert_eq!(seeds.len(), 5);
    }

    fn column(policy: &str, run: u32, requests: u64, delivered: u64) -> ColumnReport {
        ColumnReport {
            policy: policy.into(),
            defence: None,
            run,
            attempt: 0,
            lab: String::new(),
            lab_url: String::new(),
            started_ms: 0,
            waiting: false,
            done: true,
            gone: false,
            interrupted: false,
            lost_step: None,
            figures: Figures {
                drain_ms: Some(1_000),
                requests,
                delivered,
                messages: 20,
                ..Default::default()
            },
        }
    }

    fn reports(columns: &[ColumnReport]) -> Vec<PolicyReport> {
        policy_reports(columns, |c| c.run != 9, |_| None, |f| Scenario::Outage.has_figure(f))
    }

    #[test]
    fn a_policy_over_its_runs_has_the_median_and_range_of_every_figure_and_cause() {
        let run = |policy: &str, run: u32, requests: u64, timed_out: u64| {
            let mut c = column(policy, run, requests, 20);
            if timed_out > 0 {
                c.figures.dead_letter_by_cause.insert("time_budget".into(), timed_out);
            }
            c
        };
        let columns = [run("a", 0, 30, 2), run("a", 1, 50, 0), run("a", 2, 40, 5), run("b", 0, 25, 0)];
        let reports = reports(&columns);
        let a = &reports[0];
        assert_eq!((a.median["requests"], a.range["requests"]), (40.0, [30.0, 50.0]));
        assert_eq!((a.median["messages"], a.range["messages"]), (20.0, [20.0, 20.0]));
        assert_eq!(a.range["dead_letter_by_cause.time_budget"], [0.0, 5.0]);
        assert_eq!(a.runs.iter().map(|r| r.run).collect::<Vec<_>>(), [0, 1, 2]);
        // A cause only another policy had is 0 in each run of this one.
        assert_eq!(reports[1].range["dead_letter_by_cause.time_budget"], [0.0, 0.0]);
    }

    /// On metastable, a policy ended the failure when its median goodput after the trigger is
    /// at least half; elsewhere the question is not asked.
    #[test]
    fn a_metastable_report_says_which_policies_ended_the_failure() {
        let run = |policy: &str, run: u32, goodput: f64| {
            let mut c = column(policy, run, 100, 20);
            c.figures.goodput_after_trigger = Some(goodput);
            c
        };
        let columns = [
            run("none", 0, 0.1),
            run("none", 1, 0.2),
            run("budget", 0, 0.9),
            run("budget", 1, 0.4),
            run("budget", 2, 0.95),
            run("edge", 0, 0.5),
        ];
        let metastable = |f: &str| Scenario::Metastable.has_figure(f);
        let judged = policy_reports(&columns, |_| true, |_| None, metastable);
        let ended: Vec<(&str, Option<bool>)> =
            judged.iter().map(|r| (r.name.as_str(), r.ends_failure)).collect();
        assert_eq!(ended, [("none", Some(false)), ("budget", Some(true)), ("edge", Some(true))]);
        assert!(reports(&columns).iter().all(|r| r.ends_failure.is_none()), "no trigger, no question");
    }

    #[test]
    fn a_run_left_out_counts_in_no_median_and_no_verdict() {
        // Run 9 stands for a run the machine kept late.
        let columns = [column("a", 0, 30, 10), column("a", 9, 900, 10), column("b", 0, 40, 10)];
        let reports = reports(&columns);
        assert_eq!(reports[0].range["requests"], [30.0, 30.0]);
        assert!(!reports[0].runs[1].valid && reports[0].runs[0].valid);
        let key = [("requests", true)];
        let samples = samples(&key, &columns, |c| c.run != 9);
        assert_eq!(samples[0][0].values, [Some(30.0)]);
    }

    #[test]
    fn the_same_for_all_only_when_every_run_of_every_policy_agrees() {
        // Every run delivered 10: the same for all. Requests agree in medians only: not.
        let columns = [
            column("a", 0, 30, 10),
            column("a", 1, 34, 10),
            column("a", 2, 32, 10),
            column("b", 0, 32, 10),
            column("b", 1, 32, 10),
            column("b", 2, 32, 10),
        ];
        let same = same_for_all(&reports(&columns));
        assert!(same.contains(&"delivered".to_owned()), "{same:?}");
        assert!(!same.contains(&"requests".to_owned()), "medians 32 and 32 over different runs: {same:?}");
        // 95 delivered against 100 is no tie, however close.
        let close = [column("a", 0, 30, 95), column("b", 0, 30, 100)];
        assert!(!same_for_all(&reports(&close)).contains(&"delivered".to_owned()));
        // A figure the scenario cannot have (no 429s on an outage) is no row at all, let alone
        // the same for all.
        let reports = reports(&close);
        assert!(!reports[0].median.contains_key("throttled"));
        assert!(!same_for_all(&reports).contains(&"throttled".to_owned()));
    }

    #[test]
    fn a_name_used_twice_is_found() {
        assert_eq!(duplicate_name(["none", "full", "none"]), Some("none"));
        assert_eq!(duplicate_name(["none", "full"]), None);
    }

    #[test]
    fn the_default_runs_are_the_fewest_the_test_can_decide_on() {
        assert_eq!(default_runs(Scenario::Overload, 2), 4);
        assert_eq!(default_runs(Scenario::Metastable, 2), 4);
        assert_eq!(default_runs(Scenario::Flaky, 2), 5);
        assert_eq!(default_runs(Scenario::Overload, 5), 6);
        assert!(default_runs(Scenario::Outage, 5) <= Limits::default().max_compare_runs);
    }
}

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
//!
//! Its parts: what is asked and saved (here), `start` (the request checked, the labs made),
//! `driver` (the runs played one after another), `saved` (the store, and a restart),
//! `document` (the report as it is sent), `summary` (each policy over its runs), `report` (one
//! column's figures), `verdict` and `stats` (the test), `scenario`, `presets`, `defences`.

pub mod defences;
mod document;
mod driver;
pub mod presets;
pub mod report;
mod saved;
pub mod scenario;
mod start;
pub mod stats;
mod summary;
pub mod verdict;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::{LabId, Lateness};
use crate::lab::Lab;
use crate::retry::PolicyUpdate;
pub use defences::{MAX_DEFENCES, MAX_GRID_POLICIES, NamedDefences};
pub use document::{
    Cell, ColumnReport, ComparisonReport, Grid, GridRow, InvalidRun, PolicyReport, PolicyRun,
};
pub use report::{Figures, ROWS};
pub use scenario::{SCENARIOS, Scenario, Step};
pub use start::{duplicate_name, duplicate_refusal};
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
            PolicyChoice::Custom { policy, .. } => start::parse_policy(policy.clone()),
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
    pub fn get(&self, id: &ComparisonId) -> Option<Comparison> {
        self.all.read().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
    }
}

/// The default number of runs: the fewest with which the test can find a difference.
pub fn default_runs(scenario: Scenario, policies: usize) -> u32 {
    verdict::runs_needed(policies, scenario.key_figures().len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Limits;

    #[test]
    fn the_first_run_keeps_the_seed_and_the_others_differ() {
        assert_eq!(run_seed(7, 0), 7);
        let seeds: std::collections::HashSet<u64> = (0..5).map(|run| run_seed(7, run)).collect();
        assert_eq!(seeds.len(), 5);
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

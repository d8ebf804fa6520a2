//! Starting a comparison: the request checked field by field, each run's settings made and
//! checked as a lab would check them, the labs taken from the allowance and made (all or
//! none), the comparison saved, and its driver started.

use std::sync::Arc;

use serde_json::Value;

use super::saved::save;
use super::{
    Allowance, Column, Comparison, ComparisonRequest, Comparisons, LATE_RUN_MS, MAX_DEFENCES,
    MAX_GRID_POLICIES, MAX_LATE_RUN_MS, MAX_POLICIES, MakeLab, NamedDefences, PolicyChoice, Refusal,
    Scenario, default_runs, defences, run_seed,
};
use crate::config::Limits;
use crate::domain::LabId;
use crate::downstream::DownstreamUpdate;
use crate::lab::{Lab, Labs, unix_now_ms};
use crate::producer::Producer;
use crate::retry::PolicyUpdate;
use crate::store::Store;

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

/// What a checked request asks for: the numbers its labs are made by.
struct Plan {
    scenario: Scenario,
    /// The grid's rows, in the order asked; empty for a comparison of policies alone.
    rows: Vec<NamedDefences>,
    runs: u32,
    /// Labs per run: one per policy, or in a grid one per cell.
    columns: u32,
    late_threshold_ms: f64,
}

/// One column's lab to be: its policy's name, its defence's in a grid, its run, and the
/// settings its lab is given.
struct Setup {
    name: String,
    defence: Option<String>,
    run: u32,
    policy: PolicyUpdate,
    downstream: DownstreamUpdate,
}

impl Comparisons {
    /// Sets up one lab per run of each policy, saves the comparison, and starts its runs one
    /// after another, each run's policies together.
    pub async fn start(
        &self,
        request: ComparisonRequest,
        (labs, producer, store): (&Labs, &Producer, &Store),
        limits: &Limits,
        (allowance, make_lab): (Allowance, MakeLab),
    ) -> Result<Comparison, Refusal> {
        let plan = checked(&request, limits, labs)?;
        // Every policy is checked before any lab is made.
        let setups = setups(&request, &plan, limits)?;
        // All the labs are taken from the allowance before the first is made, or none.
        allowance(plan.runs * plan.columns)?;
        let made = make_labs(labs, setups)?;
        let comparison = comparison(&request, plan, labs, &made);
        for (_, lab) in &made {
            lab.persisted()
                .await
                .map_err(|_| Refusal::Invalid("the store did not confirm in time".into()))?;
        }
        save(store, &comparison)
            .await
            .map_err(|e| Refusal::Invalid(format!("saving the comparison failed: {e}")))?;
        let (labs, settings) =
            made.into_iter().map(|(setup, lab)| (lab, (setup.policy, setup.downstream))).unzip();
        self.drive(&comparison, (labs, settings), (producer, store), make_lab);
        Ok(comparison)
    }
}

/// A refusal naming the request's field at fault.
fn named(field: &str, detail: String) -> Refusal {
    Refusal::Field(crate::invalid::Invalid::new(field, detail))
}

/// The request checked, in the order its refusals are told: what it asks for, then whether
/// this server can run it.
fn checked(request: &ComparisonRequest, limits: &Limits, labs: &Labs) -> Result<Plan, Refusal> {
    let scenario = Scenario::parse(&request.scenario).map_err(|e| named("scenario", e))?;
    let rows = grid_rows(scenario, request)?;
    if rows.is_empty() && !(2..=MAX_POLICIES).contains(&request.policies.len()) {
        return Err(named("policies", format!("compare 2 to {MAX_POLICIES} policies")));
    }
    if let Some(name) = duplicate_name(request.policies.iter().map(PolicyChoice::name)) {
        let i = request.policies.iter().rposition(|p| p.name() == name).unwrap_or(0);
        return Err(named(&format!("policies[{i}]"), duplicate_refusal(name)));
    }
    // Each cell of a grid is a column of its own: its labs count as a policy's do.
    let columns = (request.policies.len() * rows.len().max(1)) as u32;
    let runs = checked_runs(scenario, request, columns, limits)?;
    let late_threshold_ms = request.late_threshold_ms.unwrap_or(LATE_RUN_MS);
    if !(1.0..=MAX_LATE_RUN_MS).contains(&late_threshold_ms) {
        return Err(named(
            "late_threshold_ms",
            format!(
                "late_threshold_ms must be 1 to {MAX_LATE_RUN_MS} (ms of lateness, p99, past which a run is left out)"
            ),
        ));
    }
    checked_load(request, columns, limits, labs)?;
    Ok(Plan { scenario, rows, runs, columns, late_threshold_ms })
}

/// How many runs: as asked, or by default as many as the test needs and one turn of the
/// address's allowance holds; refused past `max_compare_runs` or `lab_create_burst`.
fn checked_runs(
    scenario: Scenario,
    request: &ComparisonRequest,
    columns: u32,
    limits: &Limits,
) -> Result<u32, Refusal> {
    let max_runs = limits.max_compare_runs;
    // Each run of each policy is a lab, drawn from the address's allowance: by default as
    // many runs as one run of the allowance (`lab_create_burst`) holds, up to the test's need.
    let burst = limits.lab_create_burst;
    let runs = request.runs.unwrap_or_else(|| {
        default_runs(scenario, request.policies.len().max(2)).min(max_runs).min(burst / columns).max(1)
    });
    if !(1..=max_runs).contains(&runs) {
        return Err(Refusal::Limit {
            limit: "max_compare_runs",
            detail: format!("runs must be 1 to {max_runs} (max_compare_runs)"),
        });
    }
    if runs * columns > burst {
        return Err(Refusal::Limit {
            limit: "lab_create_burst",
            detail: format!(
                "this comparison needs {} labs ({runs} runs of {columns} policies or cells) and one address may create \
                 at most {burst} at once (lab_create_burst): ask for fewer runs or policies",
                runs * columns
            ),
        });
    }
    Ok(runs)
}

/// Whether one run's messages fit: the burst within `max_burst`, and all of a run's bursts
/// within what the server delivers at once (`max_active_messages`).
fn checked_load(
    request: &ComparisonRequest,
    columns: u32,
    limits: &Limits,
    labs: &Labs,
) -> Result<(), Refusal> {
    let max_burst = limits.max_burst;
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
    let (active, adding) = (labs.active_messages(), request.burst * columns as usize);
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
    Ok(())
}

/// Each column's settings, run by run, row by row, policy by policy: the scenario's base
/// policy with the run's seed and the choice's changes, and the scenario's endpoint with the
/// row's defences. The first run's are checked as a lab would check them.
fn setups(request: &ComparisonRequest, plan: &Plan, limits: &Limits) -> Result<Vec<Setup>, Refusal> {
    let mut setups = Vec::new();
    // Without a grid, one row with the scenario's own endpoint.
    let rows: Vec<Option<&NamedDefences>> =
        if plan.rows.is_empty() { vec![None] } else { plan.rows.iter().map(Some).collect() };
    for run in 0..plan.runs {
        for row in &rows {
            for (i, choice) in request.policies.iter().enumerate() {
                let changes = choice.changes().map_err(|e| unreadable(i, choice, e))?;
                let policy = plan.scenario.base_policy(run_seed(request.seed, run)).then(changes);
                let mut downstream = plan.scenario.downstream(request.burst);
                if let Some(row) = row {
                    downstream.defences = Some(row.defences);
                }
                // Checked as a lab would check them, before any lab is made or any of the
                // allowance spent: a typo in a custom policy costs nothing.
                if run == 0 {
                    settled_in_a_lab(i, choice, &policy, &downstream, limits)?;
                }
                let (name, defence) = (choice.name().to_owned(), row.map(|r| r.name.clone()));
                setups.push(Setup { name, defence, run, policy, downstream });
            }
        }
    }
    Ok(setups)
}

/// Policy `i` could not be read: the refusal names its field.
fn unreadable(i: usize, choice: &PolicyChoice, e: String) -> Refusal {
    match choice {
        PolicyChoice::Preset(_) => named(&format!("policies[{i}]"), e),
        PolicyChoice::Custom { name, .. } => {
            // `parse_policy` says the setting at fault first ("clients: ...").
            let setting = e.split_once(": ").map(|(s, _)| s).filter(|s| !s.contains(' '));
            let at = setting.map_or(String::new(), |s| format!(".{s}"));
            named(&format!("policies[{i}].policy{at}"), format!("policy '{name}': {e}"))
        }
    }
}

/// Makes a lab for each setup and gives it its settings; on any refusal the labs made so far
/// are removed again, so a refused comparison leaves none behind.
fn make_labs(labs: &Labs, setups: Vec<Setup>) -> Result<Vec<(Setup, Arc<Lab>)>, Refusal> {
    let mut made: Vec<(Setup, Arc<Lab>)> = Vec::new();
    let remove = |made: &[(Setup, Arc<Lab>)]| {
        for (_, lab) in made {
            labs.remove(&lab.id);
        }
    };
    for setup in setups {
        let lab = match labs.create() {
            Ok(lab) => lab,
            Err(max) => {
                remove(&made);
                return Err(Refusal::Limit {
                    limit: "max_labs",
                    detail: format!("this server already holds {max} labs (max_labs); try again later"),
                });
            }
        };
        let name = &setup.name;
        let set = lab
            .set_policy(&setup.policy)
            .map_err(|e| Refusal::Invalid(format!("policy '{name}': {e}")))
            .and_then(|_| lab.set_downstream(&setup.downstream).map_err(|e| Refusal::Invalid(e.to_string())));
        if let Err(refused) = set {
            // Checked before (`settled_in_a_lab`): a refusal here leaves no lab behind either.
            labs.remove(&lab.id);
            remove(&made);
            return Err(refused);
        }
        made.push((setup, lab));
    }
    Ok(made)
}

/// The comparison as it is saved: a column per lab made, the first run's started now.
fn comparison(
    request: &ComparisonRequest,
    plan: Plan,
    labs: &Labs,
    made: &[(Setup, Arc<Lab>)],
) -> Comparison {
    let columns = made
        .iter()
        .map(|(setup, lab)| Column {
            policy: setup.name.clone(),
            defence: setup.defence.clone(),
            run: setup.run,
            lab: lab.id,
            started_ms: lab.now_ms(),
            // The first run starts now; the driver marks each later one as it starts.
            waiting: setup.run > 0,
            attempt: 0,
            played: Some(0),
            lost_step: None,
            finished: false,
        })
        .collect();
    Comparison {
        id: LabId::new(labs.instance),
        scenario: plan.scenario,
        burst: request.burst,
        seed: request.seed,
        runs: plan.runs,
        columns,
        created_unix_ms: unix_now_ms(),
        late_threshold_ms: plan.late_threshold_ms,
        defences: plan.rows,
    }
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

/// Reads a policy update, naming the field that cannot be read.
pub(super) fn parse_policy(policy: Value) -> Result<PolicyUpdate, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_used_twice_is_found() {
        assert_eq!(duplicate_name(["none", "full", "none"]), Some("none"));
        assert_eq!(duplicate_name(["none", "full"]), None);
    }
}

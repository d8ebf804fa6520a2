//! A comparison's document, as `GET /api/comparisons/{id}` sends it: each column's figures
//! measured from its lab now, the runs left out and why, each policy over its runs, the grid's
//! cells, the verdict and the warnings.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::driver::column_done;
use super::summary::{judged, policy_names, policy_reports, same_for_all};
use super::{Column, Comparison, Comparisons, Figures, Scenario, Step, Verdict, report, verdict};
use crate::lab::Labs;

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

impl Comparisons {
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
            .map(|column| column_report(comparison, column, (labs, driven), &mut run_late))
            .collect();
        let last_attempt = |run: u32| columns.iter().filter(|c| c.run == run).map(|c| c.attempt).max();
        let invalid_runs = invalid_runs(&run_late, comparison.late_threshold_ms, last_attempt);
        let left_out = |run: u32, attempt: u32| {
            invalid_runs.iter().any(|r| (r.run, r.attempt) == (run, attempt))
                || last_attempt(run) > Some(attempt)
        };
        let valid = |c: &ColumnReport| {
            !c.gone && !c.waiting && !c.interrupted && c.done && !left_out(c.run, c.attempt)
        };
        let driving = self.driving.lock().unwrap_or_else(|p| p.into_inner()).contains(&comparison.id);
        let done = !driving && columns.iter().all(|c| c.done);
        // A policy's settings, as its first run's lab holds them.
        let settings = |name: &str| {
            let first = comparison.columns.iter().find(|c| c.policy == name)?;
            serde_json::to_value(labs.get(&first.lab)?.policy()).ok()
        };
        let mut policies = policy_reports(&columns, valid, settings, |figure| scenario.has_figure(figure));
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
        let verdict = verdict_of(comparison, (&columns, valid), (policies.len(), grid.is_some()), done);
        let tie_reason = if done { floor_ties(scenario, comparison.burst, &columns, valid) } else { None };
        ComparisonReport {
            id: comparison.id.to_string(),
            url: format!("/compare/{}", comparison.id),
            scenario,
            burst: comparison.burst,
            seed: comparison.seed,
            runs: comparison.runs,
            key_figure: scenario.key_figures().iter().map(|(f, _)| (*f).to_owned()).collect(),
            trigger_ms: scenario.trigger_ms(comparison.burst),
            done,
            same_for_all: if done { same_for_all(&policies) } else { Vec::new() },
            policies,
            verdict,
            lateness_ms_p99: run_late.values().copied().reduce(f64::max),
            late_threshold_ms: comparison.late_threshold_ms,
            warning: warning(comparison, &invalid_runs, &columns, done),
            invalid_runs,
            tie_reason,
            columns,
            grid,
        }
    }
}

/// One column as the document has it: its figures measured from its lab now (none while it
/// waits), and whether it is done; its labs' traffic lateness is added to its run's.
fn column_report(
    comparison: &Comparison,
    column: &Column,
    (labs, driven): (&Labs, bool),
    run_late: &mut BTreeMap<(u32, u32), f64>,
) -> ColumnReport {
    let lab = labs.get(&column.lab);
    let waiting = column.waiting;
    let figures = match &lab {
        Some(lab) if !waiting => lab
            .read(|record, letters, counters| report::figures(record, letters, counters, column.started_ms)),
        _ => Figures::default(),
    };
    let interrupted = (waiting && !driven) || column.lost_step.is_some();
    let done = lab.as_ref().is_none_or(|lab| {
        interrupted
            || column.finished
            || (!waiting && column_done(comparison.scenario, comparison.burst, column, lab, &figures))
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
}

/// The attempts of runs the machine kept later than `threshold_ms`, each saying whether a
/// later attempt ran in its place.
fn invalid_runs(
    run_late: &BTreeMap<(u32, u32), f64>,
    threshold_ms: f64,
    last_attempt: impl Fn(u32) -> Option<u32>,
) -> Vec<InvalidRun> {
    run_late
        .iter()
        .filter(|(_, late)| **late > threshold_ms)
        .map(|(&(run, attempt), &late)| InvalidRun {
            run,
            attempt,
            lateness_ms_p99: late,
            re_run: last_attempt(run) > Some(attempt),
        })
        .collect()
}

/// The verdict: none in a grid (each row has its own), pending until every run has finished,
/// then the comparison's test over the valid runs.
fn verdict_of(
    comparison: &Comparison,
    (columns, valid): (&[ColumnReport], impl Fn(&ColumnReport) -> bool + Copy),
    (policies, grid): (usize, bool),
    done: bool,
) -> Verdict {
    let key = comparison.scenario.key_figures();
    if grid {
        verdict::pending(
            policies,
            key.len(),
            "a grid names no best cell: each row has its own verdict among its policies, and no test is run across defences".into(),
        )
    } else if done {
        judged(key, columns, valid)
    } else {
        let finished = (0..comparison.runs)
            .filter(|&run| columns.iter().filter(|c| c.run == run).all(|c| c.done))
            .count();
        verdict::pending(
            policies,
            key.len(),
            format!("no verdict yet: {finished} of {} runs finished", comparison.runs),
        )
    }
}

/// What the reader must know about the runs counted: those the machine kept late and left
/// out, else a run a restart cut short, else runs that never started.
fn warning(
    comparison: &Comparison,
    invalid_runs: &[InvalidRun],
    columns: &[ColumnReport],
    done: bool,
) -> Option<String> {
    let kept_out: Vec<&InvalidRun> = invalid_runs.iter().filter(|r| !r.re_run).collect();
    if !kept_out.is_empty() {
        Some(late_warning(&kept_out, comparison.late_threshold_ms, done))
    } else if let Some(cut) = columns.iter().find(|c| c.lost_step.is_some()) {
        let lost = lost_what(comparison.scenario, comparison.burst, cut.lost_step.unwrap_or_default());
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
}

//! Each policy over its runs: the medians and ranges of its valid runs' figures, the samples
//! the verdict's test is run on, and the figures that were the same for all.

use std::collections::BTreeMap;

use serde_json::Value;

use super::document::{ColumnReport, PolicyReport, PolicyRun};
use super::{ROWS, Verdict, report, verdict};

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
pub(super) fn policy_names(columns: &[ColumnReport]) -> Vec<&str> {
    let mut order: Vec<&str> = Vec::new();
    for column in columns {
        if !order.contains(&column.policy.as_str()) {
            order.push(&column.policy);
        }
    }
    order
}

/// Each policy over its runs: the runs' figures, and each figure's median and range over the
/// valid ones.
pub(super) fn policy_reports(
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

/// The verdict on the key figures, with every policy crowned on a cost figure that delivered
/// fewer messages taken out (`verdict::veto_dropped_work`).
pub(super) fn judged(
    key: &[(&str, bool)],
    columns: &[ColumnReport],
    valid: impl Fn(&ColumnReport) -> bool + Copy,
) -> Verdict {
    let mut verdict = verdict::judge(key, &samples(key, columns, valid));
    let delivery = samples(&[("delivered", false), ("offered", false)], columns, valid);
    verdict::veto_dropped_work(&mut verdict, &delivery[0], &delivery[1]);
    verdict
}

/// The figures on which every valid run of every policy gave the same value (and there was at
/// least one run with a value): only then is a row "the same for all".
pub(super) fn same_for_all(policies: &[PolicyReport]) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::super::{Figures, Scenario};
    use super::*;

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
}

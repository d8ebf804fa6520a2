//! Which policy is best on a scenario's key figure, and how sure that is.
//!
//! Every pair of policies is compared by the exact two-sided Mann–Whitney U test
//! (`stats::mann_whitney`) over their valid runs, and the pairs' p-values are corrected with
//! Holm's method at α = 0.05, split evenly between the scenario's key figures when it has two.
//! Under "no policy differs", the chance of any verdict is then at most α whatever the number
//! of policies, which keeps an A/A comparison (one policy under two names) from crowning one.
//!
//! The policy with the best median is the leader. When the correction keeps at least one
//! difference between the leader and another policy, that policy is judged worse and left out;
//! the policies left are the best (several when the test cannot tell them from the leader).
//! A scenario with two key figures judges them in order: the second only among the policies
//! the first left. With no difference kept on any figure there is no verdict: `best` is empty.
//!
//! A cost figure (requests or 429s per delivered message, time to drain) rewards a client that
//! refuses to send: a policy that gives up on most of its messages is cheap per delivery. So a
//! policy best on a cost figure is crowned only if it did not deliver fewer messages than the
//! policy that delivered most, by the same test (`veto_dropped_work`). The veto only ever takes
//! a name out of `best`, never puts one in, so it cannot raise the chance of a false verdict.

use serde::Serialize;

use super::stats::{self, ALPHA};

/// The outcome of judging a comparison's policies on its key figures.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
// Its own name in the OpenAPI description: the callers' card has a `Verdict` too.
#[schema(as = ComparisonVerdict)]
pub struct Verdict {
    /// The key figure the verdict rests on: the last one on which a policy was judged worse.
    /// `None` when there is no verdict.
    #[schema(required = true)]
    pub figure: Option<String>,
    /// The policies judged best; empty when there is no verdict.
    pub best: Vec<String>,
    /// The test, in words.
    pub test: String,
    /// The level each key figure is judged at (α over the number of key figures).
    pub alpha: f64,
    /// Runs of each policy the test needs before it can find any difference.
    pub runs_needed: u32,
    /// Why there is a verdict, or why there is none, in a sentence.
    pub result: String,
    /// Each pair's test, on each figure judged.
    pub tests: Vec<PairTest>,
    /// Policies best on a cost figure that were not crowned because they delivered fewer
    /// messages, by the test, than the policy that delivered most.
    pub not_crowned: Vec<NotCrowned>,
}

/// A policy kept from the crown because it was cheap only by dropping work.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct NotCrowned {
    pub policy: String,
    /// Its median of delivered messages over its valid runs.
    pub delivered: f64,
    /// Its median of messages offered (created) over the same runs.
    pub offered: f64,
    /// The policy that delivered most, and its median.
    pub most: String,
    pub most_delivered: f64,
    /// The delivered test between the two (Holm-corrected over the policies checked).
    pub p: f64,
    /// Why, in a sentence.
    pub reason: String,
}

/// The figures on which a policy can look good by delivering less: each is a cost per
/// delivered message, or a time that ends sooner when messages are given up.
pub const COST_FIGURES: &[&str] = &["requests_per_delivered", "throttled_per_delivered", "drain_ms"];

/// One pair's test on one figure.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct PairTest {
    pub figure: String,
    pub a: String,
    pub b: String,
    /// U for `a`.
    pub u: f64,
    pub p: f64,
    /// Holm's correction kept the difference.
    pub significant: bool,
}

/// What the test is, in words, for `policies` policies on `figures` key figures.
pub fn test_name(policies: usize, figures: usize) -> String {
    let pairs = pairs(policies);
    let split = if figures > 1 {
        format!(", {:.3} for each of the {figures} key figures", level(figures))
    } else {
        String::new()
    };
    format!(
        "exact two-sided Mann-Whitney U test of each pair of policies ({pairs} pair{}), Holm-corrected, at alpha {ALPHA}{split}",
        if pairs == 1 { "" } else { "s" }
    )
}

fn pairs(policies: usize) -> usize {
    policies * policies.saturating_sub(1) / 2
}

fn level(figures: usize) -> f64 {
    ALPHA / figures.max(1) as f64
}

/// The fewest runs of each policy with which the test can find a difference: Holm's first step
/// asks the smallest p-value to be below the level over the number of pairs.
pub fn runs_needed(policies: usize, figures: usize) -> u32 {
    stats::runs_needed(level(figures) / pairs(policies).max(1) as f64) as u32
}

/// The verdict before there is one, saying why.
pub fn pending(policies: usize, figures: usize, result: String) -> Verdict {
    Verdict {
        figure: None,
        best: Vec::new(),
        test: test_name(policies, figures),
        alpha: level(figures),
        runs_needed: runs_needed(policies, figures),
        result,
        tests: Vec::new(),
        not_crowned: Vec::new(),
    }
}

/// One policy's values of one figure over its valid runs; a run without a value (no message
/// delivered yet, say) counts as the worst value there is.
pub struct Sample<'a> {
    pub policy: &'a str,
    pub values: Vec<Option<f64>>,
}

/// Judges the policies on the key figures, in order: `(figure, less is better)` and, for each
/// figure, each policy's sample (in the same order of policies every time).
pub fn judge(key: &[(&str, bool)], samples: &[Vec<Sample<'_>>]) -> Verdict {
    let policies = samples.first().map_or(0, Vec::len);
    let needed = runs_needed(policies, key.len());
    let mut verdict = pending(policies, key.len(), String::new());
    let fewest = samples.iter().flatten().map(|s| s.values.len()).min().unwrap_or(0);
    if fewest < needed as usize {
        verdict.result = format!(
            "no verdict: the test needs {needed} valid runs of each policy to find any difference, and the fewest here is {fewest}"
        );
        return verdict;
    }
    // Indices of the policies still in the running.
    let mut left: Vec<usize> = (0..policies).collect();
    for (&(figure, less_is_better), sample) in key.iter().zip(samples) {
        let worst = if less_is_better { f64::INFINITY } else { f64::NEG_INFINITY };
        let values: Vec<Vec<f64>> =
            sample.iter().map(|s| s.values.iter().map(|v| v.unwrap_or(worst)).collect()).collect();
        let medians: Vec<f64> = values.iter().map(|v| median(v)).collect();
        let better = |a: f64, b: f64| if less_is_better { a < b } else { a > b };
        let Some(&leader) = left.iter().reduce(|a, b| if better(medians[*b], medians[*a]) { b } else { a })
        else {
            break;
        };
        let mut pairs = Vec::new();
        for (i, &a) in left.iter().enumerate() {
            for &b in &left[i + 1..] {
                let test = stats::mann_whitney(&values[a], &values[b]).expect("runs a comparison makes");
                pairs.push((a, b, test));
            }
        }
        let kept = stats::holm(&pairs.iter().map(|(_, _, t)| t.p).collect::<Vec<_>>(), level(key.len()));
        let mut worse = Vec::new();
        for ((a, b, test), significant) in pairs.into_iter().zip(kept) {
            verdict.tests.push(PairTest {
                figure: figure.to_owned(),
                a: sample[a].policy.to_owned(),
                b: sample[b].policy.to_owned(),
                u: test.u,
                p: test.p,
                significant,
            });
            let other = if a == leader { b } else { a };
            if significant && (a == leader || b == leader) && better(medians[leader], medians[other]) {
                worse.push(other);
            }
        }
        if !worse.is_empty() {
            left.retain(|i| !worse.contains(i));
            verdict.figure = Some(figure.to_owned());
        }
    }
    let names = |ids: &[usize]| ids.iter().map(|&i| samples[0][i].policy.to_owned()).collect::<Vec<_>>();
    match &verdict.figure {
        Some(figure) => {
            verdict.best = names(&left);
            let p = verdict
                .tests
                .iter()
                .filter(|t| t.significant && &t.figure == figure)
                .map(|t| t.p)
                .fold(0.0, f64::max);
            verdict.result = format!(
                "best on {figure}: {}; every policy left out is worse by the test (p = {} at most, below the Holm-corrected level)",
                verdict.best.join(", "),
                round3(p)
            );
        }
        None => {
            let p = verdict.tests.iter().map(|t| t.p).fold(1.0, f64::min);
            verdict.result = format!(
                "no verdict: the test finds no difference between the policies (smallest p = {}, not below the Holm-corrected level)",
                round3(p)
            );
        }
    }
    verdict
}

/// Takes out of `best` every policy crowned on a cost figure that delivered fewer messages than
/// the policy that delivered most: the exact Mann-Whitney test of each crowned policy against
/// that one on `delivered`, Holm-corrected over the crowned policies, at the verdict's level.
/// `delivered` and `offered` hold every policy's sample, in the verdict's order of policies.
pub fn veto_dropped_work(verdict: &mut Verdict, delivered: &[Sample<'_>], offered: &[Sample<'_>]) {
    let Some(figure) = verdict.figure.clone() else { return };
    if !COST_FIGURES.contains(&figure.as_str()) {
        return;
    }
    let values = |s: &Sample<'_>| s.values.iter().map(|v| v.unwrap_or(0.0)).collect::<Vec<f64>>();
    let medians: Vec<f64> = delivered.iter().map(|s| median(&values(s))).collect();
    let Some(top) = (0..delivered.len()).reduce(|a, b| if medians[b] > medians[a] { b } else { a }) else {
        return;
    };
    let checked: Vec<usize> = (0..delivered.len())
        .filter(|&i| i != top && verdict.best.iter().any(|b| b == delivered[i].policy))
        .collect();
    let tests: Vec<f64> = checked
        .iter()
        .map(|&i| stats::mann_whitney(&values(&delivered[i]), &values(&delivered[top])).map_or(1.0, |t| t.p))
        .collect();
    let kept = stats::holm(&tests, verdict.alpha);
    for ((&i, p), significant) in checked.iter().zip(tests).zip(kept) {
        if !significant || medians[i] >= medians[top] {
            continue;
        }
        let (policy, most) = (delivered[i].policy, delivered[top].policy);
        let of = offered.get(i).map_or(f64::NAN, |s| median(&values(s)));
        let reason = format!(
            "{policy} is not crowned: it was cheaper on {figure} only because it delivered {} of {} \
             messages, fewer than {most}'s {} by the test (p = {})",
            round1(medians[i]),
            round1(of),
            round1(medians[top]),
            round3(p)
        );
        verdict.best.retain(|b| b != policy);
        verdict.not_crowned.push(NotCrowned {
            policy: policy.to_owned(),
            delivered: medians[i],
            offered: of,
            most: most.to_owned(),
            most_delivered: medians[top],
            p,
            reason,
        });
    }
    if verdict.not_crowned.is_empty() {
        return;
    }
    let reasons: Vec<&str> = verdict.not_crowned.iter().map(|n| n.reason.as_str()).collect();
    if verdict.best.is_empty() {
        verdict.figure = None;
        verdict.result = format!("no verdict: {}", reasons.join("; "));
    } else {
        verdict.result = format!("{}; {}", verdict.result, reasons.join("; "));
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample<'a>(policy: &'a str, values: &[f64]) -> Sample<'a> {
        Sample { policy, values: values.iter().map(|&v| Some(v)).collect() }
    }

    #[test]
    fn two_policies_apart_in_every_run_get_a_verdict_with_four_runs() {
        let key = [("requests_per_delivered", true)];
        let runs = vec![vec![sample("storm", &[5.5, 5.5, 5.4, 5.6]), sample("full", &[4.0, 4.1, 4.2, 4.25])]];
        let verdict = judge(&key, &runs);
        assert_eq!(verdict.best, ["full"]);
        assert_eq!(verdict.figure.as_deref(), Some("requests_per_delivered"));
        assert!((verdict.tests[0].p - 2.0 / 70.0).abs() < 1e-12, "{verdict:?}");
        assert!(verdict.result.contains("0.029"), "{}", verdict.result);
    }

    #[test]
    fn too_few_runs_give_no_verdict_and_say_how_many_are_needed() {
        let key = [("requests_per_delivered", true)];
        let runs = vec![vec![sample("storm", &[5.5, 5.5, 5.4]), sample("full", &[4.0, 4.1, 4.2])]];
        let verdict = judge(&key, &runs);
        assert!(verdict.best.is_empty() && verdict.figure.is_none());
        assert_eq!(verdict.runs_needed, 4);
        assert!(verdict.result.contains("needs 4 valid runs"), "{}", verdict.result);
    }

    #[test]
    fn overlapping_runs_and_identical_runs_give_no_verdict() {
        let key = [("requests_per_delivered", true)];
        let mixed = vec![vec![sample("a", &[3.0, 3.2, 2.9, 3.4]), sample("b", &[3.1, 2.8, 3.3, 3.0])]];
        assert!(judge(&key, &mixed).best.is_empty());
        let same = vec![vec![sample("a", &[3.0; 4]), sample("b", &[3.0; 4])]];
        let verdict = judge(&key, &same);
        assert!(verdict.best.is_empty());
        assert_eq!(verdict.tests[0].p, 1.0);
    }

    #[test]
    fn with_three_policies_holm_asks_more_runs_and_keeps_the_ones_it_cannot_tell_apart() {
        let key = [("goodput_after_trigger", false)];
        assert_eq!(runs_needed(3, 1), 5);
        // Four runs each cannot reach 0.05 / 3: no verdict, however far apart.
        let four = vec![vec![
            sample("none", &[0.1, 0.1, 0.2, 0.1]),
            sample("budget", &[0.9, 0.95, 0.9, 0.92]),
            sample("breaker", &[0.8, 0.97, 0.85, 0.9]),
        ]];
        assert!(judge(&key, &four).best.is_empty());
        let five = vec![vec![
            sample("none", &[0.1, 0.1, 0.2, 0.1, 0.15]),
            sample("budget", &[0.9, 0.95, 0.9, 0.92, 0.93]),
            sample("breaker", &[0.8, 0.97, 0.85, 0.91, 0.94]),
        ]];
        let verdict = judge(&key, &five);
        assert_eq!(verdict.best, ["budget", "breaker"], "{verdict:?}");
        assert_eq!(verdict.tests.len(), 3);
    }

    #[test]
    fn two_key_figures_are_judged_in_order_at_half_the_level_each() {
        // Flaky: every policy delivers all; requests per delivered tells them apart.
        let key = [("delivered", false), ("requests_per_delivered", true)];
        assert_eq!(runs_needed(2, 2), 5);
        let runs = vec![
            vec![sample("a", &[10.0; 5]), sample("b", &[10.0; 5])],
            vec![sample("a", &[2.0, 2.1, 2.2, 2.0, 2.1]), sample("b", &[3.0, 3.1, 3.2, 3.3, 3.0])],
        ];
        let verdict = judge(&key, &runs);
        assert_eq!(verdict.best, ["a"]);
        assert_eq!(verdict.figure.as_deref(), Some("requests_per_delivered"));
        assert_eq!(verdict.alpha, 0.025);
        // A policy that lost messages is out on the first figure, however cheap it was.
        let runs = vec![
            vec![sample("lossy", &[8.0, 7.0, 8.0, 9.0, 8.0]), sample("b", &[10.0; 5])],
            vec![sample("lossy", &[1.0; 5]), sample("b", &[3.0; 5])],
        ];
        let verdict = judge(&key, &runs);
        assert_eq!(verdict.best, ["b"]);
        assert_eq!(verdict.figure.as_deref(), Some("delivered"));
    }

    #[test]
    fn a_policy_cheap_only_by_dropping_work_is_not_crowned() {
        // Overload, equal jitter against a throttle that refuses most sends (the run).
        let key = [("requests_per_delivered", true)];
        let cost = vec![vec![sample("equal", &[3.1, 3.0, 3.2, 3.3]), sample("sre", &[1.0; 4])]];
        let mut verdict = judge(&key, &cost);
        assert_eq!(verdict.best, ["sre"], "the cost figure alone crowns the dropper");
        let delivered = [sample("equal", &[100.0; 4]), sample("sre", &[13.0, 12.0, 14.0, 13.0])];
        let offered = [sample("equal", &[100.0; 4]), sample("sre", &[100.0; 4])];
        veto_dropped_work(&mut verdict, &delivered, &offered);
        assert!(verdict.best.is_empty() && verdict.figure.is_none(), "{verdict:?}");
        assert_eq!(verdict.not_crowned.len(), 1);
        let reason = &verdict.not_crowned[0].reason;
        assert!(reason.contains("delivered 13 of 100"), "{reason}");
        assert!(verdict.result.starts_with("no verdict: sre is not crowned"), "{}", verdict.result);
    }

    #[test]
    fn the_veto_keeps_a_crown_that_delivered_as_much_and_ignores_other_figures() {
        let key = [("requests_per_delivered", true)];
        let cost = vec![vec![sample("storm", &[5.5, 5.5, 5.4, 5.6]), sample("full", &[4.0, 4.1, 4.2, 4.25])]];
        let mut verdict = judge(&key, &cost);
        // Both delivered all: nothing to veto.
        let all = [sample("storm", &[20.0; 4]), sample("full", &[20.0; 4])];
        veto_dropped_work(&mut verdict, &all, &all);
        assert_eq!(verdict.best, ["full"]);
        assert!(verdict.not_crowned.is_empty());
        // Overlapping deliveries: the test cannot say the crowned one delivered fewer.
        let close = [sample("storm", &[20.0, 19.0, 20.0, 18.0]), sample("full", &[19.0, 20.0, 18.0, 20.0])];
        veto_dropped_work(&mut verdict, &close, &all);
        assert_eq!(verdict.best, ["full"]);
        // A verdict on a figure that is not a cost is left alone.
        let key = [("goodput_after_trigger", false)];
        let runs =
            vec![vec![sample("none", &[0.1, 0.1, 0.2, 0.1]), sample("budget", &[0.9, 0.95, 0.9, 0.92])]];
        let mut verdict = judge(&key, &runs);
        let fewer = [sample("none", &[100.0; 4]), sample("budget", &[10.0; 4])];
        veto_dropped_work(&mut verdict, &fewer, &all);
        assert_eq!(verdict.best, ["budget"]);
    }

    #[test]
    fn a_run_without_a_value_counts_as_the_worst() {
        let key = [("requests_per_delivered", true)];
        let none = Sample { policy: "stuck", values: vec![None; 4] };
        let verdict = judge(&key, &[vec![none, sample("ok", &[2.0, 2.5, 2.2, 2.1])]]);
        assert_eq!(verdict.best, ["ok"]);
    }
}

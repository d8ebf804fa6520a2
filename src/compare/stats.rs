//! The statistical test a comparison's verdict rests on: the Mann–Whitney U statistic, with an
//! exact two-sided permutation p-value. It assumes nothing about the figures' distribution
//! (requests per delivered message is skewed, and runs on a shared machine have outliers), and
//! exact enumeration keeps it right for the handful of runs a comparison makes, where the
//! normal approximation is poor. Ties get midranks, and the permutation counts them as they
//! fall, so no tie correction is needed.
//!
//! Mann, H. B. & Whitney, D. R. (1947), "On a test of whether one of two random variables is
//! stochastically larger than the other", Ann. Math. Statist. 18(1).

/// The usual significance level: a verdict needs a p-value below it.
pub const ALPHA: f64 = 0.05;

/// Most arrangements enumerated exactly (C(16, 8) is 12,870; C(20, 10) is 184,756).
const MAX_EXACT: u64 = 200_000;

/// The outcome of comparing two samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MannWhitney {
    /// U for the first sample: how many (a, b) pairs have a above b, ties counting a half.
    pub u: f64,
    /// Two-sided exact p-value: the share of all ways to split the pooled values into groups
    /// of these sizes whose U lies at least as far from its mean as the observed one.
    pub p: f64,
}

/// Runs the test on two samples, or `None` when either is empty or the samples are too large
/// to enumerate (a comparison never makes that many runs).
pub fn mann_whitney(a: &[f64], b: &[f64]) -> Option<MannWhitney> {
    let (n1, n2) = (a.len(), b.len());
    if n1 == 0 || n2 == 0 || choose(n1 + n2, n1) > MAX_EXACT {
        return None;
    }
    let pooled: Vec<f64> = a.iter().chain(b).copied().collect();
    let ranks = midranks(&pooled);
    let u_of = |rank_sum: f64| rank_sum - (n1 * (n1 + 1)) as f64 / 2.0;
    let observed = u_of(ranks[..n1].iter().sum());
    let mean = (n1 * n2) as f64 / 2.0;
    let distance = (observed - mean).abs();
    // Every subset of n1 positions of the pooled values, as the first group.
    let (mut extreme, mut total) = (0u64, 0u64);
    let mut pick: Vec<usize> = (0..n1).collect();
    loop {
        let u = u_of(pick.iter().map(|&i| ranks[i]).sum());
        total += 1;
        // A small epsilon: rank sums are halves, so equal distances must compare equal.
        if (u - mean).abs() >= distance - 1e-9 {
            extreme += 1;
        }
        if !next_combination(&mut pick, n1 + n2) {
            break;
        }
    }
    Some(MannWhitney { u: observed, p: extreme as f64 / total as f64 })
}

/// The smallest two-sided p-value the exact test can give with `n` runs in each group: all of
/// one group above all of the other. Below `ALPHA` from 4 runs a group (2 / C(8, 4) = 0.029);
/// with 3 (0.1) no result can be significant.
pub fn smallest_p(n: usize) -> f64 {
    2.0 / choose(2 * n, n) as f64
}

/// The fewest runs per group with which the test can reach `level`: with two policies and one
/// figure, `ALPHA`; with more, the level Holm's first step asks of the smallest p-value.
pub fn runs_needed(level: f64) -> usize {
    (1..).find(|&n| smallest_p(n) < level).unwrap()
}

/// Holm's step-down correction (Holm 1979, "A simple sequentially rejective multiple test
/// procedure", Scand. J. Statist. 6(2)): with `m` p-values sorted ascending, the i-th (from 0)
/// is rejected when it and every one before it is below `level / (m - i)`. Returns, in the
/// order given, whether each is rejected. It keeps the chance of any false rejection at or
/// below `level`, whatever the tests' dependence.
pub fn holm(p_values: &[f64], level: f64) -> Vec<bool> {
    let m = p_values.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&i, &j| p_values[i].total_cmp(&p_values[j]));
    let mut rejected = vec![false; m];
    for (step, &i) in order.iter().enumerate() {
        if p_values[i] >= level / (m - step) as f64 {
            break;
        }
        rejected[i] = true;
    }
    rejected
}

/// Ranks from 1, ties sharing the mean of the ranks they span.
fn midranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&i, &j| values[i].total_cmp(&values[j]));
    let mut ranks = vec![0.0; values.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && values[order[end]] == values[order[start]] {
            end += 1;
        }
        // Positions start..end hold ranks start+1 ..= end; their mean:
        let rank = (start + 1 + end) as f64 / 2.0;
        for &i in &order[start..end] {
            ranks[i] = rank;
        }
        start = end;
    }
    ranks
}

/// Steps `pick` (increasing indices below `n`) to the next combination in lexicographic order;
/// false after the last.
fn next_combination(pick: &mut [usize], n: usize) -> bool {
    let k = pick.len();
    let Some(i) = (0..k).rev().find(|&i| pick[i] < n - k + i) else { return false };
    pick[i] += 1;
    for j in i + 1..k {
        pick[j] = pick[j - 1] + 1;
    }
    true
}

fn choose(n: usize, k: usize) -> u64 {
    let k = k.min(n - k);
    (0..k).fold(1u64, |acc, i| acc.saturating_mul((n - i) as u64) / (i + 1) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_groups_wholly_apart_give_the_smallest_p_the_runs_allow() {
        let r = mann_whitney(&[1.0, 2.0, 3.0, 4.0, 5.0], &[6.0, 7.0, 8.0, 9.0, 10.0]).unwrap();
        assert_eq!(r.u, 0.0);
        // 2 of the C(10, 5) = 252 splits are as extreme: this one and its mirror.
        assert!((r.p - 2.0 / 252.0).abs() < 1e-12, "{r:?}");
        assert!(r.p < ALPHA);
    }

    #[test]
    fn interleaved_groups_are_not_told_apart() {
        let r = mann_whitney(&[1.0, 4.0, 5.0, 8.0, 9.0], &[2.0, 3.0, 6.0, 7.0, 10.0]).unwrap();
        assert!(r.p > 0.5, "{r:?}");
        // Identical samples: U at its mean, every split at least as far from it.
        let same = mann_whitney(&[3.0; 5], &[3.0; 5]).unwrap();
        assert_eq!((same.u, same.p), (12.5, 1.0));
    }

    #[test]
    fn a_known_table_value_holds() {
        // n1 = n2 = 4, U = 1: P(U <= 1) = 2 / 70 one-sided, so 4 / 70 two-sided.
        let r = mann_whitney(&[1.0, 2.0, 3.0, 5.0], &[4.0, 6.0, 7.0, 8.0]).unwrap();
        assert_eq!(r.u, 1.0);
        assert!((r.p - 4.0 / 70.0).abs() < 1e-12, "{r:?}");
    }

    #[test]
    fn ties_take_midranks() {
        assert_eq!(midranks(&[10.0, 20.0, 10.0, 30.0]), [1.5, 3.0, 1.5, 4.0]);
        let r = mann_whitney(&[1.0, 1.0, 2.0], &[2.0, 3.0, 3.0]).unwrap();
        // Pairs with a above b: none; ties count a half: (2, 2) is one tie.
        assert_eq!(r.u, 0.5);
    }

    #[test]
    fn holm_steps_down_and_stops_at_the_first_p_it_keeps() {
        // Three tests at 0.05: 0.01 < 0.05/3, 0.02 < 0.05/2, 0.04 < 0.05: all rejected.
        assert_eq!(holm(&[0.04, 0.01, 0.02], ALPHA), [true, true, true]);
        // 0.03 is not below 0.05/2: it and everything after it are kept.
        assert_eq!(holm(&[0.01, 0.03, 0.04], ALPHA), [true, false, false]);
        // One test: the level itself; the smallest p with four runs a side passes it.
        assert_eq!(holm(&[smallest_p(4)], ALPHA), [true]);
        assert_eq!(holm(&[smallest_p(4); 2], ALPHA), [false, false]);
    }

    #[test]
    fn four_runs_a_group_is_the_fewest_that_can_decide() {
        assert!(smallest_p(3) > ALPHA && smallest_p(4) < ALPHA);
        assert_eq!(runs_needed(ALPHA), 4);
        // Five policies (ten pairs) on two figures: 0.05 / 20 needs six (2 / 924 = 0.0022).
        assert_eq!(runs_needed(ALPHA / 20.0), 6);
        assert_eq!(mann_whitney(&[], &[1.0]), None);
    }
}

//! A caller's waits as distributions, the evidence "backs off" and "jitters" are judged on:
//! every wait after a failure a client may retry, numbered by the retry it precedes and labelled
//! with the `Retry-After` the failure carried; the spread the caller's own process adds (its
//! floor, measured on its first sends); and the waits pooled by retry number and header.
//! One key's draws decide nothing: a full-jitter backoff's later wait is often shorter than
//! its earlier one, and a process under load spreads waits a client meant to be equal.

use std::collections::BTreeMap;

use super::{OutsideAttempt, OutsideMessage};

/// First sends this close after one another came out together: their spread is what the
/// caller's process adds to sends it meant to make at one instant.
pub const FIRST_SENDS_GAP_MS: u64 = 1_000;

/// Whether an attempt failed in a way a client may retry: hung up, 408, 409, 425, 429 or 5xx.
pub fn retryable_failure(attempt: &OutsideAttempt) -> bool {
    match attempt.status {
        None => attempt.hung_up,
        Some(status) => matches!(status, 408 | 409 | 425 | 429) || status >= 500,
    }
}

/// One wait after a failure a client may retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    /// The key (the chain's, for a retry under a new key).
    pub key: String,
    /// 1 for the wait before the key's first retry.
    pub retry: usize,
    /// The `Retry-After` the failure carried, in seconds.
    pub retry_after_s: Option<u64>,
    /// From the failing answer to the next request's arrival.
    pub waited: u64,
    /// Its own part: past the header when it honoured one, all of it otherwise.
    pub own: u64,
    /// It came back no sooner than the header asked (trivially so without one).
    pub honoured: bool,
    /// When the next request arrived.
    pub next_at: u64,
}

/// Every wait after a retryable failure, key by key in order.
pub fn waits(messages: &[&OutsideMessage]) -> Vec<Wait> {
    messages
        .iter()
        .flat_map(|m| {
            m.attempts.windows(2).enumerate().filter(|(_, w)| retryable_failure(&w[0])).filter_map(
                move |(i, w)| {
                    let waited = w[1].waited_ms?;
                    let floor = w[0].retry_after_s.map_or(0, |s| s * 1000);
                    let honoured = waited >= floor;
                    Some(Wait {
                        key: m.key.clone(),
                        retry: i + 1,
                        retry_after_s: w[0].retry_after_s,
                        waited,
                        own: if honoured { waited - floor } else { waited },
                        honoured,
                        next_at: w[1].started_ms,
                    })
                },
            )
        })
        .collect()
}

/// What the caller's own process adds: the widest spread of first sends that came out together
/// (one after another, no more than `FIRST_SENDS_GAP_MS` apart), and how many they were.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Floor {
    pub ms: u64,
    pub keys: usize,
}

/// None when no two first sends came out together: the process's own spread is not measured.
pub fn floor(messages: &[&OutsideMessage]) -> Option<Floor> {
    let mut firsts: Vec<u64> =
        messages.iter().filter_map(|m| m.attempts.first()).map(|a| a.started_ms).collect();
    firsts.sort_unstable();
    let mut widest: Option<Floor> = None;
    let mut start = 0;
    for i in 1..=firsts.len() {
        if i == firsts.len() || firsts[i] - firsts[i - 1] > FIRST_SENDS_GAP_MS {
            let keys = i - start;
            let ms = firsts[i - 1] - firsts[start];
            if keys >= 2 && widest.is_none_or(|w| ms > w.ms) {
                widest = Some(Floor { ms, keys });
            }
            start = i;
        }
    }
    widest
}

/// Waits pooled by retry number, sorted, for the waits `pick` takes (as `pick` measures them).
pub fn levels(waits: &[Wait], pick: impl Fn(&Wait) -> Option<u64>) -> BTreeMap<usize, Vec<u64>> {
    let mut levels: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for wait in waits {
        if let Some(ms) = pick(wait) {
            levels.entry(wait.retry).or_default().push(ms);
        }
    }
    for level in levels.values_mut() {
        level.sort_unstable();
    }
    levels
}

/// The waits that share a retry number and a `Retry-After`: what a client without jitter sends
/// alike. Sorted by retry, then header (none first).
pub fn groups(waits: &[Wait]) -> BTreeMap<(usize, Option<u64>), Vec<&Wait>> {
    let mut groups: BTreeMap<(usize, Option<u64>), Vec<&Wait>> = BTreeMap::new();
    for wait in waits {
        groups.entry((wait.retry, wait.retry_after_s)).or_default().push(wait);
    }
    for group in groups.values_mut() {
        group.sort_unstable_by_key(|w| w.waited);
    }
    groups
}

/// The middle of sorted values (the upper one of two).
pub fn median(sorted: &[u64]) -> u64 {
    sorted.get(sorted.len() / 2).copied().unwrap_or(0)
}

/// A known library's documented schedule that the waits without `Retry-After` match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    /// urllib3 2.x `Retry`: the first retry at once, then `backoff_factor * 2**(n-1)` s (plus
    /// up to `backoff_jitter`); `factor_ms` is the factor seen (half the second retry's wait).
    Urllib3 { factor_ms: u64 },
    /// go-retryablehttp's `DefaultBackoff`: 1 s doubling (to 30 s), nothing random.
    GoRetryableHttp,
    /// got: `1000 * 2**(n-1)` ms plus up to 100 ms at random.
    Got,
    /// axios-retry's `exponentialDelay`: `2**n * 100` ms plus 0-20 % of it.
    AxiosRetry,
    /// Full jitter (tenacity's `wait_random_exponential`): each wait anywhere from about 0 to a
    /// top that doubles.
    FullJitter,
}

/// A wait this short came back at once.
const AT_ONCE_MS: u64 = 100;

/// Within `share` of `want` (and 30 ms, the process's own noise).
fn near(seen: u64, want: u64, share: f64) -> bool {
    seen.abs_diff(want) as f64 <= (want as f64 * share).max(30.0)
}

impl Schedule {
    /// The schedule the waits after failures without a header match, by the first two or three
    /// retries' waits (each retry seen at least twice).
    pub fn of(waits: &[Wait]) -> Option<Schedule> {
        let levels = levels(waits, |w| w.retry_after_s.is_none().then_some(w.waited));
        let level = |k: usize| levels.get(&k).filter(|l| l.len() >= 2);
        let (first, second) = (level(1)?, level(2)?);
        let (low1, high1, mid1) = (first[0], first[first.len() - 1], median(first));
        let (low2, high2, mid2) = (second[0], second[second.len() - 1], median(second));
        let third = level(3);
        let doubles =
            |mid_from: u64, next: Option<&Vec<u64>>| next.is_none_or(|l| near(median(l), 2 * mid_from, 0.2));
        if high1 <= AT_ONCE_MS && mid2 >= 2 * AT_ONCE_MS && doubles(mid2, third) {
            return Some(Schedule::Urllib3 { factor_ms: mid2 / 2 });
        }
        if near(low1, 1_000, 0.05) && near(low2, 2_000, 0.05) {
            if high1 - low1 <= 30 && high2 - low2 <= 30 {
                return Some(Schedule::GoRetryableHttp);
            }
            if high1 <= 1_130 && high2 <= 2_130 {
                return Some(Schedule::Got);
            }
        }
        if near(low1, 200, 0.1) && high1 <= 270 && near(low2, 400, 0.1) && high2 <= 510 {
            return Some(Schedule::AxiosRetry);
        }
        let full = |l: &Vec<u64>| l.len() >= 3 && l[0] * 5 <= l[l.len() - 1];
        if full(first) && full(second) && high2 > high1 && low1 < mid1 && low2 < mid2 {
            return Some(Schedule::FullJitter);
        }
        None
    }

    /// What the schedule is, in words, naming the library and its setting.
    pub fn said(self) -> String {
        match self {
            Schedule::Urllib3 { factor_ms } => format!(
                "Its waits without a Retry-After match urllib3's Retry (the first retry at once, then \
                 backoff_factor x 2^(n-1), here backoff_factor about {:.2})",
                factor_ms as f64 / 1000.0
            ),
            Schedule::GoRetryableHttp => {
                "Its waits without a Retry-After match go-retryablehttp's DefaultBackoff (1 s, doubling, \
                 nothing random)"
                    .into()
            }
            Schedule::Got => {
                "Its waits without a Retry-After match got's (1 s doubling, plus up to 100 ms)".into()
            }
            Schedule::AxiosRetry => {
                "Its waits without a Retry-After match axios-retry's exponentialDelay (200 ms doubling, \
                 plus 0-20 %)"
                    .into()
            }
            Schedule::FullJitter => {
                "Its waits without a Retry-After are full jitter (anywhere from about 0 to a top that \
                 doubles, as tenacity's wait_random_exponential)"
                    .into()
            }
        }
    }
}

/// What the waits show, in a sentence for the advice: the median wait before each retry without
/// a header, and what it waited past a header.
pub fn shown(waits: &[Wait]) -> Option<String> {
    let bare = levels(waits, |w| w.retry_after_s.is_none().then_some(w.waited));
    let past = levels(waits, |w| (w.retry_after_s.is_some() && w.honoured).then_some(w.own));
    let mut said = Vec::new();
    if !bare.is_empty() {
        let each: Vec<String> = bare
            .iter()
            .take(4)
            .map(|(k, l)| {
                let spread =
                    if l.len() > 1 { format!(" ({} to {})", l[0], l[l.len() - 1]) } else { String::new() };
                format!("{} ms before retry {k}{spread}", median(l))
            })
            .collect();
        said.push(format!("without a Retry-After it waited {}", each.join(", ")));
    }
    let all: Vec<u64> = {
        let mut all: Vec<u64> = past.values().flatten().copied().collect();
        all.sort_unstable();
        all
    };
    if !all.is_empty() {
        said.push(format!(
            "after a Retry-After it honoured it waited {} to {} ms past it (median {} ms)",
            all[0],
            all[all.len() - 1],
            median(&all)
        ));
    }
    (!said.is_empty()).then(|| format!("The timing: {}.", said.join("; ")))
}

//! A report card per caller: ten checks of its retry behaviour against the rules this lab
//! teaches, each judged only from what the endpoint observed, with a verdict and the evidence
//! it rests on (keys and lab times). The thresholds are stated in the evidence. Seven look at
//! its waits, keys and attempts; three at whether it speaks the headers the endpoint's defences
//! read and send (`X-Request-Timeout-Ms`, `X-Previous-Attempts`, `X-Retry-Pushback-Ms`).

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::advice::{CheckId, Library, advice};
use super::timing::{self, Floor, Schedule, Wait, retryable_failure};
use super::{OutsideAttempt, OutsideMessage, Verdict};

/// A request counts as back before its `Retry-After` when it arrived more than this early
/// (the wait is measured at the endpoint: from the answer leaving to the next request arriving).
pub const RETRY_AFTER_SLACK_MS: u64 = 25;
/// Backoff grows when, with at least `BACKOFF_MIN_KEYS` keys waiting before retry k and before
/// retry k+1, the longest wait before k+1 is at least `BACKOFF_GROWTH` times the longest before
/// k and longer by `BACKOFF_MIN_GROWTH_MS` or, if more, by what noise could add: the smaller of
/// the spread of the first sends and that of the waits before k. The longest,
/// not one key's: under full jitter one key's later wait is often the shorter. The waits are
/// those after failures without `Retry-After` where there are enough (the client's own
/// schedule), else the part past the header.
pub const BACKOFF_GROWTH: f64 = 1.1;
pub const BACKOFF_MIN_GROWTH_MS: u64 = 50;
pub const BACKOFF_MIN_KEYS: usize = 5;
/// Jitter is judged among waits with the same retry number and `Retry-After`, at least
/// `JITTER_MIN_KEYS` of them. Credited when they spread more than `JITTER_FLOORS` times what
/// the caller's own process adds (the spread of its first sends, scaled up for their count) plus
/// `JITTER_MARGIN_MS`; no jitter when
/// they spread less than `JITTER_MIN_SPREAD_MS` or `JITTER_SHARE` of the median of what they
/// waited past the header (all of it without one); waiting
/// exactly the header when, past it, the median is within the first sends' spread plus
/// `JITTER_MARGIN_MS`.
pub const JITTER_MIN_KEYS: usize = 5;
pub const JITTER_MARGIN_MS: u64 = 50;
pub const JITTER_FLOORS: u64 = 3;
pub const JITTER_MIN_SPREAD_MS: u64 = 20;
pub const JITTER_SHARE: f64 = 0.02;
/// The most requests for one key a sane retry policy sends.
pub const ATTEMPTS_CAP: u64 = 10;
/// The same body under a new key this soon after a failure is a retry that made a new key.
pub const NEW_KEY_WINDOW_MS: u64 = 10_000;
/// A caller that waits longer than this before hanging up is barely protected by its timeout.
pub const LONG_TIMEOUT_MS: u64 = 30_000;
/// A caller kept the deadline it sent when it hung up within this of it, or within
/// `DEADLINE_SLACK_SHARE` of it, whichever is more: the endpoint measures from the request's
/// arrival and the caller from before it sent, and a hang-up is noticed a moment after it.
pub const DEADLINE_SLACK_MS: u64 = 100;
pub const DEADLINE_SLACK_SHARE: f64 = 0.25;

/// Statuses that say the request itself is wrong: sending it again cannot help.
const NOT_RETRYABLE: [u16; 5] = [400, 404, 413, 415, 422];

/// One check: its verdict and what it rests on.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Check {
    pub verdict: Verdict,
    pub evidence: String,
    /// For any verdict but a pass: why, in plain words, and what to change (naming the
    /// setting of the caller's library when the caller is one the page has a snippet for).
    pub advice: Option<String>,
}

/// The ten checks.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Checks {
    /// No request came back before the `Retry-After` it was given.
    pub retry_after: Check,
    /// A key's waits grow after repeated failures.
    pub backoff: Check,
    /// Keys that failed together do not all come back at one instant.
    pub jitter: Check,
    /// The most requests seen for one key stays within `ATTEMPTS_CAP`.
    pub attempts_capped: Check,
    /// A retry carries the same key; the same body under a new key soon after a failure is flagged.
    pub key_reused: Check,
    /// A key answered 400, 404, 413, 415 or 422 is not sent again.
    pub no_retry_on_4xx: Check,
    /// The caller's own timeout: when it hung up.
    pub timeouts: Check,
    /// Each request said in `X-Request-Timeout-Ms` how long its caller waits, and a caller that
    /// hung up did so about when it said.
    pub deadline_sent: Check,
    /// Each retry said in `X-Previous-Attempts` how many requests it made before with its key.
    pub attempts_numbered: Check,
    /// After `X-Retry-Pushback-Ms: -1` the key was not sent again; after a wait of 0 ms or more,
    /// it came back no sooner.
    pub pushback_honoured: Check,
}

/// One caller's report card.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct CallerReport {
    pub name: String,
    /// Keys it sent (those kept).
    pub keys: usize,
    /// Requests it sent with those keys.
    pub requests: u64,
    pub first_seen_ms: u64,
    pub last_seen_ms: u64,
    pub checks: Checks,
}

/// A report card for each caller among `messages`, by name.
pub fn report(messages: &[OutsideMessage]) -> Vec<CallerReport> {
    let mut by_caller: BTreeMap<&str, Vec<&OutsideMessage>> = BTreeMap::new();
    for message in messages {
        by_caller.entry(&message.caller).or_default().push(message);
    }
    by_caller.into_iter().map(|(name, messages)| card(name, &messages)).collect()
}

fn card(name: &str, messages: &[&OutsideMessage]) -> CallerReport {
    let starts = messages.iter().flat_map(|m| m.attempts.iter().map(|a| a.started_ms));
    let ends = messages.iter().flat_map(|m| m.attempts.iter().map(|a| a.ended_ms.unwrap_or(a.started_ms)));
    // A retry under a new key is still a retry: the waits, spread and count of attempts are
    // judged over each chain of keys, so a loop that makes a key per try is not let off.
    let links = new_key_links(messages);
    let chains = chains(messages, &links);
    let chained: Vec<&OutsideMessage> = chains.iter().collect();
    let waits = timing::waits(&chained);
    let floor = timing::floor(&chained);
    // The timing speaks before the name: a `python-requests` caller whose waits are urllib3's
    // gets urllib3's advice.
    let schedule = Schedule::of(&waits);
    let library = schedule.map_or_else(|| Library::of(name), Library::of_schedule);
    let shown = timing::shown(&waits);
    let judged = |id: CheckId, check: Check| {
        let advice = advice(id, check.verdict, library).map(|advice| match id {
            CheckId::Backoff | CheckId::Jitter | CheckId::JitterAboveHeader | CheckId::RetryAfter => {
                let named = schedule.map(|s| format!(" {}.", s.said())).unwrap_or_default();
                match &shown {
                    Some(shown) => {
                        let mut letters = advice.chars();
                        let first = letters.next().map(|c| c.to_uppercase().collect::<String>());
                        format!("{shown}{named} {}{}", first.unwrap_or_default(), letters.as_str())
                    }
                    None => advice,
                }
            }
            _ => advice,
        });
        check.advised(advice)
    };
    CallerReport {
        name: name.to_owned(),
        keys: messages.len(),
        requests: messages.iter().map(|m| m.requests).sum(),
        first_seen_ms: starts.min().unwrap_or(0),
        last_seen_ms: ends.max().unwrap_or(0),
        checks: Checks {
            retry_after: judged(CheckId::RetryAfter, retry_after(&chained)),
            backoff: judged(CheckId::Backoff, backoff(&waits, floor)),
            jitter: {
                let jitter = jitter(&waits, floor);
                let exactly = jitter.evidence.starts_with("waits exactly the Retry-After");
                judged(if exactly { CheckId::JitterAboveHeader } else { CheckId::Jitter }, jitter)
            },
            attempts_capped: judged(CheckId::AttemptsCapped, attempts_capped(&chained)),
            key_reused: judged(CheckId::KeyReused, key_reused(messages, &links)),
            no_retry_on_4xx: judged(CheckId::NoRetryOn4xx, no_retry_on_4xx(messages)),
            timeouts: judged(CheckId::Timeouts, timeouts(messages)),
            deadline_sent: judged(CheckId::DeadlineSent, deadline_sent(messages)),
            attempts_numbered: judged(CheckId::AttemptsNumbered, attempts_numbered(messages)),
            pushback_honoured: judged(CheckId::PushbackHonoured, pushback_honoured(&chained)),
        },
    }
}

fn check(verdict: Verdict, evidence: impl Into<String>) -> Check {
    Check { verdict, evidence: evidence.into(), advice: None }
}

impl Check {
    fn advised(self, advice: Option<String>) -> Check {
        Check { advice, ..self }
    }
}

/// A time on the lab's clock, as the evidence says it.
fn at(ms: u64) -> String {
    format!("{:.3} s", ms as f64 / 1000.0)
}

/// Each attempt with the one after it, for every message.
fn pairs<'a>(
    messages: &'a [&'a OutsideMessage],
) -> impl Iterator<Item = (&'a OutsideMessage, &'a OutsideAttempt, &'a OutsideAttempt)> {
    messages.iter().flat_map(|m| m.attempts.windows(2).map(move |w| (*m, &w[0], &w[1])))
}

/// Lists at most a few examples, and how many more there were.
fn some(items: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut said = items.iter().take(SHOWN).cloned().collect::<Vec<_>>().join("; ");
    if items.len() > SHOWN {
        said.push_str(&format!("; and {} more", items.len() - SHOWN));
    }
    said
}

fn retry_after(messages: &[&OutsideMessage]) -> Check {
    let (mut honoured, mut early) = (0, Vec::new());
    for (message, given, next) in pairs(messages) {
        let (Some(seconds), Some(waited)) = (given.retry_after_s, next.waited_ms) else { continue };
        let asked = seconds * 1000;
        if waited + RETRY_AFTER_SLACK_MS < asked {
            early.push(format!(
                "key {} came back {} ms after a Retry-After of {seconds} s (at {})",
                message.key,
                waited,
                at(next.started_ms)
            ));
        } else {
            honoured += 1;
        }
    }
    match (honoured, early.len()) {
        (0, 0) => check(Verdict::NotSeen, "no key was sent again after an answer with Retry-After"),
        (_, 0) => check(
            Verdict::Pass,
            format!(
                "{honoured} retries after a Retry-After, none back more than {RETRY_AFTER_SLACK_MS} ms early"
            ),
        ),
        (_, n) => {
            check(Verdict::Fail, format!("{n} of {} retries came back early: {}", n + honoured, some(&early)))
        }
    }
}

/// The judgement of one source of waits (without a header, or past one), over the retry
/// numbers that have `BACKOFF_MIN_KEYS` waits each: whether the top wait grew from the first of
/// them to the last (`grew`, or `flat` when it did not), and each neighbouring pair whose top
/// fell by more than noise (`flat` too). Judged end to end, not pair by pair: a schedule whose
/// jitter is wide next to its first steps (stamina's 0.1 s doubling under 0 to 1 s of jitter)
/// grows by little from one retry to the next, and clearly over three.
fn grown(levels: &BTreeMap<usize, Vec<u64>>, floor: u64) -> (Vec<String>, Vec<String>) {
    let (mut grew, mut flat) = (Vec::new(), Vec::new());
    let judged: Vec<(&usize, &Vec<u64>)> =
        levels.iter().filter(|(_, l)| l.len() >= BACKOFF_MIN_KEYS).collect();
    let (Some(&(&k, earlier)), Some(&(&last, later))) = (judged.first(), judged.last()) else {
        return (grew, flat);
    };
    if judged.len() < 2 {
        return (grew, flat);
    }
    let top = |level: &Vec<u64>| level[level.len() - 1];
    let (first_top, last_top) = (top(earlier), top(later));
    // Noise moves a top by no more than the process adds, nor than the waits before retry k
    // spread (for a client with no backoff, that spread is all noise).
    let margin = BACKOFF_MIN_GROWTH_MS.max(floor.min(first_top - earlier[0]));
    let needed = ((first_top as f64 * BACKOFF_GROWTH) as u64).max(first_top + margin);
    let tops: Vec<String> = judged.iter().map(|(n, l)| format!("{} before retry {n}", top(l))).collect();
    let said = format!(
        "before retry {k} {} keys waited {} to {first_top} ms, before retry {last} {} keys {} to {last_top} ms \
         (the longest: {} ms)",
        earlier.len(),
        earlier[0],
        later.len(),
        later[0],
        tops.join(", ")
    );
    if last_top >= needed {
        grew.push(said);
    } else {
        flat.push(format!("{said} (needed a top of {needed} ms)"));
        return (grew, flat);
    }
    for pair in judged.windows(2) {
        let ((&a, before), (&b, after)) = (pair[0], pair[1]);
        if top(after) + margin < top(before) {
            flat.push(format!(
                "the longest wait fell from {} ms before retry {a} to {} ms before retry {b}",
                top(before),
                top(after)
            ));
        }
    }
    (grew, flat)
}

/// A backoff's waits grow with the retry number. Judged on the waits of all keys pooled by
/// retry number: the longest wait before retry k+1 against the longest before retry k. Whether
/// one key's later wait is longer is no evidence: under full jitter it often is not.
fn backoff(waits: &[Wait], floor: Option<Floor>) -> Check {
    let floor_ms = floor.map_or(u64::MAX, |f| f.ms);
    let rule = format!(
        "grows: over the retry numbers that at least {BACKOFF_MIN_KEYS} keys waited before, the longest wait \
         before the last is at least {BACKOFF_GROWTH}x the longest before the first and longer by \
         {BACKOFF_MIN_GROWTH_MS} ms or, if more, the smaller of the spread of its first sends{} and of the \
         waits before the first; and no longest wait falls by more than that from one to the next",
        floor.map(|f| format!(" ({} ms)", f.ms)).unwrap_or_default()
    );
    let bare = timing::levels(waits, |w| w.retry_after_s.is_none().then_some(w.waited));
    let past = timing::levels(waits, |w| w.retry_after_s.map(|_| w.own));
    // Its own schedule shows where no header sets the wait; past a header only when it must.
    let (source, (grew, flat)) = match grown(&bare, floor_ms) {
        (g, f) if !g.is_empty() || !f.is_empty() => ("after failures without Retry-After", (g, f)),
        _ => ("past the Retry-After it was given", grown(&past, floor_ms)),
    };
    match (grew.len(), flat.len()) {
        (0, 0) => {
            let seconds = waits.iter().filter(|w| w.retry == 2).count();
            if seconds == 0 {
                check(Verdict::NotSeen, "no key failed often enough to wait twice")
            } else {
                check(
                    Verdict::NotJudged,
                    format!(
                        "could not judge: {seconds} waits before a second retry, never {BACKOFF_MIN_KEYS} \
                         keys at two retry numbers in a row ({rule})"
                    ),
                )
            }
        }
        (_, 0) => check(Verdict::Pass, format!("{source}, its waits grew ({rule}): {}", some(&grew))),
        // Past a header, a client that waits the header exactly has no part of its own to grow:
        // that is no evidence against its backoff, which the failures without one did not show.
        (0, _) if source.starts_with("past") => check(
            Verdict::NotJudged,
            format!(
                "could not judge: too few keys failed twice without a Retry-After, and past the header \
                 its own part did not grow, as a client that waits the header exactly would show ({rule}): {}",
                some(&flat)
            ),
        ),
        (0, _) => check(Verdict::Fail, format!("{source}, its waits did not grow ({rule}): {}", some(&flat))),
        (_, n) => check(
            Verdict::Warn,
            format!(
                "{source}, its waits grew overall, but fell {n} times on the way ({rule}): {}; {}",
                some(&grew),
                some(&flat)
            ),
        ),
    }
}

/// What one group of waits (one retry number, one `Retry-After`) shows.
enum Spread {
    /// Spread past what the process adds: jitter.
    Jittered(String),
    /// Past a header, no more than the process adds: no jitter above the header.
    Exactly(String),
    /// Within a few ms of one another, not past a header: no jitter.
    Together(String),
    /// Spread, but no more than the process adds: cannot tell.
    Unclear(String),
}

/// Keys that failed alike (the same retry number, the same `Retry-After`) do not come back
/// alike. Credited only for a spread past what the caller's own process adds, measured on its
/// first sends: a client with no jitter whose process is slow spreads its waits too.
fn jitter(waits: &[Wait], floor: Option<Floor>) -> Check {
    if waits.is_empty() {
        return check(Verdict::NotSeen, "no key was sent again after a failure");
    }
    // The range of n first sends falls short of the process's whole spread by about 2/(n+1) of
    // it; scaled by (n+1)/(n-1), it estimates the whole.
    let floor_ms = floor.map(|f| f.ms * (f.keys as u64 + 1) / (f.keys as u64 - 1));
    let floor_said = match floor {
        Some(f) => format!("its {} first sends that came out together spread {} ms", f.keys, f.ms),
        None => {
            "no two of its first sends came out together, so what its process adds is not measured".into()
        }
    };
    let (mut small, mut shown) = (Vec::new(), Vec::new());
    for ((retry, header), group) in timing::groups(waits) {
        let header_said =
            header.map_or("without Retry-After".to_owned(), |s| format!("after Retry-After: {s}"));
        if group.len() < JITTER_MIN_KEYS {
            small.push(format!("{} before retry {retry} {header_said}", group.len()));
            continue;
        }
        let sorted: Vec<u64> = group.iter().map(|w| w.waited).collect();
        let (low, high) = (sorted[0], sorted[sorted.len() - 1]);
        let spread = high - low;
        let keys: Vec<&str> = group.iter().map(|w| w.key.as_str()).take(3).collect();
        let said = format!(
            "before retry {retry} {header_said}, {} keys ({}{}) waited {low} to {high} ms",
            group.len(),
            keys.join(", "),
            if group.len() > keys.len() { ", ..." } else { "" }
        );
        let credited = floor_ms.is_some_and(|f| spread > JITTER_FLOORS * f + JITTER_MARGIN_MS);
        let own: Vec<u64> = {
            let mut own: Vec<u64> = group.iter().map(|w| w.own).collect();
            own.sort_unstable();
            own
        };
        // The share is of what they waited past the header (all of it without one): every key
        // was told the same header, so it adds length and no spread, and a jitter drawn on the
        // part past it is no narrower for the header being long.
        let together = spread < JITTER_MIN_SPREAD_MS.max((timing::median(&own) as f64 * JITTER_SHARE) as u64);
        // Its quickest came back at the header, and the rest no further past it than its process
        // spreads its sends: what they waited past the header is its process's.
        let exactly = header.is_some()
            && group.iter().all(|w| w.honoured)
            && own[0] <= JITTER_MARGIN_MS
            && spread <= floor_ms.unwrap_or(0) + JITTER_MARGIN_MS;
        shown.push(if credited && !together {
            Spread::Jittered(said)
        } else if exactly {
            Spread::Exactly(format!("{said}: the header plus {} to {} ms", own[0], own[own.len() - 1]))
        } else if together {
            Spread::Together(format!("{said}, within {spread} ms"))
        } else {
            Spread::Unclear(format!("{said}: a spread of {spread} ms"))
        });
    }
    let pick = |f: fn(&Spread) -> Option<&String>| shown.iter().filter_map(f).cloned().collect::<Vec<_>>();
    let jittered = pick(|s| if let Spread::Jittered(s) = s { Some(s) } else { None });
    let exactly = pick(|s| if let Spread::Exactly(s) = s { Some(s) } else { None });
    let together = pick(|s| if let Spread::Together(s) = s { Some(s) } else { None });
    let unclear = pick(|s| if let Spread::Unclear(s) = s { Some(s) } else { None });
    let credit = format!(
        "jitter is a spread past {JITTER_FLOORS}x what its process adds plus {JITTER_MARGIN_MS} ms, among \
         waits with the same retry number and Retry-After; {floor_said}{}",
        floor_ms.map(|f| format!(", so it adds up to about {f} ms")).unwrap_or_default()
    );
    let no_jitter = format!(
        "no jitter: waits {JITTER_MIN_SPREAD_MS} ms or {}% of the median past any Retry-After apart",
        (JITTER_SHARE * 100.0) as u32
    );
    match (jittered.is_empty(), together.is_empty(), exactly.is_empty()) {
        (true, false, _) => check(
            Verdict::Fail,
            format!(
                "came back at one instant, {} times ({no_jitter}): {}{}",
                together.len(),
                some(&together),
                match exactly.len() {
                    0 => String::new(),
                    n => format!("; and waits exactly the Retry-After ({n} times): {}", some(&exactly)),
                }
            ),
        ),
        (false, false, _) => check(
            Verdict::Warn,
            format!(
                "spread {} times ({credit}), but {} times came back at one instant ({no_jitter}): {}",
                jittered.len(),
                together.len(),
                some(&together)
            ),
        ),
        (false, true, false) => check(
            Verdict::Warn,
            format!(
                "waits exactly the Retry-After: no jitter above the header ({} times: {}), though it spread \
                 its own waits {} times ({credit}): {}",
                exactly.len(),
                some(&exactly),
                jittered.len(),
                some(&jittered)
            ),
        ),
        (false, true, true) => {
            check(Verdict::Pass, format!("spread {} times ({credit}): {}", jittered.len(), some(&jittered)))
        }
        (true, true, false) => check(
            Verdict::Warn,
            format!(
                "waits exactly the Retry-After: no jitter above the header ({} times its quickest came back \
                 within {JITTER_MARGIN_MS} ms of it, and the spread is no more than its process adds; \
                 {floor_said}): {}",
                exactly.len(),
                some(&exactly)
            ),
        ),
        (true, true, true) => {
            let mut why = Vec::new();
            if !unclear.is_empty() {
                why.push(format!(
                    "{} times the waits spread no more than its own process adds ({credit}): {}",
                    unclear.len(),
                    some(&unclear)
                ));
            }
            if !small.is_empty() {
                why.push(format!(
                    "too few keys waited alike to tell (it takes {JITTER_MIN_KEYS} with the same retry number \
                     and Retry-After): {}",
                    some(&small)
                ));
            }
            check(Verdict::NotJudged, format!("could not judge: {}", why.join("; ")))
        }
    }
}

fn attempts_capped(messages: &[&OutsideMessage]) -> Check {
    let Some(most) = messages.iter().max_by_key(|m| m.requests) else {
        return check(Verdict::NotSeen, "no keys seen");
    };
    let first = most.attempts.first().map_or(0, |a| a.started_ms);
    let said =
        format!("at most {} requests for one key (key {}, first at {})", most.requests, most.key, at(first));
    match most.requests > ATTEMPTS_CAP {
        false => check(Verdict::Pass, format!("{said}, within {ATTEMPTS_CAP}")),
        true => check(Verdict::Fail, format!("{said}, more than {ATTEMPTS_CAP}")),
    }
}

/// A message that is a retry of an earlier one under a new key: the earlier one's last attempt
/// failed in a way a client retries, none of its attempts was taken by the endpoint (a 2xx, or
/// a 409 saying its first request is being worked), and the same body came under another key
/// within `NEW_KEY_WINDOW_MS`. A key the endpoint took is nobody's retry: the same body sent
/// again after it is a new request (two orders alike, one after the other, or a script run twice).
#[derive(Debug, Clone, Copy)]
struct Link {
    /// Indexes into the caller's messages.
    earlier: usize,
    later: usize,
    failed_ms: u64,
}

fn new_key_links(messages: &[&OutsideMessage]) -> Vec<Link> {
    // Keys whose last attempt failed, by body digest, in the order they failed.
    let mut gave_up: HashMap<&str, Vec<(u64, usize)>> = HashMap::new();
    for (i, message) in messages.iter().enumerate() {
        let (Some(digest), Some(last)) = (message.digest.as_deref(), message.attempts.last()) else {
            continue;
        };
        let taken =
            message.attempts.iter().any(|a| a.status.is_some_and(|s| (200..300).contains(&s) || s == 409));
        if retryable_failure(last) && !taken {
            gave_up.entry(digest).or_default().push((last.ended_ms.unwrap_or(last.started_ms), i));
        }
    }
    let mut order: Vec<usize> = (0..messages.len()).collect();
    order.sort_by_key(|&i| messages[i].attempts.first().map_or(u64::MAX, |a| a.started_ms));
    let mut taken = vec![false; messages.len()];
    // Only a key that started before links to a later one: two keys sent and failed in the same
    // millisecond would otherwise take each other up, a chain with no first key.
    let mut started = vec![false; messages.len()];
    let mut links = Vec::new();
    for later in order {
        started[later] = true;
        let message = messages[later];
        let (Some(digest), Some(first)) = (message.digest.as_deref(), message.attempts.first()) else {
            continue;
        };
        // The latest failure before it that no other key has taken up.
        let earlier = gave_up.get(digest).into_iter().flatten().copied().filter(|&(failed, i)| {
            i != later
                && started[i]
                && !taken[i]
                && failed <= first.started_ms
                && first.started_ms - failed <= NEW_KEY_WINDOW_MS
        });
        if let Some((failed_ms, earlier)) = earlier.max_by_key(|&(failed, _)| failed) {
            taken[earlier] = true;
            links.push(Link { earlier, later, failed_ms });
        }
    }
    links
}

/// Each run of keys joined by `links` as one message: its attempts in turn, the wait before a
/// new key's first attempt measured from the failure it retries. Keys not linked stand alone.
fn chains(messages: &[&OutsideMessage], links: &[Link]) -> Vec<OutsideMessage> {
    let mut next: HashMap<usize, usize> = HashMap::new();
    let mut has_earlier = vec![false; messages.len()];
    for link in links {
        next.insert(link.earlier, link.later);
        has_earlier[link.later] = true;
    }
    let mut chains = Vec::new();
    for head in (0..messages.len()).filter(|&i| !has_earlier[i]) {
        let mut chain = messages[head].clone();
        let mut new_keys = 0;
        let mut at = head;
        while let Some(&later) = next.get(&at) {
            let message = messages[later];
            let previous_end = chain.attempts.last().and_then(|a| a.ended_ms);
            for (i, attempt) in message.attempts.iter().enumerate() {
                let mut attempt = attempt.clone();
                attempt.n = chain.attempts.len() as u32 + 1;
                if i == 0 {
                    attempt.waited_ms = previous_end.map(|end| attempt.started_ms.saturating_sub(end));
                }
                chain.attempts.push(attempt);
            }
            chain.requests += message.requests;
            new_keys += 1;
            at = later;
        }
        if new_keys > 0 {
            let keys = if new_keys == 1 { "key" } else { "keys" };
            chain.key = format!("{} (and {new_keys} new {keys} after it)", chain.key);
        }
        chains.push(chain);
    }
    chains
}

fn key_reused(messages: &[&OutsideMessage], links: &[Link]) -> Check {
    let reused: Vec<&&OutsideMessage> = messages.iter().filter(|m| m.requests > 1).collect();
    let new_keys: Vec<String> = links
        .iter()
        .map(|link| {
            let later = messages[link.later];
            format!(
                "the body of key {} (failed at {}) came again under key {} at {}",
                messages[link.earlier].key,
                at(link.failed_ms),
                later.key,
                at(later.attempts.first().map_or(0, |a| a.started_ms))
            )
        })
        .collect();
    let window = NEW_KEY_WINDOW_MS / 1000;
    match (reused.len(), new_keys.len()) {
        (0, 0) => check(Verdict::NotSeen, "no request was sent again, under its key or a new one"),
        (n, 0) => check(
            Verdict::Pass,
            format!("{n} keys were retried under the same key (e.g. key {})", reused[0].key),
        ),
        (_, n) => check(
            Verdict::Fail,
            format!(
                "{n} retries made a new key (the same body within {window} s after a key's last try failed): {}",
                some(&new_keys)
            ),
        ),
    }
}

fn no_retry_on_4xx(messages: &[&OutsideMessage]) -> Check {
    let (mut respected, mut again) = (Vec::new(), Vec::new());
    for message in messages {
        let Some(refused) =
            message.attempts.iter().position(|a| a.status.is_some_and(|s| NOT_RETRYABLE.contains(&s)))
        else {
            continue;
        };
        let status = message.attempts[refused].status.unwrap_or_default();
        match message.attempts.get(refused + 1) {
            Some(next) => again.push(format!(
                "key {} got {status} and came again at {} ({} requests in all)",
                message.key,
                at(next.started_ms),
                message.requests
            )),
            None if message.requests > refused as u64 + 1 => again.push(format!(
                "key {} got {status} and came again ({} requests)",
                message.key, message.requests
            )),
            None => respected.push(format!("key {} got {status}", message.key)),
        }
    }
    match (respected.len(), again.len()) {
        (0, 0) => check(Verdict::NotSeen, "no key got 400, 404, 413, 415 or 422"),
        (n, 0) => check(
            Verdict::Pass,
            format!("{n} keys got a 4xx that no retry fixes and were not sent again: {}", some(&respected)),
        ),
        (_, n) => check(
            Verdict::Fail,
            format!("{n} keys were sent again after a 4xx that no retry fixes: {}", some(&again)),
        ),
    }
}

fn timeouts(messages: &[&OutsideMessage]) -> Check {
    let mut hung: Vec<(u64, &str, u64)> = messages
        .iter()
        .flat_map(|m| {
            m.attempts.iter().filter(|a| a.hung_up).filter_map(move |a| {
                Some((a.ended_ms?.saturating_sub(a.started_ms), m.key.as_str(), a.started_ms))
            })
        })
        .collect();
    if hung.is_empty() {
        return check(Verdict::NotSeen, "the caller never hung up before an answer");
    }
    hung.sort_unstable_by_key(|h| h.0);
    let (low, median, high) = (hung[0], hung[hung.len() / 2], hung[hung.len() - 1]);
    let said = format!(
        "hung up {} times after {} to {} ms (median {} ms; e.g. key {} at {})",
        hung.len(),
        low.0,
        high.0,
        median.0,
        high.1,
        at(high.2)
    );
    match high.0 > LONG_TIMEOUT_MS {
        false => check(Verdict::Pass, format!("timeout about {} ms: {said}", median.0)),
        true => check(
            Verdict::Warn,
            format!("{said}: longer than {} s protects the caller little", LONG_TIMEOUT_MS / 1000),
        ),
    }
}

/// The deadline a caller sends is the time it will wait (Envoy's `x-envoy-expected-rq-timeout-ms`,
/// gRPC's `grpc-timeout`); the deadline defence drops work that would finish after it. Judged:
/// whether each request sent one, and, where the caller hung up (or waited on), whether it did
/// so about when it said.
fn deadline_sent(messages: &[&OutsideMessage]) -> Check {
    let attempts: Vec<(&OutsideMessage, &OutsideAttempt)> =
        messages.iter().flat_map(|m| m.attempts.iter().map(move |a| (*m, a))).collect();
    if attempts.is_empty() {
        return check(Verdict::NotSeen, "no request seen");
    }
    let (mut low, mut high) = (u32::MAX, 0);
    let (mut kept, mut early, mut late, mut unparsed, mut silent) =
        (0, Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for &(message, attempt) in &attempts {
        let request = format!("key {}'s request {} (at {})", message.key, attempt.n, at(attempt.started_ms));
        if attempt.unparsed.timeout {
            unparsed.push(request.clone());
        }
        let Some(said) = attempt.timeout_ms else {
            if !attempt.unparsed.timeout {
                silent.push(request);
            }
            continue;
        };
        (low, high) = (low.min(said), high.max(said));
        let Some(ended) = attempt.ended_ms else { continue };
        let (said, lasted) = (u64::from(said), ended.saturating_sub(attempt.started_ms));
        let slack = DEADLINE_SLACK_MS.max((said as f64 * DEADLINE_SLACK_SHARE) as u64);
        if attempt.hung_up && lasted + slack < said {
            early.push(format!("{request} hung up after {lasted} ms, having said {said} ms"));
        } else if lasted > said + slack {
            let how = if attempt.hung_up { "hung up after" } else { "waited for its answer" };
            late.push(format!("{request} {how} {lasted} ms, having said {said} ms"));
        } else if attempt.hung_up {
            kept += 1;
        }
    }
    let total = attempts.len();
    let sent = total - silent.len() - unparsed.len();
    let rule = format!("within {DEADLINE_SLACK_MS} ms or {}% of it", (DEADLINE_SLACK_SHARE * 100.0) as u32);
    if !unparsed.is_empty() || !early.is_empty() {
        let mut said = Vec::new();
        if !unparsed.is_empty() {
            said.push(format!(
                "{} requests sent an X-Request-Timeout-Ms that did not parse (ignored): {}",
                unparsed.len(),
                some(&unparsed)
            ));
        }
        if !early.is_empty() {
            said.push(format!(
                "{} times it hung up well before the deadline it sent ({rule}): {}",
                early.len(),
                some(&early)
            ));
        }
        return check(Verdict::Fail, said.join("; "));
    }
    if sent == 0 {
        return check(
            Verdict::Warn,
            format!("none of its {total} requests said in X-Request-Timeout-Ms how long it waits"),
        );
    }
    let range = if low == high { format!("{low} ms") } else { format!("{low} to {high} ms") };
    if !silent.is_empty() {
        return check(
            Verdict::Warn,
            format!("{sent} of {total} requests sent a deadline ({range}); not: {}", some(&silent)),
        );
    }
    if !late.is_empty() {
        return check(
            Verdict::Warn,
            format!("it waited past the deadline it sent ({rule}) {} times: {}", late.len(), some(&late)),
        );
    }
    let kept = match kept {
        0 => "it never hung up, so whether it keeps that deadline is not seen".to_owned(),
        1 => format!("it hung up once, at the deadline it sent ({rule})"),
        n => format!("it hung up {n} times, each at the deadline it sent ({rule})"),
    };
    check(Verdict::Pass, format!("all {total} requests sent a deadline ({range}); {kept}"))
}

/// gRFC A6 ("Exposed Retry Metadata"): a retry carries how many attempts were made before it
/// (`grpc-previous-rpc-attempts`), and gRPC leaves the header off a first attempt, so an absent
/// header on a key's first request counts as 0. Judged per key: the requests sent before it with
/// that key.
fn attempts_numbered(messages: &[&OutsideMessage]) -> Check {
    let (mut firsts, mut right, mut wrong, mut unmarked) = (0, Vec::new(), Vec::new(), Vec::new());
    for message in messages {
        for attempt in &message.attempts {
            let before = attempt.n.saturating_sub(1);
            let request =
                format!("key {}'s request {} (at {})", message.key, attempt.n, at(attempt.started_ms));
            match (attempt.previous_attempts, attempt.unparsed.previous_attempts) {
                (_, true) => wrong.push(format!("{request} sent an X-Previous-Attempts that did not parse")),
                (Some(said), _) if said != before => {
                    wrong.push(format!("{request} said {said}, after {before} requests with that key"))
                }
                (Some(_), _) if before > 0 => right.push(format!("{request} said {before}")),
                (None, _) if before > 0 => unmarked.push(request),
                _ => firsts += 1,
            }
        }
    }
    let rule = "X-Previous-Attempts: the requests sent before with the key (0, or none, on the first)";
    match (right.len(), unmarked.len(), wrong.len()) {
        (_, _, w) if w > 0 => {
            check(Verdict::Fail, format!("{w} requests numbered wrong ({rule}): {}", some(&wrong)))
        }
        (0, 0, 0) => check(
            Verdict::NotSeen,
            format!("no key was sent again, so no retry's number is seen ({firsts} first requests)"),
        ),
        (0, u, _) => check(
            Verdict::Warn,
            format!("none of its {u} retries said X-Previous-Attempts: {}", some(&unmarked)),
        ),
        (r, 0, _) => check(Verdict::Pass, format!("{r} retries numbered right ({rule}): {}", some(&right))),
        (r, u, _) => check(
            Verdict::Warn,
            format!("{r} of {} retries said X-Previous-Attempts; not: {}", r + u, some(&unmarked)),
        ),
    }
}

/// gRFC A6 ("Pushback"): a negative (or unparseable) pushback asks the client not to retry at
/// all; one of 0 or more, to retry after exactly that many ms. A key told not to retry that came
/// again (also under a new key) did not honour it; one told a wait, if it came back sooner.
fn pushback_honoured(messages: &[&OutsideMessage]) -> Check {
    let (mut honoured, mut ignored) = (Vec::new(), Vec::new());
    for message in messages {
        for (i, attempt) in message.attempts.iter().enumerate() {
            let Some(pushback) = attempt.pushback_ms else { continue };
            let told = format!(
                "key {} was told {pushback} ms at {}",
                message.key,
                at(attempt.ended_ms.unwrap_or(attempt.started_ms))
            );
            let next = message.attempts.get(i + 1);
            if pushback < 0 {
                match next {
                    Some(next) => ignored.push(format!(
                        "{told} (do not retry) and came again at {} ({} requests in all)",
                        at(next.started_ms),
                        message.requests
                    )),
                    None if message.requests > i as u64 + 1 => ignored.push(format!(
                        "{told} (do not retry) and came again ({} requests in all)",
                        message.requests
                    )),
                    None => honoured.push(format!("{told} and was not sent again")),
                }
                continue;
            }
            let asked = u64::try_from(pushback).unwrap_or(0);
            match next.and_then(|next| next.waited_ms) {
                Some(waited) if waited + RETRY_AFTER_SLACK_MS < asked => {
                    ignored.push(format!("{told} and came back after {waited} ms"))
                }
                Some(waited) => honoured.push(format!("{told} and came back after {waited} ms")),
                None => honoured.push(format!("{told} and was not sent again")),
            }
        }
    }
    match (honoured.len(), ignored.len()) {
        (0, 0) => check(Verdict::NotSeen, "no answer it got carried X-Retry-Pushback-Ms"),
        (n, 0) => check(Verdict::Pass, format!("{n} pushbacks honoured: {}", some(&honoured))),
        (h, n) => check(
            Verdict::Fail,
            format!(
                "{n} of {} pushbacks not honoured (a negative one: do not retry; else: not sooner, \
                 {RETRY_AFTER_SLACK_MS} ms of slack): {}",
                h + n,
                some(&ignored)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message whose attempts are `(started, ended, status, retry_after_s)`.
    fn message(
        id: u64,
        key: &str,
        digest: &str,
        attempts: &[(u64, u64, Option<u16>, Option<u64>)],
    ) -> OutsideMessage {
        let mut previous_end: Option<u64> = None;
        let attempts = attempts
            .iter()
            .enumerate()
            .map(|(i, &(started, ended, status, retry_after_s))| {
                let waited_ms = previous_end.map(|end| started - end);
                previous_end = Some(ended);
                OutsideAttempt {
                    n: i as u32 + 1,
                    started_ms: started,
                    ended_ms: Some(ended),
                    status,
                    hung_up: status.is_none(),
                    retry_after_s,
                    waited_ms,
                    timeout_ms: None,
                    previous_attempts: None,
                    unparsed: Default::default(),
                    pushback_ms: None,
                }
            })
            .collect::<Vec<_>>();
        OutsideMessage {
            id,
            caller: "c".into(),
            key: key.into(),
            digest: Some(digest.into()),
            requests: attempts.len() as u64,
            attempts,
        }
    }

    fn checks(messages: &[OutsideMessage]) -> Checks {
        report(messages).remove(0).checks
    }

    /// `count` keys, key i sent first at `first(i)`, each failing with 503 and the `Retry-After`
    /// (seconds) `plan(i)` gives each failure, waiting the ms it gives after it, then through.
    /// Each answer takes 5 ms.
    fn keys(
        count: usize,
        first: impl Fn(usize) -> u64,
        mut plan: impl FnMut(usize) -> Vec<(Option<u64>, u64)>,
    ) -> Vec<OutsideMessage> {
        (0..count)
            .map(|i| {
                let mut t = first(i);
                let mut attempts = Vec::new();
                for (retry_after_s, wait) in plan(i) {
                    attempts.push((t, t + 5, Some(503), retry_after_s));
                    t += 5 + wait;
                }
                attempts.push((t, t + 5, Some(200), None));
                message(i as u64 + 1, &format!("k{i}"), &format!("body {i}"), &attempts)
            })
            .collect()
    }

    #[test]
    fn a_client_that_waits_retry_after_exactly_passes_it_shows_no_backoff_to_judge_and_is_told_to_jitter_above_it()
     {
        // Six keys sent 2 ms apart, each told Retry-After: 1 twice, back 1-4 ms after it. Only
        // the header set its waits: whether it backs off on its own cannot be told.
        let messages = keys(6, |i| 2 * i as u64, |i| vec![(Some(1), 1_001 + i as u64 % 4); 2]);
        let checks = checks(&messages);
        assert_eq!(checks.retry_after.verdict, Verdict::Pass, "{:?}", checks.retry_after);
        assert_eq!(checks.backoff.verdict, Verdict::NotJudged, "{:?}", checks.backoff);
        assert!(
            checks.backoff.evidence.contains("past the header its own part"),
            "{}",
            checks.backoff.evidence
        );
        assert_eq!(checks.jitter.verdict, Verdict::Warn, "{:?}", checks.jitter);
        assert!(
            checks.jitter.evidence.starts_with("waits exactly the Retry-After: no jitter above the header"),
            "{}",
            checks.jitter.evidence
        );
        assert!(checks.jitter.evidence.contains("6 keys (k0, "), "{}", checks.jitter.evidence);
        let advice = checks.jitter.advice.unwrap();
        assert!(advice.contains("random part") && advice.contains("on top of it"), "{advice}");
        assert_eq!(checks.key_reused.verdict, Verdict::Pass);
        assert_eq!(checks.attempts_capped.verdict, Verdict::Pass);
        assert_eq!(checks.no_retry_on_4xx.verdict, Verdict::NotSeen);
        assert_eq!(checks.timeouts.verdict, Verdict::NotSeen);
    }

    /// urllib3's `Retry(backoff_factor=0.5)` with no `backoff_jitter`: the first retry at once,
    /// then 1 s, 2 s after failures without a header; a `Retry-After` waited exactly. Its
    /// immediate retries and its 1 s ones are never compared as one group: each is a group of
    /// waits alike, so it has no jitter (a fail, not a warn), and its backoff grows. Named
    /// `python-requests`, it still gets urllib3's advice, by its timing.
    #[test]
    fn a_urllib3_shaped_schedule_is_judged_retry_by_retry_and_advised_as_urllib3_whatever_its_name() {
        let bare = keys(
            8,
            |i| i as u64,
            |i| {
                let noise = i as u64 % 3;
                vec![(None, 1 + noise), (None, 1_000 + noise), (None, 2_000 + noise)]
            },
        );
        let headed = keys(8, |i| 20_000 + i as u64, |i| vec![(Some(1), 1_000 + i as u64 % 3); 2]);
        let messages: Vec<OutsideMessage> = bare
            .into_iter()
            .chain(headed.into_iter().map(|m| OutsideMessage {
                id: m.id + 100,
                key: format!("h{}", m.key),
                ..m
            }))
            .map(|m| OutsideMessage { caller: "python-requests/2.32.3".into(), ..m })
            .collect();
        let checks = checks(&messages);
        assert_eq!(checks.backoff.verdict, Verdict::Pass, "{:?}", checks.backoff);
        assert!(
            checks.backoff.evidence.starts_with("after failures without Retry-After"),
            "{:?}",
            checks.backoff
        );
        assert_eq!(checks.jitter.verdict, Verdict::Fail, "{:?}", checks.jitter);
        assert!(
            checks.jitter.evidence.contains("before retry 1 without Retry-After, 8 keys"),
            "{}",
            checks.jitter.evidence
        );
        assert!(
            !checks.jitter.evidence.contains("waited 1 to 100"),
            "never one group: {}",
            checks.jitter.evidence
        );
        assert!(
            checks.jitter.evidence.contains("; and waits exactly the Retry-After (2 times)"),
            "{}",
            checks.jitter.evidence
        );
        let advice = checks.jitter.advice.unwrap();
        assert!(
            advice.contains("urllib3's Retry") && advice.contains("backoff_factor about 0.50"),
            "{advice}"
        );
        assert!(advice.contains("backoff_jitter"), "{advice}");
        assert!(advice.contains("2 ms before retry 1 (1 to 3)"), "the timing is said: {advice}");
    }

    /// tenacity's `wait_random_exponential(multiplier=1)`: each wait uniform from 0 to 1 s, 2 s,
    /// 4 s. One key's later wait is often the shorter; pooled over the keys, the range grows.
    #[test]
    fn full_jitter_backoff_passes_as_a_growing_range_over_the_keys() {
        use rand::rngs::StdRng;
        use rand::{RngExt, SeedableRng};
        let mut rng = StdRng::seed_from_u64(56);
        let mut shorter_later = 0;
        for trial in 0..200 {
            let messages = keys(
                10,
                |i| i as u64,
                |_| (0..3).map(|k| (None, rng.random_range(0..=1_000 << k))).collect(),
            );
            shorter_later +=
                messages.iter().filter(|m| m.attempts[2].waited_ms < m.attempts[1].waited_ms).count();
            let checks = checks(&messages);
            assert_eq!(checks.backoff.verdict, Verdict::Pass, "trial {trial}: {:?}", checks.backoff);
            assert_eq!(checks.jitter.verdict, Verdict::Pass, "trial {trial}: {:?}", checks.jitter);
        }
        assert!(shorter_later > 200 * 10 / 8, "one key's draws would have said no: {shorter_later}");
    }

    /// A client that waits 0 ms after `Retry-After: 0`, its retries spread up to 40 ms by its
    /// scheduler while its first sends came out within 5 ms: no jitter is credited.
    #[test]
    fn zero_waits_after_retry_after_zero_are_not_credited_with_jitter_from_scheduling_noise() {
        for spread in [0u64, 15, 40] {
            let messages = keys(8, |i| i as u64 % 6, |i| vec![(Some(0), spread * i as u64 / 7); 2]);
            let checks = checks(&messages);
            assert_ne!(checks.jitter.verdict, Verdict::Pass, "spread {spread}: {:?}", checks.jitter);
            assert_eq!(checks.jitter.verdict, Verdict::Warn, "spread {spread}: {:?}", checks.jitter);
            assert!(checks.jitter.evidence.starts_with("waits exactly"), "{}", checks.jitter.evidence);
        }
    }

    /// No jitter of its own, and a process that delays every send (the first ones too) by up to
    /// 300 ms at random: the waits spread as far as its first sends, and that is not jitter.
    #[test]
    fn a_client_whose_process_delays_every_send_is_not_credited_with_jitter() {
        use rand::rngs::StdRng;
        use rand::{RngExt, SeedableRng};
        let mut rng = StdRng::seed_from_u64(7);
        let mut said = std::collections::BTreeMap::new();
        for trial in 0..500 {
            let firsts: Vec<u64> = (0..10).map(|_| rng.random_range(0..=300)).collect();
            let messages = keys(
                10,
                |i| firsts[i],
                |_| (0..2).map(|_| (Some(1), 1_000 + rng.random_range(0..=300))).collect(),
            );
            let checks = checks(&messages);
            assert_ne!(checks.jitter.verdict, Verdict::Pass, "trial {trial}: {:?}", checks.jitter);
            *said.entry(format!("{:?}", checks.jitter.verdict)).or_insert(0) += 1;
        }
        assert!(said.get("Warn").is_some_and(|&n| n > 400), "mostly named as waiting the header: {said:?}");
        assert_eq!(said.keys().filter(|k| *k != "Warn" && *k != "NotJudged").count(), 0, "{said:?}");
    }

    /// Full jitter above the header (up to 1 s past it) from a process whose first sends spread
    /// 400 ms: the spread cannot be told from the process's, and it is not "waits exactly" either.
    #[test]
    fn jitter_above_the_header_on_a_noisy_process_is_not_judged_and_not_called_exact() {
        let draws = [10, 930, 410, 620, 75, 880, 300, 990];
        let messages = keys(
            8,
            |i| i as u64 * 57,
            |i| vec![(Some(1), 1_000 + draws[i]), (Some(1), 1_000 + draws[7 - i])],
        );
        let checks = checks(&messages);
        assert_eq!(checks.jitter.verdict, Verdict::NotJudged, "{:?}", checks.jitter);
        assert!(checks.jitter.evidence.contains("a spread of 980 ms"), "{}", checks.jitter.evidence);
    }

    /// Three keys alike: too few to tell jitter from chance; said so, with the count.
    #[test]
    fn groups_too_small_to_decide_are_not_judged_and_say_their_count() {
        let messages = keys(
            3,
            |i| i as u64,
            |i| vec![(Some(1), 1_000 + 300 * i as u64), (Some(1), 1_500 + 400 * i as u64)],
        );
        let checks = checks(&messages);
        assert_eq!(checks.jitter.verdict, Verdict::NotJudged, "{:?}", checks.jitter);
        assert!(
            checks.jitter.evidence.contains("3 before retry 1 after Retry-After: 1"),
            "{}",
            checks.jitter.evidence
        );
        assert!(checks.jitter.evidence.contains("it takes 5"), "{}", checks.jitter.evidence);
        assert_eq!(checks.backoff.verdict, Verdict::NotJudged, "{:?}", checks.backoff);
        assert!(
            checks.backoff.evidence.starts_with("could not judge: 3 waits before a second retry"),
            "{}",
            checks.backoff.evidence
        );
        assert!(checks.jitter.advice.unwrap().contains("side by side"));
        // One key, no second failure: nothing seen.
        let checks = self::checks(&keys(1, |_| 0, |_| vec![(Some(1), 1_000)]));
        assert_eq!(checks.backoff.verdict, Verdict::NotSeen, "{:?}", checks.backoff);
    }

    /// Waits that grow only with the server's `Retry-After` are no evidence of a backoff of the
    /// client's own, even when the header grows: not judged, never passed.
    #[test]
    fn waits_that_grow_only_with_the_servers_retry_after_are_no_backoff() {
        let checks = checks(&keys(
            5,
            |i| i as u64,
            |i| vec![(Some(1), 1_002 + i as u64), (Some(2), 2_003 + i as u64)],
        ));
        assert_eq!(checks.backoff.verdict, Verdict::NotJudged, "{:?}", checks.backoff);
        assert!(
            checks
                .backoff
                .evidence
                .contains("before retry 1 5 keys waited 2 to 6 ms, before retry 2 5 keys 3 to 7 ms"),
            "{}",
            checks.backoff.evidence
        );
        // Waited past it, and more each time: that is a backoff.
        let checks = self::checks(&keys(
            5,
            |i| i as u64,
            |i| vec![(Some(1), 1_100 + i as u64), (Some(1), 1_400 + i as u64)],
        ));
        assert_eq!(checks.backoff.verdict, Verdict::Pass, "{:?}", checks.backoff);
    }

    /// The page's snippets wait `Retry-After` and then their backoff with its jitter (tenacity:
    /// 0.5 s doubling plus up to 0.25 s; Node and Go: 500 ms doubling, a quarter of it random).
    /// Eight copies run side by side, as the suite grades them, pass "backs off" whatever the
    /// draws, and are said to come back at one instant in at most 0.2 % of runs (none of these
    /// 2,000). Before the share of "no jitter" was taken past the header, tenacity's five copies
    /// were said so in 78 of 2,000 runs and eight in 7 (the header's second made 2 % of the
    /// median as wide as a quarter of its 250 ms jitter); five copies now in 33.
    #[test]
    fn the_snippets_backoff_on_top_of_retry_after_passes_whatever_its_jitter_draws() {
        use rand::SeedableRng;
        use rand::rngs::StdRng;
        use rand::{Rng, RngExt};
        const COPIES: usize = 8;
        const TRIALS: u32 = 2_000;
        let tenacity = |k: u32, rng: &mut StdRng| 500 * 2u64.pow(k) + rng.random_range(0..=250);
        let quarter = |k: u32, rng: &mut StdRng| {
            let backoff = 500 * 2u64.pow(k);
            backoff * 3 / 4 + rng.random_range(0..=backoff / 4)
        };
        let mut rng = StdRng::seed_from_u64(31);
        for (name, own) in
            [("tenacity", &tenacity as &dyn Fn(u32, &mut StdRng) -> u64), ("node/go", &quarter)]
        {
            let mut together = 0;
            for trial in 0..TRIALS {
                let count = 2 + rng.next_u32() as usize % 3;
                let firsts: Vec<u64> = (0..COPIES).map(|_| rng.random_range(0..=200)).collect();
                let checks = checks(&keys(
                    COPIES,
                    |i| firsts[i],
                    |_| (0..count as u32).map(|k| (Some(1), 1_000 + own(k, &mut rng))).collect(),
                ));
                assert_eq!(
                    checks.backoff.verdict,
                    Verdict::Pass,
                    "{name}, trial {trial}: {:?}",
                    checks.backoff
                );
                together += u32::from(checks.jitter.verdict == Verdict::Fail);
            }
            assert!(together * 500 <= TRIALS, "{name}: jitter failed in {together} of {TRIALS} runs");
        }
    }

    #[test]
    fn growing_jittered_waits_pass_and_too_many_attempts_fail() {
        let messages = keys(
            5,
            |i| i as u64,
            |i| {
                let i = i as u64;
                vec![(None, 100 + 20 * i), (None, 220 + 60 * i)]
            },
        );
        let checks = checks(&messages);
        assert_eq!(checks.backoff.verdict, Verdict::Pass, "{:?}", checks.backoff);
        assert_eq!(checks.jitter.verdict, Verdict::Pass, "{:?}", checks.jitter);
        let f = Some(503);
        let many: Vec<_> = (0..11).map(|i| (i * 100, i * 100 + 5, f, None)).collect();
        let checks = super::report(&[message(1, "z", "z", &many)]).remove(0).checks;
        assert_eq!(checks.attempts_capped.verdict, Verdict::Fail);
        assert!(
            checks.attempts_capped.evidence.contains("11 requests"),
            "{}",
            checks.attempts_capped.evidence
        );
    }

    #[test]
    fn early_returns_new_keys_4xx_retries_and_hang_ups_are_named() {
        let messages = [
            message(1, "a", "same", &[(0, 10, Some(429), Some(2)), (60, 70, Some(429), Some(2))]),
            message(2, "b", "same", &[(1_000, 1_100, None, None)]),
            message(3, "c", "other", &[(2_000, 2_001, Some(415), None), (2_100, 2_101, Some(415), None)]),
        ];
        let checks = checks(&messages);
        assert_eq!(checks.retry_after.verdict, Verdict::Fail);
        assert!(
            checks.retry_after.evidence.contains("key a (and 1 new key after it) came back 50 ms"),
            "{}",
            checks.retry_after.evidence
        );
        assert_eq!(checks.key_reused.verdict, Verdict::Fail);
        assert!(checks.key_reused.evidence.contains("under key b"), "{}", checks.key_reused.evidence);
        assert_eq!(checks.no_retry_on_4xx.verdict, Verdict::Fail);
        assert!(
            checks.no_retry_on_4xx.evidence.contains("key c got 415"),
            "{}",
            checks.no_retry_on_4xx.evidence
        );
        assert_eq!(checks.timeouts.verdict, Verdict::Pass);
        assert!(checks.timeouts.evidence.contains("100 ms"), "{}", checks.timeouts.evidence);
    }

    #[test]
    fn a_loop_making_a_key_per_try_is_judged_as_one_request_retried() {
        // A new key every 100 ms, each answered 503 with Retry-After: 1, the same body.
        let keys: Vec<String> = (0..12).map(|i| format!("k{i}")).collect();
        let messages: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, key)| {
                let t = i as u64 * 100;
                message(i as u64 + 1, key, "same", &[(t, t + 2, Some(503), Some(1))])
            })
            .collect();
        let checks = checks(&messages);
        assert_eq!(checks.retry_after.verdict, Verdict::Fail, "{:?}", checks.retry_after);
        assert!(
            checks.retry_after.evidence.contains("98 ms after a Retry-After"),
            "{:?}",
            checks.retry_after
        );
        assert_eq!(checks.attempts_capped.verdict, Verdict::Fail, "{:?}", checks.attempts_capped);
        assert!(checks.attempts_capped.evidence.contains("12 requests"), "{:?}", checks.attempts_capped);
        assert_eq!(checks.key_reused.verdict, Verdict::Fail);
        assert!(checks.attempts_capped.advice.as_deref().is_some_and(|a| a.contains("new keys count")));
    }

    #[test]
    fn the_same_body_again_after_a_key_got_through_is_a_new_request() {
        // A script run twice: the first run retried through an outage and got through.
        let down = Some(503);
        let messages = [
            message(1, "run1", "same", &[(0, 5, down, Some(1)), (1_005, 1_010, Some(200), None)]),
            message(2, "run2", "same", &[(6_000, 6_005, Some(200), None)]),
        ];
        let checks = checks(&messages);
        assert_eq!(checks.key_reused.verdict, Verdict::Pass, "{:?}", checks.key_reused);
        assert_eq!(checks.key_reused.advice, None);
        assert_eq!(checks.attempts_capped.verdict, Verdict::Pass);
        // Two orders alike, one after the other: the first was taken (it hung up on a slow
        // answer, and its retry was told 409 with Retry-After: 1, its first request still being
        // worked), and the second came 2 ms after that answer. Two orders, not a retry.
        for taken in [Some(409), Some(200)] {
            let messages = [
                message(1, "order-1", "same", &[(0, 2_000, None, None), (2_100, 2_105, taken, Some(1))]),
                message(2, "order-2", "same", &[(2_107, 2_300, Some(503), Some(1))]),
            ];
            let card = self::checks(&messages);
            assert_eq!(card.key_reused.verdict, Verdict::Pass, "{taken:?}: {:?}", card.key_reused);
            assert_ne!(card.retry_after.verdict, Verdict::Fail, "{taken:?}: {:?}", card.retry_after);
        }
        // Its retry refused before any work (a 503), then the body under a new key: a retry.
        let messages = [
            message(1, "order-1", "same", &[(0, 2_000, None, None), (2_100, 2_105, Some(503), Some(1))]),
            message(2, "order-2", "same", &[(2_107, 2_300, Some(200), None)]),
        ];
        assert_eq!(self::checks(&messages).key_reused.verdict, Verdict::Fail);
    }

    /// `message` with each attempt's `X-Request-Timeout-Ms`, `X-Previous-Attempts` and the
    /// pushback its answer carried set by `hints` (in order; missing ones left as they are).
    fn spoke(
        mut message: OutsideMessage,
        hints: &[(Option<u32>, Option<u32>, Option<i32>)],
    ) -> OutsideMessage {
        for (attempt, &(timeout_ms, previous_attempts, pushback_ms)) in message.attempts.iter_mut().zip(hints)
        {
            attempt.timeout_ms = timeout_ms;
            attempt.previous_attempts = previous_attempts;
            attempt.pushback_ms = pushback_ms;
        }
        message
    }

    #[test]
    fn a_deadline_sent_and_kept_passes_and_one_hung_up_well_before_fails() {
        let f = Some(503);
        // Said 400 ms on each; the second hung up 380 ms after it arrived (within 100 ms).
        let kept = spoke(
            message(1, "a", "1", &[(0, 5, f, None), (105, 485, None, None), (600, 640, Some(200), None)]),
            &[(Some(400), None, None); 3],
        );
        let card = checks(std::slice::from_ref(&kept));
        assert_eq!(card.deadline_sent.verdict, Verdict::Pass, "{:?}", card.deadline_sent);
        assert!(
            card.deadline_sent
                .evidence
                .contains("all 3 requests sent a deadline (400 ms); it hung up once, at the"),
            "{}",
            card.deadline_sent.evidence
        );
        assert_eq!(card.deadline_sent.advice, None);
        // Said 3,000 ms, hung up after 200: the endpoint would keep working for a caller gone.
        let early = spoke(message(1, "b", "2", &[(0, 200, None, None)]), &[(Some(3_000), None, None)]);
        let card = checks(&[early]);
        assert_eq!(card.deadline_sent.verdict, Verdict::Fail, "{:?}", card.deadline_sent);
        assert!(
            card.deadline_sent
                .evidence
                .contains("key b's request 1 (at 0.000 s) hung up after 200 ms, having said 3000 ms"),
            "{}",
            card.deadline_sent.evidence
        );
        assert!(card.deadline_sent.advice.is_some());
        // Said 100 ms and waited 900 for its answer: longer than it said, past the slack.
        let late = spoke(message(1, "c", "3", &[(0, 900, Some(200), None)]), &[(Some(100), None, None)]);
        let card = checks(&[late]);
        assert_eq!(card.deadline_sent.verdict, Verdict::Warn, "{:?}", card.deadline_sent);
        assert!(
            card.deadline_sent.evidence.contains("waited for its answer 900 ms"),
            "{:?}",
            card.deadline_sent
        );
    }

    #[test]
    fn a_deadline_not_sent_or_not_parsed_is_said_and_never_passes() {
        let none = message(1, "a", "1", &[(0, 5, Some(200), None)]);
        let card = checks(std::slice::from_ref(&none));
        assert_eq!(card.deadline_sent.verdict, Verdict::Warn, "{:?}", card.deadline_sent);
        assert!(card.deadline_sent.evidence.contains("none of its 1 requests"), "{:?}", card.deadline_sent);
        let curl = report(&[OutsideMessage { caller: "curl/8.5.0".into(), ..none }]).remove(0);
        let advice = curl.checks.deadline_sent.advice.unwrap();
        assert!(advice.contains("--max-time"), "{advice}");
        // Sent on the first, not on the retry.
        let some = spoke(
            message(1, "b", "2", &[(0, 5, Some(503), None), (50, 55, Some(200), None)]),
            &[(Some(1_000), None, None)],
        );
        let card = checks(&[some]);
        assert_eq!(card.deadline_sent.verdict, Verdict::Warn, "{:?}", card.deadline_sent);
        assert!(
            card.deadline_sent
                .evidence
                .contains("1 of 2 requests sent a deadline (1000 ms); not: key b's request 2")
        );
        let mut garbled = message(1, "c", "3", &[(0, 5, Some(200), None)]);
        garbled.attempts[0].unparsed.timeout = true;
        let card = checks(&[garbled]);
        assert_eq!(card.deadline_sent.verdict, Verdict::Fail, "{:?}", card.deadline_sent);
        assert!(card.deadline_sent.evidence.contains("did not parse"), "{:?}", card.deadline_sent);
        // A key none of whose requests was kept: nothing to judge.
        let card = checks(&[message(1, "d", "4", &[])]);
        assert_eq!(card.deadline_sent.verdict, Verdict::NotSeen, "{:?}", card.deadline_sent);
    }

    #[test]
    fn attempts_numbered_by_the_requests_before_with_the_key_pass_and_a_wrong_count_fails() {
        let f = Some(503);
        let three = &[(0, 5, f, None), (100, 105, f, None), (300, 305, Some(200), None)];
        // gRPC's way: nothing on the first, then 1 and 2.
        let right = spoke(
            message(1, "a", "1", three),
            &[(None, None, None), (None, Some(1), None), (None, Some(2), None)],
        );
        let card = checks(&[right]);
        assert_eq!(card.attempts_numbered.verdict, Verdict::Pass, "{:?}", card.attempts_numbered);
        assert!(
            card.attempts_numbered.evidence.starts_with("2 retries numbered right"),
            "{:?}",
            card.attempts_numbered
        );
        // The same number on every try, as curl --retry sends one header again.
        let fixed = spoke(message(1, "b", "2", three), &[(None, Some(0), None); 3]);
        let card = report(&[OutsideMessage { caller: "curl/8".into(), ..fixed }]).remove(0).checks;
        assert_eq!(card.attempts_numbered.verdict, Verdict::Fail, "{:?}", card.attempts_numbered);
        assert!(
            card.attempts_numbered
                .evidence
                .contains("key b's request 2 (at 0.100 s) said 0, after 1 requests with that key"),
            "{}",
            card.attempts_numbered.evidence
        );
        assert!(card.attempts_numbered.advice.unwrap().contains("shell loop"));
        // Retries that say nothing are not marked: a warning, with the keys.
        let card = checks(&[message(1, "c", "3", three)]);
        assert_eq!(card.attempts_numbered.verdict, Verdict::Warn, "{:?}", card.attempts_numbered);
        assert!(
            card.attempts_numbered.evidence.contains("none of its 2 retries"),
            "{:?}",
            card.attempts_numbered
        );
        // Only first requests: there is no retry's number to judge.
        let card =
            checks(&[spoke(message(1, "d", "4", &[(0, 5, Some(200), None)]), &[(None, Some(0), None)])]);
        assert_eq!(card.attempts_numbered.verdict, Verdict::NotSeen, "{:?}", card.attempts_numbered);
        assert!(card.attempts_numbered.advice.is_some());
    }

    #[test]
    fn a_pushback_not_to_retry_is_honoured_only_when_the_key_stops() {
        let shed = Some(503);
        let told = (None, None, Some(-1));
        let stopped = spoke(
            message(1, "a", "1", &[(0, 5, shed, Some(1)), (1_100, 1_105, shed, Some(1))]),
            &[(None, None, None), told],
        );
        let card = checks(&[stopped]);
        assert_eq!(card.pushback_honoured.verdict, Verdict::Pass, "{:?}", card.pushback_honoured);
        assert!(
            card.pushback_honoured
                .evidence
                .contains("key a was told -1 ms at 1.105 s and was not sent again")
        );
        // Came again after it, under its key.
        let again = spoke(
            message(1, "b", "2", &[(0, 5, shed, Some(1)), (10, 15, shed, Some(1))]),
            &[told, (None, None, None)],
        );
        let card = checks(&[again]);
        assert_eq!(card.pushback_honoured.verdict, Verdict::Fail, "{:?}", card.pushback_honoured);
        assert!(
            card.pushback_honoured
                .evidence
                .contains("key b was told -1 ms at 0.005 s (do not retry) and came again at 0.010 s"),
            "{}",
            card.pushback_honoured.evidence
        );
        // Came again past the bound on attempts kept: its requests say so.
        let mut unkept = spoke(message(1, "c", "3", &[(0, 5, shed, Some(1))]), &[told]);
        unkept.requests = 3;
        assert_eq!(checks(&[unkept]).pushback_honoured.verdict, Verdict::Fail);
        // Came again under a new key with the same body: still a retry.
        let first = spoke(message(1, "d", "same", &[(0, 5, shed, Some(1))]), &[told]);
        let renamed = message(2, "e", "same", &[(40, 45, Some(200), None)]);
        let card = checks(&[first, renamed]);
        assert_eq!(card.pushback_honoured.verdict, Verdict::Fail, "{:?}", card.pushback_honoured);
        assert!(
            card.pushback_honoured.evidence.contains("key d (and 1 new key after it)"),
            "{:?}",
            card.pushback_honoured
        );
        // No pushback sent: nothing to judge, said so.
        let card = checks(&[message(1, "f", "4", &[(0, 5, shed, Some(1)), (1_010, 1_015, Some(200), None)])]);
        assert_eq!(card.pushback_honoured.verdict, Verdict::NotSeen, "{:?}", card.pushback_honoured);
        assert!(card.pushback_honoured.advice.unwrap().contains("pushback defence"));
    }

    /// gRFC A6: a pushback of 0 ms or more asks for a retry after exactly that wait.
    #[test]
    fn a_pushback_naming_a_wait_is_honoured_when_the_key_waits_it() {
        let shed = Some(503);
        let wait = (None, None, Some(500));
        let waited = spoke(message(1, "a", "1", &[(0, 5, shed, None), (510, 515, Some(200), None)]), &[wait]);
        assert_eq!(checks(&[waited]).pushback_honoured.verdict, Verdict::Pass);
        let soon = spoke(message(1, "b", "2", &[(0, 5, shed, None), (105, 110, Some(200), None)]), &[wait]);
        let card = checks(&[soon]);
        assert_eq!(card.pushback_honoured.verdict, Verdict::Fail, "{:?}", card.pushback_honoured);
        assert!(
            card.pushback_honoured
                .evidence
                .contains("key b was told 500 ms at 0.005 s and came back after 100 ms")
        );
    }
}

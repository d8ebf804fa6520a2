//! A metastable failure, for real (Bronson et al., HotOS 2021): an open system (steady
//! traffic at about 70 % of the endpoint's capacity), a queue in front of the endpoint, and a
//! client timeout shorter than a full queue takes to drain. A short latency spike tips it
//! into a state that outlasts the spike: the queue stays full of work for clients that gave
//! up, fed by their retries, and goodput stays near zero while new messages keep arriving.
//! Without the spike the same set-up stays healthy; a retry budget, turned on while it is
//! stuck, ends it. A circuit breaker alone does not: it opens, the queue drains and its probe
//! succeeds, but the messages it refused were only waiting out their backoff, and when it
//! closes they come back with the new ones, more than the endpoint can do, and it opens again.
//! The same breaker ends it when a refused attempt ends the message's round (`refused:
//! give_up`, failing fast to the caller): nothing waits to herd back in when it closes, and
//! goodput returns (a later burst can open it again; it ends that spell the same way).

use std::time::{Duration, Instant};

use serde_json::Value;

use retrylab::claims::{ClaimId, Run, Scope, Verdict};

use crate::helpers::{OPEN_SYSTEM_RUNS, TestApp, counter};

/// Eight workers of 200 ms: 40 requests/s. A queue of 40: a full queue takes 1 s to drain,
/// twice the client's 500 ms timeout. Healthy waits are a few tens of ms: the margin to the
/// timeout is wide, so a busy machine's hiccups do not tip the control over, and the rates
/// are low enough that the machine's load is not what is measured.
pub const DOWNSTREAM: &str =
    r#"{"mode": "overloaded", "capacity": 8, "queue": 40, "latency_ms": [200, 200], "retry_after_s": 0}"#;
/// The naive client: no jitter, five attempts, a 500 ms timeout, and waits (800 ms, doubling)
/// long enough that a retry comes after its first attempt's work has left the queue (the
/// endpoint answers a key still in line 409 at once): each retry is a new request in line.
pub const NAIVE: &str = r#"{"jitter": "none", "base_ms": 800, "cap_ms": 3200, "multiplier": 2, "max_attempts": 5, "timeout_ms": 500, "honor_retry_after": false, "breaker": null, "retry_budget": null, "seed": 19}"#;
/// 70 % of capacity.
pub const TRAFFIC: &str = r#"{"rate_per_s": 28, "arrivals": "poisson"}"#;
/// The trigger: the work takes five times as long for 2 s.
pub const SPIKE: &str = r#"{"latency_ms": [1000, 1000], "for_ms": 2000}"#;
pub const SETTLE_MS: u64 = 2_000;

async fn set_up(app: &TestApp) -> String {
    let lab = app.new_lab().await;
    app.put(&lab, "downstream", DOWNSTREAM).await;
    app.put(&lab, "policy", NAIVE).await;
    app.put(&lab, "traffic", TRAFFIC).await;
    lab
}

/// Offered load and goodput (messages created and delivered) in `[from, to)` ms of lab time.
pub fn window(snapshot: &Value, from: u64, to: u64) -> (u64, u64) {
    let bins = snapshot["load"]["bins"].as_array().unwrap();
    let inside = bins.iter().filter(|b| (from..to).contains(&b["t_ms"].as_u64().unwrap()));
    inside
        .fold((0, 0), |(o, d), b| (o + b["offered"].as_u64().unwrap(), d + b["delivered"].as_u64().unwrap()))
}

pub fn marker_at(snapshot: &Value, label: &str) -> u64 {
    let markers = snapshot["markers"].as_array().unwrap();
    let found = markers.iter().rev().find(|m| m["label"].as_str().is_some_and(|l| l.starts_with(label)));
    found.unwrap_or_else(|| panic!("no marker '{label}': {markers:?}"))["at_ms"].as_u64().unwrap()
}

/// Goodput per second over `[from, to)`, as (offered, delivered) pairs, for the failure message.
pub fn seconds(snapshot: &Value, from: u64, to: u64) -> Vec<(u64, u64)> {
    (from..to).step_by(1_000).map(|t| window(snapshot, t, (t + 1_000).min(to))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metastable_control_without_the_trigger_stays_healthy() {
    let _turn = OPEN_SYSTEM_RUNS.lock().await;
    let app = TestApp::spawn().await;
    let lab = set_up(&app).await;
    tokio::time::sleep(Duration::from_millis(SETTLE_MS + 2_000 + 6_000)).await;
    let snapshot = app.snapshot(&lab).await;
    let start = marker_at(&snapshot, "traffic:");
    let now = snapshot["now_ms"].as_u64().unwrap();
    // Healthy means the endpoint keeps up: the messages offered and not yet delivered never
    // pile up. Poisson arrivals at 28 a second bring a second of 35 now and then, which the
    // queue takes and the workers clear in the next second, so two-second windows of offered
    // against delivered can differ by a fifth (one loaded run: 55 against 45) while nothing
    // is stuck. What is left over at the end of each second stays under half the queue (40);
    // stuck, it grows by the offered load every second.
    let whole = (now - 1_000 - start) / 1_000 * 1_000;
    let per_second = seconds(&snapshot, start, start + whole);
    let (mut offered, mut delivered, mut most_behind) = (0, 0, 0);
    for &(o, d) in &per_second {
        assert!(o >= 15, "traffic arrived: {o} in a second; per second {per_second:?}");
        (offered, delivered) = (offered + o, delivered + d);
        most_behind = most_behind.max(offered.saturating_sub(delivered));
    }
    println!("per second {per_second:?}: at most {most_behind} behind");
    assert!(per_second.len() >= 7, "{per_second:?}");
    assert!(most_behind <= 20, "the endpoint fell {most_behind} messages behind; per second {per_second:?}");
    assert!(delivered as f64 >= offered as f64 * 0.9, "delivered {delivered} of {offered}: {per_second:?}");
    assert_eq!(counter(&snapshot, "applied_twice"), 0);
}

/// The lab's snapshot once its clock has passed `t` ms, and its trigger has ended. It sleeps
/// rather than polls: a snapshot of hundreds of messages taken every few ms would be load on
/// the two cores the set-up is measured on.
pub async fn at_lab_ms(app: &TestApp, lab: &str, t: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let snapshot = app.snapshot(lab).await;
        let now = snapshot["now_ms"].as_u64().unwrap();
        if now >= t && snapshot["downstream"]["revert"].is_null() {
            return snapshot;
        }
        assert!(Instant::now() < deadline, "lab time {now} ms never reached {t} ms");
        tokio::time::sleep(Duration::from_millis(t.saturating_sub(now).clamp(100, 1_000))).await;
    }
}

/// Runs the trigger and holds on until 11 s after it ended; returns the lab and when it ended.
pub async fn stuck(app: &TestApp) -> (String, u64) {
    let lab = set_up(app).await;
    tokio::time::sleep(Duration::from_millis(SETTLE_MS)).await;
    app.put(&lab, "downstream", SPIKE).await;
    let ended = at_lab_ms(app, &lab, SETTLE_MS + 2_000).await;
    let ended_ms = marker_at(&ended, "back to");
    let snapshot = at_lab_ms(app, &lab, ended_ms + 11_000).await;
    // Healthy before it: eight in ten of the new messages delivered in the seconds before the
    // trigger (the claim the page shows first with the preset, goodput_follows_offered).
    let run = Run::from_snapshot(&snapshot.to_string()).unwrap();
    let judged = &run.judge(&[ClaimId::GoodputFollowsOffered], &Scope::default())[0];
    assert_eq!(judged.verdict, Verdict::Holds, "healthy before the trigger: {}", judged.said);
    // From half a second after the trigger ended, for ten seconds: every second's goodput
    // below half of what was offered in it, while traffic kept arriving; judged by the claim the
    // page shows with the metastable preset (retrylab::claims, goodput_stays_down).
    let after = seconds(&snapshot, ended_ms + 500, ended_ms + 10_500);
    println!("after the trigger, per second: {after:?}");
    let judged = &run.judge(&[ClaimId::GoodputStaysDown], &Scope::default())[0];
    assert_eq!(judged.verdict, Verdict::Holds, "{}; per second {after:?}", judged.said);
    (lab, ended_ms)
}

/// Puts `fix` to the lab's `what` (its `policy`, or its `downstream`) while stuck; goodput must
/// be back within a few seconds (a 3 s window starting at most 6 s after the fix holds 90 % of
/// what was offered in it, and at least 45 offered) and stay back 9 s after, while traffic keeps
/// arriving: the claim goodput_back.
pub async fn fixed_by_putting(app: &TestApp, lab: &str, put: (&str, &str)) -> (Value, u64) {
    back_as_claimed(app, lab, put, ClaimId::GoodputBack, 12_000).await
}

/// Puts `fix` to the lab's `what` while stuck and judges `claim` on the snapshot taken `settle_ms`
/// after it, when the claim has settled: it must hold, and nothing may be applied twice.
async fn back_as_claimed(
    app: &TestApp,
    lab: &str,
    (what, fix): (&str, &str),
    claim: ClaimId,
    settle_ms: u64,
) -> (Value, u64) {
    let at = app.snapshot(lab).await["now_ms"].as_u64().unwrap();
    app.put(lab, what, fix).await;
    let snapshot = at_lab_ms(app, lab, at + settle_ms).await;
    let per_second = seconds(&snapshot, at - 2_000, at + settle_ms);
    println!("around the fix, per second: {per_second:?}");
    // Judged by the claim the page shows with the preset's ending.
    let run = Run::from_snapshot(&snapshot.to_string()).unwrap();
    let scope = Scope { from_ms: Some(at), ..Scope::default() };
    let judged = &run.judge(&[claim], &scope)[0];
    println!("{}", judged.said);
    assert_eq!(judged.verdict, Verdict::Holds, "{}; per second {per_second:?}", judged.said);
    assert_eq!(counter(&snapshot, "applied_twice"), 0);
    (snapshot, at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metastable_a_spike_leaves_it_stuck_and_a_retry_budget_ends_it() {
    let _turn = OPEN_SYSTEM_RUNS.lock().await;
    let app = TestApp::spawn().await;
    let (lab, _) = stuck(&app).await;
    // New messages still arrive at 70 % of capacity, so the queue of work for clients long gone
    // drains at what is left, about 12 a second: about 5 s on a quiet machine, more on a busy
    // one. The preset's sentence says "within ten seconds" (goodput_back_within_10_s).
    back_as_claimed(&app, &lab, ("policy", BUDGET), ClaimId::GoodputBackWithin10S, 16_000).await;
}

/// The breaker both breaker steps turn on: five failures in a row open it, and it stays open
/// 4 s, longer than a full queue takes to drain (1 s) and than the longest wait plus a timeout
/// (3.2 s + 0.5 s), so that when its one probe goes, the queue is empty and every attempt sent
/// before it opened has ended. They differ only in what a message does with a refused attempt.
/// Each fix is one of the preset's steps, and turns the other fix off.
pub const BREAKER_RETRYING: &str = r#"{"breaker": {"failure_threshold": 5, "open_ms": 4000, "half_open_probes": 1, "refused": "retry"}, "retry_budget": null}"#;
pub const BREAKER_GIVING_UP: &str = r#"{"breaker": {"failure_threshold": 5, "open_ms": 4000, "half_open_probes": 1, "refused": "give_up"}, "retry_budget": null}"#;
/// Retries at most a tenth of the first attempts, plus one every 2 s.
pub const BUDGET: &str = r#"{"retry_budget": {"ratio": 0.1, "min_per_s": 0.5}, "breaker": null}"#;
/// The endpoint's capacity: eight workers of 200 ms.
const CAPACITY_PER_S: u64 = 40;

/// The breaker's changes of state from `at` ms on, as (ms after `at`, state).
fn breaker_changes(snapshot: &Value, at: u64) -> Vec<(u64, String)> {
    let changes = snapshot["breaker"]["changes"].as_array().unwrap();
    let after = changes.iter().filter(|c| c["at_ms"].as_u64().unwrap() >= at);
    after.map(|c| (c["at_ms"].as_u64().unwrap() - at, c["state"].as_str().unwrap().to_owned())).collect()
}

/// Requests that reached the endpoint in `[from, to)` ms of lab time.
fn requests(snapshot: &Value, from: u64, to: u64) -> u64 {
    let bins = snapshot["load"]["bins"].as_array().unwrap();
    let inside = bins.iter().filter(|b| (from..to).contains(&b["t_ms"].as_u64().unwrap()));
    inside.map(|b| b["requests"].as_u64().unwrap()).sum()
}

/// The messages whose first attempt the breaker refused in `[from, to)` ms of lab time: the
/// new messages it met while open (on a busy machine a message can arrive while it is open and
/// make its first attempt only after).
fn refused_first(snapshot: &Value, from: u64, to: u64) -> Vec<&Value> {
    let all = crate::helpers::messages(snapshot).iter();
    all.filter(|m| {
        let first = &m["attempts"][0];
        first["outcome"] == "short_circuited" && (from..to).contains(&first["started_ms"].as_u64().unwrap())
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metastable_a_breaker_that_retries_what_it_refused_does_not_end_it() {
    let _turn = OPEN_SYSTEM_RUNS.lock().await;
    let app = TestApp::spawn().await;
    let (lab, _) = stuck(&app).await;
    let at = app.snapshot(&lab).await["now_ms"].as_u64().unwrap();
    app.put(&lab, "policy", BREAKER_RETRYING).await;
    let snapshot = at_lab_ms(&app, &lab, at + 13_000).await;
    let per_second = seconds(&snapshot, at, at + 13_000);
    let changes = breaker_changes(&snapshot, at);
    println!("with the breaker, per second: {per_second:?}; its changes: {changes:?}");
    // It opens at once, and while open for 4 s it refuses every attempt; its probe then
    // succeeds (the queue has drained) and it closes. Each time it opens again within 2 s: the
    // messages it refused were waiting out their backoff, and they come back all together with
    // the new ones, more than the endpoint can do in a second.
    let opened: Vec<u64> = changes.iter().filter(|(_, s)| s == "open").map(|&(t, _)| t).collect();
    let closed: Vec<u64> = changes.iter().filter(|(_, s)| s == "closed").map(|&(t, _)| t).collect();
    assert!(opened.first().is_some_and(|&t| t < 5_000), "it opens: {changes:?}");
    assert!(opened.len() >= 3, "it opens again and again: {changes:?}");
    assert!(!closed.is_empty(), "it closes in between: {changes:?}");
    for pair in changes.windows(2) {
        if let [(open, state), (probe, next)] = pair
            && state == "open"
        {
            // The new messages it met while open: their first attempt refused, and then a
            // wait, to try again.
            let refused = refused_first(&snapshot, at + open, at + probe);
            assert!(refused.len() >= 80, "new messages kept arriving while it was open: {}", refused.len());
            for message in refused {
                assert!(
                    message["attempts"][0]["wait"].is_object(),
                    "refused, then waiting out its backoff: {message}"
                );
            }
            assert_eq!(next, "half_open", "{changes:?}");
            assert!((4_000..4_500).contains(&(probe - open)), "open for its 4 s: {changes:?}");
        }
    }
    // Its probe succeeds (on a busy machine not every time: the queue drains more slowly).
    let probed = changes.windows(2).any(|pair| {
        matches!(pair, [(probe, state), (close, next)]
            if state == "half_open" && next == "closed" && close - probe < 1_000)
    });
    assert!(probed, "its probe succeeds: {changes:?}");
    for &close in closed.iter().filter(|&&t| t + 2_000 <= 13_000) {
        assert!(
            opened.iter().any(|&open| open > close && open <= close + 2_000),
            "it opens again within 2 s of closing at {close} ms: {changes:?}"
        );
        let herd = requests(&snapshot, at + close, at + close + 1_000);
        assert!(
            herd > CAPACITY_PER_S,
            "in the second after it closed at {close} ms, {herd} requests (capacity {CAPACITY_PER_S}): {changes:?}"
        );
        println!("in the second after it closed at {close} ms: {herd} requests");
    }
    // Goodput stays below half of offered load, in every three seconds.
    for from in (0..=10).map(|s| at + s * 1_000) {
        let (offered, delivered) = window(&snapshot, from, from + 3_000);
        assert!(offered >= 45, "traffic kept arriving; per second {per_second:?}");
        assert!(
            delivered * 2 < offered,
            "goodput {delivered} of {offered} from {} s: per second {per_second:?}",
            (from - at) / 1_000
        );
    }
    assert_eq!(counter(&snapshot, "applied_twice"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metastable_a_breaker_that_gives_up_on_what_it_refused_ends_it() {
    let _turn = OPEN_SYSTEM_RUNS.lock().await;
    let app = TestApp::spawn().await;
    let (lab, _) = stuck(&app).await;
    let (snapshot, at) = failing_fast(&app, &lab).await;
    let changes = breaker_changes(&snapshot, at);
    println!("the breaker's changes: {changes:?}");
    // It opens at once, lets its probe through 4 s later and closes. Whether it stays closed is
    // not the step's promise: the client's lockstep retries are as they were, and a burst of
    // arrivals on a busy machine can open it again (it then ends that spell the same way).
    let [(opened, open), (probe, half_open), (closed, close), ..] = &changes[..] else {
        panic!("it opens, goes half-open and closes: {changes:?}")
    };
    assert_eq!((open.as_str(), half_open.as_str(), close.as_str()), ("open", "half_open", "closed"));
    assert!(*opened < 2_000, "it opens at once: {changes:?}");
    assert!((4_000..4_500).contains(&(probe - opened)), "open for its 4 s: {changes:?}");
    assert!(closed - probe < 1_000, "its probe succeeds: {changes:?}");
    // Every new message it met while open was dead-lettered at once, as circuit_open, and no
    // refused attempt anywhere was followed by a wait: nothing comes back when it closes.
    let refused = refused_first(&snapshot, at + opened, at + probe);
    assert!(refused.len() >= 80, "new messages kept arriving while it was open: {}", refused.len());
    let letters = snapshot["dead_letters"].as_array().unwrap();
    for message in &refused {
        let letter = letters.iter().find(|d| d["id"] == message["id"]);
        assert!(
            letter.is_some_and(|d| d["cause"] == "circuit_open" && d["attempts"].as_array().unwrap().len() == 1),
            "a message refused while it was open is dead-lettered on that attempt as circuit_open: {message}; {letter:?}"
        );
    }
    let attempts = crate::helpers::messages(&snapshot).iter().flat_map(|m| m["attempts"].as_array().unwrap());
    let refused_at =
        |a: &&Value| a["outcome"] == "short_circuited" && a["started_ms"].as_u64().unwrap() >= at;
    assert!(attempts.filter(refused_at).all(|a| a["wait"].is_null()), "no refused attempt waits to retry");
    println!("{} new messages met it open, each dead-lettered as circuit_open", refused.len());
}

/// The breaker that fails fast turned on while stuck, judged by the claim its step shows:
/// goodput back on the offered load within 10 s, room for a second open spell (goodput_returns),
/// nothing applied twice.
async fn failing_fast(app: &TestApp, lab: &str) -> (Value, u64) {
    back_as_claimed(app, lab, ("policy", BREAKER_GIVING_UP), ClaimId::GoodputReturns, 14_000).await
}

/// The preset's steps clicked in turn, the last one late: the retrying breaker has been open
/// for 3.5 of its 4 s when the one that fails fast takes over. The breaker it leaves closes,
/// the messages still waiting out their backoff come back and open it once more, as the step
/// says, and what it refuses then is dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metastable_failing_fast_late_in_the_retrying_breakers_open_spell_still_opens_once() {
    let _turn = OPEN_SYSTEM_RUNS.lock().await;
    let app = TestApp::spawn().await;
    let (lab, _) = stuck(&app).await;
    app.put(&lab, "policy", BREAKER_RETRYING).await;
    let start = std::time::Instant::now();
    loop {
        let snapshot = app.snapshot(&lab).await;
        let now = snapshot["now_ms"].as_u64().unwrap();
        let last = snapshot["breaker"]["changes"].as_array().unwrap().last().cloned();
        if let Some(change) = last
            && change["state"] == "open"
            && now >= change["at_ms"].as_u64().unwrap() + 3_500
        {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "the retrying breaker never stayed open 3.5 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (snapshot, at) = failing_fast(&app, &lab).await;
    let changes = breaker_changes(&snapshot, at);
    println!("the breaker's changes after the late click: {changes:?}");
    let opens: Vec<u64> = changes.iter().filter(|(_, state)| state == "open").map(|&(t, _)| t).collect();
    let Some(&opened) = opens.first() else { panic!("it opens after the click: {changes:?}") };
    let after: Vec<&str> =
        changes.iter().filter(|&&(t, _)| t >= opened).map(|(_, s)| s.as_str()).take(3).collect();
    assert_eq!(after, ["open", "half_open", "closed"], "then half-open and closed: {changes:?}");
    let probe = changes.iter().find(|(t, s)| *t > opened && s == "half_open").unwrap().0;
    assert!((4_000..4_500).contains(&(probe - opened)), "open for its 4 s: {changes:?}");
    // Every attempt it refused once the new policy was in (its marker) was the end of its
    // message: dead-lettered on that attempt as circuit_open, with no wait to come back.
    let changed = marker_at(&snapshot, "policy:");
    assert!(changed >= at, "the last policy marker is the click's: {changed} ms, clicked at {at} ms");
    let letters = snapshot["dead_letters"].as_array().unwrap();
    let mut refused = 0;
    for message in crate::helpers::messages(&snapshot) {
        let attempts = message["attempts"].as_array().unwrap();
        let Some(last) = attempts.last() else { continue };
        for a in attempts.iter().filter(|a| a["outcome"] == "short_circuited") {
            if a["started_ms"].as_u64().unwrap() <= changed {
                continue;
            }
            refused += 1;
            assert!(a["wait"].is_null() && a == last, "a refused attempt is its message's last: {message}");
            let letter = letters.iter().find(|d| d["id"] == message["id"]);
            assert!(
                letter.is_some_and(|d| d["cause"] == "circuit_open"),
                "a message refused after the click is a dead letter, circuit_open: {message}; {letter:?}"
            );
        }
    }
    assert!(refused >= 80, "new messages kept arriving while it was open: {refused} refused");
    println!("{refused} attempts refused after the click, each its message's last, dead-lettered");
}

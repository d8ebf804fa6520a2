//! The endpoint's own defences against overload, on the metastable set-up (see
//! `metastable.rs`): the naive client and the spike that leaves the plain endpoint stuck.
//! With the deadline drop, CoDel queue timeouts or adaptive LIFO on, goodput is back within
//! 5 s of the spike's end; without the spike each defence leaves a healthy endpoint alone.
//! Also: a full line sheds a retry before a first attempt when asked to (and with pushback on
//! tells it not to retry, which the lab's client honours), the defences are
//! validated naming their field, and a hint header that does not parse is counted and ignored.

use std::time::Duration;

use reqwest::Method;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{OPEN_SYSTEM_RUNS, TestApp, counter, messages};
use crate::metastable::{
    DOWNSTREAM, NAIVE, SETTLE_MS, SPIKE, TRAFFIC, at_lab_ms, fixed_by_putting, marker_at, seconds, stuck,
    window,
};

const DEADLINE: &str = r#"{"defences": {"deadline": true}}"#;
/// CoDel and adaptive LIFO with their defaults (M = 25 ms, N = 500 ms).
const CODEL: &str = r#"{"defences": {"queue": "codel"}}"#;
const ADAPTIVE_LIFO: &str = r#"{"defences": {"queue": "adaptive_lifo"}}"#;

async fn set_up(app: &TestApp, defence: &str) -> String {
    let lab = app.new_lab().await;
    app.put(&lab, "downstream", DOWNSTREAM).await;
    let set = app.put(&lab, "downstream", defence).await;
    assert_eq!(set["mode"], "overloaded", "{set}");
    app.put(&lab, "policy", NAIVE).await;
    app.put(&lab, "traffic", TRAFFIC).await;
    lab
}

/// A load bin count summed over `[from, to)` ms (absent counts are zero).
fn total(snapshot: &Value, name: &str, from: u64, to: u64) -> u64 {
    let bins = snapshot["load"]["bins"].as_array().unwrap();
    let inside = bins.iter().filter(|b| (from..to).contains(&b["t_ms"].as_u64().unwrap()));
    inside.map(|b| b[name].as_u64().unwrap_or(0)).sum()
}

/// Runs the spike with `defence` on; goodput in the 3 s from 5 s after the spike's end must be
/// at least 80 % of what was offered in them. Returns the snapshot and when the spike ended.
async fn recovers_with(defence: &str) -> (Value, u64) {
    let _turn = OPEN_SYSTEM_RUNS.lock().await;
    let app = TestApp::spawn().await;
    let lab = set_up(&app, defence).await;
    tokio::time::sleep(Duration::from_millis(SETTLE_MS)).await;
    app.put(&lab, "downstream", SPIKE).await;
    let ended = at_lab_ms(&app, &lab, SETTLE_MS + 2_000).await;
    let ended_ms = marker_at(&ended, "back to");
    let snapshot = at_lab_ms(&app, &lab, ended_ms + 8_000).await;
    let per_second = seconds(&snapshot, ended_ms - 2_000, ended_ms + 8_000);
    println!("{defence}: around the spike's end, per second {per_second:?}");
    let (offered, delivered) = window(&snapshot, ended_ms + 5_000, ended_ms + 8_000);
    assert!(offered >= 45, "traffic kept arriving: {offered} in 3 s; per second {per_second:?}");
    assert!(
        delivered as f64 >= offered as f64 * 0.8,
        "{defence}: goodput {delivered} of {offered} offered 5-8 s after the spike; per second {per_second:?}"
    );
    assert_eq!(counter(&snapshot, "applied_twice"), 0);
    (snapshot, ended_ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_drop_ends_the_metastable_failure() {
    let (snapshot, ended_ms) = recovers_with(DEADLINE).await;
    // Through the spike the work (1 s) outlasts every client (500 ms): it is dropped, not done.
    let dropped = total(&snapshot, "dropped_deadline", ended_ms - 2_000, ended_ms);
    assert!(dropped >= 20, "dropped for their deadline during the spike: {dropped}");
    // After it, little of the work done is for clients already gone (stuck without a defence,
    // most of it is). Not none: the client's 500 ms run from its send, the endpoint's from the
    // arrival, and a busy machine can stall a request in between.
    let (from, to) = (ended_ms + 2_000, ended_ms + 8_000);
    let (wasted, ok) = (total(&snapshot, "wasted", from, to), total(&snapshot, "ok", from, to));
    assert!(
        wasted * 10 <= wasted + ok,
        "work done for clients already gone after the spike: {wasted}, ok {ok}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codel_queue_timeouts_end_the_metastable_failure() {
    let (snapshot, ended_ms) = recovers_with(CODEL).await;
    let timed_out = total(&snapshot, "timed_out_in_queue", ended_ms - 2_000, ended_ms + 8_000);
    assert!(timed_out >= 10, "timed out in the queue: {timed_out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_lifo_ends_the_metastable_failure() {
    let (snapshot, ended_ms) = recovers_with(ADAPTIVE_LIFO).await;
    let dropped =
        ["dropped_deadline", "timed_out_in_queue"].map(|n| total(&snapshot, n, 0, ended_ms + 8_000));
    assert_eq!(dropped, [0, 0], "adaptive LIFO alone drops nothing");
}

/// The metastable preset's server-side steps: the naive client kept, a defence turned on while
/// it is stuck ends it as the retry budget does (`metastable::fixed_by_putting`). They also turn the
/// client's fixes off, as each of the preset's steps turns the others off.
pub const DEADLINE_STEP: &str = r#"{"defences": {"deadline": true}}"#;
pub const CODEL_STEP: &str = r#"{"defences": {"queue": "codel"}}"#;

/// Turns `step` on while the lab is stuck; it must end it, counting its drops in `count`.
async fn ends_it_turned_on_while_stuck(step: &str, count: &str) {
    let _turn = OPEN_SYSTEM_RUNS.lock().await;
    let app = TestApp::spawn().await;
    let (lab, _) = stuck(&app).await;
    let (snapshot, at) = fixed_by_putting(&app, &lab, ("downstream", step)).await;
    assert!(total(&snapshot, count, at, at + 12_000) > 0, "{step} dropped nothing ({count})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metastable_a_deadline_drop_turned_on_while_stuck_ends_it() {
    ends_it_turned_on_while_stuck(DEADLINE_STEP, "dropped_deadline").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metastable_codel_turned_on_while_stuck_ends_it() {
    ends_it_turned_on_while_stuck(CODEL_STEP, "timed_out_in_queue").await;
}

/// The metastable control (no spike) with `defence` on: as healthy as without it, and next to
/// nothing dropped.
async fn stays_healthy_with(defence: &str) {
    let _turn = OPEN_SYSTEM_RUNS.lock().await;
    let app = TestApp::spawn().await;
    let lab = set_up(&app, defence).await;
    tokio::time::sleep(Duration::from_millis(SETTLE_MS + 6_000)).await;
    let snapshot = app.snapshot(&lab).await;
    let start = marker_at(&snapshot, "traffic:");
    let now = snapshot["now_ms"].as_u64().unwrap();
    let whole = (now - 1_000 - start) / 1_000 * 1_000;
    let per_second = seconds(&snapshot, start, start + whole);
    let (offered, delivered) = window(&snapshot, start, start + whole);
    println!("{defence}: per second {per_second:?}");
    assert!(per_second.len() >= 5 && offered >= 100, "{per_second:?}");
    assert!(
        delivered as f64 >= offered as f64 * 0.9,
        "{defence}: delivered {delivered} of {offered}: {per_second:?}"
    );
    // Healthy waits are tens of ms, the defences' limits 500 ms (CoDel, no standing queue) and
    // 300 ms (the deadline: 500 ms less 200 ms of work): a drop is a stall of the machine,
    // rare, not the defence's doing; at most 1 in 100 requests, and every hint parsed.
    let requests = total(&snapshot, "requests", 0, now + 1);
    let dropped = ["dropped_deadline", "timed_out_in_queue"].map(|n| total(&snapshot, n, 0, now + 1));
    println!("{defence}: dropped {dropped:?} of {requests} requests");
    assert!(dropped.iter().sum::<u64>() * 100 <= requests, "{defence}: dropped {dropped:?} of {requests}");
    assert_eq!(total(&snapshot, "ignored_hints", 0, now + 1), 0, "{defence}: every hint parsed");
    assert_eq!(counter(&snapshot, "applied_twice"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_spike_each_defence_leaves_a_healthy_endpoint_alone() {
    for defence in [DEADLINE, CODEL, ADAPTIVE_LIFO] {
        stays_healthy_with(defence).await;
    }
}

#[tokio::test]
async fn defences_are_validated_naming_their_field() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let path = format!("/api/labs/{lab}/downstream");
    for (body, field) in [
        (json!({"mode": "overloaded", "defences": {"queue": "random"}}), "downstream.defences.queue"),
        (json!({"mode": "healthy", "defences": {"deadline": true}}), "downstream.defences.deadline"),
        (json!({"mode": "down", "defences": {"queue": "codel"}}), "downstream.defences.queue"),
        (
            json!({"mode": "throttled", "defences": {"retries_first": true}}),
            "downstream.defences.retries_first",
        ),
        (
            json!({"mode": "overloaded", "defences": {"codel_target_ms": 0}}),
            "downstream.defences.codel_target_ms",
        ),
        (
            json!({"mode": "overloaded", "defences": {"codel_target_ms": 500, "codel_interval_ms": 100}}),
            "downstream.defences.codel_interval_ms",
        ),
        (json!({"mode": "overloaded", "defences": {"deadline": "yes"}}), "downstream.defences.deadline"),
        (json!({"mode": "overloaded", "defences": {"shed": true}}), "downstream.defences.shed"),
        (json!({"mode": "overloaded", "defences": {"pushback": true}}), "downstream.defences.pushback"),
        (
            json!({"mode": "overloaded", "defences": {"limit": {"kind": "vegas"}}}),
            "downstream.defences.limit.kind",
        ),
        (
            json!({"mode": "overloaded", "defences": {"limit": {"kind": "aimd", "backoff_ratio": 1.2}}}),
            "downstream.defences.limit.backoff_ratio",
        ),
        (
            json!({"mode": "overloaded", "defences": {"limit": {"kind": "gradient2", "min_limit": 30}}}),
            "downstream.defences.limit.max_limit",
        ),
        (
            json!({"mode": "overloaded", "defences": {"limit": {"kind": "gradient2", "rtt_tolerance": 0.5}}}),
            "downstream.defences.limit.rtt_tolerance",
        ),
        (json!({"mode": "healthy", "defences": {"limit": {"kind": "aimd"}}}), "downstream.defences.limit"),
        (
            json!({"mode": "overloaded", "defences": {"admission": {"sr_threshold": 0}}}),
            "downstream.defences.admission.sr_threshold",
        ),
        (
            json!({"mode": "overloaded", "defences": {"admission": {"aggression": 0.5}}}),
            "downstream.defences.admission.aggression",
        ),
        (
            json!({"mode": "overloaded", "defences": {"admission": {"max_rejection_probability": 2}}}),
            "downstream.defences.admission.max_rejection_probability",
        ),
        (json!({"mode": "flaky", "defences": {"admission": {}}}), "downstream.defences.admission"),
    ] {
        let (status, problem) = app.call(Method::PUT, &path, Some(&body.to_string())).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {problem}");
        assert_eq!(problem["field"], field, "{body}: {problem}");
    }
    let settings = app.snapshot(&lab).await["downstream"].clone();
    assert_eq!(settings["mode"], "healthy", "nothing refused was applied");
    let set = app
        .put(&lab, "downstream", r#"{"mode": "overloaded", "defences": {"deadline": true, "queue": "lifo"}}"#)
        .await;
    assert_eq!(
        set["defences"],
        json!({"deadline": true, "queue": "lifo", "codel_target_ms": 25, "codel_interval_ms": 500, "retries_first": false, "pushback": false, "limit": {"kind": "fixed"}, "admission": null})
    );
    let kept = app.put(&lab, "downstream", r#"{"capacity": 2}"#).await;
    assert_eq!(kept["defences"]["queue"], "lifo", "an update not naming them keeps them");
    let healthy = app.put(&lab, "downstream", r#"{"mode": "healthy"}"#).await;
    assert_eq!(
        healthy["defences"],
        json!({"deadline": false, "queue": "fifo", "codel_target_ms": 25, "codel_interval_ms": 500, "retries_first": false, "pushback": false, "limit": {"kind": "fixed"}, "admission": null}),
        "leaving the overloaded mode leaves its defences behind"
    );
}

/// Defences act on the line in front of the workers, and only the overloaded mode has one:
/// on any other mode even a change of CoDel's times alone, once accepted and ignored, is a 422
/// naming `defences` and saying which mode has a queue and what to do; defences all off are
/// taken on any mode.
#[tokio::test]
async fn defences_on_a_mode_without_a_queue_are_refused_naming_defences() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let url = app.url(&format!("/api/labs/{lab}/downstream"));
    for mode in ["healthy", "flaky", "slow", "down", "throttled"] {
        for (defences, field) in [
            (json!({"codel_target_ms": 40}), "downstream.defences"),
            (json!({"codel_interval_ms": 900, "pushback": false}), "downstream.defences"),
            (json!({"deadline": true}), "downstream.defences.deadline"),
            // Named by the first on in the order the pipeline asks them: LIFO before the deadline.
            (json!({"deadline": true, "queue": "lifo"}), "downstream.defences.queue"),
        ] {
            let body = json!({"mode": mode, "defences": defences});
            let response = app.client.put(&url).json(&body).send().await.unwrap();
            assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY, "{body}");
            assert_eq!(response.headers()["content-type"], "application/problem+json", "{body}");
            let problem: Value = response.json().await.unwrap();
            assert_eq!(problem["field"], field, "{body}: {problem}");
            let detail = problem["detail"].as_str().unwrap();
            assert!(detail.contains("only the overloaded mode has a queue"), "{body}: {detail}");
            assert!(detail.contains(&format!("the {mode} mode has none")), "{body}: {detail}");
            assert!(detail.contains("set mode to overloaded, or leave defences out"), "{body}: {detail}");
        }
        let off = app.put(&lab, "downstream", &json!({"mode": mode, "defences": {}}).to_string()).await;
        assert_eq!(off["mode"], mode, "defences all off are taken on {mode}");
    }
    let overloaded = json!({"mode": "overloaded", "defences": {"codel_target_ms": 40}});
    let set = app.put(&lab, "downstream", &overloaded.to_string()).await;
    assert_eq!(set["defences"]["codel_target_ms"], 40, "the overloaded mode takes them");
}

/// Sends one request from outside with `key` and the hint headers given.
async fn send_with(app: &TestApp, lab: &str, key: &str, hints: &[(&str, &str)]) -> (StatusCode, Value) {
    let (status, _, body) = answer(app, lab, key, hints).await;
    (status, body)
}

/// Sends one request from outside with `key` and the hint headers given: its status, its
/// `X-Retry-Pushback-Ms` and its body.
async fn answer(
    app: &TestApp,
    lab: &str,
    key: &str,
    hints: &[(&str, &str)],
) -> (StatusCode, Option<String>, Value) {
    let mut request = reqwest::Client::new()
        .post(app.url(&format!("/labs/{lab}/downstream")))
        .header("idempotency-key", key)
        .header("content-type", "application/json");
    for (name, value) in hints {
        request = request.header(*name, *value);
    }
    let response = request.body("{}").send().await.unwrap();
    let status = response.status();
    let pushback = response.headers().get("x-retry-pushback-ms").map(|v| v.to_str().unwrap().to_owned());
    (status, pushback, response.json().await.unwrap_or(Value::Null))
}

/// Sends one request from outside with `timeout` as its `X-Request-Timeout-Ms` header.
async fn send(app: &TestApp, lab: &str, key: &str, timeout: &str) -> (StatusCode, Value) {
    send_with(app, lab, key, &[("x-request-timeout-ms", timeout)]).await
}

#[tokio::test]
async fn a_full_line_sheds_its_newest_retry_for_a_first_attempt() {
    let app = std::sync::Arc::new(TestApp::spawn().await);
    let lab = app.new_lab().await;
    let set_up = r#"{"mode": "overloaded", "capacity": 1, "queue": 1, "latency_ms": [3000, 3000], "defences": {"retries_first": true}}"#;
    app.put(&lab, "downstream", set_up).await;
    let go = |key: &'static str, previous: &'static str| {
        let (app, lab) = (app.clone(), lab.clone());
        tokio::spawn(async move { send_with(&app, &lab, key, &[("x-previous-attempts", previous)]).await })
    };
    // Each in its place before the next is sent (the snapshot's line says so).
    let placed = |waiting: u64| {
        move |snapshot: &Value| snapshot["line"]["in_work"] == 1 && snapshot["line"]["waiting"] == waiting
    };
    let working = go("working", "0");
    app.wait_for(&lab, Duration::from_secs(10), placed(0)).await;
    let retry = go("a-retry", "2");
    app.wait_for(&lab, Duration::from_secs(10), placed(1)).await;
    let first = go("a-first", "0");
    let shed =
        app.wait_for(&lab, Duration::from_secs(10), |s| total(s, "retries_shed", 0, u64::MAX) == 1).await;
    assert_eq!(shed["line"]["waiting"], 1, "{}", shed["line"]);
    // The line holds a first attempt now: a retry that comes is shed as any would be.
    let late_retry = go("late-retry", "1");
    let (status, problem) = retry.await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("a retry"), "{problem}");
    let (status, problem) = late_retry.await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("no room in the queue"), "{problem}");
    assert_eq!(working.await.unwrap().0, StatusCode::OK);
    assert_eq!(first.await.unwrap().0, StatusCode::OK, "the first attempt kept the retry's place");
    let snapshot = app.snapshot(&lab).await;
    let now = snapshot["now_ms"].as_u64().unwrap();
    assert_eq!(total(&snapshot, "retries_shed", 0, now + 1), 1);
    assert_eq!(counter(&snapshot, "applied"), 2);
}

/// HAProxy's `timeout queue`: a request that waited in line past `queue_timeout_ms` is
/// dropped (503, counted as `timed_out_in_queue`) when its turn comes, nothing applied; one
/// within it is worked. Off, it is left out of the settings.
#[tokio::test]
async fn a_wait_in_line_past_the_queue_timeout_is_dropped_at_its_turn() {
    let app = std::sync::Arc::new(TestApp::spawn().await);
    let lab = app.new_lab().await;
    let off = app.put(&lab, "downstream", r#"{"mode": "overloaded"}"#).await;
    assert!(off["defences"].get("queue_timeout_ms").is_none(), "off, it is left out: {off}");
    let set_up = r#"{"mode": "overloaded", "capacity": 1, "queue": 2, "latency_ms": [600, 600], "defences": {"queue_timeout_ms": 400}}"#;
    let set = app.put(&lab, "downstream", set_up).await;
    assert_eq!(set["defences"]["queue_timeout_ms"], 400, "{set}");
    let go = |key: &'static str| {
        let (app, lab) = (app.clone(), lab.clone());
        tokio::spawn(async move { send_with(&app, &lab, key, &[]).await })
    };
    let placed = |waiting: u64| {
        move |snapshot: &Value| snapshot["line"]["in_work"] == 1 && snapshot["line"]["waiting"] == waiting
    };
    let working = go("working");
    app.wait_for(&lab, Duration::from_secs(10), placed(0)).await;
    // Waits the whole 600 ms of the work before it: past 400 ms.
    let waited_too_long = go("waited-too-long");
    app.wait_for(&lab, Duration::from_secs(10), placed(1)).await;
    assert_eq!(working.await.unwrap().0, StatusCode::OK);
    let (status, problem) = waited_too_long.await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("HAProxy's timeout queue"), "{problem}");
    // Alone in line behind work of 600 ms, it waits at most that: within 1,000 ms it is worked.
    app.put(&lab, "downstream", r#"{"defences": {"queue_timeout_ms": 1000}}"#).await;
    let working = go("working-again");
    app.wait_for(&lab, Duration::from_secs(10), placed(0)).await;
    let within = go("within");
    assert_eq!(working.await.unwrap().0, StatusCode::OK);
    assert_eq!(within.await.unwrap().0, StatusCode::OK, "600 ms is within 1,000 ms");
    let snapshot = app.snapshot(&lab).await;
    let now = snapshot["now_ms"].as_u64().unwrap();
    assert_eq!(total(&snapshot, "timed_out_in_queue", 0, now + 1), 1);
    assert_eq!(counter(&snapshot, "applied"), 3);
    let (status, problem) = app
        .call(
            Method::PUT,
            &format!("/api/labs/{lab}/downstream"),
            Some(r#"{"defences": {"queue_timeout_ms": 0}}"#),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem["field"], "downstream.defences.queue_timeout_ms", "{problem}");
}

/// With pushback on, the retry shed from the line is told not to retry (`X-Retry-Pushback-Ms:
/// -1`, gRFC A6's negative pushback); a retry shed for want of room (no defence at work) is not,
/// nor one shed with pushback off.
#[tokio::test]
async fn a_retry_shed_with_pushback_on_is_told_not_to_retry() {
    let app = std::sync::Arc::new(TestApp::spawn().await);
    for pushback in [true, false] {
        let lab = app.new_lab().await;
        let set_up = json!({"mode": "overloaded", "capacity": 1, "queue": 1, "latency_ms": [1000, 1000],
            "defences": {"retries_first": true, "pushback": pushback}});
        app.put(&lab, "downstream", &set_up.to_string()).await;
        let go = |key: &'static str, previous: &'static str| {
            let (app, lab) = (app.clone(), lab.clone());
            tokio::spawn(async move { answer(&app, &lab, key, &[("x-previous-attempts", previous)]).await })
        };
        let placed = |waiting: u64| {
            move |snapshot: &Value| snapshot["line"]["in_work"] == 1 && snapshot["line"]["waiting"] == waiting
        };
        let working = go("working", "0");
        app.wait_for(&lab, Duration::from_secs(10), placed(0)).await;
        let retry = go("a-retry", "1");
        app.wait_for(&lab, Duration::from_secs(10), placed(1)).await;
        let first = go("a-first", "0");
        app.wait_for(&lab, Duration::from_secs(10), |s| total(s, "retries_shed", 0, u64::MAX) == 1).await;
        let late_retry = go("late-retry", "1");
        let (status, told, problem) = retry.await.unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{problem}");
        assert_eq!(told, pushback.then(|| "-1".to_owned()), "pushback {pushback}: {problem}");
        let (status, told, problem) = late_retry.await.unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{problem}");
        assert_eq!(told, None, "shed for want of room, not by the defence: {problem}");
        assert_eq!(working.await.unwrap().0, StatusCode::OK);
        assert_eq!(first.await.unwrap().0, StatusCode::OK);
    }
}

/// The lab's client honours the pushback: each retry the endpoint sheds with pushback on ends
/// its message's round at once, in the dead-letter queue as `pushback`, with attempts left.
#[tokio::test]
async fn the_labs_client_ends_the_round_on_a_pushback() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let set_up = r#"{"mode": "overloaded", "capacity": 1, "queue": 1, "latency_ms": [200, 200], "retry_after_s": 0,
        "defences": {"retries_first": true, "pushback": true}}"#;
    app.put(&lab, "downstream", set_up).await;
    let policy = r#"{"jitter": "none", "base_ms": 20, "cap_ms": 20, "multiplier": 1, "max_attempts": 10,
        "timeout_ms": 5000, "honor_retry_after": false, "breaker": null, "retry_budget": null, "seed": 3}"#;
    app.put(&lab, "policy", policy).await;
    // A burst keeps retries coming; new messages' first attempts shed them from the line.
    app.burst(&lab, 5).await;
    app.put(&lab, "traffic", r#"{"rate_per_s": 5, "arrivals": "even", "for_ms": 3000}"#).await;
    let done = app
        .wait_for(&lab, Duration::from_secs(60), |s| {
            s["traffic"]["sent"].as_u64().unwrap_or(0) >= 10
                && counter(s, "in_flight") == 0
                && messages(s).iter().all(|m| m["state"] == "delivered" || m["state"] == "dead_letter")
        })
        .await;
    let letters = done["dead_letters"].as_array().unwrap();
    let told: Vec<&Value> = letters.iter().filter(|d| d["cause"] == "pushback").collect();
    let shed = total(&done, "retries_shed", 0, u64::MAX);
    assert!(shed > 0, "the set-up sheds retries: {}", done["load"]);
    assert_eq!(
        told.len() as u64,
        shed,
        "every shed retry, and nothing else, ended its round on the pushback"
    );
    for letter in told {
        let attempts = letter["attempts"].as_array().unwrap();
        let last = attempts.last().unwrap();
        assert_eq!(last["status"], 503, "{letter}");
        // Whatever attempts were left: a retry shed on the last attempt still names the pushback
        // (the round ending with attempts left is the decision's unit test, on explicit values).
        assert!(letter["reason"].as_str().unwrap().contains("X-Retry-Pushback-Ms"), "{letter}");
        let message = messages(&done).iter().find(|m| m["id"] == letter["id"]).unwrap().clone();
        assert_eq!(
            message["attempts"].as_array().unwrap().len(),
            attempts.len(),
            "no attempt after it: {message}"
        );
    }
}

#[tokio::test]
async fn a_deadline_header_that_does_not_parse_is_counted_and_ignored() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    app.put(
        &lab,
        "downstream",
        r#"{"mode": "overloaded", "capacity": 2, "latency_ms": [50, 50], "defences": {"deadline": true}}"#,
    )
    .await;
    // Too short for the 50 ms of work: dropped at once, nothing applied.
    let (status, problem) = send(&app, &lab, "short", "20").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("X-Request-Timeout-Ms"), "{problem}");
    // Long enough: worked.
    assert_eq!(send(&app, &lab, "long", "5000").await.0, StatusCode::OK);
    // Not a number of ms: worked as if unsaid, and counted.
    for (i, bad) in ["-5", "abc", "1.5", "0", "99999999999999999999", " "].iter().enumerate() {
        let (status, body) = send(&app, &lab, &format!("bad-{i}"), bad).await;
        assert_eq!(status, StatusCode::OK, "{bad:?}: {body}");
    }
    let (status, body) = send_with(&app, &lab, "bad-count", &[("x-previous-attempts", "two")]).await;
    assert_eq!(status, StatusCode::OK, "an attempt count that is not a number: {body}");
    let snapshot = app.snapshot(&lab).await;
    let now = snapshot["now_ms"].as_u64().unwrap();
    assert_eq!(total(&snapshot, "ignored_hints", 0, now + 1), 7);
    assert_eq!(total(&snapshot, "dropped_deadline", 0, now + 1), 1);
    assert_eq!(counter(&snapshot, "applied"), 8, "all but the dropped one applied");
    assert_eq!(
        snapshot["line"],
        json!({"waiting": 0, "in_work": 0, "limit": 2, "adaptive_limit": null, "lifo": false})
    );
}

/// The limit each second in `[from, to)` ms, as the last bin in the second that noted one
/// left it.
fn limits(snapshot: &Value, from: u64, to: u64) -> Vec<u64> {
    let bins = snapshot["load"]["bins"].as_array().unwrap();
    (from / 1_000..to / 1_000)
        .filter_map(|s| {
            let second =
                bins.iter().filter(|b| (s * 1_000..(s + 1) * 1_000).contains(&b["t_ms"].as_u64().unwrap()));
            second.filter_map(|b| b["limit"].as_u64()).next_back()
        })
        .collect()
}

/// The metastable endpoint (8 workers, 200 ms of work) with `limit` on, offered 120 % of its
/// capacity by the naive client for 8 s, then its work slowed to 600 ms for 3 s: returns the
/// limit per second while the work was fast (from 3 s on) and while it was slow (from 1 s
/// into it), and the snapshot.
async fn adaptive_limit_under(limit: &str) -> (Vec<u64>, Vec<u64>, Value) {
    let _turn = OPEN_SYSTEM_RUNS.lock().await;
    let app = TestApp::spawn().await;
    let lab = set_up(&app, &format!(r#"{{"defences": {{"limit": {limit}}}}}"#)).await;
    app.put(&lab, "traffic", r#"{"rate_per_s": 48, "arrivals": "poisson"}"#).await;
    let start = marker_at(&app.snapshot(&lab).await, "traffic:");
    let slowed = at_lab_ms(&app, &lab, start + 8_000).await["now_ms"].as_u64().unwrap();
    app.put(&lab, "downstream", r#"{"latency_ms": [600, 600], "for_ms": 3000}"#).await;
    let snapshot = at_lab_ms(&app, &lab, slowed + 3_000).await;
    let fast = limits(&snapshot, start + 3_000, slowed);
    let slow = limits(&snapshot, slowed + 1_000, slowed + 3_000);
    println!("{limit}: limit per second, fast {fast:?}, slow {slow:?}");
    let refused = total(&snapshot, "refused_by_limit", 0, slowed + 3_000);
    assert!(refused > 0, "{limit}: refused nothing at 120 % of capacity");
    let line = &snapshot["line"];
    let now = snapshot["now_ms"].as_u64().unwrap();
    let last = limits(&snapshot, 0, now + 1_000).last().copied();
    assert!(line["adaptive_limit"].as_u64().is_some() && last.is_some(), "{line}");
    assert_eq!(counter(&snapshot, "applied_twice"), 0);
    (fast, slow, snapshot)
}

/// Where a limit settles with the work fast: the mean of its seconds within `near`, around the
/// 20 in flight the clients' patience allows the 8 workers and well under the 48 that workers
/// and line hold (neither limit holds still: AIMD swings from 2 to 35 on this machine); and with
/// the work three times slower, lower than that.
fn settles_near_the_workers_and_falls_when_slowed(
    limit: &str,
    (fast, slow): (Vec<u64>, Vec<u64>),
    near: [f64; 2],
) {
    assert!(fast.len() >= 4 && !slow.is_empty(), "{limit}: {fast:?} {slow:?}");
    let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len() as f64;
    let (fast_mean, slow_mean) = (mean(&fast), mean(&slow));
    assert!(
        (near[0]..=near[1]).contains(&fast_mean),
        "{limit}: settled at {fast_mean} ({fast:?}), not within {near:?}"
    );
    assert!(slow_mean < fast_mean * 0.8, "{limit}: slowed work, limit {slow:?} against {fast:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aimd_settles_near_the_workers_and_cuts_its_limit_when_the_work_slows() {
    // Its ceiling raised from the scaled 20 to 40, so where it settles is its own doing: where
    // the clients (500 ms) start giving up, 8 workers × 500 / 200 ms = 20 in flight, not 48.
    let (fast, slow, _) = adaptive_limit_under(r#"{"kind": "aimd", "max_limit": 40}"#).await;
    settles_near_the_workers_and_falls_when_slowed("aimd", (fast, slow), [8.0, 30.0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gradient2_settles_near_the_workers_and_cuts_its_limit_when_the_work_slows() {
    // Gradient2 lets the RTT rise to 1.5 × its long-run value, plus its queue size of 4:
    // about 1.5 × 8 + 4 = 16 in flight while the long RTT is still the unloaded 200 ms.
    let (fast, slow, _) = adaptive_limit_under(r#"{"kind": "gradient2", "max_limit": 40}"#).await;
    settles_near_the_workers_and_falls_when_slowed("gradient2", (fast, slow), [8.0, 30.0]);
}

/// Envoy's admission control on an endpoint whose line is too short for its traffic: the
/// share refused each second follows the filter's formula at the counts of the window before
/// it (read from the bins: answers under 500 are its successes), within a margin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_control_refuses_as_its_formula_says() {
    let _turn = OPEN_SYSTEM_RUNS.lock().await;
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    // 4 workers of 100 ms (40 a second) and no line, offered 80 a second by a client that does
    // not retry: about half fail without admission control.
    let downstream = r#"{"mode": "overloaded", "capacity": 4, "queue": 0, "latency_ms": [100, 100], "retry_after_s": 0,
        "defences": {"admission": {"window_ms": 2000}}}"#;
    let set = app.put(&lab, "downstream", downstream).await;
    assert_eq!(set["defences"]["admission"]["sr_threshold"], 0.95, "{set}");
    app.put(
        &lab,
        "policy",
        r#"{"max_attempts": 1, "timeout_ms": 2000, "breaker": null, "retry_budget": null}"#,
    )
    .await;
    app.put(&lab, "traffic", r#"{"rate_per_s": 80, "arrivals": "poisson"}"#).await;
    let start = marker_at(&app.snapshot(&lab).await, "traffic:");
    let snapshot = at_lab_ms(&app, &lab, start + 9_000).await;
    let (mut expected, mut refused, mut judged) = (0.0, 0, 0);
    for second in 0..6 {
        let from = start + 3_000 + second * 1_000;
        // The window before this second: what admission control let through, and its successes.
        let let_through =
            |f, t| total(&snapshot, "requests", f, t) - total(&snapshot, "refused_by_admission", f, t);
        let (n, ok) = (let_through(from - 2_000, from), total(&snapshot, "ok", from - 2_000, from));
        let p = ((n as f64 - ok as f64 / 0.95) / (n as f64 + 1.0)).clamp(0.0, 0.8);
        let arrived = total(&snapshot, "requests", from, from + 1_000);
        expected += p * arrived as f64;
        refused += total(&snapshot, "refused_by_admission", from, from + 1_000);
        judged += arrived;
        println!(
            "second {second}: window {n} let through, {ok} ok: p {p:.2}; refused {} of {arrived}",
            total(&snapshot, "refused_by_admission", from, from + 1_000)
        );
    }
    assert!(judged >= 200, "traffic arrived: {judged}");
    assert!(refused > 0, "admission control refused nothing");
    // The window moves within each second, so the expectation is that of its start: 25 % leeway.
    assert!(
        (refused as f64 - expected).abs() <= expected * 0.25 + 10.0,
        "refused {refused}, the formula expects {expected:.0} of {judged}"
    );
    assert_eq!(counter(&snapshot, "applied_twice"), 0);
}

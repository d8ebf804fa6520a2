//! The dead-letter queue as operators use it: filters with facet counts and pages, one letter
//! in detail, bulk actions by ids or filter, a dry run that changes nothing, a redrive at a
//! rate that spreads its sends, can be cancelled and survives a SIGKILL without sending a
//! letter twice, the NDJSON export, the operator's metrics, and bad input named by field.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Binary, TestApp, counter, fresh_db, messages};

const PATIENCE: Duration = Duration::from_secs(60);

/// The queue a test starts from, by phase: 3 letters whose 2 attempts were used up against a
/// down endpoint (503), 2 whose one attempt timed out against a slow one (their writes were
/// applied), 2 that ran out of time budget (503).
struct Mixed {
    lab: String,
    down: Vec<u64>,
    timed_out: Vec<u64>,
    out_of_time: Vec<u64>,
}

async fn mixed_queue(app: &TestApp) -> Mixed {
    let lab = app.fast_lab().await;
    app.put(&lab, "policy", r#"{"max_attempts": 2}"#).await;
    app.set_mode(&lab, "down").await;
    let down = app.burst(&lab, 3).await;
    app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 3).await;

    app.put(&lab, "downstream", r#"{"mode": "slow", "slow_ms": [300, 300]}"#).await;
    // One attempt: a retry of the key would be answered from the ledger and delivered.
    app.put(&lab, "policy", r#"{"timeout_ms": 60, "max_attempts": 1}"#).await;
    let timed_out = app.burst(&lab, 2).await;
    app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 5).await;

    app.set_mode(&lab, "down").await;
    app.put(&lab, "policy", r#"{"timeout_ms": 5000, "max_attempts": 4, "base_ms": 200, "max_total_ms": 50}"#)
        .await;
    let out_of_time = app.burst(&lab, 2).await;
    app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 7).await;
    // Let the slow endpoint's writes land (300 ms after they started).
    app.wait_for(&lab, PATIENCE, |s| counter(s, "applied") == 2).await;
    Mixed { lab, down, timed_out, out_of_time }
}

async fn list(app: &TestApp, lab: &str, query: &str) -> (StatusCode, Value) {
    app.call(Method::GET, &format!("/api/labs/{lab}/dead-letters?{query}"), None).await
}

fn ids_of(listing: &Value) -> Vec<u64> {
    listing["dead_letters"].as_array().unwrap().iter().map(|d| d["id"].as_u64().unwrap()).collect()
}

fn sorted(mut ids: Vec<u64>) -> Vec<u64> {
    ids.sort_unstable();
    ids
}

async fn post(app: &TestApp, lab: &str, action: &str, body: Value) -> (StatusCode, Value) {
    app.call(Method::POST, &format!("/api/labs/{lab}/dead-letters/{action}"), Some(&body.to_string())).await
}

#[tokio::test]
async fn filters_narrow_the_queue_and_facets_count_all_of_it() {
    let app = TestApp::spawn().await;
    let Mixed { lab, down, timed_out, out_of_time } = mixed_queue(&app).await;

    let (status, all) = list(&app, &lab, "").await;
    assert_eq!(status, StatusCode::OK, "{all}");
    assert_eq!(all["matched"], 7);
    // Every cause is counted, those no letter has at 0.
    let mut causes: serde_json::Map<String, Value> =
        retrylab::dlq::Cause::all().map(|cause| (cause.as_str().to_owned(), json!(0))).collect();
    causes.extend([("attempts_used_up".to_owned(), json!(5)), ("time_budget".to_owned(), json!(2))]);
    assert_eq!(all["facets"]["cause"], Value::Object(causes));
    assert!(all["facets"]["cause"]["token_bucket"] == 0 && all["facets"]["cause"]["grpc_hedging"] == 0);
    assert_eq!(all["facets"]["status"], json!({ "503": 5, "timeout": 2 }));
    assert!(all["oldest_unix_ms"].as_u64().is_some());

    let (_, by_cause) = list(&app, &lab, "cause=time_budget").await;
    assert_eq!(ids_of(&by_cause), sorted(out_of_time.clone()));
    assert_eq!(by_cause["facets"], all["facets"], "facets count the whole queue, not the page");
    let (_, by_status) = list(&app, &lab, "status=timeout").await;
    assert_eq!(ids_of(&by_status), sorted(timed_out.clone()));
    let (_, applied) = list(&app, &lab, "applied=true").await;
    assert_eq!(ids_of(&applied), sorted(timed_out.clone()), "the ledger holds the slow writes");
    let (_, both) = list(&app, &lab, "cause=attempts_used_up&status=503").await;
    assert_eq!(ids_of(&both), sorted(down.clone()));
    let (_, none_replayed) = list(&app, &lab, "replays=1").await;
    assert_eq!(none_replayed["matched"], 0);
    let (_, by_id) = list(&app, &lab, &format!("q=%23{}", down[1])).await;
    assert_eq!(ids_of(&by_id), [down[1]]);
    let key = all["dead_letters"][0]["key"].as_str().unwrap();
    let (_, by_key) = list(&app, &lab, &format!("q={}", &key[..8])).await;
    assert!(ids_of(&by_key).contains(&all["dead_letters"][0]["id"].as_u64().unwrap()));

    // A time range on lab time: only the last phase's letters are as late as its first.
    let first_late = by_cause["dead_letters"][0]["dead_lettered_ms"].as_u64().unwrap();
    let (_, late) = list(&app, &lab, &format!("since_ms={first_late}")).await;
    assert!(ids_of(&late).iter().all(|id| out_of_time.contains(id)), "{late}");
    let (_, early) = list(&app, &lab, &format!("until_ms={}", first_late - 1)).await;
    assert_eq!(early["matched"].as_u64().unwrap() + late["matched"].as_u64().unwrap(), 7);

    // Pages of 3 in id order, each cursor the last id of the page before.
    let mut seen = Vec::new();
    let mut after = String::new();
    loop {
        let (_, page) = list(&app, &lab, &format!("limit=3{after}")).await;
        seen.extend(ids_of(&page));
        match page["next"].as_u64() {
            Some(next) => after = format!("&after={next}"),
            None => break,
        }
    }
    let every: Vec<u64> = sorted([down, timed_out, out_of_time].concat());
    assert_eq!(seen, every);
}

#[tokio::test]
async fn bad_filters_are_refused_naming_the_field() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    for (query, field) in [
        ("cause=gremlins", "cause"),
        ("status=999", "status"),
        ("status=sleepy", "status"),
        ("replays=many", "replays"),
        ("applied=maybe", "applied"),
        ("since_ms=10&until_ms=5", "until_ms"),
        ("limit=0", "limit"),
        ("limit=100000000", "limit"),
        ("format=xml", "format"),
        ("colour=red", "colour"),
    ] {
        let (status, problem) = list(&app, &lab, query).await;
        assert!(status.is_client_error(), "{query}: {status}");
        assert_eq!(problem["field"], field, "{query}: {problem}");
    }
    let (status, problem) = post(&app, &lab, "replay", json!({ "filter": { "cause": "gremlins" } })).await;
    assert_eq!((status, problem["field"].clone()), (StatusCode::UNPROCESSABLE_ENTITY, json!("filter.cause")));
    let (status, problem) = post(&app, &lab, "replay", json!({ "rate_per_s": 0 })).await;
    assert_eq!((status, problem["field"].clone()), (StatusCode::UNPROCESSABLE_ENTITY, json!("rate_per_s")));
    let (status, problem) = post(&app, &lab, "replay", json!({ "rate_per_s": 1e9 })).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(problem["detail"].as_str().unwrap().contains("max_redrive_rate_per_s"), "{problem}");
    let (status, problem) = post(&app, &lab, "replay", json!({ "ids": "seven" })).await;
    assert_eq!((status, problem["field"].clone()), (StatusCode::UNPROCESSABLE_ENTITY, json!("ids")));
    let (status, problem) = post(&app, &lab, "redrive/cancel", json!({})).await;
    assert_eq!((status, problem["field"].clone()), (StatusCode::CONFLICT, json!("redrive")));
    let (status, problem) = post(&app, &lab, "delete", json!({})).await;
    assert_eq!((status, problem["field"].clone()), (StatusCode::UNPROCESSABLE_ENTITY, json!("ids")));
    let (status, problem) = app.call(Method::GET, &format!("/api/labs/{lab}/dead-letters/abc"), None).await;
    assert_eq!((status, problem["field"].clone()), (StatusCode::UNPROCESSABLE_ENTITY, json!("id")));
}

#[tokio::test]
async fn delete_by_filter_takes_the_letters_and_their_messages_from_the_store() {
    let app = TestApp::spawn().await;
    let Mixed { lab, down, out_of_time, .. } = mixed_queue(&app).await;

    let (status, problem) =
        post(&app, &lab, "delete", json!({ "filter": { "replays": 3 }, "expected": 0 })).await;
    assert_eq!((status, problem["field"].clone()), (StatusCode::UNPROCESSABLE_ENTITY, json!("filter")));
    let other = app.fast_lab().await;
    let (status, problem) = post(&app, &other, "delete", json!({ "ids": [down[0]] })).await;
    assert_eq!(
        (status, problem["field"].clone()),
        (StatusCode::NOT_FOUND, json!("ids")),
        "ids of another lab"
    );

    let (status, deleted) =
        post(&app, &lab, "delete", json!({ "filter": { "cause": "time_budget" }, "expected": 2 })).await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    assert_eq!(deleted["deleted"], json!(sorted(out_of_time.clone())));
    let snapshot = app.snapshot(&lab).await;
    assert_eq!(counter(&snapshot, "dead_letter"), 5);
    let held: HashSet<u64> = messages(&snapshot).iter().map(|m| m["id"].as_u64().unwrap()).collect();
    assert!(out_of_time.iter().all(|id| !held.contains(id)), "their messages are gone too");
    let (status, _) =
        app.call(Method::GET, &format!("/api/labs/{lab}/dead-letters/{}", out_of_time[0]), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Quarantine by ids, and back by filter.
    let (status, moved) = post(&app, &lab, "quarantine", json!({ "ids": [down[0], down[1]] })).await;
    assert_eq!((status, moved["changed"].clone()), (StatusCode::OK, json!([down[0], down[1]])));
    assert_eq!(counter(&app.snapshot(&lab).await, "quarantined"), 2);
    let back = json!({ "filter": { "quarantined": true }, "quarantined": false });
    let (_, moved) = post(&app, &lab, "quarantine", back).await;
    assert_eq!(moved["changed"], json!([down[0], down[1]]));
    assert_eq!(counter(&app.snapshot(&lab).await, "quarantined"), 0);
}

#[tokio::test]
async fn a_letter_in_detail_shows_every_attempt_and_whether_its_write_was_applied() {
    let app = TestApp::spawn().await;
    let Mixed { lab, down, timed_out, .. } = mixed_queue(&app).await;
    let (status, detail) =
        app.call(Method::GET, &format!("/api/labs/{lab}/dead-letters/{}", timed_out[0]), None).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!((detail["applied"].clone(), detail["last_status"].clone()), (json!(true), json!("timeout")));
    let attempts = detail["dead_letter"]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1);
    assert!(attempts[0]["duration_ms"].as_u64().unwrap() >= 50, "a timeout at 60 ms: {}", attempts[0]);
    let (_, detail) = app.call(Method::GET, &format!("/api/labs/{lab}/dead-letters/{}", down[0]), None).await;
    assert_eq!((detail["applied"].clone(), detail["replays"].clone()), (json!(false), json!(0)));
    assert_eq!(
        (detail["dead_letter"]["cause"].clone(), detail["last_status"].clone()),
        (json!("attempts_used_up"), json!("503"))
    );
    let attempts = detail["dead_letter"]["attempts"].as_array().unwrap();
    assert_eq!(attempts.iter().map(|a| a["status"].as_u64()).collect::<Vec<_>>(), [Some(503), Some(503)]);
    assert!(attempts[0]["wait"]["reason"].is_string(), "the wait and its reason: {}", attempts[0]);
    assert!(attempts[0]["wait"]["actual_ms"].is_u64(), "the wait as measured: {}", attempts[0]);
}

#[tokio::test]
async fn a_dry_run_says_what_would_go_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    app.put(&lab, "policy", r#"{"max_attempts": 1, "quarantine_after": 1}"#).await;
    app.set_mode(&lab, "down").await;
    let first = app.burst(&lab, 2).await;
    app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 2).await;
    // One of them comes back after a replay and is quarantined.
    let (status, _) = post(&app, &lab, "replay", json!({ "ids": [first[0]] })).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    app.wait_for(&lab, PATIENCE, |s| counter(s, "quarantined") == 1 && counter(s, "dead_letter") == 2).await;

    let before = app.snapshot(&lab).await;
    let (status, dry) = post(&app, &lab, "replay", json!({ "dry_run": true })).await;
    assert_eq!(status, StatusCode::OK, "{dry}");
    assert_eq!((dry["count"].clone(), dry["quarantined_skipped"].clone()), (json!(1), json!(1)));
    assert_eq!((dry["mode"].clone(), dry["breaker"].clone()), (json!("down"), json!("closed")));
    assert!(dry["warning"].as_str().unwrap().contains("dead-letter again"), "{dry}");
    let (_, confirmed) =
        post(&app, &lab, "replay", json!({ "dry_run": true, "confirm_quarantined": true })).await;
    assert_eq!(confirmed["count"], 2);
    let after = app.snapshot(&lab).await;
    for part in ["dead_letters", "messages", "counters", "last_event_id"] {
        assert_eq!(before[part], after[part], "a dry run changed {part}");
    }

    app.set_mode(&lab, "healthy").await;
    let (_, dry) =
        post(&app, &lab, "replay", json!({ "dry_run": true, "filter": { "quarantined": false } })).await;
    assert_eq!((dry["count"].clone(), dry["warning"].clone()), (json!(1), Value::Null));
    assert_eq!(dry["ids"], json!([first[1]]));
}

/// A lab with `count` dead letters and a healthy endpoint, ready for a redrive.
async fn queue_of(app: &TestApp, count: u64) -> (String, Vec<u64>) {
    let lab = app.fast_lab().await;
    app.put(&lab, "policy", r#"{"max_attempts": 1}"#).await;
    app.set_mode(&lab, "down").await;
    let ids = app.burst(&lab, count).await;
    app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == count).await;
    app.set_mode(&lab, "healthy").await;
    // A replay cut off by a kill resumes with its next attempt instead of dead-lettering.
    app.put(&lab, "policy", r#"{"max_attempts": 4}"#).await;
    (lab, ids)
}

/// When each message's replay (round 1) started, in lab ms, sorted.
fn replay_starts(snapshot: &Value) -> Vec<u64> {
    let mut starts: Vec<u64> = messages(snapshot)
        .iter()
        .filter_map(|m| m["attempts"].as_array().unwrap().iter().find(|a| a["round"] == 1))
        .map(|a| a["started_ms"].as_u64().unwrap())
        .collect();
    starts.sort_unstable();
    starts
}

#[tokio::test]
async fn a_redrive_spreads_its_sends_at_its_rate() {
    let app = TestApp::spawn().await;
    let (lab, ids) = queue_of(&app, 8).await;
    let (status, started) = post(&app, &lab, "replay", json!({ "rate_per_s": 20 })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    assert_eq!(started["redrive"], json!({ "total": 8, "sent": 0, "rate_per_s": 20.0 }));
    assert_eq!(started["message_ids"], json!(ids));
    let (status, problem) = post(&app, &lab, "replay", json!({ "rate_per_s": 5 })).await;
    assert_eq!(status, StatusCode::CONFLICT, "one redrive at a time: {problem}");

    let midway =
        app.wait_for(&lab, PATIENCE, |s| s["redrive"]["sent"].as_u64().is_some_and(|n| n >= 2)).await;
    assert_eq!(midway["redrive"]["total"], 8);
    let done = app.wait_for(&lab, PATIENCE, |s| s["redrive"].is_null() && counter(s, "delivered") == 8).await;
    let starts = replay_starts(&done);
    assert_eq!(starts.len(), 8);
    // Seven gaps of 50 ms nominal. An attempt starts a little after its letter was sent (its
    // task is scheduled), so each start is held to its place on the even schedule, with 20 %
    // and 40 ms to spare, and no 100 ms holds more than 4 (2 nominal): spread, not a burst.
    let span = starts[7] - starts[0];
    assert!(span >= 280, "8 sends at 20/s took {span} ms: {starts:?}");
    for (i, start) in starts.iter().enumerate() {
        let due = i as u64 * 50 * 8 / 10;
        assert!(start - starts[0] + 40 >= due, "send {i} at {start} ms, ahead of the rate: {starts:?}");
    }
    for (i, start) in starts.iter().enumerate() {
        let within = starts[i..].iter().take_while(|s| **s < start + 100).count();
        assert!(within <= 4, "{within} sends within 100 ms of {start}: {starts:?}");
    }
}

#[tokio::test]
async fn a_cancelled_redrive_leaves_the_rest_in_the_queue() {
    let app = TestApp::spawn().await;
    let (lab, _) = queue_of(&app, 20).await;
    let (status, _) = post(&app, &lab, "replay", json!({ "rate_per_s": 10 })).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    app.wait_for(&lab, PATIENCE, |s| s["redrive"]["sent"].as_u64().is_some_and(|n| n >= 2)).await;
    let (status, cancelled) = post(&app, &lab, "redrive/cancel", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    let sent = cancelled["sent"].as_u64().unwrap();
    assert!((2..20).contains(&sent), "{cancelled}");
    tokio::time::sleep(Duration::from_millis(400)).await; // four intervals at 10/s
    let after = app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") == sent).await;
    assert_eq!(counter(&after, "dead_letter"), 20 - sent, "the unsent stay in the queue");
    assert!(after["redrive"].is_null());
    assert!(after["dead_letters"].as_array().unwrap().iter().all(|d| d.get("redrive").is_none()));
    let (status, _) = post(&app, &lab, "redrive/cancel", json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "nothing left to cancel");
}

/// A redrive started after a slow one was cancelled goes at its own rate: the cancelled one's
/// schedule (here 4 s to its next send) does not hold it back.
#[tokio::test]
async fn a_redrive_after_a_cancelled_slow_one_goes_at_its_own_rate() {
    let app = TestApp::spawn().await;
    let (lab, _) = queue_of(&app, 10).await;
    let (status, _) = post(&app, &lab, "replay", json!({ "rate_per_s": 0.25 })).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    app.wait_for(&lab, PATIENCE, |s| s["redrive"]["sent"].as_u64().is_some_and(|n| n >= 1)).await;
    let (status, cancelled) = post(&app, &lab, "redrive/cancel", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    let sent = cancelled["sent"].as_u64().unwrap();

    let started = Instant::now();
    let (status, fast) = post(&app, &lab, "replay", json!({ "rate_per_s": 200 })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{fast}");
    assert_eq!(fast["redrive"]["total"], 10 - sent);
    // The rest at 200/s take 5 ms apart; the cancelled redrive's next send was 4 s away.
    let done = app
        .wait_for(&lab, Duration::from_millis(2_500), |s| {
            s["redrive"].is_null() && counter(s, "delivered") == 10
        })
        .await;
    assert!(started.elapsed() < Duration::from_millis(2_500), "took {:?}", started.elapsed());
    assert_eq!(replay_starts(&done).len(), 10);
}

/// A rate so small that its interval is no duration (1e-300/s, the smallest float) is refused
/// naming the field and the lowest rate, and nothing starts.
#[tokio::test]
async fn a_redrive_below_the_lowest_rate_is_refused_naming_the_field() {
    let app = TestApp::spawn().await;
    let (lab, _) = queue_of(&app, 2).await;
    for rate in [json!(1e-300), json!(5e-324), json!(0.001)] {
        let (status, problem) = post(&app, &lab, "replay", json!({ "rate_per_s": rate })).await;
        assert_eq!(
            (status, problem["field"].clone()),
            (StatusCode::UNPROCESSABLE_ENTITY, json!("rate_per_s")),
            "{rate}: {problem}"
        );
        assert!(problem["detail"].as_str().unwrap().contains("0.01"), "says the lowest rate: {problem}");
    }
    let snapshot = app.snapshot(&lab).await;
    assert!(snapshot["redrive"].is_null(), "nothing started: {}", snapshot["redrive"]);
    assert_eq!(counter(&snapshot, "dead_letter"), 2);
}

/// A delete or a quarantine move by filter needs a filter that narrows, and a delete the count
/// the person confirmed; when
/// more match by the time it runs, nothing is deleted and the answer says how many match now.
#[tokio::test]
async fn a_delete_or_quarantine_by_filter_needs_a_narrowing_filter_and_a_delete_the_confirmed_count() {
    let app = TestApp::spawn().await;
    let Mixed { lab, down, .. } = mixed_queue(&app).await;
    for filter in [json!({}), json!({ "q": null }), json!({ "q": "  " }), json!({ "cause": "" })] {
        let (status, problem) = post(&app, &lab, "delete", json!({ "filter": filter, "expected": 7 })).await;
        assert_eq!(
            (status, problem["field"].clone()),
            (StatusCode::UNPROCESSABLE_ENTITY, json!("filter")),
            "{filter}: {problem}"
        );
        // A quarantine move by such a filter would move every letter: refused the same way.
        let (status, problem) = post(&app, &lab, "quarantine", json!({ "filter": filter })).await;
        assert_eq!(
            (status, problem["field"].clone()),
            (StatusCode::UNPROCESSABLE_ENTITY, json!("filter")),
            "quarantine by {filter}: {problem}"
        );
    }
    assert_eq!(counter(&app.snapshot(&lab).await, "quarantined"), 0, "nothing was moved");
    let by_cause = json!({ "cause": "attempts_used_up", "status": "503" });
    let (status, problem) = post(&app, &lab, "delete", json!({ "filter": by_cause })).await;
    assert_eq!(
        (status, problem["field"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!("expected")),
        "{problem}"
    );
    // The person saw 2 match; 3 do now.
    let (status, problem) = post(&app, &lab, "delete", json!({ "filter": by_cause, "expected": 2 })).await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("3 match now") && detail.contains('2'), "{detail}");
    assert_eq!(counter(&app.snapshot(&lab).await, "dead_letter"), 7, "nothing was deleted");

    let (status, deleted) = post(&app, &lab, "delete", json!({ "filter": by_cause, "expected": 3 })).await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    let gone: Vec<u64> = serde_json::from_value(deleted["deleted"].clone()).unwrap();
    assert_eq!(sorted(gone), sorted(down));
    assert_eq!(counter(&app.snapshot(&lab).await, "dead_letter"), 4);
}

#[tokio::test]
async fn a_redrive_resumes_after_a_sigkill_and_sends_nothing_twice() {
    let db = fresh_db();
    let server = Binary::start(&db);
    let (lab, ids) = queue_of(&server.app, 30).await;
    let (status, _) = post(&server.app, &lab, "replay", json!({ "rate_per_s": 25 })).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let app = &server.app;
    app.wait_for(&lab, PATIENCE, |s| s["redrive"]["sent"].as_u64().is_some_and(|n| n >= 5)).await;
    drop(server); // SIGKILL mid-redrive

    let server = Binary::start(&db);
    let app = &server.app;
    let resumed = app.snapshot(&lab).await;
    let at_restart = resumed["redrive"]["sent"].as_u64().expect("the redrive is still there after the kill");
    assert!(at_restart < 30, "{}", resumed["redrive"]);
    assert_eq!(resumed["redrive"]["rate_per_s"], 25.0);
    let started = Instant::now();
    let done =
        app.wait_for(&lab, PATIENCE, |s| s["redrive"].is_null() && counter(s, "delivered") == 30).await;
    // The rest went on at the rate, not all at once.
    let rest = 30 - at_restart;
    let floor = Duration::from_millis((rest.saturating_sub(1) * 40 * 8 / 10).min(20_000));
    assert!(started.elapsed() >= floor, "{rest} letters in {:?}", started.elapsed());
    for message in messages(&done) {
        assert_eq!(message["round"], 1, "replayed exactly once: {message}");
    }
    assert_eq!(counter(&done, "applied"), ids.len() as u64);
    assert_eq!(counter(&done, "applied_twice"), 0);
    assert_eq!(counter(&done, "dead_letter"), 0);
}

#[tokio::test]
async fn the_export_streams_every_matching_letter_with_its_attempts() {
    let app = TestApp::spawn().await;
    let Mixed { lab, down, timed_out, .. } = mixed_queue(&app).await;
    let url = app.url(&format!("/api/labs/{lab}/dead-letters?format=ndjson&cause=attempts_used_up"));
    let response = app.client.get(url).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    assert!(response.headers().get("content-length").is_none(), "streamed, not buffered");
    let text = response.text().await.unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let ids: Vec<u64> = lines.iter().map(|l| l["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, sorted([down, timed_out.clone()].concat()));
    for line in &lines {
        let applied = timed_out.contains(&line["id"].as_u64().unwrap());
        assert_eq!(line["attempts"].as_array().unwrap().len(), if applied { 1 } else { 2 }, "{line}");
        assert_eq!(line["applied"], applied, "{line}");
    }
}

#[tokio::test]
async fn an_export_of_more_letters_than_a_chunk_holds_keeps_them_all() {
    let app = TestApp::spawn().await;
    let (lab, ids) = queue_of(&app, 450).await;
    let url = app.url(&format!("/api/labs/{lab}/dead-letters?format=ndjson"));
    let text = app.client.get(url).send().await.unwrap().text().await.unwrap();
    let exported: Vec<u64> =
        text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].as_u64().unwrap()).collect();
    assert_eq!(exported, ids);
}

#[tokio::test]
async fn exports_share_the_clients_allowance_of_bytes_with_snapshots() {
    let burst = 60_000;
    let limits = retrylab::config::Limits {
        snapshot_bytes_per_s: 1,
        snapshot_burst_bytes: burst,
        ..Default::default()
    };
    // Behind a proxy, so the exporter is an address of its own: the test's own reads of the
    // lab while it fills come from another and draw on another allowance.
    let mut config = crate::helpers::config(limits, Default::default());
    config.exposure.client_ip_header = Some("fly-client-ip".into());
    let app = TestApp::spawn_config(config).await;
    let (lab, ids) = queue_of(&app, 60).await;
    let url = app.url(&format!("/api/labs/{lab}/dead-letters?format=ndjson"));
    let get = |url: String, from: &'static str| app.client.get(url).header("Fly-Client-IP", from).send();
    // Each export costs about its size: the burst lets a few through, then the rate (a byte a
    // second) refuses the next, naming the limit, before a byte of it is sent.
    let (mut read, mut largest, mut exports) = (0, 0, 0);
    let refused = loop {
        let response = get(url.clone(), "203.0.113.7").await.unwrap();
        if response.status() != StatusCode::OK {
            break response;
        }
        let text = response.text().await.unwrap();
        assert_eq!(text.lines().count(), ids.len(), "a whole export");
        (read, largest, exports) = (read + text.len(), largest.max(text.len()), exports + 1);
        let within = read as u64 <= burst + 2 * largest as u64;
        assert!(exports < 1000 && within, "{read} bytes in {exports} exports");
    };
    assert!(exports >= 2, "the burst of {burst} bytes holds more than one export of {largest}");
    assert!(read as u64 + 2 * largest as u64 >= burst, "only {read} bytes exported before the limit");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["limit"], "snapshot_bytes_per_s", "{body}");
    // The lab's snapshot draws on the same allowance; another address has its own.
    let snapshot = get(app.url(&format!("/api/labs/{lab}")), "203.0.113.7").await.unwrap();
    assert_eq!(snapshot.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(get(url, "198.51.100.9").await.unwrap().status(), StatusCode::OK, "another client");
}

#[tokio::test]
async fn metrics_show_the_depth_by_cause_and_the_age_of_the_oldest() {
    let app = TestApp::spawn().await;
    let Mixed { lab, .. } = mixed_queue(&app).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let value = |name: &str| -> f64 {
        let line =
            text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(value(r#"retrylab_dead_letter_depth_by_cause{cause="attempts_used_up"}"#), 5.0);
    assert_eq!(value(r#"retrylab_dead_letter_depth_by_cause{cause="time_budget"}"#), 2.0);
    let age = value(&format!(r#"retrylab_dead_letter_oldest_age_seconds{{lab="{lab}"}}"#));
    let overall = value("retrylab_dead_letter_oldest_age_overall_seconds ");
    assert!((0.3..60.0).contains(&age), "the first letters are at least 300 ms old: {age}");
    assert!(overall >= age, "{overall} < {age}");
}

#[tokio::test]
async fn metrics_count_the_long_holds_of_a_labs_lock_by_length() {
    let app = TestApp::spawn().await;
    let _queue = queue_of(&app, 300).await;
    let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let value = |name: &str| -> f64 {
        let line =
            text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let steps = [1, 5, 10, 25, 50, 100, 250, 1000];
    let counts: Vec<f64> = steps
        .iter()
        .map(|ms| value(&format!(r#"retrylab_lab_lock_long_holds_total{{at_least_ms="{ms}"}}"#)))
        .collect();
    assert!(counts.windows(2).all(|w| w[0] >= w[1]), "a hold counts at every step it reached: {counts:?}");
    // The counts are read before the longest hold, which only grows: it is at least the
    // highest step that counted a hold (filling the queue took the lock for a millisecond or
    // more at least once on any machine slow enough to matter; none is asserted).
    let longest = value("retrylab_lab_lock_longest_hold_seconds ");
    let reached = steps.iter().zip(&counts).filter(|(_, n)| **n > 0.0).map(|(ms, _)| *ms).next_back();
    if let Some(ms) = reached {
        assert!(longest >= ms as f64 / 1000.0, "{longest} s against {counts:?}");
    }
}

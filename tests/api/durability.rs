//! Accepted means durable: the lab survives a SIGKILL of the real binary, a crash of its
//! client, and a restart; its retention windows and its quarantine hold.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use retrylab::config::{Limits, Retention};
use serde_json::{Value, json};

use crate::helpers::{Binary, TestApp, config, counter, fresh_db, messages};

const PATIENCE: Duration = Duration::from_secs(60);

fn settled(snapshot: &Value) -> bool {
    ["queued", "in_flight", "backing_off"].iter().all(|c| counter(snapshot, c) == 0)
}

fn dead_letter_ids(snapshot: &Value) -> Vec<u64> {
    snapshot["dead_letters"].as_array().unwrap().iter().map(|d| d["id"].as_u64().unwrap()).collect()
}

/// Every applied key in the store was applied exactly once, and there are `expected` of them.
fn assert_each_key_applied_once(db: &Path, expected: u64) {
    let store = rusqlite::Connection::open(db).unwrap();
    let (keys, not_once): (u64, u64) = store
        .query_row("SELECT COUNT(*), COALESCE(SUM(applied != 1), 0) FROM idempotency_keys", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!((keys, not_once), (expected, 0), "applied keys, keys not applied exactly once");
}

/// Settings under which a 1,000-message burst takes a second or two.
async fn flaky_lab(app: &TestApp) -> String {
    let lab = app.new_lab().await;
    app.put(&lab, "policy", r#"{"base_ms": 40, "cap_ms": 400, "timeout_ms": 1000}"#).await;
    app.put(&lab, "downstream", r#"{"mode": "flaky", "latency_ms": [5, 20], "retry_after_s": 0}"#).await;
    lab
}

/// The first burst may have settled by the time a crash lands on a fast machine; a second one
/// of 50, against a downstream that is down and with waits of at least half a second, is
/// certain to be mid-round (nine waits, 4.5 s or more) when it does.
async fn burst_mid_round(app: &TestApp, lab: &str) {
    app.put(lab, "policy", r#"{"base_ms": 1000, "cap_ms": 1000, "multiplier": 1, "max_attempts": 10}"#).await;
    app.set_mode(lab, "down").await;
    app.burst(lab, 50).await;
}

/// The end of both crash stories: the survivors settle, then a healthy replay delivers all.
async fn finish_and_replay(app: &TestApp, lab: &str, db: &Path, dead_before: &[u64], total: u64) {
    let settled = app.wait_for(lab, PATIENCE, settled).await;
    assert_eq!(messages(&settled).len() as u64, total, "no accepted message is lost");
    assert_eq!(counter(&settled, "delivered") + counter(&settled, "dead_letter"), total);
    assert_eq!(counter(&settled, "applied_twice"), 0);
    let dead_after = dead_letter_ids(&settled);
    assert!(dead_before.iter().all(|id| dead_after.contains(id)), "dead letters survive the crash");

    app.set_mode(lab, "healthy").await;
    let (status, _) = app.replay(lab, "{}").await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let done = app.wait_for(lab, PATIENCE, |s| counter(s, "delivered") == total).await;
    assert_eq!(counter(&done, "applied"), total);
    assert_eq!(counter(&done, "applied_twice"), 0);
    app.wait_for(lab, PATIENCE, |_| true).await;
    // Give the last commit a moment, then check the store itself.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_each_key_applied_once(db, total);
}

#[tokio::test]
async fn a_sigkill_mid_burst_loses_nothing_and_applies_nothing_twice() {
    let db = fresh_db();
    let server = Binary::start(&db);
    let lab = flaky_lab(&server.app).await;
    let accepted = server.app.burst(&lab, 1000).await;
    assert_eq!(accepted.len(), 1000);
    server
        .app
        .wait_for(&lab, PATIENCE, |s| counter(s, "delivered") >= 200 && counter(s, "dead_letter") >= 1)
        .await;
    let dead_before = dead_letter_ids(&server.app.snapshot(&lab).await);
    burst_mid_round(&server.app, &lab).await;
    // A settings change is answered only once everything before it is committed.
    server.app.put(&lab, "policy", "{}").await;
    server.kill();

    let restarted = Binary::start(&db);
    let resumed = restarted.app.snapshot(&lab).await;
    assert_eq!(messages(&resumed).len(), 1050, "every accepted message is still there");
    assert!(!settled(&resumed), "the kill landed mid-round: {}", resumed["counters"]);
    restarted.app.set_mode(&lab, "healthy").await;
    let interrupted = messages(&resumed)
        .iter()
        .flat_map(|m| m["attempts"].as_array().unwrap())
        .filter(|a| a["outcome"] == "interrupted")
        .count();
    println!("{interrupted} attempts were cut off by the kill");
    finish_and_replay(&restarted.app, &lab, &db, &dead_before, 1050).await;
}

#[tokio::test]
async fn crashing_the_client_resumes_from_the_store() {
    let config = config(Limits::default(), Retention::default());
    let db = config.db.clone();
    let app = TestApp::spawn_config(config).await;
    let lab = flaky_lab(&app).await;
    app.burst(&lab, 1000).await;
    app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") >= 200 && counter(s, "dead_letter") >= 1).await;
    let dead_before = dead_letter_ids(&app.snapshot(&lab).await);
    burst_mid_round(&app, &lab).await;

    let (status, body) = app.call(Method::POST, &format!("/api/labs/{lab}/crash-client"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["resumed"].as_u64().unwrap() >= 50, "the second burst was cut off and resumed: {body}");
    app.set_mode(&lab, "healthy").await;
    finish_and_replay(&app, &lab, &db, &dead_before, 1050).await;
}

#[tokio::test]
async fn an_applied_key_is_replayed_from_the_store_after_a_restart() {
    let config = config(Limits::default(), Retention::default());
    let db = config.db.clone();
    let (first, server) = TestApp::spawn_stoppable(config).await;
    let lab = first.new_lab().await;
    first.put(&lab, "downstream", r#"{"latency_ms": [1, 1]}"#).await;
    let url = format!("/labs/{lab}/downstream");
    let send = |app: &TestApp| {
        app.client.post(app.url(&url)).header("Idempotency-Key", "survivor").json(&json!({"n": 1})).send()
    };
    let original = send(&first).await.unwrap();
    assert_eq!(original.status(), StatusCode::OK);
    let original = original.bytes().await.unwrap();
    server.stop().await;

    let second = TestApp::spawn_config(retrylab::config::Config { db, ..config_defaults() }).await;
    let repeat = send(&second).await.unwrap();
    assert_eq!(repeat.headers()["idempotent-replayed"], "true");
    assert_eq!(repeat.bytes().await.unwrap(), original, "the stored answer, byte for byte");
    let snapshot = second.snapshot(&lab).await;
    assert_eq!((counter(&snapshot, "applied"), counter(&snapshot, "applied_twice")), (1, 0));
}

#[tokio::test]
async fn what_a_lab_measured_and_marked_survives_a_restart() {
    let config = config(Limits::default(), Retention::default());
    let db = config.db.clone();
    let (first, server) = TestApp::spawn_stoppable(config).await;
    let lab = first.fast_lab().await;
    let breaker = r#"{"breaker": {"failure_threshold": 3, "open_ms": 60000, "half_open_probes": 1}}"#;
    first.put(&lab, "policy", breaker).await;
    first.set_mode(&lab, "down").await;
    first.burst(&lab, 10).await;
    let measured = first
        .wait_for(&lab, PATIENCE, |s| {
            settled(s) && counter(s, "dead_letter") == 10 && s["breaker"]["state"] == "open"
        })
        .await;
    assert!(!measured["load"]["bins"].as_array().unwrap().is_empty());
    assert!(!measured["breaker"]["changes"].as_array().unwrap().is_empty());
    let marked = measured["markers"].as_array().unwrap().clone();
    assert!(marked.iter().any(|m| m["kind"] == "settings"), "{marked:?}");
    server.stop().await;

    let again = retrylab::config::Config { db: db.clone(), ..config_defaults() };
    let (second, server) = TestApp::spawn_stoppable(again).await;
    let restored = second.snapshot(&lab).await;
    assert_eq!(restored["load"]["bins"], measured["load"]["bins"], "the load chart, bin for bin");
    let changes = restored["breaker"]["changes"].as_array().unwrap();
    let before = measured["breaker"]["changes"].as_array().unwrap();
    assert_eq!(changes[..before.len()], before[..], "the breaker's history");
    assert_eq!(changes[before.len()..].len(), 1, "{changes:?}");
    assert_eq!(changes.last().unwrap()["state"], "closed", "a restarted client's breaker starts closed");
    assert_eq!(restored["breaker"]["state"], "closed");
    let markers = restored["markers"].as_array().unwrap();
    assert_eq!(markers[..marked.len()], marked[..], "the markers from before");
    assert_eq!(markers.last().unwrap()["kind"], "restart", "and the restart's own");

    // A reset clears all of it, in the store too.
    let (status, _) = second.call(Method::POST, &format!("/api/labs/{lab}/reset"), None).await;
    assert!(status.is_success(), "{status}");
    server.stop().await;
    let third = TestApp::spawn_config(retrylab::config::Config { db, ..config_defaults() }).await;
    let cleared = third.snapshot(&lab).await;
    let kinds: Vec<&Value> = cleared["markers"].as_array().unwrap().iter().map(|m| &m["kind"]).collect();
    assert_eq!(kinds, ["restart"], "only the last restart's marker");
    assert!(cleared["load"]["bins"].as_array().unwrap().is_empty(), "{cleared}");
    assert!(cleared["breaker"]["changes"].as_array().unwrap().is_empty());
}

fn config_defaults() -> retrylab::config::Config {
    config(Limits::default(), Retention::default())
}

#[tokio::test]
async fn retention_expires_keys_dead_letters_and_idle_labs() {
    let retention = Retention {
        key_ttl_s: 1,
        dead_letter_ttl_s: 1,
        idle_lab_ttl_s: 4,
        sweep_interval_ms: 50,
        ..Default::default()
    };
    // A one-second dedup window covers rounds of at most 0.9 s.
    let limits = Limits { max_retry_duration_ms: 900, ..Default::default() };
    let app = TestApp::spawn_config(config(limits, retention)).await;
    let lab = app.fast_lab().await;
    app.set_mode(&lab, "down").await;
    app.burst(&lab, 2).await;
    let dead = app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 2).await;
    assert_eq!(dead["retention"]["dead_letter_ttl_s"], 1, "the windows are in the snapshot");
    // A key applied directly, then forgotten after the dedup window.
    app.set_mode(&lab, "healthy").await;
    let post = || {
        app.client
            .post(app.url(&format!("/labs/{lab}/downstream")))
            .header("Idempotency-Key", "short-lived")
            .header("content-type", "application/json")
            .body("{}")
            .send()
    };
    assert_eq!(post().await.unwrap().status(), StatusCode::OK);
    let gone = app.wait_for(&lab, PATIENCE, |s| s["dead_letters"].as_array().unwrap().is_empty()).await;
    assert!(messages(&gone).is_empty(), "expired dead letters go with their messages");
    // The key was applied before the dead letters expired; it is at least 1.2 s old now, and
    // the lab (whose last event was an expiry) has seconds left before it is idle for 4 s.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let fresh = post().await.unwrap();
    assert_eq!(fresh.status(), StatusCode::OK, "the lab is still there");
    assert!(fresh.headers().get("idempotent-replayed").is_none(), "after the window the key is new again");

    // Nobody touches the lab now: after the idle window it is deleted.
    let start = Instant::now();
    loop {
        let status = app.client.get(app.url(&format!("/api/labs/{lab}"))).send().await.unwrap().status();
        if status == StatusCode::NOT_FOUND {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the idle lab was never purged");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_message_that_keeps_failing_is_quarantined() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    app.put(&lab, "policy", r#"{"quarantine_after": 1, "max_attempts": 2}"#).await;
    app.set_mode(&lab, "down").await;
    let ids = app.burst(&lab, 1).await;
    app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 1).await;
    let (status, _) = app.replay(&lab, "{}").await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let again = app.wait_for(&lab, PATIENCE, |s| counter(s, "quarantined") == 1).await;
    assert_eq!(again["dead_letters"][0]["quarantined"], true);
    assert_eq!(again["dead_letters"][0]["round"], 1);

    let (status, body) = app.replay(&lab, "{}").await;
    assert_eq!(
        (status, body["message_ids"].clone()),
        (StatusCode::ACCEPTED, json!([])),
        "replay all skips it"
    );
    let by_id = json!({ "ids": ids }).to_string();
    let (status, problem) = app.replay(&lab, &by_id).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(problem["detail"].as_str().unwrap().contains("confirm_quarantined"), "{problem}");
    let confirmed = json!({ "ids": ids, "confirm_quarantined": true }).to_string();
    app.set_mode(&lab, "healthy").await;
    let (status, _) = app.replay(&lab, &confirmed).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") == 1 && counter(s, "quarantined") == 0).await;
}

#[tokio::test]
async fn sigterm_exits_cleanly_within_five_seconds() {
    let db = fresh_db();
    let mut server = Binary::start(&db);
    let lab = server.app.new_lab().await;
    // Slow answers keep requests open when the signal arrives.
    server.app.put(&lab, "downstream", r#"{"mode": "slow", "slow_ms": [20000, 20000]}"#).await;
    server.app.burst(&lab, 20).await;
    server.app.wait_for(&lab, PATIENCE, |s| counter(s, "applied") == 20).await;
    let signalled = Instant::now();
    let killed = Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(signalled.elapsed() < Duration::from_secs(5), "still running 5 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exited with {status}");
    // What was in flight resumes on the next start.
    let restarted = Binary::start(&db);
    let snapshot = restarted.app.snapshot(&lab).await;
    assert_eq!(messages(&snapshot).len(), 20);
    assert_eq!(counter(&snapshot, "applied"), 20, "slow mode had applied every write before the answer");
}

/// docs/events.md is the page's contract: what it says survives a restart must be what
/// `what_a_lab_measured_and_marked_survives_a_restart` shows surviving.
#[test]
fn the_events_doc_says_the_breaker_markers_and_load_survive_a_restart() {
    let doc = include_str!("../../docs/events.md").replace('\n', " ");
    assert!(!doc.contains("live in memory"), "docs/events.md says breaker, markers or load live in memory");
    assert!(!doc.contains("starts them afresh"), "docs/events.md says a restart starts them afresh");
    assert!(
        doc.contains("Breaker changes, markers and load bins are stored with the lab")
            && doc.contains("survive a restart"),
        "docs/events.md says what survives a restart"
    );
}

/// A comparison's document from `app`.
async fn comparison(app: &TestApp, id: &str) -> Value {
    let (status, report) = app.call(Method::GET, &format!("/api/comparisons/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    report
}

/// A `metastable` comparison killed while its traffic runs, before its slowdown (3 s in): the
/// server that starts again never judges a script that did not run. Each run that was going
/// is marked interrupted with the step it lost (the slowdown, step 1), the comparison is done,
/// nothing is crowned, and the warning says what was lost; a second restart says the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comparison_killed_mid_script_is_marked_with_the_step_it_lost() {
    let _turn = crate::helpers::OPEN_SYSTEM_RUNS.lock().await;
    let db = fresh_db();
    let server = Binary::start(&db);
    let body = json!({"scenario": "metastable", "seed": 5, "runs": 1, "policies": ["none", "budget"]});
    let asked = Instant::now();
    let (status, created) = server.app.call(Method::POST, "/api/comparisons", Some(&body.to_string())).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    // Its traffic is going in both labs, then a little longer: the kill lands about 1.2 s in.
    loop {
        let report = comparison(&server.app, &id).await;
        let columns = report["columns"].as_array().unwrap();
        if columns.iter().all(|c| c["figures"]["messages"].as_u64() > Some(0)) {
            break;
        }
        assert!(asked.elapsed() < Duration::from_secs(2), "no traffic within 2 s: {report}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(1_200).saturating_sub(asked.elapsed())).await;
    let report = comparison(&server.app, &id).await;
    assert_eq!(report["done"], false, "{report}");
    let killed_at = asked.elapsed();
    server.kill();
    assert!(killed_at < Duration::from_millis(2_800), "killed {killed_at:?} in: after the slowdown was due");

    let restarted = Binary::start(&db);
    let report = comparison(&restarted.app, &id).await;
    let assert_marked = |report: &Value| {
        assert_eq!(report["done"], true, "{report}");
        for column in report["columns"].as_array().unwrap() {
            assert_eq!(
                (column["interrupted"].as_bool(), column["lost_step"].as_u64()),
                (Some(true), Some(1)),
                "{column}"
            );
            assert_eq!(column["done"], true, "{column}");
        }
        assert_eq!(report["verdict"]["best"], json!([]), "{report}");
        let warning = report["warning"].as_str().unwrap_or_else(|| panic!("no warning: {report}"));
        assert!(warning.contains("the downstream's change at 3000 ms"), "{warning}");
        for policy in report["policies"].as_array().unwrap() {
            assert!(policy["runs"].as_array().unwrap().iter().all(|r| r["valid"] == false), "{policy}");
            assert_eq!(policy["median"], json!({}), "no figure of a cut run is summarized: {policy}");
        }
    };
    assert_marked(&report);
    restarted.kill();
    let again = Binary::start(&db);
    assert_marked(&comparison(&again.app, &id).await);
}

/// Killed right after its 201, before its labs may have had their burst: after the restart the
/// comparison is done at once (its first run cut short, its second never started), not
/// `done: false` forever.
#[tokio::test]
async fn a_comparison_killed_right_after_its_201_is_done_after_the_restart() {
    let db = fresh_db();
    let server = Binary::start(&db);
    let body = json!({"scenario": "outage", "burst": 20, "seed": 2, "runs": 2, "policies": ["none", "full"]});
    let (status, created) = server.app.call(Method::POST, "/api/comparisons", Some(&body.to_string())).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    server.kill();
    let restarted = Binary::start(&db);
    let report = comparison(&restarted.app, created["id"].as_str().unwrap()).await;
    assert_eq!(report["done"], true, "{report}");
    for column in report["columns"].as_array().unwrap() {
        assert_eq!(column["interrupted"], true, "{column}");
        // The first run lost a step, or its drain (2, the script's length); the second never began.
        match column["run"].as_u64().unwrap() {
            0 => assert!(column["lost_step"].as_u64().is_some_and(|s| s <= 2), "{column}"),
            // Issue 61: interrupted, not waiting too; it waits for nothing now.
            _ => assert_eq!((column["waiting"].as_bool(), column["lost_step"].as_u64()), (Some(false), None)),
        }
    }
    assert_eq!(report["verdict"]["best"], json!([]), "{report}");
    assert!(report["warning"].as_str().is_some(), "{report}");
}

/// A run the server saw finish stays finished across a restart, whatever its lab did after:
/// here a burst sent by hand into one of its labs, against a downstream that is down, is still
/// being delivered when the server is killed.
#[tokio::test]
async fn a_finished_run_is_not_cut_short_by_what_its_lab_did_after() {
    let db = fresh_db();
    let server = Binary::start(&db);
    // Every run counts at this threshold: no late run is run again after the report says done.
    let body = json!({"scenario": "outage", "burst": 5, "seed": 3, "runs": 1, "late_threshold_ms": 1000, "policies": ["none", "full"]});
    let (status, created) = server.app.call(Method::POST, "/api/comparisons", Some(&body.to_string())).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let started = Instant::now();
    let report = loop {
        let report = comparison(&server.app, &id).await;
        if report["done"] == true {
            break report;
        }
        assert!(started.elapsed() < PATIENCE, "the comparison did not finish: {report}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The driver notes the end at its next look, every 100 ms.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lab = report["columns"][0]["lab"].as_str().unwrap().to_owned();
    server.app.put(&lab, "downstream", r#"{"mode": "down"}"#).await;
    server.app.burst(&lab, 5).await;
    server.kill();
    let restarted = Binary::start(&db);
    let report = comparison(&restarted.app, &id).await;
    for column in report["columns"].as_array().unwrap() {
        assert_eq!(
            (column["interrupted"].as_bool(), column["lost_step"].as_u64()),
            (Some(false), None),
            "{column}"
        );
    }
    assert_eq!(report["done"], true, "{report}");
    assert_eq!(report["warning"], Value::Null, "{report}");
}

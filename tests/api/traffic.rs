//! Steady traffic: new messages at a rate, open-loop, each accepted as a burst's are; its
//! markers, its refusals at the source, its resumption after a restart, and the window over
//! settled messages that lets it run for long.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use retrylab::config::{Limits, Retention};
use serde_json::Value;

use crate::helpers::{Binary, TestApp, config, counter, fresh_db, messages};

const PATIENCE: Duration = Duration::from_secs(60);

fn traffic(snapshot: &Value, field: &str) -> u64 {
    snapshot["traffic"][field]
        .as_u64()
        .unwrap_or_else(|| panic!("no traffic.{field}: {}", snapshot["traffic"]))
}

fn bins_sum(snapshot: &Value, field: &str) -> u64 {
    snapshot["load"]["bins"].as_array().unwrap().iter().map(|b| b[field].as_u64().unwrap()).sum()
}

fn settled(snapshot: &Value) -> bool {
    ["queued", "in_flight", "backing_off"].iter().all(|c| counter(snapshot, c) == 0)
}

#[tokio::test]
async fn traffic_runs_at_its_rate_is_marked_and_stops() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    let set = app.put(&lab, "traffic", r#"{"rate_per_s": 100, "arrivals": "even"}"#).await;
    assert_eq!((set["rate_per_s"].as_f64(), set["arrivals"].as_str()), (Some(100.0), Some("even")));
    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let running = app.snapshot(&lab).await;
    let elapsed_s = started.elapsed().as_secs_f64();
    let sent = traffic(&running, "sent");
    // 100/s for the time measured here; the server's clock began a moment earlier, so more
    // than that is allowed a little, and a busy machine may lag behind, never run ahead.
    let expected = 100.0 * elapsed_s;
    assert!(
        sent as f64 >= expected * 0.75 && sent as f64 <= expected * 1.1 + 5.0,
        "{sent} in {elapsed_s:.2} s"
    );
    assert_eq!(running["traffic"]["rate_per_s"], 100.0);
    assert!(running["traffic"]["late_ms_p99"].as_f64().is_some());

    let stopped = app.put(&lab, "traffic", r#"{"rate_per_s": 0}"#).await;
    assert_eq!(stopped["rate_per_s"], 0.0);
    let at_stop = stopped["sent"].as_u64().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let done = app.wait_for(&lab, PATIENCE, settled).await;
    assert_eq!(traffic(&done, "sent"), at_stop, "nothing arrives once stopped");
    assert_eq!(counter(&done, "delivered"), at_stop, "every arrival delivered against a healthy endpoint");
    assert_eq!(bins_sum(&done, "offered"), at_stop, "the load bins count each arrival as offered");
    assert_eq!(bins_sum(&done, "delivered"), at_stop, "and each delivery as goodput");
    let labels: Vec<&str> =
        done["markers"].as_array().unwrap().iter().filter_map(|m| m["label"].as_str()).collect();
    assert!(labels.contains(&"traffic: 100 msg/s, even"), "{labels:?}");
    assert!(labels.contains(&"traffic stopped"), "{labels:?}");
}

#[tokio::test]
async fn traffic_for_a_while_ends_by_itself_with_a_marker() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    let set = app.put(&lab, "traffic", r#"{"rate_per_s": 200, "for_ms": 300}"#).await;
    assert_eq!(set["arrivals"], "poisson", "Poisson unless told otherwise");
    assert!(set["until_ms"].as_u64().is_some());
    let ended = app.wait_for(&lab, PATIENCE, |s| s["traffic"]["rate_per_s"] == 0.0 && settled(s)).await;
    let sent = traffic(&ended, "sent");
    // 60 expected in 300 ms; a Poisson count that far off its mean is rarer than one in a million.
    assert!((25..=100).contains(&sent), "{sent} arrivals in 300 ms at 200/s");
    let last = ended["markers"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["kind"].as_str(), last["label"].as_str()), (Some("scheduled"), Some("traffic ended")));
}

#[tokio::test]
async fn arrivals_past_the_active_limit_are_refused_at_the_source_and_counted() {
    let limits = Limits { max_active_messages_per_lab: 5, ..Limits::default() };
    let app = TestApp::spawn_with(limits).await;
    let lab = app.fast_lab().await;
    // Each delivery takes a second: five are owed at once, the rest of the arrivals cannot be.
    app.put(&lab, "downstream", r#"{"latency_ms": [1000, 1000]}"#).await;
    app.put(&lab, "traffic", r#"{"rate_per_s": 100, "arrivals": "even", "for_ms": 500}"#).await;
    let ended = app.wait_for(&lab, PATIENCE, |s| s["traffic"]["rate_per_s"] == 0.0 && settled(s)).await;
    let (sent, refused) = (traffic(&ended, "sent"), traffic(&ended, "refused"));
    assert!(sent <= 10, "at most the limit at a time, twice in 500 ms of 1 s deliveries: {sent}");
    assert!(refused >= 30, "the rest refused: {refused}");
    assert_eq!(bins_sum(&ended, "refused"), refused, "shown on the load chart");
    assert_eq!(bins_sum(&ended, "offered"), sent);
    assert_eq!(counter(&ended, "delivered"), sent);
}

#[tokio::test]
async fn arrivals_past_the_server_wide_active_limit_are_refused_at_the_source_and_counted() {
    // The whole server owes at most four deliveries; each lab alone could owe thousands.
    let limits = Limits { max_active_messages: 4, ..Limits::default() };
    let app = TestApp::spawn_with(limits).await;
    let labs = [app.fast_lab().await, app.fast_lab().await];
    for lab in &labs {
        app.put(lab, "downstream", r#"{"latency_ms": [1000, 1000]}"#).await;
    }
    for lab in &labs {
        // Accepted (200), not refused: the limit is met arrival by arrival, at the source.
        app.put(lab, "traffic", r#"{"rate_per_s": 100, "arrivals": "even", "for_ms": 500}"#).await;
    }
    let mut ended = Vec::new();
    for lab in &labs {
        ended.push(app.wait_for(lab, PATIENCE, |s| s["traffic"]["rate_per_s"] == 0.0 && settled(s)).await);
    }
    let sent: u64 = ended.iter().map(|s| traffic(s, "sent")).sum();
    let refused: u64 = ended.iter().map(|s| traffic(s, "refused")).sum();
    assert!(sent >= 1, "some arrivals got in: {sent}");
    assert!(sent <= 8, "at most four owed at once by both labs, twice in 500 ms of 1 s deliveries: {sent}");
    assert!(refused >= 60, "the rest of about 100 refused: {refused}");
    for snapshot in &ended {
        let (lab_sent, lab_refused) = (traffic(snapshot, "sent"), traffic(snapshot, "refused"));
        assert_eq!(bins_sum(snapshot, "refused"), lab_refused, "shown on each lab's load chart");
        assert_eq!(bins_sum(snapshot, "offered"), lab_sent);
        assert_eq!(counter(snapshot, "delivered"), lab_sent, "none accepted was lost");
        assert!(lab_sent + lab_refused >= 30, "each lab's arrivals all counted: {}", snapshot["traffic"]);
    }
}

#[tokio::test]
async fn bad_traffic_is_refused_naming_the_field_and_the_limit() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let path = format!("/api/labs/{lab}/traffic");
    for (body, names) in [
        (r#"{"rate_per_s": -1}"#, ["rate_per_s", "max_traffic_rate_per_s"]),
        (r#"{"rate_per_s": 5001}"#, ["rate_per_s", "max_traffic_rate_per_s"]),
        (r#"{"rate_per_s": 1e-300}"#, ["rate_per_s", "0.01"]),
        (r#"{"rate_per_s": 5e-324}"#, ["rate_per_s", "0.01"]),
        (r#"{"rate_per_s": 10, "for_ms": 3600001}"#, ["for_ms", "max_traffic_for_ms"]),
        (r#"{"rate_per_s": 10, "arrivals": "bursty"}"#, ["arrivals", "poisson"]),
        (r#"{"rate": 10}"#, ["rate", "rate_per_s"]),
    ] {
        let response = app
            .client
            .put(app.url(&path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let kind = response.headers()["content-type"].to_str().unwrap().to_owned();
        let problem: Value = response.json().await.unwrap();
        assert!(status.is_client_error(), "{body}: {status}");
        assert_eq!(kind, "application/problem+json", "{body}");
        let said = format!("{} {}", problem["detail"], problem["limit"]);
        for name in names {
            assert!(said.contains(name), "{body}: {said}");
        }
    }
    let snapshot = app.snapshot(&lab).await;
    assert_eq!(snapshot["traffic"]["rate_per_s"], 0.0, "nothing refused was applied");
    let missing = "/api/labs/6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a/traffic";
    let (status, problem) = app.call(Method::PUT, missing, Some(r#"{"rate_per_s": 1}"#)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
}

/// A store written before rates had a floor may hold one too small to pace: it is read back
/// at the lowest rate, and the lab serves and sends on.
#[tokio::test]
async fn a_stored_rate_below_the_lowest_is_read_back_at_the_lowest() {
    let config = config(Limits::default(), Retention::default());
    let db = config.db.clone();
    let (first, server) = TestApp::spawn_stoppable(config).await;
    let lab = first.fast_lab().await;
    first.put(&lab, "traffic", r#"{"rate_per_s": 50}"#).await;
    server.stop().await;
    let store = rusqlite::Connection::open(&db).unwrap();
    let tiny = r#"{"rate_per_s": 1e-300, "arrivals": "even", "until_ms": null}"#;
    assert_eq!(store.execute("UPDATE labs SET traffic = ?1 WHERE id = ?2", (tiny, &lab)).unwrap(), 1);
    drop(store);

    let again = retrylab::config::Config { db, ..config_defaults() };
    let (second, _server) = TestApp::spawn_stoppable(again).await;
    let snapshot = second.snapshot(&lab).await;
    assert_eq!(snapshot["traffic"]["rate_per_s"], 0.01, "{}", snapshot["traffic"]);
    second.put(&lab, "traffic", r#"{"rate_per_s": 100}"#).await;
    second.wait_for(&lab, PATIENCE, |s| traffic(s, "sent") >= 3).await;
}

#[tokio::test]
async fn traffic_resumes_at_its_rate_after_a_restart() {
    let config = config(Limits::default(), Retention::default());
    let db = config.db.clone();
    let (first, server) = TestApp::spawn_stoppable(config).await;
    let lab = first.fast_lab().await;
    first.put(&lab, "traffic", r#"{"rate_per_s": 50}"#).await;
    first.wait_for(&lab, PATIENCE, |s| traffic(s, "sent") >= 5).await;
    server.stop().await;
    let stored = {
        let again = retrylab::config::Config { db: db.clone(), ..config_defaults() };
        let (second, server) = TestApp::spawn_stoppable(again).await;
        let before = second.snapshot(&lab).await;
        let created_before = messages(&before).len();
        assert_eq!(before["traffic"]["rate_per_s"], 50.0, "the traffic's settings survived");
        let resumed = second.wait_for(&lab, PATIENCE, |s| messages(s).len() >= created_before + 5).await;
        let markers = resumed["markers"].as_array().unwrap();
        assert!(markers.iter().any(|m| m["kind"] == "restart"), "{markers:?}");
        second.put(&lab, "traffic", r#"{"rate_per_s": 0}"#).await;
        let stopped = second.wait_for(&lab, PATIENCE, settled).await;
        server.stop().await;
        stopped
    };
    assert_eq!(counter(&stored, "applied_twice"), 0);
    // Every message settled: delivered, or (cut off by the shutdown on a busy machine) a dead
    // letter; none lost.
    let settled = counter(&stored, "delivered") + counter(&stored, "dead_letter");
    assert_eq!(settled as usize, messages(&stored).len());
}

#[tokio::test]
async fn the_traffic_counts_carry_on_after_a_restart() {
    // Three deliveries owed at most, each taking 300 ms: at 100/s most arrivals are refused,
    // so both counts grow.
    let limits = Limits { max_active_messages_per_lab: 3, ..Limits::default() };
    let first_config = config(limits.clone(), Retention::default());
    let db = first_config.db.clone();
    let (first, server) = TestApp::spawn_stoppable(first_config).await;
    let lab = first.fast_lab().await;
    first.put(&lab, "downstream", r#"{"latency_ms": [300, 300]}"#).await;
    first.put(&lab, "traffic", r#"{"rate_per_s": 100, "arrivals": "even"}"#).await;
    let seen =
        first.wait_for(&lab, PATIENCE, |s| traffic(s, "sent") >= 6 && traffic(s, "refused") >= 20).await;
    let (sent, refused) = (traffic(&seen, "sent"), traffic(&seen, "refused"));
    server.stop().await;

    let again = retrylab::config::Config { db, ..config(limits, Retention::default()) };
    let (second, server) = TestApp::spawn_stoppable(again).await;
    let restored = second.snapshot(&lab).await;
    let (sent_after, refused_after) = (traffic(&restored, "sent"), traffic(&restored, "refused"));
    assert!(sent_after >= sent, "sent went from {sent} to {sent_after} over the restart");
    assert!(refused_after >= refused, "refused went from {refused} to {refused_after} over the restart");
    // Every message the lab holds came from the traffic: `sent` counts at least those.
    assert!(sent_after >= messages(&restored).len() as u64, "{sent_after} sent, {:?}", restored["traffic"]);
    // And the traffic, resumed, counts on from there.
    let on = second
        .wait_for(&lab, PATIENCE, |s| {
            traffic(s, "sent") > sent_after && traffic(s, "refused") > refused_after
        })
        .await;
    assert_eq!(on["traffic"]["rate_per_s"], 100.0);
    second.put(&lab, "traffic", r#"{"rate_per_s": 0}"#).await;
    server.stop().await;
}

#[tokio::test]
async fn the_traffic_counts_survive_a_sigkill_as_far_as_the_store_has_them() {
    let db = fresh_db();
    let args = ["--max-active-messages-per-lab", "3"];
    let server = Binary::start_with(&db, &args);
    let app = &server.app;
    let lab = app.fast_lab().await;
    app.put(&lab, "downstream", r#"{"latency_ms": [300, 300]}"#).await;
    app.put(&lab, "traffic", r#"{"rate_per_s": 100, "arrivals": "even"}"#).await;
    let seen = app.wait_for(&lab, PATIENCE, |s| traffic(s, "refused") >= 20).await;
    let refused = traffic(&seen, "refused");
    // Changes nobody waits for are committed within --commit-delay-ms (20 ms): a second is
    // plenty for the counts seen to reach the store, even on a busy machine.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    server.kill();

    let server = Binary::start_with(&db, &args);
    let restored = server.app.snapshot(&lab).await;
    let (sent_after, refused_after) = (traffic(&restored, "sent"), traffic(&restored, "refused"));
    assert!(refused_after >= refused, "refused went from {refused} to {refused_after} over the kill");
    // Each message the store kept was committed with the count that includes it.
    let held = messages(&restored).len() as u64;
    assert!(held > 0 && sent_after >= held, "{sent_after} sent, {held} messages held");
}

#[tokio::test]
async fn the_window_lets_old_deliveries_go_keeps_every_dead_letter_and_the_counts() {
    let limits = Limits { settled_window: 20, ..Limits::default() };
    let config = config(limits.clone(), Retention::default());
    let db = config.db.clone();
    let (first, server) = TestApp::spawn_stoppable(config).await;
    let lab = first.fast_lab().await;
    first.set_mode(&lab, "down").await;
    first.burst(&lab, 5).await;
    first.wait_for(&lab, PATIENCE, |s| settled(s) && counter(s, "dead_letter") == 5).await;
    first.set_mode(&lab, "healthy").await;
    first.burst(&lab, 200).await;
    let done = first.wait_for(&lab, PATIENCE, |s| settled(s) && counter(s, "delivered") == 200).await;
    let held = messages(&done);
    let delivered_held = held.iter().filter(|m| m["state"] == "delivered").count();
    assert!((20..=36).contains(&delivered_held), "the newest 20 and a margin stay: {delivered_held}");
    assert_eq!(held.iter().filter(|m| m["state"] == "dead_letter").count(), 5, "every dead letter stays");
    assert_eq!(done["dead_letters"].as_array().unwrap().len(), 5);
    let newest = held.iter().map(|m| m["id"].as_u64().unwrap()).max().unwrap();
    assert_eq!(newest, 205, "the newest are the ones kept");
    assert_eq!(bins_sum(&done, "delivered"), 200, "the load bins keep every delivery");
    assert_eq!(counter(&done, "applied"), 200);
    server.stop().await;

    let again = retrylab::config::Config { db, limits, ..config_defaults() };
    let (second, server) = TestApp::spawn_stoppable(again).await;
    let restored = second.snapshot(&lab).await;
    assert_eq!(counter(&restored, "delivered"), 200, "the count survives the restart");
    assert_eq!(messages(&restored).len(), held.len(), "and what left the window stays gone from the store");
    server.stop().await;
}

fn config_defaults() -> retrylab::config::Config {
    config(Limits::default(), Retention::default())
}

//! A lab at rest: idle past `--idle-lab-rest-ms`, watched by no page and owing nothing, it
//! leaves memory for the store, and the next request reads it back as it was.

use std::time::{Duration, Instant};

use retrylab::config::Retention;
use serde_json::Value;

use crate::helpers::{TestApp, config, counter};

/// Labs at rest, as `/metrics` counts them.
async fn resting_labs(app: &TestApp) -> u64 {
    let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let line = text.lines().find(|l| l.starts_with("retrylab_resting_labs ")).expect("the resting gauge");
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

async fn wait_for_resting(app: &TestApp, count: u64) {
    let start = Instant::now();
    while resting_labs(app).await != count {
        assert!(start.elapsed() < Duration::from_secs(20), "no {count} resting labs after 20 s");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// What a caller's request to the lab's endpoint was answered: status, replayed, body.
async fn send(app: &TestApp, lab: &str, key: &str) -> (u16, bool, String) {
    let response = app
        .client
        .post(app.url(&format!("/labs/{lab}/downstream")))
        .header("content-type", "application/json")
        .header("Idempotency-Key", key)
        .body(r#"{"order": 7}"#)
        .send()
        .await
        .unwrap();
    let replayed = response.headers().get("idempotent-replayed").is_some_and(|v| v == "true");
    (response.status().as_u16(), replayed, response.text().await.unwrap())
}

/// The parts of a snapshot a rest must not change.
fn kept(snapshot: &Value) -> Value {
    let fields = ["messages", "counters", "downstream", "policy", "outside", "markers", "load", "breaker"];
    fields.iter().map(|f| (f.to_string(), snapshot[f].clone())).collect::<serde_json::Map<_, _>>().into()
}

#[tokio::test]
async fn an_idle_lab_rests_in_the_store_and_wakes_as_it_was() {
    let retention = Retention { sweep_interval_ms: 50, idle_lab_rest_ms: 300, ..Default::default() };
    let app = TestApp::spawn_config(config(Default::default(), retention)).await;
    let (idle, watched) = (app.fast_lab().await, app.fast_lab().await);
    for lab in [&idle, &watched] {
        app.burst(lab, 5).await;
        app.wait_for(lab, Duration::from_secs(30), |s| counter(s, "delivered") == 5).await;
    }
    let first = send(&app, &idle, "order-7").await;
    assert_eq!((first.0, first.1), (200, false), "{first:?}");
    let before = app.snapshot(&idle).await;
    let watching = app.client.get(app.url(&format!("/api/labs/{watched}/events"))).send().await.unwrap();
    assert_eq!(watching.status(), 200);

    wait_for_resting(&app, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(resting_labs(&app).await, 1, "the watched lab stays in memory");
    let after = app.snapshot(&idle).await;
    assert_eq!(resting_labs(&app).await, 0, "a request wakes the lab");
    assert_eq!(kept(&after), kept(&before), "the lab wakes as it was");
    assert_eq!(counter(&after, "delivered"), 5);
    let repeat = send(&app, &idle, "order-7").await;
    assert_eq!(repeat, (200, true, first.2.clone()), "a key applied before the rest is answered as it was");
    let applied = counter(&app.snapshot(&idle).await, "applied");
    assert_eq!(
        (applied, counter(&before, "applied")),
        (6, 6),
        "five messages and the key, each applied once"
    );

    // It rests again, and new work wakes it and runs.
    wait_for_resting(&app, 1).await;
    app.burst(&idle, 3).await;
    let done = app.wait_for(&idle, Duration::from_secs(30), |s| counter(s, "delivered") == 8).await;
    assert_eq!(counter(&done, "applied_twice"), 0);
    drop(watching);
}

#[tokio::test]
async fn a_lab_at_rest_counts_against_max_labs_and_makes_room_first() {
    let retention = Retention { sweep_interval_ms: 50, idle_lab_rest_ms: 200, ..Default::default() };
    let limits = retrylab::config::Limits { max_labs: 2, ..Default::default() };
    let app = TestApp::spawn_config(config(limits, retention)).await;
    let old = app.fast_lab().await;
    wait_for_resting(&app, 1).await;
    let kept = app.fast_lab().await;
    let _watching = app.client.get(app.url(&format!("/api/labs/{kept}/events"))).send().await.unwrap();
    let newest = app.fast_lab().await;
    assert_eq!(resting_labs(&app).await, 0, "the resting lab made room");
    for (lab, status) in [(&old, 404), (&kept, 200), (&newest, 200)] {
        let response = app.client.get(app.url(&format!("/api/labs/{lab}"))).send().await.unwrap();
        assert_eq!(response.status(), status, "{lab}");
    }
}

#[tokio::test]
async fn a_lab_at_rest_is_deleted_once_idle_past_its_retention() {
    let retention =
        Retention { sweep_interval_ms: 50, idle_lab_rest_ms: 100, idle_lab_ttl_s: 1, ..Default::default() };
    let app = TestApp::spawn_config(config(Default::default(), retention)).await;
    let lab = app.fast_lab().await;
    wait_for_resting(&app, 1).await;
    wait_for_resting(&app, 0).await;
    let response = app.client.get(app.url(&format!("/api/labs/{lab}"))).send().await.unwrap();
    assert_eq!(response.status(), 404, "the idle lab was deleted from the store, not woken");
}

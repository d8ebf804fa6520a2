//! Many clients: a policy run by `clients` independent clients, as the instances of a
//! scaled-out service would be. Each message belongs to one (round-robin), and each client's
//! breaker opens on its own messages' failures only.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use retrylab::config::{Config, Limits, Retention};

use crate::helpers::{TestApp, config, counter};

const PATIENCE: Duration = Duration::from_secs(60);

fn settled(snapshot: &Value) -> bool {
    ["queued", "in_flight", "backing_off"].iter().all(|c| counter(snapshot, c) == 0)
}

#[tokio::test]
async fn with_ten_clients_each_breaker_opens_on_its_own_failures_only() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    let fresh = app.snapshot(&lab).await;
    assert_eq!(fresh["clients"]["count"], 1, "one client unless told otherwise");
    assert_eq!(fresh["policy"]["clients"], 1);

    // One attempt per message, a breaker that opens after two failures in a row.
    let policy = json!({"clients": 10, "max_attempts": 1,
        "breaker": {"failure_threshold": 2, "open_ms": 60000, "half_open_probes": 1}});
    app.put(&lab, "policy", &policy.to_string()).await;
    app.set_mode(&lab, "down").await;
    // Ten messages, one per client: each client has failed once, no breaker opens (one breaker
    // shared by all ten messages would have opened after the second).
    app.burst(&lab, 10).await;
    let once = app.wait_for(&lab, PATIENCE, |s| settled(s) && counter(s, "dead_letter") == 10).await;
    assert_eq!(once["clients"]["count"], 10);
    assert_eq!(
        once["clients"]["breakers"],
        json!({"closed": 10, "open": 0, "half_open": 0}),
        "{}",
        once["clients"]
    );
    assert_eq!(once["breaker"]["state"], "closed");
    // Two more: messages 11 and 12 belong to the first two clients, whose second failure it is.
    app.burst(&lab, 2).await;
    let twice = app
        .wait_for(&lab, PATIENCE, |s| {
            settled(s) && counter(s, "dead_letter") == 12 && s["clients"]["breakers"]["open"] == 2
        })
        .await;
    assert_eq!(twice["clients"]["breakers"], json!({"closed": 8, "open": 2, "half_open": 0}));
    assert_eq!(twice["breaker"]["state"], "open", "the first client's breaker, as the band draws it");
    let last = twice["clients"]["changes"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["open"].as_u64(), last["closed"].as_u64()), (Some(2), Some(8)), "{last}");
    // Eight more (13 to 20): the other eight clients' second failures, so all ten are open.
    // Then 21 and 22, the first two clients' again: short-circuited, nothing sent.
    app.burst(&lab, 8).await;
    app.wait_for(&lab, PATIENCE, |s| settled(s) && s["clients"]["breakers"]["open"] == 10).await;
    app.burst(&lab, 2).await;
    let after = app.wait_for(&lab, PATIENCE, |s| settled(s) && counter(s, "dead_letter") == 22).await;
    let outcome = |id: u64| {
        let message = after["messages"].as_array().unwrap().iter().find(|m| m["id"] == id).unwrap();
        message["attempts"][0]["outcome"].as_str().unwrap().to_owned()
    };
    assert_eq!(outcome(13), "http_error", "message 13 was the third client's first second failure: sent");
    assert_eq!((outcome(21).as_str(), outcome(22).as_str()), ("short_circuited", "short_circuited"));
    assert_eq!(counter(&after, "requests"), 20, "the short-circuited never reached the endpoint");
    assert_eq!(counter(&after, "applied_twice"), 0);
    // Back to one client: nothing of the others is left.
    app.put(&lab, "policy", r#"{"clients": 1}"#).await;
    assert_eq!(app.snapshot(&lab).await["clients"]["count"], 1);
}

#[tokio::test]
async fn clients_outside_one_to_the_cap_are_refused_naming_it() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    for (clients, names) in [(0, "clients"), (1001, "max_clients")] {
        let body = json!({ "clients": clients }).to_string();
        let (status, problem) = app.call(Method::PUT, &format!("/api/labs/{lab}/policy"), Some(&body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert!(problem["detail"].as_str().unwrap().contains(names), "{problem}");
    }
    app.put(&lab, "policy", r#"{"clients": 1000}"#).await;
    assert_eq!(app.snapshot(&lab).await["clients"]["count"], 1000);
}

/// Three clients whose third alone fails, so only its breaker opens (and stays open).
async fn third_clients_breaker_opened(app: &TestApp, lab: &str) -> Value {
    // One attempt each, a breaker that opens on the first failure and stays open.
    let policy = json!({"clients": 3, "max_attempts": 1,
        "breaker": {"failure_threshold": 1, "open_ms": 600000, "half_open_probes": 1}});
    app.put(lab, "policy", &policy.to_string()).await;
    // Messages 1 and 2 (the first two clients') are delivered; message 3, the third client's,
    // fails while the endpoint is down, and only that client's breaker opens.
    app.burst(lab, 2).await;
    app.wait_for(lab, PATIENCE, |s| settled(s) && counter(s, "delivered") == 2).await;
    app.set_mode(lab, "down").await;
    app.burst(lab, 1).await;
    let failed = app.wait_for(lab, PATIENCE, |s| settled(s) && counter(s, "dead_letter") == 1).await;
    assert_eq!(failed["clients"]["breakers"], json!({"closed": 2, "open": 1, "half_open": 0}));
    assert_eq!(failed["breaker"]["state"], "closed", "the first client's breaker stays closed");
    failed
}

#[tokio::test]
async fn the_dry_run_warns_when_only_client_2s_breaker_is_open() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    third_clients_breaker_opened(&app, &lab).await;
    app.set_mode(&lab, "healthy").await;

    let path = format!("/api/labs/{lab}/dead-letters/replay");
    let (status, dry) = app.call(Method::POST, &path, Some(r#"{"dry_run": true}"#)).await;
    assert_eq!(status, StatusCode::OK, "{dry}");
    assert_eq!((dry["count"].clone(), dry["mode"].clone()), (json!(1), json!("healthy")));
    assert_eq!(dry["breakers"], json!({"closed": 2, "open": 1, "half_open": 0}), "{dry}");
    let warning = dry["warning"].as_str().unwrap_or_else(|| panic!("no warning: {dry}"));
    assert!(warning.starts_with("1 of 3 circuit breakers are open"), "{warning}");
}

/// Every client's breaker history is stored, not the first client's alone: client 2's breaker
/// opened before the restart, and after it the breakers' history still says so, and says it
/// closed at the restart (which only a history read back open can say).
#[tokio::test]
async fn client_2s_breaker_history_survives_a_restart() {
    let settings = config(Limits::default(), Retention::default());
    let db = settings.db.clone();
    let (first, server) = TestApp::spawn_stoppable(settings).await;
    let lab = first.fast_lab().await;
    let failed = third_clients_breaker_opened(&first, &lab).await;
    let before = failed["clients"]["changes"].as_array().unwrap().clone();
    let opened = before.last().unwrap_or_else(|| panic!("no change noted: {}", failed["clients"]));
    assert_eq!((opened["open"].as_u64(), opened["closed"].as_u64()), (Some(1), Some(2)), "{opened}");
    server.stop().await;

    let again = Config { db, ..config(Limits::default(), Retention::default()) };
    let (second, server) = TestApp::spawn_stoppable(again).await;
    let restored = second.snapshot(&lab).await;
    let changes = restored["clients"]["changes"].as_array().unwrap();
    assert!(changes.len() >= before.len(), "{changes:?}");
    assert_eq!(changes[..before.len()], before[..], "the breakers' history from before the restart");
    let closed = &changes[before.len()..];
    assert_eq!(closed.len(), 1, "the restart closed client 2's breaker: {closed:?}");
    assert_eq!((closed[0]["open"].as_u64(), closed[0]["closed"].as_u64()), (Some(0), Some(3)), "{closed:?}");
    assert_eq!(restored["clients"]["breakers"], json!({"closed": 3, "open": 0, "half_open": 0}));
    assert_eq!(restored["breaker"]["changes"], json!([]), "the first client's breaker never changed");
    server.stop().await;
}

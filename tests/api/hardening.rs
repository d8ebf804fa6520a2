//! Hardening for running in public: what a public address shows, how recoveries take turns,
//! slow and greedy connections, memory bounds, and input in the wrong spelling or type.

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use retrylab::config::{Config, Limits};

use crate::helpers::{TestApp, config, counter, messages};

const PATIENCE: Duration = Duration::from_secs(60);

/// A server listening on every interface (as with `--port`), reached over loopback.
async fn spawn_public(config: Config) -> TestApp {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], 0))).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(retrylab::serve(listener, config, std::future::pending()));
    TestApp::at(format!("http://127.0.0.1:{port}"))
}

#[tokio::test]
async fn a_public_address_without_a_metrics_address_does_not_serve_metrics() {
    let app = spawn_public(config(Limits::default(), Default::default())).await;
    let lab = app.new_lab().await;
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(metrics.status(), StatusCode::NOT_FOUND, "lab ids stay off a public address");
    let body = metrics.text().await.unwrap();
    assert!(!body.contains(&lab), "{body}");
    assert_eq!(app.client.get(app.url("/healthz")).send().await.unwrap().status(), StatusCode::OK);
}

/// Attempt numbers of each round of each message: 1, 2, 3, ... with no repeats or gaps.
fn assert_one_delivery_loop_per_message(snapshot: &serde_json::Value) {
    for message in messages(snapshot) {
        let mut rounds: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
        for attempt in message["attempts"].as_array().unwrap() {
            rounds
                .entry(attempt["round"].as_u64().unwrap())
                .or_default()
                .push(attempt["n"].as_u64().unwrap());
        }
        for (round, numbers) in rounds {
            let expected: Vec<u64> = (1..=numbers.len() as u64).collect();
            assert_eq!(numbers, expected, "message {} round {round}: {}", message["id"], message["attempts"]);
        }
    }
}

#[tokio::test]
async fn concurrent_client_crashes_recover_one_at_a_time() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    app.put(&lab, "policy", r#"{"base_ms": 40, "cap_ms": 400, "timeout_ms": 1000}"#).await;
    app.put(&lab, "downstream", r#"{"mode": "flaky", "latency_ms": [5, 20], "retry_after_s": 0}"#).await;
    app.burst(&lab, 1000).await;
    for _ in 0..2 {
        app.wait_for(&lab, PATIENCE, |s| counter(s, "in_flight") > 0).await;
        let path = format!("/api/labs/{lab}/crash-client");
        let crash = || app.call(Method::POST, &path, None);
        let answers = futures_util::future::join_all((0..4).map(|_| crash())).await;
        for (status, body) in answers {
            assert_eq!(status, StatusCode::OK, "{body}");
        }
    }
    let settled = app
        .wait_for(&lab, PATIENCE, |s| {
            ["queued", "in_flight", "backing_off"].iter().all(|c| counter(s, c) == 0)
        })
        .await;
    assert_eq!(messages(&settled).len(), 1000);
    assert_eq!(counter(&settled, "delivered") + counter(&settled, "dead_letter"), 1000);
    assert_eq!(counter(&settled, "applied_twice"), 0);
    assert_one_delivery_loop_per_message(&settled);
}

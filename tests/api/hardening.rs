//! Hardening for running in public: what a public address shows, how recoveries take turns,
//! slow and greedy connections, memory bounds, and input in the wrong spelling or type.

use std::net::SocketAddr;

use reqwest::StatusCode;
use retrylab::config::{Config, Limits};

use crate::helpers::{TestApp, config};

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

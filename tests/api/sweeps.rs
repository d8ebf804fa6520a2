//! The idle-lab sweep and eviction never take what someone still needs: a watched lab, or
//! dead letters within their retention; and one address cannot cycle the whole store.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use retrylab::config::{Limits, Retention};

use crate::helpers::{TestApp, config, counter};

const PATIENCE: Duration = Duration::from_secs(30);

/// A lab whose one message is dead-lettered at once.
async fn lab_with_a_dead_letter(app: &TestApp) -> String {
    let lab = app.fast_lab().await;
    app.put(&lab, "policy", r#"{"max_attempts": 1}"#).await;
    app.set_mode(&lab, "down").await;
    app.burst(&lab, 1).await;
    app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 1).await;
    lab
}

async fn status_of(app: &TestApp, lab: &str) -> StatusCode {
    app.client.get(app.url(&format!("/api/labs/{lab}"))).send().await.unwrap().status()
}

#[tokio::test]
async fn the_idle_sweep_keeps_watched_labs_and_young_dead_letters() {
    let retention = Retention { idle_lab_ttl_s: 1, sweep_interval_ms: 50, ..Default::default() };
    let app = TestApp::spawn_config(config(Limits::default(), retention)).await;
    let watched = app.new_lab().await;
    let holding = lab_with_a_dead_letter(&app).await;
    let empty = app.new_lab().await;
    let mut stream = app.client.get(app.url(&format!("/api/labs/{watched}/events"))).send().await.unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    let _snapshot = stream.chunk().await.unwrap();
    // The empty, unwatched lab goes after a second idle: the sweep runs.
    let start = Instant::now();
    while status_of(&app, &empty).await != StatusCode::NOT_FOUND {
        assert!(start.elapsed() < PATIENCE, "the idle empty lab was never purged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Well past the idle window for the other two as well.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(status_of(&app, &watched).await, StatusCode::OK, "a watched lab is not idle");
    assert_eq!(status_of(&app, &holding).await, StatusCode::OK, "its dead letters are within retention");
    assert_eq!(app.snapshot(&holding).await["dead_letters"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn creating_labs_is_limited_per_client() {
    let limits = Limits { lab_create_burst: 3, lab_creates_per_hour: 1, ..Default::default() };
    let app = TestApp::spawn_with(limits).await;
    for _ in 0..3 {
        app.new_lab().await;
    }
    let (status, problem) = app.call(Method::POST, "/api/labs", None).await;
    assert_eq!(
        (status.as_u16(), problem["limit"].as_str()),
        (429, Some("lab_creates_per_hour")),
        "{problem}"
    );
    let page = app.client.get(app.url("/")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::TOO_MANY_REQUESTS, "opening / creates a lab too");
    assert!(page.headers().contains_key("retry-after"));
}

#[tokio::test]
async fn eviction_never_deletes_dead_letters_within_their_retention() {
    let app = TestApp::spawn_with(Limits { max_labs: 2, ..Default::default() }).await;
    let first = lab_with_a_dead_letter(&app).await;
    let second = lab_with_a_dead_letter(&app).await;
    let (status, problem) = app.call(Method::POST, "/api/labs", None).await;
    assert_eq!((status.as_u16(), problem["limit"].as_str()), (429, Some("max_labs")), "{problem}");
    for lab in [&first, &second] {
        assert_eq!(app.snapshot(lab).await["dead_letters"].as_array().unwrap().len(), 1);
    }
}

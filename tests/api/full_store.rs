//! A store that cannot write (a full disk, simulated with `--max-db-bytes`, SQLite's
//! `max_page_count`): refusals come quickly, say why, and leave nothing behind; `/healthz`
//! says the server is not ready; and the work resumes by itself once there is room again.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::helpers::{TestApp, config, counter, messages};

fn full_store(max_db_bytes: u64) -> retrylab::config::Config {
    retrylab::config::Config { max_db_bytes, ..config(Default::default(), Default::default()) }
}

async fn healthz(app: &TestApp) -> StatusCode {
    app.client.get(app.url("/healthz")).send().await.unwrap().status()
}

#[tokio::test]
async fn a_burst_the_store_cannot_keep_is_refused_fast_and_creates_nothing() {
    let app = TestApp::spawn_config(full_store(64 * 1024)).await;
    let lab = app.fast_lab().await;
    for _ in 0..2 {
        let started = Instant::now();
        let (status, problem) =
            app.call(Method::POST, &format!("/api/labs/{lab}/bursts"), Some(r#"{"count": 1000}"#)).await;
        assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{problem}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "refused in {:?}, not after a 10 s wait",
            started.elapsed()
        );
        assert!(problem["detail"].as_str().unwrap().contains("full"), "{problem}");
        let snapshot = app.snapshot(&lab).await;
        assert!(messages(&snapshot).is_empty(), "a refused burst leaves no message behind, retried or not");
    }
    // The refusal left nothing to write: the store writes again by itself.
    let start = Instant::now();
    while healthz(&app).await != StatusCode::OK {
        assert!(start.elapsed() < Duration::from_secs(10), "the store recovered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, _) =
        app.call(Method::POST, &format!("/api/labs/{lab}/bursts"), Some(r#"{"count": 2}"#)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "small work fits and goes on");
}

#[tokio::test]
async fn while_the_store_is_full_writes_change_nothing_and_work_resumes_once_there_is_room() {
    // The database gets half of it, the write-ahead log the other half.
    let app = TestApp::spawn_config(full_store(640 * 1024)).await;
    let (hog, other) = (app.fast_lab().await, app.fast_lab().await);
    // A thousand messages fit; the attempts they then make do not: the store fills up.
    app.put(&hog, "downstream", r#"{"mode": "down"}"#).await;
    app.put(&hog, "policy", r#"{"base_ms": 20, "cap_ms": 20, "max_attempts": 20}"#).await;
    app.burst(&hog, 1000).await;
    let start = Instant::now();
    while healthz(&app).await != StatusCode::SERVICE_UNAVAILABLE {
        assert!(start.elapsed() < Duration::from_secs(30), "the store filled up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let problem: Value = app.client.get(app.url("/healthz")).send().await.unwrap().json().await.unwrap();
    assert!(problem["detail"].as_str().unwrap().contains("not ready"), "{problem}");

    // A settings change is refused and not applied.
    let (status, _) =
        app.call(Method::PUT, &format!("/api/labs/{other}/downstream"), Some(r#"{"mode": "flaky"}"#)).await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE);
    assert_eq!(app.snapshot(&other).await["downstream"]["mode"], "healthy");
    // A write to the endpoint is refused and not applied: its retry will apply it.
    let post = || {
        app.client
            .post(app.url(&format!("/labs/{other}/downstream")))
            .header("Idempotency-Key", "order-1")
            .header("Content-Type", "application/json")
            .body(r#"{"n": 1}"#)
            .send()
    };
    assert_eq!(post().await.unwrap().status(), StatusCode::INSUFFICIENT_STORAGE);
    assert_eq!(counter(&app.snapshot(&other).await, "applied"), 0, "a refused write applied nothing");

    // Room again: the hog's reset deletes its rows; the store writes again by itself.
    let (status, _) = app.call(Method::POST, &format!("/api/labs/{hog}/reset"), None).await;
    assert!(status == StatusCode::OK || status == StatusCode::ACCEPTED, "{status}");
    let start = Instant::now();
    while healthz(&app).await != StatusCode::OK {
        assert!(start.elapsed() < Duration::from_secs(30), "the store recovered without a restart");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let retried = post().await.unwrap();
    assert_eq!(retried.status(), StatusCode::OK);
    assert!(retried.headers().get("idempotent-replayed").is_none(), "applied now, for the first time");
    let snapshot = app.snapshot(&other).await;
    assert_eq!((counter(&snapshot, "applied"), counter(&snapshot, "applied_twice")), (1, 0));
}

/// The database and its write-ahead log together, in bytes.
fn on_disk(db: &std::path::Path) -> u64 {
    let wal = std::path::PathBuf::from(format!("{}-wal", db.display()));
    [db.to_owned(), wal].iter().map(|p| std::fs::metadata(p).map_or(0, |m| m.len())).sum()
}

#[tokio::test]
async fn max_db_bytes_bounds_the_database_and_its_log_and_the_507_names_it() {
    let limit = 1_000_000;
    let config = full_store(limit);
    let db = config.db.clone();
    let app = TestApp::spawn_config(config).await;
    let (hog, other) = (app.fast_lab().await, app.fast_lab().await);
    app.put(&hog, "downstream", r#"{"mode": "down"}"#).await;
    app.put(&hog, "policy", r#"{"base_ms": 5, "cap_ms": 5, "max_attempts": 20}"#).await;
    let start = Instant::now();
    let mut most = 0;
    while healthz(&app).await != StatusCode::SERVICE_UNAVAILABLE {
        assert!(start.elapsed() < Duration::from_secs(60), "the store filled up");
        let _ = app.call(Method::POST, &format!("/api/labs/{hog}/bursts"), Some(r#"{"count": 200}"#)).await;
        most = most.max(on_disk(&db));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..20 {
        most = most.max(on_disk(&db));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(most <= limit, "the database and its log held {most} bytes, past the {limit} allowed");
    let (status, problem) =
        app.call(Method::PUT, &format!("/api/labs/{other}/downstream"), Some(r#"{"mode": "flaky"}"#)).await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{problem}");
    assert_eq!(problem["limit"], "max_db_bytes", "{problem}");
}

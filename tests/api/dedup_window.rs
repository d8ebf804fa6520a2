//! The dedup window against dead letters and retries: a key lives as long as a message may
//! still send it, settings that would break that are refused, and `applied_twice` counts a
//! write applied again after its key left the window.

use std::time::Duration;

use reqwest::StatusCode;
use retrylab::config::{Limits, Retention};

use crate::helpers::{TestApp, config, counter, messages};

const PATIENCE: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_replay_after_the_dedup_window_does_not_apply_the_write_again() {
    let retention =
        Retention { key_ttl_s: 3, dead_letter_ttl_s: 600, sweep_interval_ms: 500, ..Default::default() };
    let limits = Limits { max_retry_duration_ms: 2_000, ..Default::default() };
    let app = TestApp::spawn_config(config(limits, retention)).await;
    let lab = app.fast_lab().await;
    app.put(&lab, "policy", r#"{"max_attempts": 1, "timeout_ms": 300}"#).await;
    app.put(&lab, "downstream", r#"{"mode": "slow", "slow_ms": [1000, 1000]}"#).await;
    app.burst(&lab, 10).await;
    let dead = app
        .wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 10 && counter(s, "applied") == 10)
        .await;
    assert_eq!(counter(&dead, "applied"), 10, "every write was applied, every answer lost");
    // Past the 3 s window, with several sweeps.
    tokio::time::sleep(Duration::from_secs(5)).await;
    app.set_mode(&lab, "healthy").await;
    let (status, _) = app.replay(&lab, "{}").await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let done = app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") == 10).await;
    assert_eq!(
        (counter(&done, "applied"), counter(&done, "applied_twice")),
        (10, 0),
        "nothing applied twice"
    );
    for message in messages(&done) {
        let last = message["attempts"].as_array().unwrap().last().unwrap();
        assert_eq!(last["round"], 1);
        assert_eq!(last["replayed"], true, "the replay got the stored answer: {last}");
    }
}

async fn post_key(app: &TestApp, lab: &str, key: &str) -> reqwest::Response {
    app.client
        .post(app.url(&format!("/labs/{lab}/downstream")))
        .header("Idempotency-Key", key)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_write_applied_again_after_its_key_left_the_window_counts_as_applied_twice() {
    let retention = Retention { key_ttl_s: 1, sweep_interval_ms: 50, ..Default::default() };
    let limits = Limits { max_retry_duration_ms: 900, ..Default::default() };
    let config = config(limits, retention);
    let (app, server) = TestApp::spawn_stoppable(config.clone()).await;
    let lab = app.fast_lab().await;
    assert_eq!(post_key(&app, &lab, "again").await.status(), StatusCode::OK);
    app.wait_for(&lab, PATIENCE, |s| counter(s, "applied") == 1).await;
    // Out of the window; the server restarts, and reads the expired key back from the store.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    server.stop().await;
    let (app, _server) = TestApp::spawn_stoppable(config).await;
    let fresh = post_key(&app, &lab, "again").await;
    assert_eq!(fresh.status(), StatusCode::OK);
    assert!(fresh.headers().get("idempotent-replayed").is_none(), "after the window the key is new");
    let snapshot = app.wait_for(&lab, PATIENCE, |s| counter(s, "requests") >= 2).await;
    assert_eq!(counter(&snapshot, "applied_twice"), 1, "the second application of the write shows");
}

#[test]
fn the_binary_refuses_a_dedup_window_shorter_than_a_retry() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_retrylab"))
        .args(["--addr", "127.0.0.1:0", "--key-ttl-s", "3", "--db"])
        .arg(crate::helpers::fresh_db())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("--key-ttl-s 3") && stderr.contains("--max-retry-duration-ms"), "{stderr}");
    assert!(String::from_utf8(output.stdout).unwrap().is_empty(), "it never said it was serving");
}

/// A settled window as large as the cap on a lab's messages would fill the lab with delivered
/// messages and refuse new ones: the binary refuses the pair at start-up, as clap refuses a
/// bad flag (one line, exit status 2), naming both settings.
#[test]
fn the_binary_refuses_a_settled_window_that_fills_the_lab() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_retrylab"))
        .args(["--addr", "127.0.0.1:0", "--max-messages-per-lab", "300", "--db"])
        .arg(crate::helpers::fresh_db())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A binary that serves instead of refusing would never exit: stopped after 10 s.
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stdout));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("--settled-window 2000") && stderr.contains("--max-messages-per-lab 300"),
        "{stderr}"
    );
    assert!(String::from_utf8(output.stdout).unwrap().is_empty(), "it never said it was serving");
}

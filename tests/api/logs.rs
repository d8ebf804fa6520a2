//! The logs as an operator reads them, from the real binary's stderr written to a file: the
//! endpoint's injected failures are not errors, control requests get one INFO line with the
//! matched route, status and latency, nothing carries terminal colours, and the JSON format
//! covers the start-up banner too.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::helpers::{TestApp, counter, fresh_db};

/// Runs the binary with its stderr in a file, sends an outage burst, and returns stdout's
/// first line and everything it logged.
async fn outage_logs(json: bool) -> (String, String) {
    let extra: &[&str] = if json { &["--log-format", "json"] } else { &[] };
    let log_path = fresh_db().with_extension("log");
    let log_file = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_retrylab"))
        .args(["--addr", "127.0.0.1:0", "--db"])
        .arg(fresh_db())
        .args(extra)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(log_file)
        .spawn()
        .expect("the binary starts");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first_line = String::new();
    if !json {
        stdout.read_line(&mut first_line).unwrap();
    }
    let url = match first_line.split_whitespace().find(|w| w.starts_with("http://")) {
        Some(url) => url.trim_end_matches('/').to_owned(),
        // JSON mode: the banner is a log line in the file, not on stdout.
        None => {
            // The binary opens its store before it serves: on a busy machine that takes a while.
            let mut url = None;
            let start = std::time::Instant::now();
            while start.elapsed() < Duration::from_secs(30) {
                let logged = std::fs::read_to_string(&log_path).unwrap();
                url = logged.split(['"', ' ']).find(|w| w.starts_with("http://")).map(str::to_owned);
                if url.is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            url.expect("the banner names the address").trim_end_matches('/').to_owned()
        }
    };
    let app = TestApp::at(url);
    let lab = app.fast_lab().await;
    app.set_mode(&lab, "down").await;
    app.burst(&lab, 8).await;
    app.wait_for(&lab, Duration::from_secs(30), |s| counter(s, "dead_letter") == 8).await;
    let _ = child.kill();
    let _ = child.wait();
    if json {
        stdout.read_line(&mut first_line).unwrap();
    }
    (first_line, std::fs::read_to_string(&log_path).unwrap())
}

#[tokio::test]
async fn injected_failures_are_not_errors_and_control_requests_are_logged_once() {
    let (_, logged) = outage_logs(false).await;
    let errors: Vec<&str> = logged.lines().filter(|l| l.contains("ERROR")).collect();
    assert!(errors.is_empty(), "an outage of 32 injected 503s is the lab working, not an error: {errors:?}");
    assert!(!logged.contains('\x1b'), "no terminal colours in a file");
    let bursts: Vec<&str> =
        logged.lines().filter(|l| l.contains(r#"route="/api/labs/{lab}/bursts""#)).collect();
    assert_eq!(bursts.len(), 1, "one access line for the burst: {logged}");
    assert!(
        bursts[0].contains("INFO") && bursts[0].contains("status=202") && bursts[0].contains("latency_ms=")
    );
    assert!(!logged.contains(r#"route="/labs/{lab}/downstream""#), "the client's own traffic is DEBUG");
}

#[tokio::test]
async fn in_json_mode_every_line_is_json_the_banner_too() {
    let (stdout, logged) = outage_logs(true).await;
    assert!(stdout.is_empty(), "nothing for a terminal on stdout: {stdout:?}");
    let lines: Vec<&str> = logged.lines().collect();
    assert!(lines.len() >= 3, "{logged}");
    for line in &lines {
        let parsed: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(parsed["level"].is_string());
    }
    assert!(lines[0].contains("retrylab is serving on http://"), "the banner first: {}", lines[0]);
}

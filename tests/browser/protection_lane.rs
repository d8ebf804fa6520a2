//! The protection lane draws what each protection reports in the load bins, by its kind, with
//! no code of its own for any kind: a token bucket's level and the retries it stopped, and two
//! kinds listed at once (gRPC's throttling, the AWS 2026 quota) each in its own row, as the
//! API gives them.

use super::*;

/// The figure `which` of `kind`'s row, as the page shows it.
fn figure(kind: &str, which: &str) -> String {
    format!(
        "document.querySelector('[data-protection=\"{kind}\"] [data-protection-figure=\"{which}\"]')?.textContent"
    )
}

/// 60 messages at once under `policy` against an endpoint failing half its requests, the page
/// open on the lab: the snapshot once every one is delivered or dead-lettered.
async fn half_failing_burst(page: &Page, server: &Server, lab: &str, policy: &str) -> Value {
    server.put(lab, "downstream", r#"{"mode": "flaky", "failure_rate": 0.5}"#).await;
    server.put(lab, "policy", policy).await;
    server.burst(lab, 60).await;
    wait_counter(page, "delivered", 0).await;
    let settled = |s: &Value| {
        s["counters"]["delivered"].as_u64().unwrap() + s["counters"]["dead_letter"].as_u64().unwrap() == 60
    };
    let snapshot = super::load_history::wait_snapshot(server, lab, settled).await;
    assert!(settled(&snapshot), "the burst settles: {}", snapshot["counters"]);
    snapshot
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protection_lane_shows_each_protections_level_and_what_it_stopped_as_the_api_does() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    let lab = open_new_lab(&page, &server).await;
    let empty = page.eval("document.querySelector('[data-protection-empty]').hidden").await.unwrap();
    assert_eq!(empty, json!(false), "a lab without protections says none reported");
    let policy = r#"{"seed": 5, "protections": [{"kind": "token_bucket"}]}"#;
    let snapshot = half_failing_burst(&page, &server, &lab, policy).await;
    let bins = snapshot["load"]["bins"].as_array().unwrap();
    let stopped: u64 = bins.iter().filter_map(|b| b["suppressed"]["token_bucket"].as_u64()).sum();
    assert!(stopped > 0, "60 at once against 5 tokens: some retries are stopped");
    let level = bins.iter().rev().find_map(|b| b["levels"]["token_bucket"].as_f64()).expect("a level noted");
    let level = if level.fract() == 0.0 { format!("{level}") } else { format!("{level:.1}") };

    let shown = format!(
        "{} === '{stopped}' && {} === '{level}'",
        figure("token_bucket", "stopped"),
        figure("token_bucket", "level")
    );
    wait_for(&page, &format!("the lane to show {stopped} stopped and level {level}"), &shown).await;
    let bars = page
        .eval("document.querySelectorAll('[data-protection=\"token_bucket\"] .protection-stopped').length")
        .await
        .unwrap();
    assert!(bars.as_u64().unwrap() >= 1, "the stopped retries are drawn: {bars}");
    let line = page
        .eval("!!document.querySelector('[data-protection=\"token_bucket\"] .protection-level')")
        .await
        .unwrap();
    assert_eq!(line, json!(true), "the level is drawn");
    assert_eq!(
        page.eval("document.querySelector('[data-protection-empty]').hidden").await.unwrap(),
        json!(true)
    );
    assert_no_console_errors(&page);
}

/// Two kinds listed at once, gRPC's throttling and the AWS 2026 quota: each has its own row,
/// and each row's count of what it stopped, and its bars (one per second in which it stopped
/// something), are the API's load bins for that kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_listed_kinds_row_counts_what_the_api_says_it_stopped() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    let lab = open_new_lab(&page, &server).await;
    // The AWS quota as small as two of its retries (14 each).
    let policy = r#"{"seed": 8, "protections": [{"kind": "grpc"},
        {"kind": "aws_standard_2026", "initial_retry_tokens": 28}]}"#;
    let snapshot = half_failing_burst(&page, &server, &lab, policy).await;
    let bins = snapshot["load"]["bins"].as_array().unwrap();
    for kind in ["grpc", "aws_standard_2026"] {
        let stops: Vec<(u64, u64)> = bins
            .iter()
            .filter_map(|b| Some((b["t_ms"].as_u64()? / 1000, b["suppressed"][kind].as_u64()?)))
            .filter(|&(_, n)| n > 0)
            .collect();
        let stopped: u64 = stops.iter().map(|(_, n)| n).sum();
        assert!(stopped > 0, "{kind} stopped some of 60 half-failing messages' retries");
        let mut seconds: Vec<u64> = stops.iter().map(|(s, _)| *s).collect();
        seconds.dedup();
        let shown = format!("{} === '{stopped}'", figure(kind, "stopped"));
        wait_for(&page, &format!("the {kind} row to show {stopped} stopped"), &shown).await;
        let bars = page
            .eval(&format!(
                "document.querySelectorAll('[data-protection=\"{kind}\"] .protection-stopped').length"
            ))
            .await
            .unwrap();
        assert_eq!(bars, json!(seconds.len()), "{kind}: a bar for each second it stopped something");
    }
    assert_no_console_errors(&page);
}

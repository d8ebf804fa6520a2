//! The protection lane draws what each protection reports in the load bins, by its kind, with
//! no code of its own for any kind: a token bucket's level and the retries it stopped, and two
//! kinds listed at once (gRPC's throttling, the AWS 2026 quota) each in its own row, as the
//! API gives them.

use super::*;

/// The figure `which` of `kind`'s row in the lane whose rows are `data-{lane}`, as the page
/// shows it.
fn lane_figure(lane: &str, kind: &str, which: &str) -> String {
    format!(
        "document.querySelector('[data-{lane}=\"{kind}\"] [data-{lane}-figure=\"{which}\"]')?.textContent"
    )
}

/// The figure `which` of `kind`'s row, as the page shows it.
fn figure(kind: &str, which: &str) -> String {
    lane_figure("protection", kind, which)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_defence_lane_shows_what_the_endpoints_defences_refused_and_the_limit_as_the_api_does() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    let lab = open_new_lab(&page, &server).await;
    let empty = page.eval("document.querySelector('[data-defence-empty]').hidden").await.unwrap();
    assert_eq!(empty, json!(false), "a lab without defences says none acted");
    // One worker, a line of 10, and an AIMD limit held at 2 in flight: a burst of 30 is mostly
    // refused by the limit as it comes.
    let downstream = r#"{"mode": "overloaded", "capacity": 1, "queue": 10, "latency_ms": [50, 50],
        "defences": {"limit": {"kind": "aimd", "initial_limit": 2, "min_limit": 2, "max_limit": 2}}}"#;
    server.put(&lab, "downstream", downstream).await;
    server.put(&lab, "policy", r#"{"seed": 5, "max_attempts": 2, "base_ms": 100}"#).await;
    server.burst(&lab, 30).await;
    let settled = |s: &Value| {
        s["counters"]["delivered"].as_u64().unwrap() + s["counters"]["dead_letter"].as_u64().unwrap() == 30
    };
    let snapshot = super::load_history::wait_snapshot(&server, &lab, settled).await;
    assert!(settled(&snapshot), "the burst settles: {}", snapshot["counters"]);
    let bins = snapshot["load"]["bins"].as_array().unwrap();
    let refused: u64 = bins.iter().filter_map(|b| b["refused_by_limit"].as_u64()).sum();
    assert!(refused > 0, "30 at once against a limit of 2: some are refused");
    let limit = bins.iter().rev().find_map(|b| b["limit"].as_u64()).expect("the limit noted");
    assert_eq!(limit, 2);
    let shown = format!(
        "{} === '{refused}' && {} === '{limit}'",
        lane_figure("defence", "limit", "stopped"),
        lane_figure("defence", "limit", "level")
    );
    wait_for(&page, &format!("the defence lane to show {refused} refused and the limit {limit}"), &shown)
        .await;
    let bars = page
        .eval("document.querySelectorAll('[data-defence=\"limit\"] .protection-stopped').length")
        .await
        .unwrap();
    assert!(bars.as_u64().unwrap() >= 1, "the refusals are drawn: {bars}");
    let line =
        page.eval("!!document.querySelector('[data-defence=\"limit\"] .protection-level')").await.unwrap();
    assert_eq!(line, json!(true), "the limit is drawn");
    let others = page.eval("document.querySelectorAll('[data-defence]').length").await.unwrap();
    assert_eq!(others, json!(1), "only the limit acted");
    assert_no_console_errors(&page);
}

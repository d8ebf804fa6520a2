//! The protection lane draws what each protection reports in the load bins, by its kind, with
//! no code of its own for any kind: a token bucket's level and the retries it stopped, the
//! policy's retry budget likewise, two kinds listed at once (gRPC's throttling, the AWS 2026
//! quota) each in its own row, and the circuit breaker's open count over time and its
//! refusals, as the API gives them.

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

/// The policy's own retry budget is a protection like the listed ones: its row shows the
/// retries left in its window (`levels.retry_budget`) and the retries it refused
/// (`suppressed.retry_budget`), as the API's bins give them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_budgets_row_shows_the_retries_left_and_those_it_refused_as_the_api_does() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    let lab = open_new_lab(&page, &server).await;
    // 60 first attempts allow 6 retries in the window, and no floor: most retries are refused.
    let policy = r#"{"seed": 5, "retry_budget": {"ratio": 0.1, "min_per_s": 0}}"#;
    let snapshot = half_failing_burst(&page, &server, &lab, policy).await;
    let bins = snapshot["load"]["bins"].as_array().unwrap();
    let refused: u64 = bins.iter().filter_map(|b| b["suppressed"]["retry_budget"].as_u64()).sum();
    assert!(refused > 0, "60 at once, half failing, 6 retries allowed: some are refused");
    let left = bins.iter().rev().find_map(|b| b["levels"]["retry_budget"].as_f64()).expect("a level noted");
    let left = if left.fract() == 0.0 { format!("{left}") } else { format!("{left:.1}") };
    let shown = format!(
        "{} === '{refused}' && {} === '{left}'",
        figure("retry_budget", "stopped"),
        figure("retry_budget", "level")
    );
    wait_for(&page, &format!("the budget's row to show {refused} refused and {left} left"), &shown).await;
    let bars = page
        .eval("document.querySelectorAll('[data-protection=\"retry_budget\"] .protection-stopped').length")
        .await
        .unwrap();
    assert!(bars.as_u64().unwrap() >= 1, "the refused retries are drawn: {bars}");
    let line = page
        .eval("!!document.querySelector('[data-protection=\"retry_budget\"] .protection-level')")
        .await
        .unwrap();
    assert_eq!(line, json!(true), "the retries left are drawn");
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

/// The policy's circuit breaker after each change, from the snapshot, as (ms of lab time, how
/// many clients' breakers are open): the clients' shared history with several clients, the one
/// breaker's own with one.
fn open_history(snapshot: &Value) -> Vec<(u64, u64)> {
    let clients = &snapshot["clients"];
    if clients["count"].as_u64().unwrap() > 1 {
        let changes = clients["changes"].as_array().unwrap();
        changes.iter().map(|c| (c["at_ms"].as_u64().unwrap(), c["open"].as_u64().unwrap())).collect()
    } else {
        let changes = snapshot["breaker"]["changes"].as_array().unwrap();
        let open = |c: &Value| u64::from(c["state"] == "open");
        changes.iter().map(|c| (c["at_ms"].as_u64().unwrap(), open(c))).collect()
    }
}

/// The most breakers open at any moment of each second from `from_s`, `seconds` of them; None
/// before the first change.
fn most_open_per_second(history: &[(u64, u64)], from_s: u64, seconds: usize) -> Vec<Option<u64>> {
    (from_s..from_s + seconds as u64)
        .map(|s| {
            let held = history.iter().rev().find(|(at, _)| *at < s * 1000).map(|(_, open)| *open);
            let within = history.iter().filter(|(at, _)| *at / 1000 == s).map(|(_, open)| *open);
            held.into_iter().chain(within).max()
        })
        .collect()
}

/// Waits until the breaker's row shows what the snapshot says: its open count now (of the
/// clients), everything refused, and the most open per second; returns the seconds' counts.
async fn wait_breaker_row(page: &cdp::Page, snapshot: &Value) -> Vec<Option<u64>> {
    let count = snapshot["clients"]["count"].as_u64().unwrap();
    let open_now = match count {
        1 => u64::from(snapshot["breaker"]["state"] == "open"),
        _ => snapshot["clients"]["breakers"]["open"].as_u64().unwrap(),
    };
    let bins = snapshot["load"]["bins"].as_array().unwrap();
    let refused: u64 = bins.iter().filter_map(|b| b["suppressed"]["breaker"].as_u64()).sum();
    let history = open_history(snapshot);
    let row = "document.querySelector('[data-protection=\"breaker\"]')";
    let read = format!(
        "(r => r && [Number(r.dataset.fromS), r.dataset.levels, {}, {}])({row})",
        figure("breaker", "level"),
        figure("breaker", "stopped")
    );
    let figures = json!([format!("{open_now} of {count} open"), refused.to_string()]);
    let start = std::time::Instant::now();
    loop {
        let shown = page.eval(&read).await.unwrap();
        // What the row draws per second, and what the snapshot's history says of those seconds.
        let (levels, wanted) = match shown.as_array() {
            Some(shown) => {
                let levels = shown[1].as_str().unwrap_or_default().split(',').map(|l| l.parse().ok());
                let levels: Vec<Option<u64>> = levels.collect();
                let wanted = most_open_per_second(&history, shown[0].as_u64().unwrap_or(0), levels.len());
                (levels, wanted)
            }
            None => (vec![], vec![None]),
        };
        if levels == wanted
            && shown.as_array().and_then(|s| s.get(2..4)) == figures.as_array().map(|f| &f[..])
        {
            return wanted;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the breaker's row shows {shown} (per second {levels:?}), the API says {figures} and {wanted:?} from {history:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protection_lane_shows_how_many_breakers_were_open_each_second_and_their_refusals_as_the_api_does()
 {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    let lab = open_new_lab(&page, &server).await;
    let policy = r#"{"clients": 10, "max_attempts": 1, "breaker": {"failure_threshold": 2, "open_ms": 60000, "half_open_probes": 1}}"#;
    server.put(&lab, "policy", policy).await;
    server.put(&lab, "downstream", r#"{"mode": "down"}"#).await;
    // One attempt each: ten messages fail once on every client, two more open two breakers; a
    // second later ten more are refused by those two and open the other eight, and ten more
    // are all refused.
    server.burst(&lab, 10).await;
    wait_counter(&page, "dead_letter", 10).await;
    server.burst(&lab, 2).await;
    wait_counter(&page, "dead_letter", 12).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    for settled in [22, 32] {
        server.burst(&lab, 10).await;
        wait_counter(&page, "dead_letter", settled).await;
    }
    let snapshot = server.snapshot(&lab).await;
    assert_eq!(snapshot["clients"]["breakers"], json!({"closed": 0, "open": 10, "half_open": 0}));
    let refused: u64 = snapshot["load"]["bins"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["suppressed"]["breaker"].as_u64())
        .sum();
    assert_eq!(refused, 12, "two refused in the third burst, ten in the fourth");
    let seconds = wait_breaker_row(&page, &snapshot).await;
    assert!(seconds.contains(&Some(2)) && seconds.contains(&Some(10)), "2 open, then 10: {seconds:?}");
    let bars = page
        .eval("document.querySelectorAll('[data-protection=\"breaker\"] .protection-stopped').length")
        .await;
    assert!(bars.unwrap().as_u64().unwrap() >= 1, "the refusals are drawn");
    let line = page.eval("!!document.querySelector('[data-protection=\"breaker\"] .protection-level')").await;
    assert_eq!(line.unwrap(), json!(true), "the open count is drawn");
    assert_no_console_errors(&page);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_client_the_breakers_row_follows_its_own_changes() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    let lab = open_new_lab(&page, &server).await;
    let policy = r#"{"max_attempts": 1, "breaker": {"failure_threshold": 2, "open_ms": 60000, "half_open_probes": 1}}"#;
    server.put(&lab, "policy", policy).await;
    server.put(&lab, "downstream", r#"{"mode": "down"}"#).await;
    let row = wait_for(
        &page,
        "a closed breaker's row",
        &format!("{} === '0 of 1 open' && {}", figure("breaker", "level"), figure("breaker", "stopped")),
    )
    .await;
    assert_eq!(row, "0", "a breaker in the policy has its row before it refuses anything");
    server.burst(&lab, 5).await;
    wait_counter(&page, "dead_letter", 5).await;
    let snapshot = server.snapshot(&lab).await;
    assert_eq!(snapshot["breaker"]["state"], "open");
    let seconds = wait_breaker_row(&page, &snapshot).await;
    assert!(seconds.contains(&Some(1)), "the open breaker is drawn: {seconds:?}");
    assert_no_console_errors(&page);
}

/// The protections people run are on the lab page (issue 57): a drawer holds one button for
/// each policy preset that follows a source and holds a protection; each puts that protection
/// on the lab's policy (as the API then reports it) and leaves the rest as it was, says its
/// line, and links its source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_protection_people_run_is_put_on_the_lab_from_its_drawer_with_its_source() {
    let Some(browser) = browser() else { return };
    let server = Server::start().await;
    let page = browser.page().await;
    let lab = open_new_lab(&page, &server).await;
    let table: Value = serde_json::from_str(include_str!("../../static/policy-presets.json")).unwrap();
    let protections: Vec<&Value> = table
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["source"].is_object() && p["policy"]["protections"].as_array().is_some_and(|a| !a.is_empty())
        })
        .collect();
    assert!(protections.len() >= 9, "{}", protections.len());
    let count =
        format!("document.querySelectorAll('[data-protection-preset]').length === {}", protections.len());
    wait_for(&page, "a button per protection", &count).await;
    if page.eval("document.getElementById('lab').dataset.view").await.unwrap() == json!("story") {
        page.click("[data-view-toggle]").await;
    }
    page.eval("document.querySelector('[data-protections-drawer]').open = true").await.unwrap();
    let timeout_before = server.snapshot(&lab).await["policy"]["timeout_ms"].clone();
    for preset in protections {
        let name = preset["name"].as_str().unwrap();
        page.click(&format!("[data-protection-preset=\"{name}\"]")).await;
        let said = wait_for(
            &page,
            &format!("{name}'s line"),
            &format!(
                "(l => !l.hidden && l.querySelector('[data-look-name]').textContent === {} && [l.querySelector('[data-look-text]').textContent, l.querySelector('[data-look-actions] a')?.href])(document.querySelector('[data-look]'))",
                json!(format!("{name}:"))
            ),
        )
        .await;
        assert!(said[0].as_str().unwrap().starts_with(preset["what"].as_str().unwrap()), "{name}: {said}");
        assert_eq!(said[1], preset["source"]["url"], "{name}");
        let policy = server.snapshot(&lab).await["policy"].clone();
        let kinds = |p: &Value| -> Vec<Value> {
            p["protections"].as_array().into_iter().flatten().map(|k| k["kind"].clone()).collect()
        };
        assert_eq!(kinds(&policy), kinds(&preset["policy"]), "{name}: {policy}");
        assert_eq!(policy["timeout_ms"], timeout_before, "{name}: the rest of the policy is kept");
    }
    assert_no_console_errors(&page);
}

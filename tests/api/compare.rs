//! Comparisons of retry policies: through the API and through `retrylab compare`, each run to
//! the end on real requests, every message accounted for, nothing applied twice, and full
//! jitter cheaper than no jitter against an overloaded downstream.

use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, config, fresh_db};

const PATIENCE: Duration = Duration::from_secs(90);

async fn finished(app: &TestApp, id: &str) -> Value {
    let start = Instant::now();
    loop {
        let (status, report) = app.call(Method::GET, &format!("/api/comparisons/{id}"), None).await;
        assert_eq!(status, StatusCode::OK, "{report}");
        if report["done"] == true {
            return report;
        }
        assert!(start.elapsed() < PATIENCE, "the comparison did not finish: {report}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn figures<'a>(report: &'a Value, policy: &str) -> &'a Value {
    let columns = report["columns"].as_array().unwrap();
    &columns.iter().find(|c| c["policy"] == policy).unwrap_or_else(|| panic!("no {policy}: {report}"))["figures"]
}

fn accounted_for(figures: &Value, burst: u64) {
    let settled = figures["delivered"].as_u64().unwrap() + figures["dead_letter"].as_u64().unwrap();
    assert_eq!(settled, burst, "every message delivered or dead-lettered: {figures}");
    assert_eq!(figures["applied_twice"], 0);
}

#[tokio::test]
async fn a_comparison_runs_every_policy_to_the_end_and_full_jitter_costs_less() {
    let db = fresh_db();
    let app = TestApp::spawn_config(retrylab::config::Config::new(db.clone())).await;
    let request = json!({"scenario": "overload", "burst": 40, "seed": 2, "runs": 3, "policies": ["none", "full", "breaker"]});
    let (status, created) = app.call(Method::POST, "/api/comparisons", Some(&request.to_string())).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["url"], format!("/compare/{id}"));
    let labs: Vec<String> = created["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["lab"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(labs.len(), 9, "three runs of each policy");

    let report = finished(&app, &id).await;
    for column in report["columns"].as_array().unwrap() {
        accounted_for(&column["figures"], 40);
    }
    // A measurement on a shared machine: the medians of three runs each.
    let cost = |p: &str| {
        let summaries = report["policies"].as_array().unwrap();
        let summary = summaries.iter().find(|s| s["policy"] == p).unwrap();
        summary["figures"]["requests_per_delivered"]["median"].as_f64().unwrap()
    };
    assert!(
        cost("full") < cost("none"),
        "full {} vs none {}: {}",
        cost("full"),
        cost("none"),
        report["policies"]
    );
    assert!(report["best"]["requests_per_delivered"].as_array().unwrap().iter().all(|p| p != "none"));
    // Each column is a real lab with the scenario's downstream and the policy's jitter.
    let full = report["columns"].as_array().unwrap().iter().find(|c| c["policy"] == "full").unwrap();
    let lab = app.snapshot(full["lab"].as_str().unwrap()).await;
    assert_eq!(lab["downstream"]["mode"], "overloaded");
    assert_eq!(lab["policy"]["jitter"], "full");
    assert_eq!(lab["policy"]["seed"], 2);

    // The page and the report are still there after a restart.
    let (page, _) = app.call(Method::GET, &format!("/compare/{id}"), None).await;
    assert_eq!(page, StatusCode::OK);
    let again = TestApp::spawn_config(retrylab::config::Config::new(db)).await;
    let (status, reopened) = again.call(Method::GET, &format!("/api/comparisons/{id}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(figures(&reopened, "full")["requests"], figures(&report, "full")["requests"]);
}

#[tokio::test]
async fn bad_comparisons_are_refused_with_the_valid_names() {
    let app = TestApp::spawn_config(config(Default::default(), Default::default())).await;
    for (body, says) in [
        (json!({"scenario": "meltdown", "burst": 5, "policies": ["none", "full"]}), "outage, overload"),
        (json!({"scenario": "outage", "burst": 5, "policies": ["none", "yolo"]}), "decorrelated, breaker"),
        (json!({"scenario": "outage", "burst": 5, "policies": ["none"]}), "2 to 5"),
        (json!({"scenario": "outage", "burst": 0, "policies": ["none", "full"]}), "max_burst"),
        (
            json!({"scenario": "outage", "burst": 5, "policies": ["none", {"name": "x", "policy": {"jitter": "wobbly"}}]}),
            "jitter",
        ),
    ] {
        let (status, problem) = app.call(Method::POST, "/api/comparisons", Some(&body.to_string())).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {problem}");
        assert!(problem["detail"].as_str().unwrap().contains(says), "{body}: {problem}");
    }
    let (status, _) =
        app.call(Method::GET, &format!("/api/comparisons/{}", uuid::Uuid::new_v4()), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = app.call(Method::GET, "/api/comparisons/not-an-id", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn the_command_line_prints_the_comparison_as_json() {
    let output = tokio::task::spawn_blocking(|| {
        Command::new(env!("CARGO_BIN_EXE_retrylab"))
            .args(["compare", "--scenario", "overload", "--burst", "30", "--seed", "3", "--runs", "3"])
            .args(["--policy", "none", "--policy", "full", "--json"])
            .env_remove("RUST_LOG")
            .output()
            .expect("the binary runs")
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("none") && stderr.contains("/30"), "progress on stderr: {stderr}");
    let rows: Vec<Value> = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    assert_eq!(rows.len(), 8, "three runs of each policy, then each policy's spread");
    let (runs, spreads): (Vec<&Value>, Vec<&Value>) = rows.iter().partition(|r| r["spread"].is_null());
    assert_eq!((runs.len(), spreads.len()), (6, 2));
    for row in &runs {
        for field in [
            "policy",
            "messages",
            "requests",
            "delivered",
            "dead_letter",
            "drain_ms",
            "peak_requests_per_100ms",
            "applied_twice",
        ] {
            assert!(!row[field].is_null(), "{field} in {row}");
        }
        accounted_for(row, 30);
    }
    // Each policy's spread is the median and range of its own three runs. (Which policy costs
    // less is not asserted: no jitter against full jitter on `overload` is no difference three
    // runs can show.)
    for policy in ["none", "full"] {
        let spread = spreads.iter().find(|r| r["policy"] == policy).unwrap();
        let mut costs: Vec<f64> = runs
            .iter()
            .filter(|r| r["policy"] == policy)
            .map(|r| r["requests_per_delivered"].as_f64().unwrap())
            .collect();
        costs.sort_by(f64::total_cmp);
        let figure = &spread["spread"]["requests_per_delivered"];
        let near = |a: &Value, b: f64| (a.as_f64().unwrap() - b).abs() < 1e-9;
        assert!(near(&figure["median"], costs[1]), "{policy}: {figure} from {costs:?}");
        assert!(
            near(&figure["min"], costs[0]) && near(&figure["max"], costs[2]),
            "{policy}: {figure} from {costs:?}"
        );
    }

    let unknown = Command::new(env!("CARGO_BIN_EXE_retrylab"))
        .args(["compare", "--scenario", "outage", "--policy", "none", "--policy", "yolo"])
        .output()
        .unwrap();
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("fixed, none, full"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metastable_comparison_runs_steady_traffic_and_only_the_budget_recovers() {
    let _turn = crate::helpers::OPEN_SYSTEM_RUNS.lock().await;
    let app = TestApp::spawn().await;
    let request = json!({"scenario": "metastable", "seed": 19, "policies": ["none", "budget"]});
    let (status, created) = app.call(Method::POST, "/api/comparisons", Some(&request.to_string())).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let report = finished(&app, created["id"].as_str().unwrap()).await;
    let (naive, budget) = (figures(&report, "none"), figures(&report, "budget"));
    println!("none: {naive}\nbudget: {budget}\nmachine: {}", report["machine"]);
    // 16 s of 28 messages a second, from the traffic, not a burst.
    for f in [naive, budget] {
        let offered = f["offered"].as_u64().unwrap();
        assert!((300..=600).contains(&offered), "{f}");
        assert_eq!(f["messages"], f["offered"]);
        assert_eq!(f["applied_twice"], 0);
    }
    let after = |f: &Value| f["goodput_after_trigger"].as_f64().unwrap();
    // Over the 10 s after the slowdown: next to nothing delivered without protection; with
    // the budget the queue drains within a few seconds and the rest is delivered.
    assert!(after(naive) < 0.25, "stuck after the slowdown without protection: {naive}");
    assert!(after(budget) > 0.5, "the budget drained it: {budget}");
    assert_eq!(report["best"]["goodput_after_trigger"], json!(["budget"]));
    assert!(report["machine"]["late_ms_p99"].as_f64().is_some(), "{}", report["machine"]);
}

#[tokio::test]
async fn runs_repeat_each_policy_with_derived_seeds_and_report_the_spread() {
    let app = TestApp::spawn().await;
    let request =
        json!({"scenario": "flaky", "burst": 10, "seed": 3, "runs": 3, "policies": ["none", "full"]});
    let (status, created) = app.call(Method::POST, "/api/comparisons", Some(&request.to_string())).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let report = finished(&app, created["id"].as_str().unwrap()).await;
    let columns = report["columns"].as_array().unwrap();
    assert_eq!(columns.len(), 6, "two policies, three runs each");
    let mut seeds = Vec::new();
    for column in columns {
        let lab = column["lab"].as_str().unwrap();
        seeds.push(app.snapshot(lab).await["policy"]["seed"].as_u64().unwrap());
        accounted_for(&column["figures"], 10);
    }
    seeds.sort_unstable();
    seeds.dedup();
    assert_eq!(seeds.len(), 3, "each run its own seed, the same for both policies: {seeds:?}");
    assert!(seeds.contains(&3), "the first run keeps the seed given");
    let summaries = report["policies"].as_array().unwrap();
    assert_eq!(summaries.len(), 2);
    for summary in summaries {
        assert_eq!(summary["runs"], 3);
        let requests = &summary["figures"]["requests"];
        let (median, min, max) = (
            requests["median"].as_f64().unwrap(),
            requests["min"].as_f64().unwrap(),
            requests["max"].as_f64().unwrap(),
        );
        assert!(min <= median && median <= max, "{requests}");
        let measured: Vec<f64> = columns
            .iter()
            .filter(|c| c["policy"] == summary["policy"])
            .map(|c| c["figures"]["requests"].as_f64().unwrap())
            .collect();
        assert_eq!(min, measured.iter().copied().fold(f64::INFINITY, f64::min));
        assert_eq!(max, measured.iter().copied().fold(0.0, f64::max));
    }
    // "delivered" is 10 of 10 for every run of both: a tie, shown as one.
    assert_eq!(report["best"]["delivered"], json!(["none", "full"]));
    for runs in [0, 6] {
        let bad = json!({"scenario": "flaky", "burst": 10, "runs": runs, "policies": ["none", "full"]});
        let (status, problem) = app.call(Method::POST, "/api/comparisons", Some(&bad.to_string())).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert_eq!(problem["limit"], "max_compare_runs", "{problem}");
    }
}

#[tokio::test]
async fn two_policies_with_one_name_are_refused_naming_the_clash() {
    let app = TestApp::spawn_config(config(Default::default(), Default::default())).await;
    for (policies, clash) in [
        (json!(["none", "none"]), "none"),
        (json!(["full", {"name": "full", "policy": {"jitter": "none"}}]), "full"),
        (json!([{"name": "mine", "policy": {}}, "none", {"name": "mine", "policy": {"base_ms": 5}}]), "mine"),
    ] {
        let body = json!({"scenario": "outage", "burst": 5, "policies": policies});
        let (status, problem) = app.call(Method::POST, "/api/comparisons", Some(&body.to_string())).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(&format!("'{clash}'")) && detail.contains("more than once"), "{detail}");
    }
}

#[tokio::test]
async fn a_burst_of_none_is_refused_as_too_small_not_too_large() {
    let app = TestApp::spawn_config(config(Default::default(), Default::default())).await;
    let body = json!({"scenario": "outage", "burst": 0, "policies": ["none", "full"]});
    let (status, problem) = app.call(Method::POST, "/api/comparisons", Some(&body.to_string())).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("at least 1") && !detail.contains("smaller"), "{detail}");
    assert_eq!(problem["limit"], "max_burst");
    // The lab's own bursts say the same.
    let lab = app.new_lab().await;
    let (status, problem) =
        app.call(Method::POST, &format!("/api/labs/{lab}/bursts"), Some(r#"{"count": 0}"#)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("at least 1") && !detail.contains("smaller"), "{detail}");
}

#[tokio::test]
async fn no_policy_is_marked_best_before_every_policy_has_finished() {
    let app = TestApp::spawn_config(config(Default::default(), Default::default())).await;
    let body = json!({"scenario": "outage", "burst": 20, "seed": 1, "policies": ["none", "full"]});
    let (status, created) = app.call(Method::POST, "/api/comparisons", Some(&body.to_string())).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(created["done"], false, "{created}");
    assert_eq!(created["best"], json!({}), "nothing is best while the policies run: {created}");
    let report = finished(&app, created["id"].as_str().unwrap()).await;
    assert_eq!(report["best"]["applied_twice"], json!(["none", "full"]), "{report}");
}

#[test]
fn the_command_line_refuses_a_policy_named_twice_and_a_burst_of_none() {
    let twice = Command::new(env!("CARGO_BIN_EXE_retrylab"))
        .args(["compare", "--scenario", "outage", "--policy", "none", "--policy", "none"])
        .output()
        .unwrap();
    assert!(!twice.status.success());
    let said = String::from_utf8_lossy(&twice.stderr);
    assert!(said.contains("'none'") && said.contains("more than once"), "{said}");
    let none = Command::new(env!("CARGO_BIN_EXE_retrylab"))
        .args(["compare", "--scenario", "outage", "--burst", "0", "--policy", "none", "--policy", "full"])
        .output()
        .unwrap();
    assert!(!none.status.success());
    let said = String::from_utf8_lossy(&none.stderr);
    assert!(said.contains("at least 1") && !said.contains("smaller"), "{said}");
}

#[tokio::test]
async fn the_command_line_writes_plain_progress_lines_off_a_terminal_and_none_when_quiet() {
    let run = |quiet: bool| {
        tokio::task::spawn_blocking(move || {
            let mut command = Command::new(env!("CARGO_BIN_EXE_retrylab"));
            command.args([
                "compare",
                "--scenario",
                "flaky",
                "--burst",
                "10",
                "--policy",
                "none",
                "--policy",
                "full",
            ]);
            if quiet {
                command.arg("--quiet");
            }
            command.env_remove("RUST_LOG").output().expect("the binary runs")
        })
    };
    let loud = run(false).await.unwrap();
    let stderr = String::from_utf8_lossy(&loud.stderr);
    assert!(loud.status.success(), "{stderr}");
    assert!(!stderr.contains('\r'), "no carriage returns when stderr is not a terminal: {stderr:?}");
    assert!(stderr.lines().any(|l| l.contains("none") && l.contains("/10")), "progress lines: {stderr}");
    assert!(String::from_utf8_lossy(&loud.stdout).contains("delivered"), "the table on stdout");
    let quiet = run(true).await.unwrap();
    assert!(quiet.status.success());
    assert_eq!(String::from_utf8_lossy(&quiet.stderr), "", "--quiet prints no progress");
    assert!(String::from_utf8_lossy(&quiet.stdout).contains("delivered"), "the table still on stdout");
}

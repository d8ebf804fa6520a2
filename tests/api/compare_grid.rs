//! The grid: a comparison over the endpoint's defences × client policies, through the API and
//! `retrylab compare --defence`. Each cell is a lab of its own whose endpoint has its row's
//! defences; the document lists every cell with its figures and names no best cell; a bad
//! defence is a 422 naming its field, or one line and exit status 2.

use std::process::Command;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::compare::{breaks, compared, labs_held, policy_of};
use crate::helpers::TestApp;

fn cell<'a>(report: &'a Value, defence: &str, policy: &str) -> &'a Value {
    let cells = report["grid"]["cells"].as_array().unwrap();
    let found = cells.iter().find(|c| c["defence"] == defence && c["policy"] == policy);
    found.unwrap_or_else(|| panic!("no cell ({defence}, {policy}): {report}"))
}

#[tokio::test]
async fn a_grid_runs_each_cell_against_its_defence_and_names_no_best_cell() {
    let app = TestApp::spawn().await;
    // A busy machine runs late; every run counts, so each cell has its figures.
    let request = json!({"scenario": "overload", "burst": 10, "seed": 5, "runs": 1, "late_threshold_ms": 1000,
        "policies": ["none", "full"],
        "defences": [{"name": "none", "defences": {}}, {"name": "aimd", "defences": {"limit": {"kind": "aimd"}}}]});
    let report = compared(&app, &request).await;
    let key = report["key_figure"][0].as_str().unwrap();
    assert_eq!(key, "requests_per_delivered");
    let grid = &report["grid"];
    assert_eq!(grid["policies"], json!(["none", "full"]));
    assert_eq!(grid["cells"].as_array().unwrap().len(), 4, "{grid}");
    assert_eq!(report["columns"].as_array().unwrap().iter().filter(|c| c["attempt"] == 0).count(), 4);
    let rows = grid["rows"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["name"].as_str().unwrap()).collect::<Vec<_>>(), ["none", "aimd"]);
    for row in rows {
        let defence = row["name"].as_str().unwrap();
        for policy in ["none", "full"] {
            let cell = cell(&report, defence, policy);
            // One run: the cell's median and range are that run's figure.
            let labs = cell["labs"].as_array().unwrap();
            let column = report["columns"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["lab"] == *labs.last().unwrap())
                .unwrap();
            assert_eq!((&column["defence"], &column["policy"]), (&json!(defence), &json!(policy)));
            let figures = &column["figures"];
            assert_eq!(figures["delivered"].as_u64().unwrap() + figures["dead_letter"].as_u64().unwrap(), 10);
            assert_eq!(figures["applied_twice"], 0);
            assert_eq!(cell["valid_runs"], 1, "{cell}");
            let median = cell["median"][key].as_f64().unwrap_or_else(|| panic!("{cell}"));
            assert!(median >= 1.0, "at least one request per delivered message: {cell}");
            assert_eq!(cell["median"][key], figures[key], "{cell}");
            assert_eq!(cell["range"][key], json!([median, median]), "{cell}");
            assert_eq!(cell["ends_failure"], Value::Null, "no trigger on overload, no question");
            // Its lab's endpoint had its row's defences, and its lab its policy.
            let lab = app.snapshot(column["lab"].as_str().unwrap()).await;
            assert_eq!(lab["downstream"]["defences"], row["defences"], "{defence}/{policy}");
            assert_eq!(lab["policy"]["jitter"], policy_of(&report, policy)["policy"]["jitter"]);
            // And it acted: the AIMD limit (2 at first, as the endpoint's 2 workers) turned the
            // rest of the burst away itself; without it, the workers did.
            let bins = lab["load"]["bins"].as_array().unwrap();
            let by_limit: u64 = bins.iter().filter_map(|b| b["refused_by_limit"].as_u64()).sum();
            if defence == "aimd" {
                assert!(by_limit > 0, "the limit refused some: {defence}/{policy}");
            } else {
                assert_eq!(by_limit, 0, "no limit, nothing refused by one: {defence}/{policy}");
            }
        }
        // Within a row, the comparison's own test: one run each is too few for a verdict.
        assert_eq!(row["verdict"]["best"], json!([]), "{row}");
    }
    assert_eq!(policy_of(&report, "full")["policy"]["jitter"], "full");
    assert_eq!(rows[1]["defences"]["limit"]["kind"], "aimd");
    assert_eq!(rows[0]["defences"]["limit"]["kind"], "fixed");
    // No best cell, and no policy medians that would mix endpoints.
    assert_eq!(report["verdict"]["best"], json!([]));
    assert!(report["verdict"]["result"].as_str().unwrap().contains("no best cell"), "{}", report["verdict"]);
    assert!(grid["judged"].as_str().unwrap().contains("no cell is named best"));
    for policy in report["policies"].as_array().unwrap() {
        assert_eq!(policy["median"], json!({}), "{policy}");
        assert_eq!(policy["runs"].as_array().unwrap().len(), 2, "a run in each row: {policy}");
    }
    // The OpenAPI description says everything the document holds.
    let spec: Value =
        app.client.get(app.url("/api/openapi.json")).send().await.unwrap().json().await.unwrap();
    let mut errors = Vec::new();
    breaks(&spec, &spec["components"]["schemas"]["ComparisonReport"], &report, "", &mut errors);
    assert!(errors.is_empty(), "{}", errors.join("\n"));

    // A cell opens in a lab of its own: its policy, and its row's defences on the endpoint.
    let id = report["id"].as_str().unwrap();
    let path = format!("/api/comparisons/{id}/labs");
    let body = json!({"policy": "full", "defence": "aimd"}).to_string();
    let (status, opened) = app.call(Method::POST, &path, Some(&body)).await;
    assert_eq!(status, StatusCode::CREATED, "{opened}");
    let lab = app.snapshot(opened["id"].as_str().unwrap()).await;
    assert_eq!(lab["downstream"]["defences"], rows[1]["defences"]);
    assert_eq!(lab["downstream"]["mode"], "overloaded");
    assert_eq!(lab["policy"]["jitter"], "full");
    for (body, field) in [
        (json!({"policy": "full"}), "defence"),
        (json!({"policy": "full", "defence": "moat"}), "defence"),
        (json!({"policy": "yolo", "defence": "aimd"}), "policy"),
    ] {
        let (status, problem) = app.call(Method::POST, &path, Some(&body.to_string())).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {problem}");
        assert_eq!(problem["field"], field, "{body}: {problem}");
    }
}

#[tokio::test]
async fn a_bad_grid_is_refused_naming_the_field() {
    let app = TestApp::spawn().await;
    let none = json!({"name": "none", "defences": {}});
    let grid = |defences: Value, policies: Value| json!({"scenario": "overload", "burst": 5, "runs": 1, "policies": policies, "defences": defences});
    let two = json!(["none", "full"]);
    let cases = [
        (grid(json!([none, none, none, none]), two.clone()), "defences", "1 to 3"),
        (
            grid(json!([none, {"name": "q", "defences": {"queue": "lifo2"}}]), two.clone()),
            "defences[1].defences.queue",
            "lifo2",
        ),
        (
            grid(json!([{"name": "m", "defences": {"moat": true}}]), two.clone()),
            "defences[0].defences.moat",
            "unknown field",
        ),
        (
            grid(
                json!([none, {"name": "c", "defences": {"queue": "codel", "codel_target_ms": 0}}]),
                two.clone(),
            ),
            "defences[1].defences.codel_target_ms",
            "codel_target_ms",
        ),
        (
            grid(
                json!([none, {"name": "a", "defences": {"limit": {"kind": "aimd", "backoff_ratio": 2.0}}}]),
                two.clone(),
            ),
            "defences[1].defences.limit.backoff_ratio",
            "backoff_ratio",
        ),
        (grid(json!([none, none]), two.clone()), "defences[1].name", "more than once"),
        (grid(json!([none]), json!(["none", "full", "budget", "grpc"])), "policies", "1 to 3"),
        (grid(json!([none]), json!(["none"])), "defences", "one cell"),
        (json!({"scenario": "overload", "policies": two, "defense": [none]}), "defense", "unknown field"),
        (
            json!({"scenario": "outage", "burst": 5, "policies": two, "defences": [none, {"name": "d", "defences": {"deadline": true}}]}),
            "defences[1].defences.deadline",
            "overload or metastable",
        ),
    ];
    for (body, field, says) in cases {
        let response = app
            .client
            .post(app.url("/api/comparisons"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(response.headers()["content-type"], "application/problem+json", "{body}");
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["field"], field, "{body}: {problem}");
        assert!(problem["detail"].as_str().unwrap().contains(says), "{body}: {problem}");
    }
    assert_eq!(labs_held(&app).await, 0, "nothing was started");
}

#[test]
fn the_command_line_prints_the_grid_and_refuses_a_bad_defence_with_exit_status_2() {
    let output = Command::new(env!("CARGO_BIN_EXE_retrylab"))
        .args([
            "compare",
            "--scenario",
            "overload",
            "--burst",
            "10",
            "--runs",
            "1",
            "--late-threshold-ms",
            "1000",
        ])
        .args([
            "--policy",
            "none",
            "--policy",
            "full",
            "--defence",
            "none",
            "--defence",
            r#"lim={"limit": {"kind": "aimd"}}"#,
        ])
        .args(["--json", "--quiet"])
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let document: Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    let cells = document["grid"]["cells"].as_array().unwrap();
    let named: Vec<(&str, &str)> =
        cells.iter().map(|c| (c["defence"].as_str().unwrap(), c["policy"].as_str().unwrap())).collect();
    assert_eq!(named, [("none", "none"), ("none", "full"), ("lim", "none"), ("lim", "full")]);
    for cell in cells {
        assert!(cell["median"]["requests_per_delivered"].as_f64().unwrap() >= 1.0, "{cell}");
    }
    assert_eq!(document["grid"]["rows"][1]["defences"]["limit"]["kind"], "aimd");

    for (defence, says) in [
        ("moat", "none, deadline, codel, adaptive_lifo, aimd"),
        (r#"q={"queue": "lifo2"}"#, "defences[0].defences.queue"),
        ("q={not json", "not JSON"),
    ] {
        let refused = Command::new(env!("CARGO_BIN_EXE_retrylab"))
            .args([
                "compare",
                "--scenario",
                "overload",
                "--burst",
                "5",
                "--policy",
                "none",
                "--policy",
                "full",
            ])
            .args(["--defence", defence, "--quiet"])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{defence}: {said}");
        assert_eq!(said.trim_end().lines().count(), 1, "one plain line: {said}");
        assert!(said.contains(says), "{defence}: {said}");
    }
}

/// The question the grid is for, on the metastable set-up: with the naive client and no
/// defence the endpoint stays stuck after the slowdown; fixing either side ends it (the
/// deadline drop at the server, the retry budget at the client), and each cell says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_metastable_the_grid_says_which_cells_ended_the_failure() {
    let _turn = crate::helpers::OPEN_SYSTEM_RUNS.lock().await;
    let app = TestApp::spawn().await;
    let request = json!({"scenario": "metastable", "seed": 19, "runs": 1, "late_threshold_ms": 1000,
        "policies": ["none", "budget"],
        "defences": [{"name": "none", "defences": {}}, {"name": "deadline", "defences": {"deadline": true}}]});
    let report = compared(&app, &request).await;
    assert_eq!(report["key_figure"], json!(["goodput_after_trigger"]));
    let goodput = |defence: &str, policy: &str| {
        let cell = cell(&report, defence, policy);
        println!("{defence}/{policy}: {}", cell["median"]);
        (cell["median"]["goodput_after_trigger"].as_f64().unwrap(), cell["ends_failure"].as_bool().unwrap())
    };
    let (stuck, ended) = goodput("none", "none");
    assert!(stuck < 0.25 && !ended, "naive client, no defence: stuck ({stuck})");
    for (defence, policy) in [("deadline", "none"), ("none", "budget"), ("deadline", "budget")] {
        let (after, ended) = goodput(defence, policy);
        assert!(after > 0.5 && ended, "{defence}/{policy} ended it ({after})");
    }
    for cell in report["grid"]["cells"].as_array().unwrap() {
        let offered = cell["median"]["offered"].as_f64().unwrap();
        assert!((300.0..=600.0).contains(&offered), "16 s of 28 a second: {cell}");
        assert_eq!(cell["median"]["applied_twice"], 0.0);
    }
}

/// A grid is saved as a comparison is: after a restart its document has the same cells, each
/// naming its defence, and a cell still opens in a lab with its defences.
#[tokio::test]
async fn a_grid_reopens_after_a_restart_with_its_cells() {
    let db = crate::helpers::fresh_db();
    let (app, server) = TestApp::spawn_stoppable(retrylab::config::Config::new(db.clone())).await;
    let request = json!({"scenario": "overload", "burst": 5, "seed": 3, "runs": 1, "late_threshold_ms": 1000,
        "policies": ["none"],
        "defences": [{"name": "plain", "defences": {}}, {"name": "lifo", "defences": {"queue": "adaptive_lifo"}}]});
    let report = compared(&app, &request).await;
    let id = report["id"].as_str().unwrap();
    // Stopped as SIGTERM stops it: what it measured is kept.
    server.stop().await;
    let again = TestApp::spawn_config(retrylab::config::Config::new(db)).await;
    let (status, reopened) = again.call(Method::GET, &format!("/api/comparisons/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{reopened}");
    assert_eq!(reopened["grid"]["cells"], report["grid"]["cells"]);
    assert_eq!(reopened["grid"]["rows"][1]["defences"]["queue"], "adaptive_lifo");
    // One policy: no verdict within a row.
    assert_eq!(reopened["grid"]["rows"][0]["verdict"], Value::Null);
    let body = json!({"policy": "none", "defence": "lifo"}).to_string();
    let (status, opened) =
        again.call(Method::POST, &format!("/api/comparisons/{id}/labs"), Some(&body)).await;
    assert_eq!(status, StatusCode::CREATED, "{opened}");
    let lab = again.snapshot(opened["id"].as_str().unwrap()).await;
    assert_eq!(lab["downstream"]["defences"]["queue"], "adaptive_lifo");
}

/// A run the machine kept late is run again in a grid as in any comparison: every cell of
/// that run gets a new lab with its row's defences and its policy, the cell lists both labs,
/// and its figures are the second try's. At a threshold of 1 ms of lateness (p99 of 10 ms
/// ticks that a timer rounds up to the next millisecond) the first try is as good as sure to
/// be kept late.
#[tokio::test]
async fn a_late_run_in_a_grid_is_run_again_in_each_cell_against_its_row_s_defences() {
    let app =
        TestApp::spawn_with(retrylab::config::Limits { lab_create_burst: 1_000, ..Default::default() }).await;
    let request = json!({"scenario": "overload", "burst": 5, "seed": 4, "runs": 1, "late_threshold_ms": 1,
        "policies": ["none", "full"],
        "defences": [{"name": "none", "defences": {}}, {"name": "aimd", "defences": {"limit": {"kind": "aimd"}}}]});
    let report = compared(&app, &request).await;
    let late: Vec<(u64, u64, bool, f64)> = report["invalid_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let n = |k: &str| r[k].as_u64().unwrap();
            (n("run"), n("attempt"), r["re_run"].as_bool().unwrap(), r["lateness_ms_p99"].as_f64().unwrap())
        })
        .collect();
    println!("late tries: {late:?}");
    assert!(
        matches!(late.first(), Some(&(0, 0, true, ms)) if ms > 1.0),
        "the first try ran late and was run again: {late:?}"
    );
    let second_late = late.iter().any(|&(run, attempt, ..)| (run, attempt) == (0, 1));
    assert_eq!(late.len(), 1 + usize::from(second_late), "{late:?}");
    assert!(late.iter().all(|&(_, attempt, re_run, _)| re_run == (attempt == 0)), "run again once: {late:?}");

    let columns = report["columns"].as_array().unwrap();
    let tries = |attempt: u64| {
        let mut cells: Vec<(String, String)> = columns
            .iter()
            .filter(|c| c["attempt"] == attempt)
            .map(|c| (c["defence"].as_str().unwrap().to_owned(), c["policy"].as_str().unwrap().to_owned()))
            .collect();
        cells.sort();
        cells
    };
    let every_cell: Vec<(String, String)> =
        [("aimd", "full"), ("aimd", "none"), ("none", "full"), ("none", "none")]
            .map(|(d, p)| (d.to_owned(), p.to_owned()))
            .to_vec();
    assert_eq!((tries(0), tries(1)), (every_cell.clone(), every_cell), "each cell tried twice");
    assert_eq!(columns.len(), 8);
    let key = report["key_figure"][0].as_str().unwrap();
    let rows = report["grid"]["rows"].as_array().unwrap();
    for (defence, policy) in tries(1) {
        let column = |attempt: u64| {
            columns
                .iter()
                .find(|c| {
                    c["attempt"] == attempt
                        && c["defence"] == defence.as_str()
                        && c["policy"] == policy.as_str()
                })
                .unwrap()
        };
        let (first, again) = (column(0), column(1));
        assert_ne!(first["lab"], again["lab"], "a new lab for the second try");
        let figures = &again["figures"];
        assert_eq!(
            figures["delivered"].as_u64().unwrap() + figures["dead_letter"].as_u64().unwrap(),
            5,
            "{again}"
        );
        // The new lab has the cell's row's defences and the cell's policy.
        let row = rows.iter().find(|r| r["name"] == defence.as_str()).unwrap();
        let lab = app.snapshot(again["lab"].as_str().unwrap()).await;
        assert_eq!(lab["downstream"]["defences"], row["defences"], "{defence}/{policy}");
        assert_eq!(lab["downstream"]["mode"], "overloaded");
        assert_eq!(
            lab["policy"]["jitter"],
            policy_of(&report, &policy)["policy"]["jitter"],
            "{defence}/{policy}"
        );
        // The cell lists both tries' labs and counts only the second, unless it too ran late.
        let cell = cell(&report, &defence, &policy);
        assert_eq!(cell["labs"], json!([first["lab"], again["lab"]]), "{cell}");
        assert_eq!(cell["valid_runs"], u64::from(!second_late), "{cell}");
        if second_late {
            assert_eq!(cell["median"], json!({}), "no valid run, no figure: {cell}");
        } else {
            assert_eq!(cell["median"][key], figures[key], "the second try's figure: {cell}");
        }
        // A policy's runs list both tries in both rows; only a second try on time counts.
        let runs = policy_of(&report, &policy)["runs"].as_array().unwrap();
        let listed = |attempt: u64| {
            runs.iter().find(|r| r["attempt"] == attempt && r["defence"] == defence.as_str()).unwrap()
        };
        assert_eq!(
            (listed(0)["valid"].clone(), listed(1)["valid"].clone()),
            (json!(false), json!(!second_late))
        );
    }
    // Left out even when run again: the report says so.
    let warning = report["warning"].as_str();
    assert_eq!(
        warning.is_some_and(|w| w.contains("run 1") && w.contains("even when run again")),
        second_late,
        "{warning:?}"
    );
}

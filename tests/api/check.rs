//! `retrylab check URL`: against the lab's own endpoint every check passes; against small
//! servers written here, each breaking one rule, the check that names the rule flags it and no
//! check of another rule fails. The binary's exit codes and bad input are checked on the real
//! binary.

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use retrylab::contract::{self, BodyTemplate, Effect, Report, Target, Verdict};
use serde_json::{Value, json};

use crate::helpers::TestApp;

/// The one rule a test server breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    None,
    /// Answers a repeat with the stored answer, but applies it again.
    AppliesRepeats,
    /// Answers 200 (the stored answer) to a reused key with another body.
    AcceptsOtherBody,
    /// Looks the key up, then applies after a pause: copies at once are each applied.
    RacesOnConcurrentCopies,
    /// A repeat gets a body of its own, not the stored one.
    ReplaysAnotherBody,
    /// Each key's first request gets 503 without `Retry-After`.
    ServiceUnavailableWithoutRetryAfter,
}

#[derive(Default)]
struct Ledger {
    applied: u64,
    answers: HashMap<String, (Bytes, Value)>,
    at_work: HashSet<String>,
    refused_once: HashSet<String>,
    served: u64,
}

type Server = Arc<(Flaw, Mutex<Ledger>)>;

/// An idempotent POST /orders as the draft describes it, but for its `Flaw`; GET /count gives
/// what it applied.
async fn spawn_server(flaw: Flaw) -> String {
    let state: Server = Arc::new((flaw, Mutex::new(Ledger::default())));
    let app = Router::new()
        .route("/orders", post(order))
        .route(
            "/count",
            get(|State(s): State<Server>| async move {
                axum::Json(json!({"applied": s.1.lock().unwrap().applied}))
            }),
        )
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

async fn order(State(server): State<Server>, headers: HeaderMap, body: Bytes) -> Response {
    let flaw = server.0;
    let keys: Vec<_> = headers.get_all("idempotency-key").iter().collect();
    let key = match keys[..] {
        [] => return (StatusCode::BAD_REQUEST, "Idempotency-Key is required").into_response(),
        [one] => match one.to_str() {
            Ok(k) if !k.is_empty() && k.len() <= 255 => k.to_owned(),
            _ => return (StatusCode::BAD_REQUEST, "bad Idempotency-Key").into_response(),
        },
        _ => return (StatusCode::BAD_REQUEST, "one Idempotency-Key").into_response(),
    };
    {
        let mut ledger = server.1.lock().unwrap();
        if let Some((first, answer)) = ledger.answers.get(&key).cloned() {
            if first != body && flaw != Flaw::AcceptsOtherBody {
                return (StatusCode::UNPROCESSABLE_ENTITY, "another body").into_response();
            }
            if flaw == Flaw::AppliesRepeats {
                ledger.applied += 1;
            }
            ledger.served += 1;
            let mut answer = answer;
            if flaw == Flaw::ReplaysAnotherBody {
                answer["served"] = json!(ledger.served);
            }
            return (StatusCode::CREATED, axum::Json(answer)).into_response();
        }
        if ledger.at_work.contains(&key) && flaw != Flaw::RacesOnConcurrentCopies {
            return (StatusCode::CONFLICT, [("retry-after", "1")], "at work").into_response();
        }
        if flaw == Flaw::ServiceUnavailableWithoutRetryAfter && ledger.refused_once.insert(key.clone()) {
            return (StatusCode::SERVICE_UNAVAILABLE, "try later").into_response();
        }
        ledger.at_work.insert(key.clone());
    }
    // The work finishes even when the client hangs up, as a real server's would.
    let work = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        let mut ledger = server.1.lock().unwrap();
        ledger.applied += 1;
        let answer = json!({"id": ledger.applied});
        ledger.answers.insert(key.clone(), (body, answer.clone()));
        ledger.at_work.remove(&key);
        (ledger.applied, answer)
    });
    let (id, answer) = work.await.unwrap();
    (StatusCode::CREATED, [("location", format!("/orders/{id}"))], axum::Json(answer)).into_response()
}

fn target(url: &str, effect: &str, pointer: &str) -> Target {
    Target {
        url: url.parse().unwrap(),
        method: reqwest::Method::POST,
        body: BodyTemplate::parse(r#"{"order": {n}}"#).unwrap(),
        effect: Some(Effect { url: effect.parse().unwrap(), pointer: pointer.into() }),
        max_requests: contract::DEFAULT_MAX_REQUESTS,
        dry_run: false,
    }
}

fn verdicts(report: &Report) -> Vec<(&'static str, Verdict)> {
    report.checks.iter().map(|c| (c.id, c.verdict)).collect()
}

fn failed(report: &Report) -> Vec<&'static str> {
    report.checks.iter().filter(|c| c.verdict == Verdict::Fail).map(|c| c.id).collect()
}

#[tokio::test]
async fn against_the_lab_s_own_endpoint_every_check_passes() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let url = app.url(&format!("/labs/{lab}/downstream"));
    let report = contract::check(target(&url, &app.url(&format!("/api/labs/{lab}")), "/counters/applied"))
        .await
        .unwrap();
    for check in &report.checks {
        let allowed: &[Verdict] = match check.id {
            // No 503 or 429 comes from a healthy lab; a 409 only when copies meet at work.
            "retry_after" => &[Verdict::NotApplicable],
            "conflict_retry_after" => &[Verdict::Pass, Verdict::NotApplicable],
            _ => &[Verdict::Pass],
        };
        assert!(allowed.contains(&check.verdict), "{}: {:?} {}", check.id, check.verdict, check.detail);
    }
    let replay = &report.checks[2];
    assert!(replay.detail.contains("(+1)"), "the effect was counted: {}", replay.detail);
    assert!(report.keys.iter().all(|k| k.starts_with("retrylab-check-")), "{:?}", report.keys);
    let snapshot = app.snapshot(&lab).await;
    assert_eq!(snapshot["counters"]["applied_twice"], 0);
}

#[tokio::test]
async fn each_broken_rule_is_flagged_by_its_own_check_and_no_other_rule_fails() {
    // The flaw, the check that names it, and the checks that rest on the same rule.
    let cases = [
        (Flaw::None, "", &[][..]),
        // A repeat applied again: the replay, copies at once and a retry after a timeout are
        // all repeats of one key, so all three see it.
        (Flaw::AppliesRepeats, "replay", &["replay", "concurrent", "timeout_retry"][..]),
        (Flaw::AcceptsOtherBody, "other_body", &["other_body"][..]),
        (Flaw::RacesOnConcurrentCopies, "concurrent", &["concurrent"][..]),
        (Flaw::ReplaysAnotherBody, "replay", &["replay"][..]),
        (Flaw::ServiceUnavailableWithoutRetryAfter, "retry_after", &["retry_after"][..]),
    ];
    let runs = cases.iter().map(|&(flaw, named, same_rule)| async move {
        let base = spawn_server(flaw).await;
        let report = contract::check(target(&format!("{base}/orders"), &format!("{base}/count"), "/applied"))
            .await
            .unwrap();
        let failed = failed(&report);
        if flaw == Flaw::None {
            assert!(failed.is_empty(), "a server true to the draft passes: {:?}", verdicts(&report));
        } else {
            assert!(failed.contains(&named), "{flaw:?} is flagged by {named}: {:?}", verdicts(&report));
            assert!(
                failed.iter().all(|f| same_rule.contains(f)),
                "{flaw:?}: only {same_rule:?} may fail: {:?}",
                report.checks.iter().map(|c| (c.id, c.verdict, c.detail.clone())).collect::<Vec<_>>()
            );
        }
        let check = report.checks.iter().find(|c| c.id == named || named.is_empty()).unwrap();
        assert!(!check.requests.is_empty() && !check.source.is_empty(), "{check:?}");
        (flaw, report)
    });
    for (flaw, report) in futures_util::future::join_all(runs).await {
        if flaw == Flaw::AcceptsOtherBody {
            let other = report.checks.iter().find(|c| c.id == "other_body").unwrap();
            assert!(other.detail.contains("got 201") || other.detail.contains("got 200"), "{}", other.detail);
        }
        if flaw == Flaw::None {
            assert!(!report.locations.is_empty(), "the Locations created are listed");
        }
    }
}

fn retrylab(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_retrylab")).args(args).output().unwrap()
}

#[tokio::test]
async fn the_command_exits_1_on_a_failure_with_a_curl_to_reproduce_it_and_2_on_bad_input() {
    let good = spawn_server(Flaw::None).await;
    let bad = spawn_server(Flaw::AcceptsOtherBody).await;
    let (good_url, bad_url) = (format!("{good}/orders"), format!("{bad}/orders"));
    let junit = std::env::temp_dir().join(format!("retrylab-check-{}.xml", std::process::id()));
    let (g, b, j) = (good_url.clone(), bad_url.clone(), junit.clone());
    let (ok, failing, json, dry, usage) = tokio::task::spawn_blocking(move || {
        let ok = retrylab(&["check", &g, "--junit", j.to_str().unwrap()]);
        let failing = retrylab(&["check", &b]);
        let json = retrylab(&[
            "check",
            &b,
            "--json",
            "--effect",
            &format!("GET {}", b.replace("/orders", "/count")),
            "--effect-pointer",
            "/applied",
        ]);
        let dry = retrylab(&["check", &g, "--dry-run"]);
        let usage = [
            retrylab(&["check", "not a url"]),
            retrylab(&["check", "http://192.0.2.1/orders"]),
            retrylab(&["check", &g, "--body", "order={n}"]),
            retrylab(&["check", "http://127.0.0.1:1/orders"]),
            retrylab(&["check", &g, "--effect", &g.replace("/orders", "/nothing")]),
        ];
        (ok, failing, json, dry, usage)
    })
    .await
    .unwrap();
    let out = |o: &std::process::Output| {
        format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
    };
    assert_eq!(ok.status.code(), Some(0), "{}", out(&ok));
    let xml = std::fs::read_to_string(&junit).unwrap();
    let _ = std::fs::remove_file(&junit);
    assert!(xml.contains("tests=\"8\" failures=\"0\"") && xml.contains("name=\"concurrent\""), "{xml}");
    assert_eq!(failing.status.code(), Some(1), "{}", out(&failing));
    let said = out(&failing);
    assert!(
        said.contains("other_body failed; to reproduce:") && said.contains("curl -sS -i -X POST"),
        "{said}"
    );
    assert!(said.contains("keys sent: retrylab-check-"), "{said}");
    let report: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["url"], bad_url.as_str());
    let other = report["checks"].as_array().unwrap().iter().find(|c| c["id"] == "other_body").unwrap();
    assert_eq!(other["verdict"], "fail", "{other}");
    assert!(other["source"].as_str().unwrap().contains("section 2.7"), "{other}");
    assert_eq!(
        other["requests"].as_array().unwrap().iter().filter(|r| r["method"] == "POST").count(),
        2,
        "{other}"
    );
    assert_eq!(dry.status.code(), Some(0), "{}", out(&dry));
    let plan = String::from_utf8_lossy(&dry.stdout);
    assert!(plan.lines().filter(|l| l.contains("curl ")).count() >= 14, "{plan}");
    for (output, names) in usage.iter().zip([
        "does not parse",
        "--allow-host 192.0.2.1",
        "--body is not JSON",
        "does not answer",
        "did not answer JSON",
    ]) {
        assert_eq!(output.status.code(), Some(2), "{}", out(output));
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(err.contains(names) && err.lines().count() == 1, "{names}: {err}");
    }
}

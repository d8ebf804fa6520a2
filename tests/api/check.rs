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
    /// Answers as the draft says, but applies nothing: the count never moves.
    NeverApplies,
    /// Fails (500) every request under the `replay` check's keys, each time.
    FailsTheReplaysKey,
}

#[derive(Default)]
struct Ledger {
    applied: u64,
    answers: HashMap<String, (Bytes, Value)>,
    at_work: HashSet<String>,
    refused_once: HashSet<String>,
    served: u64,
    created: u64,
}

/// The server's flaw, how long its operation takes, and the `Retry-After` of its 409 (the
/// operation still in work), if any.
struct Api {
    flaw: Flaw,
    work: Duration,
    in_progress_retry_after: Option<&'static str>,
    ledger: Mutex<Ledger>,
}

type Server = Arc<Api>;

/// An idempotent POST /orders as the draft describes it, but for its `Flaw`; GET /count gives
/// what it applied.
async fn spawn_server(flaw: Flaw) -> String {
    spawn_api(flaw, Duration::from_millis(30), Some("1")).await
}

async fn spawn_api(flaw: Flaw, work: Duration, in_progress_retry_after: Option<&'static str>) -> String {
    let state: Server =
        Arc::new(Api { flaw, work, in_progress_retry_after, ledger: Mutex::new(Ledger::default()) });
    let app = Router::new()
        .route("/orders", post(order))
        .route(
            "/count",
            get(|State(s): State<Server>| async move {
                axum::Json(json!({"applied": s.ledger.lock().unwrap().applied}))
            }),
        )
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

async fn order(State(server): State<Server>, headers: HeaderMap, body: Bytes) -> Response {
    let flaw = server.flaw;
    let keys: Vec<_> = headers.get_all("idempotency-key").iter().collect();
    let key = match keys[..] {
        [] => return (StatusCode::BAD_REQUEST, "Idempotency-Key is required").into_response(),
        [one] => match one.to_str() {
            Ok(k) if !k.is_empty() && k.len() <= 255 => k.to_owned(),
            _ => return (StatusCode::BAD_REQUEST, "bad Idempotency-Key").into_response(),
        },
        _ => return (StatusCode::BAD_REQUEST, "one Idempotency-Key").into_response(),
    };
    if flaw == Flaw::FailsTheReplaysKey && key.contains("-replay-") {
        return (StatusCode::INTERNAL_SERVER_ERROR, "the store is down").into_response();
    }
    {
        let mut ledger = server.ledger.lock().unwrap();
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
            let mut headers = HeaderMap::new();
            if let Some(after) = server.in_progress_retry_after {
                headers.insert("retry-after", after.parse().unwrap());
            }
            return (StatusCode::CONFLICT, headers, "at work").into_response();
        }
        if flaw == Flaw::ServiceUnavailableWithoutRetryAfter && ledger.refused_once.insert(key.clone()) {
            return (StatusCode::SERVICE_UNAVAILABLE, "try later").into_response();
        }
        ledger.at_work.insert(key.clone());
    }
    // The work finishes even when the client hangs up, as a real server's would.
    let work = tokio::spawn(async move {
        tokio::time::sleep(server.work).await;
        let mut ledger = server.ledger.lock().unwrap();
        if flaw != Flaw::NeverApplies {
            ledger.applied += 1;
        }
        ledger.created += 1;
        let answer = json!({"id": ledger.created});
        ledger.answers.insert(key.clone(), (body, answer.clone()));
        ledger.at_work.remove(&key);
        (ledger.created, answer)
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
        in_progress_wait: contract::DEFAULT_IN_PROGRESS_WAIT,
        dry_run: false,
        tls: Default::default(),
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
            retrylab(&["check", &g, "--insecure", "--cacert", "Cargo.toml"]),
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
        "--cacert and --insecure contradict each other",
    ]) {
        assert_eq!(output.status.code(), Some(2), "{}", out(output));
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(err.contains(names) && err.lines().count() == 1, "{names}: {err}");
    }
}

/// A check's verdict as the JSON report spells it, and its detail.
fn verdict_of(report: &Report, id: &str) -> (String, String) {
    let check = report.checks.iter().find(|c| c.id == id).unwrap();
    (serde_json::to_value(check.verdict).unwrap().as_str().unwrap().to_owned(), check.detail.clone())
}

fn output(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// An API that answers `status` with `answer` to every POST, whatever its key; GET /count never
/// moves.
async fn spawn_refusing(status: StatusCode, answer: &'static str) -> String {
    let app = Router::new()
        .route(
            "/orders",
            post(move || async move { (status, [("content-type", "application/json")], answer) }),
        )
        .route("/count", get(|| async { axum::Json(json!({"applied": 0})) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

#[tokio::test]
async fn an_api_that_refuses_every_body_gets_no_idempotency_verdict_and_exits_2() {
    // What a typed API answers to a body it does not know: a plain 400, and FastAPI's 422.
    let cases = [
        (StatusCode::BAD_REQUEST, r#"{"error": "sku is required"}"#),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            r#"{"detail": [{"loc": ["body", "sku"], "msg": "field required", "type": "value_error.missing"}]}"#,
        ),
    ];
    for (code, answer) in cases {
        let base = spawn_refusing(code, answer).await;
        let junit = std::env::temp_dir().join(format!("retrylab-refused-{}-{code}.xml", std::process::id()));
        let (url, count, j) = (format!("{base}/orders"), format!("{base}/count"), junit.clone());
        let (json, table) = tokio::task::spawn_blocking(move || {
            let json =
                retrylab(&["check", &url, "--json", "--effect", &count, "--effect-pointer", "/applied"]);
            let table = retrylab(&["check", &url, "--junit", j.to_str().unwrap()]);
            (json, table)
        })
        .await
        .unwrap();
        for run in [&json, &table] {
            assert_eq!(run.status.code(), Some(2), "{code}: {}", output(run));
            let err = String::from_utf8_lossy(&run.stderr);
            assert!(
                err.contains(&format!("refused the probe's body with {}", code.as_u16()))
                    && err.contains(&answer[..20])
                    && err.contains("--body"),
                "{code}: {err}"
            );
        }
        let report: Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(report["refused"]["status"], code.as_u16(), "{report}");
        assert_eq!(report["probe"]["status"], code.as_u16(), "{report}");
        let checks = report["checks"].as_array().unwrap();
        assert_eq!(checks.len(), 8, "{report}");
        for check in checks {
            assert_eq!(check["verdict"], "not_judged", "{code}: {check}");
            assert!(!check["detail"].as_str().unwrap().contains("more than once"), "{check}");
        }
        let xml = std::fs::read_to_string(&junit).unwrap();
        let _ = std::fs::remove_file(&junit);
        assert!(xml.contains("failures=\"0\"") && xml.contains("errors=\"8\""), "{xml}");
        assert_eq!(xml.matches("<error message=\"not judged").count(), 8, "{xml}");
        let said = String::from_utf8_lossy(&table.stdout);
        assert!(said.contains(&format!("refused with {}", code.as_u16())), "{said}");
    }
}

#[tokio::test]
async fn an_effect_that_did_not_move_is_not_applied_and_a_repeated_500_is_no_replay() {
    let (still, failing) =
        tokio::join!(spawn_server(Flaw::NeverApplies), spawn_server(Flaw::FailsTheReplaysKey));
    let (still, failing) = tokio::join!(
        contract::check(target(&format!("{still}/orders"), &format!("{still}/count"), "/applied")),
        contract::check(target(&format!("{failing}/orders"), &format!("{failing}/count"), "/applied")),
    );
    let (still, failing) = (still.unwrap(), failing.unwrap());
    for id in ["replay", "concurrent", "timeout_retry", "other_body"] {
        let (verdict, detail) = verdict_of(&still, id);
        assert_eq!(verdict, "not_judged", "{id}: {detail}");
        assert!(detail.contains("(+0): not applied") && !detail.contains("more than once"), "{id}: {detail}");
    }
    let (verdict, detail) = verdict_of(&failing, "replay");
    assert_eq!(verdict, "not_judged", "{detail}");
    assert!(detail.contains("got 500 then 500") && detail.contains("not a replay"), "{detail}");
    assert!(failing.refused.is_none() && failing.probe.status == Some(201), "{:?}", failing.probe);
}

#[tokio::test]
async fn a_body_without_n_against_the_lab_s_own_endpoint_fails_nothing() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let mut target = target(
        &app.url(&format!("/labs/{lab}/downstream")),
        &app.url(&format!("/api/labs/{lab}")),
        "/counters/applied",
    );
    target.body = BodyTemplate::parse(r#"{"sku": "book", "quantity": 1}"#).unwrap();
    let report = contract::check(target).await.unwrap();
    let verdicts: Vec<_> = report.checks.iter().map(|c| verdict_of(&report, c.id)).collect();
    assert!(verdicts.iter().all(|(v, _)| v == "pass" || v == "not_applicable"), "{verdicts:?}");
    let other = report.checks.iter().find(|c| c.id == "other_body").unwrap();
    let bodies: Vec<&str> = other.requests.iter().filter_map(|e| e.body.as_deref()).collect();
    assert!(bodies.iter().any(|b| b.contains("\"retrylab_check_variant\"")), "{bodies:?}");
    // A body that is no JSON object and has no {n} cannot be varied: that check says why.
    let mut target = self::target(&app.url(&format!("/labs/{lab}/downstream")), &app.url("/healthz"), "");
    target.effect = None;
    target.body = BodyTemplate::parse(r#"["book"]"#).unwrap();
    let report = contract::check(target).await.unwrap();
    let (verdict, detail) = verdict_of(&report, "other_body");
    assert_eq!(verdict, "not_judged", "{detail}");
    assert!(detail.contains("put {n}"), "{detail}");
}

#[tokio::test]
async fn keys_and_numbers_are_the_run_s_own() {
    let base = spawn_server(Flaw::None).await;
    let url = format!("{base}/orders");
    let (first, second) = tokio::join!(
        contract::check(target(&url, &format!("{base}/count"), "/applied")),
        contract::check(target(&url, &format!("{base}/count"), "/applied")),
    );
    let sent = |report: &Report| -> (HashSet<String>, HashSet<String>) {
        let all = report.checks.iter().flat_map(|c| c.requests.iter()).chain([&report.probe]);
        let all: Vec<_> = all.filter(|e| e.method == "POST").collect();
        (
            all.iter().flat_map(|e| e.keys.iter().filter(|k| !k.is_empty()).cloned()).collect(),
            all.iter().filter_map(|e| e.body.clone()).collect(),
        )
    };
    let ((keys_1, bodies_1), (keys_2, bodies_2)) = (sent(&first.unwrap()), sent(&second.unwrap()));
    assert!(keys_1.len() > 5 && bodies_1.len() > 8, "{keys_1:?} {bodies_1:?}");
    assert!(keys_1.is_disjoint(&keys_2), "{:?}", keys_1.intersection(&keys_2).collect::<Vec<_>>());
    assert!(bodies_1.is_disjoint(&bodies_2), "{:?}", bodies_1.intersection(&bodies_2).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_correct_handler_whose_operation_takes_2_s_passes_timeout_retry() {
    // Its 409 while the operation is in work: without Retry-After, and with Retry-After: 0.
    let runs = [None, Some("0")].map(|retry_after| async move {
        let base = spawn_api(Flaw::None, Duration::from_secs(2), retry_after).await;
        let report = contract::check(target(&format!("{base}/orders"), &format!("{base}/count"), "/applied"))
            .await
            .unwrap();
        (retry_after, report)
    });
    for (retry_after, report) in futures_util::future::join_all(runs).await {
        let (verdict, detail) = verdict_of(&report, "timeout_retry");
        assert_eq!(verdict, "pass", "Retry-After {retry_after:?}: {detail}");
        assert!(detail.contains("answers 409 (in progress)") && detail.contains("(+1)"), "{detail}");
        assert!(failed(&report).is_empty(), "{:?}", verdicts(&report));
    }
    // With a bound shorter than the operation, the check cannot judge, says so, and exits 1.
    let base = spawn_api(Flaw::None, Duration::from_secs(2), None).await;
    let url = format!("{base}/orders");
    let short = tokio::task::spawn_blocking(move || {
        retrylab(&["check", &url, "--json", "--in-progress-wait-ms", "300"])
    })
    .await
    .unwrap();
    assert_eq!(short.status.code(), Some(1), "{}", output(&short));
    let report: Value = serde_json::from_slice(&short.stdout).unwrap();
    let check = report["checks"].as_array().unwrap().iter().find(|c| c["id"] == "timeout_retry").unwrap();
    assert_eq!(check["verdict"], "not_judged", "{check}");
    assert!(check["detail"].as_str().unwrap().contains("--in-progress-wait-ms"), "{check}");
}

#[test]
fn the_help_shows_n_and_what_it_is_for() {
    let help = retrylab(&["check", "--help"]);
    let said = String::from_utf8_lossy(&help.stdout);
    assert!(
        said.contains("each `{n}` is replaced with a number unique to the request (and to the run)"),
        "{said}"
    );
    assert!(said.contains("--in-progress-wait-ms"), "{said}");
}

/// A self-signed certificate for 127.0.0.1 (made by openssl, as a person would) and a TLS front
/// that hands each connection's bytes to `backend`: the lab's own endpoint behind https.
async fn spawn_tls_front(backend: &str) -> (String, std::path::PathBuf) {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let dir = std::env::temp_dir().join(format!("retrylab-tls-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-days", "1", "-subj", "/CN=retrylab-test", "-addext", "subjectAltName=IP:127.0.0.1"])
        // A server's certificate, not a CA's (openssl marks one a CA by default; webpki refuses it).
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl makes the test's certificate (.ci/run installs it)");
    assert!(made.status.success(), "{}", output(&made));
    let chain = CertificateDer::pem_file_iter(&cert).unwrap().collect::<Result<Vec<_>, _>>().unwrap();
    let config = tokio_rustls::rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, PrivateKeyDer::from_pem_file(&key).unwrap())
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front = format!("https://{}", listener.local_addr().unwrap());
    let backend = backend.trim_start_matches("http://").to_owned();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else { return };
            let (acceptor, backend) = (acceptor.clone(), backend.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(socket).await else { return };
                let Ok(mut plain) = tokio::net::TcpStream::connect(&backend).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    (front, cert)
}

#[tokio::test]
async fn https_with_a_self_signed_certificate_runs_every_check_with_insecure_or_its_cacert() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let (front, cert) = spawn_tls_front(&app.url("")).await;
    let (url, effect) = (format!("{front}/labs/{lab}/downstream"), format!("GET {front}/api/labs/{lab}"));
    let cert = cert.to_str().unwrap().to_owned();
    let (untrusted, insecure, cacert) = tokio::task::spawn_blocking(move || {
        let run = |trust: &[&str]| {
            let mut args = vec!["check", &url, "--json", "--effect", &effect, "--effect-pointer"];
            args.extend(["/counters/applied"]);
            args.extend(trust);
            retrylab(&args)
        };
        (run(&[]), run(&["--insecure"]), run(&["--cacert", &cert]))
    })
    .await
    .unwrap();
    // Not trusted by the platform: said as such, with both ways out.
    assert_eq!(untrusted.status.code(), Some(2), "{}", output(&untrusted));
    let said = String::from_utf8_lossy(&untrusted.stderr);
    assert!(
        said.contains("certificate") && said.contains("--cacert") && said.contains("--insecure"),
        "{said}"
    );
    for (trust, run) in [("--insecure", &insecure), ("--cacert", &cacert)] {
        assert_eq!(run.status.code(), Some(0), "{trust}: {}", output(run));
        let report: Value = serde_json::from_slice(&run.stdout).unwrap();
        let checks = report["checks"].as_array().unwrap();
        assert_eq!(checks.len(), 8, "{trust}: {report}");
        let judged = checks.iter().filter(|c| c["verdict"] == "pass").count();
        assert!(
            checks.iter().all(|c| c["verdict"] == "pass" || c["verdict"] == "not_applicable") && judged >= 6,
            "{trust}: {checks:?}"
        );
        let probe = report["probe"]["status"].as_u64();
        assert!(probe.is_some_and(|s| (200..300).contains(&s)), "{trust}: {report}");
    }
}

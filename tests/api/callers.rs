//! Outside callers on the lab: four test clients of known retry behaviour, written here and
//! talking to the real endpoint over real sockets, each graded by `GET /api/labs/{lab}/callers`
//! on a lab set to down, then throttled, then healthy; the bounds, the header's checks and a
//! restart.

use std::time::Duration;

use futures_util::future::join_all;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use reqwest::StatusCode;
use retrylab::config::{Config, Limits};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::helpers::{TestApp, post_as};

/// How a test client retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Waits at least the `Retry-After`, backs off (1 s, 2 s) and jitters above it, more each time.
    Polite,
    /// Backs off from 100 ms with jitter (up to as much again), and never looks at `Retry-After`;
    /// retries any error.
    IgnoresRetryAfter,
    /// Waits `max(Retry-After, 1 s x 2^(n-1))` exactly: backoff with no jitter.
    Lockstep,
    /// Waits like `Polite`, but every retry carries a new key.
    NewKeyEachRetry,
}

struct TestClient {
    kind: Kind,
    name: &'static str,
    endpoint: String,
    http: reqwest::Client,
    rng: Mutex<StdRng>,
}

/// Keys sent side by side in each phase.
const KEYS: usize = 6;

impl TestClient {
    fn new(app: &TestApp, lab: &str, kind: Kind, name: &'static str, seed: u64) -> TestClient {
        TestClient::at(app.url(&format!("/labs/{lab}/downstream")), kind, name, seed)
    }

    fn at(endpoint: String, kind: Kind, name: &'static str, seed: u64) -> TestClient {
        TestClient {
            kind,
            name,
            endpoint,
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
        }
    }

    async fn send(&self, key: &str, body: &str, content_type: &str) -> (StatusCode, Option<u64>) {
        let response = self
            .http
            .post(&self.endpoint)
            .header("X-Client-Name", self.name)
            .header("Idempotency-Key", key)
            .header("Content-Type", content_type)
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()?.parse().ok());
        (response.status(), retry_after)
    }

    fn retries(&self, status: StatusCode) -> bool {
        match self.kind {
            Kind::IgnoresRetryAfter => !status.is_success(),
            _ => matches!(status.as_u16(), 408 | 409 | 429) || status.is_server_error(),
        }
    }

    fn wait_ms(&self, n: u32, retry_after_s: Option<u64>, rng: &mut StdRng) -> u64 {
        let floor = retry_after_s.unwrap_or(0) * 1000;
        let nominal = 1000 * 2u64.pow(n - 1);
        match self.kind {
            Kind::Polite | Kind::NewKeyEachRetry => {
                floor.max(nominal) + rng.random_range(0..nominal * n as u64 / 2)
            }
            Kind::Lockstep => floor.max(nominal),
            Kind::IgnoresRetryAfter => {
                let nominal = 100 * 2u64.pow(n - 1);
                nominal + rng.random_range(0..nominal)
            }
        }
    }

    /// Delivers one body as its retry policy says; returns the last status.
    async fn deliver(&self, key: String, body: String, content_type: &str) -> StatusCode {
        let max_attempts = if self.kind == Kind::IgnoresRetryAfter { 4 } else { 3 };
        let mut key = key;
        let mut n = 1;
        loop {
            let (status, retry_after) = self.send(&key, &body, content_type).await;
            if !self.retries(status) || n == max_attempts {
                return status;
            }
            let wait = self.wait_ms(n, retry_after, &mut *self.rng.lock().await);
            if self.kind == Kind::NewKeyEachRetry {
                key = format!("{key}-r{n}");
            }
            tokio::time::sleep(Duration::from_millis(wait)).await;
            n += 1;
        }
    }

    /// Sends `KEYS` bodies at once, each retried by the policy.
    async fn phase(&self, phase: &str) {
        let deliveries = (0..KEYS).map(|i| {
            let key = format!("{phase}-{i}");
            let body = json!({ "phase": phase, "i": i }).to_string();
            self.deliver(key, body, "application/json")
        });
        join_all(deliveries).await;
    }
}

/// The verdicts of one caller's checks, in the issue's order.
const CHECKS: [&str; 7] =
    ["retry_after", "backoff", "jitter", "attempts_capped", "key_reused", "no_retry_on_4xx", "timeouts"];

async fn report(app: &TestApp, lab: &str) -> Value {
    let response = app.client.get(app.url(&format!("/api/labs/{lab}/callers"))).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

fn verdicts(report: &Value, name: &str) -> Vec<String> {
    let caller = report["callers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no caller {name} in {report}"));
    CHECKS.iter().map(|check| caller["checks"][check]["verdict"].as_str().unwrap().to_owned()).collect()
}

fn said(report: &Value) -> String {
    serde_json::to_string_pretty(report).unwrap()
}

/// An endpoint without the per-client rate (the four clients share one address).
async fn spawn() -> TestApp {
    TestApp::spawn_with(Limits {
        endpoint_rate_per_s: 100_000,
        endpoint_burst: 100_000,
        ..Default::default()
    })
    .await
}

/// A lab of its own for each client: the throttled mode's rate limit is shared by every caller.
async fn lab(app: &TestApp) -> String {
    let lab = app.fast_lab().await;
    app.put(&lab, "downstream", r#"{"retry_after_s": 1, "rate_per_s": 2, "burst": 2}"#).await;
    lab
}

#[tokio::test]
async fn four_clients_of_known_behaviour_are_graded_through_down_throttled_and_healthy() {
    let app = spawn().await;
    let kinds = [
        (Kind::Polite, "polite"),
        (Kind::IgnoresRetryAfter, "impatient"),
        (Kind::Lockstep, "lockstep"),
        (Kind::NewKeyEachRetry, "new-keys"),
    ];
    let mut clients = Vec::new();
    for (seed, (kind, name)) in kinds.into_iter().enumerate() {
        let lab = lab(&app).await;
        clients.push((lab.clone(), TestClient::new(&app, &lab, kind, name, 7 + seed as u64)));
    }
    let (p, f, n) = ("pass", "fail", "not_seen");
    // After each phase, each client's verdicts, in the order of CHECKS.
    let expected: [(&str, [[&str; 7]; 4]); 3] = [
        (
            "down",
            [[p, p, p, p, p, n, n], [f, p, p, p, p, n, n], [p, p, f, p, p, n, n], [p, p, p, p, f, n, n]],
        ),
        (
            "throttled",
            [[p, p, p, p, p, n, n], [f, p, p, p, p, n, n], [p, p, f, p, p, n, n], [p, p, p, p, f, n, n]],
        ),
        (
            "healthy",
            [[p, p, p, p, p, p, n], [f, p, p, p, p, f, n], [p, p, f, p, p, p, n], [p, p, p, p, f, p, n]],
        ),
    ];
    for (phase, expected) in expected {
        for (lab, _) in &clients {
            app.set_mode(lab, phase).await;
        }
        let runs = clients.iter().map(|(lab, client)| async move {
            client.phase(phase).await;
            if phase == "healthy" {
                // A body the endpoint cannot take: 415, which no retry fixes.
                let status = client.deliver("healthy-bad".into(), "{}".into(), "text/plain").await;
                assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
            }
            lab
        });
        join_all(runs).await;
        for ((lab, client), expected) in clients.iter().zip(expected) {
            let report = report(&app, lab).await;
            assert_eq!(
                verdicts(&report, client.name),
                expected,
                "{} after {phase}: {}",
                client.name,
                said(&report)
            );
        }
    }
    // The evidence names keys and times.
    let impatient = report(&app, &clients[1].0).await;
    let evidence = impatient["callers"][0]["checks"]["retry_after"]["evidence"].as_str().unwrap();
    assert!(evidence.contains("key down-") && evidence.contains(" s)"), "{evidence}");
    let lockstep = report(&app, &clients[2].0).await;
    let evidence = lockstep["callers"][0]["checks"]["jitter"]["evidence"].as_str().unwrap();
    assert!(evidence.contains("came back at one instant"), "{evidence}");
    let new_keys = report(&app, &clients[3].0).await;
    let evidence = new_keys["callers"][0]["checks"]["key_reused"]["evidence"].as_str().unwrap();
    assert!(evidence.contains("-r1"), "{evidence}");
    let card = &new_keys["callers"][0];
    assert_eq!(card["keys"], card["requests"], "each retry made a key: {card}");
    assert!(card["keys"].as_u64().unwrap() > 3 * KEYS as u64, "{card}");
}

/// A plainly bad client: a new key every 100 ms, the same body, deaf to `Retry-After: 1`. Its
/// tries are one request retried, so it fails `retry_after` and `attempts_capped` with the
/// evidence, not only `key_reused`, and each failure says what to change. One request is too
/// few to judge a backoff or a jitter: those say so.
#[tokio::test]
async fn a_loop_making_a_new_key_every_100_ms_fails_retry_after_and_attempts_capped() {
    let app = spawn().await;
    let lab = lab(&app).await;
    app.set_mode(&lab, "down").await;
    let endpoint = app.url(&format!("/labs/{lab}/downstream"));
    for n in 0..15 {
        let response = app
            .client
            .post(&endpoint)
            .header("X-Client-Name", "loop")
            .header("Idempotency-Key", format!("loop-{n}"))
            .header("Content-Type", "application/json")
            .body(r#"{"order": 7}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = report(&app, &lab).await;
    let verdicts = verdicts(&report, "loop");
    // One request retried: one key's waits cannot show a backoff or a jitter either way.
    assert_eq!(&verdicts[..5], ["fail", "not_judged", "not_judged", "fail", "fail"], "{}", said(&report));
    let checks = &report["callers"][0]["checks"];
    let early = checks["retry_after"]["evidence"].as_str().unwrap();
    assert!(early.contains("after a Retry-After of 1 s"), "{early}");
    let capped = checks["attempts_capped"]["evidence"].as_str().unwrap();
    assert!(capped.contains("15 requests") && capped.contains("key loop-0"), "{capped}");
    for check in ["retry_after", "attempts_capped", "key_reused", "backoff"] {
        assert!(checks[check]["advice"].as_str().is_some_and(|a| !a.is_empty()), "{check}: {checks}");
    }
    assert_eq!(checks["timeouts"]["verdict"], "not_seen");
    assert!(checks["timeouts"]["advice"].is_string(), "a not_seen says what would show it: {checks}");
}

/// The four clients, by name, with the seed each is given.
const KINDS: [(Kind, &str, u64); 4] = [
    (Kind::Polite, "polite", 7),
    (Kind::IgnoresRetryAfter, "impatient", 8),
    (Kind::Lockstep, "lockstep", 9),
    (Kind::NewKeyEachRetry, "new-keys", 10),
];

/// The command `retrylab grade` runs below: the client `RETRYLAB_GRADE_CLIENT` names sends
/// `KEYS` bodies at `RETRYLAB_URL` from the start (into the schedule's outage without
/// `Retry-After`), `KEYS` more once that has passed (into the outage with the header), then one
/// the endpoint cannot take (415). Ignored in a plain test run: it is a client, run by the test
/// below with `--ignored`, not a test of its own.
#[tokio::test]
#[ignore = "a client that retrylab grade runs, not a test of its own"]
async fn as_a_command_graded_by_retrylab_grade() {
    let wanted =
        std::env::var("RETRYLAB_GRADE_CLIENT").expect("run by retrylab grade, which names the client");
    let url = std::env::var("RETRYLAB_URL").expect("run by retrylab grade, which gives the URL");
    let (kind, name, seed) = KINDS.into_iter().find(|(_, name, _)| *name == wanted).unwrap();
    let client = TestClient::at(url, kind, name, seed);
    let started = tokio::time::Instant::now();
    client.phase("down").await;
    // The standard schedule sends Retry-After from 3 s on.
    tokio::time::sleep_until(started + Duration::from_millis(3_300)).await;
    client.phase("told").await;
    let status = client.deliver("healthy-bad".into(), "{}".into(), "text/plain").await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

/// `retrylab grade -- CMD` on the four clients, each run as a command (this test binary, running
/// the test above) through the standard schedule: the card's verdicts are those the lab gives
/// them above, and the exit status is 1 exactly when a check failed.
#[tokio::test]
async fn retrylab_grade_runs_each_known_client_and_exits_as_its_card_says() {
    let (p, f, n) = ("pass", "fail", "not_seen");
    let expected = [
        (0, [p, p, p, p, p, p, n]),
        (1, [f, p, p, p, p, f, n]),
        (1, [p, p, f, p, p, p, n]),
        (1, [p, p, p, p, f, p, n]),
    ];
    let me = std::env::current_exe().unwrap();
    let runs = KINDS.iter().map(|&(_, name, _)| {
        let me = me.clone();
        tokio::task::spawn_blocking(move || {
            let output = std::process::Command::new(env!("CARGO_BIN_EXE_retrylab"))
                .args(["grade", "--json", "--"])
                .arg(&me)
                .args([
                    "callers::as_a_command_graded_by_retrylab_grade",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                ])
                .env("RETRYLAB_GRADE_CLIENT", name)
                .output()
                .unwrap();
            (name, output)
        })
    });
    for (result, (code, verdicts_expected)) in join_all(runs).await.into_iter().zip(expected) {
        let (name, output) = result.unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let report: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|_| panic!("{name}: {}{stderr}", String::from_utf8_lossy(&output.stdout)));
        assert_eq!(verdicts(&report, name), verdicts_expected, "{name}: {}", said(&report));
        assert_eq!(output.status.code(), Some(code), "{name}: {stderr}");
    }
}

/// Names that would show as someone else's: bidi overrides and isolates reorder what is
/// shown, zero-width and other invisible format characters hide in it.
#[tokio::test]
async fn a_caller_name_with_invisible_or_reordering_characters_is_refused() {
    let app = spawn().await;
    let lab = app.fast_lab().await;
    for bad in [
        "bill\u{202E}gnil",
        "a\u{202A}b",
        "a\u{2066}b",
        "a\u{2069}b",
        "bil\u{200B}ling",
        "a\u{200D}b",
        "a\u{200F}b",
        "a\u{2060}b",
        "a\u{2064}b",
        "\u{FEFF}billing",
        "bil\u{AD}ling",
        "a\u{061C}b",
        "a\u{E0041}b",
    ] {
        let refused = post_as(&app, &lab, Some(bad), "k").await;
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "{bad:?}");
        assert_eq!(refused.headers()["content-type"], "application/problem+json");
        let problem: Value = refused.json().await.unwrap();
        assert!(problem["detail"].as_str().unwrap().contains("X-Client-Name"), "{bad:?}: {problem}");
    }
    let named = post_as(&app, &lab, Some("caf\u{e9} billing"), "k2").await;
    assert_eq!(named.status(), StatusCode::OK, "letters beyond ASCII are fine");
}

fn outside(snapshot: &Value) -> &Vec<Value> {
    snapshot["outside"]["messages"].as_array().unwrap()
}

#[tokio::test]
async fn a_caller_is_named_by_its_header_else_its_agent_and_a_bad_name_is_refused() {
    let app = spawn().await;
    let lab = app.fast_lab().await;
    assert_eq!(post_as(&app, &lab, Some("billing"), "a").await.status(), StatusCode::OK);
    let by_agent = app
        .client
        .post(app.url(&format!("/labs/{lab}/downstream")))
        .header("Idempotency-Key", "b")
        .header("Content-Type", "application/json")
        .header("User-Agent", "my-agent/1.0")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(by_agent.status(), StatusCode::OK);
    for bad in ["x".repeat(65), "tab\there".to_owned()] {
        let refused = post_as(&app, &lab, Some(&bad), "c").await;
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "{bad:?}");
        assert_eq!(refused.headers()["content-type"], "application/problem+json");
        let problem: Value = refused.json().await.unwrap();
        assert!(problem["detail"].as_str().unwrap().contains("X-Client-Name"), "{problem}");
    }
    // The lab's own client is known by its listener, never by a name: its burst is no caller's,
    // and a caller that calls itself "retrylab" is an outside caller like any other.
    assert_eq!(post_as(&app, &lab, Some("retrylab"), "d").await.status(), StatusCode::OK);
    app.burst(&lab, 5).await;
    let done =
        app.wait_for(&lab, Duration::from_secs(30), |s| crate::helpers::counter(s, "delivered") == 5).await;
    let callers: Vec<&str> = outside(&done).iter().map(|m| m["caller"].as_str().unwrap()).collect();
    assert_eq!(callers, ["billing", "my-agent/1.0", "retrylab"], "{}", done["outside"]);
    assert_eq!(outside(&done)[0]["key"], "a");
}

#[tokio::test]
async fn the_cap_on_callers_is_reached_counted_and_said() {
    let app = TestApp::spawn_with(Limits { max_callers_per_lab: 2, ..Default::default() }).await;
    let lab = app.fast_lab().await;
    for (name, key) in [("one", "1"), ("two", "2"), ("three", "3"), ("three", "4"), ("one", "5")] {
        assert_eq!(post_as(&app, &lab, Some(name), key).await.status(), StatusCode::OK, "still answered");
    }
    let report = report(&app, &lab).await;
    let names: Vec<&str> =
        report["callers"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["one", "two"]);
    assert_eq!(report["untracked"]["max_callers_per_lab"], 2, "{report}");
    assert_eq!(report["max_callers_per_lab"], 2);
    assert_eq!(report["callers"][0]["keys"], 2);
    let snapshot = app.snapshot(&lab).await;
    assert_eq!(snapshot["outside"]["untracked"]["max_callers_per_lab"], 2);
}

#[tokio::test]
async fn a_caller_that_hangs_up_shows_its_timeout_as_a_figure() {
    let app = spawn().await;
    let lab = app.fast_lab().await;
    app.put(&lab, "downstream", r#"{"mode": "slow", "slow_ms": [400, 450]}"#).await;
    let impatient =
        reqwest::Client::builder().no_proxy().timeout(Duration::from_millis(150)).build().unwrap();
    for key in ["t1", "t2"] {
        let sent = impatient
            .post(app.url(&format!("/labs/{lab}/downstream")))
            .header("X-Client-Name", "hasty")
            .header("Idempotency-Key", key)
            .header("Content-Type", "application/json")
            .body("{}")
            .send()
            .await;
        assert!(sent.is_err(), "it hung up");
    }
    let mut last = Value::Null;
    for _ in 0..100 {
        last = report(&app, &lab).await;
        if last["callers"][0]["checks"]["timeouts"]["verdict"] == "pass"
            && last["callers"][0]["checks"]["timeouts"]["evidence"].as_str().unwrap().contains("2 times")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let timeouts = &last["callers"][0]["checks"]["timeouts"];
    assert_eq!(timeouts["verdict"], "pass", "{last}");
    let attempts = outside(&app.snapshot(&lab).await)[0]["attempts"].clone();
    let took = attempts[0]["ended_ms"].as_u64().unwrap() - attempts[0]["started_ms"].as_u64().unwrap();
    assert!(attempts[0]["hung_up"] == true && attempts[0]["status"].is_null(), "{attempts}");
    assert!((140..400).contains(&took), "hung up after its 150 ms timeout, not the 400 ms answer: {took}");
    assert!(
        timeouts["evidence"].as_str().unwrap().starts_with("timeout about 1"),
        "a figure near 150 ms: {timeouts}"
    );
}

#[tokio::test]
async fn outside_messages_survive_a_restart() {
    let db = crate::helpers::fresh_db();
    let settings =
        || Config { db: db.clone(), ..crate::helpers::config(Limits::default(), Default::default()) };
    let (app, server) = TestApp::spawn_stoppable(settings()).await;
    let lab = app.fast_lab().await;
    app.put(&lab, "downstream", r#"{"mode": "down", "retry_after_s": 1}"#).await;
    for _ in 0..2 {
        assert_eq!(post_as(&app, &lab, Some("kept"), "k").await.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    let before = app.snapshot(&lab).await["outside"].clone();
    let card_before = report(&app, &lab).await;
    server.stop().await;
    let app = TestApp::spawn_config(settings()).await;
    let after = app.snapshot(&lab).await["outside"].clone();
    assert_eq!(after["messages"], before["messages"], "the same attempts, times and waits");
    assert_eq!(outside(&app.snapshot(&lab).await)[0]["attempts"].as_array().unwrap().len(), 2);
    assert_eq!(report(&app, &lab).await, card_before);
    // And the next request of the key is its third attempt.
    post_as(&app, &lab, Some("kept"), "k").await;
    let attempts = outside(&app.snapshot(&lab).await)[0]["attempts"].as_array().unwrap().len();
    assert_eq!(attempts, 3);
}

/// Whether process `pid` still runs (a zombie waiting for its parent to read it does not).
fn still_runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
}

#[tokio::test]
async fn retrylab_grade_leaves_nothing_of_the_command_running() {
    let dir = std::env::temp_dir().join(format!("grade-group-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    // One command runs past the time limit, one ends at once; each leaves a sleep behind it.
    for (name, script, time_limit) in [
        ("past the limit", "sleep 30 & echo $! > {pid}; wait", "1"),
        ("ended by itself", "sleep 30 & echo $! > {pid}", "30"),
        // A daemon: forks, leaves the group and the session (setsid), and its parent exits.
        // (Its output goes to /dev/null, as a daemon's does: else the grade's own output would
        // stay open until it ends.)
        ("a daemon", "setsid sh -c 'sleep 30 >/dev/null 2>&1 & echo $! > {pid}' & wait", "30"),
        (
            "a forked daemon",
            "setsid -f sh -c 'echo $$ > {pid}; exec sleep 30 >/dev/null 2>&1'; sleep 0.3",
            "30",
        ),
    ] {
        let pid_file = dir.join(name.replace(' ', "-"));
        let script = script.replace("{pid}", pid_file.to_str().unwrap());
        let output = tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_retrylab"))
                .args([
                    "grade",
                    "--schedule",
                    "healthy",
                    "--time-limit-s",
                    time_limit,
                    "--",
                    "sh",
                    "-c",
                    &script,
                ])
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert_eq!(output.status.code(), Some(1), "{name}: it sent nothing, so it fails");
        let pid: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        assert!(pid > 1, "{name}");
        let start = std::time::Instant::now();
        while still_runs(pid) && start.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!still_runs(pid), "{name}: the command's sleep {pid} outlived the grade");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client of the test's own over a real socket: `KEYS` keys at once, each retried twice after
/// 503 + `Retry-After`, waiting exactly the header. Its process is slow: every send, the first
/// ones too, leaves up to `delay_ms` late, at random. With `jitter_ms`, each retry also waits a
/// random part of its own on top of the header (the first sends keep only the process's delay).
async fn slow_process(endpoint: String, name: &'static str, delay_ms: u64, jitter_ms: u64, seed: u64) {
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let rng = std::sync::Arc::new(Mutex::new(StdRng::seed_from_u64(seed)));
    let keys = (0..10).map(|i| {
        let (http, endpoint, rng) = (http.clone(), endpoint.clone(), rng.clone());
        async move {
            let late = || async { rng.lock().await.random_range(0..=delay_ms) };
            tokio::time::sleep(Duration::from_millis(late().await)).await;
            for attempt in 1..=3 {
                let response = http
                    .post(&endpoint)
                    .header("X-Client-Name", name)
                    .header("Idempotency-Key", format!("{name}-{i}"))
                    .json(&json!({ "order": i }))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
                let header: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
                if attempt == 3 {
                    break;
                }
                let own = rng.lock().await.random_range(0..=jitter_ms);
                tokio::time::sleep(Duration::from_millis(header * 1000 + own + late().await)).await;
            }
        }
    });
    join_all(keys).await;
}

/// The issue's case: a client with no jitter whose process adds delays (up to 250 ms on every
/// send) spreads its waits after `Retry-After: 1` as wide as its first sends, and is not
/// credited with jitter: the card says it waits the header, no jitter above it (or that it cannot
/// tell). A client with a jitter of its own (up to 1 s past the header), on a process that adds
/// up to 100 ms, is credited: the rule can tell them apart.
#[tokio::test]
async fn a_client_with_no_jitter_whose_process_adds_delays_is_not_credited_with_jitter() {
    let app = spawn().await;
    let (plain, jittered) = (lab(&app).await, lab(&app).await);
    for lab in [&plain, &jittered] {
        app.put(lab, "downstream", r#"{"mode": "down", "retry_after_s": 1}"#).await;
    }
    let endpoint = |lab: &str| app.url(&format!("/labs/{lab}/downstream"));
    tokio::join!(
        slow_process(endpoint(&plain), "no-jitter", 250, 0, 56),
        slow_process(endpoint(&jittered), "jitter", 100, 1_000, 57),
    );
    let card = report(&app, &plain).await;
    let checks = &card["callers"][0]["checks"];
    assert_eq!(checks["retry_after"]["verdict"], "pass", "{checks}");
    assert_ne!(checks["jitter"]["verdict"], "pass", "{checks}");
    let evidence = checks["jitter"]["evidence"].as_str().unwrap();
    assert!(
        evidence.starts_with("waits exactly the Retry-After") || evidence.starts_with("could not judge"),
        "{evidence}"
    );
    assert!(evidence.contains("first sends that came out together spread"), "the floor is said: {evidence}");
    let card = report(&app, &jittered).await;
    let jitter = &card["callers"][0]["checks"]["jitter"];
    assert_eq!(jitter["verdict"], "pass", "{jitter}");
}

/// `retry_after_s: null` makes the outage's 503s carry no `Retry-After` (a client's own backoff
/// then shows); a number brings it back; left out, it keeps its value; a negative one is refused.
#[tokio::test]
async fn a_downstream_can_fail_without_retry_after() {
    let app = spawn().await;
    let lab = app.fast_lab().await;
    let header = |key: &'static str| {
        let app = &app;
        let lab = lab.clone();
        async move {
            let response = post_as(app, &lab, Some("probe"), key).await;
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned())
        }
    };
    let set = app.put(&lab, "downstream", r#"{"mode": "down", "retry_after_s": null}"#).await;
    assert_eq!(set["retry_after_s"], Value::Null, "{set}");
    assert_eq!(header("a").await, None);
    app.put(&lab, "downstream", r#"{"retry_after_s": 2}"#).await;
    assert_eq!(header("b").await.as_deref(), Some("2"));
    app.put(&lab, "downstream", r#"{"mode": "down"}"#).await;
    assert_eq!(header("c").await.as_deref(), Some("2"), "left out, it is kept");
    let refused = app
        .client
        .put(app.url(&format!("/api/labs/{lab}/downstream")))
        .header("Content-Type", "application/json")
        .body(r#"{"retry_after_s": -1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(refused.headers()["content-type"], "application/problem+json");
}

#[tokio::test]
async fn a_killed_grade_s_leftovers_are_ended_by_the_next_grade_and_any_schedule_fits_its_limits() {
    let dir = std::env::temp_dir().join(format!("grade-killed-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("daemon");
    let script = format!("setsid -f sh -c 'echo $$ > {}; exec sleep 60'; sleep 60", pid_file.display());
    let mut grade = std::process::Command::new(env!("CARGO_BIN_EXE_retrylab"))
        .args(["grade", "--schedule", "healthy", "--", "sh", "-c", &script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let daemon = loop {
        let pid = std::fs::read_to_string(&pid_file).ok().and_then(|p| p.trim().parse::<u32>().ok());
        if let Some(pid) = pid {
            break pid;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the daemon never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Let the grade note it (it does every 250 ms), then kill the grade as no process can catch.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let folder = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name().unwrap().to_string_lossy().starts_with("retrylab-grade-")
                && std::fs::read_to_string(p.join("processes"))
                    .is_ok_and(|l| l.contains(&format!("{daemon} ")))
        })
        .expect("the grade's folder lists the daemon it started");
    grade.kill().unwrap();
    grade.wait().unwrap();
    assert!(still_runs(daemon), "a killed grade cannot end what it started");
    let readme = std::fs::read_to_string(folder.join("README")).unwrap();
    assert!(readme.contains("kill -9 PID") && readme.contains("next `retrylab grade`"), "{readme}");
    // The next grade ends it and removes the folder; its schedule of 150 phases is within its
    // own server's limits (each phase is set twice).
    let phases: Vec<Value> = (0..150).map(|i| json!({"mode": "healthy", "ms": 1 + i % 2})).collect();
    let schedule = serde_json::to_string(&phases).unwrap();
    let next = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_retrylab"))
            .args(["grade", "--schedule", &schedule, "--", "sh", "-c", "sleep 0.5"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let said = String::from_utf8_lossy(&next.stderr);
    assert_eq!(next.status.code(), Some(1), "it sent nothing: {said}");
    assert!(said.contains("sent nothing") && !said.contains("refused"), "{said}");
    let start = std::time::Instant::now();
    while still_runs(daemon) && start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!still_runs(daemon), "the next grade ended the killed grade's daemon {daemon}");
    assert!(!folder.exists(), "and removed its folder {}", folder.display());
    let _ = std::fs::remove_dir_all(&dir);
}

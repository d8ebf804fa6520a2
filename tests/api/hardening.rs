//! Hardening for running in public: what a public address shows, how recoveries take turns,
//! slow and greedy connections, memory bounds, and input in the wrong spelling or type.

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use retrylab::config::{Config, Limits};

use crate::helpers::{TestApp, config, counter, messages};

const PATIENCE: Duration = Duration::from_secs(60);

/// A server listening on every interface (as with `--port`), reached over loopback.
async fn spawn_public(config: Config) -> TestApp {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], 0))).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(retrylab::server::serve(listener, config, std::future::pending()));
    TestApp::at(format!("http://127.0.0.1:{port}"))
}

#[tokio::test]
async fn a_public_address_without_a_metrics_address_does_not_serve_metrics() {
    let app = spawn_public(config(Limits::default(), Default::default())).await;
    let lab = app.new_lab().await;
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(metrics.status(), StatusCode::NOT_FOUND, "lab ids stay off a public address");
    let body = metrics.text().await.unwrap();
    assert!(!body.contains(&lab), "{body}");
    assert_eq!(app.client.get(app.url("/healthz")).send().await.unwrap().status(), StatusCode::OK);
}

/// Attempt numbers of each round of each message: 1, 2, 3, ... with no repeats or gaps.
fn assert_one_delivery_loop_per_message(snapshot: &serde_json::Value) {
    for message in messages(snapshot) {
        let mut rounds: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
        for attempt in message["attempts"].as_array().unwrap() {
            rounds
                .entry(attempt["round"].as_u64().unwrap())
                .or_default()
                .push(attempt["n"].as_u64().unwrap());
        }
        for (round, numbers) in rounds {
            let expected: Vec<u64> = (1..=numbers.len() as u64).collect();
            assert_eq!(numbers, expected, "message {} round {round}: {}", message["id"], message["attempts"]);
        }
    }
}

#[tokio::test]
async fn concurrent_client_crashes_recover_one_at_a_time() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    app.put(&lab, "policy", r#"{"base_ms": 40, "cap_ms": 400, "timeout_ms": 1000}"#).await;
    app.put(&lab, "downstream", r#"{"mode": "flaky", "latency_ms": [5, 20], "retry_after_s": 0}"#).await;
    app.burst(&lab, 1000).await;
    app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") >= 200).await;
    // The first burst may have settled before the second round of crashes on a fast machine; a
    // second burst of 50, against a downstream that is down and with waits of at least a
    // second, keeps deliveries going (nine waits, 9 s or more) through both rounds.
    app.put(&lab, "policy", r#"{"base_ms": 2000, "cap_ms": 2000, "multiplier": 1, "max_attempts": 10}"#)
        .await;
    app.set_mode(&lab, "down").await;
    app.burst(&lab, 50).await;
    for _ in 0..2 {
        app.wait_for(&lab, PATIENCE, |s| counter(s, "in_flight") > 0).await;
        let path = format!("/api/labs/{lab}/crash-client");
        let crash = || app.call(Method::POST, &path, None);
        let answers = futures_util::future::join_all((0..4).map(|_| crash())).await;
        for (status, body) in answers {
            assert_eq!(status, StatusCode::OK, "{body}");
        }
    }
    app.set_mode(&lab, "healthy").await;
    let settled = app
        .wait_for(&lab, PATIENCE, |s| {
            ["queued", "in_flight", "backing_off"].iter().all(|c| counter(s, c) == 0)
        })
        .await;
    assert_eq!(messages(&settled).len(), 1050);
    assert_eq!(counter(&settled, "delivered") + counter(&settled, "dead_letter"), 1050);
    assert_eq!(counter(&settled, "applied_twice"), 0);
    assert_one_delivery_loop_per_message(&settled);
}

/// Reads until the server closes the connection (or `limit` passes); returns what it sent
/// and how long it took.
async fn read_until_closed(
    stream: &mut tokio::net::TcpStream,
    limit: Duration,
) -> Option<(String, Duration)> {
    use tokio::io::AsyncReadExt;
    let start = std::time::Instant::now();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(tokio::time::Instant::from_std(start + limit), stream.read(&mut buffer))
            .await
        {
            Err(_) => return None, // still open
            Ok(Ok(0) | Err(_)) => {
                return Some((String::from_utf8_lossy(&received).into_owned(), start.elapsed()));
            }
            Ok(Ok(n)) => received.extend_from_slice(&buffer[..n]),
        }
    }
}

fn address(app: &TestApp) -> String {
    app.base.trim_start_matches("http://").to_owned()
}

#[tokio::test]
async fn a_connection_that_never_finishes_its_headers_is_closed() {
    use tokio::io::AsyncWriteExt;
    let mut config = config(Limits::default(), Default::default());
    config.exposure.header_read_timeout_ms = 300;
    let app = TestApp::spawn_config(config).await;
    // Timed from before the connection opens: the server's clock cannot start any earlier, so
    // however late this task runs, the connection cannot seem to close too soon.
    let opened = std::time::Instant::now();
    let mut slow = tokio::net::TcpStream::connect(address(&app)).await.unwrap();
    slow.write_all(b"GET /healthz HT").await.unwrap();
    let closed = read_until_closed(&mut slow, Duration::from_secs(5)).await;
    closed.expect("the server closed the connection");
    let after = opened.elapsed();
    assert!(after >= Duration::from_millis(250) && after < Duration::from_secs(3), "closed after {after:?}");
    // An idle connection that sends nothing at all goes the same way.
    let mut idle = tokio::net::TcpStream::connect(address(&app)).await.unwrap();
    assert!(read_until_closed(&mut idle, Duration::from_secs(5)).await.is_some(), "idle is closed too");
    // A client that sends its headers in time is served as before.
    assert_eq!(app.client.get(app.url("/healthz")).send().await.unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn one_address_may_hold_only_so_many_connections() {
    let mut config = config(Limits::default(), Default::default());
    config.exposure.max_connections_per_ip = 3;
    let app = TestApp::spawn_config(config).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(tokio::net::TcpStream::connect(address(&app)).await.unwrap());
    }
    let mut fourth = tokio::net::TcpStream::connect(address(&app)).await.unwrap();
    let (answer, _) =
        read_until_closed(&mut fourth, Duration::from_secs(5)).await.expect("refused and closed");
    assert!(answer.starts_with("HTTP/1.1 429 "), "{answer}");
    assert!(answer.contains("content-type: application/problem+json"), "{answer}");
    assert!(answer.contains(r#""limit":"max_connections_per_ip""#), "{answer}");
    // A closed connection frees its place, as soon as the server has seen it close.
    held.pop();
    let start = std::time::Instant::now();
    loop {
        match app.client.get(app.url("/healthz")).send().await.map(|r| r.status()) {
            Ok(StatusCode::OK) => break,
            Ok(status) => {
                assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "refused only for the cap meanwhile")
            }
            Err(_) => {} // the refusal closed the connection under the request
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the closed connection never freed its place");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_producer_is_not_held_to_the_per_client_cap() {
    let mut config = config(Limits::default(), Default::default());
    config.exposure.max_connections_per_ip = 2;
    let app = TestApp::spawn_config(config).await;
    let lab = app.fast_lab().await;
    app.put(&lab, "downstream", r#"{"latency_ms": [50, 50]}"#).await;
    app.burst(&lab, 50).await;
    let done = app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") == 50).await;
    assert_eq!(counter(&done, "requests"), 50, "no attempt was refused a connection");
    let attempts: usize = messages(&done).iter().map(|m| m["attempts"].as_array().unwrap().len()).sum();
    assert_eq!(attempts, 50, "one attempt each: none was refused before it reached the lab");
}

/// The first SSE block of a stream opened after `last_event_id`: `(event name, id)`.
async fn first_event(app: &TestApp, lab: &str, last_event_id: u64) -> (Option<String>, u64) {
    let response = app
        .client
        .get(app.url(&format!("/api/labs/{lab}/events")))
        .header("Last-Event-ID", last_event_id.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut response = response;
    let mut text = String::new();
    while !text.contains("\n\n") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk()).await.unwrap().unwrap();
        text.push_str(std::str::from_utf8(&chunk.expect("the stream stays open")).unwrap());
    }
    let block = &text[..text.find("\n\n").unwrap()];
    let field = |name: &str| block.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_owned());
    (field("event:"), field("id:").unwrap().parse().unwrap())
}

#[tokio::test]
async fn the_event_window_is_bounded_by_bytes() {
    // Room for a few hundred bytes of events but thousands by count.
    let limits = Limits { event_window_bytes: 1_500, ..Default::default() };
    let app = TestApp::spawn_with(limits).await;
    let lab = app.fast_lab().await;
    for mode in ["down", "healthy", "down", "healthy", "down", "healthy"] {
        app.set_mode(&lab, mode).await;
    }
    // 17 events (lab created, then 8 settings changes, each about 600 bytes with a small
    // marker after it): only the last few are kept, so a resume from 4 needs a snapshot...
    assert_eq!(first_event(&app, &lab, 4).await, (Some("snapshot".into()), 17));
    // ...while a resume from 16 still gets exactly the missed event.
    assert_eq!(first_event(&app, &lab, 16).await, (None, 17));
}

#[tokio::test]
async fn event_streams_are_capped_server_wide() {
    let limits = Limits { max_subscribers: 2, ..Default::default() };
    let app = TestApp::spawn_with(limits).await;
    let (one, two) = (app.new_lab().await, app.new_lab().await);
    let open = |lab: &str| app.client.get(app.url(&format!("/api/labs/{lab}/events"))).send();
    let first = open(&one).await.unwrap();
    let _second = open(&two).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let refused = open(&one).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["content-type"], "application/problem+json");
    let problem: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(problem["limit"], "max_subscribers", "{problem}");
    // A stream that closes frees its place, on any lab, as soon as the server has seen it close.
    drop(first);
    let start = std::time::Instant::now();
    loop {
        let status = open(&two).await.unwrap().status();
        if status == StatusCode::OK {
            break;
        }
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "refused only for the cap meanwhile");
        assert!(start.elapsed() < Duration::from_secs(10), "the closed stream never freed its place");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_description_lists_what_the_routes_answer() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let spec: serde_json::Value =
        app.client.get(app.url("/api/openapi.json")).send().await.unwrap().json().await.unwrap();
    let statuses = |path: &str, method: &str| -> Vec<String> {
        spec["paths"][path][method]["responses"].as_object().unwrap().keys().cloned().collect()
    };
    assert!(statuses("/api/labs/{lab}/crash-client", "post").contains(&"503".into()));
    let events = statuses("/api/labs/{lab}/events", "get");
    assert!(events.contains(&"429".into()) && events.contains(&"400".into()), "{events:?}");
    // Each event of the stream is described, the opening snapshot too.
    let stream = &spec["paths"]["/api/labs/{lab}/events"]["get"]["responses"]["200"]["content"]["text/event-stream"]
        ["schema"];
    assert!(stream.to_string().contains("#/components/schemas/Snapshot"), "{stream}");
    // A malformed query on the stream is a problem too, not plain text.
    let bad =
        app.client.get(app.url(&format!("/api/labs/{lab}/events?last_event_id=soon"))).send().await.unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert_eq!(bad.headers()["content-type"], "application/problem+json");
}

#[tokio::test]
async fn a_lab_id_has_one_spelling() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let upper = lab.to_uppercase();
    let braces = format!("{{{lab}}}");
    let urn = format!("urn:uuid:{lab}");
    let bare = lab.replace('-', "");
    for other in [upper.as_str(), braces.as_str(), urn.as_str(), bare.as_str()] {
        let response = app.client.get(app.url(&format!("/api/labs/{other}"))).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{other}");
        let problem: serde_json::Value = response.json().await.unwrap();
        assert!(problem["detail"].as_str().unwrap().contains("lowercase with hyphens"), "{problem}");
    }
    assert_eq!(app.snapshot(&lab).await["id"], lab.as_str(), "the canonical spelling opens it");
}

#[tokio::test]
async fn the_downstream_takes_only_json() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let url = app.url(&format!("/labs/{lab}/downstream"));
    let send = |content_type: &'static str| {
        app.client
            .post(&url)
            .header("Idempotency-Key", content_type.replace([' ', ';'], "_"))
            .header("content-type", content_type)
            .body("{}")
            .send()
    };
    for refused in ["text/plain", "application/x-www-form-urlencoded", "application/jsonx"] {
        let response = send(refused).await.unwrap();
        assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "{refused}");
        assert_eq!(response.headers()["content-type"], "application/problem+json");
    }
    for accepted in ["application/json", "application/json; charset=utf-8", "application/merge-patch+json"] {
        assert_eq!(send(accepted).await.unwrap().status(), StatusCode::OK, "{accepted}");
    }
    let snapshot = app.snapshot(&lab).await;
    assert_eq!(
        (counter(&snapshot, "requests"), counter(&snapshot, "applied")),
        (6, 3),
        "refusals are counted"
    );
}

#[tokio::test]
async fn in_flight_never_reads_past_the_connection_slots_after_a_crash() {
    let limits = Limits { max_concurrent_requests: 4, ..Default::default() };
    let app = TestApp::spawn_with(limits).await;
    let lab = app.fast_lab().await;
    // Four dead letters (1-4), to be replayed behind four attempts in flight (5-8).
    app.put(&lab, "policy", r#"{"max_attempts": 1, "timeout_ms": 20000}"#).await;
    app.set_mode(&lab, "down").await;
    app.burst(&lab, 4).await;
    app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 4).await;
    app.put(&lab, "policy", r#"{"max_attempts": 4}"#).await;
    app.put(&lab, "downstream", r#"{"mode": "slow", "slow_ms": [10000, 10000]}"#).await;
    app.burst(&lab, 4).await;
    app.wait_for(&lab, PATIENCE, |s| counter(s, "in_flight") == 4).await;
    let (status, _) = app.replay(&lab, "{}").await;
    assert_eq!(status, StatusCode::ACCEPTED);
    app.wait_for(&lab, PATIENCE, |s| counter(s, "queued") == 4).await;

    let (status, body) = app.call(Method::POST, &format!("/api/labs/{lab}/crash-client"), None).await;
    assert_eq!((status, body["resumed"].as_u64()), (StatusCode::OK, Some(8)));
    for _ in 0..10 {
        let snapshot = app.snapshot(&lab).await;
        let in_flight = counter(&snapshot, "in_flight");
        assert!(in_flight <= 4, "{in_flight} in flight with 4 connection slots: {}", snapshot["counters"]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_request_head_hyper_cannot_read_gets_a_problem_not_an_empty_answer() {
    use tokio::io::AsyncWriteExt;
    let app = TestApp::spawn().await;
    let big = format!("GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n", "a".repeat(1024 * 1024));
    for (request, status) in [
        ("GET /healthz HTTP/1.1\r\nhost: x\r\nx-bad: a\0b\r\n\r\n".to_owned(), 400),
        ("GET /healthz HTTP/1.1\r\nhost: x\r\nx-bad: a\x01b\r\n\r\n".to_owned(), 400),
        ("GET /healthz HTTP/1.1\r\nhost: x\r\nx-bad: a\x7fb\r\n\r\n".to_owned(), 400),
        (big, 431),
    ] {
        let mut stream = tokio::net::TcpStream::connect(address(&app)).await.unwrap();
        let _ = stream.write_all(request.as_bytes()).await; // the server may close before it all went
        let (answer, _) =
            read_until_closed(&mut stream, Duration::from_secs(10)).await.expect("an answer, then close");
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{head}");
        assert!(head.to_ascii_lowercase().contains("content-type: application/problem+json"), "{head}");
        let problem: serde_json::Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body:?}"));
        assert_eq!(problem["status"], status);
        assert!(problem["detail"].as_str().is_some_and(|d| !d.is_empty()));
    }
    // The app's own answers are untouched.
    assert_eq!(app.client.get(app.url("/healthz")).send().await.unwrap().status(), 200);
}

/// A chunked body past `max_body_bytes` is answered 413 with `Connection: close`, and the
/// server closes after it: the client knows not to send its next request on this connection.
#[tokio::test]
async fn a_413_for_a_chunked_body_says_connection_close_and_closes() {
    use tokio::io::AsyncWriteExt;
    let app = TestApp::spawn_with(Limits { max_body_bytes: 1024, ..Default::default() }).await;
    let lab = app.fast_lab().await;
    let mut stream = tokio::net::TcpStream::connect(address(&app)).await.unwrap();
    let head = format!(
        "POST /api/labs/{lab}/dead-letters/replay HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         transfer-encoding: chunked\r\n\r\n"
    );
    let chunk = " ".repeat(1024 * 1024); // far past the limit, and past what a socket buffers
    let request = format!("{head}{:x}\r\n{chunk}\r\n0\r\n\r\n", chunk.len());
    let _ = stream.write_all(request.as_bytes()).await; // the server may close before it all went
    let (answer, _) =
        read_until_closed(&mut stream, Duration::from_secs(10)).await.expect("an answer, then close");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    assert!(head.starts_with("HTTP/1.1 413 "), "{head}");
    assert!(head.to_ascii_lowercase().contains("\r\nconnection: close"), "{head}");
    let problem: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body:?}"));
    assert_eq!(problem["limit"], "max_body_bytes");
}

/// Issue 61, item 1: the attempts that start later than `budget_ms` after their round's first,
/// as `(message, n, ms into the round)`.
fn attempts_past(snapshot: &serde_json::Value, budget_ms: u64) -> Vec<(u64, u64, u64)> {
    let mut late = Vec::new();
    for message in messages(snapshot) {
        let attempts = message["attempts"].as_array().unwrap();
        let mut rounds: std::collections::BTreeMap<u64, Vec<&serde_json::Value>> = Default::default();
        attempts.iter().for_each(|a| rounds.entry(a["round"].as_u64().unwrap()).or_default().push(a));
        for round in rounds.values() {
            let first = round[0]["started_ms"].as_u64().unwrap();
            for attempt in round {
                let into = attempt["started_ms"].as_u64().unwrap() - first;
                if into > budget_ms {
                    late.push((message["id"].as_u64().unwrap(), attempt["n"].as_u64().unwrap(), into));
                }
            }
        }
    }
    late
}

/// A lab under `policy` against an endpoint that takes 5 requests a second (bursts of 2) for
/// 1.5 s, sent a burst of 12; the snapshot once every message has settled.
async fn throttled_burst(app: &TestApp, policy: &serde_json::Value) -> serde_json::Value {
    let lab = app.fast_lab().await;
    app.put(&lab, "policy", &policy.to_string()).await;
    let downstream =
        r#"{"mode": "throttled", "rate_per_s": 5, "burst": 2, "retry_after_s": 1, "for_ms": 1500}"#;
    app.put(&lab, "downstream", downstream).await;
    app.burst(&lab, 12).await;
    app.wait_for(&lab, Duration::from_secs(30), |s| counter(s, "delivered") + counter(s, "dead_letter") == 12)
        .await
}

/// The protection kinds the server knows, as its refusal of an unknown one lists them.
async fn protection_kinds(app: &TestApp) -> Vec<String> {
    let lab = app.new_lab().await;
    let body = r#"{"protections": [{"kind": "no_such_kind"}]}"#;
    let (status, problem) = app.call(Method::PUT, &format!("/api/labs/{lab}/policy"), Some(body)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    let kinds = detail.split_once("one of: ").unwrap_or_else(|| panic!("{detail}")).1;
    kinds.split(',').map(|kind| kind.trim().trim_end_matches('.').to_owned()).collect()
}

/// The AWS adaptive mode's rate limiter paces every attempt; at its lowest rate (0.01 a
/// second here) a retry would wait 100 s for its token. The round's time budget holds all the
/// same: no attempt starts past it, and a message whose next attempt would ends by
/// `time_budget` when it is known, not 100 s later (the issue's set-up, scaled down).
#[tokio::test]
async fn a_paced_retry_never_starts_past_the_rounds_time_budget() {
    let app = TestApp::spawn().await;
    let policy = serde_json::json!({
        "jitter": "full", "base_ms": 10, "cap_ms": 200, "max_attempts": 6, "timeout_ms": 500,
        "max_total_ms": 1500, "honor_retry_after": false,
        "protections": [{"kind": "aws_adaptive", "min_rate": 0.01}],
    });
    let settled = throttled_burst(&app, &policy).await;
    assert_eq!(attempts_past(&settled, 1500), vec![], "attempts started past the budget");
    let letters = settled["dead_letters"].as_array().unwrap();
    let by_budget: Vec<_> = letters.iter().filter(|d| d["cause"] == "time_budget").collect();
    assert!(!by_budget.is_empty(), "none ended by the time budget: {letters:?}");
    let paced =
        by_budget.iter().filter_map(|d| d["reason"].as_str()).find(|r| r.contains("aws_adaptive paces"));
    let reason = paced.unwrap_or_else(|| panic!("none held by the pacing: {by_budget:?}"));
    assert!(
        reason.starts_with("time budget: attempt ") && reason.contains("past 1500 ms (max_total_ms)"),
        "{reason}"
    );
}

/// The property behind the one above, for every protection kind the server knows, and for
/// both budgets: the policy's `max_total_ms`, and the server's `--max-retry-duration-ms`
/// when the policy sets none. No attempt starts past the round's budget.
#[tokio::test]
async fn no_protection_lets_an_attempt_start_past_the_rounds_time_budget() {
    const BUDGET_MS: u64 = 700;
    let policy_budget = TestApp::spawn().await;
    let limits = Limits { max_retry_duration_ms: BUDGET_MS, ..Limits::default() };
    let server_budget = TestApp::spawn_with(limits).await;
    let kinds = protection_kinds(&policy_budget).await;
    assert!(kinds.len() >= 10 && kinds.contains(&"aws_adaptive".to_owned()), "{kinds:?}");
    let runs = kinds.iter().flat_map(|kind| {
        let mut protection = serde_json::json!({"kind": kind});
        if kind == "aws_adaptive" {
            protection["min_rate"] = 0.01.into();
        }
        [(&policy_budget, BUDGET_MS), (&server_budget, 0)].map(|(app, max_total_ms)| {
            let policy = serde_json::json!({
                "jitter": "full", "base_ms": 10, "cap_ms": 200, "max_attempts": 6,
                "timeout_ms": 500, "max_total_ms": max_total_ms, "honor_retry_after": false,
                "protections": [protection.clone()],
            });
            async move { (kind.clone(), max_total_ms, throttled_burst(app, &policy).await) }
        })
    });
    for (kind, max_total_ms, settled) in futures_util::future::join_all(runs).await {
        let late = attempts_past(&settled, BUDGET_MS);
        assert_eq!(late, vec![], "{kind} (max_total_ms {max_total_ms}): attempts started past the budget");
    }
}

/// Issue 61, item 3: dead letters count toward `--max-messages-per-lab` and never leave by
/// `--settled-window`; delivered messages kept for the window make room for new ones, so
/// the lab is never locked by its own history, and a lab full of dead letters says which
/// limit it reached and what to do, and takes messages again once they are deleted.
#[tokio::test]
async fn dead_letters_never_lock_a_lab() {
    let limits = Limits { max_messages_per_lab: 20, settled_window: 19, max_burst: 20, ..Limits::default() };
    let app = TestApp::spawn_with(limits).await;
    let lab = app.fast_lab().await;
    app.put(&lab, "policy", r#"{"max_attempts": 1}"#).await;
    let settled =
        |n: u64| move |s: &serde_json::Value| counter(s, "delivered") + counter(s, "dead_letter") == n;
    app.set_mode(&lab, "down").await;
    app.burst(&lab, 2).await;
    app.wait_for(&lab, PATIENCE, settled(2)).await;
    app.set_mode(&lab, "healthy").await;
    app.burst(&lab, 18).await;
    app.wait_for(&lab, PATIENCE, settled(20)).await;
    // Full: 2 dead letters and 18 delivered messages the window keeps. New traffic comes first.
    for round in 1..=5u64 {
        app.burst(&lab, 5).await;
        let now = app.wait_for(&lab, PATIENCE, settled(20 + 5 * round)).await;
        assert_eq!(counter(&now, "delivered"), 18 + 5 * round);
        assert!(messages(&now).len() <= 20, "the lab holds {}", messages(&now).len());
    }
    // Steady arrivals too: 15 over 300 ms, none refused at the source.
    app.put(&lab, "traffic", r#"{"rate_per_s": 50, "arrivals": "even", "for_ms": 300}"#).await;
    let done = app
        .wait_for(&lab, PATIENCE, |s| {
            let sent = s["traffic"]["sent"].as_u64().unwrap();
            s["traffic"]["rate_per_s"] == 0.0 && sent > 0 && settled(45 + sent)(s)
        })
        .await;
    assert_eq!(done["traffic"]["refused"], 0, "{}", done["traffic"]);
    let delivered = counter(&done, "delivered");
    // Dead letters do not leave by the window: once they fill the lab, it says so.
    app.set_mode(&lab, "down").await;
    app.burst(&lab, 18).await;
    app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 20).await;
    let path = format!("/api/labs/{lab}/bursts");
    let (status, problem) = app.call(Method::POST, &path, Some(r#"{"count": 1}"#)).await;
    assert_eq!(
        (status.as_u16(), problem["limit"].as_str()),
        (409, Some("max_messages_per_lab")),
        "{problem}"
    );
    let detail = problem["detail"].as_str().unwrap();
    for says in ["20 dead letters", "max_messages_per_lab", "replay", "delete", "reset"] {
        assert!(detail.contains(says), "the refusal says {says:?}: {detail}");
    }
    let (status, deleted) = app
        .call(Method::POST, &format!("/api/labs/{lab}/dead-letters/delete"), Some(r#"{"ids": [1, 2]}"#))
        .await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    app.set_mode(&lab, "healthy").await;
    app.burst(&lab, 2).await;
    app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") == delivered + 2).await;
}

/// Issue 61, items 5 and 7: a comparison's custom policy names and a grid's row names name
/// columns and rows on the page, so none may hold a character that shows as nothing, as a
/// gap or reorders the text (U+202E); each is refused naming its field.
#[tokio::test]
async fn comparison_and_grid_names_refuse_unseen_characters() {
    let app = TestApp::spawn().await;
    let custom = |name: &str| serde_json::json!({"name": name, "policy": {"max_attempts": 2}});
    for unseen in ['\u{202E}', '\u{34F}', '\u{115F}', '\u{3164}', '\u{2800}', '\u{2028}', '\u{200B}'] {
        let name = format!("Z{unseen}W");
        let request = serde_json::json!({"scenario": "outage", "burst": 5, "runs": 1,
            "policies": ["none", custom(&name)]});
        let (status, problem) = app.call(Method::POST, "/api/comparisons", Some(&request.to_string())).await;
        assert_eq!(
            (status, problem["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("policies[1].name"))
        );
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(&format!("U+{:04X}", u32::from(unseen))), "{detail}");
        let request = serde_json::json!({"scenario": "overload", "burst": 5, "runs": 1, "policies": ["none"],
            "defences": [{"name": "none", "defences": {}}, {"name": name, "defences": {"limit": {"kind": "aimd"}}}]});
        let (status, problem) = app.call(Method::POST, "/api/comparisons", Some(&request.to_string())).await;
        assert_eq!(
            (status, problem["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("defences[1].name"))
        );
    }
    let request =
        serde_json::json!({"scenario": "outage", "burst": 5, "runs": 1, "policies": ["none", custom("  ")]});
    let (status, problem) = app.call(Method::POST, "/api/comparisons", Some(&request.to_string())).await;
    assert_eq!(
        (status, problem["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("policies[1].name"))
    );
}

/// Issue 61, item 7: odd input that was taken is refused, naming the field: an array where
/// the admission filter's settings go (it turned the filter on with its defaults), a key
/// given twice inside a protection (the last one was kept), and a throttled rate so low its
/// `Retry-After` ran to 18446744073709552 s.
#[tokio::test]
async fn odd_settings_are_refused_naming_their_field() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let before = app.snapshot(&lab).await;
    for (what, body, field, says) in [
        (
            "downstream",
            r#"{"mode": "overloaded", "defences": {"admission": []}}"#,
            "downstream.defences.admission",
            "object",
        ),
        ("downstream", r#"{"mode": "overloaded", "defences": []}"#, "downstream.defences", "object"),
        ("policy", r#"{"breaker": [3, 100, 1]}"#, "policy.breaker", "object"),
        ("policy", r#"{"retry_budget": []}"#, "policy.retry_budget", "object"),
        (
            "policy",
            r#"{"protections": [{"kind": "token_bucket", "size": 1, "size": 100}]}"#,
            "policy.protections[0].size",
            "duplicate",
        ),
        ("downstream", r#"{"mode": "throttled", "rate_per_s": 1e-300}"#, "downstream.rate_per_s", "0.01"),
    ] {
        let (status, problem) = app.call(Method::PUT, &format!("/api/labs/{lab}/{what}"), Some(body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {problem}");
        assert_eq!(problem["field"], field, "{body}: {problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(says), "{body}: {detail}");
    }
    let after = app.snapshot(&lab).await;
    for part in ["policy", "downstream"] {
        assert_eq!(before[part], after[part], "{part} did not change");
    }
}

/// Issue 61, item 6: a value of the wrong type, or a field that is not one, is named down to
/// the field, in a lab's settings and in a protection's parameters as in a comparison.
#[tokio::test]
async fn every_refused_setting_names_its_field() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    for (what, body, field) in [
        ("policy", r#"{"clients": -1}"#, "policy.clients"),
        ("policy", r#"{"seed": 18446744073709551616}"#, "policy.seed"),
        ("policy", r#"{"max_attempt": 3}"#, "policy.max_attempt"),
        (
            "policy",
            r#"{"protections": [{"kind": "token_bucket", "size": "big"}]}"#,
            "policy.protections[0].size",
        ),
        ("policy", r#"{"protections": [{"kind": "sre", "k": [2]}]}"#, "policy.protections[0].k"),
        ("downstream", r#"{"burst": "x"}"#, "downstream.burst"),
        ("downstream", r#"{"latency": [1, 2]}"#, "downstream.latency"),
        ("traffic", r#"{"rate_per_s": "fast"}"#, "rate_per_s"),
    ] {
        let (status, problem) = app.call(Method::PUT, &format!("/api/labs/{lab}/{what}"), Some(body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {problem}");
        assert_eq!(problem["field"], field, "{body}: {problem}");
    }
    for (body, field) in [(r#"{"count": "many"}"#, "count"), (r#"{"count": 1, "size": 2}"#, "size")] {
        let (status, problem) = app.call(Method::POST, &format!("/api/labs/{lab}/bursts"), Some(body)).await;
        assert_eq!(
            (status, problem["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some(field)),
            "{problem}"
        );
    }
    for (body, field) in [
        (serde_json::json!({"scenario": "outage", "runs": 0, "policies": ["none", "full"]}), "runs"),
        (serde_json::json!({"scenario": "outage", "burst": 0, "policies": ["none", "full"]}), "burst"),
        (serde_json::json!({"scenario": "meltdown", "policies": ["none", "full"]}), "scenario"),
        (serde_json::json!({"scenario": "outage", "policies": ["none", "yolo"]}), "policies[1]"),
        (serde_json::json!({"scenario": "outage", "policies": ["none"]}), "policies"),
        (
            serde_json::json!({"scenario": "outage", "policies": ["none", "full"], "late_threshold_ms": 0}),
            "late_threshold_ms",
        ),
        (
            serde_json::json!({"scenario": "outage", "policies": ["none", {"name": "x", "policy": {"protections": [{"kind": "token_bucket", "size": "big"}]}}]}),
            "policies[1].policy.protections[0].size",
        ),
    ] {
        let (status, problem) = app.call(Method::POST, "/api/comparisons", Some(&body.to_string())).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {problem}");
        assert_eq!(problem["field"], field, "{body}: {problem}");
    }
}

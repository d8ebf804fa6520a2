//! The downstream's idempotency contract, spoken to directly as any client would.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{TestApp, counter};

async fn post(app: &TestApp, lab: &str, key: Option<&str>, body: &str) -> reqwest::Response {
    let mut request = app
        .client
        .post(app.url(&format!("/labs/{lab}/downstream")))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.send().await.unwrap()
}

fn problem_type(response: &reqwest::Response) -> &str {
    response.headers()["content-type"].to_str().unwrap()
}

#[tokio::test]
async fn the_downstream_keeps_the_idempotency_contract() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    app.put(&lab, "downstream", r#"{"mode": "healthy", "latency_ms": [3000, 3000]}"#).await;

    let missing = post(&app, &lab, None, "{}").await;
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    assert_eq!(problem_type(&missing), "application/problem+json");

    // The first request is held for 3 s; a second with the same key arrives meanwhile.
    let first = tokio::spawn({
        let (client, url) = (app.client.clone(), app.url(&format!("/labs/{lab}/downstream")));
        async move {
            let response = client
                .post(url)
                .header("Idempotency-Key", "order-1")
                .header("content-type", "application/json");
            let response = response.body(r#"{"n": 1}"#).send();
            let response = response.await.unwrap();
            (
                response.status(),
                response.headers().get("idempotent-replayed").is_some(),
                response.bytes().await.unwrap(),
            )
        }
    });
    // Meanwhile for certain: the first has reached the endpoint (it is counted where it
    // arrives, and its key is taken a moment later, with no wait in between)...
    app.wait_for(&lab, Duration::from_secs(20), |s| counter(s, "requests") == 2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // ...and is held for seconds more.
    assert!(!first.is_finished(), "the first request is still being processed");
    let concurrent = post(&app, &lab, Some("order-1"), r#"{"n": 1}"#).await;
    assert_eq!(concurrent.status(), StatusCode::CONFLICT);
    assert_eq!(problem_type(&concurrent), "application/problem+json");

    let (status, flagged, original) = first.await.unwrap();
    assert_eq!((status, flagged), (StatusCode::OK, false));

    // Whitespace and key order do not make another body; the stored answer comes back as is.
    let repeat = post(&app, &lab, Some("order-1"), r#"{ "n" : 1 }"#).await;
    assert_eq!(repeat.status(), StatusCode::OK);
    assert_eq!(repeat.headers()["idempotent-replayed"], "true");
    assert_eq!(repeat.bytes().await.unwrap(), original, "byte for byte");

    let other_body = post(&app, &lab, Some("order-1"), r#"{"n": 2}"#).await;
    assert_eq!(other_body.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem_type(&other_body), "application/problem+json");

    let snapshot = app.snapshot(&lab).await;
    assert_eq!(counter(&snapshot, "requests"), 5);
    assert_eq!(counter(&snapshot, "applied"), 1);
    assert_eq!(counter(&snapshot, "applied_twice"), 0);
}

#[tokio::test]
async fn a_write_lands_even_when_the_client_hangs_up() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    app.put(&lab, "downstream", r#"{"latency_ms": [1000, 1000]}"#).await;
    let request = app
        .client
        .post(app.url(&format!("/labs/{lab}/downstream")))
        .header("Idempotency-Key", "hang-up")
        .header("content-type", "application/json")
        .body("{}")
        .send();
    let waiting = tokio::spawn(request);
    // The client hangs up once its request has certainly reached the endpoint (counted where
    // it arrives, its write begun a moment later), while the answer is still a second away.
    app.wait_for(&lab, Duration::from_secs(20), |s| counter(s, "requests") == 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "no answer yet when the client hangs up");
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    let landed = app.wait_for(&lab, Duration::from_secs(20), |s| counter(s, "applied") == 1).await;
    assert_eq!(counter(&landed, "applied_twice"), 0);
    let repeat = post(&app, &lab, Some("hang-up"), "{}").await;
    assert_eq!(repeat.headers()["idempotent-replayed"], "true");
    let body: serde_json::Value = repeat.json().await.unwrap();
    assert_eq!((body["key"].clone(), body["result"].clone()), (json!("hang-up"), json!("applied")));
}

#[tokio::test]
async fn down_and_flaky_answer_503_with_retry_after() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    app.put(&lab, "downstream", r#"{"mode": "down", "retry_after_s": 7}"#).await;
    let down = post(&app, &lab, Some("k"), "{}").await;
    assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(down.headers()["retry-after"], "7");

    app.put(&lab, "downstream", r#"{"mode": "flaky", "failure_rate": 1.0}"#).await;
    let flaky = post(&app, &lab, Some("k"), "{}").await;
    assert_eq!(flaky.status(), StatusCode::SERVICE_UNAVAILABLE);
    app.put(&lab, "downstream", r#"{"failure_rate": 0.0, "latency_ms": [1, 1]}"#).await;
    assert_eq!(post(&app, &lab, Some("k"), "{}").await.status(), StatusCode::OK, "the key was never used up");
}

/// The count of applied keys the server holds `held` (`whole` or `fingerprint`), from /metrics.
async fn keys_held(app: &TestApp, held: &str) -> u64 {
    let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let line = format!("retrylab_idempotency_keys{{held=\"{held}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&line)).map_or(0, |n| n.parse().unwrap())
}

/// Applies the keys `{prefix}-0` to `{prefix}-{n-1}`, each with its own body, and returns their
/// answers.
async fn apply_keys(app: &TestApp, lab: &str, prefix: &str, n: usize) -> Vec<bytes::Bytes> {
    let mut answers = Vec::new();
    for i in 0..n {
        let first = post(app, lab, Some(&format!("{prefix}-{i}")), &format!(r#"{{"n": {i}}}"#)).await;
        assert_eq!(first.status(), StatusCode::OK, "{prefix}-{i}");
        answers.push(first.bytes().await.unwrap());
    }
    answers
}

/// Sends each key `apply_keys` applied again, its body spelled another way: each is replayed,
/// byte for byte.
async fn assert_replayed(app: &TestApp, lab: &str, prefix: &str, answers: &[bytes::Bytes]) {
    for (i, original) in answers.iter().enumerate() {
        let repeat = post(app, lab, Some(&format!("{prefix}-{i}")), &format!(r#"{{ "n" : {i} }}"#)).await;
        assert_eq!(repeat.status(), StatusCode::OK, "{prefix}-{i}");
        assert_eq!(repeat.headers()["idempotent-replayed"], "true", "{prefix}-{i}");
        assert_eq!(
            &repeat.bytes().await.unwrap(),
            original,
            "{prefix}-{i}: the stored answer, byte for byte"
        );
    }
}

#[tokio::test]
async fn keys_held_by_fingerprint_alone_are_read_back_byte_for_byte() {
    let limits = retrylab::config::Limits { hot_keys_per_lab: 4, ..Default::default() };
    let app = TestApp::spawn_with(limits).await;
    let lab = app.fast_lab().await;
    let answers = apply_keys(&app, &lab, "cold", 40).await;
    // Committed keys past the newest 4 are held by fingerprint (at the lab's next commit).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while keys_held(&app, "fingerprint").await < 30 {
        assert!(std::time::Instant::now() < deadline, "keys were never held cold");
        post(&app, &lab, Some("cold-0"), r#"{"n": 0}"#).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(keys_held(&app, "whole").await <= 10, "the newest few, whole");

    let other_body = post(&app, &lab, Some("cold-1"), r#"{"n": 2}"#).await;
    assert_eq!(other_body.status(), StatusCode::UNPROCESSABLE_ENTITY, "the digest came back from the store");
    assert_replayed(&app, &lab, "cold", &answers).await;
    let snapshot = app.snapshot(&lab).await;
    assert_eq!((counter(&snapshot, "applied"), counter(&snapshot, "applied_twice")), (40, 0));
}

/// Keys let go from memory past `--cold-keys-per-lab`, from /metrics.
async fn keys_let_go(app: &TestApp) -> u64 {
    let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("retrylab_idempotency_keys_let_go "))
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test]
async fn keys_let_go_past_the_cold_bound_are_found_in_the_store_and_never_applied_twice() {
    let limits = retrylab::config::Limits { hot_keys_per_lab: 4, cold_keys_per_lab: 8, ..Default::default() };
    let app = TestApp::spawn_with(limits).await;
    let lab = app.fast_lab().await;
    let answers = apply_keys(&app, &lab, "old", 60).await;
    // The lab's next commits cool the keys past the newest 4, then let the oldest go.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while keys_let_go(&app).await < 40 {
        assert!(std::time::Instant::now() < deadline, "no keys were let go: {}", keys_let_go(&app).await);
        post(&app, &lab, Some("old-59"), r#"{"n": 59}"#).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(keys_held(&app, "fingerprint").await <= 8, "at most the bound, by fingerprint");
    let other_body = post(&app, &lab, Some("old-0"), r#"{"n": 2}"#).await;
    assert_eq!(other_body.status(), StatusCode::UNPROCESSABLE_ENTITY, "the digest came from the store");
    assert_replayed(&app, &lab, "old", &answers).await;
    // A key never used is looked up, found nowhere, and applied once.
    let fresh = post(&app, &lab, Some("fresh"), "{}").await;
    assert_eq!(fresh.status(), StatusCode::OK);
    assert!(fresh.headers().get("idempotent-replayed").is_none());
    let again = post(&app, &lab, Some("fresh"), "{}").await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let snapshot = app.snapshot(&lab).await;
    assert_eq!((counter(&snapshot, "applied"), counter(&snapshot, "applied_twice")), (61, 0));
}

#[tokio::test]
async fn after_a_sigkill_the_keys_past_the_cold_bound_come_back_in_the_store_alone() {
    let db = crate::helpers::fresh_db();
    // Within its bound the lab holds every key, so its rows are written unnamed (migration 12).
    // The endpoint's rate limit opened: this client sends hundreds of requests in a row.
    let open = ["--endpoint-rate-per-s", "100000", "--endpoint-burst", "100000"];
    let roomy = [&open[..], &["--hot-keys-per-lab", "4", "--cold-keys-per-lab", "10000"]].concat();
    let server = crate::helpers::Binary::start_with(&db, &roomy);
    let lab = server.app.fast_lab().await;
    // More keys than one batch names: the rows are named over three commits.
    const KEYS: usize = 2 * retrylab::store::KEYS_NAMED_PER_BATCH + 40;
    let answers = apply_keys(&server.app, &lab, "kept", KEYS).await;
    // A settings change is answered once everything before it is committed.
    server.app.put(&lab, "policy", "{}").await;
    server.kill();
    assert!(!keys_named(&db, &lab), "a lab within its bound names none of its rows");
    let args = [&open[..], &["--hot-keys-per-lab", "4", "--cold-keys-per-lab", "8"]].concat();
    let restarted = crate::helpers::Binary::start_with(&db, &args);
    // Every key of the window comes back cold; past the new bound, the oldest go as soon as
    // the lab's commits since the start have named all its rows, a chunk each, with no request
    // to the lab. A key let go before its row is named would be applied again below.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while keys_let_go(&restarted.app).await < KEYS as u64 - 10 {
        assert!(std::time::Instant::now() < deadline, "{}", keys_let_go(&restarted.app).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(keys_held(&restarted.app, "fingerprint").await <= 8);
    assert_replayed(&restarted.app, &lab, "kept", &answers).await;
    // A key never used is looked up, found nowhere, and applied once.
    assert!(
        post(&restarted.app, &lab, Some("fresh"), "{}").await.headers().get("idempotent-replayed").is_none()
    );
    let again = post(&restarted.app, &lab, Some("fresh"), "{}").await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let snapshot = restarted.app.snapshot(&lab).await;
    assert_eq!((counter(&snapshot, "applied"), counter(&snapshot, "applied_twice")), (KEYS as u64 + 1, 0));
    // The commit that named the last rows said so on the lab's row (migration 13): read back again,
    // the lab lets its oldest keys go at once, with no commit to name them a second time.
    restarted.app.put(&lab, "policy", "{}").await;
    restarted.kill();
    assert!(keys_named(&db, &lab), "the lab's row says its key rows are named");
    let again = crate::helpers::Binary::start_with(&db, &args);
    let let_go = keys_let_go(&again.app).await;
    assert!(let_go >= KEYS as u64 - 10, "let go at read-back: {let_go}");
    assert_replayed(&again.app, &lab, "kept", &answers).await;
    let snapshot = again.app.snapshot(&lab).await;
    assert_eq!((counter(&snapshot, "applied"), counter(&snapshot, "applied_twice")), (KEYS as u64 + 1, 0));
}

/// Whether the store's row of `lab` says every key row of it is named.
fn keys_named(db: &std::path::Path, lab: &str) -> bool {
    let store = rusqlite::Connection::open(db).unwrap();
    store.query_row("SELECT keys_named FROM labs WHERE id = ?1", [lab], |r| r.get(0)).unwrap()
}

#[tokio::test]
async fn two_idempotency_key_headers_are_refused_naming_the_header() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    let response = app
        .client
        .post(app.url(&format!("/labs/{lab}/downstream")))
        .header("content-type", "application/json")
        .header("Idempotency-Key", "first")
        .header("Idempotency-Key", "second")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(response.headers()["content-type"], "application/problem+json");
    let problem: serde_json::Value = response.json().await.unwrap();
    assert!(problem["detail"].as_str().unwrap().contains("Idempotency-Key"), "{problem}");
    assert_eq!(counter(&app.snapshot(&lab).await, "applied"), 0, "neither key was applied");
}

/// Sends one request with `key` in a task of its own, so the test can act while it is held.
fn send_held(app: &TestApp, lab: &str, key: &str) -> tokio::task::JoinHandle<(StatusCode, bool)> {
    let request = app
        .client
        .post(app.url(&format!("/labs/{lab}/downstream")))
        .header("Idempotency-Key", key)
        .header("content-type", "application/json")
        .body("{}")
        .send();
    tokio::spawn(async move {
        let response = request.await.unwrap();
        (response.status(), response.headers().contains_key("idempotent-replayed"))
    })
}

#[tokio::test]
async fn overloaded_answers_a_key_in_line_or_in_work_with_409_at_once_and_retry_after() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    // One worker, held 1.5 s by each request; room for one more in line.
    let settings = r#"{"mode": "overloaded", "capacity": 1, "queue": 1, "latency_ms": [1500, 1500]}"#;
    app.put(&lab, "downstream", settings).await;
    let working = send_held(&app, &lab, "in-work");
    app.wait_for(&lab, Duration::from_secs(20), |s| counter(s, "requests") == 1).await;
    let waiting = send_held(&app, &lab, "in-line");
    app.wait_for(&lab, Duration::from_secs(20), |s| counter(s, "requests") == 2).await;

    for key in ["in-work", "in-line"] {
        let started = std::time::Instant::now();
        let repeat = post(&app, &lab, Some(key), "{}").await;
        let took = started.elapsed();
        assert_eq!(repeat.status(), StatusCode::CONFLICT, "{key}");
        assert_eq!(problem_type(&repeat), "application/problem+json");
        let retry_after: u64 = repeat.headers()["retry-after"].to_str().unwrap().parse().unwrap();
        assert!(retry_after >= 1, "{key}: Retry-After {retry_after}");
        // At once: not after the first request's 1.5 s of work.
        assert!(took < Duration::from_millis(1000), "{key}: answered after {took:?}");
    }
    assert!(!working.is_finished() && !waiting.is_finished(), "both firsts were still held");
    assert_eq!(working.await.unwrap(), (StatusCode::OK, false));
    assert_eq!(waiting.await.unwrap(), (StatusCode::OK, false));
    let snapshot = app.snapshot(&lab).await;
    assert_eq!((counter(&snapshot, "applied"), counter(&snapshot, "applied_twice")), (2, 0));
    assert_eq!(counter(&snapshot, "requests"), 4, "the two 409s were counted where they arrived");
}

#[tokio::test]
async fn a_409_for_a_key_in_flight_carries_retry_after_in_healthy_mode_too() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    app.put(&lab, "downstream", r#"{"mode": "healthy", "latency_ms": [1500, 1500]}"#).await;
    let first = send_held(&app, &lab, "held");
    app.wait_for(&lab, Duration::from_secs(20), |s| counter(s, "requests") == 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let repeat = post(&app, &lab, Some("held"), "{}").await;
    assert_eq!(repeat.status(), StatusCode::CONFLICT);
    assert!(repeat.headers().contains_key("retry-after"), "{:?}", repeat.headers());
    assert_eq!(first.await.unwrap(), (StatusCode::OK, false));
}

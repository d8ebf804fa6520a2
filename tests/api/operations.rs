//! Running in public: limits that name themselves, a per-client rate limit on the control
//! API, and metrics that agree with the snapshot.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use retrylab::config::Limits;
use serde_json::Value;

use crate::helpers::{TestApp, counter};

const PATIENCE: Duration = Duration::from_secs(20);

async fn problem(response: reqwest::Response) -> (StatusCode, Option<String>, Value) {
    let status = response.status();
    let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(response.headers()["content-type"], "application/problem+json");
    (status, retry_after, response.json().await.unwrap())
}

#[tokio::test]
async fn the_control_api_is_rate_limited_per_client_with_retry_after() {
    let limits = Limits { control_rate_per_s: 1, control_burst: 3, ..Default::default() };
    let app = TestApp::spawn_with(limits).await;
    let lab = app.new_lab().await; // 1 of 3
    app.set_mode(&lab, "down").await; // 2
    app.set_mode(&lab, "healthy").await; // 3
    let refused = app
        .client
        .put(app.url(&format!("/api/labs/{lab}/downstream")))
        .header("content-type", "application/json")
        .body(r#"{"mode": "slow"}"#)
        .send()
        .await
        .unwrap();
    assert!(refused.headers().contains_key("x-request-id"), "a refusal carries its request id too");
    let (status, retry_after, body) = problem(refused).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!(body["limit"], "control_rate_per_s");
    // Reading is not limited, nor is the downstream endpoint the producer calls.
    assert_eq!(app.snapshot(&lab).await["downstream"]["mode"], "healthy", "the refused change did not apply");
    let downstream = app
        .client
        .post(app.url(&format!("/labs/{lab}/downstream")))
        .header("Idempotency-Key", "k")
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(downstream.status(), StatusCode::OK);
    // After the Retry-After, a token is back.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    app.set_mode(&lab, "slow").await;
}

#[tokio::test]
async fn limits_on_streams_and_active_messages_name_themselves() {
    let limits = Limits {
        max_subscribers_per_lab: 1,
        max_active_messages_per_lab: 3,
        max_active_messages: 5,
        ..Default::default()
    };
    let app = TestApp::spawn_with(limits).await;
    let lab = app.fast_lab().await;
    let events = app.url(&format!("/api/labs/{lab}/events"));
    let first = app.client.get(&events).send().await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let (status, _, body) = problem(app.client.get(&events).send().await.unwrap()).await;
    assert_eq!(
        (status, body["limit"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("max_subscribers_per_lab"))
    );
    drop(first);

    // Long waits keep the first messages active while the next bursts arrive.
    app.put(&lab, "policy", r#"{"base_ms": 5000, "cap_ms": 5000, "jitter": "none"}"#).await;
    app.set_mode(&lab, "down").await;
    app.burst(&lab, 3).await;
    let one_more = |lab: &str| format!("/api/labs/{lab}/bursts");
    let (status, body) = app.call(Method::POST, &one_more(&lab), Some(r#"{"count": 1}"#)).await;
    assert_eq!((status, body["limit"].as_str()), (StatusCode::CONFLICT, Some("max_active_messages_per_lab")));

    let other = app.fast_lab().await;
    app.put(&other, "policy", r#"{"base_ms": 5000, "cap_ms": 5000, "jitter": "none"}"#).await;
    app.set_mode(&other, "down").await;
    app.burst(&other, 2).await;
    let (status, body) = app.call(Method::POST, &one_more(&other), Some(r#"{"count": 1}"#)).await;
    assert_eq!(
        (status, body["limit"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("max_active_messages"))
    );

    // A stream slot frees when its client goes, once the server has seen it go: the page can
    // reconnect.
    let start = std::time::Instant::now();
    loop {
        let status = app.client.get(&events).send().await.unwrap().status();
        if status == StatusCode::OK {
            break;
        }
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "refused only for the cap meanwhile");
        assert!(start.elapsed() < Duration::from_secs(10), "the closed stream never freed its slot");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `name{labels}` -> value, from an OpenMetrics exposition.
fn parse_metrics(text: &str) -> HashMap<String, f64> {
    assert!(text.ends_with("# EOF\n"), "a complete exposition");
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("unreadable line {line}"));
            (series.to_owned(), value.parse().unwrap_or_else(|_| panic!("unreadable value in {line}")))
        })
        .collect()
}

#[tokio::test]
async fn metrics_agree_with_the_snapshot() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    app.set_mode(&lab, "down").await;
    app.burst(&lab, 5).await;
    let dead = app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 5).await;
    let _stream = app.client.get(app.url(&format!("/api/labs/{lab}/events"))).send().await.unwrap();

    let response = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("application/openmetrics-text"));
    let metrics = parse_metrics(&response.text().await.unwrap());
    let get = |series: &str| *metrics.get(series).unwrap_or_else(|| panic!("no {series} in {metrics:?}"));
    assert_eq!(
        get(&format!("retrylab_dead_letter_depth{{lab=\"{lab}\"}}")),
        counter(&dead, "dead_letter") as f64
    );
    assert_eq!(get("retrylab_dead_letter_depth_overall"), 5.0);
    assert_eq!(get("retrylab_attempts_total{status=\"503\"}"), counter(&dead, "requests") as f64);
    assert_eq!(get("retrylab_messages_total{outcome=\"dead_lettered\"}"), 5.0);
    assert_eq!(get("retrylab_wait_seconds_count"), 15.0, "3 measured waits per message");
    assert_eq!(get("retrylab_applied_twice_total"), 0.0);
    assert_eq!(get("retrylab_active_labs"), 1.0);
    assert_eq!(get("retrylab_sse_subscribers"), 1.0);
    assert!(get("retrylab_store_commits_total") >= 1.0);
}

#[tokio::test]
async fn every_answer_carries_the_security_headers() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    for path in ["/".to_owned(), format!("/labs/{lab}"), format!("/api/labs/{lab}"), "/nowhere".into()] {
        let response = app.client.get(app.url(&path)).send().await.unwrap();
        let headers = response.headers();
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'self'") && !csp.contains("unsafe-inline"), "{path}: {csp}");
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(headers["referrer-policy"], "no-referrer", "{path}");
        assert!(headers.contains_key("x-request-id"), "{path}");
    }
}

#[tokio::test]
async fn a_request_id_is_the_client_s_own_or_made_new_for_each_request() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let path = format!("/api/labs/{lab}");
    let mine = app.client.get(app.url(&path)).header("x-request-id", "trace-42").send().await.unwrap();
    assert_eq!(mine.headers()["x-request-id"], "trace-42");
    let mut made = Vec::new();
    for _ in 0..3 {
        let response = app.client.get(app.url(&path)).send().await.unwrap();
        made.push(response.headers()["x-request-id"].to_str().unwrap().to_owned());
    }
    for id in &made {
        let (prefix, count) = id.split_once('-').unwrap();
        assert!(prefix.len() == 12 && prefix.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        assert!(count.parse::<u64>().is_ok(), "{id}");
    }
    made.dedup();
    assert_eq!(made.len(), 3, "each request its own id: {made:?}");
}

#[tokio::test]
async fn the_openapi_description_matches_the_routes_and_the_snapshot() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let spec: Value =
        app.client.get(app.url("/api/openapi.json")).send().await.unwrap().json().await.unwrap();
    assert!(spec["openapi"].as_str().unwrap().starts_with("3."));
    let paths = spec["paths"].as_object().unwrap();
    for path in ["/api/labs/{lab}/bursts", "/api/labs/{lab}/dead-letters/replay", "/labs/{lab}/downstream"] {
        assert!(paths.contains_key(path), "{path} is described");
    }
    // Every described route exists: it answers something other than the router's "no such route".
    for (path, operations) in paths {
        for method in operations.as_object().unwrap().keys() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let url = app.url(&path.replace("{lab}", &lab));
            let response = app.client.request(method.clone(), url).send().await.unwrap();
            let status = response.status();
            if response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream") {
                continue; // routed, and a stream that stays open
            }
            let body = response.text().await.unwrap();
            assert!(!body.contains("no such route"), "{method} {path} is not routed ({status})");
        }
    }
    // The snapshot carries every field its schema requires.
    let snapshot = app.snapshot(&lab).await;
    for field in spec["components"]["schemas"]["Snapshot"]["required"].as_array().unwrap() {
        assert!(snapshot.get(field.as_str().unwrap()).is_some(), "snapshot lacks {field}");
    }
}

#[tokio::test]
async fn three_kinds_of_verdict_keep_three_names_in_the_description() {
    // The callers' card, a claim and a comparison each have a `Verdict`; under one name the
    // description kept only the last, and a card's verdicts broke their own schema.
    let app = TestApp::spawn().await;
    let spec: Value =
        app.client.get(app.url("/api/openapi.json")).send().await.unwrap().json().await.unwrap();
    let schemas = &spec["components"]["schemas"];
    let values = |name: &str| -> Vec<Value> { schemas[name]["enum"].as_array().cloned().unwrap_or_default() };
    assert!(values("Verdict").contains(&Value::from("not_seen")), "{}", schemas["Verdict"]);
    assert!(values("ClaimVerdict").contains(&Value::from("pending")), "{}", schemas["ClaimVerdict"]);
    assert_eq!(schemas["ComparisonVerdict"]["type"], "object", "{}", schemas["ComparisonVerdict"]);
    let card = &schemas["Check"]["properties"]["verdict"];
    assert_eq!(card["$ref"], "#/components/schemas/Verdict", "a card's check names its verdict: {card}");
}

#[tokio::test]
async fn behind_a_proxy_each_client_has_its_own_bucket() {
    let limits = Limits { control_rate_per_s: 1, control_burst: 1, ..Default::default() };
    let mut config = crate::helpers::config(limits, Default::default());
    config.exposure.client_ip_header = Some("fly-client-ip".into());
    let app = TestApp::spawn_config(config).await;
    let create =
        |client: &'static str| app.client.post(app.url("/api/labs")).header("Fly-Client-IP", client).send();
    assert_eq!(create("203.0.113.7").await.unwrap().status(), StatusCode::CREATED);
    assert_eq!(create("203.0.113.7").await.unwrap().status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(create("198.51.100.9").await.unwrap().status(), StatusCode::CREATED, "another client");
}

#[tokio::test]
async fn metrics_can_live_on_a_private_address_only() {
    let private = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let metrics_addr = private.local_addr().unwrap();
    drop(private);
    let mut config = crate::helpers::config(Limits::default(), Default::default());
    config.exposure.metrics_addr = Some(metrics_addr);
    let app = TestApp::spawn_config(config).await;
    let public = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(public.status(), StatusCode::NOT_FOUND, "lab ids stay off the public address");
    // The private listener is bound as the server starts (after it opens its store); give it
    // the time a busy machine needs.
    let start = std::time::Instant::now();
    let mut scraped = app.client.get(format!("http://{metrics_addr}/metrics")).send().await;
    while scraped.is_err() && start.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        scraped = app.client.get(format!("http://{metrics_addr}/metrics")).send().await;
    }
    let scraped = scraped.expect("the metrics address answers");
    assert_eq!(scraped.status(), StatusCode::OK);
    assert!(scraped.text().await.unwrap().contains("retrylab_active_labs"));
}

#[tokio::test]
async fn snapshot_reads_are_limited_by_their_bytes_per_client() {
    let limits = Limits { snapshot_bytes_per_s: 1, snapshot_burst_bytes: 400_000, ..Default::default() };
    let app = TestApp::spawn_with(limits).await;
    let lab = app.fast_lab().await;
    app.burst(&lab, 300).await;
    // Each read costs about its size (the lab's last snapshot's): the burst lets through
    // about 400 kB of them, then the rate (a byte a second) refuses the next. The first read
    // costs the guess made before any snapshot (4 kB and 400 bytes a message), which can be far
    // from its size while the burst is still being delivered: it counts as charged.
    let first = app.client.get(app.url(&format!("/api/labs/{lab}"))).send().await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let (mut read, mut largest) = (4096 + 400 * 300, first.bytes().await.unwrap().len());
    let refused = loop {
        let response = app.client.get(app.url(&format!("/api/labs/{lab}"))).send().await.unwrap();
        if response.status() != StatusCode::OK {
            break response;
        }
        let size = response.bytes().await.unwrap().len();
        (read, largest) = (read + size, largest.max(size));
        assert!(read <= 400_000 + 2 * largest, "{read} bytes of snapshots read, past the 400 kB burst");
    };
    assert!(read + 2 * largest >= 400_000, "only {read} bytes of snapshots before the limit");
    let (status, retry_after, body) = problem(refused).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(retry_after.is_some());
    assert_eq!(body["limit"], "snapshot_bytes_per_s", "{body}");
    // A stream that starts from a snapshot is held to the same bytes; a resume is not.
    let stream = app.client.get(app.url(&format!("/api/labs/{lab}/events"))).send().await.unwrap();
    assert_eq!(stream.status(), StatusCode::TOO_MANY_REQUESTS);
    let resume = app
        .client
        .get(app.url(&format!("/api/labs/{lab}/events")))
        .header("Last-Event-ID", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(resume.status(), StatusCode::OK);
}

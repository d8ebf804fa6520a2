//! The public endpoint is bounded for callers from outside: a rate per client, a cap on the
//! keys kept for them (per lab and in total), and only a digest of each body kept. The lab's
//! own client, on its own loopback listener, is held to none of it.

use std::time::Duration;

use reqwest::StatusCode;
use retrylab::config::Limits;

use crate::helpers::{TestApp, config, counter, fresh_db};

async fn post(app: &TestApp, lab: &str, key: &str, body: &str) -> reqwest::Response {
    app.client
        .post(app.url(&format!("/labs/{lab}/downstream")))
        .header("Idempotency-Key", key)
        .header("Content-Type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_outside_client_is_held_to_its_rate_and_the_lab_client_is_not() {
    let limits = Limits { endpoint_rate_per_s: 1, endpoint_burst: 3, ..Default::default() };
    let app = TestApp::spawn_with(limits).await;
    let lab = app.fast_lab().await;
    let mut statuses = Vec::new();
    for i in 0..5 {
        statuses.push(post(&app, &lab, &format!("k{i}"), "{}").await.status());
    }
    assert_eq!(&statuses[..3], [StatusCode::OK; 3], "the burst");
    let refused = post(&app, &lab, "k9", "{}").await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().contains_key("retry-after"));
    let problem: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(problem["limit"], "endpoint_rate_per_s", "{problem}");

    // Meanwhile the lab's own client sends 30 requests at once, unthrottled.
    app.burst(&lab, 30).await;
    let done = app.wait_for(&lab, Duration::from_secs(30), |s| counter(s, "delivered") == 30).await;
    let attempts: usize =
        crate::helpers::messages(&done).iter().map(|m| m["attempts"].as_array().unwrap().len()).sum();
    assert_eq!(attempts, 30, "one attempt each: none was refused");
}

#[tokio::test]
async fn keys_kept_for_outside_callers_are_capped_and_only_their_digest_is_stored() {
    let db = fresh_db();
    let limits = Limits { max_outside_keys_per_lab: 3, ..Default::default() };
    let app = TestApp::spawn_config(retrylab::config::Config {
        db: db.clone(),
        ..config(limits, Default::default())
    })
    .await;
    let lab = app.fast_lab().await;
    let big = format!(r#"{{"blob": "{}"}}"#, "x".repeat(60_000));
    for i in 0..3 {
        assert_eq!(post(&app, &lab, &format!("outside-{i}"), &big).await.status(), StatusCode::OK);
    }
    let full = post(&app, &lab, "outside-3", &big).await;
    assert_eq!(full.status(), StatusCode::INSUFFICIENT_STORAGE);
    let problem: serde_json::Value = full.json().await.unwrap();
    assert_eq!(problem["limit"], "max_outside_keys_per_lab", "{problem}");
    let repeat = post(&app, &lab, "outside-0", &big).await;
    assert_eq!(repeat.status(), StatusCode::OK, "a repeat still gets its stored answer");
    assert_eq!(repeat.headers()["idempotent-replayed"], "true");
    let other_body = post(&app, &lab, "outside-0", r#"{"blob": "y"}"#).await;
    assert_eq!(other_body.status(), StatusCode::UNPROCESSABLE_ENTITY, "the digest still tells bodies apart");

    // The lab's own client is not held to the cap.
    app.burst(&lab, 10).await;
    let done = app.wait_for(&lab, Duration::from_secs(30), |s| counter(s, "delivered") == 10).await;
    assert_eq!(counter(&done, "applied"), 13);

    let store = rusqlite::Connection::open(&db).unwrap();
    let (rows, largest): (u64, u64) = store
        .query_row(
            "SELECT COUNT(*), MAX(LENGTH(request_body)) FROM idempotency_keys WHERE outside = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(rows, 3);
    assert_eq!(largest, 71, "sha256: and 64 hex digits, not the 60 kB body");
}

#[tokio::test]
async fn the_keys_kept_for_outside_callers_are_capped_across_labs_too() {
    let limits = Limits { max_outside_keys: 2, ..Default::default() };
    let app = TestApp::spawn_with(limits).await;
    let (a, b) = (app.fast_lab().await, app.fast_lab().await);
    assert_eq!(post(&app, &a, "one", "{}").await.status(), StatusCode::OK);
    assert_eq!(post(&app, &b, "two", "{}").await.status(), StatusCode::OK);
    let full = post(&app, &b, "three", "{}").await;
    assert_eq!(full.status(), StatusCode::INSUFFICIENT_STORAGE);
    let problem: serde_json::Value = full.json().await.unwrap();
    assert_eq!(problem["limit"], "max_outside_keys");
    // A reset gives the lab's keys back to the server-wide allowance.
    let (status, _) = app.call(reqwest::Method::POST, &format!("/api/labs/{a}/reset"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(post(&app, &b, "three", "{}").await.status(), StatusCode::OK);
}

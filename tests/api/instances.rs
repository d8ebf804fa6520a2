//! Past one machine: each instance names the labs it makes, and answers a request for another
//! instance's lab with `fly-replay: instance=<owner>`, for Fly's proxy to replay it there.

use reqwest::{Method, StatusCode};

use crate::helpers::{TestApp, fresh_db};

fn instance(name: &str) -> retrylab::config::Config {
    retrylab::config::Config { instance_id: Some(name.into()), ..retrylab::config::Config::new(fresh_db()) }
}

#[tokio::test]
async fn a_request_for_another_instances_lab_is_replayed_to_its_owner() {
    let (a, b) =
        (TestApp::spawn_config(instance("aaa1")).await, TestApp::spawn_config(instance("bbb2")).await);
    let lab = a.new_lab().await;
    assert!(lab.ends_with("-aaa1"), "the owner is part of the id: {lab}");
    assert_eq!(a.snapshot(&lab).await["id"], lab.as_str());

    for path in [format!("/api/labs/{lab}"), format!("/labs/{lab}"), format!("/api/labs/{lab}/events")] {
        let answer = b.client.get(b.url(&path)).send().await.unwrap();
        assert_eq!(answer.headers()["fly-replay"], "instance=aaa1", "{path}");
    }
    let (status, _) = b.call(Method::POST, &format!("/api/labs/{lab}/bursts"), Some(r#"{"count": 1}"#)).await;
    assert_eq!(status, StatusCode::CONFLICT, "answered with the replay header, nothing done here");

    // A lab made before instances had names is served wherever it is.
    let single = TestApp::spawn().await;
    let old = single.new_lab().await;
    assert_eq!(old.len(), 36, "a plain UUID without an instance");
}

#[tokio::test]
async fn a_request_for_another_instances_comparison_is_replayed_to_its_owner() {
    let (a, b) =
        (TestApp::spawn_config(instance("aaa1")).await, TestApp::spawn_config(instance("bbb2")).await);
    let body = r#"{"scenario": "flaky", "burst": 2, "policies": ["none", "full"]}"#;
    let (status, created) = a.call(Method::POST, "/api/comparisons", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(id.ends_with("-aaa1"), "the owner is part of the comparison's id: {id}");
    assert_eq!(created["url"], format!("/compare/{id}"));
    let (status, _) = a.call(Method::GET, &format!("/api/comparisons/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "its owner serves it");
    for path in [format!("/api/comparisons/{id}"), format!("/compare/{id}")] {
        let answer = b.client.get(b.url(&path)).send().await.unwrap();
        assert_eq!(
            answer.headers().get("fly-replay").map(|v| v.to_str().unwrap()),
            Some("instance=aaa1"),
            "{path}"
        );
    }
}

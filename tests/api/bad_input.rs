//! Bad input on every route gets a 4xx `application/problem+json` that says what is wrong,
//! never a 5xx.

use reqwest::Method;
use serde_json::Value;

use crate::helpers::TestApp;

const NO_SUCH_LAB: &str = "6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a";

struct Case {
    method: Method,
    path: String,
    content_type: Option<&'static str>,
    body: String,
    status: u16,
}

fn case(method: Method, path: String, body: &str, status: u16) -> Case {
    Case { method, path, content_type: Some("application/json"), body: body.into(), status }
}

#[tokio::test]
async fn bad_input_on_every_route_is_a_clear_4xx_problem() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let api = |tail: &str| format!("/api/labs/{lab}{tail}");
    let huge = format!(r#"{{"mode": "down", "pad": "{}"}}"#, "x".repeat(100 * 1024));
    let mut cases = vec![
        // The downstream settings.
        case(Method::PUT, api("/downstream"), "{not json", 400),
        // serde_json reads a number where an enum name belongs as a syntax error: still a 4xx.
        case(Method::PUT, api("/downstream"), r#"{"mode": 3}"#, 400),
        case(Method::PUT, api("/downstream"), r#"{"mode": "sideways"}"#, 422),
        case(Method::PUT, api("/downstream"), r#"{"failure_rate": 2}"#, 422),
        case(Method::PUT, api("/downstream"), r#"{"latency_ms": [500, 10]}"#, 422),
        case(Method::PUT, api("/downstream"), r#"{"latency_ms": [-1, 10]}"#, 422),
        case(Method::PUT, api("/downstream"), r#"{"colour": "red"}"#, 422),
        case(Method::PUT, api("/downstream"), &huge, 413),
        Case { content_type: None, ..case(Method::PUT, api("/downstream"), r#"{"mode": "down"}"#, 415) },
        // The policy.
        case(Method::PUT, api("/policy"), r#"{"max_attempts": 0}"#, 422),
        case(Method::PUT, api("/policy"), r#"{"base_ms": "fast"}"#, 422),
        case(Method::PUT, api("/policy"), r#"{"jitter": "wobbly"}"#, 422),
        case(Method::PUT, api("/policy"), &refused("sometimes"), 422),
        case(Method::PUT, api("/policy"), r#"{"timeout_ms": 0}"#, 422),
        case(Method::PUT, api("/policy"), "[]", 422),
        // Bursts.
        case(Method::POST, api("/bursts"), r#"{"count": 0}"#, 422),
        case(Method::POST, api("/bursts"), r#"{"count": 2001}"#, 422),
        case(Method::POST, api("/bursts"), r#"{"count": 99999999999999999999}"#, 422),
        case(Method::POST, api("/bursts"), r#"{"count": -1}"#, 422),
        case(Method::POST, api("/bursts"), r#"{"count": "8"}"#, 422),
        case(Method::POST, api("/bursts"), "{}", 422),
        case(Method::POST, api("/bursts"), "", 400),
        // Replays.
        case(Method::POST, api("/dead-letters/replay"), r#"{"ids": [999]}"#, 404),
        case(Method::POST, api("/dead-letters/replay"), r#"{"ids": "all"}"#, 422),
        case(Method::POST, api("/dead-letters/replay"), "nope", 400),
        // The downstream endpoint itself.
        case(Method::POST, format!("/labs/{lab}/downstream"), "{}", 400),
        Case { content_type: None, ..case(Method::POST, format!("/labs/{lab}/downstream"), "{}", 415) },
        Case {
            content_type: Some("text/plain"),
            ..case(Method::POST, format!("/labs/{lab}/downstream"), "{}", 415)
        },
        case(Method::POST, format!("/labs/{lab}/downstream"), &huge, 413),
        // Unknown routes and methods.
        case(Method::GET, "/nowhere".into(), "", 404),
        case(Method::DELETE, api(""), "", 405),
        case(Method::GET, "/static/nothing.js".into(), "", 404),
    ];
    // Unknown and malformed lab ids, on every lab route.
    for tail in ["", "/downstream", "/policy", "/bursts", "/dead-letters/replay", "/reset", "/events"] {
        let method = match tail {
            "" | "/events" => Method::GET,
            "/downstream" | "/policy" => Method::PUT,
            _ => Method::POST,
        };
        cases.push(case(method.clone(), format!("/api/labs/{NO_SUCH_LAB}{tail}"), "{}", 404));
        cases.push(case(method, format!("/api/labs/not-a-uuid{tail}"), "{}", 400));
    }
    cases.push(case(Method::POST, format!("/labs/{NO_SUCH_LAB}/downstream"), "{}", 404));
    cases.push(case(Method::POST, "/labs/%ZZ/downstream".into(), "{}", 400));

    for Case { method, path, content_type, body, status } in cases {
        let mut request = app.client.request(method.clone(), app.url(&path)).body(body.clone());
        if let Some(kind) = content_type {
            request = request.header("content-type", kind);
        }
        let response = request.send().await.unwrap();
        let what = format!("{method} {path} {}", body.chars().take(60).collect::<String>());
        assert_eq!(response.status().as_u16(), status, "{what}");
        assert_eq!(response.headers()["content-type"], "application/problem+json", "{what}");
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["status"], status, "{what}");
        assert!(problem["title"].is_string() && problem["type"].is_string(), "{what}: {problem}");
        assert!(!problem["detail"].as_str().unwrap().is_empty(), "{what}: {problem}");
    }

    // None of that changed the lab.
    let snapshot = app.snapshot(&lab).await;
    assert_eq!(snapshot["downstream"]["mode"], "healthy");
    assert_eq!(snapshot["policy"]["max_attempts"], 4);
    assert!(snapshot["messages"].as_array().unwrap().is_empty());
}

/// A breaker whose refused attempts do `what`.
fn refused(what: &str) -> String {
    format!(
        r#"{{"breaker": {{"failure_threshold": 5, "open_ms": 4000, "half_open_probes": 1, "refused": "{what}"}}}}"#
    )
}

#[tokio::test]
async fn an_unknown_refusal_of_the_breaker_names_the_field_and_its_choices() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let (status, problem) =
        app.call(Method::PUT, &format!("/api/labs/{lab}/policy"), Some(&refused("maybe"))).await;
    assert_eq!(status.as_u16(), 422, "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        ["breaker.refused", "retry", "give_up"].iter().all(|word| detail.contains(word)),
        "names the field and its choices: {detail}"
    );
    assert!(app.snapshot(&lab).await["policy"]["breaker"].is_null(), "the policy did not change");
}

#[tokio::test]
async fn an_unusable_setting_names_its_field() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    let before = app.snapshot(&lab).await;
    let breaker = r#"{"breaker": {"failure_threshold": 5, "open_ms": 0, "half_open_probes": 1}}"#;
    for (what, body, field) in [
        ("policy", breaker, "policy.breaker.open_ms"),
        ("policy", r#"{"base_ms": 5000, "cap_ms": 100}"#, "policy.base_ms"),
        ("policy", r#"{"retry_budget": {"ratio": 2, "min_per_s": 1}}"#, "policy.retry_budget.ratio"),
        ("policy", r#"{"clients": 100000}"#, "policy.clients"),
        ("policy", r#"{"jitter": "proportional", "jitter_ratio": 11}"#, "policy.jitter_ratio"),
        ("policy", r#"{"jitter": "additive", "jitter_ms": 700000}"#, "policy.jitter_ms"),
        ("policy", r#"{"retry_statuses": [503, 700]}"#, "policy.retry_statuses"),
        ("downstream", r#"{"capacity": 0}"#, "downstream.capacity"),
        ("downstream", r#"{"latency_ms": [500, 10]}"#, "downstream.latency_ms"),
    ] {
        let (status, problem) = app.call(Method::PUT, &format!("/api/labs/{lab}/{what}"), Some(body)).await;
        assert_eq!(status.as_u16(), 422, "{body}: {problem}");
        assert_eq!(problem["field"], field, "{body}: {problem}");
        let detail = problem["detail"].as_str().unwrap();
        let name = field.rsplit('.').next().unwrap();
        assert!(detail.contains(name), "the detail says what is wrong with {name}: {detail}");
    }
    let after = app.snapshot(&lab).await;
    for part in ["policy", "downstream"] {
        assert_eq!(before[part], after[part], "{part} did not change");
    }
}

#[tokio::test]
async fn a_refused_limit_names_itself() {
    let limits = retrylab::config::Limits {
        max_labs: 1,
        max_messages_per_lab: 5,
        settled_window: 2,
        ..Default::default()
    };
    let app = TestApp::spawn_with(limits).await;
    // An unused lab makes room for a new one...
    let unused = app.new_lab().await;
    let lab = app.new_lab().await;
    let gone = app.client.get(app.url(&format!("/api/labs/{unused}"))).send().await.unwrap();
    assert_eq!(gone.status(), 404, "the least recently used, unwatched lab was deleted");
    // ...but a lab someone is watching is never taken away.
    let _watching = app.client.get(app.url(&format!("/api/labs/{lab}/events"))).send().await.unwrap();
    let (status, problem) = app.call(Method::POST, "/api/labs", None).await;
    assert_eq!((status.as_u16(), problem["limit"].as_str()), (429, Some("max_labs")));

    app.set_mode(&lab, "down").await;
    app.burst(&lab, 5).await;
    let (status, problem) =
        app.call(Method::POST, &format!("/api/labs/{lab}/bursts"), Some(r#"{"count": 1}"#)).await;
    assert_eq!((status.as_u16(), problem["limit"].as_str()), (409, Some("max_messages_per_lab")));
    assert!(problem["detail"].as_str().unwrap().contains("reset"), "says what to do: {problem}");
}

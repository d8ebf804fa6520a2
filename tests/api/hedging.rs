//! gRPC's hedging (gRFC A6 `hedgingPolicy`, the `grpc_hedging` protection) on real requests:
//! the hedges go at the delay with the one idempotency key, a hedge that reaches the endpoint
//! while its sibling is in work meets its 409, the first OK answer wins and the client hangs up
//! on the rest. Latencies are a few hundred ms against hedging delays of 100-150 ms, so the
//! bounds keep wide margins on a loaded machine.

use std::time::Duration;

use serde_json::Value;

use crate::helpers::{TestApp, counter, messages};

const PATIENCE: Duration = Duration::from_secs(30);

fn attempts(message: &Value) -> Vec<&Value> {
    let mut attempts: Vec<&Value> = message["attempts"].as_array().unwrap().iter().collect();
    attempts.sort_by_key(|a| a["n"].as_u64().unwrap());
    attempts
}

fn at(attempt: &Value, field: &str) -> u64 {
    attempt[field].as_u64().unwrap_or_else(|| panic!("{field} of {attempt}"))
}

fn load_sum(snapshot: &Value, field: &str) -> u64 {
    snapshot["load"]["bins"].as_array().unwrap().iter().map(|b| b[field].as_u64().unwrap()).sum()
}

/// A healthy endpoint slower than the hedging delay: the hedge goes at the delay, meets the
/// sibling's 409 at once (non-fatal by A6's example list: ABORTED is 409), so the next hedge
/// goes at once too; the original answer wins. Every hedge was a request and none did any good.
#[tokio::test]
async fn hedges_go_at_the_delay_meet_409_while_their_sibling_is_in_work_and_the_first_answer_wins() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    app.put(&lab, "downstream", r#"{"mode": "healthy", "latency_ms": [400, 450]}"#).await;
    // Tokens enough that the throttle never stops a hedge here (the unit tests show it does).
    let policy = r#"{"timeout_ms": 3000, "protections":
        [{"kind": "grpc_hedging", "max_attempts": 3, "hedging_delay_ms": 150, "max_tokens": 100}]}"#;
    let set = app.put(&lab, "policy", policy).await;
    assert_eq!(set["protections"][0]["non_fatal_statuses"], serde_json::json!([503, 500, 409]));
    app.burst(&lab, 4).await;
    let done = app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") == 4).await;
    let mut conflicts = 0;
    for message in messages(&done) {
        let tried = attempts(message);
        assert_eq!(tried.len(), 3, "{message}");
        let (first, second, third) = (tried[0], tried[1], tried[2]);
        assert_eq!((&first["status"], &first["outcome"]), (&200.into(), &"ok".into()), "{message}");
        let answered = at(first, "started_ms") + at(first, "duration_ms");
        // The hedge at the delay, while the first was in work.
        let delay = at(second, "started_ms") - at(first, "started_ms");
        assert!((149..400).contains(&delay), "hedge 2 went {delay} ms after the first: {message}");
        assert_eq!(second["status"], 409, "it met the sibling in work: {message}");
        // A 409 is non-fatal: the next hedge goes at once, not a delay later.
        let second_ended = at(second, "started_ms") + at(second, "duration_ms");
        let third_started = at(third, "started_ms");
        assert!(third_started >= second_ended, "{message}");
        assert!(third_started < at(second, "started_ms") + 150, "hedge 3 went early: {message}");
        assert_eq!(third["status"], 409, "{message}");
        assert!(third_started < answered, "all three overlapped the first: {message}");
        eprintln!(
            "hedge 2 at +{delay} ms (409), hedge 3 at +{} ms (409), the first answered at +{} ms",
            third_started - at(first, "started_ms"),
            answered - at(first, "started_ms")
        );
        conflicts += 2;
    }
    // The endpoint counted each hedge as a request, its 409s among `other`; one write each.
    assert_eq!(counter(&done, "requests"), 12);
    assert_eq!(load_sum(&done, "requests"), 12);
    assert_eq!(load_sum(&done, "other"), conflicts);
    assert_eq!(load_sum(&done, "delivered"), 4, "each message counted delivered once");
    assert_eq!((counter(&done, "applied"), counter(&done, "applied_twice")), (4, 0));
    assert_eq!(counter(&done, "dead_letter"), 0);
    // The throttle's tokens: each 409 took one (100 - 8 + 0.4 for the four successes).
    let tokens = done["protections"][0]["level"].as_f64().unwrap();
    assert!((tokens - 92.4).abs() < 1e-9, "{}", done["protections"]);
}

/// Slow mode applies the write at once and answers late: the hedge at the delay gets the
/// stored answer back (a replay) and wins; the client hangs up on the original, recorded as
/// cancelled, and the hedges not yet due are never sent.
#[tokio::test]
async fn the_first_answer_wins_and_the_attempts_still_out_are_cancelled() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    app.put(&lab, "downstream", r#"{"mode": "slow", "slow_ms": [700, 800]}"#).await;
    let policy = r#"{"timeout_ms": 3000, "protections":
        [{"kind": "grpc_hedging", "max_attempts": 4, "hedging_delay_ms": 100}]}"#;
    app.put(&lab, "policy", policy).await;
    app.burst(&lab, 3).await;
    let done = app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") == 3).await;
    for message in messages(&done) {
        let tried = attempts(message);
        assert_eq!(tried.len(), 2, "the third and fourth were never due: {message}");
        let (first, hedge) = (tried[0], tried[1]);
        assert_eq!((&hedge["status"], &hedge["replayed"]), (&200.into(), &true.into()), "{message}");
        assert_eq!(first["outcome"], "cancelled", "{message}");
        assert!(first["status"].is_null(), "{message}");
        let cut_after = at(first, "duration_ms");
        assert!((100..700).contains(&cut_after), "hung up on at the hedge's answer: {message}");
        let delay = at(hedge, "started_ms") - at(first, "started_ms");
        assert!(delay >= 99, "{message}");
        eprintln!("hedge at +{delay} ms won (replayed); the first cancelled after {cut_after} ms");
    }
    assert_eq!(load_sum(&done, "delivered"), 3);
    assert_eq!((counter(&done, "applied"), counter(&done, "applied_twice")), (3, 0));
    assert_eq!(counter(&done, "in_flight"), 0);
}

/// Leave 409 out of `non_fatal_statuses` and A6 makes it fatal: the hedge's 409 ends the call and
/// cancels the original, whose write lands anyway. The lesson about hedging a write.
#[tokio::test]
async fn a_409_not_listed_as_non_fatal_ends_the_call_though_the_original_write_lands() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    app.put(&lab, "downstream", r#"{"mode": "healthy", "latency_ms": [300, 350]}"#).await;
    let policy = r#"{"timeout_ms": 3000, "protections": [{"kind": "grpc_hedging", "max_attempts": 3,
        "hedging_delay_ms": 100, "non_fatal_statuses": [503, 500]}]}"#;
    app.put(&lab, "policy", policy).await;
    app.burst(&lab, 2).await;
    let done =
        app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 2 && counter(s, "applied") == 2).await;
    for letter in done["dead_letters"].as_array().unwrap() {
        assert_eq!(letter["cause"], "grpc_hedging", "{letter}");
        let reason = letter["reason"].as_str().unwrap();
        assert!(reason.contains("attempt 2: HTTP 409") && reason.contains("attempt 1 cancelled"), "{reason}");
    }
    for message in messages(&done) {
        let tried = attempts(message);
        assert_eq!(tried.len(), 2, "{message}");
        assert_eq!((&tried[0]["outcome"], &tried[1]["status"]), (&"cancelled".into(), &409.into()));
    }
    assert_eq!(counter(&done, "applied_twice"), 0);
    // Replayed, each meets its own write, applied: the stored answer, at once; each message
    // now counts as delivered, and no longer as a dead letter.
    let (status, body) = app.replay(&lab, "{}").await;
    assert_eq!(status, 202, "{body}");
    let replayed = app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") == 2).await;
    assert_eq!((counter(&replayed, "dead_letter"), counter(&replayed, "applied")), (0, 2));
    for message in messages(&replayed) {
        let again: Vec<&Value> = attempts(message).into_iter().filter(|a| a["round"] == 1).collect();
        assert_eq!(again.len(), 1, "{message}");
        assert_eq!((&again[0]["status"], &again[0]["replayed"]), (&200.into(), &true.into()), "{message}");
    }
}

#[tokio::test]
async fn an_unusable_hedging_policy_is_a_422_naming_its_field() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    for (body, field, words) in [
        (r#"{"kind": "grpc_hedging", "max_attempts": 1}"#, "policy.protections[0].max_attempts", "2 to 100"),
        (
            r#"{"kind": "grpc_hedging", "hedging_delay_ms": 70000}"#,
            "policy.protections[0].hedging_delay_ms",
            "0 to 60000",
        ),
        (
            r#"{"kind": "grpc_hedging", "non_fatal_statuses": [200]}"#,
            "policy.protections[0].non_fatal_statuses",
            "not 200",
        ),
        (
            r#"{"kind": "grpc_hedging", "non_fatal_statuses": [500, 501, 502, 503, 504, 505, 506, 507, 508]}"#,
            "policy.protections[0].non_fatal_statuses",
            "at most 8",
        ),
        (r#"{"kind": "grpc_hedging", "token_ratio": 0}"#, "policy.protections[0].token_ratio", "0.001 to 10"),
        (r#"{"kind": "grpc_hedging", "hedging_delay": 5}"#, "policy.protections[0].hedging_delay", "unknown"),
    ] {
        let body = format!(r#"{{"protections": [{body}]}}"#);
        let (status, problem) =
            app.call(reqwest::Method::PUT, &format!("/api/labs/{lab}/policy"), Some(&body)).await;
        assert_eq!(status, 422, "{body}: {problem}");
        assert_eq!(problem["field"], field, "{body}: {problem}");
        assert!(problem["detail"].as_str().unwrap().contains(words), "{problem}");
    }
    let both = r#"{"protections": [{"kind": "grpc_hedging"}, {"kind": "grpc"}]}"#;
    let (status, problem) =
        app.call(reqwest::Method::PUT, &format!("/api/labs/{lab}/policy"), Some(both)).await;
    assert_eq!(
        (status.as_u16(), &problem["field"]),
        (422, &"policy.protections[1].kind".into()),
        "{problem}"
    );
    let snapshot = app.snapshot(&lab).await;
    assert!(snapshot["policy"].get("protections").is_none(), "nothing was changed");
    // An empty non_fatal_statuses is a policy A6 allows (the field is optional): taken as sent.
    let empty = r#"{"protections": [{"kind": "grpc_hedging", "non_fatal_statuses": []}]}"#;
    let set = app.put(&lab, "policy", empty).await;
    assert_eq!(set["protections"][0]["non_fatal_statuses"], serde_json::json!([]), "{set}");
}

/// The `grpc-hedging` preset runs in a comparison like any other: on `flaky` each message is
/// delivered or dead-lettered once, and its column says what the hedges cost in requests.
#[tokio::test]
async fn the_grpc_hedging_preset_runs_in_a_comparison_and_settles_each_message_once() {
    let app = TestApp::spawn().await;
    let request = serde_json::json!({"scenario": "flaky", "burst": 10, "seed": 3, "runs": 1,
        "policies": ["grpc", "grpc-hedging"]});
    let report = crate::compare::compared(&app, &request).await;
    let hedged = crate::compare::policy_of(&report, "grpc-hedging");
    assert_eq!(hedged["policy"]["protections"][0]["kind"], "grpc_hedging", "{hedged}");
    let columns = report["columns"].as_array().unwrap();
    let column = columns.iter().find(|c| c["policy"] == "grpc-hedging").unwrap_or_else(|| panic!("{report}"));
    let figures = &column["figures"];
    let settled = figures["delivered"].as_u64().unwrap() + figures["dead_letter"].as_u64().unwrap();
    assert_eq!(settled, 10, "{figures}");
    assert_eq!(figures["applied_twice"], 0, "{figures}");
    assert!(figures["requests"].as_u64().unwrap() >= 10, "{figures}");
    eprintln!("grpc-hedging on flaky: {figures}");
}

/// Against a down endpoint each 503 is non-fatal, so the hedges go at once one after another;
/// each takes a token, and at half the tokens (A6's threshold) the next hedge is not sent: the
/// message is dead-lettered by the throttle, and the refusal counted as the protection's.
#[tokio::test]
async fn the_throttle_stops_the_hedges_at_half_its_tokens() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    app.put(&lab, "downstream", r#"{"mode": "down", "retry_after_s": 0}"#).await;
    let policy = r#"{"timeout_ms": 3000, "protections":
        [{"kind": "grpc_hedging", "max_attempts": 4, "hedging_delay_ms": 1000}]}"#;
    app.put(&lab, "policy", policy).await;
    app.burst(&lab, 1).await;
    let first = app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 1).await;
    let letter = &first["dead_letters"][0];
    assert_eq!(letter["cause"], "attempts_used_up", "{letter}");
    assert!(letter["reason"].as_str().unwrap().starts_with("hedges used up (4)"), "{letter}");
    let tried = attempts(&messages(&first)[0]);
    let starts: Vec<u64> = tried.iter().map(|a| at(a, "started_ms") - at(tried[0], "started_ms")).collect();
    assert!(starts.iter().all(|&s| s < 500), "each 503 sent the next at once, not 1 s later: {starts:?}");
    assert_eq!(first["protections"][0]["level"], 6.0, "four 503s took four of 10 tokens");

    app.burst(&lab, 1).await;
    let second = app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 2).await;
    let letter = second["dead_letters"].as_array().unwrap().iter().find(|d| d["cause"] == "grpc_hedging");
    let reason = letter.unwrap_or_else(|| panic!("{}", second["dead_letters"]))["reason"].as_str().unwrap();
    assert!(reason.starts_with("the next hedge was throttled"), "{reason}");
    assert!(reason.contains("gRPC throttling has 5 tokens, a hedge needs more than 5"), "{reason}");
    let stopped: u64 = second["load"]["bins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["suppressed"]["grpc_hedging"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(stopped, 1, "the hedge not sent is counted as the protection's");
    assert_eq!(counter(&second, "requests"), 5, "4 and then 1");
}

/// A crash of the client mid-round cuts off every attempt still out (here the first, its hedges
/// already answered 409): each is recorded as interrupted, and with no attempt left the round
/// ends once, in the dead-letter queue, while the write the first attempt carried still lands.
#[tokio::test]
async fn a_crash_mid_round_interrupts_the_attempts_still_out_and_settles_the_message_once() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    app.put(&lab, "downstream", r#"{"mode": "healthy", "latency_ms": [600, 700]}"#).await;
    let policy = r#"{"timeout_ms": 3000, "protections":
        [{"kind": "grpc_hedging", "max_attempts": 3, "hedging_delay_ms": 100, "max_tokens": 100}]}"#;
    app.put(&lab, "policy", policy).await;
    app.burst(&lab, 1).await;
    app.wait_for(&lab, PATIENCE, |s| {
        messages(s).first().is_some_and(|m| {
            m["attempts"].as_array().unwrap().iter().filter(|a| a["status"] == 409).count() == 2
        })
    })
    .await;
    let (status, body) =
        app.call(reqwest::Method::POST, &format!("/api/labs/{lab}/crash-client"), None).await;
    assert_eq!(status, 200, "{body}");
    let done =
        app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 1 && counter(s, "applied") == 1).await;
    let tried = attempts(&messages(&done)[0]);
    assert_eq!(tried.len(), 3, "no fourth: {tried:?}");
    assert_eq!(tried[0]["outcome"], "interrupted", "{tried:?}");
    assert_eq!(done["dead_letters"][0]["cause"], "attempts_used_up");
    assert_eq!((counter(&done, "delivered"), counter(&done, "in_flight")), (0, 0));
    assert_eq!(counter(&done, "applied_twice"), 0);
}

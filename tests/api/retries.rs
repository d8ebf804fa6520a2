//! The story of the lab, driven over HTTP: outages dead-letter, replays deliver each key once,
//! slow answers are recovered by the idempotency key, and waits are the planned ones.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{TestApp, counter, messages, round};

const PATIENCE: Duration = Duration::from_secs(20);

#[tokio::test]
async fn replay_after_outage_applies_each_key_once() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    app.set_mode(&lab, "down").await;
    let ids = app.burst(&lab, 20).await;
    assert_eq!(ids.len(), 20);

    let outage = app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 20).await;
    assert_eq!(counter(&outage, "applied"), 0, "down applies nothing");
    assert_eq!(counter(&outage, "requests"), 80, "4 attempts per message");
    for message in messages(&outage) {
        let attempts = round(message, 0);
        assert_eq!(attempts.len(), 4, "exactly 4 attempts: {message}");
        assert!(attempts.iter().all(|a| a["status"] == 503 && a["outcome"] == "http_error"));
        let waits = attempts.iter().filter(|a| !a["wait"].is_null()).count();
        assert_eq!(waits, 3, "a wait between attempts, none after the last");
    }
    let letters = outage["dead_letters"].as_array().unwrap();
    assert_eq!(letters.len(), 20);
    assert!(letters.iter().all(|d| d["reason"].as_str().unwrap().starts_with("attempts used up (4)")));
    assert!(letters.iter().all(|d| d["attempts"].as_array().unwrap().len() == 4));

    app.set_mode(&lab, "healthy").await;
    let (status, body) = app.replay(&lab, "{}").await;
    assert_eq!(status, 202);
    assert_eq!(body["message_ids"].as_array().unwrap().len(), 20);

    let healed = app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") == 20).await;
    assert_eq!(counter(&healed, "dead_letter"), 0);
    assert_eq!(counter(&healed, "applied"), 20);
    assert_eq!(counter(&healed, "applied_twice"), 0);
    assert!(healed["dead_letters"].as_array().unwrap().is_empty());
    for message in messages(&healed) {
        assert_eq!(message["round"], 1);
        let replay = round(message, 1);
        assert_eq!(replay.len(), 1, "healthy delivers on the first attempt of the replay");
        assert_eq!((replay[0]["n"].clone(), replay[0]["status"].clone()), (json!(1), json!(200)));
    }
}

#[tokio::test]
async fn slow_answers_are_recovered_from_the_stored_result() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    // The write lands at once but the answer takes 300+ ms; the client gives up at 100 ms.
    app.put(&lab, "downstream", r#"{"mode": "slow", "slow_ms": [300, 400]}"#).await;
    app.put(&lab, "policy", r#"{"timeout_ms": 100}"#).await;
    app.burst(&lab, 8).await;

    let done = app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") == 8).await;
    assert_eq!(counter(&done, "applied"), 8, "each key applied");
    assert_eq!(counter(&done, "applied_twice"), 0, "and none twice");
    for message in messages(&done) {
        let attempts = round(message, 0);
        assert_eq!(attempts[0]["outcome"], "timeout", "{message}");
        let last = attempts.last().unwrap();
        assert_eq!((last["status"].clone(), last["replayed"].clone()), (json!(200), json!(true)));
    }
}

#[tokio::test]
async fn a_client_error_dead_letters_at_once() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    // Long enough waits to slip a conflicting write in between two attempts: 3 s, against
    // the few milliseconds the two requests below take.
    app.put(&lab, "policy", r#"{"base_ms": 3000, "cap_ms": 3000, "jitter": "none"}"#).await;
    app.set_mode(&lab, "down").await;
    app.burst(&lab, 1).await;
    let waiting = app.wait_for(&lab, PATIENCE, |s| messages(s)[0]["state"] == "backing_off").await;
    let key = messages(&waiting)[0]["key"].as_str().unwrap().to_owned();
    app.set_mode(&lab, "healthy").await;
    // Another client uses the same key with another body: the producer's retry gets 422.
    let response = app
        .client
        .post(app.url(&format!("/labs/{lab}/downstream")))
        .header("Idempotency-Key", &key)
        .json(&json!({"someone": "else"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    let dead = app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 1).await;
    let attempts = round(&messages(&dead)[0], 0);
    assert_eq!(attempts.len(), 2, "no retries after a 422");
    assert_eq!(attempts[1]["status"], 422);
    assert!(dead["dead_letters"][0]["reason"].as_str().unwrap().starts_with("permanent error: HTTP"));
}

fn waits(snapshot: &Value) -> Vec<Value> {
    messages(snapshot)
        .iter()
        .flat_map(|m| round(m, 0))
        .filter_map(|a| a.get("wait").filter(|w| !w.is_null()).cloned())
        .collect()
}

#[tokio::test]
async fn honoured_retry_after_sets_the_floor_of_each_wait() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    app.put(&lab, "downstream", r#"{"mode": "down", "retry_after_s": 1}"#).await;
    app.put(&lab, "policy", r#"{"max_attempts": 2}"#).await;
    app.burst(&lab, 5).await;

    let done = app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 5).await;
    let waits = waits(&done);
    assert_eq!(waits.len(), 5);
    for wait in waits {
        assert_eq!(wait["floor_ms"], 1000, "{wait}");
        assert_eq!((wait["planned_ms"].clone(), wait["reason"].clone()), (json!(1000), json!("retry_after")));
        assert!(wait["chosen_ms"].as_u64().unwrap() <= 10, "the jittered wait was shorter");
        let actual = wait["actual_ms"].as_u64().unwrap();
        // Never early; late only by scheduling delay on a busy machine.
        assert!((999..2_500).contains(&actual), "waited {actual} ms for a 1000 ms floor");
    }
}

#[tokio::test]
async fn unhonoured_waits_fall_inside_the_jitter_band() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    app.put(&lab, "downstream", r#"{"mode": "down", "retry_after_s": 1}"#).await;
    app.put(&lab, "policy", r#"{"base_ms": 40, "honor_retry_after": false}"#).await;
    app.burst(&lab, 10).await;

    let done = app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 10).await;
    let waits = waits(&done);
    assert_eq!(waits.len(), 30, "3 waits for each of 10 messages");
    let mut nominals: Vec<u64> = waits.iter().map(|w| w["nominal_ms"].as_u64().unwrap()).collect();
    nominals.sort_unstable();
    nominals.dedup();
    assert_eq!(nominals, [40, 80, 160]);
    for wait in waits {
        let field = |name: &str| wait[name].as_u64().unwrap();
        let (low, high, chosen, actual) =
            (field("low_ms"), field("high_ms"), field("chosen_ms"), field("actual_ms"));
        assert_eq!((low, high), (field("nominal_ms") / 2, field("nominal_ms")));
        assert!((low..=high).contains(&chosen), "{wait}");
        assert!(wait["floor_ms"].is_null(), "Retry-After ignored when not honoured");
        // At least the chosen wait; late by at most a generous scheduling margin.
        assert!(actual + 1 >= chosen && actual <= high + 500, "{wait}");
    }
}

#[tokio::test]
async fn reset_stops_deliveries_and_clears_the_lab() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    // Every message fails once, then all wait 2 s: reset lands while none is in flight.
    app.put(&lab, "policy", r#"{"base_ms": 2000, "cap_ms": 2000, "jitter": "none"}"#).await;
    app.set_mode(&lab, "down").await;
    app.burst(&lab, 10).await;
    app.wait_for(&lab, PATIENCE, |s| counter(s, "backing_off") == 10).await;

    let (status, after) = app.call(reqwest::Method::POST, &format!("/api/labs/{lab}/reset"), None).await;
    assert_eq!(status, 200);
    assert!(messages(&after).is_empty());
    // Past the time every retry was due: a delivery the reset missed would have sent it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let later = app.snapshot(&lab).await;
    assert!(messages(&later).is_empty(), "stopped deliveries leave nothing behind");
    assert_eq!(counter(&later, "requests"), 0, "no request after the reset");
    assert_eq!(later["downstream"]["mode"], "down", "settings survive a reset");
}

#[tokio::test]
async fn labs_are_isolated() {
    let app = TestApp::spawn().await;
    let (a, b) = (app.fast_lab().await, app.fast_lab().await);
    app.set_mode(&a, "down").await;
    app.burst(&b, 3).await;
    let b_done = app.wait_for(&b, PATIENCE, |s| counter(s, "delivered") == 3).await;
    assert_eq!(b_done["downstream"]["mode"], "healthy");
    let a_now = app.snapshot(&a).await;
    assert!(messages(&a_now).is_empty());
    assert_eq!(counter(&a_now, "requests"), 0);
}

#[tokio::test]
async fn time_spent_queueing_for_a_connection_slot_is_measured_apart_from_the_wait() {
    // One connection slot, attempts that hold it for their 50 ms timeout: a retry whose wait is
    // over still waits its turn for the slot.
    let limits = retrylab::config::Limits { max_concurrent_requests: 1, ..Default::default() };
    let app = TestApp::spawn_with(limits).await;
    let lab = app.fast_lab().await;
    app.put(&lab, "downstream", r#"{"latency_ms": [200, 200]}"#).await;
    app.put(&lab, "policy", r#"{"timeout_ms": 50, "base_ms": 10, "cap_ms": 20, "max_attempts": 3}"#).await;
    app.burst(&lab, 5).await;
    let done =
        app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") + counter(s, "dead_letter") == 5).await;
    let waits = waits(&done);
    assert!(!waits.is_empty());
    let mut queued_total = 0;
    for wait in &waits {
        let field = |name: &str| wait[name].as_u64().unwrap_or_else(|| panic!("{name} in {wait}"));
        let (planned, actual, queued) = (field("planned_ms"), field("actual_ms"), field("queued_ms"));
        assert!(actual + 2 >= planned + queued, "queued time is part of the measured wait: {wait}");
        assert!(actual <= planned + queued + 500, "the timer itself was not late by much: {wait}");
        queued_total += queued;
    }
    assert!(queued_total >= 50, "retries queued for the one slot: {queued_total} ms in all");
}

#[tokio::test]
async fn a_dead_letter_whose_write_was_applied_says_so_and_its_replay_is_answered_from_the_result() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    // The first attempt times out while its write is in work; the second finds the key still
    // being processed (409), and the attempts run out: given up on, and the write lands after.
    app.put(&lab, "downstream", r#"{"mode": "healthy", "latency_ms": [300, 300]}"#).await;
    app.put(&lab, "policy", r#"{"timeout_ms": 50, "max_attempts": 2}"#).await;
    app.burst(&lab, 1).await;
    let given_up =
        app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 1 && counter(s, "applied") == 1).await;
    assert_eq!(counter(&given_up, "applied"), 1);
    // And one whose write never landed: down applies nothing.
    app.set_mode(&lab, "down").await;
    app.burst(&lab, 1).await;
    let both = app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 2).await;
    let applied: Vec<(u64, bool)> = both["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (d["id"].as_u64().unwrap(), d["applied"].as_bool().unwrap_or_else(|| panic!("no applied: {d}")))
        })
        .collect();
    assert_eq!(applied, [(1, true), (2, false)], "{both}");

    // Its replay gets the stored answer back, and applies nothing again.
    app.put(&lab, "downstream", r#"{"mode": "healthy"}"#).await;
    app.replay(&lab, r#"{"ids": [1]}"#).await;
    let replayed = app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") == 1).await;
    let message = &messages(&replayed)[0];
    let attempt = round(message, 1)[0];
    assert_eq!(
        (attempt["status"].clone(), attempt["replayed"].clone()),
        (json!(200), json!(true)),
        "{message}"
    );
    assert_eq!((counter(&replayed, "applied"), counter(&replayed, "applied_twice")), (1, 0));
}

/// The library presets' wait rules over the wire: `first_retry_at_once` makes the first wait 0
/// and the curve start at the second (urllib3), and `exact_including_zero` waits a
/// `Retry-After: 0` as it is, with the header as the reason (go-retryablehttp). The snapshot
/// shows the settings and each wait as planned and measured.
#[tokio::test]
async fn a_first_retry_at_once_and_an_exact_retry_after_are_waited_as_set() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    let policy = app
        .put(
            &lab,
            "policy",
            r#"{"jitter": "none", "base_ms": 40, "cap_ms": 1000, "multiplier": 2, "max_attempts": 4,
                "first_retry_at_once": true, "honor_retry_after": true, "retry_after_mode": "exact"}"#,
        )
        .await;
    assert_eq!(
        (&policy["first_retry_at_once"], &policy["retry_after_mode"]),
        (&json!(true), &json!("exact"))
    );
    let bands: Vec<u64> =
        policy["bands"].as_array().unwrap().iter().map(|b| b["high_ms"].as_u64().unwrap()).collect();
    assert_eq!(bands, [0, 80, 160]);
    // `Retry-After: 0` is no header to urllib3: the backoff decides.
    app.put(&lab, "downstream", r#"{"mode": "down", "retry_after_s": 0}"#).await;
    app.burst(&lab, 1).await;
    let done = app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 1).await;
    let attempts = round(&messages(&done)[0], 0);
    let planned: Vec<u64> = attempts.iter().filter_map(|a| a["wait"]["planned_ms"].as_u64()).collect();
    assert_eq!(planned, [0, 80, 160]);
    for attempt in &attempts[..3] {
        let actual = attempt["wait"]["actual_ms"].as_u64().unwrap();
        let planned = attempt["wait"]["planned_ms"].as_u64().unwrap();
        assert!(actual + 5 >= planned && actual < planned + 500, "measured {actual} for {planned}");
    }

    app.call(reqwest::Method::POST, &format!("/api/labs/{lab}/reset"), Some("{}")).await;
    app.put(&lab, "policy", r#"{"first_retry_at_once": false, "retry_after_mode": "exact_including_zero"}"#)
        .await;
    app.burst(&lab, 1).await;
    let done = app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 1).await;
    let attempts = round(&messages(&done)[0], 0);
    let waits: Vec<(u64, &str)> = attempts
        .iter()
        .filter(|a| !a["wait"].is_null())
        .map(|a| (a["wait"]["planned_ms"].as_u64().unwrap(), a["wait"]["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(waits, [(0, "retry_after"); 3], "a 0 waited as it is, three times");
}

/// `retry_statuses` replaces the lab's rule for answers: a 503 the policy does not list ends the
/// round at once as permanent, as a library whose list leaves it out would; `null` brings the
/// lab's own rule back.
#[tokio::test]
async fn a_policy_retries_only_the_statuses_it_lists() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    let set = app.put(&lab, "policy", r#"{"retry_statuses": [429, 502]}"#).await;
    assert_eq!(set["retry_statuses"], json!([429, 502]));
    app.set_mode(&lab, "down").await;
    app.burst(&lab, 1).await;
    let done = app.wait_for(&lab, PATIENCE, |s| counter(s, "dead_letter") == 1).await;
    assert_eq!(round(&messages(&done)[0], 0).len(), 1, "no retry of a 503 it does not list");
    assert!(
        done["dead_letters"][0]["reason"].as_str().unwrap().starts_with("permanent"),
        "{}",
        done["dead_letters"]
    );
    let back = app.put(&lab, "policy", r#"{"retry_statuses": null}"#).await;
    assert!(back.get("retry_statuses").is_none(), "the lab's own rule again: {back}");
}

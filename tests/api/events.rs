//! The event stream: a snapshot first, numbered events in order, exact resumes.

use std::time::Duration;

use serde_json::Value;

use crate::helpers::{TestApp, post_as};
use retrylab::config::Limits;

#[derive(Debug, Clone, PartialEq)]
struct SseEvent {
    id: u64,
    name: Option<String>,
    data: String,
}

/// Reads Server-Sent Events from a live response.
struct SseReader {
    response: reqwest::Response,
    buffer: String,
}

impl SseReader {
    async fn open(app: &TestApp, lab: &str, last_event_id: Option<u64>) -> Self {
        let mut request = app.client.get(app.url(&format!("/api/labs/{lab}/events")));
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
        SseReader { response, buffer: String::new() }
    }

    async fn next(&mut self) -> SseEvent {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut id, mut name, mut data) = (None, None, Vec::new());
                for line in block.lines() {
                    match line.split_once(':') {
                        Some(("id", v)) => id = Some(v.trim().parse().unwrap()),
                        Some(("event", v)) => name = Some(v.trim().to_owned()),
                        Some(("data", v)) => data.push(v.strip_prefix(' ').unwrap_or(v).to_owned()),
                        _ => {} // comments (keep-alives) and blank lines
                    }
                }
                if let Some(id) = id {
                    return SseEvent { id, name, data: data.join("\n") };
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.response.chunk())
                .await
                .expect("an event within 10 s")
                .unwrap()
                .expect("the stream stays open");
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}

fn json(event: &SseEvent) -> Value {
    serde_json::from_str(&event.data).unwrap()
}

#[tokio::test]
async fn events_are_numbered_in_order_and_resume_exactly() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    let mut stream = SseReader::open(&app, &lab, None).await;
    let opening = stream.next().await;
    assert_eq!(opening.name.as_deref(), Some("snapshot"));
    let snapshot = json(&opening);
    assert_eq!(snapshot["last_event_id"].as_u64(), Some(opening.id));
    assert_eq!(snapshot["id"], lab.as_str());

    app.burst(&lab, 3).await;
    let mut seen = Vec::new();
    let mut delivered = 0;
    while delivered < 3 {
        let event = stream.next().await;
        assert_eq!(event.name, None);
        let body = json(&event);
        assert!(body["at_ms"].is_u64(), "{body}");
        // Counters come along whenever they moved: a delivery always moves them.
        if body["type"] == "delivered" {
            assert!(body["counters"].is_object(), "{body}");
            delivered += 1;
        }
        seen.push(event);
    }
    let ids: Vec<u64> = seen.iter().map(|e| e.id).collect();
    let expected: Vec<u64> = (opening.id + 1..=opening.id + seen.len() as u64).collect();
    assert_eq!(ids, expected, "consecutive ids, in order");
    let kinds: Vec<Value> = seen.iter().map(|e| json(e)["type"].clone()).collect();
    assert_eq!(kinds[0], "messages_created");
    for kind in ["attempt_started", "attempt_finished", "downstream_request"] {
        assert!(kinds.contains(&Value::from(kind)), "{kind} missing from {kinds:?}");
    }

    // Reconnect as if the connection dropped after the fourth event.
    let cut = seen[3].id;
    let mut resumed = SseReader::open(&app, &lab, Some(cut)).await;
    for original in &seen[4..] {
        assert_eq!(&resumed.next().await, original, "exactly the missed events, no snapshot");
    }
    // And the resumed stream is live: the next change arrives with the next id. The server
    // also reports the downstream's load by itself every 250 ms, so one such report may come
    // first (after the burst, at any moment): it is numbered in the same sequence.
    app.set_mode(&lab, "down").await;
    let mut next_id = seen.last().unwrap().id + 1;
    loop {
        let live = resumed.next().await;
        assert_eq!(live.id, next_id, "consecutive ids, live as before: {live:?}");
        let kind = json(&live)["type"].clone();
        if kind == "settings_changed" {
            break;
        }
        assert_eq!(kind, "load", "only a load report comes before the change: {live:?}");
        next_id += 1;
    }
}

#[tokio::test]
async fn a_resume_from_too_far_back_starts_with_a_snapshot() {
    let limits = retrylab::config::Limits { event_window: 5, ..Default::default() };
    let app = TestApp::spawn_with(limits).await;
    let lab = app.fast_lab().await;
    for mode in ["down", "healthy", "down", "healthy", "down", "healthy"] {
        app.set_mode(&lab, mode).await;
    }
    // 17 events so far (lab created, then 8 settings changes, each with its marker); only
    // 13..=17 are kept.
    let mut stream = SseReader::open(&app, &lab, Some(2)).await;
    let first = stream.next().await;
    assert_eq!(first.name.as_deref(), Some("snapshot"));
    assert_eq!(first.id, 17);
    assert_eq!(json(&first)["downstream"]["mode"], "healthy");
}

/// The next event of type `kind`, skipping others.
async fn next_of(stream: &mut SseReader, kind: &str) -> SseEvent {
    loop {
        let event = stream.next().await;
        if json(&event)["type"] == kind {
            return event;
        }
    }
}

#[tokio::test]
async fn a_withdrawal_says_what_it_put_back_not_the_whole_lab() {
    // A store that fills up (the database and its log share 640 kB), so actions on dead letters
    // are refused and taken back.
    let config = retrylab::config::Config {
        max_db_bytes: 640 * 1024,
        ..crate::helpers::config(Default::default(), Default::default())
    };
    let app = TestApp::spawn_config(config).await;
    let (lab, hog) = (app.fast_lab().await, app.fast_lab().await);
    app.put(&lab, "policy", r#"{"max_attempts": 1}"#).await;
    app.set_mode(&lab, "down").await;
    let ids = app.burst(&lab, 40).await;
    app.wait_for(&lab, Duration::from_secs(30), |s| crate::helpers::counter(s, "dead_letter") == 40).await;
    app.set_mode(&lab, "healthy").await;
    // The hog's thousand messages fit; the attempts they then make do not.
    app.put(&hog, "downstream", r#"{"mode": "down"}"#).await;
    app.put(&hog, "policy", r#"{"base_ms": 20, "cap_ms": 20, "max_attempts": 20}"#).await;
    app.burst(&hog, 1000).await;
    let start = std::time::Instant::now();
    while app.client.get(app.url("/healthz")).send().await.unwrap().status() != 503 {
        assert!(start.elapsed() < Duration::from_secs(30), "the store filled up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = app.snapshot(&lab).await;
    let last = before["last_event_id"].as_u64().unwrap();
    let snapshot_bytes = before.to_string().len();
    let mut stream = SseReader::open(&app, &lab, Some(last)).await;
    let post = |action: &str, body: String| {
        app.client
            .post(app.url(&format!("/api/labs/{lab}/dead-letters/{action}")))
            .header("Content-Type", "application/json")
            .body(body)
            .send()
    };

    // A quarantine of one letter, taken back: the event carries that letter, as it was.
    let refused = post("quarantine", format!(r#"{{"ids": [{}]}}"#, ids[3])).await.unwrap();
    assert_eq!(refused.status(), 507);
    let event = next_of(&mut stream, "withdrawn").await;
    let withdrawn = json(&event);
    assert_eq!(withdrawn["what"], "quarantine");
    assert!(withdrawn.get("snapshot").is_none(), "{withdrawn}");
    let letters = withdrawn["dead_letters"].as_array().unwrap();
    assert_eq!(letters.len(), 1, "{withdrawn}");
    assert_eq!((letters[0]["id"].as_u64(), &letters[0]["quarantined"]), (Some(ids[3]), &Value::Bool(false)));
    assert!(
        event.data.len() * 10 < snapshot_bytes,
        "the event is {} bytes, the lab's snapshot {snapshot_bytes}",
        event.data.len()
    );

    // A replay of two, taken back: their messages are dead letters again, in their round.
    let refused = post("replay", format!(r#"{{"ids": [{}, {}]}}"#, ids[0], ids[1])).await.unwrap();
    assert_eq!(refused.status(), 507);
    let withdrawn = json(&next_of(&mut stream, "withdrawn").await);
    assert_eq!(withdrawn["what"], "replay");
    let messages = withdrawn["messages"].as_array().unwrap();
    assert_eq!(messages.iter().map(|m| m["id"].as_u64().unwrap()).collect::<Vec<_>>(), [ids[0], ids[1]]);
    for message in messages {
        assert_eq!((&message["state"], &message["round"]), (&Value::from("dead_letter"), &Value::from(0)));
    }
    assert_eq!(withdrawn["dead_letters"].as_array().unwrap().len(), 2);

    // A redrive of all 40, taken back: the letters it had marked, unmarked, and no redrive.
    let refused = post("replay", r#"{"rate_per_s": 5}"#.to_owned()).await.unwrap();
    assert_eq!(refused.status(), 507);
    let withdrawn = json(&next_of(&mut stream, "withdrawn").await);
    assert_eq!((&withdrawn["what"], &withdrawn["redrive"]), (&Value::from("redrive"), &Value::Null));
    let letters = withdrawn["dead_letters"].as_array().unwrap();
    assert_eq!(letters.len(), 40);
    assert!(letters.iter().all(|d| d.get("redrive").is_none()), "{withdrawn}");

    // What the events said is what the lab holds.
    let after = app.snapshot(&lab).await;
    assert_eq!(after["dead_letters"], before["dead_letters"], "every action was taken back");
}

#[tokio::test]
async fn a_reset_lets_go_of_the_events_before_it() {
    let app = TestApp::spawn().await;
    let lab = app.fast_lab().await;
    let early = app.snapshot(&lab).await["last_event_id"].as_u64().unwrap();
    app.burst(&lab, 5).await;
    app.wait_for(&lab, Duration::from_secs(30), |s| crate::helpers::counter(s, "delivered") == 5).await;
    // Before the reset, a resume from early on gets exactly what it missed.
    let mut resumed = SseReader::open(&app, &lab, Some(early)).await;
    assert_eq!(resumed.next().await.name, None, "a resume, not a snapshot");
    drop(resumed);
    let (status, _) = app.call(reqwest::Method::POST, &format!("/api/labs/{lab}/reset"), None).await;
    assert!(status.is_success(), "{status}");
    let mut after_reset = SseReader::open(&app, &lab, Some(early)).await;
    let first = after_reset.next().await;
    assert_eq!(first.name.as_deref(), Some("snapshot"), "what came before the reset is gone: {first:?}");
    assert!(json(&first)["messages"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn an_unwatched_quiet_lab_lets_go_of_its_event_window_and_a_watched_one_keeps_it() {
    let retention = retrylab::config::Retention {
        sweep_interval_ms: 50,
        idle_event_window_ms: 400,
        ..Default::default()
    };
    let app = TestApp::spawn_config(crate::helpers::config(Default::default(), retention)).await;
    let (quiet, watched) = (app.fast_lab().await, app.fast_lab().await);
    let mut early = Vec::new();
    for lab in [&quiet, &watched] {
        early.push(app.snapshot(lab).await["last_event_id"].as_u64().unwrap());
        app.burst(lab, 3).await;
        app.wait_for(lab, Duration::from_secs(30), |s| crate::helpers::counter(s, "delivered") == 3).await;
    }
    let mut watching = SseReader::open(&app, &watched, None).await;
    assert_eq!(watching.next().await.name.as_deref(), Some("snapshot"));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut late = SseReader::open(&app, &quiet, Some(early[0])).await;
    assert_eq!(late.next().await.name.as_deref(), Some("snapshot"), "the quiet lab's window is gone");
    let mut resume = SseReader::open(&app, &watched, Some(early[1])).await;
    assert_eq!(resume.next().await.name, None, "the watched lab still resumes");
}

#[tokio::test]
async fn refusals_of_a_caller_in_a_loop_are_said_at_most_every_quarter_second_and_lose_no_count() {
    // One attempt a key: every request after the first with the same key is refused.
    let app = TestApp::spawn_with(Limits { max_outside_attempts_per_key: 1, ..Default::default() }).await;
    let lab = app.fast_lab().await;
    let mut events = SseReader::open(&app, &lab, None).await;
    assert_eq!(events.next().await.name.as_deref(), Some("snapshot"));
    let sent = std::time::Instant::now();
    const REQUESTS: u64 = 40;
    for _ in 0..REQUESTS {
        let answer = post_as(&app, &lab, Some("looper"), "looped").await;
        assert_eq!(answer.status(), 200, "a refused attempt is still answered");
    }
    let elapsed_ms = sent.elapsed().as_millis() as u64;
    let mut said = Vec::new();
    while said.last() != Some(&(REQUESTS - 1)) {
        let event = json(&events.next().await);
        if event["type"] == "outside_untracked" {
            assert_eq!(
                (event["caller"].as_str(), event["limit"].as_str()),
                (Some("looper"), Some("max_outside_attempts_per_key"))
            );
            said.push(event["untracked"]["max_outside_attempts_per_key"].as_u64().unwrap());
        }
    }
    // The first refusal is said at once; the rest at most once a quarter second, the last with
    // every refusal counted. One event a refusal would be 39.
    assert_eq!(said[0], 1, "{said:?}");
    assert!(said.windows(2).all(|w| w[0] < w[1]), "{said:?}");
    assert!(
        said.len() as u64 <= elapsed_ms / 250 + 2,
        "{} events over {elapsed_ms} ms: {said:?}",
        said.len()
    );
    let snapshot = app.snapshot(&lab).await;
    assert_eq!(snapshot["outside"]["untracked"]["max_outside_attempts_per_key"], REQUESTS - 1);
}

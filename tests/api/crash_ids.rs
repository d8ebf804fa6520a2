//! Event ids across a SIGKILL: events reach a page before the store commits them, so the
//! server that starts again must never give an id the page saw to another event. A page-like
//! model, applying the stream as the page does and reconnecting with `Last-Event-ID` after
//! each kill, must end where the server's snapshot is.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{Binary, TestApp, counter, fresh_db};

/// The real binary on a free port, holding changes nobody waits for 200 ms before committing,
/// so that a kill right after an event lands among events the store has not committed.
fn start(db: &Path) -> Binary {
    Binary::start_with(db, &["--commit-delay-ms", "200"])
}

/// A message's state and its attempts by (round, n), with their outcomes once finished.
type Seen = (String, BTreeMap<(u64, u64), Value>);

/// What the page keeps of each message.
#[derive(Default)]
struct Model {
    last_id: Option<u64>,
    messages: BTreeMap<u64, Seen>,
}

impl Model {
    fn replace(&mut self, snapshot: &Value) {
        self.messages = snapshot["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let attempts = m["attempts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| ((a["round"].as_u64().unwrap(), a["n"].as_u64().unwrap()), a["outcome"].clone()))
                    .collect();
                (m["id"].as_u64().unwrap(), (m["state"].as_str().unwrap().to_owned(), attempts))
            })
            .collect();
    }

    fn set_state(&mut self, id: &Value, state: &str) {
        let entry = self.messages.get_mut(&id.as_u64().unwrap()).expect("an event for a known message");
        entry.0 = state.to_owned();
    }

    fn apply(&mut self, id: u64, name: Option<&str>, data: &Value) {
        if let Some(last) = self.last_id {
            assert!(id > last, "ids only go up: {id} after {last}");
        }
        self.last_id = Some(id);
        if name == Some("snapshot") {
            return self.replace(data);
        }
        match data["type"].as_str().unwrap() {
            "reset" | "recovered" | "expired" | "withdrawn" => self.replace(&data["snapshot"]),
            "messages_created" => {
                for m in data["messages"].as_array().unwrap() {
                    self.messages.insert(m["id"].as_u64().unwrap(), ("queued".into(), BTreeMap::new()));
                }
            }
            "attempt_started" => {
                let attempt = &data["attempt"];
                let at = (attempt["round"].as_u64().unwrap(), attempt["n"].as_u64().unwrap());
                let entry = self.messages.get_mut(&data["message_id"].as_u64().unwrap()).unwrap();
                entry.1.insert(at, Value::Null);
                entry.0 = "in_flight".into();
            }
            "attempt_finished" => {
                let attempt = &data["attempt"];
                let at = (attempt["round"].as_u64().unwrap(), attempt["n"].as_u64().unwrap());
                let entry = self.messages.get_mut(&data["message_id"].as_u64().unwrap()).unwrap();
                entry.1.insert(at, attempt["outcome"].clone());
            }
            "wait_scheduled" => self.set_state(&data["message_id"], "backing_off"),
            "delivered" => self.set_state(&data["message_id"], "delivered"),
            "dead_lettered" => self.set_state(&data["dead_letter"]["id"], "dead_letter"),
            "replay_started" => {
                for m in data["messages"].as_array().unwrap() {
                    self.set_state(&m["id"], "queued");
                }
            }
            _ => {}
        }
    }
}

/// Reads the lab's stream into the model until `stop` says so or the stream ends (the server
/// was killed); `Last-Event-ID` is the model's last id.
async fn follow(app: &TestApp, lab: &str, model: &mut Model, mut stop: impl FnMut(&Model) -> bool) {
    let mut request = app.client.get(app.url(&format!("/api/labs/{lab}/events")));
    if let Some(id) = model.last_id {
        request = request.header("Last-Event-ID", id.to_string());
    }
    let mut response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut buffer = String::new();
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let (mut id, mut name, mut data) = (None, None, String::new());
            for line in block.lines() {
                match line.split_once(':') {
                    Some(("id", v)) => id = Some(v.trim().parse::<u64>().unwrap()),
                    Some(("event", v)) => name = Some(v.trim().to_owned()),
                    Some(("data", v)) => data.push_str(v.strip_prefix(' ').unwrap_or(v)),
                    _ => {}
                }
            }
            if let Some(id) = id {
                model.apply(id, name.as_deref(), &serde_json::from_str(&data).unwrap());
                if stop(model) {
                    return;
                }
            }
        }
        match tokio::time::timeout(Duration::from_secs(20), response.chunk()).await {
            Ok(Ok(Some(chunk))) => buffer.push_str(std::str::from_utf8(&chunk).unwrap()),
            _ => return,
        }
    }
}

fn settled(snapshot: &Value) -> bool {
    ["queued", "in_flight", "backing_off"].iter().all(|c| counter(snapshot, c) == 0)
}

#[tokio::test]
async fn a_page_that_reconnects_across_sigkills_ends_where_the_server_is() {
    let db = fresh_db();
    let mut server = start(&db);
    let lab = server.app.new_lab().await;
    let policy =
        json!({"base_ms": 20, "cap_ms": 100, "timeout_ms": 2000, "max_attempts": 20, "jitter": "full"});
    server.app.put(&lab, "policy", &policy.to_string()).await;
    // Down: no answer applies a write, so nothing hurries a commit while the attempts stream.
    let downstream = json!({"mode": "down", "latency_ms": [1, 5], "retry_after_s": 0});
    server.app.put(&lab, "downstream", &downstream.to_string()).await;
    let mut model = Model::default();
    for after_ms in [150, 400, 250, 600] {
        server.app.burst(&lab, 40).await;
        // Reads as the events come, so the page is at the head of the stream when the kill lands.
        let reading = Instant::now();
        follow(&server.app, &lab, &mut model, |_| reading.elapsed() >= Duration::from_millis(after_ms)).await;
        drop(server); // SIGKILL, right after an event the store most likely had not committed
        server = start(&db);
        // The page reconnects a moment later, as a browser's EventSource does: the server has
        // published the restart's events and resumed deliveries meanwhile.
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    server.app.set_mode(&lab, "healthy").await;
    let start = Instant::now();
    let snapshot = loop {
        let snapshot = server.app.snapshot(&lab).await;
        if settled(&snapshot) {
            break snapshot;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "never settled: {}", snapshot["counters"]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let target = snapshot["last_event_id"].as_u64().unwrap();
    follow(&server.app, &lab, &mut model, |m| m.last_id >= Some(target)).await;
    let mut server_model = Model::default();
    server_model.replace(&snapshot);
    let differ: Vec<u64> = server_model
        .messages
        .iter()
        .filter(|(id, message)| model.messages.get(id) != Some(message))
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(model.messages.len(), server_model.messages.len(), "the page holds the server's messages");
    assert!(
        differ.is_empty(),
        "{} messages differ between the page and the server: {differ:?}",
        differ.len()
    );
}

//! Stored rows are a contract: the store keeps messages, attempts, dead letters, load bins,
//! markers, policies and comparisons as the JSON of the API's types, so renaming a field would
//! make every stored lab unreadable without any migration noticing. Each folder under
//! `tests/fixtures/` holds a database an earlier release wrote (`scripts/make-stored-fixture.py`)
//! and what that release served from it; today's build must open it and serve the same.

use std::path::Path;

use reqwest::StatusCode;
use retrylab::config::{Config, Retention};
use serde_json::Value;

use crate::helpers::{TestApp, fresh_db};

/// Far past any fixture's age, so no retention window sweeps a stored lab away.
const CENTURY_S: u64 = 100 * 365 * 24 * 60 * 60;

/// What may differ between two servings of the same store: the clock, the event count, the
/// server's own settings, and the live state of the breaker and the protections (a restarted
/// client starts closed and full).
/// With several clients, how many breakers stood open is live only too in these fixtures: the
/// releases that wrote them kept the first client's breaker history alone (since migration 10
/// every client's is kept, `client_2s_breaker_history_survives_a_restart`).
const VOLATILE: [&str; 7] = [
    "/now_ms",
    "/last_event_id",
    "/limits",
    "/retention",
    "/breaker/state",
    "/protections",
    "/clients/changes",
];

/// Lists that a restart may only add to (a `restart` marker; the breaker's closing change).
const GROWING: [&str; 2] = ["/markers", "/breaker/changes"];

#[tokio::test]
async fn a_store_written_by_release_0_1_serves_the_same_labs_and_comparisons() {
    let served = open_fixture("stored-0.1").await;
    let (app, expected) = (&served.app, &served.expected);
    served_the_same(app, expected, 5).await;

    for (name, old) in expected["comparisons"].as_object().unwrap() {
        let id = old["id"].as_str().unwrap();
        let response = app.client.get(app.url(&format!("/api/comparisons/{id}"))).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "comparison {name}");
        let new: Value = response.json().await.unwrap();
        // The table's figures and columns are measured from the stored labs; which column is
        // marked best is a rule of today's build, not a stored row.
        let mut differences = Vec::new();
        for field in ["id", "scenario", "burst", "seed", "done", "columns"] {
            contained(&old[field], &new[field], &format!("/{field}"), &mut differences);
        }
        assert!(
            differences.is_empty(),
            "comparison {name} is served differently:\n{}",
            differences.join("\n")
        );
    }
}

#[tokio::test]
async fn a_store_written_by_release_0_1_takes_new_work() {
    let served = open_fixture("stored-0.1").await;
    let (app, expected) = (&served.app, &served.expected);
    let old = &expected["labs"]["outage_replay"];
    let id = old["id"].as_str().unwrap();
    // Its three dead letters replay against the (healthy) endpoint with their stored keys.
    let (status, body) = app.replay(id, "{}").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let settled = app
        .wait_for(id, std::time::Duration::from_secs(20), |s| {
            s["counters"]["delivered"] == 6 && s["counters"]["dead_letter"] == 0
        })
        .await;
    assert_eq!(settled["counters"]["applied"], 6);
    assert_eq!(settled["counters"]["applied_twice"], 0);
}

#[tokio::test]
async fn a_store_with_protections_serves_the_same_policies_and_what_they_stopped() {
    let served = open_fixture("stored-protections").await;
    let (app, expected) = (&served.app, &served.expected);
    served_the_same(app, expected, 6).await;
    let old = &expected["labs"]["protections"];
    let stopped = |lab: &Value| -> u64 {
        let bins = lab["load"]["bins"].as_array().unwrap();
        bins.iter()
            .flat_map(|b| b["suppressed"].as_object().into_iter().flatten())
            .map(|(_, n)| n.as_u64().unwrap())
            .sum()
    };
    assert!(stopped(old) > 0, "the fixture's protections stopped retries");
    let new = app.snapshot(old["id"].as_str().unwrap()).await;
    assert_eq!(stopped(&new), stopped(old));
    assert_eq!(new["policy"]["protections"], old["policy"]["protections"]);
    // A restarted client's protections start afresh: a full bucket, a full quota.
    let levels: Vec<&Value> = new["protections"].as_array().unwrap().iter().map(|p| &p["level"]).collect();
    assert_eq!(levels, [&Value::from(5.0), &Value::from(20.0)]);
}

/// Every lab of the fixture (`count` of them) is served as it was, but for what may differ.
async fn served_the_same(app: &TestApp, expected: &Value, count: usize) {
    let labs = expected["labs"].as_object().unwrap();
    assert_eq!(labs.len(), count, "the fixture's labs");
    for (name, old) in labs {
        let id = old["id"].as_str().unwrap();
        let new = app.snapshot(id).await;
        let old = &ran_out(old, &new);
        let mut differences = Vec::new();
        contained(old, &new, "", &mut differences);
        assert!(
            differences.is_empty(),
            "lab {name} ({id}) is served differently:\n{}",
            differences.join("\n")
        );
        let markers = &new["markers"].as_array().unwrap()[old["markers"].as_array().unwrap().len()..];
        assert!(markers.iter().any(|m| m["kind"] == "restart"), "lab {name} marks the restart: {markers:?}");
    }
}

/// A timed setting the fixture left pending runs out on the lab's clock, which kept going
/// while the store sat on disk: once its time has passed, the downstream is what it went back to.
fn ran_out(old: &Value, new: &Value) -> Value {
    let mut old = old.clone();
    let revert = old["downstream"]["revert"].clone();
    if let Some(at_ms) = revert["at_ms"].as_u64()
        && new["now_ms"].as_u64().unwrap() >= at_ms
    {
        old["downstream"] = revert["to"].clone();
        old["downstream"]["revert"] = Value::Null;
    }
    old
}

struct Served {
    app: TestApp,
    expected: Value,
}

/// Serves a copy of the fixture's database, so the checked-in file is never written.
async fn open_fixture(name: &str) -> Served {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    let db = fresh_db();
    std::fs::copy(folder.join("retrylab.db"), &db).unwrap();
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("served.json")).unwrap()).unwrap();
    let retention = Retention {
        key_ttl_s: CENTURY_S,
        dead_letter_ttl_s: CENTURY_S,
        idle_lab_ttl_s: CENTURY_S,
        ..Retention::default()
    };
    let app = TestApp::spawn_config(Config { retention, ..Config::new(db) }).await;
    Served { app, expected }
}

/// Notes every place where `new` does not hold what `old` held: a field missing or different
/// (new fields are allowed), a list of another length (a growing list may only get longer).
fn contained(old: &Value, new: &Value, path: &str, differences: &mut Vec<String>) {
    if VOLATILE.contains(&path) {
        return;
    }
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            for (key, value) in old {
                let inner = format!("{path}/{key}");
                match new.get(key) {
                    Some(found) => contained(value, found, &inner, differences),
                    None if VOLATILE.contains(&inner.as_str()) => {}
                    None => differences.push(format!("{inner}: missing (was {value})")),
                }
            }
        }
        (Value::Array(old), Value::Array(new)) => {
            let grows = GROWING.contains(&path);
            if (grows && new.len() < old.len()) || (!grows && new.len() != old.len()) {
                differences.push(format!("{path}: {} items, was {}", new.len(), old.len()));
                return;
            }
            for (i, (old, new)) in old.iter().zip(new).enumerate() {
                contained(old, new, &format!("{path}/{i}"), differences);
            }
        }
        (old, new) if old != new => differences.push(format!("{path}: {new}, was {old}")),
        _ => {}
    }
}

//! What the lab says in words about its own settings (issue 27, item 8): a flag for a slowdown
//! says it is one.

use serde_json::Value;

use crate::helpers::TestApp;

fn labels(snapshot: &Value) -> Vec<String> {
    snapshot["markers"].as_array().unwrap().iter().map(|m| m["label"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_slowdown_flag_names_the_answer_time_it_sets() {
    let app = TestApp::spawn().await;
    let lab = app.new_lab().await;
    app.put(
        &lab,
        "downstream",
        r#"{"mode": "overloaded", "capacity": 8, "queue": 40, "latency_ms": [200, 200]}"#,
    )
    .await;
    // The metastable preset's trigger: the same mode, five times slower, for 2 s.
    app.put(&lab, "downstream", r#"{"latency_ms": [1000, 1000], "for_ms": 2000}"#).await;
    let said = labels(&app.snapshot(&lab).await);
    assert!(said.iter().any(|l| l.contains("overloaded (capacity 8, queue 40, 200 ms each)")), "{said:?}");
    assert!(said.iter().any(|l| l.contains("overloaded (capacity 8, queue 40, 1000 ms each)")), "{said:?}");
    app.put(&lab, "downstream", r#"{"mode": "healthy", "latency_ms": [60, 240]}"#).await;
    let said = labels(&app.snapshot(&lab).await);
    assert!(said.iter().any(|l| l.contains("healthy (60–240 ms)")), "{said:?}");
}

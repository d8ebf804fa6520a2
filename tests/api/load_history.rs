//! A lab's load history at two resolutions: the last five minutes in bins of 100 ms, older
//! activity summed into bins of 10 s, in memory and in the store alike, so an hour of steady
//! traffic does not hold 36,000 bins. Five minutes of lab time pass here by moving the lab's
//! origin back in the store between two runs of the server.

use std::time::Duration;

use serde_json::Value;

use retrylab::config::{Limits, Retention};

use crate::helpers::{TestApp, config, counter};

const PATIENCE: Duration = Duration::from_secs(20);

fn bins(snapshot: &Value) -> Vec<(u64, u64, u64)> {
    let bins = snapshot["load"]["bins"].as_array().unwrap();
    bins.iter()
        .map(|b| {
            let width = b.get("width_ms").map_or(100, |w| w.as_u64().unwrap());
            (b["t_ms"].as_u64().unwrap(), width, b["requests"].as_u64().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn activity_older_than_five_minutes_is_kept_summed_in_ten_second_bins() {
    let config = config(Limits::default(), Retention::default());
    let db = config.db.clone();
    let (app, server) = TestApp::spawn_stoppable(config.clone()).await;
    let lab = app.fast_lab().await;
    app.burst(&lab, 30).await;
    let before = app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") == 30).await;
    let first = bins(&before);
    assert!(first.iter().all(|&(_, width, _)| width == 100), "all fine while young: {first:?}");
    assert!(first.len() >= 2, "the burst's requests are spread over bins: {first:?}");
    server.stop().await;

    // Six minutes pass for the lab.
    let store = rusqlite::Connection::open(&db).unwrap();
    let moved =
        store.execute("UPDATE labs SET origin_unix_ms = origin_unix_ms - 360000 WHERE id = ?1", [&lab]);
    assert_eq!(moved.unwrap(), 1);
    drop(store);

    let (app, server) = TestApp::spawn_stoppable(config.clone()).await;
    app.burst(&lab, 10).await;
    let after = app.wait_for(&lab, PATIENCE, |s| counter(s, "delivered") == 40).await;
    let now = bins(&after);
    let requests = counter(&after, "requests");
    assert_eq!(now.iter().map(|b| b.2).sum::<u64>(), requests, "the bins still add up to every request");
    let (coarse, fine): (Vec<&(u64, u64, u64)>, Vec<_>) = now.iter().partition(|b| b.1 == 10_000);
    assert!(!coarse.is_empty(), "the first burst's bins are summed: {now:?}");
    assert!(coarse.iter().all(|b| b.0 % 10_000 == 0 && b.0 < 60_000), "{coarse:?}");
    assert_eq!(coarse.iter().map(|b| b.2).sum::<u64>(), first.iter().map(|b| b.2).sum::<u64>());
    assert!(fine.iter().all(|b| b.0 >= 360_000), "the new burst's bins are fine: {fine:?}");
    server.stop().await;

    // The store holds the sums, not the fine rows they replaced, and serves them again.
    let store = rusqlite::Connection::open(&db).unwrap();
    let fine_rows: u64 = store
        .query_row(
            "SELECT COUNT(*) FROM load_bins WHERE lab_id = ?1 AND t_ms < 60000 AND t_ms % 10000 != 0",
            [&lab],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(fine_rows, 0);
    drop(store);
    let (app, _server) = TestApp::spawn_stoppable(config).await;
    assert_eq!(bins(&app.snapshot(&lab).await), now, "read back as served");
}

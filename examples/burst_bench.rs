//! The store's group commit, measured: a 10,000-message burst against an instant, healthy
//! downstream, every attempt and every applied key committed to SQLite with `synchronous =
//! FULL`. Beside it, in the same run, the baseline it replaces: the same kind of rows written
//! one transaction (one fsync) each.
//!
//! Run: `cargo run --release --example burst_bench` (prints a Markdown table row).
//! `BURST_BENCH_MESSAGES` and `BURST_BENCH_BASELINE_ROWS` set smaller counts (CI runs it so).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use retrylab::config::{Config, Limits};
use serde_json::Value;

/// A count from the environment, else its default.
fn count(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let dir = std::env::temp_dir().join(format!("retrylab-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let burst = count("BURST_BENCH_MESSAGES", 10_000);
    let baseline_rows = count("BURST_BENCH_BASELINE_ROWS", 500);
    // The whole burst is owed a delivery at once: every limit on that is raised to it.
    let limits = Limits {
        max_burst: burst as usize,
        max_active_messages_per_lab: burst as usize,
        max_messages_per_lab: (burst as usize).max(Limits::default().max_messages_per_lab),
        ..Limits::default()
    };
    let config = Config { limits, ..Config::new(dir.join("burst.db")) };
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(retrylab::server::serve(listener, config, std::future::pending()));
    let client = reqwest::Client::builder().no_proxy().build().unwrap();

    let lab: Value = client.post(format!("{base}/api/labs")).send().await.unwrap().json().await.unwrap();
    let lab = format!("{base}/api/labs/{}", lab["id"].as_str().unwrap());
    let put = |path: &str, body: &'static str| {
        client.put(format!("{lab}/{path}")).header("content-type", "application/json").body(body).send()
    };
    put("downstream", r#"{"mode": "healthy", "latency_ms": [0, 0]}"#).await.unwrap();
    let before = metric(&client, &base, "retrylab_store_commits_total").await;
    let rows_before = metric(&client, &base, "retrylab_store_rows_total").await;

    let started = Instant::now();
    let accepted = client
        .post(format!("{lab}/bursts"))
        .header("content-type", "application/json")
        .body(format!(r#"{{"count": {burst}}}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 202, "{}", accepted.text().await.unwrap_or_default());
    let accepted_after = started.elapsed();
    loop {
        let snapshot: Value = client.get(&lab).send().await.unwrap().json().await.unwrap();
        if snapshot["counters"]["delivered"] == burst {
            assert_eq!(snapshot["counters"]["applied_twice"], 0);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let commits = metric(&client, &base, "retrylab_store_commits_total").await - before;
    let rows = metric(&client, &base, "retrylab_store_rows_total").await - rows_before;
    let attempts = metric(&client, &base, "retrylab_attempts_total").await;
    let grouped_commits_per_s = commits / elapsed;

    // The baseline: one transaction per row, on the same disk, same settings.
    let baseline = baseline_commits_per_s(&dir.join("baseline.db"), baseline_rows);
    let _ = std::fs::remove_dir_all(&dir);

    println!(
        "| messages | 202 after | drained in | attempts/s | commits | commits/s | rows | rows per commit | baseline: 1 row per commit, commits/s | grouped rows/s ÷ baseline rows/s |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    println!(
        "| {burst} | {:.0} ms | {elapsed:.2} s | {:.0} | {commits:.0} | {grouped_commits_per_s:.0} | {rows:.0} | {:.1} | {baseline:.0} | {:.1} |",
        accepted_after.as_secs_f64() * 1000.0,
        attempts / elapsed,
        rows / commits,
        (rows / elapsed) / baseline,
    );
}

/// Sums every sample of a metric in the `/metrics` exposition.
async fn metric(client: &reqwest::Client, base: &str, name: &str) -> f64 {
    let text = client.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|line| line.starts_with(name) && line[name.len()..].starts_with([' ', '{']))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn baseline_commits_per_s(path: &std::path::Path, rows: u64) -> f64 {
    let connection = rusqlite::Connection::open(path).unwrap();
    connection
        .execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; \
             CREATE TABLE messages (lab_id TEXT, id INTEGER, body TEXT, PRIMARY KEY (lab_id, id)) WITHOUT ROWID;",
        )
        .unwrap();
    let body = "x".repeat(600);
    let started = Instant::now();
    for id in 0..rows {
        connection
            .execute("INSERT OR REPLACE INTO messages VALUES ('lab', ?1, ?2)", rusqlite::params![id, body])
            .unwrap();
    }
    rows as f64 / started.elapsed().as_secs_f64()
}

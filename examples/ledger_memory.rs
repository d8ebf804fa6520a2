//! Memory held by applied idempotency keys: the process's RSS before and after 150,000 keys
//! are applied to one ledger, each with a body like the lab's client sends.
//!
//!     cargo run --release --example ledger_memory
//!
//! `LEDGER_MEMORY_KEYS` sets another count (CI runs it with a small one).

use retrylab::downstream::{BodyDigest, IdempotencyKey, Ledger};

fn rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with("VmRSS")).unwrap_or("VmRSS: 0 kB");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn main() {
    let count: u64 = std::env::var("LEDGER_MEMORY_KEYS").ok().and_then(|v| v.parse().ok()).unwrap_or(150_000);
    let keys: Vec<IdempotencyKey> =
        (0..count).map(|_| IdempotencyKey::parse(&uuid::Uuid::new_v4().to_string()).unwrap()).collect();
    let mut ledger = Ledger::default();
    let before = rss_kb();
    for (i, key) in keys.iter().enumerate() {
        let body = serde_json::json!({ "message_id": i, "lab": "5b0c3f0e-6d1b-4f43-9c1e-2f6f0b8f8a11" });
        ledger.reserve(key, BodyDigest::of(&body), false);
        ledger.complete(key, i as u64, 1_780_000_000_000 + i as u64);
        // As the store's writer does, commit by commit.
        if i % 500 == 499 {
            drop(ledger.take_unsaved());
        }
    }
    drop(ledger.take_unsaved());
    let after = rss_kb();
    let grown_mb = (after - before) as f64 / 1024.0;
    println!(
        "{count} keys: RSS +{grown_mb:.1} MB ({:.0} bytes per key); applied {}",
        (after - before) as f64 * 1024.0 / count as f64,
        ledger.counts().applied
    );
}

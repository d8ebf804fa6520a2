//! What a lab holds in memory, counted by the allocator (every live byte the process asked
//! for, the store's SQLite aside, which allocates on its own): an empty lab, and a lab that took
//! bursts of messages and was then reset, which should cost what an empty one does; and what
//! five minutes of a busy lab's load history (its fine bins) hold.
//!
//!     cargo run --release --example lab_memory [-- --labs 20 --messages 5000]
//!
//! `--quick` runs a few small labs (CI proves the example still works). The labs run no
//! deliveries: their messages stay queued, each with its event in the lab's window.

#[path = "support/counting.rs"]
mod counting;

use counting::live;
use retrylab::config::{Limits, Retention};
use retrylab::domain::{Answer, BIN_MS, FINE_FOR_MS, Load};
use retrylab::lab::Labs;
use retrylab::store::{Store, StoreSettings};

fn flag(args: &[String], name: &str, default: usize) -> usize {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(default)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let labs_n = flag(&args, "--labs", if quick { 3 } else { 20 });
    let messages = flag(&args, "--messages", if quick { 300 } else { 5_000 });
    let limits = Limits {
        max_labs: 10 * labs_n + 10,
        max_messages_per_lab: messages.max(1),
        max_active_messages_per_lab: messages.max(1),
        lab_create_burst: 1_000_000,
        lab_creates_per_hour: 1_000_000,
        ..Limits::default()
    };
    let dir = std::env::temp_dir().join(format!("retrylab-lab-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (store, _) = Store::open(&dir.join("labs.db"), StoreSettings::default()).expect("the store opens");
    let registry = Labs::new(limits.clone(), Retention::default(), store, Vec::new());
    // One lab made, filled, reset and committed first pays the one-time costs (the store's
    // statements, the runtime's timers).
    let first = registry.create().unwrap();
    fill(&first, messages, limits.max_burst).await;
    first.reset();
    first.persisted().await.unwrap();

    let before = live();
    let empty: Vec<_> = (0..labs_n).map(|_| registry.create().unwrap()).collect();
    for lab in &empty {
        lab.persisted().await.unwrap();
    }
    let per_empty = (live() - before) / labs_n as isize;

    let before = live();
    let used: Vec<_> = (0..labs_n).map(|_| registry.create().unwrap()).collect();
    for lab in &used {
        fill(lab, messages, limits.max_burst).await;
    }
    let per_full = (live() - before) / labs_n as isize;
    for lab in &used {
        lab.reset();
        lab.persisted().await.unwrap();
    }
    let per_reset = (live() - before) / labs_n as isize;
    println!(
        "{labs_n} labs of each kind, {messages} messages each; live bytes per lab: empty {per_empty}, \
         with its messages {per_full}, after a reset {per_reset}"
    );
    drop((empty, used));
    let _ = std::fs::remove_dir_all(&dir);

    // A busy lab's load history: five minutes of fine bins, one request, answer, offered and
    // delivered message in each, as a lab at 10 messages/s fills them.
    let before = live();
    let mut load = Load::default();
    let fine_bins = FINE_FOR_MS / BIN_MS;
    for t_ms in (0..FINE_FOR_MS).step_by(BIN_MS as usize) {
        let bin = load.arrive(t_ms);
        load.answer(bin, Answer::Status(200));
        load.offered(t_ms, 1);
        load.delivered(t_ms);
    }
    drop(load.take_unsaved());
    drop(load.take_changed());
    let held = live() - before;
    println!(
        "load history: {fine_bins} fine bins hold {held} live bytes, {} per bin",
        held / fine_bins as isize
    );
}

async fn fill(lab: &retrylab::lab::Lab, messages: usize, max_burst: usize) {
    let mut sent = 0;
    while sent < messages {
        let count = max_burst.min(messages - sent);
        lab.accept_burst(count).expect("the lab takes the burst");
        sent += count;
    }
    lab.persisted().await.unwrap();
}

//! What a lab holds in memory, counted by the allocator (every live byte the process asked
//! for, the store's SQLite aside, which allocates on its own): an empty lab, and a lab that took
//! bursts of messages and was then reset, which should cost what an empty one does; and what
//! five minutes of a busy lab's load history (its fine bins) hold; and what one lab's outside
//! messages (a caller's key, with its attempts) hold each, and the ledger's share of their keys;
//! and what a busy lab's settled messages (delivered, one attempt each) hold each; and what a
//! lab costs once it rests in the store (`--idle-lab-rest-ms`).
//!
//!     cargo run --release --example lab_memory [-- --labs 20 --messages 5000 --outside 20000]
//!
//! `--quick` runs a few small labs (CI proves the example still works). The labs run no
//! deliveries: their messages stay queued, each with its event in the lab's window.

#[path = "support/counting.rs"]
mod counting;

use counting::live;
use retrylab::callers::{CallerName, Ending, Spoken};
use retrylab::config::{Limits, Retention};
use retrylab::domain::{Answer, BIN_MS, FINE_FOR_MS, Load};
use retrylab::downstream::{BodyDigest, HeldKeys, IdempotencyKey, Ledger};
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
    let outside = flag(&args, "--outside", if quick { 300 } else { 20_000 });
    let limits = Limits {
        max_labs: 10 * labs_n + 10,
        max_messages_per_lab: messages.max(1),
        max_active_messages_per_lab: messages.max(1),
        lab_create_burst: 1_000_000,
        lab_creates_per_hour: 1_000_000,
        ..Limits::default()
    };
    let (registry, dir) = open_registry("labs", limits.clone(), Retention::default());
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

    settled_messages(if quick { 300 } else { Limits::default().settled_window });
    ledger_share(outside);
    outside_messages(outside).await;
    resting_labs(labs_n, if quick { 100 } else { 2_000 }).await;
}

/// Labs at rest (`--idle-lab-rest-ms`): `labs_n` labs, each given `count` outside messages
/// (settled, as a lab someone used and left), counted in memory, then again once every one of
/// them has left memory for the store: what a lab at rest still costs.
async fn resting_labs(labs_n: usize, count: usize) {
    let limits = Limits {
        max_labs: labs_n + 10,
        max_outside_keys_per_lab: count.max(1),
        max_outside_keys: labs_n * count + 10,
        lab_create_burst: 1_000_000,
        lab_creates_per_hour: 1_000_000,
        ..Limits::default()
    };
    let retention = Retention { idle_lab_rest_ms: 1, ..Retention::default() };
    let (registry, dir) = open_registry("resting", limits, retention);
    let caller = CallerName::from_request(Some(b"bench-client"), None, None).unwrap();
    // One lab made, used and rested first pays the one-time costs (the store's reader).
    let first = registry.create().unwrap();
    let first_id = first.id;
    drop(first);
    rest_all(&registry, 1).await;
    drop(registry.get(&first_id));
    rest_all(&registry, 1).await;

    let before = live();
    let mut ids = Vec::new();
    for _ in 0..labs_n {
        let lab = registry.create().unwrap();
        for i in 0..count {
            let key = uuid::Uuid::new_v4().to_string();
            let digest = Some(format!("sha256:{:064x}", i));
            let attempt = lab.outside_arrived((&caller, &key, Spoken::default()), digest).expect("kept");
            lab.outside_ended(attempt, ok());
        }
        lab.persisted().await.unwrap();
        lab.rest_event_window(u64::MAX);
        ids.push(lab.id);
    }
    let in_memory = (live() - before) / labs_n as isize;
    rest_all(&registry, labs_n + 1).await;
    let at_rest = (live() - before) / labs_n as isize;
    let woken = registry.get(&ids[0]).expect("a lab at rest wakes");
    let messages = woken.outside_messages_held();
    println!(
        "labs at rest: {labs_n} labs with {count} settled outside messages each hold {in_memory} live bytes a \
         lab in memory, {at_rest} at rest; one woken holds its {messages} messages again"
    );
    drop((woken, registry));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sweeps until `expected` labs rest (each takes two sweeps, the store's commit between).
async fn rest_all(registry: &Labs, expected: usize) {
    for _ in 0..500 {
        registry.rest_idle(u64::MAX / 2);
        if registry.resting_labs() >= expected {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{} of {expected} labs rested", registry.resting_labs());
}

/// A busy lab's settled messages: `count` delivered, each in one attempt answered 200, as a
/// healthy lab keeps up to `--settled-window` of them (changes taken, as the store's writer
/// takes them).
fn settled_messages(count: usize) {
    use retrylab::domain::{AttemptEnd, LabRecord, Outcome};
    let before = live();
    let mut record = LabRecord::default();
    for (i, message) in record.create_messages(count, 0).into_iter().enumerate() {
        let now_ms = i as u64;
        record.start_attempt(message.id, 1, now_ms, 0).expect("the message is queued");
        let end = AttemptEnd {
            duration_ms: 3,
            status: Some(200),
            outcome: Outcome::Ok,
            replayed: false,
            retry_after_s: None,
            pushback: None,
        };
        record.finish_attempt(message.id, 1, end, None).expect("its attempt runs");
        assert!(record.deliver(message.id));
    }
    drop(record.take_changes());
    let held = live() - before;
    println!(
        "settled messages: {count} delivered, one attempt each, hold {held} live bytes, {} per message",
        held / count.max(1) as isize
    );
}

/// One lab given `count` outside messages, as an outside caller's keys make them: a UUID for a
/// key, its body's digest, and one attempt answered 200, or (every other key) one answered 503
/// with a `Retry-After` and a second answered 200. Counted once the store has committed them and
/// the lab's event window is let go (as an unwatched lab's is after `--idle-event-window-ms`),
/// so what is left is what the lab holds for its messages.
async fn outside_messages(count: usize) {
    use sha2::Digest;
    const WARM_UP: usize = 10;
    let limits = Limits {
        max_outside_keys_per_lab: count.max(1),
        max_outside_keys: count + WARM_UP,
        max_outside_attempts_per_key: 2,
        lab_create_burst: 1_000_000,
        lab_creates_per_hour: 1_000_000,
        ..Limits::default()
    };
    let (registry, dir) = open_registry("outside", limits, Retention::default());
    let caller = CallerName::from_request(Some(b"bench-client"), None, None).unwrap();
    let send = |lab: &retrylab::lab::Lab, i: usize| {
        let key = uuid::Uuid::new_v4().to_string();
        let digest = sha2::Sha256::digest(format!("{{\"order\":{i}}}").as_bytes());
        let digest: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        let digest = Some(format!("sha256:{digest}"));
        let first = lab.outside_arrived((&caller, &key, Spoken::default()), digest.clone());
        let first = first.expect("the lab keeps the key");
        if i % 2 == 1 {
            let failed = Ending::Answered { status: 503, retry_after_s: Some(1), pushback_ms: None };
            lab.outside_ended(first, failed);
            let second = lab.outside_arrived((&caller, &key, Spoken::default()), digest);
            lab.outside_ended(second.expect("a second attempt is kept"), ok());
        } else {
            lab.outside_ended(first, ok());
        }
    };
    // A first lab pays the one-time costs, as above.
    let first = registry.create().unwrap();
    for i in 0..WARM_UP {
        send(&first, i);
    }
    first.persisted().await.unwrap();

    let lab = registry.create().unwrap();
    lab.persisted().await.unwrap();
    lab.rest_event_window(u64::MAX);
    let before = live();
    for i in 0..count {
        send(&lab, i);
        if i % 500 == 499 {
            // The store's writer takes the changes as it would on a server.
            lab.persisted().await.unwrap();
        }
    }
    lab.persisted().await.unwrap();
    let window = lab.event_window_bytes();
    lab.rest_event_window(u64::MAX);
    let held = live() - before;
    println!(
        "outside messages: one lab with {count} (half of them with two attempts) holds {held} live bytes, \
         {} per message (its event window of {window} bytes let go first)",
        held / count.max(1) as isize
    );
    drop((first, lab, registry));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The ledger's share of the same keys: applied for an outside caller, committed and cooled as
/// a lab does (the newest `--hot-keys-per-lab` held whole, the rest as fingerprints). Counted
/// before `outside_messages` makes its labs: what they let go of later would be counted here.
fn ledger_share(count: usize) {
    let (hot_keys, cold_keys) = (Limits::default().hot_keys_per_lab, Limits::default().cold_keys_per_lab);
    let before = live();
    let mut ledger = Ledger::default();
    for i in 0..count {
        let key = IdempotencyKey::parse(&uuid::Uuid::new_v4().to_string()).unwrap();
        let body = serde_json::json!({ "order": i });
        ledger.reserve(&key, BodyDigest::of(&body), true);
        ledger.complete(&key, i as u64, 1_780_000_000_000 + i as u64);
        if i % 500 == 499 {
            drop(ledger.take_unsaved());
            ledger.cool(hot_keys, u64::MAX);
            ledger.give_back_room(hot_keys, cold_keys);
        }
    }
    drop(ledger.take_unsaved());
    ledger.cool(hot_keys, u64::MAX);
    ledger.give_back_room(hot_keys, cold_keys);
    let held = live() - before;
    let HeldKeys { whole, fingerprint, .. } = ledger.held();
    println!(
        "the ledger's share: {count} outside keys hold {held} live bytes, {} per key ({whole} whole, \
         {fingerprint} as fingerprints)",
        held / count.max(1) as isize
    );
}

/// A registry on a store of its own, in a fresh temporary folder (removed by the caller).
fn open_registry(name: &str, limits: Limits, retention: Retention) -> (Labs, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("retrylab-lab-memory-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let settings = StoreSettings {
        max_bytes: 0,
        commit_delay: std::time::Duration::ZERO,
        cache_kib: retrylab::config::DEFAULT_STORE_CACHE_KIB,
    };
    let (store, _) = Store::open(&dir.join("labs.db"), settings).expect("the store opens");
    (Labs::new(limits, retention, store, Vec::new()), dir)
}

fn ok() -> Ending {
    Ending::Answered { status: 200, retry_after_s: None, pushback_ms: None }
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

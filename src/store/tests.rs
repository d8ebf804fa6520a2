//! The store against a real file: group commits, failures, the rows it keeps, migrations.

use std::sync::Mutex;
use std::time::Duration;

use std::sync::Arc;
use std::thread;
use std::time::Instant;

use rusqlite::Connection;

use super::rows::{KEYS_NAMED_PER_BATCH, KEYS_NAMED_PER_COMMIT, Written, load_keys, load_lab, write_batch};
use super::schema::{MIGRATIONS, connect, migrate};
use super::*;
use crate::downstream::{KeyNaming, Ledger, LedgerCounts};

/// The page cache of a connection a test opens itself, in KiB, as the store's own are by default.
const CACHE_KIB: u64 = 256;

/// A lab whose batch breaks a constraint: messages of a lab that does not exist.
#[derive(Default)]
struct Broken {
    handed_out: Mutex<bool>,
    failed: Mutex<Vec<u64>>,
    committed: Mutex<bool>,
}

impl Flush for Broken {
    fn take_batch(&self) -> Option<Batch> {
        let mut handed_out = self.handed_out.lock().unwrap();
        if *handed_out {
            return None;
        }
        *handed_out = true;
        let changes = RecordChanges { messages: vec![(7, "{}".into())], ..Default::default() };
        Some(Batch { lab_id: "no-such-lab".into(), row: None, delete: false, changes, upto: 1 })
    }
    fn committed(&self, _: u64, _: Named) {
        *self.committed.lock().unwrap() = true;
    }
    fn failed(&self, batch: Batch) {
        self.failed.lock().unwrap().extend(batch.changes.messages.iter().map(|(id, _)| *id));
    }
}

/// A lab whose batch is fine: its own row.
struct Good {
    handed_out: Mutex<bool>,
    committed: Mutex<Option<u64>>,
}

impl Flush for Good {
    fn take_batch(&self) -> Option<Batch> {
        let mut handed_out = self.handed_out.lock().unwrap();
        if std::mem::replace(&mut *handed_out, true) {
            return None;
        }
        let row = LabRow {
            id: "good".into(),
            origin_unix_ms: 0,
            active_unix_ms: 0,
            downstream: "{}".into(),
            policy: "{}".into(),
            counts: LedgerCounts::default(),
            next_message_id: 0,
            last_event_id: 5,
            epoch: 0,
            traffic: "null".into(),
            traffic_sent: 0,
            traffic_refused: 0,
            forgotten_delivered: 0,
            keys_named: false,
        };
        Some(Batch {
            lab_id: "good".into(),
            row: Some(row),
            delete: false,
            changes: Default::default(),
            upto: 5,
        })
    }
    fn committed(&self, upto: u64, _: Named) {
        *self.committed.lock().unwrap() = Some(upto);
    }
    fn failed(&self, _: Batch) {
        panic!("the good lab's rows were fine");
    }
}

#[test]
fn one_labs_bad_rows_do_not_fail_the_others() {
    let store = Store::temporary();
    let good = Arc::new(Good { handed_out: Mutex::new(false), committed: Mutex::new(None) });
    let broken = Arc::new(Broken::default());
    // Queued together, so they share one commit.
    store.schedule(broken.clone());
    store.schedule(good.clone());
    // The writer's thread commits with a sync to disk: give a busy machine its time.
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if good.committed.lock().unwrap().is_some() && !broken.failed.lock().unwrap().is_empty() {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(*good.committed.lock().unwrap(), Some(5), "the good lab's commit went through");
    assert_eq!(*broken.failed.lock().unwrap(), [7], "the broken lab took its rows back");
}

/// A lab whose code panics as it hands over its rows.
struct Panicky;

impl Flush for Panicky {
    fn take_batch(&self) -> Option<Batch> {
        panic!("a lab's bug");
    }
    fn committed(&self, _: u64, _: Named) {}
    fn failed(&self, _: Batch) {}
}

#[test]
fn a_lab_that_panics_handing_over_its_rows_loses_no_other_labs_rows() {
    // Held for the delay, so both are in one commit, the good lab's rows taken first.
    let store = store_with_delay(Duration::from_millis(300));
    let lab = good();
    let scheduled = Instant::now();
    store.schedule(lab.clone());
    store.schedule(Arc::new(Panicky));
    committed_within(&lab, scheduled).expect("the good lab's rows were committed");
    assert_eq!(*lab.committed.lock().unwrap(), Some(5));
}

fn good() -> Arc<Good> {
    Arc::new(Good { handed_out: Mutex::new(false), committed: Mutex::new(None) })
}

fn store_with_delay(delay: Duration) -> Store {
    let path = temporary_path();
    Store::open(&path, StoreSettings { commit_delay: delay, ..StoreSettings::default() }).unwrap().0
}

/// Waits up to 5 s for the lab's commit; returns how long after `since` it was seen.
fn committed_within(lab: &Good, since: Instant) -> Option<Duration> {
    while since.elapsed() < Duration::from_secs(5) {
        if lab.committed.lock().unwrap().is_some() {
            return Some(since.elapsed());
        }
        thread::sleep(Duration::from_millis(5));
    }
    None
}

#[test]
fn changes_nobody_waits_for_are_held_for_the_delay_then_committed() {
    let store = store_with_delay(Duration::from_millis(400));
    let lab = good();
    let scheduled = Instant::now();
    store.schedule(lab.clone());
    let took = committed_within(&lab, scheduled).expect("committed after the delay");
    assert!(took >= Duration::from_millis(390), "held for the delay, then committed: {took:?}");
}

#[test]
fn a_commit_someone_waits_for_is_made_at_once() {
    let store = store_with_delay(Duration::from_secs(60));
    let lab = good();
    let scheduled = Instant::now();
    store.schedule(lab.clone());
    store.hurry();
    let took = committed_within(&lab, scheduled).expect("committed long before the 60 s delay");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn a_key_expired_and_applied_again_in_one_commit_stays() {
    let path = temporary_path();
    let mut connection = connect(&path, CACHE_KIB).unwrap();
    migrate(&mut connection).unwrap();
    let good = Good { handed_out: Mutex::new(false), committed: Mutex::new(None) };
    let mut batch = good.take_batch().unwrap();
    let digest = crate::downstream::BodyDigest::of(&serde_json::json!({}));
    let key = KeyRow {
        key: "k".into(),
        digest,
        outside: false,
        status: 200,
        response: "{}".into(),
        applied: 1,
        applied_unix_ms: 9,
    };
    batch.changes.keys = vec![key];
    batch.changes.removed_keys = vec![("k".into(), 9)];
    let mut tx = connection.transaction().unwrap();
    let savepoint = tx.savepoint().unwrap();
    write_batch(&savepoint, &batch, &mut commit_room()).unwrap();
    savepoint.commit().unwrap();
    tx.commit().unwrap();
    let kept: u64 = connection
        .query_row("SELECT COUNT(*) FROM idempotency_keys WHERE key = 'k'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(kept, 1, "the re-applied key is on disk");
}

fn applied_key(key: &str, applied: u32, applied_unix_ms: u64) -> KeyRow {
    let digest = crate::downstream::BodyDigest::of(&serde_json::json!({}));
    KeyRow {
        key: key.into(),
        digest,
        outside: false,
        status: 200,
        response: "{}".into(),
        applied,
        applied_unix_ms,
    }
}

fn write(connection: &mut Connection, changes: RecordChanges) {
    let good = Good { handed_out: Mutex::new(false), committed: Mutex::new(None) };
    let batch = Batch { changes, ..good.take_batch().unwrap() };
    let tx = connection.transaction().unwrap();
    write_batch(&tx, &batch, &mut commit_room()).unwrap();
    tx.commit().unwrap();
}

#[test]
fn key_rows_are_named_only_once_the_lab_lets_keys_go_and_then_found_by_the_index() {
    let path = temporary_path();
    let mut connection = connect(&path, CACHE_KIB).unwrap();
    migrate(&mut connection).unwrap();
    let named = |connection: &Connection, key: &str| -> bool {
        connection.query_row(FIND_KEY, ["good", key], |_| Ok(())).is_ok()
    };
    write(&mut connection, RecordChanges { keys: vec![applied_key("a", 1, 1)], ..Default::default() });
    assert!(!named(&connection, "a"), "a lab that holds its keys writes them unnamed");
    // The batch before the first key goes names every row, and the new one with them.
    let naming = KeyNaming::NameAll;
    write(
        &mut connection,
        RecordChanges { keys: vec![applied_key("b", 1, 2)], naming, ..Default::default() },
    );
    assert!(named(&connection, "a") && named(&connection, "b"));
    let naming = KeyNaming::Named;
    write(
        &mut connection,
        RecordChanges { keys: vec![applied_key("c", 1, 3)], naming, ..Default::default() },
    );
    assert!(named(&connection, "c"));
    // A key taken back is found by when it was applied, named or not.
    write(
        &mut connection,
        RecordChanges { removed_keys: vec![("b".into(), 2)], naming, ..Default::default() },
    );
    assert!(!named(&connection, "b") && named(&connection, "a"));
    let plan: String =
        connection.query_row(&format!("EXPLAIN QUERY PLAN {FIND_KEY}"), ["good", "a"], |r| r.get(3)).unwrap();
    assert!(plan.contains("USING INDEX idempotency_keys_by_name"), "{plan}");
}

/// Writes `changes` with the good lab's row, saying whether its keys are named, in a commit.
fn write_row(connection: &mut Connection, changes: RecordChanges, keys_named: bool) -> Written {
    let good = Good { handed_out: Mutex::new(false), committed: Mutex::new(None) };
    let batch = good.take_batch().unwrap();
    let row = batch.row.map(|row| LabRow { keys_named, ..row });
    let batch = Batch { changes, row, ..batch };
    let tx = connection.transaction().unwrap();
    let written = write_batch(&tx, &batch, &mut commit_room()).unwrap();
    tx.commit().unwrap();
    written
}

#[test]
fn past_the_bound_a_lab_names_its_rows_a_chunk_a_batch_and_the_last_chunk_says_so() {
    let path = temporary_path();
    let mut connection = connect(&path, CACHE_KIB).unwrap();
    migrate(&mut connection).unwrap();
    let unnamed = 2 * KEYS_NAMED_PER_BATCH + 40;
    let keys = (0..unnamed).map(|i| applied_key(&format!("k{i}"), 1, i as u64)).collect();
    write_row(&mut connection, RecordChanges { keys, ..Default::default() }, false);
    let count = |connection: &Connection, named: bool| -> usize {
        connection
            .query_row("SELECT COUNT(*) FROM idempotency_keys WHERE named = ?1", [named], |r| r.get(0))
            .unwrap()
    };
    let row_named = |connection: &Connection| load_lab(connection, "good").unwrap().unwrap().row.keys_named;
    let naming = KeyNaming::NameAll;
    let (mut said, mut naming_from_ms) = (Vec::new(), 0);
    for batch in 0..3 {
        // Each batch also brings a new key, written named; each chunk starts where the one
        // before it ended, as the lab's ledger says (`Ledger::named_through`).
        let keys = vec![applied_key(&format!("new{batch}"), 1, 10_000 + batch)];
        let changes = RecordChanges { keys, naming, naming_from_ms, ..Default::default() };
        let written = write_row(&mut connection, changes, false);
        naming_from_ms = written.named.through_ms.unwrap();
        said.push((written.named, count(&connection, false), row_named(&connection)));
    }
    let left = |chunks: usize| unnamed - chunks * KEYS_NAMED_PER_BATCH;
    // The rows were applied at 0, 1, 2... ms: each chunk names them on in that order.
    let through = |chunks: usize| Some((chunks * KEYS_NAMED_PER_BATCH - 1) as u64);
    assert_eq!(
        said,
        [
            (Named { all: false, through_ms: through(1) }, left(1), false),
            (Named { all: false, through_ms: through(2) }, left(2), false),
            (Named { all: true, through_ms: Some(unnamed as u64 - 1) }, 0, true)
        ]
    );
    assert_eq!(count(&connection, true), unnamed + 3);
    // A lab whose rows are named already names none, and its last chunk is an empty one.
    let written = write_row(&mut connection, RecordChanges { naming, ..Default::default() }, false);
    let all = Named { all: true, through_ms: None };
    assert_eq!(written, Written { rows: 2, named: all }, "the lab's row, then its flag");
}

#[test]
fn a_commit_names_at_most_its_room_whatever_the_labs_in_it() {
    let path = temporary_path();
    let mut connection = connect(&path, CACHE_KIB).unwrap();
    migrate(&mut connection).unwrap();
    let keys = (0..KEYS_NAMED_PER_BATCH + 100).map(|i| applied_key(&format!("k{i}"), 1, i as u64)).collect();
    write_row(&mut connection, RecordChanges { keys, ..Default::default() }, false);
    let good = Good { handed_out: Mutex::new(false), committed: Mutex::new(None) };
    let changes = || RecordChanges { naming: KeyNaming::NameAll, ..Default::default() };
    let batch = || Batch { changes: changes(), ..good_batch(&good) };
    // Three batches share a commit with room for a chunk and 60 rows more: the first names a
    // whole chunk, the second 60 (fewer than it was let name, so not the last of them), the
    // third none.
    let mut room = KEYS_NAMED_PER_BATCH + 60;
    let tx = connection.transaction().unwrap();
    let named: Vec<(u64, bool)> = (0..3)
        .map(|_| write_batch(&tx, &batch(), &mut room).unwrap())
        .map(|written| (written.rows - 1, written.named.all))
        .collect();
    tx.commit().unwrap();
    assert_eq!(named, [(KEYS_NAMED_PER_BATCH as u64, false), (60, false), (0, false)]);
    assert_eq!(room, 0);
    // The next commit names the last 40, and says so.
    let tx = connection.transaction().unwrap();
    let written = write_batch(&tx, &batch(), &mut commit_room()).unwrap();
    tx.commit().unwrap();
    assert_eq!((written.rows, written.named.all), (1 + 40 + 1, true));
}

/// The rows a commit may name, as the writer gives each commit.
fn commit_room() -> usize {
    KEYS_NAMED_PER_COMMIT
}

/// The good lab's batch, made afresh.
fn good_batch(good: &Good) -> Batch {
    *good.handed_out.lock().unwrap() = false;
    good.take_batch().unwrap()
}

#[test]
fn a_lab_whose_rows_are_named_reads_back_named_and_a_reset_unnames_it() {
    let path = temporary_path();
    let mut connection = connect(&path, CACHE_KIB).unwrap();
    migrate(&mut connection).unwrap();
    let naming_read_back = |connection: &Connection| {
        let loaded = load_lab(connection, "good").unwrap().expect("the lab");
        (loaded.row.keys_named, loaded.parts.ledger.naming())
    };
    let keys = vec![applied_key("a", 1, 1)];
    write_row(&mut connection, RecordChanges { keys, ..Default::default() }, false);
    // The lab writes its row unnamed while it names; the store sets it with the last row.
    let (keys, naming) = (vec![applied_key("b", 1, 2)], KeyNaming::NameAll);
    let written = write_row(&mut connection, RecordChanges { keys, naming, ..Default::default() }, false);
    assert!(written.named.all);
    assert_eq!(naming_read_back(&connection), (true, KeyNaming::Named));
    // A reset deletes every key row; the lab holds its keys again, and writes them unnamed.
    write_row(&mut connection, RecordChanges { cleared: true, ..Default::default() }, false);
    assert_eq!(naming_read_back(&connection), (false, KeyNaming::Unnamed));
}

#[test]
fn keys_are_kept_in_the_order_applied_and_expire_by_time() {
    let path = temporary_path();
    let mut connection = connect(&path, CACHE_KIB).unwrap();
    migrate(&mut connection).unwrap();
    let keys = vec![applied_key("a", 1, 1), applied_key("b", 1, 5), applied_key("c", 1, 9)];
    write(&mut connection, RecordChanges { keys, ..Default::default() });
    // The window moves past 6: a and b go; a is applied again in the same commit and stays.
    let again = vec![applied_key("a", 1, 10)];
    write(&mut connection, RecordChanges { keys: again, keys_expired_before: Some(6), ..Default::default() });
    write(&mut connection, RecordChanges { keys: vec![applied_key("a", 2, 10)], ..Default::default() });
    let written: Vec<(String, u32, u64)> = connection
        .prepare(
            "SELECT key, applied, applied_unix_ms FROM idempotency_keys WHERE expired = 0 ORDER BY rowid",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        written,
        [("c".into(), 1, 9), ("a".into(), 1, 10), ("a".into(), 2, 10)],
        "in the order written"
    );
    let mut ledger = Ledger::default();
    load_keys(&connection, "good", &mut ledger).unwrap();
    assert_eq!(ledger.held(), (0, 2), "a and c, held cold");
}

#[test]
fn a_cold_key_is_read_back_by_its_name_and_time() {
    let path = temporary_path();
    let (_store, _) = Store::open(&path, StoreSettings::default()).unwrap();
    let mut connection = connect(&path, CACHE_KIB).unwrap();
    let keys = vec![applied_key("a", 1, 5), applied_key("b", 1, 5), applied_key("a", 2, 5)];
    write(&mut connection, RecordChanges { keys, ..Default::default() });
    let recalled = recall_key(&connection, "good", "a", 5).unwrap().expect("a row");
    assert_eq!(recalled.applied, 2, "the last row of a key counts");
    assert_eq!(recall_key(&connection, "good", "b", 5).unwrap(), Some(applied_key("b", 1, 5)));
    assert_eq!(recall_key(&connection, "good", "a", 6).unwrap(), None, "applied at another time");
    assert_eq!(recall_key(&connection, "elsewhere", "a", 5).unwrap(), None, "another lab's");
}

#[test]
fn each_connection_keeps_as_many_pages_as_the_setting_says() {
    let cache = |store: &Store| -> i64 {
        assert!(store.load_lab("none").unwrap().is_none());
        let reader = store.reader.lock().unwrap();
        reader
            .as_ref()
            .expect("opened by the read")
            .pragma_query_value(None, "cache_size", |r| r.get(0))
            .unwrap()
    };
    let (store, _) = Store::open(&temporary_path(), StoreSettings::default()).unwrap();
    assert_eq!(cache(&store), -256, "the default, in KiB (SQLite's own is -2000)");
    let settings = StoreSettings { cache_kib: 96, ..StoreSettings::default() };
    let (store, _) = Store::open(&temporary_path(), settings).unwrap();
    assert_eq!(cache(&store), -96);
    let kept: i64 =
        connect(&temporary_path(), 40).unwrap().pragma_query_value(None, "cache_size", |r| r.get(0)).unwrap();
    assert_eq!(kept, -40, "the writer's connection is opened the same way");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_read_back_on_the_key_readers_thread_each_its_own_row() {
    let path = temporary_path();
    let (store, _) = Store::open(&path, StoreSettings::default()).unwrap();
    let mut connection = connect(&path, CACHE_KIB).unwrap();
    let keys: Vec<KeyRow> = (0..40).map(|i| applied_key(&format!("k{i}"), 1, 5 + i)).collect();
    // Named, as a lab's rows are once it lets keys go: only then are they looked up by name.
    write(&mut connection, RecordChanges { keys, naming: KeyNaming::Named, ..Default::default() });

    // Forty at once, by name and by time, half of the others given up as they wait: each
    // read that is still wanted finds its own row.
    let read = |i: u64| {
        let store = store.clone();
        let at = i.is_multiple_of(2).then_some(5 + i);
        tokio::spawn(async move { store.read_key("good".into(), format!("k{i}"), at).await })
    };
    let given_up: Vec<_> = (0..40u64).map(read).collect();
    let reads: Vec<_> = (0..40u64).map(read).collect();
    for (i, abandoned) in given_up.into_iter().enumerate() {
        if i % 2 == 0 {
            abandoned.abort();
        }
    }
    for (i, read) in reads.into_iter().enumerate() {
        let (row, expired) = read.await.unwrap().unwrap().expect("every key was applied");
        assert_eq!((row.key, row.applied_unix_ms, expired), (format!("k{i}"), 5 + i as u64, false));
    }
    assert_eq!(store.read_key("good".into(), "never".into(), None).await.unwrap(), None);
    assert_eq!(store.read_key("good".into(), "k3".into(), Some(9)).await.unwrap(), None, "applied at 8");
}

/// A fresh store file as a build of schema version `version` left it.
fn at_version(version: usize) -> Connection {
    let connection = connect(&temporary_path(), CACHE_KIB).unwrap();
    for sql in &MIGRATIONS[..version] {
        connection.execute_batch(sql).unwrap();
    }
    connection.pragma_update(None, "user_version", version).unwrap();
    connection
}

#[test]
fn keys_stored_before_version_4_are_moved_in_the_order_applied() {
    let mut connection = at_version(3);
    connection
        .execute_batch(
            "INSERT INTO labs VALUES ('good', 0, 0, '{}', '{}', 0, 0, 0, 0, 0, 0); \
             INSERT INTO idempotency_keys VALUES ('good', 'zz', '{}', 200, X'7B7D', 1, 1, 1); \
             INSERT INTO idempotency_keys VALUES ('good', 'aa', '{}', 200, X'7B7D', 1, 2, 0);",
        )
        .unwrap();
    migrate(&mut connection).unwrap();
    let moved: Vec<(String, bool)> = connection
        .prepare("SELECT key, outside FROM idempotency_keys ORDER BY rowid")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(moved, [("zz".into(), true), ("aa".into(), false)], "by time applied, not by name");
}

#[test]
fn a_failed_commit_hands_its_rows_back() {
    let store = Store::temporary();
    let lab = Arc::new(Broken::default());
    store.schedule(lab.clone());
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if !lab.failed.lock().unwrap().is_empty() {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(*lab.failed.lock().unwrap(), [7], "the rows came back to be written again");
    assert!(!*lab.committed.lock().unwrap(), "and nobody was told they were durable");
}

#[test]
fn fine_load_rows_summed_into_coarse_ones_leave_the_store() {
    use crate::domain::{Answer, Load};
    let path = temporary_path();
    let mut connection = connect(&path, CACHE_KIB).unwrap();
    migrate(&mut connection).unwrap();
    let mut load = Load::default();
    // Requests every 50 ms for a minute: 600 fine rows.
    for at in (0..60_000).step_by(50) {
        let bin = load.arrive(at);
        load.answer(bin, Answer::Status(200));
    }
    write(&mut connection, RecordChanges { load: load.take_unsaved(), ..Default::default() });
    // Five minutes on, the first 60 s are summed: six coarse rows replace 600 fine ones.
    load.arrive(60_000 + crate::domain::FINE_FOR_MS);
    write(&mut connection, RecordChanges { load: load.take_unsaved(), ..Default::default() });
    let rows: Vec<(u64, String)> = connection
        .prepare("SELECT t_ms, body FROM load_bins WHERE lab_id = 'good' ORDER BY t_ms")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let starts: Vec<u64> = rows.iter().map(|(t, _)| *t).collect();
    assert_eq!(starts, [0, 10_000, 20_000, 30_000, 40_000, 50_000, 360_000]);
    let bins: Vec<crate::domain::LoadBin> =
        rows.iter().map(|(_, body)| serde_json::from_str(body).unwrap()).collect();
    assert!(bins[..6].iter().all(|b| b.width_ms == 10_000 && b.requests == 200 && b.ok == 200), "{bins:?}");
    assert_eq!((bins[6].width_ms, bins[6].requests), (100, 1));
}

#[test]
fn the_first_clients_breaker_history_moves_to_its_own_row_at_version_10() {
    let mut connection = at_version(9);
    let opened = r#"[{"at_ms":5,"state":"open"}]"#;
    connection
        .execute(
            "INSERT INTO labs (id, origin_unix_ms, active_unix_ms, downstream, policy, requests, applied, \
             applied_twice, next_message_id, last_event_id, epoch, breaker_changes) \
             VALUES ('old', 0, 0, '{}', '{}', 0, 0, 0, 0, 0, 0, ?1), ('quiet', 0, 0, '{}', '{}', 0, 0, 0, 0, 0, 0, '[]')",
            [opened],
        )
        .unwrap();
    migrate(&mut connection).unwrap();
    let rows: Vec<(String, u32, String)> = connection
        .prepare("SELECT lab_id, client, changes FROM client_breakers ORDER BY lab_id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows, [("old".into(), 0, opened.into())], "a row for the history there was, none for '[]'");
    let shares: String =
        connection.query_row("SELECT breaker_shares FROM labs WHERE id = 'old'", [], |r| r.get(0)).unwrap();
    assert_eq!(shares, "[]");
}

#[test]
fn each_clients_breaker_history_is_written_whole_and_goes_with_its_client() {
    use crate::client::BreakerRows;
    let path = temporary_path();
    let mut connection = connect(&path, CACHE_KIB).unwrap();
    migrate(&mut connection).unwrap();
    let history = |state: &str| format!(r#"[{{"at_ms":1,"state":"{state}"}}]"#);
    let clients = vec![(0, history("open")), (2, history("open")), (5, history("half_open"))];
    let breakers = BreakerRows { clients, gone_from: None, shares: Some("[1]".into()) };
    write(&mut connection, RecordChanges { breakers, ..Default::default() });
    // Client 0's history emptied (a reset writes '[]'), the policy runs three clients now.
    let breakers = BreakerRows { clients: vec![(0, "[]".into())], gone_from: Some(3), shares: None };
    write(&mut connection, RecordChanges { breakers, ..Default::default() });
    let rows: Vec<(u32, String)> = connection
        .prepare("SELECT client, changes FROM client_breakers WHERE lab_id = 'good' ORDER BY client")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows, [(2, history("open"))], "client 2's alone");
    let shares: String =
        connection.query_row("SELECT breaker_shares FROM labs WHERE id = 'good'", [], |r| r.get(0)).unwrap();
    assert_eq!(shares, "[1]", "the shares as last written");
}

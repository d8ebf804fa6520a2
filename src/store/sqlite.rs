//! The durable store: one SQLite file in WAL mode. A single writer thread owns the write
//! connection and commits in groups: it takes every lab that changed since its last commit,
//! asks each for the rows that changed, writes them all in one transaction, then tells each
//! lab which event id is now durable. Callers that promise durability ("accepted", "applied")
//! wait for that id before answering, and share the commit with everyone else waiting.
//! When nobody waits (a delivery's attempts, a repeat's event), the writer holds the changes
//! for up to `--commit-delay-ms` first, so one commit (one fsync) carries many more of them; a
//! caller that waits says so (`Store::hurry`) and gets its commit at once.
//!
//! Reads after start-up go through connections of their own; in WAL mode they never wait for the
//! writer. The one on the request path reads back an idempotency key the ledger holds cold
//! (`Store::recall_key`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};

use super::{RecordChanges, RecordParts};
use crate::dlq::DeadLetter;
use crate::domain::Message;
use crate::downstream::{BodyDigest, DownstreamView, KeyRow, Ledger, LedgerCounts};

/// How long the writer pauses after a failed commit before trying again.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// Versioned schema changes, applied in order; `PRAGMA user_version` remembers the last.
const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/0001_init.sql"),
    include_str!("../../migrations/0002_comparisons.sql"),
    include_str!("../../migrations/0003_outside_keys.sql"),
    include_str!("../../migrations/0004_keys_in_order.sql"),
    include_str!("../../migrations/0005_lab_history.sql"),
    include_str!("../../migrations/0006_outside_messages.sql"),
];

#[derive(Debug)]
pub struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError(format!("store: {e}"))
    }
}

impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> Self {
        StoreError(format!("store: unreadable row: {e}"))
    }
}

/// A lab's own row.
#[derive(Debug, Clone)]
pub struct LabRow {
    pub id: String,
    pub origin_unix_ms: u64,
    pub active_unix_ms: u64,
    pub downstream: String,
    pub policy: String,
    pub counts: LedgerCounts,
    pub next_message_id: u64,
    pub last_event_id: u64,
    pub epoch: u64,
}

/// Everything one lab changed since its last commit.
pub struct Batch {
    pub lab_id: String,
    /// Upserted when present.
    pub row: Option<LabRow>,
    /// The lab is gone: delete it and everything of it.
    pub delete: bool,
    pub changes: RecordChanges,
    /// The lab's last event id covered by this batch.
    pub upto: u64,
}

/// Something with rows to commit: a lab.
pub trait Flush: Send + Sync {
    /// The changes since the last call, or `None` if there are none.
    fn take_batch(&self) -> Option<Batch>;
    /// Everything up to event `upto` is committed.
    fn committed(&self, upto: u64);
    /// The batch could not be committed: take its rows back, to be written with the next commit.
    fn failed(&self, batch: Batch);
}

/// A lab as the store holds it.
pub struct LoadedLab {
    pub row: LabRow,
    pub parts: RecordParts,
    pub dead_letters: Vec<DeadLetter>,
}

/// Counts for the benchmark: transactions committed and rows written.
#[derive(Debug, Default)]
pub struct StoreStats {
    pub commits: AtomicU64,
    pub rows: AtomicU64,
}

/// How the store writes.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreSettings {
    /// The most the file may grow to, in bytes (0: no limit of ours), as a full disk would.
    pub max_bytes: u64,
    /// How long changes nobody waits for may be held to fold more into one commit.
    pub commit_delay: Duration,
}

enum Job {
    Flush(Arc<dyn Flush>),
    /// Someone waits for a commit: make it now, without the delay.
    Hurry,
    /// Commit what is pending, then stop and answer.
    Stop(mpsc::Sender<()>),
}

#[derive(Clone)]
pub struct Store {
    jobs: mpsc::Sender<Job>,
    path: PathBuf,
    /// A connection of its own for reading keys back, opened on first use; in WAL mode it reads
    /// beside the writer without waiting for it.
    reader: Arc<Mutex<Option<Connection>>>,
    pub stats: Arc<StoreStats>,
    health: tokio::sync::watch::Receiver<Health>,
}

/// Whether the writer can write, as its last commit found out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    /// Why the last commit failed; `None` while commits succeed.
    pub failing: Option<String>,
    /// The store is out of room: the disk, or `--max-db-bytes`.
    pub full: bool,
}

impl Store {
    /// Opens (creating if needed) the database, brings its schema up to date, loads every lab,
    /// and starts the writer. Blocking: call it off the async workers.
    /// `settings.max_bytes` (0 for no limit) caps the database file, as a full disk would.
    pub fn open(path: &Path, settings: StoreSettings) -> Result<(Store, Vec<LoadedLab>), StoreError> {
        let max_bytes = settings.max_bytes;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError(format!("cannot create {}: {e}", dir.display())))?;
        }
        let mut connection = connect(path)?;
        migrate(&mut connection)?;
        if max_bytes > 0 {
            let page_size: u64 = connection.pragma_query_value(None, "page_size", |r| r.get(0))?;
            connection.pragma_update(None, "max_page_count", (max_bytes / page_size).max(1))?;
        }
        let labs = load_labs(&connection)?;
        let (jobs, receiver) = mpsc::channel();
        let stats = Arc::new(StoreStats::default());
        let writer_stats = stats.clone();
        let (health, watching) = tokio::sync::watch::channel(Health::default());
        thread::Builder::new()
            .name("retrylab-store".into())
            .spawn(move || {
                let writer = Writer { jobs: receiver, stats: &writer_stats, delay: settings.commit_delay };
                supervise_writer(connection, &writer, health)
            })
            .map_err(|e| StoreError(format!("cannot start the store's writer: {e}")))?;
        let reader = Arc::new(Mutex::new(None));
        Ok((Store { jobs, path: path.to_owned(), reader, stats, health: watching }, labs))
    }

    /// A store in a fresh file under the system's temporary folder, for unit tests.
    #[cfg(test)]
    pub fn temporary() -> Store {
        Store::open(&temporary_path(), StoreSettings::default()).expect("a temporary store opens").0
    }

    /// Whether the writer can write; changes as commits fail and succeed.
    pub fn health(&self) -> tokio::sync::watch::Receiver<Health> {
        self.health.clone()
    }

    /// Asks the writer to commit `lab`'s changes soon.
    pub fn schedule(&self, lab: Arc<dyn Flush>) {
        // The writer only stops at shutdown; changes after that are lost with the process anyway.
        let _ = self.jobs.send(Job::Flush(lab));
    }

    /// Someone waits for the changes scheduled so far: the writer commits them without delay.
    pub fn hurry(&self) {
        let _ = self.jobs.send(Job::Hurry);
    }

    /// Reads back the row of `key`, applied at `applied_unix_ms` in `lab_id` (blocking): the
    /// ledger holds such a key by fingerprint only. The index on (lab, time) finds it among
    /// the few keys applied in that millisecond; `None` if the store has no such row.
    pub fn recall_key(
        &self,
        lab_id: &str,
        key: &str,
        applied_unix_ms: u64,
    ) -> Result<Option<KeyRow>, StoreError> {
        let mut reader = self.reader.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if reader.is_none() {
            *reader = Some(connect(&self.path)?);
        }
        let connection = reader.as_ref().expect("opened above");
        let mut statement = connection.prepare_cached(
            "SELECT key, request_body, status, response, applied, applied_unix_ms, outside \
             FROM idempotency_keys WHERE lab_id = ?1 AND applied_unix_ms = ?2 AND key = ?3 \
             ORDER BY rowid DESC LIMIT 1",
        )?;
        let row = statement.query_row(params![lab_id, applied_unix_ms, key], key_row);
        match row {
            Ok(row) => Ok(Some(row.map_err(StoreError)?)),
            Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Reads one lab's messages and dead letters back (blocking).
    pub fn load_messages(&self, lab_id: &str) -> Result<(Vec<Message>, Vec<DeadLetter>), StoreError> {
        let connection = connect(&self.path)?;
        Ok((load_messages(&connection, lab_id)?, load_dead_letters(&connection, lab_id)?))
    }

    /// Saves a comparison (blocking). A comparison is written once, when it starts: what it
    /// measures lives in its labs.
    pub fn save_comparison(&self, id: &str, created_unix_ms: u64, body: &str) -> Result<(), StoreError> {
        let connection = connect(&self.path)?;
        connection.execute(
            "INSERT OR REPLACE INTO comparisons (id, created_unix_ms, body) VALUES (?1, ?2, ?3)",
            params![id, created_unix_ms, body],
        )?;
        Ok(())
    }

    /// Every comparison, oldest first, as `(id, body)` (blocking).
    pub fn load_comparisons(&self) -> Result<Vec<(String, String)>, StoreError> {
        let connection = connect(&self.path)?;
        let mut statement =
            connection.prepare("SELECT id, body FROM comparisons ORDER BY created_unix_ms")?;
        let rows = statement.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Commits everything scheduled so far and stops the writer (blocking).
    pub fn close(&self) {
        let (done, wait) = mpsc::channel();
        if self.jobs.send(Job::Stop(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}

/// A fresh file name under the system's temporary folder, for unit tests.
#[cfg(test)]
fn temporary_path() -> PathBuf {
    std::env::temp_dir().join(format!("retrylab-unit-{}.db", uuid::Uuid::new_v4()))
}

fn connect(path: &Path) -> Result<Connection, StoreError> {
    let connection = Connection::open(path)
        .map_err(|e| StoreError(format!("cannot open the store at {}: {e}", path.display())))?;
    // WAL lets the page read while the writer commits; FULL syncs each commit, which group
    // commit keeps affordable; foreign keys make deleting a lab delete what it held. The
    // savepoint around each lab's batch keeps its undo pages in memory, not in a temporary file;
    // a checkpoint every 10,000 pages (not 1,000) copies a page rewritten many times back once.
    connection.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; \
         PRAGMA busy_timeout = 5000; PRAGMA temp_store = MEMORY; PRAGMA wal_autocheckpoint = 10000;",
    )?;
    Ok(connection)
}

fn migrate(connection: &mut Connection) -> Result<(), StoreError> {
    let version: usize = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if version > MIGRATIONS.len() {
        return Err(StoreError(format!(
            "the store is at schema version {version}, newer than this build knows ({}); use a newer retrylab",
            MIGRATIONS.len()
        )));
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(version) {
        let tx = connection.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", index + 1)?;
        tx.commit()?;
    }
    Ok(())
}

/// Runs the writer, restarting it if it panics outside a commit (in a lab's code, say): the
/// labs it was writing for hand their rows back with their next change.
fn supervise_writer(mut connection: Connection, writer: &Writer, health: tokio::sync::watch::Sender<Health>) {
    let mut outage = Outage { health: Some(health), ..Default::default() };
    loop {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            write_loop(&mut connection, writer, &mut outage)
        }));
        match run {
            Ok(()) => return,
            Err(_) => tracing::error!("the store's writer panicked; it starts again"),
        }
    }
}

/// What the writer thread works from.
struct Writer<'a> {
    jobs: mpsc::Receiver<Job>,
    stats: &'a StoreStats,
    delay: Duration,
}

impl Writer<'_> {
    /// The labs to commit next, and whoever asked the writer to stop. Group commit: everything
    /// that arrived while the last transaction ran goes in this one, and while nobody waits
    /// for a commit, whatever arrives within the delay goes in too.
    fn next_group(&self) -> Option<Group> {
        let mut group = Group::default();
        group.take(self.jobs.recv().ok()?);
        self.jobs.try_iter().for_each(|job| group.take(job));
        let until = Instant::now() + self.delay;
        while !group.urgent {
            let Some(left) = until.checked_duration_since(Instant::now()) else { break };
            match self.jobs.recv_timeout(left) {
                Ok(job) => group.take(job),
                Err(_) => break, // the delay is over (or every sender is gone)
            }
        }
        Some(group)
    }
}

/// The labs one commit is for.
#[derive(Default)]
struct Group {
    labs: Vec<Arc<dyn Flush>>,
    /// Whoever asked the writer to stop once this commit is made.
    stops: Vec<mpsc::Sender<()>>,
    /// Someone waits for it.
    urgent: bool,
}

impl Group {
    fn take(&mut self, job: Job) {
        match job {
            Job::Flush(lab) => self.labs.push(lab),
            Job::Hurry => self.urgent = true,
            Job::Stop(done) => {
                self.stops.push(done);
                self.urgent = true;
            }
        }
    }
}

fn write_loop(connection: &mut Connection, writer: &Writer, outage: &mut Outage) {
    let stats = writer.stats;
    while let Some(Group { mut labs, stops, .. }) = writer.next_group() {
        let mut seen = HashSet::new();
        labs.retain(|lab| seen.insert(Arc::as_ptr(lab) as *const () as usize));
        // A lab whose code panics while handing over its rows loses its own batch, not the
        // batches already taken from the others (their keys would be held cold with no row).
        let batches: Vec<(Arc<dyn Flush>, Batch)> = labs
            .into_iter()
            .filter_map(|lab| {
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| lab.take_batch())) {
                    Ok(batch) => batch.map(|batch| (lab, batch)),
                    Err(_) => {
                        tracing::error!(
                            "a lab panicked handing its rows to the store; the others' are written"
                        );
                        None
                    }
                }
            })
            .collect();
        if !batches.is_empty() {
            // A panic mid-commit must not end durability for every lab: it counts as a failed
            // commit (the transaction rolled back as it unwound) and the writer carries on.
            let attempt =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| commit(connection, &batches)));
            let result =
                attempt.unwrap_or_else(|_| Err(StoreError("the store's writer panicked mid-commit".into())));
            match result {
                Ok((rows, failed)) => {
                    stats.commits.fetch_add(1, Ordering::Relaxed);
                    stats.rows.fetch_add(rows, Ordering::Relaxed);
                    match failed.first() {
                        None => outage.recovered(),
                        Some((_, e)) => outage.failed(e),
                    }
                    let failed: HashSet<usize> = failed.into_iter().map(|(index, _)| index).collect();
                    for (index, (lab, batch)) in batches.into_iter().enumerate() {
                        if failed.contains(&index) {
                            lab.failed(batch); // only its own rows come back
                        } else {
                            lab.committed(batch.upto);
                        }
                    }
                }
                Err(e) => {
                    // Nothing of the transaction stuck: every lab takes its rows back and they go
                    // with its next commit. Waiters meanwhile time out and answer 503.
                    outage.failed(&e);
                    for (lab, batch) in batches {
                        lab.failed(batch);
                    }
                    thread::sleep(RETRY_PAUSE);
                }
            }
        }
        if !stops.is_empty() {
            for done in stops {
                let _ = done.send(());
            }
            return;
        }
    }
}

/// How often a store that keeps failing says so again.
const OUTAGE_SUMMARY_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// A run of failed commits, logged as an operator wants to read it: the first failure, a
/// summary now and then while it lasts, and the recovery, instead of a line per retry.
#[derive(Default)]
struct Outage {
    since: Option<std::time::Instant>,
    failures: u64,
    last_said: Option<std::time::Instant>,
    /// Tells the health check and the waiting callers.
    health: Option<tokio::sync::watch::Sender<Health>>,
}

impl Outage {
    fn failed(&mut self, error: &StoreError) {
        if let Some(health) = &self.health {
            // SQLITE_FULL says "database or disk is full".
            let full = error.0.contains("full");
            health.send_replace(Health { failing: Some(error.0.clone()), full });
        }
        let now = std::time::Instant::now();
        self.failures += 1;
        match self.since {
            None => {
                self.since = Some(now);
                self.last_said = Some(now);
                tracing::error!(%error, "store commits are failing; the rows are kept and written again");
            }
            Some(since) if self.last_said.is_none_or(|said| now - said >= OUTAGE_SUMMARY_EVERY) => {
                self.last_said = Some(now);
                let for_s = (now - since).as_secs();
                tracing::error!(%error, failures = self.failures, for_s, "store commits are still failing");
            }
            Some(_) => {}
        }
    }

    fn recovered(&mut self) {
        if let Some(since) = self.since.take() {
            let for_ms = since.elapsed().as_millis() as u64;
            tracing::info!(failures = self.failures, for_ms, "store commits succeed again");
            *self = Outage { health: self.health.take(), ..Default::default() };
            if let Some(health) = &self.health {
                health.send_replace(Health::default());
            }
        }
    }
}

/// Writes every batch in one transaction, each inside a savepoint of its own when there are
/// several: a batch that fails is rolled back alone and returned, so one lab's bad rows cannot
/// fail every lab's.
/// `Err` only when the transaction itself could not be committed.
fn commit(
    connection: &mut Connection,
    batches: &[(Arc<dyn Flush>, Batch)],
) -> Result<(u64, Vec<(usize, StoreError)>), StoreError> {
    let mut tx = connection.transaction()?;
    if let [(_, batch)] = batches {
        // One batch alone needs no savepoint of its own: if it fails, so does the transaction.
        return match write_batch(&tx, batch) {
            Ok(rows) => tx.commit().map(|()| (rows, Vec::new())).map_err(StoreError::from),
            Err(e) => Ok((0, vec![(0, e)])), // dropping the transaction rolls it back
        };
    }
    let mut rows = 0;
    let mut failed = Vec::new();
    for (index, (_, batch)) in batches.iter().enumerate() {
        let savepoint = tx.savepoint()?;
        match write_batch(&savepoint, batch) {
            Ok(written) => {
                savepoint.commit()?;
                rows += written;
            }
            // Dropping the savepoint rolls its writes back.
            Err(e) => failed.push((index, e)),
        }
    }
    tx.commit()?;
    Ok((rows, failed))
}

fn write_batch(tx: &Connection, batch: &Batch) -> Result<u64, StoreError> {
    let lab = batch.lab_id.as_str();
    if batch.delete {
        tx.execute("DELETE FROM labs WHERE id = ?1", [lab])?;
        return Ok(1);
    }
    let mut rows = 0;
    if let Some(row) = &batch.row {
        tx.prepare_cached(
            "INSERT INTO labs (id, origin_unix_ms, active_unix_ms, downstream, policy, requests, applied, \
             applied_twice, next_message_id, last_event_id, epoch) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
             ON CONFLICT (id) DO UPDATE SET active_unix_ms = ?3, downstream = ?4, policy = ?5, requests = ?6, \
             applied = ?7, applied_twice = ?8, next_message_id = ?9, last_event_id = ?10, epoch = ?11",
        )?
        .execute(params![
            row.id,
            row.origin_unix_ms,
            row.active_unix_ms,
            row.downstream,
            row.policy,
            row.counts.requests,
            row.counts.applied,
            row.counts.applied_twice,
            row.next_message_id,
            row.last_event_id,
            row.epoch
        ])?;
        rows += 1;
    }
    let changes = &batch.changes;
    if changes.cleared {
        for table in ["messages", "dead_letters", "idempotency_keys", "load_bins"] {
            tx.execute(&format!("DELETE FROM {table} WHERE lab_id = ?1"), [lab])?;
        }
    }
    if changes.outside.cleared {
        tx.execute("DELETE FROM outside_messages WHERE lab_id = ?1", [lab])?;
    }
    let mut upsert_outside =
        tx.prepare_cached("INSERT OR REPLACE INTO outside_messages (lab_id, id, body) VALUES (?1, ?2, ?3)")?;
    for (id, body) in &changes.outside.messages {
        rows += upsert_outside.execute(params![lab, id, body])? as u64;
    }
    if let Some(markers) = &changes.markers {
        rows += tx
            .prepare_cached("UPDATE labs SET markers = ?2 WHERE id = ?1")?
            .execute(params![lab, markers])? as u64;
    }
    if let Some(breaker) = &changes.breaker_changes {
        rows += tx
            .prepare_cached("UPDATE labs SET breaker_changes = ?2 WHERE id = ?1")?
            .execute(params![lab, breaker])? as u64;
    }
    if let Some(before) = changes.load.dropped_before {
        rows += tx
            .prepare_cached("DELETE FROM load_bins WHERE lab_id = ?1 AND t_ms < ?2")?
            .execute(params![lab, before])? as u64;
    }
    let mut upsert_bin =
        tx.prepare_cached("INSERT OR REPLACE INTO load_bins (lab_id, t_ms, body) VALUES (?1, ?2, ?3)")?;
    for bin in &changes.load.bins {
        let body = serde_json::to_string(bin).expect("a load bin serializes");
        rows += upsert_bin.execute(params![lab, bin.t_ms, body])? as u64;
    }
    let mut delete_message = tx.prepare_cached("DELETE FROM messages WHERE lab_id = ?1 AND id = ?2")?;
    for id in &changes.deleted_messages {
        rows += delete_message.execute(params![lab, id])? as u64;
    }
    let mut upsert_message =
        tx.prepare_cached("INSERT OR REPLACE INTO messages (lab_id, id, body) VALUES (?1, ?2, ?3)")?;
    for (id, body) in &changes.messages {
        rows += upsert_message.execute(params![lab, id, body])? as u64;
    }
    let mut delete_letter =
        tx.prepare_cached("DELETE FROM dead_letters WHERE lab_id = ?1 AND message_id = ?2")?;
    for id in &changes.deleted_dead_letters {
        rows += delete_letter.execute(params![lab, id])? as u64;
    }
    let mut upsert_letter = tx.prepare_cached(
        "INSERT OR REPLACE INTO dead_letters (lab_id, message_id, dead_lettered_unix_ms, body) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for (id, unix_ms, body) in &changes.dead_letters {
        rows += upsert_letter.execute(params![lab, id, unix_ms, body])? as u64;
    }
    // Expired and taken-back keys go first: a key applied again in the same commit must stay.
    if let Some(before) = changes.keys_expired_before {
        rows += tx
            .prepare_cached("DELETE FROM idempotency_keys WHERE lab_id = ?1 AND applied_unix_ms < ?2")?
            .execute(params![lab, before])? as u64;
    }
    let mut delete_key = tx.prepare_cached("DELETE FROM idempotency_keys WHERE lab_id = ?1 AND key = ?2")?;
    for key in &changes.removed_keys {
        rows += delete_key.execute(params![lab, key])? as u64;
    }
    // Appended: the table is in the order keys were applied (see migration 4). The column
    // `request_body` holds the body's digest (`BodyDigest`), not the body: its name is older.
    let mut insert_key = tx.prepare_cached(
        "INSERT INTO idempotency_keys (lab_id, key, request_body, status, response, applied, \
         applied_unix_ms, outside) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    for key in &changes.keys {
        rows += insert_key.execute(params![
            lab,
            key.key,
            key.digest.to_string(),
            key.status,
            key.response.as_ref(),
            key.applied,
            key.applied_unix_ms,
            key.outside
        ])? as u64;
    }
    Ok(rows)
}

fn load_labs(connection: &Connection) -> Result<Vec<LoadedLab>, StoreError> {
    let mut statement = connection.prepare(
        "SELECT id, origin_unix_ms, active_unix_ms, downstream, policy, requests, applied, applied_twice, \
         next_message_id, last_event_id, epoch, markers, breaker_changes FROM labs",
    )?;
    let rows = statement
        .query_map([], |r| {
            let row = LabRow {
                id: r.get(0)?,
                origin_unix_ms: r.get(1)?,
                active_unix_ms: r.get(2)?,
                downstream: r.get(3)?,
                policy: r.get(4)?,
                counts: LedgerCounts { requests: r.get(5)?, applied: r.get(6)?, applied_twice: r.get(7)? },
                next_message_id: r.get(8)?,
                last_event_id: r.get(9)?,
                epoch: r.get(10)?,
            };
            Ok((row, r.get::<_, String>(11)?, r.get::<_, String>(12)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    rows.into_iter()
        .map(|(row, markers, breaker_changes)| {
            let mut ledger = Ledger::restore(row.counts);
            load_keys(connection, &row.id, &mut ledger)?;
            let downstream: DownstreamView = serde_json::from_str(&row.downstream)?;
            let parts = RecordParts {
                downstream: downstream.settings,
                revert: downstream.revert,
                policy: serde_json::from_str(&row.policy)?,
                ledger,
                epoch: row.epoch,
                next_message_id: row.next_message_id,
                messages: load_messages(connection, &row.id)?,
                load_bins: load_json(
                    connection,
                    "SELECT body FROM load_bins WHERE lab_id = ?1 ORDER BY t_ms",
                    &row.id,
                )?,
                markers: serde_json::from_str(&markers)?,
                breaker_changes: serde_json::from_str(&breaker_changes)?,
                outside_messages: load_json(
                    connection,
                    "SELECT body FROM outside_messages WHERE lab_id = ?1 ORDER BY id",
                    &row.id,
                )?,
            };
            let dead_letters = load_dead_letters(connection, &row.id)?;
            Ok(LoadedLab { row, parts, dead_letters })
        })
        .collect()
}

fn load_messages(connection: &Connection, lab: &str) -> Result<Vec<Message>, StoreError> {
    load_json(connection, "SELECT body FROM messages WHERE lab_id = ?1", lab)
}

fn load_dead_letters(connection: &Connection, lab: &str) -> Result<Vec<DeadLetter>, StoreError> {
    load_json(connection, "SELECT body FROM dead_letters WHERE lab_id = ?1", lab)
}

fn load_json<T: serde::de::DeserializeOwned>(
    connection: &Connection,
    sql: &str,
    lab: &str,
) -> Result<Vec<T>, StoreError> {
    let mut statement = connection.prepare_cached(sql)?;
    let bodies = statement.query_map([lab], |r| r.get::<_, String>(0))?.collect::<Result<Vec<_>, _>>()?;
    Ok(bodies.iter().map(|body| serde_json::from_str(body)).collect::<Result<_, _>>()?)
}

/// Reads a lab's applied keys into its ledger, cold: their names, times and callers only, in
/// the order written (see `Ledger::restore_key`). Their answers stay in the store until a
/// repeat asks for one.
fn load_keys(connection: &Connection, lab: &str, ledger: &mut Ledger) -> Result<(), StoreError> {
    let mut statement = connection.prepare_cached(
        "SELECT key, applied_unix_ms, outside FROM idempotency_keys WHERE lab_id = ?1 ORDER BY rowid",
    )?;
    let mut rows = statement.query([lab])?;
    while let Some(row) = rows.next()? {
        let key = row.get_ref(0)?.as_str().map_err(|e| StoreError(format!("store: unreadable key: {e}")))?;
        ledger.restore_key(key, row.get(1)?, row.get(2)?);
    }
    Ok(())
}

/// A key's whole row (`SELECT key, request_body, status, response, applied, applied_unix_ms,
/// outside`); the inner error says why a stored digest is unreadable.
fn key_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<KeyRow, String>> {
    let digest = match BodyDigest::parse_stored(r.get_ref(1)?.as_str()?) {
        Ok(digest) => digest,
        Err(e) => return Ok(Err(e)),
    };
    Ok(Ok(KeyRow {
        key: r.get(0)?,
        digest,
        outside: r.get(6)?,
        status: r.get(2)?,
        response: r.get::<_, Vec<u8>>(3)?.into(),
        applied: r.get(4)?,
        applied_unix_ms: r.get(5)?,
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

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
        fn committed(&self, _: u64) {
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
            };
            Some(Batch {
                lab_id: "good".into(),
                row: Some(row),
                delete: false,
                changes: Default::default(),
                upto: 5,
            })
        }
        fn committed(&self, upto: u64) {
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
        fn committed(&self, _: u64) {}
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
        Store::open(&path, StoreSettings { max_bytes: 0, commit_delay: delay }).unwrap().0
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
        let mut connection = connect(&path).unwrap();
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
        batch.changes.removed_keys = vec!["k".into()];
        let mut tx = connection.transaction().unwrap();
        let savepoint = tx.savepoint().unwrap();
        write_batch(&savepoint, &batch).unwrap();
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
        write_batch(&tx, &batch).unwrap();
        tx.commit().unwrap();
    }

    #[test]
    fn keys_are_kept_in_the_order_applied_and_expire_by_time() {
        let path = temporary_path();
        let mut connection = connect(&path).unwrap();
        migrate(&mut connection).unwrap();
        let keys = vec![applied_key("a", 1, 1), applied_key("b", 1, 5), applied_key("c", 1, 9)];
        write(&mut connection, RecordChanges { keys, ..Default::default() });
        // The window moves past 6: a and b go; a is applied again in the same commit and stays.
        let again = vec![applied_key("a", 1, 10)];
        write(
            &mut connection,
            RecordChanges { keys: again, keys_expired_before: Some(6), ..Default::default() },
        );
        write(&mut connection, RecordChanges { keys: vec![applied_key("a", 2, 10)], ..Default::default() });
        let written: Vec<(String, u32, u64)> = connection
            .prepare("SELECT key, applied, applied_unix_ms FROM idempotency_keys ORDER BY rowid")
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
        let (store, _) = Store::open(&path, StoreSettings::default()).unwrap();
        let mut connection = connect(&path).unwrap();
        let keys = vec![applied_key("a", 1, 5), applied_key("b", 1, 5), applied_key("a", 2, 5)];
        write(&mut connection, RecordChanges { keys, ..Default::default() });
        let recalled = store.recall_key("good", "a", 5).unwrap().expect("a row");
        assert_eq!(recalled.applied, 2, "the last row of a key counts");
        assert_eq!(store.recall_key("good", "b", 5).unwrap(), Some(applied_key("b", 1, 5)));
        assert_eq!(store.recall_key("good", "a", 6).unwrap(), None, "applied at another time");
        assert_eq!(store.recall_key("elsewhere", "a", 5).unwrap(), None, "another lab's");
    }

    #[test]
    fn keys_stored_before_version_4_are_moved_in_the_order_applied() {
        let path = temporary_path();
        let mut connection = connect(&path).unwrap();
        for sql in &MIGRATIONS[..3] {
            connection.execute_batch(sql).unwrap();
        }
        connection.pragma_update(None, "user_version", 3).unwrap();
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
}

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
//! writer. The one on the request path reads back an idempotency key the ledger holds cold or
//! let go (`Store::read_key`), one read at a time, on a thread of its own.
//!
//! The files: `changes` (what a lab owes the store and gets back), `schema` (the file, its
//! migrations, its bound), `writer` (the group-committing writer thread), `rows` (what a lab's
//! batch writes and how a lab is read back), and `comparisons` (comparisons, written once).

mod changes;
mod comparisons;
mod rows;
mod schema;
#[cfg(test)]
mod tests;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::Duration;

use rusqlite::{Connection, params};

use crate::dlq::DeadLetter;
use crate::domain::Message;
use crate::downstream::KeyRow;

pub use changes::{RecordChanges, RecordParts};
pub use rows::{Batch, KEYS_NAMED_PER_BATCH, LabRow, LoadedLab, Named};
use rows::{key_row, load_dead_letters, load_lab, load_messages};
use schema::{connect, open_and_load, opening_failed};
use writer::{Job, Writer, supervise_writer};

/// Why the store could not do what it was asked.
#[derive(Debug)]
pub enum StoreError {
    /// Out of room: the disk, or `--max-db-bytes` (the database and its write-ahead log).
    Full(String),
    /// The file could not be opened, or is not one this build can write: what to do is said.
    Open { path: PathBuf, detail: String },
    /// A stored row could not be read back.
    Unreadable(String),
    /// Anything else: a failed commit, a writer that could not start.
    Failed(String),
}

impl StoreError {
    /// Whether the store is out of room (answered 507 rather than 503).
    pub fn is_full(&self) -> bool {
        matches!(self, StoreError::Full(_))
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Full(detail) => write!(f, "store: {detail}"),
            StoreError::Open { path, detail } => {
                write!(f, "cannot use the store at {}: {detail}", path.display())
            }
            StoreError::Unreadable(detail) => write!(f, "store: unreadable row: {detail}"),
            StoreError::Failed(detail) => write!(f, "store: {detail}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DiskFull) => StoreError::Full(e.to_string()),
            _ => StoreError::Failed(e.to_string()),
        }
    }
}

impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> Self {
        StoreError::Unreadable(e.to_string())
    }
}

/// Something with rows to commit: a lab.
pub trait Flush: Send + Sync {
    /// The changes since the last call, or `None` if there are none.
    fn take_batch(&self) -> Option<Batch>;
    /// Everything up to event `upto` is committed, and `named` of the lab's unnamed key rows
    /// (`KEYS_NAMED_PER_BATCH`).
    fn committed(&self, upto: u64, named: Named);
    /// The batch could not be committed: take its rows back, to be written with the next commit.
    fn failed(&self, batch: Batch);
}

/// Counts for the benchmark: transactions committed and rows written.
#[derive(Debug, Default)]
pub struct StoreStats {
    pub commits: AtomicU64,
    pub rows: AtomicU64,
}

/// How the store writes.
#[derive(Debug, Clone, Copy)]
pub struct StoreSettings {
    /// The most the file may grow to, in bytes (0: no limit of ours), as a full disk would.
    pub max_bytes: u64,
    /// How long changes nobody waits for may be held to fold more into one commit.
    pub commit_delay: Duration,
    /// The most each connection keeps of the file's pages in memory, in KiB.
    pub cache_kib: u64,
}

/// For unit tests: no limit, no delay, and the cache `--store-cache-kib` defaults to.
#[cfg(test)]
impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            max_bytes: 0,
            commit_delay: Duration::ZERO,
            cache_kib: crate::config::DEFAULT_STORE_CACHE_KIB,
        }
    }
}

#[derive(Clone)]
pub struct Store {
    jobs: mpsc::Sender<Job>,
    path: PathBuf,
    /// `StoreSettings::cache_kib`, for the connections opened after the writer's.
    cache_kib: u64,
    /// A connection of its own for reading a lab back as it wakes from rest, opened on first
    /// use; in WAL mode it reads beside the writer without waiting for it.
    reader: Arc<Mutex<Option<Connection>>>,
    /// Hands reads of keys to the key reader's thread (`read_key`).
    reads: mpsc::Sender<KeyRead>,
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

/// A key's newest row by its name (`Store::find_key`): through the index of named rows alone.
const FIND_KEY: &str = "SELECT key, request_body, status, response, applied, applied_unix_ms, outside, \
                        expired FROM idempotency_keys WHERE lab_id = ?1 AND key = ?2 AND named = 1 \
                        ORDER BY rowid DESC LIMIT 1";

impl Store {
    /// Opens (creating if needed) the database, brings its schema up to date, loads every lab,
    /// and starts the writer. Blocking: call it off the async workers.
    /// `settings.max_bytes` (0 for no limit) caps the database and its write-ahead log, as a
    /// full disk would.
    pub fn open(path: &Path, settings: StoreSettings) -> Result<(Store, Vec<LoadedLab>), StoreError> {
        let max_bytes = settings.max_bytes;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Open {
                path: path.to_owned(),
                detail: format!("cannot create its folder {}: {e}", dir.display()),
            })?;
        }
        let (connection, wal, labs) =
            open_and_load(path, max_bytes, settings.cache_kib).map_err(|e| opening_failed(path, e))?;
        let (jobs, receiver) = mpsc::channel();
        let stats = Arc::new(StoreStats::default());
        let writer_stats = stats.clone();
        let (health, watching) = tokio::sync::watch::channel(Health::default());
        thread::Builder::new()
            .name("retrylab-store".into())
            .spawn(move || {
                let writer =
                    Writer { jobs: receiver, stats: &writer_stats, delay: settings.commit_delay, wal };
                supervise_writer(connection, &writer, health)
            })
            .map_err(|e| StoreError::Failed(format!("cannot start the store's writer: {e}")))?;
        let reader = Arc::new(Mutex::new(None));
        let (reads, to_read) = mpsc::channel();
        let (keys_path, cache_kib) = (path.to_owned(), settings.cache_kib);
        thread::Builder::new()
            .name("retrylab-keys".into())
            .spawn(move || read_keys(&keys_path, cache_kib, &to_read))
            .map_err(|e| StoreError::Failed(format!("cannot start the store's key reader: {e}")))?;
        Ok((
            Store {
                jobs,
                path: path.to_owned(),
                cache_kib: settings.cache_kib,
                reader,
                reads,
                stats,
                health: watching,
            },
            labs,
        ))
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

    /// Reads a key's row back off the async workers, on the key reader's thread (`recall_key`
    /// when the ledger knows when it was applied, else `find_key`): the only way the request
    /// path reads a key. One thread, one connection, reads one after another: a read that
    /// waited for the connection in a blocking thread of its own made the runtime start dozens
    /// of them once labs looked up every new key (4 threads became 44 for 100 busy labs;
    /// BENCHMARKS.md, "Session 19"), and handing each read to the runtime's blocking pool cost
    /// twice the server's CPU per new key that this thread does (BENCHMARKS.md, "Session 24").
    /// A read whose request has gone by its turn is not made.
    pub async fn read_key(
        &self,
        lab_id: String,
        key: String,
        applied_unix_ms: Option<u64>,
    ) -> Result<Option<(KeyRow, bool)>, StoreError> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let stopped = || StoreError::Failed("the store's key reader has stopped".into());
        self.reads.send(KeyRead { lab_id, key, applied_unix_ms, answer }).map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }

    /// Reads one lab back whole, as a restart would (blocking): a lab that rested wakes from
    /// it. `None` when the store has no such lab.
    pub fn load_lab(&self, lab_id: &str) -> Result<Option<LoadedLab>, StoreError> {
        let mut reader = self.reader.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if reader.is_none() {
            *reader = Some(connect(&self.path, self.cache_kib)?);
        }
        load_lab(reader.as_ref().expect("opened above"), lab_id)
    }

    /// Reads one lab's messages and dead letters back (blocking).
    pub fn load_messages(&self, lab_id: &str) -> Result<(Vec<Message>, Vec<DeadLetter>), StoreError> {
        let connection = connect(&self.path, self.cache_kib)?;
        Ok((load_messages(&connection, lab_id)?, load_dead_letters(&connection, lab_id)?))
    }

    /// Commits everything scheduled so far and stops the writer (blocking).
    pub fn close(&self) {
        let (done, wait) = mpsc::channel();
        if self.jobs.send(Job::Stop(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}

/// A key's row to read back (`Store::read_key`), and where its answer goes.
struct KeyRead {
    lab_id: String,
    key: String,
    applied_unix_ms: Option<u64>,
    answer: tokio::sync::oneshot::Sender<Result<Option<(KeyRow, bool)>, StoreError>>,
}

/// The key reader's thread: answers each read in turn on a connection of its own, opened on
/// the first, until every `Store` is gone. A read that panics fails alone.
fn read_keys(path: &Path, cache_kib: u64, reads: &mpsc::Receiver<KeyRead>) {
    let mut connection: Option<Connection> = None;
    for KeyRead { lab_id, key, applied_unix_ms, answer } in reads {
        if answer.is_closed() {
            continue; // the request went away while it waited
        }
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let connection = match &mut connection {
                Some(connection) => connection,
                None => connection.insert(connect(path, cache_kib)?),
            };
            match applied_unix_ms {
                Some(at) => recall_key(connection, &lab_id, &key, at).map(|row| row.map(|row| (row, false))),
                None => find_key(connection, &lab_id, &key),
            }
        }));
        let read = read.unwrap_or_else(|_| Err(StoreError::Failed("reading a key back panicked".into())));
        let _ = answer.send(read);
    }
}

/// Reads back the row of `key`, applied at `applied_unix_ms` in `lab_id`: the ledger holds such
/// a key by fingerprint only. The index on (lab, time) finds it among the few keys applied in
/// that millisecond; `None` if the store has no such row.
fn recall_key(
    connection: &Connection,
    lab_id: &str,
    key: &str,
    applied_unix_ms: u64,
) -> Result<Option<KeyRow>, StoreError> {
    let mut statement = connection.prepare_cached(
        "SELECT key, request_body, status, response, applied, applied_unix_ms, outside \
         FROM idempotency_keys WHERE lab_id = ?1 AND applied_unix_ms = ?2 AND key = ?3 \
         AND expired = 0 ORDER BY rowid DESC LIMIT 1",
    )?;
    let row = statement.query_row(params![lab_id, applied_unix_ms, key], key_row);
    match row {
        Ok(row) => Ok(Some(row.map_err(StoreError::Unreadable)?)),
        Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The newest row of `key` in `lab_id`, found by its name alone, and whether it expired from
/// the dedup window: for a lab that let its older keys go from memory
/// (`--cold-keys-per-lab`), which names all its rows first (`KeyNaming`). `None` when the key
/// was never applied there.
fn find_key(connection: &Connection, lab_id: &str, key: &str) -> Result<Option<(KeyRow, bool)>, StoreError> {
    let mut statement = connection.prepare_cached(FIND_KEY)?;
    let row = statement.query_row(params![lab_id, key], |r| Ok((key_row(r)?, r.get::<_, bool>(7)?)));
    match row {
        Ok((row, expired)) => Ok(Some((row.map_err(StoreError::Unreadable)?, expired))),
        Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// A fresh file name under the system's temporary folder, for unit tests.
#[cfg(test)]
pub(crate) fn temporary_path() -> PathBuf {
    std::env::temp_dir().join(format!("retrylab-unit-{}.db", uuid::Uuid::new_v4()))
}

//! The store's file: opening it (and refusing one this process cannot use), its versioned
//! migrations, and its bound under `--max-db-bytes`.

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::StoreError;
use super::rows::{LoadedLab, load_labs};

/// Versioned schema changes, applied in order; `PRAGMA user_version` remembers the last.
pub(super) const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/0001_init.sql"),
    include_str!("../../migrations/0002_comparisons.sql"),
    include_str!("../../migrations/0003_outside_keys.sql"),
    include_str!("../../migrations/0004_keys_in_order.sql"),
    include_str!("../../migrations/0005_lab_history.sql"),
    include_str!("../../migrations/0006_expired_keys.sql"),
    include_str!("../../migrations/0007_outside_messages.sql"),
    include_str!("../../migrations/0008_traffic.sql"),
    include_str!("../../migrations/0009_traffic_counts.sql"),
    include_str!("../../migrations/0010_client_breakers.sql"),
    include_str!("../../migrations/0011_keys_by_name.sql"),
    include_str!("../../migrations/0012_keys_named.sql"),
    include_str!("../../migrations/0013_labs_keys_named.sql"),
];

/// Opens the file, refuses one this process cannot write, brings its schema up to date, bounds
/// it by `max_bytes` and reads every lab back.
pub(super) fn open_and_load(
    path: &Path,
    max_bytes: u64,
    cache_kib: u64,
) -> Result<(Connection, Option<WalBound>, Vec<LoadedLab>), StoreError> {
    let mut connection = connect(path, cache_kib)?;
    if connection.is_readonly(rusqlite::MAIN_DB)? {
        return Err(StoreError::Open {
            path: path.to_owned(),
            detail: "the file is read-only: every write would be refused".into(),
        });
    }
    // Writing the header proves the file (and its folder, for the WAL) can be written.
    connection.execute_batch("BEGIN IMMEDIATE; COMMIT;")?;
    migrate(&mut connection)?;
    let wal = match max_bytes {
        0 => None,
        _ => Some(bound(&connection, path, max_bytes)?),
    };
    let labs = load_labs(&connection)?;
    Ok((connection, wal, labs))
}

/// Says what went wrong opening the store, naming the file and what to do.
pub(super) fn opening_failed(path: &Path, error: StoreError) -> StoreError {
    let detail = match error {
        StoreError::Open { detail, .. } if detail.contains("read-only") => {
            format!(
                "{detail}; make it writable by the user retrylab runs as, or choose another file with --db"
            )
        }
        StoreError::Open { path, detail } => return StoreError::Open { path, detail },
        StoreError::Full(detail) => format!("{detail}; free some room on its disk, or raise --max-db-bytes"),
        StoreError::Unreadable(detail) | StoreError::Failed(detail)
            if detail.contains("readonly") || detail.contains("read-only") =>
        {
            format!(
                "the file is read-only ({detail}): every write would be refused; make the file and \
                 its folder writable by the user retrylab runs as, or choose another file with --db"
            )
        }
        StoreError::Unreadable(detail) | StoreError::Failed(detail) => format!(
            "{detail}; it is not a retrylab store this build can read: move it aside (or restore a \
             backup) to start with an empty one, or choose another file with --db"
        ),
    };
    StoreError::Open { path: path.to_owned(), detail }
}

/// How `--max-db-bytes` bounds the database and its write-ahead log together: half for each.
/// The database may hold no more pages than fit in its half (`max_page_count`). Before each
/// commit the writer checkpoints the log back into the database and truncates it, so a commit
/// starts from an empty log; with the page cache never spilled mid-transaction, a commit
/// writes each page it changes once, a frame of a page and a 24-byte header, and the database
/// has no more pages than that half holds frames. So the two files never pass the limit.
pub(super) struct WalBound {
    path: PathBuf,
}

/// A WAL frame's header, written before each page.
const FRAME_HEADER: u64 = 24;

fn bound(connection: &Connection, path: &Path, max_bytes: u64) -> Result<WalBound, StoreError> {
    let page_size: u64 = connection.pragma_query_value(None, "page_size", |r| r.get(0))?;
    let pages = (max_bytes / 2 / (page_size + FRAME_HEADER)).max(1);
    connection.pragma_update(None, "max_page_count", pages)?;
    connection.pragma_update(None, "cache_spill", false)?;
    connection.pragma_update(None, "journal_size_limit", 0)?;
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    Ok(WalBound { path: PathBuf::from(wal) })
}

impl WalBound {
    fn size(&self) -> u64 {
        std::fs::metadata(&self.path).map_or(0, |m| m.len())
    }

    /// Checkpoints the log into the database and truncates it before a commit; refuses (as a
    /// full disk would) when it cannot be emptied, since the commit could then pass the limit.
    pub(super) fn keep(&self, connection: &Connection) -> Result<(), StoreError> {
        if self.size() == 0 {
            return Ok(());
        }
        // Waits (busy_timeout) for a reader still on an older snapshot, then empties the log.
        let _ = connection.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        match self.size() {
            0 => Ok(()),
            size => Err(StoreError::Full(format!(
                "the write-ahead log holds {size} bytes and could not be checkpointed, so a commit \
                 could pass max_db_bytes"
            ))),
        }
    }
}

/// Opens a connection to the file, keeping at most `cache_kib` KiB of its pages in memory.
pub(super) fn connect(path: &Path, cache_kib: u64) -> Result<Connection, StoreError> {
    let connection = Connection::open(path)
        .map_err(|e| StoreError::Open { path: path.to_owned(), detail: e.to_string() })?;
    // WAL lets the page read while the writer commits; FULL syncs each commit, which group
    // commit keeps affordable; foreign keys make deleting a lab delete what it held. The
    // savepoint around each lab's batch keeps its undo pages in memory, not in a temporary file;
    // a checkpoint every 10,000 pages (not 1,000) copies a page rewritten many times back once.
    connection.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; \
         PRAGMA busy_timeout = 5000; PRAGMA temp_store = MEMORY; PRAGMA wal_autocheckpoint = 10000;",
    )?;
    // A negative size is in KiB; a transaction's changed pages stay past it until its commit.
    connection.pragma_update(None, "cache_size", -i64::try_from(cache_kib).unwrap_or(i64::MAX))?;
    Ok(connection)
}

pub(super) fn migrate(connection: &mut Connection) -> Result<(), StoreError> {
    let version: usize = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if version > MIGRATIONS.len() {
        return Err(StoreError::Failed(format!(
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

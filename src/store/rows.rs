//! The rows: what a lab's batch writes in a commit, and how every lab is read back at start-up.

use rusqlite::{Connection, params};

use super::StoreError;
use super::{RecordChanges, RecordParts};
use crate::client::{BreakerChange, BreakerRows, StoredBreakers};
use crate::dlq::DeadLetter;
use crate::domain::Message;
use crate::downstream::{BodyDigest, DownstreamView, KeyNaming, KeyRow, Ledger, LedgerCounts};

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
    /// The lab's steady traffic as JSON (`null` when none runs).
    pub traffic: String,
    /// New messages the traffic created, and arrivals it had refused at the source.
    pub traffic_sent: u64,
    pub traffic_refused: u64,
    pub forgotten_delivered: u64,
    /// Every key row of the lab is named (migration 13), so the lab does not name them again
    /// when it is read back. Written true by a lab whose rows are `KeyNaming::Named`, and by the
    /// store itself in the commit that names the last of them (`write_batch`).
    pub keys_named: bool,
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

/// A lab as the store holds it.
pub struct LoadedLab {
    pub row: LabRow,
    pub parts: RecordParts,
    pub dead_letters: Vec<DeadLetter>,
}

/// A lab past `--cold-keys-per-lab` names its unnamed key rows this many at a time, a chunk
/// with each batch, until a batch finds fewer than the commit let it name
/// (`KeyNaming::NameAll`).
pub const KEYS_NAMED_PER_BATCH: usize = 256;

/// And a commit names at most this many rows, whatever the labs in it. A lab's key rows lie
/// scattered among the other labs' (the table is in the order keys were applied), so each row
/// named changes a page of its own, held in memory until the commit (`cache_spill` off) and
/// then written to the log. When 100 labs passed the bound together and each named all its
/// rows in one go, the commits slowed and each gathered more labs' naming: RSS rose 13 MiB
/// (71 to 84). Named in chunks, 7 (71 to 78); the writer's work is the same (BENCHMARKS.md,
/// session 26).
pub const KEYS_NAMED_PER_COMMIT: usize = 1024;

/// What a batch wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    pub rows: u64,
    pub named: Named,
}

/// What a batch named of its lab's unnamed key rows (`KeyNaming::NameAll`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Named {
    /// It named the last of them: once it is committed, every row is in the index by name.
    pub all: bool,
    /// The latest time among the rows it named (`applied_unix_ms`): every row applied before
    /// it is named.
    pub through_ms: Option<u64>,
}

/// Writes a lab's batch; a `NameAll` batch names at most `naming_room` rows of its lab, and
/// takes those from it (`KEYS_NAMED_PER_COMMIT`).
pub(super) fn write_batch(
    tx: &Connection,
    batch: &Batch,
    naming_room: &mut usize,
) -> Result<Written, StoreError> {
    let lab = batch.lab_id.as_str();
    if batch.delete {
        tx.execute("DELETE FROM labs WHERE id = ?1", [lab])?;
        return Ok(Written { rows: 1, named: Named::default() });
    }
    let mut rows = 0;
    let mut named = Named::default();
    if let Some(row) = &batch.row {
        tx.prepare_cached(
            "INSERT INTO labs (id, origin_unix_ms, active_unix_ms, downstream, policy, requests, applied, \
             applied_twice, next_message_id, last_event_id, epoch, traffic, forgotten_delivered, traffic_sent, \
             traffic_refused, keys_named) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, \
             ?15, ?16) ON CONFLICT (id) DO UPDATE SET active_unix_ms = ?3, downstream = ?4, policy = ?5, \
             requests = ?6, applied = ?7, applied_twice = ?8, next_message_id = ?9, last_event_id = ?10, \
             epoch = ?11, traffic = ?12, forgotten_delivered = ?13, traffic_sent = ?14, traffic_refused = ?15, \
             keys_named = ?16",
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
            row.epoch,
            row.traffic,
            row.forgotten_delivered,
            row.traffic_sent,
            row.traffic_refused,
            row.keys_named
        ])?;
        rows += 1;
    }
    let changes = &batch.changes;
    if changes.cleared {
        for table in ["messages", "dead_letters", "idempotency_keys", "load_bins", "client_breakers"] {
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
    rows += write_breakers(tx, lab, &changes.breakers)?;
    if let Some(before) = changes.load.dropped_before {
        rows += tx
            .prepare_cached("DELETE FROM load_bins WHERE lab_id = ?1 AND t_ms < ?2")?
            .execute(params![lab, before])? as u64;
    }
    if let Some((from, until)) = changes.load.coarsened {
        // Fine rows summed into coarse ones; the coarse rows (at their block's start) are
        // rewritten below.
        rows += tx
            .prepare_cached(
                "DELETE FROM load_bins WHERE lab_id = ?1 AND t_ms >= ?2 AND t_ms < ?3 AND t_ms % ?4 != 0",
            )?
            .execute(params![lab, from, until, crate::domain::COARSE_BIN_MS])? as u64;
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
        rows += expire_keys(tx, lab, before, &changes.keys_kept)?;
    }
    let chunk = KEYS_NAMED_PER_BATCH.min(*naming_room);
    // With no room left in this commit, the lab names its rows in a later one.
    if changes.naming == KeyNaming::NameAll && chunk > 0 {
        // In the order applied, from where the last chunk ended: a chunk does not read again
        // the rows the ones before it named (`idempotency_keys_by_time`).
        let times: Vec<u64> = tx
            .prepare_cached(
                "UPDATE idempotency_keys SET named = 1 WHERE rowid IN \
                 (SELECT rowid FROM idempotency_keys WHERE lab_id = ?1 AND applied_unix_ms >= ?2 \
                 AND named = 0 ORDER BY applied_unix_ms LIMIT ?3) RETURNING applied_unix_ms",
            )?
            .query_map(params![lab, changes.naming_from_ms, chunk], |row| row.get(0))?
            .collect::<Result<_, _>>()?;
        rows += times.len() as u64;
        *naming_room -= times.len();
        named.through_ms = times.iter().copied().max();
        if times.len() < chunk {
            // The last chunk: the lab's row says so, so the lab does not name its rows again
            // when it is read back.
            rows += tx.prepare_cached("UPDATE labs SET keys_named = 1 WHERE id = ?1")?.execute([lab])? as u64;
            named.all = true;
        }
    }
    // An expired row stays: it is what counts a second application after the window. The row
    // is found by when it was applied, as `recall_key` finds one, whether or not it is named.
    let mut delete_key = tx.prepare_cached(
        "DELETE FROM idempotency_keys WHERE lab_id = ?1 AND applied_unix_ms = ?2 AND key = ?3 AND expired = 0",
    )?;
    for (key, applied_unix_ms) in &changes.removed_keys {
        rows += delete_key.execute(params![lab, applied_unix_ms, key])? as u64;
    }
    // Appended: the table is in the order keys were applied (see migration 4). The column
    // `request_body` holds the body's digest (`BodyDigest`), not the body: its name is older.
    let mut insert_key = tx.prepare_cached(
        "INSERT INTO idempotency_keys (lab_id, key, request_body, status, response, applied, \
         applied_unix_ms, outside, named) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?;
    let write_named = changes.naming != KeyNaming::Unnamed;
    for key in &changes.keys {
        rows += insert_key.execute(params![
            lab,
            key.key,
            key.digest.to_string(),
            key.status,
            key.response.as_ref(),
            key.applied,
            key.applied_unix_ms,
            key.outside,
            write_named
        ])? as u64;
    }
    Ok(Written { rows, named })
}

/// Writes the breaker histories that changed: a client's row whole (none while its history is
/// empty), the rows of clients the policy no longer runs gone, the shares on the lab's row.
fn write_breakers(tx: &Connection, lab: &str, breakers: &BreakerRows) -> Result<u64, StoreError> {
    let mut rows = 0;
    if let Some(from) = breakers.gone_from {
        rows += tx
            .prepare_cached("DELETE FROM client_breakers WHERE lab_id = ?1 AND client >= ?2")?
            .execute(params![lab, from])? as u64;
    }
    let mut upsert = tx.prepare_cached(
        "INSERT OR REPLACE INTO client_breakers (lab_id, client, changes) VALUES (?1, ?2, ?3)",
    )?;
    let mut delete = tx.prepare_cached("DELETE FROM client_breakers WHERE lab_id = ?1 AND client = ?2")?;
    for (client, changes) in &breakers.clients {
        rows += match changes.as_str() {
            "[]" => delete.execute(params![lab, client])?,
            _ => upsert.execute(params![lab, client, changes])?,
        } as u64;
    }
    if let Some(shares) = &breakers.shares {
        rows += tx
            .prepare_cached("UPDATE labs SET breaker_shares = ?2 WHERE id = ?1")?
            .execute(params![lab, shares])? as u64;
    }
    Ok(rows)
}

/// Marks the keys applied before `before` expired, all but `kept` (the keys of messages that
/// may still send them), and drops their answers; returns how many.
fn expire_keys(tx: &Connection, lab: &str, before: u64, kept: &[String]) -> Result<u64, StoreError> {
    tx.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS kept_keys (key TEXT PRIMARY KEY); DELETE FROM temp.kept_keys;",
    )?;
    let mut keep = tx.prepare_cached("INSERT OR IGNORE INTO temp.kept_keys (key) VALUES (?1)")?;
    for key in kept {
        keep.execute([key])?;
    }
    let expired = tx
        .prepare_cached(
            "UPDATE idempotency_keys SET expired = 1, response = X'' WHERE lab_id = ?1 \
             AND applied_unix_ms < ?2 AND expired = 0 AND key NOT IN (SELECT key FROM temp.kept_keys)",
        )?
        .execute(params![lab, before])?;
    Ok(expired as u64)
}

pub(super) fn load_labs(connection: &Connection) -> Result<Vec<LoadedLab>, StoreError> {
    load_labs_where(connection, None)
}

/// One lab, read back as a restart reads every lab; `None` when the store has no such lab.
pub(super) fn load_lab(connection: &Connection, id: &str) -> Result<Option<LoadedLab>, StoreError> {
    Ok(load_labs_where(connection, Some(id))?.pop())
}

/// Every lab, or the one with `id`.
fn load_labs_where(connection: &Connection, id: Option<&str>) -> Result<Vec<LoadedLab>, StoreError> {
    let mut statement = connection.prepare(
        "SELECT id, origin_unix_ms, active_unix_ms, downstream, policy, requests, applied, applied_twice, \
         next_message_id, last_event_id, epoch, markers, breaker_shares, traffic, forgotten_delivered, \
         traffic_sent, traffic_refused, keys_named FROM labs WHERE ?1 IS NULL OR id = ?1",
    )?;
    let rows = statement
        .query_map([id], |r| {
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
                traffic: r.get(13)?,
                forgotten_delivered: r.get(14)?,
                traffic_sent: r.get(15)?,
                traffic_refused: r.get(16)?,
                keys_named: r.get(17)?,
            };
            Ok((row, r.get::<_, String>(11)?, r.get::<_, String>(12)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    rows.into_iter()
        .map(|(row, markers, breaker_shares)| {
            let mut ledger = Ledger::restore(row.counts, row.keys_named);
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
                breakers: StoredBreakers {
                    clients: load_client_breakers(connection, &row.id)?,
                    shares: serde_json::from_str(&breaker_shares)?,
                },
                outside_messages: load_json(
                    connection,
                    "SELECT body FROM outside_messages WHERE lab_id = ?1 ORDER BY id",
                    &row.id,
                )?,
                forgotten_delivered: row.forgotten_delivered,
            };
            let dead_letters = load_dead_letters(connection, &row.id)?;
            Ok(LoadedLab { row, parts, dead_letters })
        })
        .collect()
}

/// Each client's breaker history that the store holds, by its place in the list of clients.
fn load_client_breakers(
    connection: &Connection,
    lab: &str,
) -> Result<Vec<(u32, Vec<BreakerChange>)>, StoreError> {
    let mut statement =
        connection.prepare_cached("SELECT client, changes FROM client_breakers WHERE lab_id = ?1")?;
    let rows = statement.query_map([lab], |r| Ok((r.get::<_, u32>(0)?, r.get::<_, String>(1)?)))?;
    let rows = rows.collect::<Result<Vec<_>, _>>()?;
    let parsed = rows.into_iter().map(|(client, changes)| Ok((client, serde_json::from_str(&changes)?)));
    parsed.collect()
}

pub(super) fn load_messages(connection: &Connection, lab: &str) -> Result<Vec<Message>, StoreError> {
    load_json(connection, "SELECT body FROM messages WHERE lab_id = ?1", lab)
}

pub(super) fn load_dead_letters(connection: &Connection, lab: &str) -> Result<Vec<DeadLetter>, StoreError> {
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
pub(super) fn load_keys(connection: &Connection, lab: &str, ledger: &mut Ledger) -> Result<(), StoreError> {
    let mut statement = connection.prepare_cached(
        "SELECT key, applied_unix_ms, outside, expired FROM idempotency_keys WHERE lab_id = ?1 ORDER BY rowid",
    )?;
    let mut rows = statement.query([lab])?;
    while let Some(row) = rows.next()? {
        let key = row.get_ref(0)?.as_str().map_err(|e| StoreError::Unreadable(format!("a key: {e}")))?;
        match row.get::<_, bool>(3)? {
            true => ledger.restore_expired(key),
            false => ledger.restore_key(key, row.get(1)?, row.get(2)?),
        }
    }
    Ok(())
}

/// A key's whole row (`SELECT key, request_body, status, response, applied, applied_unix_ms,
/// outside`); the inner error says why a stored digest is unreadable.
pub(super) fn key_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<KeyRow, String>> {
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

//! The downstream's idempotency ledger: for each key, the body it was first sent with, the
//! stored answer once the write is applied, and how many times the write was applied (which
//! must never exceed one: `applied_twice` is the lab's proof).
//!
//! Only applied keys are made durable. A reservation (a key whose first request is still being
//! processed) lives in memory alone: after a crash it is gone, and the client's retry processes
//! the key afresh instead of meeting a 409 forever.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use super::IdempotencyKey;

/// The answer saved with a key, sent again byte for byte on every replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    pub body: bytes::Bytes,
}

#[derive(Debug)]
struct Entry {
    body: Value,
    response: Option<StoredResponse>,
    applied: u32,
    /// Wall-clock time the key was first applied, for the dedup window.
    applied_unix_ms: u64,
}

/// An applied key as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRow {
    pub key: String,
    pub body: Value,
    pub status: u16,
    pub response: bytes::Bytes,
    pub applied: u32,
    pub applied_unix_ms: u64,
}

/// What the ledger knows of a key, given the body of the request at hand.
#[derive(Debug)]
pub enum Lookup {
    New,
    InProgress,
    Done(StoredResponse),
    BodyMismatch,
}

/// The ledger's counters, kept with the lab.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerCounts {
    pub requests: u64,
    pub applied: u64,
    pub applied_twice: u64,
}

#[derive(Debug, Default)]
pub struct Ledger {
    keys: HashMap<String, Entry>,
    counts: LedgerCounts,
    /// Keys applied since the store last took them.
    unsaved: HashSet<String>,
}

impl Ledger {
    /// A ledger as the store left it.
    pub fn restore(counts: LedgerCounts, rows: Vec<KeyRow>) -> Self {
        let keys = rows
            .into_iter()
            .map(|row| {
                let response = StoredResponse { status: row.status, body: row.response };
                let entry = Entry {
                    body: row.body,
                    response: Some(response),
                    applied: row.applied,
                    applied_unix_ms: row.applied_unix_ms,
                };
                (row.key, entry)
            })
            .collect();
        Ledger { keys, counts, unsaved: HashSet::new() }
    }

    pub fn count_request(&mut self) {
        self.counts.requests += 1;
    }

    /// Bodies are compared as JSON values, so key order and whitespace do not matter.
    pub fn lookup(&self, key: &IdempotencyKey, body: &Value) -> Lookup {
        match self.keys.get(key.as_str()) {
            None => Lookup::New,
            Some(entry) if entry.body != *body => Lookup::BodyMismatch,
            Some(Entry { response: Some(response), .. }) => Lookup::Done(response.clone()),
            Some(_) => Lookup::InProgress,
        }
    }

    pub fn reserve(&mut self, key: &IdempotencyKey, body: Value) {
        let entry = Entry { body, response: None, applied: 0, applied_unix_ms: 0 };
        self.keys.insert(key.as_str().to_owned(), entry);
    }

    /// Applies the write for a reserved key and saves its answer, in one step.
    pub fn complete(&mut self, key: &IdempotencyKey, now_ms: u64, unix_ms: u64) -> StoredResponse {
        let entry = self.keys.entry(key.as_str().to_owned()).or_insert_with(|| Entry {
            body: Value::Null,
            response: None,
            applied: 0,
            applied_unix_ms: unix_ms,
        });
        entry.applied += 1;
        entry.applied_unix_ms = unix_ms;
        match entry.applied {
            1 => self.counts.applied += 1,
            2 => self.counts.applied_twice += 1,
            _ => {}
        }
        let body = json!({ "key": key.as_str(), "result": "applied", "applied_at_ms": now_ms });
        let response = StoredResponse { status: 200, body: body.to_string().into() };
        entry.response = Some(response.clone());
        self.unsaved.insert(key.as_str().to_owned());
        response
    }

    /// Forgets applied keys older than the dedup window; returns them so the store drops them
    /// too. After this a repeat of such a key is a new request, as the window promises.
    pub fn expire(&mut self, applied_before_unix_ms: u64) -> Vec<String> {
        let expired: Vec<String> = self
            .keys
            .iter()
            .filter(|(_, e)| e.response.is_some() && e.applied_unix_ms < applied_before_unix_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &expired {
            self.keys.remove(key);
            self.unsaved.remove(key);
        }
        expired
    }

    /// The applied keys not yet handed to the store, as rows.
    pub fn take_unsaved(&mut self) -> Vec<KeyRow> {
        let unsaved = std::mem::take(&mut self.unsaved);
        unsaved
            .into_iter()
            .filter_map(|key| {
                let entry = self.keys.get(&key)?;
                let response = entry.response.as_ref()?;
                Some(KeyRow {
                    body: entry.body.clone(),
                    status: response.status,
                    response: response.body.clone(),
                    applied: entry.applied,
                    applied_unix_ms: entry.applied_unix_ms,
                    key,
                })
            })
            .collect()
    }

    /// Keys to hand to the store again (their last commit failed).
    pub fn mark_unsaved(&mut self, keys: impl IntoIterator<Item = String>) {
        self.unsaved.extend(keys);
    }

    pub fn counts(&self) -> LedgerCounts {
        self.counts
    }
}

//! The downstream's idempotency ledger: for each key, the body it was first sent with, the
//! stored answer once the write is applied, and how many times the write was applied (which
//! must never exceed one: `applied_twice` is the lab's proof).

use std::collections::HashMap;

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
}

/// What the ledger knows of a key, given the body of the request at hand.
#[derive(Debug)]
pub enum Lookup {
    New,
    InProgress,
    Done(StoredResponse),
    BodyMismatch,
}

#[derive(Debug, Default)]
pub struct Ledger {
    keys: HashMap<String, Entry>,
    requests: u64,
    applied: u64,
    applied_twice: u64,
}

impl Ledger {
    pub fn count_request(&mut self) {
        self.requests += 1;
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
        self.keys.insert(key.as_str().to_owned(), Entry { body, response: None, applied: 0 });
    }

    /// Applies the write for a reserved key and saves its answer, in one step.
    pub fn complete(&mut self, key: &IdempotencyKey, now_ms: u64) -> StoredResponse {
        let entry = self.keys.entry(key.as_str().to_owned()).or_insert_with(|| Entry {
            body: Value::Null,
            response: None,
            applied: 0,
        });
        entry.applied += 1;
        match entry.applied {
            1 => self.applied += 1,
            2 => self.applied_twice += 1,
            _ => {}
        }
        let body = json!({ "key": key.as_str(), "result": "applied", "applied_at_ms": now_ms });
        let response = StoredResponse { status: 200, body: body.to_string().into() };
        entry.response = Some(response.clone());
        response
    }

    pub fn requests(&self) -> u64 {
        self.requests
    }

    pub fn applied(&self) -> u64 {
        self.applied
    }

    pub fn applied_twice(&self) -> u64 {
        self.applied_twice
    }
}

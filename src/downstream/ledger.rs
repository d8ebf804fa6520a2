//! The downstream's idempotency ledger: for each key, a digest of the body it was first sent
//! with (enough to tell a repeat from a different body, without keeping the body), the
//! stored answer once the write is applied, and how many times the write was applied (which
//! must never exceed one: `applied_twice` is the lab's proof).
//!
//! Only applied keys are made durable. A reservation (a key whose first request is still being
//! processed) lives in memory alone: after a crash it is gone, and the client's retry processes
//! the key afresh instead of meeting a 409 forever.
//!
//! The store is the ledger of record; memory holds only what is hot. A key applied recently
//! (the last `hot_keys` of a lab, and every key not yet committed) is held whole. An older one
//! is held *cold*: a 128-bit keyed fingerprint of its name, when it was applied and whether an
//! outside caller made it, 24 bytes in all. A request whose key matches a cold fingerprint is
//! looked up in the store (`Lookup::Stored`) and the key is held whole again; a new key matches
//! nothing and costs no read. Keys read back after a restart start cold. Past
//! `--cold-keys-per-lab` cold keys, the oldest are let go from memory (`spill`); from then on a
//! key that matches nothing is looked up in the store by name (`found`) before it counts as new.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::IdempotencyKey;
use crate::domain::MessageKey;

/// The answer saved with a key, sent again byte for byte on every replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    pub body: bytes::Bytes,
}

/// The SHA-256 of a body's canonical JSON (object keys sorted, no whitespace): two bodies
/// that are the same JSON value have the same digest, whatever their spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyDigest([u8; 32]);

impl BodyDigest {
    pub fn of(body: &Value) -> BodyDigest {
        use sha2::Digest;
        // serde_json's maps are sorted by key, so this is canonical.
        let canonical = serde_json::to_vec(body).expect("a JSON value serializes");
        BodyDigest(sha2::Sha256::digest(&canonical).into())
    }

    /// Reads a stored digest (`sha256:` and 64 hex digits), or, from rows written before
    /// digests, the body itself.
    pub fn parse_stored(stored: &str) -> Result<BodyDigest, String> {
        let Some(hex) = stored.strip_prefix("sha256:") else {
            let body: Value =
                serde_json::from_str(stored).map_err(|e| format!("unreadable stored body: {e}"))?;
            return Ok(BodyDigest::of(&body));
        };
        let mut digest = [0u8; 32];
        if hex.len() != 64 {
            return Err(format!("a digest has 64 hex digits: {stored}"));
        }
        for (i, byte) in digest.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| format!("{stored}: {e}"))?;
        }
        Ok(BodyDigest(digest))
    }
}

impl std::fmt::Display for BodyDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // By hand: the store writes one for every applied key, and `{:02x}` per byte is slow.
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut text = *b"sha256:0000000000000000000000000000000000000000000000000000000000000000";
        for (i, byte) in self.0.iter().enumerate() {
            text[7 + 2 * i] = HEX[usize::from(byte >> 4)];
            text[8 + 2 * i] = HEX[usize::from(byte & 0xf)];
        }
        f.write_str(std::str::from_utf8(&text).expect("ASCII"))
    }
}

/// How many applied keys a ledger holds in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldKeys {
    /// Held whole: the key, its body's digest, its answer.
    pub whole: usize,
    /// Held cold, by fingerprint only: the store has the rest.
    pub fingerprint: usize,
    /// Let go from memory past `--cold-keys-per-lab`, since the ledger began: the store alone
    /// holds them.
    pub let_go: u64,
}

/// Against `(whole, fingerprint)`, for short comparisons.
impl PartialEq<(usize, usize)> for HeldKeys {
    fn eq(&self, &(whole, fingerprint): &(usize, usize)) -> bool {
        self.whole == whole && self.fingerprint == fingerprint
    }
}

#[derive(Debug)]
struct KeyEntry {
    digest: BodyDigest,
    /// Made by a caller from outside, not the lab's own client: these count against the
    /// limits on outside keys.
    outside: bool,
    /// The answer, once the write is applied.
    answer: Option<KeptAnswer>,
    /// The lab's event that applied it: once the store has committed that event, the key is
    /// durable (0 for keys read back from the store).
    applied_event: u64,
    applied: u32,
    /// Wall-clock time the key was first applied, for the dedup window.
    applied_unix_ms: u64,
    /// Applied since the store last took its row.
    unsaved: bool,
    /// When it was last applied or read back from the store: the keys held whole longest
    /// without either are the first held cold.
    hot_since_unix_ms: u64,
}

impl KeyEntry {
    /// A key reserved by a request that has not applied its write yet.
    fn reserved(digest: BodyDigest, outside: bool) -> KeyEntry {
        KeyEntry {
            digest,
            outside,
            answer: None,
            applied_event: 0,
            applied: 0,
            applied_unix_ms: 0,
            unsaved: false,
            hot_since_unix_ms: 0,
        }
    }

    /// A key's row read back from the store, held whole again from `now_unix_ms`.
    fn read_back(row: &KeyRow, outside: bool, now_unix_ms: u64) -> KeyEntry {
        let response = StoredResponse { status: row.status, body: row.response.clone() };
        KeyEntry {
            answer: Some(KeptAnswer::of(&row.key, response)),
            applied: row.applied,
            applied_unix_ms: row.applied_unix_ms,
            hot_since_unix_ms: now_unix_ms,
            ..KeyEntry::reserved(row.digest, outside)
        }
    }
}

/// A key's answer, kept small: the answer the downstream writes is made from the key and the
/// time it was applied, so those are all it keeps, and it writes the same bytes again for
/// every repeat. An answer stored some other way is kept whole.
#[derive(Debug)]
enum KeptAnswer {
    Applied { applied_at_ms: u64 },
    Kept(Box<StoredResponse>),
}

impl KeptAnswer {
    fn response(&self, key: &str) -> StoredResponse {
        match self {
            KeptAnswer::Applied { applied_at_ms } => applied_response(key, *applied_at_ms),
            KeptAnswer::Kept(response) => (**response).clone(),
        }
    }

    /// The smallest form that gives back exactly these bytes.
    fn of(key: &str, response: StoredResponse) -> KeptAnswer {
        let applied_at_ms = serde_json::from_slice::<Value>(&response.body)
            .ok()
            .and_then(|body| body.get("applied_at_ms")?.as_u64());
        match applied_at_ms {
            Some(at) if applied_response(key, at) == response => KeptAnswer::Applied { applied_at_ms: at },
            _ => KeptAnswer::Kept(Box::new(response)),
        }
    }
}

/// The answer to a key's applied write.
fn applied_response(key: &str, applied_at_ms: u64) -> StoredResponse {
    /// Its fields in the order a JSON object built with `json!` writes them (sorted), so the
    /// bytes are the same as they have always been, made without building a map each time.
    #[derive(serde::Serialize)]
    struct Applied<'a> {
        applied_at_ms: u64,
        key: &'a str,
        result: &'static str,
    }
    let body = serde_json::to_vec(&Applied { applied_at_ms, key, result: "applied" }).expect("plain data");
    StoredResponse { status: 200, body: body.into() }
}

/// An applied key as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRow {
    pub key: String,
    pub digest: BodyDigest,
    pub outside: bool,
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
    /// Applied at `applied_unix_ms` and held cold: read its row from the store (`recall`).
    /// With no time, the key is not held, but the lab let older keys go from memory
    /// (`spill`): the store says whether it was applied (`found`).
    Stored {
        applied_unix_ms: Option<u64>,
    },
}

/// A key's name, reduced to 128 bits by SipHash under two keys drawn at random when the
/// process starts: two names in one window share a fingerprint with odds of about 2^-90, and
/// nobody outside can aim for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Fingerprint(u64, u64);

impl Fingerprint {
    fn of(key: &str) -> Fingerprint {
        let bits = crate::domain::secret_hash(key);
        Fingerprint((bits >> 64) as u64, bits as u64)
    }

    /// A key held whole's fingerprint: that of its text.
    fn of_held(key: &MessageKey) -> Fingerprint {
        Fingerprint::of(key.text(&mut [0; 36]))
    }
}

/// What memory keeps of a cold key: when it was applied, and (in the top bit) whether an
/// outside caller made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cold(u64);

impl Cold {
    const OUTSIDE: u64 = 1 << 63;

    fn new(applied_unix_ms: u64, outside: bool) -> Cold {
        Cold((applied_unix_ms & !Self::OUTSIDE) | if outside { Self::OUTSIDE } else { 0 })
    }

    fn applied_unix_ms(self) -> u64 {
        self.0 & !Self::OUTSIDE
    }

    fn outside(self) -> bool {
        self.0 & Self::OUTSIDE != 0
    }
}

/// The ledger's counters, kept with the lab.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerCounts {
    pub requests: u64,
    pub applied: u64,
    pub applied_twice: u64,
}

/// Whether a lab's key rows go into the store's index by name, which only a lab that lets keys
/// go from memory needs (migration 12): until then a new key costs one row appended, not also a
/// random page of the index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KeyNaming {
    /// The lab holds every key it applied: its rows are written unnamed.
    #[default]
    Unnamed,
    /// The lab is about to let keys go: each batch names a chunk of its unnamed rows, new rows
    /// are written named, and no key goes until the store reports the commit that named the
    /// last of them (`Ledger::keys_named`).
    NameAll,
    /// Every row of the lab is named, and new ones are written so: keys may go.
    Named,
}

#[derive(Debug, Default)]
pub struct Ledger {
    /// Keys held whole: reserved, recently applied, or recalled from the store. A UUID key
    /// (as the lab's own client makes them) is held as its 16 bytes.
    keys: HashMap<MessageKey, KeyEntry>,
    /// Applied keys held by fingerprint only; their rows are in the store.
    cold: HashMap<Fingerprint, Cold>,
    counts: LedgerCounts,
    /// Keys applied since the store last took them, in the order applied; a key may be listed
    /// twice, or be gone (its entry says whether its row is still owed).
    unsaved: Vec<MessageKey>,
    /// Keys held for outside callers, hot and cold.
    outside: usize,
    /// Keys that expired from the dedup window, by fingerprint (16 bytes each), kept as long as
    /// the lab: a repeat of one is a new request, as the window promises, but applying it again
    /// counts in `applied_twice`, so the counter shows every write applied more than once.
    expired: HashSet<Fingerprint>,
    /// The older cold keys let go from memory past `--cold-keys-per-lab`, a group at a time;
    /// their rows stay in the store.
    spills: Vec<Spill>,
    /// Some key was let go: a key not held is looked up in the store by its name before it
    /// counts as new. It stays so for the ledger's life: a key let go, then expired, must still
    /// count in `applied_twice` when it is applied again, and only its row remembers it.
    spilled: bool,
    /// How many keys `spill` let go, in all.
    let_go: u64,
    /// How the store writes the key rows.
    naming: KeyNaming,
    /// While `NameAll`: the rows applied before this are named.
    naming_from_ms: u64,
}

/// A map keeps the room it once needed when entries leave it: a burst of 2,000 keys left room
/// for 3,584 whole keys after all but 1,024 had cooled. Past
/// twice what the map is meant to hold, the room goes back, down to that.
fn give_back_room<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>, meant: usize) {
    if map.capacity() > 2 * meant.max(map.len()) {
        map.shrink_to(meant);
    }
}

/// Cold keys let go from memory together: the newest of them, for the dedup window, and how
/// many were an outside caller's (the limits on outside keys count them until they expire).
#[derive(Debug, Clone, Copy)]
struct Spill {
    newest_applied_unix_ms: u64,
    outside: usize,
}

impl Ledger {
    /// A ledger as the store left it, before its keys are added with `restore_key`; `named`
    /// when the store says every key row of the lab is named, so keys may go at once.
    pub fn restore(counts: LedgerCounts, named: bool) -> Self {
        let naming = if named { KeyNaming::Named } else { KeyNaming::Unnamed };
        Ledger { counts, naming, ..Default::default() }
    }

    /// Adds a key read back from the store, cold. Keys come in the order they were written, so
    /// when a key has several rows, the last one counts.
    pub fn restore_key(&mut self, key: &str, applied_unix_ms: u64, outside: bool) {
        if let Some(replaced) = self.cold.insert(Fingerprint::of(key), Cold::new(applied_unix_ms, outside)) {
            self.outside -= usize::from(replaced.outside());
        }
        self.outside += usize::from(outside);
    }

    /// Adds a key read back from the store that expired from the dedup window (see `expired`).
    pub fn restore_expired(&mut self, key: &str) {
        self.expired.insert(Fingerprint::of(key));
    }

    /// Keys that expired from the dedup window and are remembered only to count a second
    /// application.
    pub fn expired_keys(&self) -> usize {
        self.expired.len()
    }

    /// When `key` was applied, if it is held (whole or cold).
    pub fn applied_unix_ms(&self, key: &str) -> Option<u64> {
        match self.keys.get(&MessageKey::from(key)) {
            Some(entry) => entry.answer.is_some().then_some(entry.applied_unix_ms),
            None => self.cold.get(&Fingerprint::of(key)).map(|cold| cold.applied_unix_ms()),
        }
    }

    /// Keys held whole, and keys held by fingerprint only.
    pub fn held(&self) -> HeldKeys {
        HeldKeys { whole: self.keys.len(), fingerprint: self.cold.len(), let_go: self.let_go }
    }

    pub fn count_request(&mut self) {
        self.counts.requests += 1;
    }

    /// Bodies are compared by the digest of their JSON value, so key order and whitespace do
    /// not matter.
    pub fn lookup(&self, key: &IdempotencyKey, digest: &BodyDigest) -> Lookup {
        match self.keys.get(key.held()) {
            None if self.cold.is_empty() && !self.spilled => Lookup::New,
            None => match self.cold.get(&Fingerprint::of(key.as_str())) {
                Some(cold) => Lookup::Stored { applied_unix_ms: Some(cold.applied_unix_ms()) },
                None if self.spilled => Lookup::Stored { applied_unix_ms: None },
                None => Lookup::New,
            },
            Some(entry) if entry.digest != *digest => Lookup::BodyMismatch,
            Some(KeyEntry { answer: Some(answer), .. }) => Lookup::Done(answer.response(key.as_str())),
            Some(_) => Lookup::InProgress,
        }
    }

    /// Whether `key` was applied: held whole with its answer, or by fingerprint (cold).
    pub fn is_applied(&self, key: &str) -> bool {
        match self.keys.get(&MessageKey::from(key)) {
            Some(entry) => entry.answer.is_some(),
            None => self.cold.contains_key(&Fingerprint::of(key)),
        }
    }

    /// Takes the store's row for a cold key (`Lookup::Stored`): the key is held whole again.
    /// `row` is `None` when the store has no row of it (it can only have been taken back or
    /// expired meanwhile): the key is forgotten, and is new to the next lookup. A cold key
    /// applied at another time than `applied_unix_ms` (recalled by a concurrent request, say)
    /// is left as it is.
    pub fn recall(
        &mut self,
        key: &IdempotencyKey,
        applied_unix_ms: u64,
        row: Option<KeyRow>,
        now_unix_ms: u64,
    ) {
        let fingerprint = Fingerprint::of(key.as_str());
        let Some(cold) = self.cold.get(&fingerprint).copied() else { return };
        if cold.applied_unix_ms() != applied_unix_ms {
            return;
        }
        self.cold.remove(&fingerprint);
        let Some(row) = row.filter(|row| row.key == key.as_str()) else {
            self.outside -= usize::from(cold.outside());
            return;
        };
        let entry = KeyEntry::read_back(&row, cold.outside(), now_unix_ms);
        self.keys.insert(MessageKey::from(row.key), entry);
    }

    /// Holds cold the applied keys past the newest `hot_keys` that are committed (their lab's
    /// events through `committed_event` are in the store, and their rows with them). Runs only
    /// once the hot keys are a quarter over `hot_keys`, so the pass over them is paid once per
    /// that many new keys.
    pub fn cool(&mut self, hot_keys: usize, committed_event: u64) -> usize {
        if self.keys.len() <= hot_keys + hot_keys / 4 {
            return 0;
        }
        let mut committed: Vec<(u64, &MessageKey)> = self
            .keys
            .iter()
            .filter(|(_, entry)| {
                entry.answer.is_some() && entry.applied_event <= committed_event && !entry.unsaved
            })
            .map(|(key, entry)| (entry.hot_since_unix_ms, key))
            .collect();
        let excess = (self.keys.len() - hot_keys).min(committed.len());
        if excess == 0 {
            return 0;
        }
        if excess < committed.len() {
            committed.select_nth_unstable(excess);
        }
        let cooled: Vec<MessageKey> = committed[..excess].iter().map(|(_, key)| (*key).clone()).collect();
        for key in cooled {
            let entry = self.keys.remove(&key).expect("listed above");
            self.cold.insert(Fingerprint::of_held(&key), Cold::new(entry.applied_unix_ms, entry.outside));
        }
        excess
    }

    /// Gives back the room either map holds past twice what it is meant to hold (the whole
    /// keys a quarter over `hot_keys`, the fingerprints `cold_keys`). A map takes more room in
    /// a burst, and also when keys leave it and others come: it counts the places the leavers
    /// held as taken until it next rehashes, and when those run out it doubles, though it is
    /// far from full. Run after `cool` and `spill`, so the room a lab keeps follows its limits.
    pub fn give_back_room(&mut self, hot_keys: usize, cold_keys: usize) {
        give_back_room(&mut self.keys, hot_keys + hot_keys / 4);
        give_back_room(&mut self.cold, cold_keys);
    }

    /// How the store writes the key rows.
    pub fn naming(&self) -> KeyNaming {
        self.naming
    }

    /// A commit named the last of the lab's unnamed rows: keys may go with the next batch.
    /// Whether that changed anything (the ledger was waiting for it).
    pub fn keys_named(&mut self) -> bool {
        let waiting = self.naming == KeyNaming::NameAll;
        if waiting {
            self.naming = KeyNaming::Named;
        }
        waiting
    }

    /// Keys are past the cold bound while the store names none of them: each batch from now
    /// on names some, until a commit names the last (`keys_named`).
    pub fn name_all(&mut self) {
        if self.naming == KeyNaming::Unnamed {
            (self.naming, self.naming_from_ms) = (KeyNaming::NameAll, 0);
        }
    }

    /// While `NameAll`: the rows applied before this time are named, so the next chunk of
    /// them starts here.
    pub fn naming_from_ms(&self) -> u64 {
        self.naming_from_ms
    }

    /// A commit named the rows applied up to `through_ms` (some at that very time may be left).
    pub fn named_through(&mut self, through_ms: u64) {
        if self.naming == KeyNaming::NameAll {
            self.naming_from_ms = self.naming_from_ms.max(through_ms);
        }
    }

    /// Whether more keys are held cold than `max_cold` (`--cold-keys-per-lab`): `spill` then
    /// lets the oldest go.
    pub fn cold_over(&self, max_cold: usize) -> bool {
        self.cold.len() > max_cold
    }

    /// Lets the oldest cold keys go from memory, down to three quarters of `max_cold` (so the
    /// pass is paid once per that many keys), but never one of `needed`: the keys of messages
    /// that may still send them and of dead letters, whose `applied` the page shows. Their
    /// rows stay in the store, where a request with one of them finds it by name (`found`).
    /// Returns how many went.
    pub fn spill<'a>(&mut self, max_cold: usize, needed: impl IntoIterator<Item = &'a str>) -> usize {
        let keep = max_cold - max_cold / 4;
        if self.cold.len() <= keep {
            return 0;
        }
        let needed: HashSet<Fingerprint> = needed.into_iter().map(Fingerprint::of).collect();
        let mut times: Vec<u64> = self
            .cold
            .iter()
            .filter(|(fingerprint, _)| !needed.contains(fingerprint))
            .map(|(_, cold)| cold.applied_unix_ms())
            .collect();
        let excess = (self.cold.len() - keep).min(times.len());
        if excess == 0 {
            return 0;
        }
        let cutoff = *times.select_nth_unstable(excess - 1).1;
        let before = self.cold.len();
        let mut spill = Spill { newest_applied_unix_ms: 0, outside: 0 };
        self.cold.retain(|fingerprint, cold| {
            let go = cold.applied_unix_ms() <= cutoff && !needed.contains(fingerprint);
            if go {
                spill.newest_applied_unix_ms = spill.newest_applied_unix_ms.max(cold.applied_unix_ms());
                spill.outside += usize::from(cold.outside());
            }
            !go
        });
        self.spills.push(spill);
        self.spilled = true;
        let gone = before - self.cold.len();
        self.let_go += gone as u64;
        gone
    }

    /// Takes what the store found of a key by its name (`Lookup::Stored` with no time): its
    /// row, and whether it expired from the dedup window. A current row is held whole again,
    /// as `recall` does; an expired one is remembered in `expired`, so applying the key again
    /// counts in `applied_twice`. Either way, or with none, the caller decides again, saying
    /// that the store was asked (`Request::asked`). A key held meanwhile (a concurrent request
    /// with it) is left as it is.
    pub fn found(&mut self, key: &IdempotencyKey, found: Option<(KeyRow, bool)>, now_unix_ms: u64) {
        let fingerprint = Fingerprint::of(key.as_str());
        if self.keys.contains_key(key.held()) || self.cold.contains_key(&fingerprint) {
            return;
        }
        match found {
            Some((row, false)) if row.key == key.as_str() => {
                // Counted again: its spill still counts it, until the spill's window passes.
                self.outside += usize::from(row.outside);
                let entry = KeyEntry::read_back(&row, row.outside, now_unix_ms);
                self.keys.insert(key.held().clone(), entry);
            }
            Some((row, true)) if row.key == key.as_str() => {
                self.expired.insert(fingerprint);
            }
            _ => {}
        }
    }

    pub fn reserve(&mut self, key: &IdempotencyKey, digest: BodyDigest, outside: bool) {
        if let Some(replaced) = self.keys.insert(key.held().clone(), KeyEntry::reserved(digest, outside)) {
            self.outside -= usize::from(replaced.outside);
        }
        self.outside += usize::from(outside);
    }

    /// Notes the lab's event that applied `key` (see `applied_event`).
    pub fn set_applied_event(&mut self, key: &IdempotencyKey, event: u64) {
        if let Some(entry) = self.keys.get_mut(key.held()) {
            entry.applied_event = event;
        }
    }

    /// The lab's event that applied `key`: a repeat may be answered once it is committed
    /// (`u64::MAX` for an instant after the write, before its event has a number).
    pub fn applied_event(&self, key: &IdempotencyKey) -> u64 {
        self.keys.get(key.held()).map_or(0, |e| e.applied_event)
    }

    /// Keys held for callers from outside.
    pub fn outside_keys(&self) -> usize {
        self.outside
    }

    /// Applies the write for a reserved key and saves its answer, in one step.
    pub fn complete(&mut self, key: &IdempotencyKey, now_ms: u64, unix_ms: u64) -> StoredResponse {
        let entry = self
            .keys
            .entry(key.held().clone())
            .or_insert_with(|| KeyEntry::reserved(BodyDigest([0; 32]), false));
        entry.applied += 1;
        if entry.applied == 1
            && !self.expired.is_empty()
            && self.expired.contains(&Fingerprint::of(key.as_str()))
        {
            // Applied before, then forgotten by the dedup window: this is its second time.
            entry.applied = 2;
        }
        entry.applied_unix_ms = unix_ms;
        entry.hot_since_unix_ms = unix_ms;
        // Unknown until the lab has published the event: until then, wait for everything.
        entry.applied_event = u64::MAX;
        match entry.applied {
            1 => self.counts.applied += 1,
            2 => self.counts.applied_twice += 1,
            _ => {}
        }
        let response = applied_response(key.as_str(), now_ms);
        entry.answer = Some(KeptAnswer::Applied { applied_at_ms: now_ms });
        if !std::mem::replace(&mut entry.unsaved, true) {
            self.unsaved.push(key.held().clone());
        }
        response
    }

    /// Takes back a write the store could not keep: the key is forgotten, as if it had never
    /// been applied, so the client's retry applies it (once). Returns when it was applied, if it
    /// was held (the caller then deletes its row, if any, found by that time). A key already
    /// held cold (its commit landed just as its caller gave up on it) is forgotten too, so the
    /// store and the answer agree.
    pub fn unapply(&mut self, key: &IdempotencyKey) -> Option<u64> {
        let Some(entry) = self.keys.remove(key.held()) else {
            let cold = self.cold.remove(&Fingerprint::of(key.as_str()))?;
            self.outside -= usize::from(cold.outside());
            self.counts.applied = self.counts.applied.saturating_sub(1);
            return Some(cold.applied_unix_ms());
        };
        self.outside -= usize::from(entry.outside);
        match entry.applied {
            0 => {}
            1 => self.counts.applied -= 1,
            _ => self.counts.applied_twice -= 1,
        }
        Some(entry.applied_unix_ms)
    }

    /// Forgets applied keys older than the dedup window, except `kept` (the keys of messages
    /// that may still send them: the store keeps their rows by the same rule); returns how
    /// many. After this a repeat of such a key is a new request, as the window promises; its
    /// fingerprint stays in `expired`, so applying it again counts in `applied_twice`.
    pub fn expire<'a>(
        &mut self,
        applied_before_unix_ms: u64,
        kept: impl IntoIterator<Item = &'a str>,
    ) -> usize {
        let kept: HashSet<Fingerprint> = kept.into_iter().map(Fingerprint::of).collect();
        let before = self.keys.len() + self.cold.len();
        let (outside, expired) = (&mut self.outside, &mut self.expired);
        self.cold.retain(|fingerprint, cold| {
            let gone = cold.applied_unix_ms() < applied_before_unix_ms && !kept.contains(fingerprint);
            *outside -= usize::from(gone && cold.outside());
            if gone {
                expired.insert(*fingerprint);
            }
            !gone
        });
        self.spills.retain(|spill| {
            let gone = spill.newest_applied_unix_ms < applied_before_unix_ms;
            *outside -= if gone { spill.outside } else { 0 };
            !gone
        });
        let (outside, expired) = (&mut self.outside, &mut self.expired);
        self.keys.retain(|key, entry| {
            let old = entry.answer.is_some() && entry.applied_unix_ms < applied_before_unix_ms;
            let gone = old && !kept.contains(&Fingerprint::of_held(key));
            *outside -= usize::from(gone && entry.outside);
            if gone {
                expired.insert(Fingerprint::of_held(key));
            }
            !gone
        });
        before - self.keys.len() - self.cold.len()
    }

    /// The applied keys not yet handed to the store, as rows, in the order applied. A key
    /// taken back or expired meanwhile is not among them.
    pub fn take_unsaved(&mut self) -> Vec<KeyRow> {
        let unsaved = std::mem::take(&mut self.unsaved);
        unsaved
            .into_iter()
            .filter_map(|key| {
                let entry = self.keys.get_mut(&key).filter(|entry| entry.unsaved)?;
                entry.unsaved = false;
                let response = entry.answer.as_ref()?.response(key.text(&mut [0; 36]));
                Some(KeyRow {
                    digest: entry.digest,
                    outside: entry.outside,
                    status: response.status,
                    response: response.body,
                    applied: entry.applied,
                    applied_unix_ms: entry.applied_unix_ms,
                    key: key.to_string(),
                })
            })
            .collect()
    }

    /// Keys to hand to the store again (their last commit failed).
    pub fn mark_unsaved(&mut self, keys: impl IntoIterator<Item = String>) {
        for key in keys {
            // Only a key still applied: one taken back and reserved again meanwhile is owed a
            // row when (if) it is applied again, not now.
            let key = MessageKey::from(key);
            if let Some(entry) = self.keys.get_mut(&key).filter(|entry| entry.answer.is_some())
                && !std::mem::replace(&mut entry.unsaved, true)
            {
                self.unsaved.push(key);
            }
        }
    }

    pub fn counts(&self) -> LedgerCounts {
        self.counts
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_answer_is_kept_small_and_given_back_byte_for_byte() {
        let made = applied_response("k-1", 4_242);
        assert!(matches!(KeptAnswer::of("k-1", made.clone()), KeptAnswer::Applied { applied_at_ms: 4_242 }));
        assert_eq!(KeptAnswer::of("k-1", made.clone()).response("k-1"), made);
        // Stored some other way (spacing, another shape): kept whole, still byte for byte.
        let odd = StoredResponse { status: 200, body: r#"{ "applied_at_ms": 4242, "key": "k-1" }"#.into() };
        assert!(matches!(KeptAnswer::of("k-1", odd.clone()), KeptAnswer::Kept(_)));
        assert_eq!(KeptAnswer::of("k-1", odd.clone()).response("k-1"), odd);
        // The bytes are those answers have always had, so keys stored before still match.
        let key = r#"odd "key" \ é"#;
        let before = json!({ "key": key, "result": "applied", "applied_at_ms": 7 }).to_string();
        assert_eq!(applied_response(key, 7).body, before.as_bytes());
    }

    fn row(key: &str, applied: u32, applied_unix_ms: u64) -> KeyRow {
        KeyRow {
            key: key.into(),
            digest: BodyDigest::of(&json!({})),
            outside: false,
            status: 200,
            response: applied_response(key, applied_unix_ms).body,
            applied,
            applied_unix_ms,
        }
    }

    fn key(name: &str) -> IdempotencyKey {
        IdempotencyKey::parse(name).unwrap()
    }

    /// Applies `n` keys `k0`.. at times 0.., as a lab's client would, and hands them to the
    /// store.
    fn applied(n: u64) -> Ledger {
        let mut ledger = Ledger::default();
        for i in 0..n {
            let k = key(&format!("k{i}"));
            ledger.reserve(&k, BodyDigest::of(&json!({})), i % 2 == 0);
            ledger.complete(&k, i, i);
            ledger.set_applied_event(&k, i + 1);
        }
        ledger.take_unsaved();
        ledger
    }

    #[test]
    fn restored_keys_start_cold_and_the_last_row_of_a_key_counts() {
        let mut ledger = Ledger::restore(LedgerCounts::default(), false);
        ledger.restore_key("k", 5, true);
        ledger.restore_key("k", 9, false);
        assert_eq!(ledger.held(), (0, 1));
        assert_eq!(ledger.outside_keys(), 0, "the last row was the lab's own");
        let digest = BodyDigest::of(&json!({}));
        assert!(matches!(ledger.lookup(&key("k"), &digest), Lookup::Stored { applied_unix_ms: Some(9) }));
        assert!(matches!(ledger.lookup(&key("other"), &digest), Lookup::New));
    }

    #[test]
    fn a_recalled_key_is_held_whole_and_answers_byte_for_byte() {
        let mut ledger = Ledger::restore(LedgerCounts::default(), false);
        ledger.restore_key("k", 9, true);
        let digest = BodyDigest::of(&json!({}));
        // Recalled for another time (a stale read): nothing changes.
        ledger.recall(&key("k"), 8, Some(row("k", 1, 8)), 100);
        assert_eq!(ledger.held(), (0, 1));
        ledger.recall(&key("k"), 9, Some(row("k", 2, 9)), 100);
        assert_eq!(ledger.held(), (1, 0));
        assert_eq!(ledger.outside_keys(), 1, "still an outside caller's key");
        let Lookup::Done(answer) = ledger.lookup(&key("k"), &digest) else { panic!("a repeat") };
        assert_eq!(answer, applied_response("k", 9));
        assert_eq!(ledger.keys[&MessageKey::from("k")].applied, 2);
        assert!(matches!(ledger.lookup(&key("k"), &BodyDigest::of(&json!(1))), Lookup::BodyMismatch));
        // The store had no row: the key is forgotten, and new.
        ledger.restore_key("gone", 3, true);
        ledger.recall(&key("gone"), 3, None, 100);
        assert!(matches!(ledger.lookup(&key("gone"), &digest), Lookup::New));
        assert_eq!(ledger.outside_keys(), 1);
    }

    #[test]
    fn past_the_cold_bound_the_oldest_keys_go_and_the_store_answers_for_them() {
        // 20 keys applied at 0..20 (even ones an outside caller's), all cooled.
        let mut ledger = applied(20);
        assert_eq!(ledger.cool(0, 20), 20);
        assert!(matches!(ledger.lookup(&key("new"), &BodyDigest::of(&json!({}))), Lookup::New));
        assert!(!ledger.cold_over(20) && ledger.cold_over(8));
        let outside = ledger.outside_keys();
        // Down to three quarters of 8, sparing k0 (a dead letter's key, say).
        assert_eq!(ledger.spill(8, ["k0"]), 14);
        assert_eq!(ledger.held(), (0, 6));
        assert_eq!(ledger.held().let_go, 14);
        assert_eq!(ledger.outside_keys(), outside, "still counted against the outside limits");
        let digest = BodyDigest::of(&json!({}));
        assert!(matches!(ledger.lookup(&key("k0"), &digest), Lookup::Stored { applied_unix_ms: Some(0) }));
        for i in 15..20 {
            let held = ledger.lookup(&key(&format!("k{i}")), &digest);
            assert!(matches!(held, Lookup::Stored { applied_unix_ms: Some(t) } if t == i), "k{i}");
        }
        // A key let go, and a key never seen, both ask the store now.
        for name in ["k3", "never"] {
            assert!(matches!(ledger.lookup(&key(name), &digest), Lookup::Stored { applied_unix_ms: None }));
        }
        // The store has k3's row: held whole again, answering byte for byte.
        ledger.found(&key("k3"), Some((row("k3", 1, 3), false)), 100);
        let Lookup::Done(answer) = ledger.lookup(&key("k3"), &digest) else { panic!("a repeat") };
        assert_eq!(answer, applied_response("k3", 3));
        // No row: new, once the store was asked (the decision says so); still asks next time.
        ledger.found(&key("never"), None, 100);
        assert!(matches!(ledger.lookup(&key("never"), &digest), Lookup::Stored { applied_unix_ms: None }));
        // An expired row: applying the key again counts as its second time.
        ledger.found(&key("k4"), Some((row("k4", 1, 4), true)), 100);
        ledger.reserve(&key("k4"), digest, false);
        ledger.complete(&key("k4"), 5, 5);
        assert_eq!(ledger.counts().applied_twice, 1);
        // Once the dedup window passes the spilled keys, their outside count goes too.
        ledger.expire(1_000, std::iter::empty());
        assert_eq!(ledger.outside_keys(), 0);
    }

    #[test]
    fn a_decision_asks_the_store_for_a_key_let_go_and_then_applies_a_new_one() {
        use crate::downstream::{Caller, Clock, Decision, DownstreamSettings, Request, decide};
        use rand::SeedableRng;
        let mut ledger = applied(4);
        ledger.cool(0, 4);
        ledger.spill(0, std::iter::empty());
        let settings = DownstreamSettings { latency_ms: [0, 0], ..Default::default() };
        let clock = Clock { now_ms: 9, unix_ms: 9 };
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let request =
            |asked| Request { digest: BodyDigest::of(&json!({})), caller: Caller::Lab, worked: false, asked };
        let first = decide(&mut ledger, &settings, &key("fresh"), request(false), clock, &mut rng);
        assert!(matches!(first, Decision::Recall { applied_unix_ms: None }), "{first:?}");
        let again = decide(&mut ledger, &settings, &key("fresh"), request(true), clock, &mut rng);
        assert!(matches!(again, Decision::Applied(_)), "{again:?}");
        assert_eq!(ledger.counts().applied, 5);
    }

    #[test]
    fn a_uuid_key_is_held_as_16_bytes_and_written_back_as_its_text() {
        let (uuid, odd) = ("0b7e1f2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b", "0B7E1F2A-3C4D-4E5F-8A9B-0C1D2E3F4A5B");
        let mut ledger = Ledger::default();
        let digest = BodyDigest::of(&json!({}));
        for (i, text) in [uuid, odd].into_iter().enumerate() {
            ledger.reserve(&key(text), digest, false);
            ledger.complete(&key(text), 7 + i as u64, 9);
        }
        assert!(ledger.keys.keys().any(|k| matches!(k, MessageKey::Uuid(_))), "the lowercase one");
        assert!(ledger.keys.contains_key(&MessageKey::Text(odd.into())), "another spelling is another key");
        let rows = ledger.take_unsaved();
        assert_eq!(rows.iter().map(|row| row.key.as_str()).collect::<Vec<_>>(), [uuid, odd]);
        assert_eq!(rows[0].response, applied_response(uuid, 7).body);
        let Lookup::Done(answer) = ledger.lookup(&key(uuid), &digest) else { panic!("a repeat") };
        assert_eq!(answer, applied_response(uuid, 7));
        for (i, text) in [uuid, odd].into_iter().enumerate() {
            ledger.set_applied_event(&key(text), 1 + i as u64);
        }
        // Cooled, its fingerprint is its text's: a repeat reads the store's row.
        assert_eq!(ledger.cool(0, 2), 2);
        assert!(matches!(ledger.lookup(&key(uuid), &digest), Lookup::Stored { applied_unix_ms: Some(9) }));
        assert!(ledger.is_applied(odd) && !ledger.is_applied("0b7e1f2a-3c4d-4e5f-8a9b-0c1d2e3f4a5c"));
    }

    #[test]
    fn cooling_and_letting_go_give_back_the_room_a_burst_took() {
        let mut ledger = applied(2_000);
        assert!(ledger.keys.capacity() >= 2_000);
        assert_eq!(ledger.cool(64, u64::MAX - 1), 2_000 - 64);
        assert_eq!(ledger.held(), (64, 1_936));
        ledger.give_back_room(64, 128);
        assert!(
            ledger.keys.capacity() < 2 * 80,
            "room for {} whole keys kept for 64",
            ledger.keys.capacity()
        );
        assert!(ledger.cold.capacity() >= 1_936);
        let let_go = ledger.spill(128, std::iter::empty());
        assert_eq!(let_go, 1_936 - 96);
        assert_eq!(ledger.held(), (64, 96));
        ledger.give_back_room(64, 128);
        assert!(
            ledger.cold.capacity() < 2 * 128,
            "room for {} cold keys kept for 128",
            ledger.cold.capacity()
        );
        // Within the room it is meant to have, a map keeps it: no shrinking and growing again.
        let room = ledger.keys.capacity();
        assert!(room >= 80);
        ledger.cool(64, u64::MAX - 1);
        ledger.give_back_room(64, 128);
        assert_eq!(ledger.keys.capacity(), room);
    }

    #[test]
    fn at_the_default_limits_steady_keys_stay_within_one_step_of_each_map() {
        // As a lab's flush does it, a key at a time: cool past the hot keys, then let the
        // oldest cold ones go past the cold limit.
        let limits = crate::config::Limits::default();
        let (hot, cold) = (limits.hot_keys_per_lab, limits.cold_keys_per_lab);
        let mut ledger = Ledger::default();
        let (mut most_whole, mut most_cold) = (0, 0);
        for i in 0..10_000u64 {
            let k = key(&format!("k{i}"));
            ledger.reserve(&k, BodyDigest::of(&json!({})), false);
            ledger.complete(&k, i, i);
            ledger.set_applied_event(&k, i + 1);
            ledger.take_unsaved();
            ledger.cool(hot, u64::MAX - 1);
            if ledger.cold_over(cold) {
                ledger.spill(cold, std::iter::empty());
            }
            ledger.give_back_room(hot, cold);
            most_whole = most_whole.max(ledger.keys.capacity());
            most_cold = most_cold.max(ledger.cold.capacity());
        }
        assert!(ledger.let_go > 7_000, "the cold keys were let go past the limit: {}", ledger.let_go);
        // A hash map holds 7/8 of its slots: 896 in 1,024, 1,792 in 2,048.
        assert!(most_whole <= 896, "whole keys took room for {most_whole}");
        assert!(most_cold <= 1_792, "fingerprints took room for {most_cold}");
    }

    #[test]
    fn only_committed_keys_past_the_newest_cool_and_the_oldest_first() {
        let mut ledger = applied(10);
        assert_eq!(ledger.cool(8, 10), 0, "within a quarter over, nothing moves");
        assert_eq!(ledger.cool(4, 10), 6);
        assert_eq!(ledger.held(), (4, 6));
        let digest = BodyDigest::of(&json!({}));
        for i in 0..6 {
            let cold = ledger.lookup(&key(&format!("k{i}")), &digest);
            assert!(matches!(cold, Lookup::Stored { applied_unix_ms } if applied_unix_ms == Some(i)), "k{i}");
        }
        assert!(matches!(ledger.lookup(&key("k6"), &digest), Lookup::Done(_)));
        assert_eq!(ledger.outside_keys(), 5, "cold keys still count");

        // Keys whose events are not committed, or whose rows the store has not taken, stay.
        let mut ledger = applied(10);
        ledger.complete(&key("k0"), 20, 20);
        ledger.set_applied_event(&key("k0"), 20);
        assert_eq!(ledger.cool(0, 5), 4, "k1 to k4 only: k0 was applied again, after event 5");
        assert!(matches!(ledger.lookup(&key("k0"), &digest), Lookup::Done(_)));
        let again = key("k9");
        ledger.complete(&again, 30, 30);
        assert_eq!(ledger.cool(0, u64::MAX - 1), 4, "k5 to k8; k0 and k9 are not yet in the store");
        ledger.take_unsaved();
        ledger.set_applied_event(&again, 31);
        assert_eq!(ledger.cool(0, 31), 2);
        assert_eq!(ledger.held(), (0, 10));
    }

    #[test]
    fn the_store_takes_each_applied_key_once_in_the_order_applied() {
        let mut ledger = Ledger::default();
        for name in ["b", "a", "c"] {
            ledger.reserve(&key(name), BodyDigest::of(&json!({})), false);
            ledger.complete(&key(name), 1, 1);
        }
        ledger.unapply(&key("c"));
        ledger.complete(&key("b"), 2, 2); // applied again before the store took it
        let taken: Vec<(String, u32)> =
            ledger.take_unsaved().into_iter().map(|r| (r.key, r.applied)).collect();
        assert_eq!(taken, [("b".into(), 2), ("a".into(), 1)]);
        assert!(ledger.take_unsaved().is_empty());
        // A failed commit hands its keys back; a key forgotten meanwhile is not written.
        ledger.mark_unsaved(["a".to_owned(), "c".to_owned()]);
        assert_eq!(ledger.take_unsaved().into_iter().map(|r| r.key).collect::<Vec<_>>(), ["a"]);

        // A key whose commit failed, taken back, and reserved again by the client's retry
        // before the failed rows came back: its row is owed once the retry applies it.
        ledger.complete(&key("a"), 3, 3);
        let taken = ledger.take_unsaved();
        ledger.unapply(&key("a"));
        ledger.reserve(&key("a"), BodyDigest::of(&json!({})), false);
        ledger.mark_unsaved(taken.into_iter().map(|row| row.key));
        assert!(ledger.take_unsaved().is_empty(), "a reservation has no row");
        ledger.complete(&key("a"), 4, 4);
        assert_eq!(ledger.take_unsaved().into_iter().map(|r| r.key).collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn a_key_taken_back_after_it_was_held_cold_is_forgotten() {
        let mut ledger = applied(3);
        ledger.cool(0, 3);
        assert_eq!(ledger.held(), (0, 3));
        assert!(ledger.unapply(&key("k0")).is_some());
        assert_eq!((ledger.counts().applied, ledger.outside_keys()), (2, 1));
        assert!(matches!(ledger.lookup(&key("k0"), &BodyDigest::of(&json!({}))), Lookup::New));
    }

    #[test]
    fn a_key_read_back_from_the_store_counts_as_hot_from_then() {
        let mut ledger = applied(6);
        ledger.cool(0, 6);
        ledger.recall(&key("k0"), 0, Some(row("k0", 1, 0)), 100);
        let k9 = key("k9");
        ledger.reserve(&k9, BodyDigest::of(&json!({})), false);
        ledger.complete(&k9, 50, 50);
        ledger.take_unsaved();
        ledger.set_applied_event(&k9, 7);
        assert_eq!(ledger.cool(1, 7), 1);
        let digest = BodyDigest::of(&json!({}));
        assert!(matches!(ledger.lookup(&key("k0"), &digest), Lookup::Done(_)), "read back at 100");
        assert!(matches!(ledger.lookup(&k9, &digest), Lookup::Stored { applied_unix_ms: Some(50) }));
    }

    #[test]
    fn cold_keys_expire_with_the_window() {
        let mut ledger = applied(10);
        ledger.cool(2, 10);
        assert_eq!(ledger.expire(7, []), 7, "k0 to k6, all cold");
        assert_eq!(ledger.held(), (2, 1));
        assert_eq!(ledger.outside_keys(), 1, "k8 is an outside caller's");
        let digest = BodyDigest::of(&json!({}));
        assert!(matches!(ledger.lookup(&key("k3"), &digest), Lookup::New));
    }

    #[test]
    fn a_digest_is_the_same_for_the_same_value_and_reads_back() {
        let a = BodyDigest::of(&json!({"a": 1, "b": [1, 2]}));
        let b = BodyDigest::of(&serde_json::from_str(r#"{ "b": [1,2], "a": 1 }"#).unwrap());
        assert_eq!(a, b, "key order and whitespace do not matter");
        assert_ne!(a, BodyDigest::of(&json!({"a": 2, "b": [1, 2]})));
        assert_eq!(BodyDigest::parse_stored(&a.to_string()), Ok(a));
        assert_eq!(BodyDigest::parse_stored(r#"{"b":[1,2],"a":1}"#), Ok(a), "rows from before digests");
        assert!(a.to_string().starts_with("sha256:") && a.to_string().len() == 71);
    }

    #[test]
    fn keys_still_needed_outlive_the_window_and_a_key_applied_after_it_counts_twice() {
        let mut ledger = applied(6);
        ledger.cool(2, 6);
        // k1 (cold) and k5 (hot) belong to messages that may still send them.
        assert_eq!(ledger.expire(10, ["k1", "k5"]), 4);
        let digest = BodyDigest::of(&json!({}));
        assert!(matches!(ledger.lookup(&key("k1"), &digest), Lookup::Stored { applied_unix_ms: Some(1) }));
        assert!(matches!(ledger.lookup(&key("k5"), &digest), Lookup::Done(_)));
        assert_eq!(ledger.expired_keys(), 4);
        // k0 is new to the window, but applying it again is its second application.
        assert!(matches!(ledger.lookup(&key("k0"), &digest), Lookup::New));
        ledger.reserve(&key("k0"), digest, false);
        ledger.complete(&key("k0"), 20, 20);
        assert_eq!(ledger.counts().applied_twice, 1);
        assert_eq!(ledger.counts().applied, 6, "still six keys applied");
        // Taken back, it no longer counts.
        ledger.unapply(&key("k0"));
        assert_eq!(ledger.counts().applied_twice, 0);
        // Read back from the store after a restart, the ledger still knows.
        let mut restored = Ledger::restore(LedgerCounts::default(), false);
        restored.restore_expired("k3");
        restored.reserve(&key("k3"), digest, true);
        restored.complete(&key("k3"), 30, 30);
        assert_eq!(restored.counts().applied_twice, 1);
    }
}

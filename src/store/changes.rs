//! What the store is owed by a lab and what it gives back: the rows changed since the last
//! commit, and a lab's parts as they were kept. The lab composes them from its messages, its
//! dead letters, its endpoint and its client.

use crate::callers::{CallerChanges, OutsideMessage};
use crate::client::{BreakerRows, StoredBreakers};
use crate::domain::{BinChanges, LoadBin, Marker, Message};
use crate::downstream::{DownstreamSettings, KeyNaming, KeyRow, Ledger, Revert};
use crate::retry::Policy;

/// The rows a set of changes touched, serialized for the store.
#[derive(Debug, Default)]
pub struct RecordChanges {
    /// Everything of the lab's was deleted first (a reset).
    pub cleared: bool,
    pub messages: Vec<(u64, String)>,
    pub deleted_messages: Vec<u64>,
    pub dead_letters: Vec<(u64, u64, String)>,
    pub deleted_dead_letters: Vec<u64>,
    pub keys: Vec<KeyRow>,
    /// Keys applied before this wall-clock time expired (the dedup window moved on)...
    pub keys_expired_before: Option<u64>,
    /// ...but for these, whose messages may still send them.
    pub keys_kept: Vec<String>,
    /// Keys taken back one by one (the store could not keep their write), with when each was
    /// applied: its row is found by that time.
    pub removed_keys: Vec<(String, u64)>,
    /// How the lab's key rows are found by name (see migration 12).
    pub naming: KeyNaming,
    /// While they are being named (`KeyNaming::NameAll`): the rows applied before this time are
    /// named, so the next chunk starts here rather than reading them again.
    pub naming_from_ms: u64,
    /// Load bins changed (and dropped).
    pub load: BinChanges,
    /// Every marker, as JSON, when they changed.
    pub markers: Option<String>,
    /// The breaker histories that changed: each client's, and how many stood open.
    pub breakers: BreakerRows,
    /// Outside callers' messages changed (and whether all were cleared first).
    pub outside: CallerChanges,
}

/// What the store keeps of a lab's state.
#[derive(Debug)]
pub struct RecordParts {
    pub downstream: DownstreamSettings,
    pub revert: Option<Revert>,
    pub policy: Policy,
    pub ledger: Ledger,
    pub epoch: u64,
    pub next_message_id: u64,
    pub messages: Vec<Message>,
    pub load_bins: Vec<LoadBin>,
    pub markers: Vec<Marker>,
    pub breakers: StoredBreakers,
    pub outside_messages: Vec<OutsideMessage>,
    /// Delivered messages that left the window of settled messages.
    pub forgotten_delivered: u64,
}

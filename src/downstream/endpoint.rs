//! The endpoint's whole state, owned in one place: its settings and their timed change, the
//! ledger of idempotency keys, the throttled mode's rate limit and the overloaded mode's
//! workers. It also notes what of the ledger the store has not yet been told.

use rand::Rng;

use super::{
    BodyDigest, Caller, Decision, DownstreamSettings, DownstreamView, Entry, Gate, Gcra, IdempotencyKey,
    KeyRow, Ledger, Mode, Revert, Waiter, decide,
};

/// One lab's endpoint; `W` is a request waiting in the overloaded mode's line, as its caller
/// holds it.
#[derive(Debug)]
pub struct Endpoint<W> {
    pub settings: DownstreamSettings,
    /// While a timed setting lasts: when and to what the downstream goes back.
    pub revert: Option<Revert>,
    pub ledger: Ledger,
    /// The throttled mode's rate limit.
    throttle: Gcra,
    /// The overloaded mode's workers and queue.
    gate: Gate<W>,
    /// Keys applied before this wall-clock time expired (the dedup window moved on)...
    expired_before: Option<u64>,
    /// ...but for these, whose messages may still send them.
    kept: Vec<String>,
    /// Keys taken back one by one (the store could not keep their write).
    removed: Vec<String>,
}

/// What of the ledger the store has not been told yet.
#[derive(Debug, Default)]
pub struct KeyChanges {
    pub keys: Vec<KeyRow>,
    /// Keys applied before this wall-clock time expired...
    pub expired_before: Option<u64>,
    /// ...but for these, whose messages may still send them.
    pub kept: Vec<String>,
    /// Keys taken back one by one.
    pub removed: Vec<String>,
}

/// How a request gets past the mode's gate; `T` is the caller's end of its place in line.
#[derive(Debug)]
pub enum Passage<T> {
    /// Straight on.
    Open,
    /// A worker of the overloaded downstream is this request's; give it back with
    /// `Endpoint::leave`.
    Worker,
    /// Wait in line for a worker (it is this request's when `T` says so).
    Queued(T),
    /// Over the rate limit: 429.
    Throttled { retry_after_s: u64 },
    /// No worker and no room in the queue: 503 at once.
    Shed { retry_after_s: u64 },
}

/// The request being decided: its body's digest and who sent it.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    pub digest: BodyDigest,
    pub caller: Caller,
}

/// The two clocks a decision reads: lab time and wall-clock time, in ms.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub now_ms: u64,
    pub unix_ms: u64,
}

impl<W> Default for Endpoint<W> {
    fn default() -> Self {
        Endpoint {
            settings: Default::default(),
            revert: None,
            ledger: Default::default(),
            throttle: Default::default(),
            gate: Default::default(),
            expired_before: None,
            kept: Vec::new(),
            removed: Vec::new(),
        }
    }
}

impl<W: Waiter> Endpoint<W> {
    /// The endpoint as the store kept it; its gate starts empty.
    pub fn restore(view: DownstreamView, ledger: Ledger) -> Self {
        Endpoint { settings: view.settings, revert: view.revert, ledger, ..Default::default() }
    }

    pub fn view(&self) -> DownstreamView {
        DownstreamView { settings: self.settings, revert: self.revert }
    }

    /// Lets a request arriving at `now_ms` past the mode's gate, or refuses it; `line` makes
    /// its place in line when it must wait.
    pub fn pass<T>(&mut self, now_ms: u64, line: impl FnOnce() -> (W, T)) -> Passage<T> {
        let settings = self.settings;
        match settings.mode {
            Mode::Throttled => match self.throttle.check(settings.rate_per_s, settings.burst, now_ms) {
                Ok(()) => Passage::Open,
                // Whole seconds until it would be allowed, at least 1 (RFC 9110 §10.2.3).
                Err(wait_ms) => Passage::Throttled { retry_after_s: wait_ms.div_ceil(1000).max(1) },
            },
            Mode::Overloaded => match self.gate.enter(settings.capacity, settings.queue, line) {
                Entry::Now => Passage::Worker,
                Entry::Queued(turn) => Passage::Queued(turn),
                Entry::Full => Passage::Shed { retry_after_s: settings.retry_after_s },
            },
            _ => Passage::Open,
        }
    }

    /// An overloaded downstream's worker is done: it goes to the next in line.
    pub fn leave(&mut self) {
        self.gate.leave(self.settings.capacity);
    }

    /// Puts new settings in force; a larger capacity, or another mode, lets the queue in
    /// front of the workers move.
    pub fn apply(&mut self, settings: DownstreamSettings) {
        self.settings = settings;
        let capacity = if settings.mode == Mode::Overloaded { settings.capacity } else { u32::MAX };
        self.gate.admit_waiting(capacity);
    }

    /// Decides a request that got past the gate against the ledger (see `downstream::decide`).
    pub fn decide(
        &mut self,
        key: &IdempotencyKey,
        request: Request,
        clock: Clock,
        rng: &mut impl Rng,
    ) -> Decision {
        decide(&mut self.ledger, &self.settings, key, request, clock, rng)
    }

    /// Takes back a write the store could not keep; its row (if any) goes with the next commit.
    pub fn unapply(&mut self, key: &IdempotencyKey) {
        if self.ledger.unapply(key) {
            self.removed.push(key.as_str().to_owned());
        }
    }

    /// Forgets applied keys older than the dedup window, but never one of `needed` (the keys
    /// of messages that may still send them: owed a delivery, or dead letters a person may
    /// replay), so a key lives at least as long as its message can use it; returns how many.
    pub fn expire_keys(&mut self, applied_before_unix_ms: u64, needed: &[&str]) -> usize {
        let count = self.ledger.expire(applied_before_unix_ms, needed.iter().copied());
        if count > 0 {
            // The store expires by the same cutoff (its rows are in the order keys were
            // applied), sparing the same keys: those of them as old as the cutoff are named.
            self.kept = needed
                .iter()
                .filter(|key| self.ledger.applied_unix_ms(key).is_some_and(|at| at < applied_before_unix_ms))
                .map(|key| (*key).to_owned())
                .collect();
            self.expired_before = self.expired_before.max(Some(applied_before_unix_ms));
        }
        count
    }

    /// A reset: the ledger starts empty (the store clears its rows); settings stay.
    pub fn reset(&mut self) {
        self.ledger = Ledger::default();
        self.expired_before = None;
        self.kept.clear();
        self.removed.clear();
    }

    /// What the store has not been told yet, taken.
    pub fn take_changes(&mut self) -> KeyChanges {
        KeyChanges {
            keys: self.ledger.take_unsaved(),
            expired_before: self.expired_before.take(),
            kept: std::mem::take(&mut self.kept),
            removed: std::mem::take(&mut self.removed),
        }
    }

    /// Takes back changes the store could not commit, so the next `take_changes` has them.
    pub fn restore_changes(&mut self, changes: KeyChanges) {
        if self.expired_before.is_none() {
            // A later expiry's list of kept keys is the newer one; else these come back.
            self.kept = changes.kept;
        }
        self.expired_before = self.expired_before.max(changes.expired_before);
        self.removed.extend(changes.removed);
        self.ledger.mark_unsaved(changes.keys.into_iter().map(|row| row.key));
    }
}

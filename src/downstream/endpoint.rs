//! The endpoint's whole state, owned in one place: its settings and their timed change, the
//! ledger of idempotency keys, and the pipeline in front of the work (the throttled mode's
//! rate, the overloaded mode's workers and their line, the keys in line). It also notes
//! what of the ledger the store has not yet been told.

use rand::Rng;

use super::{
    BodyDigest, Caller, Decision, DownstreamSettings, DownstreamView, Hints, IdempotencyKey, KeyRow, Ledger,
    Moved, Passage, Pipeline, Revert, Stages, Waiter, decide,
};

/// One lab's endpoint; `W` is a request waiting in the overloaded mode's line, as its caller
/// holds it.
#[derive(Debug)]
pub struct Endpoint<W> {
    /// The settings in force: change them with `apply`, so the pipeline follows.
    pub settings: DownstreamSettings,
    /// While a timed setting lasts: when and to what the downstream goes back.
    pub revert: Option<Revert>,
    pub ledger: Ledger,
    /// What stands between a request and its work, as the settings configure it.
    stages: Stages,
    pipeline: Pipeline<W>,
    /// Keys applied before this wall-clock time expired (the dedup window moved on)...
    expired_before: Option<u64>,
    /// ...but for these, whose messages may still send them.
    kept: Vec<String>,
    /// Keys taken back one by one (the store could not keep their write).
    removed: Vec<(String, u64)>,
}

/// The endpoint's line and workers as the snapshot shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct LineView {
    /// Requests waiting in line.
    pub waiting: usize,
    /// Requests holding a worker.
    pub in_work: u32,
    /// How many may hold a worker at once (the overloaded mode's); null without a limit.
    pub limit: Option<u32>,
    /// The adaptive concurrency limit on requests in line and in work now; null with none.
    pub adaptive_limit: Option<u32>,
    /// The line is served newest first now.
    pub lifo: bool,
}

/// What of the ledger the store has not been told yet.
#[derive(Debug, Default)]
pub struct KeyChanges {
    pub keys: Vec<KeyRow>,
    /// Keys applied before this wall-clock time expired...
    pub expired_before: Option<u64>,
    /// ...but for these, whose messages may still send them.
    pub kept: Vec<String>,
    /// Keys taken back one by one, with when each was applied.
    pub removed: Vec<(String, u64)>,
}

/// The request being decided: its body's digest and who sent it.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    pub digest: BodyDigest,
    pub caller: Caller,
    /// Its latency was already waited out (a worker held it): the write is applied at once.
    pub worked: bool,
    /// The store was asked for its key by name and had no current row of it (see
    /// `Lookup::Stored`): a key the ledger does not hold is new.
    pub asked: bool,
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
            stages: Stages::of(&DownstreamSettings::default()),
            pipeline: Default::default(),
            expired_before: None,
            kept: Vec::new(),
            removed: Vec::new(),
        }
    }
}

impl<W: Waiter> Endpoint<W> {
    /// The endpoint as the store kept it; its gate starts empty.
    pub fn restore(view: DownstreamView, ledger: Ledger) -> Self {
        Endpoint {
            settings: view.settings,
            stages: Stages::of(&view.settings),
            revert: view.revert,
            ledger,
            ..Default::default()
        }
        .retuned()
    }

    fn retuned(mut self) -> Self {
        self.pipeline.retune(&self.stages);
        self
    }

    pub fn view(&self) -> DownstreamView {
        DownstreamView { settings: self.settings, revert: self.revert }
    }

    /// Lets a request with `key` arriving at `now_ms` past the pipeline, or refuses it;
    /// `place` makes its place in line when it must wait.
    pub fn pass<T>(
        &mut self,
        (key, hints): (&IdempotencyKey, Hints),
        now_ms: u64,
        rng: &mut impl Rng,
        place: impl FnOnce() -> (W, T),
    ) -> Passage<T> {
        self.pipeline.pass(&self.stages, (key.as_str(), hints), now_ms, rng, place)
    }

    /// The requests dropped from the line as others arrived (a retry shed for a first attempt).
    pub fn take_dropped(&mut self) -> Vec<(String, super::Dropped)> {
        self.pipeline.take_dropped()
    }

    /// A worker's work is done at `now_ms`: it goes to the next in line.
    pub fn leave(&mut self, now_ms: u64, rng: &mut impl Rng) -> Moved {
        self.pipeline.leave(&self.stages, now_ms, rng)
    }

    /// The line and the workers at `now_ms`.
    pub fn line_view(&self, now_ms: u64) -> LineView {
        LineView {
            waiting: self.pipeline.waiting(),
            in_work: self.pipeline.in_work(),
            limit: self.stages.workers,
            adaptive_limit: self.pipeline.adaptive_limit(),
            lifo: self.pipeline.lifo(now_ms),
        }
    }

    /// The request with `key` has left the line and its work at `now_ms`; `gone` when its
    /// client had given up.
    pub fn release(&mut self, key: &IdempotencyKey, now_ms: u64, gone: bool) {
        self.pipeline.release(key.as_str(), now_ms, gone);
    }

    /// A request the defences' filters let through was answered at `now_ms` (`success`: under
    /// 500).
    pub fn answered(&mut self, now_ms: u64, success: bool) {
        self.pipeline.answered(now_ms, success);
    }

    /// Whether a defence hears the answers (admission control does).
    pub fn hears_answers(&self) -> bool {
        self.pipeline.hears_answers()
    }

    /// The adaptive concurrency limit now, if one is on.
    pub fn adaptive_limit(&self) -> Option<u32> {
        self.pipeline.adaptive_limit()
    }

    /// Puts new settings in force; a higher limit, or another mode, lets the line in front of
    /// the workers move.
    pub fn apply(&mut self, settings: DownstreamSettings, now_ms: u64, rng: &mut impl Rng) -> Moved {
        self.settings = settings;
        self.stages = Stages::of(&settings);
        self.pipeline.retune(&self.stages);
        self.pipeline.let_waiting_on(&self.stages, now_ms, rng)
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
        if let Some(applied_unix_ms) = self.ledger.unapply(key) {
            self.removed.push((key.as_str().to_owned(), applied_unix_ms));
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

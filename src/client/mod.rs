//! A client's live state: its circuit breaker with the history of its states, and its retry
//! budget's window. One value per client, owned whole, so a lab can hold several, each with
//! its own breaker and budget; `Clients` holds them all with the policy they follow. Pure:
//! the caller passes `now`. `attempt` decides what follows each attempt of a message.

pub mod attempt;
mod clients;

pub use clients::Clients;

use serde::{Deserialize, Serialize};

use crate::domain::History;
use crate::retry::{Admission, Breaker, BreakerState, Policy, RetryBudget};

/// The breaker's changes of state kept per client; the oldest go first.
const MAX_BREAKER_CHANGES: usize = 1_000;

/// A client's breaker history, the newest `MAX_BREAKER_CHANGES`.
pub type BreakerChanges = History<BreakerChange, MAX_BREAKER_CHANGES>;

/// The breaker changed state at `at_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BreakerChange {
    pub at_ms: u64,
    pub state: BreakerState,
}

/// One client's live state; the policy it follows is its `Clients`'.
#[derive(Debug, Default)]
pub struct ClientState {
    breaker: Breaker,
    breaker_changes: BreakerChanges,
    budget: RetryBudget,
}

impl ClientState {
    /// The client as the store kept it: its breaker's history (the breaker itself starts
    /// closed, see `restarted`).
    pub fn restore(breaker_changes: Vec<BreakerChange>) -> Self {
        ClientState { breaker_changes: BreakerChanges::restore(breaker_changes), ..Default::default() }
    }

    pub fn breaker_state(&self) -> BreakerState {
        self.breaker.state()
    }

    /// Every change of the breaker's state, oldest first.
    pub fn breaker_changes(&self) -> &[BreakerChange] {
        self.breaker_changes.all()
    }

    /// Asks the breaker whether the next attempt may be sent; returns the state it changed to,
    /// if it did.
    pub fn admit(&mut self, policy: &Policy, now_ms: u64) -> (Admission, Option<BreakerState>) {
        let Some(settings) = policy.breaker else { return (Admission::Send, None) };
        let (admission, changed) = self.breaker.admit(&settings, now_ms);
        (admission, changed.inspect(|&state| self.changed(state, now_ms)))
    }

    /// Tells the breaker how a sent attempt ended; returns the state it changed to, if it did.
    pub fn record(&mut self, policy: &Policy, failed: bool, now_ms: u64) -> Option<BreakerState> {
        let settings = policy.breaker?;
        let changed = self.breaker.record(&settings, failed, now_ms);
        changed.inspect(|&state| self.changed(state, now_ms))
    }

    /// Probes that were cut off (the client died) never answer.
    pub fn forget_probes(&mut self) {
        self.breaker.forget_probes();
    }

    /// Counts a first attempt in the retry budget's window.
    pub fn first_attempt(&mut self, now_ms: u64) {
        self.budget.first_attempt(now_ms);
    }

    /// Whether the retry budget allows a retry now (always, without one); counts it if so.
    pub fn allows_retry(&mut self, policy: &Policy, now_ms: u64) -> bool {
        let Some(settings) = policy.retry_budget else { return true };
        self.budget.try_retry(&settings, now_ms)
    }

    /// Follows another policy; without a breaker, an open one closes (returned if so).
    fn follow(&mut self, policy: &Policy, now_ms: u64) -> Option<BreakerState> {
        let closed = policy.breaker.is_none() && self.breaker.state() != BreakerState::Closed;
        closed.then(|| {
            self.breaker = Breaker::default();
            self.changed(BreakerState::Closed, now_ms);
            BreakerState::Closed
        })
    }

    /// The server restarted: the breaker starts closed again, and its history says so
    /// (returned when the history said otherwise).
    pub fn restarted(&mut self, now_ms: u64) -> Option<BreakerState> {
        let last = self.breaker_changes.all().last().map(|change| change.state);
        last.is_some_and(|last| last != BreakerState::Closed).then(|| {
            self.changed(BreakerState::Closed, now_ms);
            BreakerState::Closed
        })
    }

    /// A reset: the breaker, its history and the budget start afresh; the policy stays.
    pub fn reset(&mut self) {
        self.breaker = Breaker::default();
        self.breaker_changes.clear();
        self.budget = RetryBudget::default();
    }

    /// The breaker's history as JSON, when it changed since the last call.
    pub fn take_changes(&mut self) -> Option<String> {
        self.breaker_changes.take_unsaved()
    }

    /// The store could not commit the history: it goes with the next commit.
    pub fn changes_not_saved(&mut self) {
        self.breaker_changes.mark_unsaved();
    }

    fn changed(&mut self, state: BreakerState, now_ms: u64) {
        self.breaker_changes.push(BreakerChange { at_ms: now_ms, state });
    }
}

/// How many clients' breakers stand in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct BreakerCounts {
    pub closed: u32,
    pub open: u32,
    pub half_open: u32,
}

impl BreakerCounts {
    pub fn of<'a>(clients: impl IntoIterator<Item = &'a ClientState>) -> Self {
        let mut counts = BreakerCounts::default();
        for client in clients {
            match client.breaker_state() {
                BreakerState::Closed => counts.closed += 1,
                BreakerState::Open => counts.open += 1,
                BreakerState::HalfOpen => counts.half_open += 1,
            }
        }
        counts
    }
}

/// The clients' breakers at `at_ms`, after one of them changed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct BreakerShare {
    pub at_ms: u64,
    #[serde(flatten)]
    pub counts: BreakerCounts,
}

/// The shares kept per lab; the oldest go first.
pub type BreakerShares = History<BreakerShare, MAX_BREAKER_CHANGES>;

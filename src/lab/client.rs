//! The lab's clients' protections. A policy runs `clients` independent clients, as the
//! instances of a scaled-out service would: each message belongs to one (round-robin by id),
//! and each client has its own circuit breaker and retry budget, shared by its messages only,
//! as a real instance has one per dependency. The state is each client's own
//! (`client::ClientState`); here each change of a breaker becomes an event.

use super::{Lab, LabState};
use crate::client::{BreakerCounts, BreakerShare, ClientState};
use crate::events::{ClientsView, Event};
use crate::retry::{Admission, BreakerState};

/// The client a message belongs to: round-robin by its id.
fn client_index(state: &LabState, message_id: u64) -> usize {
    (message_id.saturating_sub(1) % u64::from(state.client.policy.clients.max(1))) as usize
}

fn client_mut(state: &mut LabState, index: usize) -> &mut ClientState {
    match index {
        0 => &mut state.client,
        i => &mut state.others[i - 1],
    }
}

impl Lab {
    /// The client message `message_id` belongs to (0 for the first).
    pub fn client_of(&self, message_id: u64) -> usize {
        client_index(&self.lock(), message_id)
    }

    /// Asks the breaker of the message's client whether its next attempt may be sent.
    pub fn breaker_admit(&self, message_id: u64) -> Admission {
        let mut state = self.lock();
        let now = self.now_ms();
        let index = client_index(&state, message_id);
        let (admission, changed) = client_mut(&mut state, index).admit(now);
        self.client_breaker_changed(&mut state, index, changed, now);
        admission
    }

    /// Tells the breaker of the message's client how a sent attempt ended.
    pub fn breaker_record(&self, message_id: u64, failed: bool) {
        let mut state = self.lock();
        let now = self.now_ms();
        let index = client_index(&state, message_id);
        let changed = client_mut(&mut state, index).record(failed, now);
        self.client_breaker_changed(&mut state, index, changed, now);
    }

    fn client_breaker_changed(
        &self,
        state: &mut LabState,
        index: usize,
        changed: Option<BreakerState>,
        now: u64,
    ) {
        if index == 0 {
            self.breaker_changed(state, changed, now);
        } else if changed.is_some() {
            self.shares_changed(state, now);
        }
    }

    /// Publishes the first client's breaker's new state, if it changed (and, with several
    /// clients, how many breakers are open now).
    pub(super) fn breaker_changed(&self, state: &mut LabState, changed: Option<BreakerState>, now: u64) {
        if let Some(changed) = changed {
            self.publish(state, &Event::BreakerChanged { state: changed }, now);
            if !state.others.is_empty() {
                self.shares_changed(state, now);
            }
        }
    }

    fn shares_changed(&self, state: &mut LabState, now: u64) {
        let counts = BreakerCounts::of(std::iter::once(&state.client).chain(&state.others));
        state.shares.push(BreakerShare { at_ms: now, counts });
        let clients = clients_view(state);
        self.publish(state, &Event::Clients { clients }, now);
    }

    /// Makes the other clients match the policy: as many as it runs, each following it.
    pub(super) fn sync_clients(&self, state: &mut LabState, now: u64) {
        let policy = state.client.policy;
        let count = policy.clients.max(1) as usize;
        let before = state.others.len();
        state.others.truncate(count - 1);
        for other in &mut state.others {
            // A breaker turned off closes; the clients' share says so below.
            other.set_policy(policy, now);
        }
        while state.others.len() < count - 1 {
            state.others.push(ClientState::following(policy));
        }
        if before != state.others.len() || !state.others.is_empty() {
            let counts = BreakerCounts::of(std::iter::once(&state.client).chain(&state.others));
            if state.shares.all().last().is_none_or(|last| last.counts != counts) {
                self.shares_changed(state, now);
            }
        }
    }

    /// Counts a first attempt in the retry budget's window of the message's client.
    pub fn budget_first_attempt(&self, message_id: u64) {
        let now = self.now_ms();
        let mut state = self.lock();
        let index = client_index(&state, message_id);
        client_mut(&mut state, index).first_attempt(now);
    }

    /// Whether the retry budget of the message's client allows a retry now (always, without
    /// one); counts it if so.
    pub fn budget_allows_retry(&self, message_id: u64) -> bool {
        let now = self.now_ms();
        let mut state = self.lock();
        let index = client_index(&state, message_id);
        client_mut(&mut state, index).allows_retry(now)
    }

    /// How long one round may last, and the setting that says so: the policy's `max_total_ms`
    /// when set and shorter, else the server's `max_retry_duration_ms`, which the dedup window
    /// is sized to cover.
    pub fn round_budget(&self, policy: &crate::retry::Policy) -> (u64, &'static str) {
        let server = self.limits.max_retry_duration_ms;
        match policy.max_total_ms {
            0 => (server, "max_retry_duration_ms"),
            own if own <= server => (own, "max_total_ms"),
            _ => (server, "max_retry_duration_ms"),
        }
    }
}

/// The clients as the snapshot and the `clients` event show them.
pub(super) fn clients_view(state: &LabState) -> ClientsView {
    ClientsView {
        count: state.client.policy.clients.max(1),
        breakers: BreakerCounts::of(std::iter::once(&state.client).chain(&state.others)),
        changes: state.shares.all().to_vec(),
    }
}

//! A lab's clients, all alike: the policy they follow (held once), each client's state in one
//! list, and what they share: the protections the policy lists as `shared` (made once, each
//! client holding the same one), and the history of how many breakers stood open. The store
//! keeps every client's breaker history and that shared history; the rest of a client's state
//! is live only and starts fresh after a restart.

use rand::Rng;

use super::{Admit, BreakerChange, BreakerCounts, BreakerShare, BreakerShares, ClientState, ProtectionView};
use crate::retry::protection::{Ended, Guards, Protection, ProtectionKind, Scope};
use crate::retry::{BreakerState, Policy};

/// The breaker histories as the store kept them.
#[derive(Debug, Default)]
pub struct StoredBreakers {
    /// Each client that had a history: its place in the list, and its changes, oldest first.
    pub clients: Vec<(u32, Vec<BreakerChange>)>,
    /// How many breakers stood in each state after each change, oldest first.
    pub shares: Vec<BreakerShare>,
}

/// The breaker histories the store is owed, each as JSON, written whole.
#[derive(Debug, Default)]
pub struct BreakerRows {
    /// Each client whose history changed: its place in the list, and its whole history.
    pub clients: Vec<(u32, String)>,
    /// The clients from this place on are gone (the policy runs fewer): their rows go too.
    pub gone_from: Option<u32>,
    /// The shared history of how many breakers stood in each state, when it changed.
    pub shares: Option<String>,
}

#[derive(Debug)]
pub struct Clients {
    policy: Policy,
    /// One per client the policy runs (at least one), in order.
    each: Vec<ClientState>,
    /// Shared by all: how many breakers stood in each state after each change.
    shares: BreakerShares,
    /// The protections the policy lists, the shared ones made once.
    guards: Guards,
    /// The clients from this place on were dropped since the store last heard.
    gone_from: Option<u32>,
}

impl Default for Clients {
    fn default() -> Self {
        Clients::restore(Policy::default(), StoredBreakers::default())
    }
}

impl Clients {
    /// The clients as the store kept them: the policy, and every breaker history (a history
    /// of a client the policy no longer runs is let go, in the store too).
    pub fn restore(policy: Policy, stored: StoredBreakers) -> Self {
        let mut each = Vec::new();
        each.resize_with(count(&policy), ClientState::default);
        let mut gone_from = None;
        for (index, changes) in stored.clients {
            match each.get_mut(index as usize) {
                Some(client) => *client = ClientState::restore(changes),
                None => gone_from = Some(each.len() as u32),
            }
        }
        let shares = BreakerShares::restore(stored.shares);
        let mut clients = Clients { policy, each, shares, guards: Guards::default(), gone_from };
        clients.guard_afresh();
        clients
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The client a message belongs to: round-robin by its id.
    pub fn of(&self, message_id: u64) -> usize {
        (message_id.saturating_sub(1) % self.each.len() as u64) as usize
    }

    /// The policy, and client `index` to decide with it.
    pub fn client_mut(&mut self, index: usize) -> (&Policy, &mut ClientState) {
        (&self.policy, &mut self.each[index])
    }

    /// The first client (the snapshot's `breaker` is its breaker).
    pub fn first(&self) -> &ClientState {
        &self.each[0]
    }

    /// Asks client `index`'s protections whether attempt `n` may be sent.
    pub fn admit(&mut self, index: usize, n: u32, now_ms: u64, rng: &mut dyn Rng) -> Admit {
        self.each[index].admit(&self.policy, n, now_ms, rng)
    }

    /// Tells client `index`'s protections that attempt `n` was sent.
    pub fn sent(&mut self, index: usize, n: u32, now_ms: u64) {
        self.each[index].sent(&self.policy, n, now_ms);
    }

    /// Tells client `index`'s protections that attempt `n`, let go by them all, is not sent
    /// after all: what the gates handed out is given back.
    pub fn not_sent(&mut self, index: usize, n: u32) {
        self.each[index].not_sent(&self.policy, n);
    }

    /// Tells client `index`'s protections that sent attempt `n` was cancelled before its
    /// answer.
    pub fn cancelled(&mut self, index: usize, n: u32) {
        self.each[index].cancelled(&self.policy, n);
    }

    /// Tells client `index`'s protections how a sent attempt ended; the breaker's new state,
    /// if it changed.
    pub fn ended(&mut self, index: usize, ended: &Ended, now_ms: u64) -> Option<BreakerState> {
        self.each[index].ended(&self.policy, ended, now_ms)
    }

    /// The retry budget and each protection the policy lists, as they stand now; a level is
    /// the mean over the clients that hold one each.
    pub fn protections(&self, now_ms: u64) -> Vec<ProtectionView> {
        let mut views = Vec::new();
        if let Some(settings) = self.policy.retry_budget {
            let reports = self.each.iter().map(|client| client.budget.report(&settings, now_ms));
            views.push(ProtectionView::of(ProtectionKind::RetryBudget.name(), Scope::PerClient, reports));
        }
        for (i, spec) in self.guards.specs().iter().enumerate() {
            let holders = match spec.scope {
                Scope::PerClient => &self.each[..],
                Scope::Shared => &self.each[..1],
            };
            let reports = holders.iter().map(|client| client.guards[i].lock().report(now_ms));
            views.push(ProtectionView::of(spec.settings.kind().name(), spec.scope, reports));
        }
        views
    }

    /// How many clients there are.
    pub fn count(&self) -> usize {
        self.each.len()
    }

    /// How many clients' breakers stand in each state now.
    pub fn breakers(&self) -> BreakerCounts {
        BreakerCounts::of(&self.each)
    }

    /// Every share noted, oldest first.
    pub fn shares(&self) -> &[BreakerShare] {
        self.shares.all()
    }

    /// Notes the breakers' share now (after one changed state).
    pub fn note_share(&mut self, now_ms: u64) {
        let counts = self.breakers();
        self.shares.push(BreakerShare { at_ms: now_ms, counts });
    }

    /// Follows another policy: the first client's breaker closes when it has none (returned if
    /// so); `resize` brings the others along.
    pub fn set_policy(&mut self, policy: Policy, now_ms: u64) -> Option<BreakerState> {
        self.policy = policy;
        self.guard_anew();
        self.each[0].follow(&self.policy, now_ms)
    }

    /// Puts a policy back as it was (a change the store could not keep); the first client's
    /// breaker is left as it stands, `resize` brings the others along.
    pub fn restore_policy(&mut self, policy: Policy) {
        self.policy = policy;
        self.guard_anew();
    }

    /// Makes the other clients match the policy: as many as it runs, each following it (a
    /// breaker turned off closes). Returns whether the breakers' share changed since the last
    /// one noted, with more than one client or fewer than before.
    pub fn resize(&mut self, now_ms: u64) -> bool {
        let before = self.each.len();
        self.each.truncate(count(&self.policy));
        if self.each.len() < before {
            self.dropped_from(self.each.len() as u32);
        }
        for other in &mut self.each[1..] {
            other.follow(&self.policy, now_ms);
        }
        let guards = &self.guards;
        self.each.resize_with(count(&self.policy), || ClientState {
            guards: guards.for_client(),
            ..Default::default()
        });
        let counts = self.breakers();
        (before != self.each.len() || self.each.len() > 1)
            && self.shares.all().last().is_none_or(|last| last.counts != counts)
    }

    /// A reset: every breaker, its history and every budget start afresh, and the shares; the
    /// policy stays.
    pub fn reset(&mut self) {
        self.each.iter_mut().for_each(ClientState::reset);
        self.shares.clear();
        self.guard_afresh();
    }

    /// Makes the listed protections afresh when the policy lists others than they were made for.
    fn guard_anew(&mut self) {
        if self.guards.specs() != self.policy.protections {
            self.guard_afresh();
        }
    }

    /// Makes the listed protections afresh: the shared ones once, each client's own.
    fn guard_afresh(&mut self) {
        self.guards = Guards::new(&self.policy.protections);
        for client in &mut self.each {
            client.guards = self.guards.for_client();
        }
    }

    /// Probes that were cut off (the clients died) never answer.
    pub fn forget_probes(&mut self) {
        self.each.iter_mut().for_each(ClientState::forget_probes);
    }

    /// The server restarted: every breaker starts closed again, and each history that said
    /// otherwise says so. Returns the first client's new state, if it changed, and whether
    /// any other client's did.
    pub fn restarted(&mut self, now_ms: u64) -> (Option<BreakerState>, bool) {
        let first = self.each[0].restarted(now_ms);
        let mut others = false;
        for client in &mut self.each[1..] {
            others |= client.restarted(now_ms).is_some();
        }
        (first, others)
    }

    /// The breaker histories that changed since the last call, for the store.
    pub fn take_changes(&mut self) -> BreakerRows {
        let changed = self.each.iter_mut().enumerate();
        let clients = changed.filter_map(|(i, client)| Some((i as u32, client.take_changes()?))).collect();
        BreakerRows { clients, gone_from: self.gone_from.take(), shares: self.shares.take_unsaved() }
    }

    /// The store could not commit `rows`: they go with the next commit.
    pub fn changes_not_saved(&mut self, rows: &BreakerRows) {
        for &(index, _) in &rows.clients {
            self.each.get_mut(index as usize).map(ClientState::changes_not_saved);
        }
        if rows.shares.is_some() {
            self.shares.mark_unsaved();
        }
        if let Some(from) = rows.gone_from {
            self.dropped_from(from);
        }
    }

    fn dropped_from(&mut self, from: u32) {
        self.gone_from = Some(self.gone_from.map_or(from, |gone| gone.min(from)));
    }
}

/// How many clients a policy runs.
fn count(policy: &Policy) -> usize {
    policy.clients.max(1) as usize
}

//! A lab's clients, all alike: the policy they follow (held once), each client's state in one
//! list, and what they share: the protections the policy lists as `shared` (made once, each
//! client holding the same one), and the history of how many breakers stood open. The first
//! client is special only in what the store keeps: its breaker's history; the others' state is
//! live only and starts fresh after a restart.

use rand::Rng;

use super::{Admit, BreakerChange, BreakerCounts, BreakerShare, BreakerShares, ClientState, ProtectionView};
use crate::retry::protection::{Ended, Guards, Protection, Scope};
use crate::retry::{BreakerState, Policy};

#[derive(Debug)]
pub struct Clients {
    policy: Policy,
    /// One per client the policy runs (at least one), in order.
    each: Vec<ClientState>,
    /// Shared by all: how many breakers stood in each state after each change.
    shares: BreakerShares,
    /// The protections the policy lists, the shared ones made once.
    guards: Guards,
}

impl Default for Clients {
    fn default() -> Self {
        Clients::restore(Policy::default(), Vec::new())
    }
}

impl Clients {
    /// The clients as the store kept them: the policy, and the first client's breaker history.
    pub fn restore(policy: Policy, first_breaker_changes: Vec<BreakerChange>) -> Self {
        let mut each = vec![ClientState::restore(first_breaker_changes)];
        each.resize_with(count(&policy), ClientState::default);
        let mut clients = Clients { policy, each, shares: Default::default(), guards: Guards::default() };
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

    /// The first client: its breaker's history is the one the store keeps.
    pub fn first(&self) -> &ClientState {
        &self.each[0]
    }

    pub fn first_mut(&mut self) -> &mut ClientState {
        &mut self.each[0]
    }

    /// Asks client `index`'s protections whether attempt `n` may be sent.
    pub fn admit(&mut self, index: usize, n: u32, now_ms: u64, rng: &mut dyn Rng) -> Admit {
        self.each[index].admit(&self.policy, n, now_ms, rng)
    }

    /// Tells client `index`'s protections that attempt `n` was sent.
    pub fn sent(&mut self, index: usize, n: u32, now_ms: u64) {
        self.each[index].sent(&self.policy, n, now_ms);
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
            views.push(ProtectionView::of("retry_budget", Scope::PerClient, reports));
        }
        for (i, spec) in self.guards.specs().iter().enumerate() {
            let holders = match spec.scope {
                Scope::PerClient => &self.each[..],
                Scope::Shared => &self.each[..1],
            };
            let reports = holders.iter().map(|client| client.guards[i].lock().report(now_ms));
            views.push(ProtectionView::of(spec.settings.kind(), spec.scope, reports));
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
}

/// How many clients a policy runs.
fn count(policy: &Policy) -> usize {
    policy.clients.max(1) as usize
}

//! A client's live state: its protections (the circuit breaker with the history of its states,
//! the retry budget's window, and its hold on each protection the policy lists). One value per
//! client, owned whole, so a lab can hold several; `Clients` holds them all with the policy
//! they follow. Every protection is asked through the one trait, `retry::protection::Protection`,
//! the policy's own breaker and retry budget as the listed ones, in one order (`ORDER`).
//! Pure: the caller passes `now`. `attempt` decides what follows each attempt of a message.

pub mod attempt;
mod clients;

use std::sync::MutexGuard;

pub use clients::{BreakerRows, Clients, StoredBreakers};
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::domain::History;
use crate::retry::protection::{Ended, Guard, Handle, Protection, ProtectionKind, Refuser, Report, Scope};
use crate::retry::{Breaker, BreakerSettings, BreakerState, BudgetSettings, Policy, RetryBudget, Wait};

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

/// The protection that stopped an attempt or a retry, and why, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped {
    pub kind: Refuser,
    pub why: String,
}

/// What the client's protections say about an attempt about to be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admit {
    /// `Err` when one refused it: nothing is sent, and it counts as a failed attempt.
    pub go: Result<(), Stopped>,
    /// The breaker's new state, when asking changed it (an open breaker went half-open).
    pub changed: Option<BreakerState>,
    /// When it may go: how long it waits first, in ms, for a protection that paces the
    /// client's attempts (the AWS adaptive mode's rate limiter), and that protection's kind.
    pub delay_ms: u64,
    pub paced_by: Option<ProtectionKind>,
}

/// A protection as the snapshot shows it: its kind and scope, how many hold one (each client
/// its own, or one shared by all), and where it stands now (a level is the mean over them).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ProtectionView {
    pub kind: &'static str,
    pub scope: Scope,
    pub held: u32,
    #[serde(flatten)]
    pub now: Report,
}

impl ProtectionView {
    fn of(kind: &'static str, scope: Scope, reports: impl Iterator<Item = Report>) -> Self {
        let (mut held, mut sum, mut now) = (0, 0.0, Report::default());
        for report in reports {
            held += 1;
            sum += report.level.unwrap_or(0.0);
            now = Report { level: report.level.map(|_| sum / f64::from(held)), ..report };
        }
        ProtectionView { kind, scope, held, now }
    }
}

/// The protections a client asks, by where the policy sets them.
#[derive(Debug, Clone, Copy)]
enum Asked {
    /// The policy's `retry_budget`.
    RetryBudget,
    /// Each one the policy's `protections` lists, in its order.
    Listed,
    /// The policy's `breaker`.
    Breaker,
}

/// The order every question goes to the protections in (may this attempt go, may a retry
/// follow, how did an attempt end), written once. The retry budget comes first: it was asked
/// first before protections could be listed, so a retry it refuses is filed under it as stored
/// letters have it (it gates no attempt). The breaker comes last, because its half-open probe
/// is handed out as it admits: a probe another protection then refused would never be sent,
/// never answer, and keep the breaker half-open for good.
const ORDER: [Asked; 3] = [Asked::RetryBudget, Asked::Listed, Asked::Breaker];

/// One protection as a client asks it, with its settings: every one is asked the same way.
enum Member<'a> {
    Budget(&'a mut RetryBudget, BudgetSettings),
    Listed(MutexGuard<'a, Guard>),
    Breaker(&'a mut Breaker, BreakerSettings),
}

impl Member<'_> {
    /// Who refuses, when this one does.
    fn refuser(&self) -> Refuser {
        match self {
            Member::Budget(..) => Refuser::Kind(ProtectionKind::RetryBudget),
            Member::Listed(guard) => Refuser::Kind(guard.settings().kind()),
            Member::Breaker(..) => Refuser::Breaker,
        }
    }

    fn gate(&mut self, n: u32, now_ms: u64, rng: &mut dyn Rng) -> Result<(), String> {
        match self {
            Member::Budget(budget, settings) => budget.gate(settings, n, now_ms, rng),
            Member::Listed(guard) => guard.gate(n, now_ms, rng),
            Member::Breaker(breaker, settings) => breaker.gate(settings, n, now_ms, rng),
        }
    }

    fn gate_undone(&mut self, n: u32) {
        match self {
            Member::Budget(budget, settings) => budget.gate_undone(settings, n),
            Member::Listed(guard) => guard.gate_undone(n),
            Member::Breaker(breaker, settings) => breaker.gate_undone(settings, n),
        }
    }

    fn ended(&mut self, ended: &Ended, now_ms: u64) {
        match self {
            Member::Budget(budget, settings) => budget.ended(settings, ended, now_ms),
            Member::Listed(guard) => guard.ended(ended, now_ms),
            Member::Breaker(breaker, settings) => breaker.ended(settings, ended, now_ms),
        }
    }

    fn cancelled(&mut self, n: u32) {
        match self {
            Member::Budget(budget, settings) => budget.cancelled(settings, n),
            Member::Listed(guard) => guard.cancelled(n),
            Member::Breaker(breaker, settings) => breaker.cancelled(settings, n),
        }
    }

    fn retry(&mut self, after: &Ended, now_ms: u64, rng: &mut dyn Rng) -> Result<(), String> {
        match self {
            Member::Budget(budget, settings) => budget.retry(settings, after, now_ms, rng),
            Member::Listed(guard) => guard.retry(after, now_ms, rng),
            Member::Breaker(breaker, settings) => breaker.retry(settings, after, now_ms, rng),
        }
    }

    fn retry_undone(&mut self, after: &Ended) {
        match self {
            Member::Budget(budget, settings) => budget.retry_undone(settings, after),
            Member::Listed(guard) => guard.retry_undone(after),
            Member::Breaker(breaker, settings) => breaker.retry_undone(settings, after),
        }
    }
}

/// Asks each member in turn until one refuses; those that said yes before it take back what
/// they gave (`undo`).
fn ask(
    members: &mut [Member],
    mut question: impl FnMut(&mut Member) -> Result<(), String>,
    mut undo: impl FnMut(&mut Member),
) -> Result<(), Stopped> {
    for i in 0..members.len() {
        if let Err(why) = question(&mut members[i]) {
            let kind = members[i].refuser();
            members[..i].iter_mut().for_each(&mut undo);
            return Err(Stopped { kind, why });
        }
    }
    Ok(())
}

/// One client's live state; the policy it follows is its `Clients`'.
#[derive(Debug, Default)]
pub struct ClientState {
    breaker: Breaker,
    breaker_changes: BreakerChanges,
    budget: RetryBudget,
    /// Its hold on each protection the policy lists, in the policy's order.
    guards: Vec<Handle>,
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

    /// Its hold on each protection the policy lists.
    pub fn guards(&self) -> &[Handle] {
        &self.guards
    }

    /// Asks the protections whether attempt `n` may be sent, in `ORDER`, until one refuses;
    /// those that let it go before the refusal give back what they handed out.
    pub fn admit(&mut self, policy: &Policy, n: u32, now_ms: u64, rng: &mut dyn Rng) -> Admit {
        let before = self.breaker.state();
        let mut members = self.members(policy);
        let go = ask(&mut members, |member| member.gate(n, now_ms, rng), |member| member.gate_undone(n));
        drop(members);
        let changed = (self.breaker.state() != before).then(|| self.breaker.state());
        changed.inspect(|&state| self.changed(state, now_ms));
        let (delay_ms, paced_by) = if go.is_ok() { self.paced(n, now_ms) } else { (0, None) };
        Admit { go, changed, delay_ms, paced_by }
    }

    /// Attempt `n`, let go by every protection, is not sent after all (its round ran out of
    /// time while it waited): what the gates handed out (a half-open probe, a place in a
    /// window) is given back.
    pub fn not_sent(&mut self, policy: &Policy, n: u32) {
        self.members(policy).iter_mut().for_each(|member| member.gate_undone(n));
    }

    /// Attempt `n` was sent. The retry budget's window counts first attempts whether or not
    /// the policy has a budget now, as it always has.
    pub fn sent(&mut self, policy: &Policy, n: u32, now_ms: u64) {
        self.budget.sent(&policy.retry_budget.unwrap_or_default(), n, now_ms);
        self.guards.iter().for_each(|guard| guard.lock().sent(n, now_ms));
    }

    /// Tells the protections how a sent attempt ended; returns the breaker's new state, if it
    /// changed.
    pub fn ended(&mut self, policy: &Policy, ended: &Ended, now_ms: u64) -> Option<BreakerState> {
        let before = self.breaker.state();
        self.members(policy).iter_mut().for_each(|member| member.ended(ended, now_ms));
        let changed = (self.breaker.state() != before).then(|| self.breaker.state());
        changed.inspect(|&state| self.changed(state, now_ms))
    }

    /// Attempt `n`, sent, was cancelled before its answer (a hedged round settled while it was
    /// out): what it held in flight is given back, and it counts as no success or failure.
    pub fn cancelled(&mut self, policy: &Policy, n: u32) {
        self.members(policy).iter_mut().for_each(|member| member.cancelled(n));
    }

    /// Probes that were cut off (the client died) never answer.
    pub fn forget_probes(&mut self) {
        self.breaker.forget_probes();
        self.guards.iter().for_each(|guard| guard.lock().interrupted());
    }

    /// Whether the protections allow a retry now, asked in `ORDER` until one refuses. Each that
    /// allows it counts it; when a later one refuses, those before it give back what they took,
    /// so a retry not made costs nothing.
    pub fn allows_retry(
        &mut self,
        policy: &Policy,
        after: &Ended,
        now_ms: u64,
        rng: &mut dyn Rng,
    ) -> Result<(), Stopped> {
        let mut members = self.members(policy);
        ask(&mut members, |member| member.retry(after, now_ms, rng), |member| member.retry_undone(after))
    }

    /// The protections the policy sets, as this client holds them, in `ORDER`.
    fn members<'a>(&'a mut self, policy: &Policy) -> Vec<Member<'a>> {
        let ClientState { breaker, budget, guards, .. } = self;
        let (mut breaker, mut budget) = (Some(breaker), Some(budget));
        let mut members = Vec::with_capacity(guards.len() + 2);
        for asked in ORDER {
            match asked {
                Asked::RetryBudget => {
                    let settings = policy.retry_budget;
                    members.extend(settings.zip(budget.take()).map(|(s, b)| Member::Budget(b, s)));
                }
                Asked::Listed => members.extend(guards.iter().map(|guard| Member::Listed(guard.lock()))),
                Asked::Breaker => {
                    members.extend(policy.breaker.zip(breaker.take()).map(|(s, b)| Member::Breaker(b, s)));
                }
            }
        }
        members
    }

    /// The wait before the retry after `after`, when a listed protection sets it (the first
    /// that does); `None` leaves it to the policy's backoff.
    pub fn wait(&self, after: &Ended, retry_after_s: Option<u64>, rng: &mut dyn Rng) -> Option<Wait> {
        self.guards.iter().find_map(|guard| guard.lock().wait(after, retry_after_s, rng))
    }

    /// How long attempt `n`, let go, must still wait before it is sent (0: it goes now), as
    /// the protections that pace the client say when asked again, and the kind of the one
    /// that holds it longest.
    pub fn paced(&mut self, n: u32, now_ms: u64) -> (u64, Option<ProtectionKind>) {
        let delays = self.guards.iter().map(|guard| {
            let mut guard = guard.lock();
            (guard.delay(n, now_ms), guard.settings().kind())
        });
        delays
            .filter(|&(ms, _)| ms > 0)
            .max_by_key(|&(ms, _)| ms)
            .map_or((0, None), |(ms, kind)| (ms, Some(kind)))
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

    /// A reset: the breaker, its history and the budget start afresh; the policy stays (the
    /// listed protections are made afresh by `Clients`).
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BreakerShare {
    pub at_ms: u64,
    #[serde(flatten)]
    pub counts: BreakerCounts,
}

/// The shares kept per lab; the oldest go first.
pub type BreakerShares = History<BreakerShare, MAX_BREAKER_CHANGES>;

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::retry::Refused;
    use crate::retry::protection::{
        AwsQuotaSettings, BulkheadSettings, ProtectionSettings, ProtectionSpec, RatioBreakerSettings,
        SreSettings, TokenBucketSettings,
    };

    fn following(policy: Policy) -> Clients {
        Clients::restore(policy, Default::default())
    }

    /// A protection the policy lists, each client its own.
    fn listed(settings: ProtectionSettings) -> ProtectionSpec {
        ProtectionSpec { settings, scope: Scope::PerClient }
    }

    fn sre() -> ProtectionSpec {
        listed(ProtectionSettings::Sre(SreSettings { window_ms: 600_000, ..SreSettings::default() }))
    }

    /// Under `update`, asks to send a first attempt every 20 ms for 8 s, and each that goes
    /// fails: how many the SRE throttle refused, how many another protection refused, and how
    /// many went after the throttle's first refusal. `at_sre_refusal` sees the client then.
    fn every_attempt_failing(
        policy: Policy,
        mut at_sre_refusal: impl FnMut(&ClientState),
    ) -> (u32, u32, u32) {
        let mut clients = following(policy);
        let (policy, client) = clients.client_mut(0);
        let policy = policy.clone();
        let mut rng = StdRng::seed_from_u64(3);
        let (mut refused_by_sre, mut refused_by_other, mut sent_after) = (0, 0, 0);
        for i in 0..400u64 {
            let now = i * 20;
            match client.admit(&policy, 1, now, &mut rng).go {
                Ok(()) => {
                    sent_after += u32::from(refused_by_sre > 0);
                    client.sent(&policy, 1, now);
                    client.ended(&policy, &Ended::failure(1), now + 1);
                }
                Err(Stopped { kind: Refuser::Kind(ProtectionKind::Sre), .. }) => {
                    refused_by_sre += 1;
                    at_sre_refusal(client);
                }
                Err(_) => refused_by_other += 1,
            }
        }
        (refused_by_sre, refused_by_other, sent_after)
    }

    /// A half-open breaker's probe is handed out only once every other protection has let the
    /// attempt go: a probe the SRE throttle refused after the breaker gave it would never
    /// answer, and the breaker would refuse everything after it, for good.
    #[test]
    fn a_probe_is_handed_out_only_to_an_attempt_every_other_protection_lets_go() {
        // Every attempt that goes fails, so the breaker opens and SRE sees no accept; one is
        // asked for every 20 ms, past the breaker's 10 ms open.
        let (refused_by_sre, _, sent_after) = every_attempt_failing(
            Policy {
                breaker: Some(BreakerSettings {
                    failure_threshold: 1,
                    open_ms: 10,
                    half_open_probes: 1,
                    refused: Refused::Retry,
                }),
                protections: vec![sre()],
                ..Policy::default()
            },
            |client| {
                let state = client.breaker_state();
                assert_ne!(state, BreakerState::HalfOpen, "a probe given to a refused attempt");
            },
        );
        assert!(refused_by_sre > 10, "the throttle refused {refused_by_sre}");
        assert!(sent_after > 0, "nothing went after the throttle's first refusal");
    }

    /// A listed ratio breaker's half-open probe, handed out to an attempt a protection listed
    /// after it refused, is handed back: that attempt is never sent, and a probe lost with it
    /// would keep the breaker refusing everything for good.
    #[test]
    fn a_listed_breakers_probe_comes_back_when_a_later_protection_refuses_the_attempt() {
        let breaker = RatioBreakerSettings {
            minimum_throughput: 2,
            break_duration_ms: 100,
            ..RatioBreakerSettings::default()
        };
        let policy = Policy {
            protections: vec![listed(ProtectionSettings::RatioBreaker(breaker)), sre()],
            ..Policy::default()
        };
        let (refused_by_sre, refused_by_breaker, sent_after) = every_attempt_failing(policy, |_| {});
        assert!(refused_by_sre > 10, "the throttle refused {refused_by_sre}");
        assert!(refused_by_breaker > 10, "the breaker refused {refused_by_breaker}, sent {sent_after}");
        assert!(sent_after > 0, "nothing went after the throttle's first refusal");
    }

    /// A retry one protection allowed and a later one refused is not made: the token bucket
    /// and the policy's retry budget, asked before the AWS quota that refuses, give back what
    /// they took for it.
    #[test]
    fn a_retry_a_later_protection_refuses_costs_those_before_it_nothing() {
        let quota = AwsQuotaSettings {
            initial_retry_tokens: 5,
            timeout_retry_cost: 5,
            ..AwsQuotaSettings::default()
        };
        let mut clients = following(Policy {
            retry_budget: Some(BudgetSettings { ratio: 0.0, min_per_s: 0.2 }),
            protections: vec![
                listed(ProtectionSettings::TokenBucket(TokenBucketSettings::default())),
                listed(ProtectionSettings::AwsStandard(quota)),
            ],
            ..Policy::default()
        });
        let (policy, client) = clients.client_mut(0);
        let policy = policy.clone();
        let mut rng = StdRng::seed_from_u64(1);
        let levels = |client: &ClientState| {
            let budget = client.budget.report(&policy.retry_budget.unwrap(), 0).level;
            let bucket = client.guards()[0].lock().report(0).level;
            let quota = client.guards()[1].lock().report(0).level;
            [budget, bucket, quota].map(Option::unwrap)
        };
        assert_eq!(levels(client), [2.0, 5.0, 5.0]);
        client.allows_retry(&policy, &Ended::failure(1), 0, &mut rng).unwrap();
        assert_eq!(levels(client), [1.0, 4.0, 0.0], "the first retry took from each");
        let refused = client.allows_retry(&policy, &Ended::failure(1), 0, &mut rng).unwrap_err();
        assert_eq!(refused.kind, Refuser::Kind(ProtectionKind::AwsStandard));
        assert_eq!(levels(client), [1.0, 4.0, 0.0], "the refused one took nothing");
    }

    /// A hedge sent and then cancelled when its round settled gives back what it held in
    /// flight: the bulkhead's permit and the half-open breaker's probe. Before, each cancelled
    /// hedge kept one, and a bulkhead of 1 or a breaker with one probe refused all after it.
    #[test]
    fn a_cancelled_attempt_gives_back_its_permit_and_its_probe() {
        let bulkhead = ProtectionSettings::Bulkhead(BulkheadSettings { max_concurrent_calls: 1 });
        let policy = Policy {
            breaker: Some(BreakerSettings {
                failure_threshold: 1,
                open_ms: 10,
                half_open_probes: 1,
                refused: Refused::Retry,
            }),
            protections: vec![listed(bulkhead)],
            ..Policy::default()
        };
        let mut clients = following(policy);
        let (policy, client) = clients.client_mut(0);
        let policy = policy.clone();
        let mut rng = StdRng::seed_from_u64(1);
        assert!(client.admit(&policy, 1, 0, &mut rng).go.is_ok());
        client.sent(&policy, 1, 0);
        client.cancelled(&policy, 1);
        let second = client.admit(&policy, 1, 1, &mut rng).go;
        assert!(second.is_ok(), "the bulkhead's one permit came back: {second:?}");
        client.sent(&policy, 1, 1);
        client.ended(&policy, &Ended::failure(1), 2);
        assert_eq!(client.breaker_state(), BreakerState::Open);
        // Half-open at 12 ms: the one probe goes, is cancelled, and is handed out again.
        assert!(client.admit(&policy, 2, 20, &mut rng).go.is_ok());
        client.sent(&policy, 2, 20);
        client.cancelled(&policy, 2);
        let again = client.admit(&policy, 2, 21, &mut rng).go;
        assert!(again.is_ok(), "the probe came back: {again:?}");
    }
}

//! The lab's clients around each attempt, and their protections. A policy runs `clients`
//! independent clients, as the instances of a scaled-out service would: each message belongs
//! to one (round-robin by id), and each client has its own circuit breaker and retry budget,
//! shared by its messages only, as a real instance has one per dependency. The state is each
//! client's own (`client::ClientState`); here each change of a breaker becomes an event.
//!
//! An attempt is two calls: `before_attempt` (may it go, and on which client; it waits for
//! the connection slots and records the start) and `after_attempt` (what comes next, decided by
//! `client::attempt::next` and recorded in the same change). The sending loop does the I/O.

use std::time::{Duration, Instant};

use rand::Rng;
use tokio::sync::{Semaphore, SemaphorePermit};

use super::{Lab, LabState, unix_now_ms};
use crate::client::Stopped;
use crate::client::attempt::{self, Attempt, Next, Round, TimeBudget};
use crate::dlq::{Cause, DeadLetter};
use crate::domain::{AttemptEnd, ResumePoint};
use crate::events::{ClientsView, Event};
use crate::retry::protection::{
    AllFailed, Answer, GrpcHedgingSettings, HedgeRound, ProtectionKind, Refuser, Settled,
};
use crate::retry::{BreakerState, Outcome, Policy};

/// Which hedges a round cancels: one admitted but never sent, or ones sent and still out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    NotSent,
    InFlight,
}

/// How an attempt may go.
pub enum Go<'a> {
    /// Send it under this policy, holding the connection slots until it ends.
    Send(Policy, Slots<'a>),
    /// One of the client's protections (the open breaker, ...) refused it: nothing is sent,
    /// and it counts as failed.
    ShortCircuited(Policy, Stopped),
    /// The round ended before this attempt (a crash cut off the one that used them up).
    Ended(Next),
    /// The message is no longer owed this attempt: the lab was reset.
    Stop,
}

/// A connection slot of the lab's and one of the server's, held while an attempt is sent.
pub struct Slots<'a> {
    _lab: SemaphorePermit<'a>,
    _server: SemaphorePermit<'a>,
}

impl Lab {
    /// Where message `id`'s delivery continues, with the seed of its random stream under a
    /// seeded policy; `None` when it is no longer owed one.
    pub fn delivery_start(&self, id: u64) -> Option<(ResumePoint, Option<u64>)> {
        let state = self.lock();
        let resume = state.record.resume_point(id, self.now_ms())?;
        let client = state.clients.of(id) as u64;
        Some((resume, state.clients.policy().seed.map(|seed| attempt::stream_seed(seed, client, id))))
    }

    /// Whether attempt `n` of message `id` may go: its client's protections are asked (with the
    /// message's random stream), and a sent attempt waits for a connection slot of the lab's
    /// and one of `server_slots`; the attempt is recorded as started (with the time it queued).
    pub async fn before_attempt<'a>(
        &'a self,
        (id, n): (u64, u32),
        server_slots: &'a Semaphore,
        rng: &mut impl Rng,
    ) -> Go<'a> {
        let (policy, mut paced, deadline) = {
            let mut state = self.lock();
            let now = self.now_ms();
            let policy = state.clients.policy().clone();
            if let Some(ended) = attempt::before(&policy, n) {
                self.settle(&mut state, id, &ended, now);
                return Go::Ended(ended);
            }
            let index = state.clients.of(id);
            let admit = state.clients.admit(index, n, now, rng);
            self.client_breaker_changed(&mut state, index, admit.changed, now);
            if let Err(stopped) = admit.go {
                // Fails fast: no slot, no socket, no request.
                state.record.load.suppressed(now, stopped.kind.name());
                return match self.start(&mut state, (id, n), 0, now) {
                    true => Go::ShortCircuited(policy, stopped),
                    false => Go::Stop,
                };
            }
            // A hedged round keeps its own deadline (`HedgeRound`); any other keeps the
            // round's time budget through every wait before the attempt starts.
            let budget = self.time_budget(&policy);
            let started = state.record.round_started_ms(id).filter(|_| policy.hedging().is_none());
            let deadline = started.map(|started| (started.saturating_add(budget.ms), budget));
            (policy, (admit.delay_ms, admit.paced_by), deadline)
        };
        while paced.0 > 0 {
            // A protection paces the client (the AWS adaptive mode's send rate): the attempt
            // sleeps and asks again until it has its token, before it asks for a connection;
            // unless its round would be out of time before the token comes.
            if let Some(ended) = self.out_of_time((id, n), deadline, self.now_ms() + paced.0, || {
                let kind = paced.1.map_or("a protection", |kind| kind.name());
                format!("{kind} paces the client's attempts and would hold it {} ms more", paced.0)
            }) {
                return Go::Ended(ended);
            }
            tokio::time::sleep(Duration::from_millis(paced.0)).await;
            let mut state = self.lock();
            let (now, index) = (self.now_ms(), state.clients.of(id));
            paced = state.clients.client_mut(index).1.paced(n, now);
        }
        let queued = Instant::now();
        let Ok(lab) = self.request_slots.acquire().await else { return Go::Stop };
        let Ok(server) = server_slots.acquire().await else { return Go::Stop };
        let waited = || format!("it waited {} ms for a connection slot", queued.elapsed().as_millis());
        if let Some(ended) = self.out_of_time((id, n), deadline, self.now_ms(), waited) {
            return Go::Ended(ended);
        }
        let mut state = self.lock();
        let now = self.now_ms();
        if !self.start(&mut state, (id, n), queued.elapsed().as_millis() as u64, now) {
            return Go::Stop;
        }
        let index = state.clients.of(id);
        state.clients.sent(index, n, now);
        Go::Send(policy, Slots { _lab: lab, _server: server })
    }

    /// Attempt `n` of message `id`, made under `policy`, ended: its client's breaker hears how
    /// a sent one went, the attempt is recorded, and what comes next is decided and recorded
    /// (a wait, the delivery or a dead letter), in one change. `None` when the message is no
    /// longer owed it (the lab was reset).
    pub fn after_attempt(
        &self,
        (id, n): (u64, u32),
        (policy, refused): (&Policy, Option<&Stopped>),
        end: AttemptEnd,
        round: &mut Round,
        rng: &mut impl Rng,
    ) -> Option<Next> {
        let mut state = self.lock();
        let now = self.now_ms();
        let index = state.clients.of(id);
        if end.outcome != Outcome::ShortCircuited {
            let ended = round.ended(n, &end);
            let changed = state.clients.ended(index, &ended, now);
            self.client_breaker_changed(&mut state, index, changed, now);
        }
        let finished = state.record.finish_attempt(id, n, end, refused.map(|stopped| stopped.kind.name()))?;
        self.publish(&mut state, &Event::AttemptFinished { message_id: id, attempt: finished }, now);
        let attempt = Attempt { n, end: &end, now_ms: now, refused };
        let client = state.clients.client_mut(index);
        let next = attempt::next(policy, self.time_budget(policy), attempt, round, client, rng);
        self.settle(&mut state, id, &next, now);
        self.levels_due(&mut state, now);
        Some(next)
    }

    /// Attempt `n` of message `id`'s hedged round ended (or was refused before it was sent):
    /// the client's protections hear how a sent one went, the attempt is recorded, and the
    /// round's schedule says whether the round is settled. When it is, the attempts still in
    /// flight are recorded as cancelled and the message is delivered or dead-lettered once, in
    /// the same change. `None` when the message is no longer owed it (the lab was reset);
    /// `Some(None)` while the round goes on.
    pub fn after_hedge(
        &self,
        (id, n): (u64, u32),
        (hedging, refused): (&GrpcHedgingSettings, Option<&Stopped>),
        end: AttemptEnd,
        round: &mut HedgeRound,
    ) -> Option<Option<Next>> {
        let mut state = self.lock();
        let now = self.now_ms();
        let index = state.clients.of(id);
        if end.outcome != Outcome::ShortCircuited {
            let changed = state.clients.ended(index, &attempt::ended(n, &end), now);
            self.client_breaker_changed(&mut state, index, changed, now);
        }
        let finished = state.record.finish_attempt(id, n, end, refused.map(|stopped| stopped.kind.name()))?;
        self.publish(&mut state, &Event::AttemptFinished { message_id: id, attempt: finished }, now);
        let answer = match refused {
            Some(_) => Answer::Refused,
            None => hedging.answer(&attempt::ended(n, &end)),
        };
        let timeout_ms = state.clients.policy().timeout_ms;
        let last = match (refused, end.outcome) {
            (Some(Stopped { kind, why }), _) => format!("attempt {n} refused by {kind}: {why}"),
            (None, Outcome::Timeout) => {
                format!(
                    "attempt {n}: no answer within the call's deadline ({timeout_ms} ms from the first attempt)"
                )
            }
            (None, _) => format!("attempt {n}: {}", attempt::describe(&end, timeout_ms)),
        };
        let deadline = end.outcome == Outcome::Timeout;
        if let Some(stopped) = refused {
            round.refused_by(stopped.kind);
        }
        let settled = round.answered(n, answer, now);
        let ended = (last.as_str(), deadline);
        let next = settled.map(|settled| self.hedge_settled(&mut state, id, settled, ended, round, now));
        self.levels_due(&mut state, now);
        Some(next)
    }

    /// The call's deadline may have passed with nothing in flight (a pushback's wait ran past
    /// it): the round ends then. `None` while it goes on.
    pub fn hedge_deadline(&self, id: u64, round: &mut HedgeRound) -> Option<Next> {
        let mut state = self.lock();
        let now = self.now_ms();
        let settled = round.check_deadline(now)?;
        let last = "the call's deadline (timeout_ms) passed before the next hedge was due".to_string();
        Some(self.hedge_settled(&mut state, id, settled, (&last, true), round, now))
    }

    /// Hedges of message `id`'s round are cancelled without an answer, so none is left
    /// running: with `Cancelled::NotSent`, one admitted but no longer to be sent (the round stopped
    /// while it waited for a connection), whose protections take back what they handed out; with
    /// `Cancelled::InFlight`, those still out when the round ended before its next hedge by a rule
    /// of the policy's (a new policy with fewer attempts came in), whose protections give back
    /// what each held in flight (a bulkhead's permit, a place among Envoy's active requests).
    pub fn hedges_cancelled(&self, id: u64, hedges: impl IntoIterator<Item = u32>, how: Cancelled) {
        let mut state = self.lock();
        let now = self.now_ms();
        let index = state.clients.of(id);
        for n in hedges {
            match how {
                Cancelled::NotSent => state.clients.not_sent(index, n),
                Cancelled::InFlight => state.clients.cancelled(index, n),
            }
            if let Some(attempt) = state.record.cancel_attempt(id, n, now) {
                self.publish(&mut state, &Event::AttemptFinished { message_id: id, attempt }, now);
            }
        }
    }

    /// Ends a hedged round: the attempts still in flight are cancelled, and what comes next is
    /// recorded. A6: an OK answer or a fatal status cancels "all outstanding hedged requests".
    fn hedge_settled(
        &self,
        state: &mut LabState,
        id: u64,
        settled: Settled,
        (last, deadline): (&str, bool),
        round: &HedgeRound,
        now: u64,
    ) -> Next {
        let cancelled: Vec<u32> = round.in_flight().collect();
        let index = state.clients.of(id);
        for &n in &cancelled {
            state.clients.cancelled(index, n);
            if let Some(attempt) = state.record.cancel_attempt(id, n, now) {
                self.publish(state, &Event::AttemptFinished { message_id: id, attempt }, now);
            }
        }
        let and_cancelled = match cancelled.as_slice() {
            [] => String::new(),
            [one] => format!("; attempt {one} cancelled"),
            many => {
                let listed: Vec<String> = many.iter().map(u32::to_string).collect();
                format!("; attempts {} cancelled", listed.join(", "))
            }
        };
        let next = match settled {
            Settled::Won(_) => Next::Delivered,
            Settled::Fatal(_) if deadline => Next::DeadLetter(
                Cause::TimeBudget,
                format!("the call's deadline passed: {last}{and_cancelled}"),
            ),
            Settled::Fatal(_) => {
                let why =
                    format!("a fatal status for hedging (not in non_fatal_statuses): {last}{and_cancelled}");
                Next::DeadLetter(Cause::Refused(ProtectionKind::GrpcHedging), why)
            }
            Settled::AllFailed { n, why } => {
                let (cause, words) = match why {
                    AllFailed::AttemptsUsedUp => (Cause::AttemptsUsedUp, format!("hedges used up ({n})")),
                    // The hedging's own throttle, or another protection (the breaker) refused it.
                    AllFailed::Throttled => match round.refusal() {
                        Some(kind) if kind != Refuser::Kind(ProtectionKind::GrpcHedging) => {
                            (Cause::refused_by(kind), format!("the next hedge was refused by {kind}"))
                        }
                        _ => (
                            Cause::Refused(ProtectionKind::GrpcHedging),
                            "the next hedge was throttled".to_string(),
                        ),
                    },
                    AllFailed::Pushback => (
                        Cause::Pushback,
                        "pushback: the endpoint said not to retry (X-Retry-Pushback-Ms)".to_string(),
                    ),
                    AllFailed::Deadline => {
                        (Cause::TimeBudget, "the call's deadline (timeout_ms) passed".to_string())
                    }
                };
                Next::DeadLetter(cause, format!("{words}; every attempt sent failed; last: {last}"))
            }
        };
        self.settle(state, id, &next, now);
        next
    }

    /// Where each protection stands, once a bin: the protection lane draws it.
    fn levels_due(&self, state: &mut LabState, now: u64) {
        if state.record.load.levels_due(now) {
            let levels = state.clients.protections(now).into_iter();
            let levels = levels.filter_map(|p| Some((p.kind, p.now.level?))).collect::<Vec<_>>();
            if !levels.is_empty() {
                state.record.load.levels(now, levels);
            }
        }
    }

    /// Attempt `n` starts, after `queued_ms` spent waiting for connection slots; `false` when
    /// the message is no longer owed it.
    fn start(&self, state: &mut LabState, (id, n): (u64, u32), queued_ms: u64, now: u64) -> bool {
        let Some((attempt, waited_ms)) = state.record.start_attempt(id, n, now, queued_ms) else {
            return false;
        };
        let attempt = (&attempt).into();
        let queued_ms = waited_ms.map(|_| queued_ms);
        self.publish(state, &Event::AttemptStarted { message_id: id, attempt, waited_ms, queued_ms }, now);
        true
    }

    /// Records what comes next for message `id`.
    fn settle(&self, state: &mut LabState, id: u64, next: &Next, now: u64) {
        match next {
            Next::Retry(wait) => {
                if let Some((round, n)) = state.record.schedule_wait(id, *wait) {
                    self.publish(state, &Event::WaitScheduled { message_id: id, round, n, wait: *wait }, now);
                }
            }
            Next::Delivered => self.delivered(state, id, now),
            Next::DeadLetter(cause, reason) => self.dead_lettered(state, id, (*cause, reason.clone()), now),
            Next::Refused(stopped, reason) => {
                state.record.load.suppressed(now, stopped.kind.name());
                self.dead_lettered(state, id, (Cause::refused_by(stopped.kind), reason.clone()), now);
            }
        }
    }

    fn delivered(&self, state: &mut LabState, id: u64, now: u64) {
        if !state.record.deliver(id) {
            return;
        }
        state.record.load.delivered(now);
        self.publish(state, &Event::Delivered { message_id: id }, now);
        // The window over settled messages: the oldest deliveries leave, still counted.
        let forgotten = state.record.forget_delivered(self.limits.settled_window);
        if !forgotten.is_empty() {
            self.publish(state, &Event::MessagesForgotten { message_ids: forgotten }, now);
        }
    }

    /// Gives up on a message: it moves to the dead-letter queue with its reason.
    fn dead_lettered(&self, state: &mut LabState, id: u64, reason: (Cause, String), now: u64) {
        let quarantine_after = state.clients.policy().quarantine_after;
        let Some(message) = state.record.dead_letter(id) else { return };
        let mut letter = DeadLetter::new(message, reason, (now, unix_now_ms()), quarantine_after);
        letter.applied = state.endpoint.ledger.is_applied(&letter.key);
        state.dead_letters.push(letter.clone());
        self.publish(state, &Event::DeadLettered { dead_letter: letter }, now);
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
            if state.clients.count() > 1 {
                self.shares_changed(state, now);
            }
        }
    }

    pub(super) fn shares_changed(&self, state: &mut LabState, now: u64) {
        state.clients.note_share(now);
        let clients = clients_view(state);
        self.publish(state, &Event::Clients { clients }, now);
    }

    /// Makes the other clients match the policy: as many as it runs, each following it.
    pub(super) fn sync_clients(&self, state: &mut LabState, now: u64) {
        if state.clients.resize(now) {
            self.shares_changed(state, now);
        }
    }

    /// Attempt `n` of message `id`, let go by its client's protections, would start at
    /// `start_ms`, past its round's `deadline`: it is not sent, what the protections handed out
    /// for it comes back, and the round ends by its time budget (`why` says what held it).
    /// `None` when it is in time.
    fn out_of_time(
        &self,
        (id, n): (u64, u32),
        deadline: Option<(u64, TimeBudget)>,
        start_ms: u64,
        why: impl FnOnce() -> String,
    ) -> Option<Next> {
        let (deadline, TimeBudget { ms, setting }) = deadline?;
        if start_ms <= deadline {
            return None;
        }
        let mut state = self.lock();
        let now = self.now_ms();
        let index = state.clients.of(id);
        let (policy, client) = state.clients.client_mut(index);
        let policy = policy.clone();
        client.not_sent(&policy, n);
        let reason = format!("time budget: attempt {n} would start past {ms} ms ({setting}): {}", why());
        let ended = Next::DeadLetter(Cause::TimeBudget, reason);
        self.settle(&mut state, id, &ended, now);
        Some(ended)
    }

    /// How long one round may last, and the setting that says so: the policy's `max_total_ms`
    /// when set and shorter, else the server's `max_retry_duration_ms`, which the dedup window
    /// is sized to cover.
    pub fn time_budget(&self, policy: &Policy) -> TimeBudget {
        let server = self.limits.max_retry_duration_ms;
        match policy.max_total_ms {
            own if own > 0 && own <= server => TimeBudget { ms: own, setting: "max_total_ms" },
            _ => TimeBudget { ms: server, setting: "max_retry_duration_ms" },
        }
    }
}

/// The clients as the snapshot and the `clients` event show them.
pub(super) fn clients_view(state: &LabState) -> ClientsView {
    ClientsView {
        count: state.clients.count() as u32,
        breakers: state.clients.breakers(),
        changes: state.clients.shares().to_vec(),
    }
}

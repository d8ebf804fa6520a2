//! A hedged round, under gRPC's hedging (gRFC A6 `hedgingPolicy`, the `grpc_hedging`
//! protection): the first attempt at once, a hedge every `hedging_delay_ms` (or at once after
//! a non-fatal answer) while none has settled the call, all with the one idempotency key; the
//! first OK answer wins and the client hangs up on the rest. Each attempt is its own task, so
//! the answers are heard while the next hedge waits for a connection slot; the lab records and
//! decides, judging each answer against the round's schedule (`HedgeRound`, pure).
//!
//! How a guard meets a hedged round: each hedge is an attempt like any other. Before it goes,
//! `Lab::before_attempt` asks every guard of the client (`admit`, and `paced` while one paces
//! it) and tells them it was sent (`sent`); when its answer comes back, `Lab::after_hedge`
//! tells them how it went (`ended`): those calls happen once per hedge, as per attempt of a
//! sequential round. A guard that refuses a hedge refuses that hedge only: it is recorded
//! short-circuited, no further hedge goes, and those in flight may still win. What a guard
//! does not do here: choose the wait before the next attempt (`wait`; the hedging delay and
//! the endpoint's pushback set it), nor end the round on its time budget between attempts
//! (the call's deadline, `timeout_ms` from the first attempt, does).

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use tokio::task::{JoinError, JoinSet};
use tracing::Instrument;

use super::round::Delivery;
use super::{Producer, answerless, label};
use crate::client::attempt::Next;
use crate::domain::{AttemptEnd, Outcome};
use crate::lab::{Cancelled, Go, Lab, Slots};
use crate::retry::protection::{GrpcHedgingSettings, HedgeRound};

/// Delivers one message in a hedged round, until the round is settled.
pub(super) async fn deliver(producer: &Producer, delivery: Delivery<'_>, settings: GrpcHedgingSettings) {
    let Delivery { lab, id, resume, url, body, mut rng } = delivery;
    // A6: "call deadlines apply to the entire chain of hedged requests": the policy's
    // `timeout_ms`, from the round's first attempt.
    let started_ms = resume.round_started_ms.unwrap_or_else(|| lab.now_ms());
    // The round's time budget, when shorter, ends the chain sooner.
    let policy = lab.policy();
    let deadline_ms = policy.timeout_ms.min(lab.time_budget(&policy).ms);
    let round = HedgeRound::new(&settings, resume.next_n, started_ms, deadline_ms);
    if resume.next_n > settings.attempts() {
        // A crash cut off the round's last attempt: the lab ends the round before another.
        if let Go::Ended(next) = lab.before_attempt((id, resume.next_n), &producer.slots, &mut rng).await {
            producer.ended(&next);
        }
        return;
    }
    let key = resume.key.as_str().into();
    let hedges = Hedges { flying: JoinSet::new(), slots: HashMap::new() };
    let mut hedging = Hedging { producer, lab, id, settings, round, hedges, url, key, body };
    while hedging.step(&mut rng).await.is_continue() {}
}

/// A hedged round's attempts in flight, each its own task, with the connection slots each holds.
/// Dropped, it aborts the tasks: the client hangs up on every hedge still out.
struct Hedges<'a> {
    flying: JoinSet<(u32, AttemptEnd)>,
    slots: HashMap<u32, Slots<'a>>,
}

/// One message's hedged round under way: its schedule, its hedges in flight, and what each
/// hedge sends. Each step says whether the round goes on (`Continue`) or is over (`Break`).
struct Hedging<'a> {
    producer: &'a Producer,
    lab: &'a Lab,
    id: u64,
    settings: GrpcHedgingSettings,
    round: HedgeRound,
    hedges: Hedges<'a>,
    url: Arc<str>,
    key: Arc<str>,
    body: Arc<str>,
}

impl<'a> Hedging<'a> {
    /// Sends the hedge that is due, or waits for an answer or for the next hedge's time.
    async fn step(&mut self, rng: &mut StdRng) -> ControlFlow<()> {
        let now = self.lab.now_ms();
        match self.round.due(now) {
            Some(n) => {
                let go = self.admit(n, rng).await?;
                self.go(n, go)
            }
            None => self.wait(now).await,
        }
    }

    /// Asks the lab whether hedge `n` may go (its client's guards, then a connection slot),
    /// hearing the answers of the hedges in flight meanwhile; `Break` when one ended the round.
    async fn admit(&mut self, n: u32, rng: &mut StdRng) -> ControlFlow<(), Go<'a>> {
        let (lab, producer) = (self.lab, self.producer);
        let admit = lab.before_attempt((self.id, n), &producer.slots, rng);
        tokio::pin!(admit);
        loop {
            tokio::select! {
                go = &mut admit => return ControlFlow::Continue(go),
                Some(joined) = self.hedges.flying.join_next() => self.answered(joined)?,
            }
        }
    }

    /// What hedge `n` does with the lab's answer: it is sent, or recorded refused or not sent.
    fn go(&mut self, n: u32, go: Go<'a>) -> ControlFlow<()> {
        let (lab, id) = (self.lab, self.id);
        match go {
            // While it waited for a connection, a sibling's pushback said not to retry or the
            // call's deadline passed: A6 sends no further hedge ("If the pushback says not to
            // retry, no further hedged requests will be sent"). It is recorded cancelled, with
            // no request.
            Go::Send(_, slots) if !self.round.open(lab.now_ms()) => {
                drop(slots);
                lab.hedges_cancelled(id, [n], Cancelled::NotSent);
                match lab.hedge_deadline(id, &mut self.round) {
                    Some(next) => self.over(&next),
                    None => ControlFlow::Continue(()),
                }
            }
            Go::Send(_, slots) => {
                self.send(n, slots);
                ControlFlow::Continue(())
            }
            Go::ShortCircuited(_, stopped) => {
                self.round.sent(n, lab.now_ms());
                let end = answerless(Outcome::ShortCircuited);
                let decided =
                    lab.after_hedge((id, n), (&self.settings, Some(&stopped)), end, &mut self.round);
                self.settled(decided)
            }
            Go::Ended(next) => {
                lab.hedges_cancelled(id, self.round.in_flight(), Cancelled::InFlight);
                self.over(&next)
            }
            Go::Stop => ControlFlow::Break(()),
        }
    }

    /// Sends hedge `n` as a task of its own, holding its connection slots until it answers.
    fn send(&mut self, n: u32, slots: Slots<'a>) {
        let now = self.lab.now_ms();
        self.round.sent(n, now);
        self.hedges.slots.insert(n, slots);
        let (producer, url, key, body) =
            (self.producer.clone(), self.url.clone(), self.key.clone(), self.body.clone());
        let timeout_ms = self.round.timeout_at(now);
        // In the message's span, as the attempts of a sequential round are.
        let send = async move { (n, producer.send(&url, (&key, n), &body, timeout_ms).await) };
        self.hedges.flying.spawn(send.instrument(tracing::Span::current()));
    }

    /// No hedge is due: waits for the next answer, or for the next hedge's time (when the
    /// call's deadline may also have passed).
    async fn wait(&mut self, now: u64) -> ControlFlow<()> {
        let Some(at) = self.round.wake_at() else {
            return match self.hedges.flying.join_next().await {
                Some(joined) => self.answered(joined),
                // Nothing in flight and nothing more to send: the round was settled.
                None => ControlFlow::Break(()),
            };
        };
        let sleep = tokio::time::sleep(Duration::from_millis(at.saturating_sub(now)));
        tokio::select! {
            Some(joined) = self.hedges.flying.join_next() => self.answered(joined),
            () = sleep => match self.lab.hedge_deadline(self.id, &mut self.round) {
                Some(next) => self.over(&next),
                None => ControlFlow::Continue(()),
            },
        }
    }

    /// One hedge's answer came back: its slots are freed and the lab decides. Once the round
    /// is over, the tasks still in flight are dropped with `hedges`: the client hangs up.
    fn answered(&mut self, joined: Result<(u32, AttemptEnd), JoinError>) -> ControlFlow<()> {
        let Ok((n, end)) = joined else { return ControlFlow::Continue(()) };
        self.hedges.slots.remove(&n);
        self.producer.metrics.attempt(label(&end));
        let decided = self.lab.after_hedge((self.id, n), (&self.settings, None), end, &mut self.round);
        self.settled(decided)
    }

    /// What the lab decided after a hedge ended: `None`, the message is no longer owed a
    /// delivery; `Some(Some(next))`, the round is settled; `Some(None)`, it goes on.
    fn settled(&self, decided: Option<Option<Next>>) -> ControlFlow<()> {
        match decided {
            None => ControlFlow::Break(()),
            Some(Some(next)) => self.over(&next),
            Some(None) => ControlFlow::Continue(()),
        }
    }

    fn over(&self, next: &Next) -> ControlFlow<()> {
        self.producer.ended(next);
        ControlFlow::Break(())
    }
}

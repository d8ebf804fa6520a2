//! A round's shape: how a message's attempts go out. Every policy's round is one of two
//! shapes, met the same way (`Shape::deliver` over a `Delivery`): sequential, one attempt at a
//! time with a wait between them (here), or hedged, several attempts out at once on gRPC's
//! hedging schedule (`hedged`). Either way each attempt is two calls on the lab, before (its
//! client's guards are asked, a connection slot is taken) and after (the guards hear how it
//! went, and what comes next is decided).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;

use super::{Producer, answerless, hedged, label};
use crate::client::attempt::{Next, Round};
use crate::domain::{Outcome, ResumePoint};
use crate::lab::{Go, Lab};
use crate::retry::Policy;
use crate::retry::protection::GrpcHedgingSettings;

/// The shape of a message's round, as its policy says.
#[derive(Debug, Clone, Copy)]
pub(super) enum Shape {
    /// One attempt at a time, a wait between them.
    Sequential,
    /// gRPC's hedging (gRFC A6 `hedgingPolicy`): a hedge every `hedging_delay_ms` while none
    /// has settled the call, the first OK answer wins.
    Hedged(GrpcHedgingSettings),
}

/// One message's delivery, where it stands: what every attempt sends, and the message's own
/// random stream.
pub(super) struct Delivery<'a> {
    pub lab: &'a Lab,
    pub id: u64,
    /// Where the round stands (its first attempt, or where a crash left it).
    pub resume: ResumePoint,
    pub url: Arc<str>,
    /// The same body on every attempt: the downstream refuses a key reused with another.
    pub body: Arc<str>,
    pub rng: StdRng,
}

impl Shape {
    pub fn of(policy: &Policy) -> Shape {
        match policy.hedging() {
            Some(hedging) => Shape::Hedged(hedging),
            None => Shape::Sequential,
        }
    }

    /// Delivers the message until it is delivered or its round ends.
    pub async fn deliver(self, producer: &Producer, delivery: Delivery<'_>) {
        match self {
            Shape::Sequential => producer.sequential(delivery).await,
            Shape::Hedged(hedging) => hedged::deliver(producer, delivery, hedging).await,
        }
    }
}

impl Producer {
    /// A sequential round: each attempt is sent once the one before it has ended and its wait
    /// has passed.
    async fn sequential(&self, delivery: Delivery<'_>) {
        let Delivery { lab, id, resume, url, body, mut rng } = delivery;
        let mut round = Round {
            started_ms: resume.round_started_ms,
            previous_wait_ms: resume.previous_wait_ms,
            ..Round::default()
        };
        if resume.delay_ms > 0 {
            // The rest of a wait a crash interrupted.
            tokio::time::sleep(Duration::from_millis(resume.delay_ms)).await;
        }
        for n in resume.next_n.. {
            let (policy, end, refused) = match lab.before_attempt((id, n), &self.slots, &mut rng).await {
                Go::Send(policy, slots) => {
                    let end = self.send(&url, (&resume.key, n), &body, policy.timeout_ms).await;
                    drop(slots);
                    self.metrics.attempt(label(&end));
                    (policy, end, None)
                }
                Go::ShortCircuited(policy, stopped) => {
                    (policy, answerless(Outcome::ShortCircuited), Some(stopped))
                }
                Go::Ended(ended) => return self.ended(&ended),
                Go::Stop => return,
            };
            let decided = lab.after_attempt((id, n), (&policy, refused.as_ref()), end, &mut round, &mut rng);
            let Some(next) = decided else { return };
            let Next::Retry(wait) = next else { return self.ended(&next) };
            let waited = Instant::now();
            tokio::time::sleep(Duration::from_millis(wait.planned_ms)).await;
            self.metrics.waits.observe(waited.elapsed().as_secs_f64());
        }
    }
}

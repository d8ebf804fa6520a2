//! A request's waiting and working at the lab's endpoint, once the pipeline has let it on: it
//! waits its turn in line (if it must), holds its worker for its latency, is decided against
//! the ledger and its write applied, and its answer waits for the store's commit. The web
//! handler reads the request before this and turns what this returns into a response.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::endpoint::Decided;
use super::{Lab, NotDurable, Passage};
use crate::downstream::{
    BodyDigest, Decision, DefenceKind, Dropped, IdempotencyKey, StoredResponse, Turn, Work,
};

/// The answer a served request gets: the stored one, flagged when it is a replay.
#[derive(Debug)]
pub struct Served {
    pub response: StoredResponse,
    pub replayed: bool,
}

/// Why a request was not served; nothing was applied (or what was is taken back).
#[derive(Debug)]
pub enum Refusal {
    /// Over the throttled mode's rate (429).
    Throttled { retry_after_s: u64 },
    /// No worker free and no room in line (503).
    Shed { retry_after_s: Option<u64> },
    /// Dropped by a defence without its work being done (503).
    /// With `pushback`, its client is told not to retry (a retry shed under the pushback
    /// defence).
    Dropped { why: Dropped, retry_after_s: Option<u64>, pushback: bool },
    /// The key's first request is still in line, in work, or being processed (409).
    InProgress,
    /// The key was first used with another body (422).
    BodyMismatch,
    /// An injected failure (503).
    Unavailable { retry_after_s: Option<u64> },
    /// No room for another outside key (507).
    StorageFull { limit: &'static str },
    /// The store could not read a key back (503).
    Unreadable(String),
    /// The store did not keep the write (503, or 507 when full).
    NotDurable(NotDurable),
    /// The lab was reset while the request waited (`waited`) or was processed.
    Reset { waited: bool },
}

impl From<NotDurable> for Refusal {
    fn from(not_durable: NotDurable) -> Self {
        Refusal::NotDurable(not_durable)
    }
}

impl Lab {
    /// Serves a request by how it got past the pipeline (`Lab::downstream_pass`).
    pub async fn downstream_serve(
        self: &Arc<Self>,
        key: IdempotencyKey,
        (digest, outside): (BodyDigest, bool),
        passage: Passage,
    ) -> Result<Served, Refusal> {
        let turn = match passage {
            Passage::Open => {
                let decided = self.decide_served(&key, digest, (outside, false)).await?;
                return self.clone().respond(key, decided).await;
            }
            Passage::Throttled { retry_after_s } => return Err(Refusal::Throttled { retry_after_s }),
            Passage::Shed { retry_after_s } => return Err(Refusal::Shed { retry_after_s }),
            Passage::Busy => return Err(Refusal::InProgress),
            Passage::Dropped(why) => return Err(self.dropped(why)),
            Passage::Work(work) => Worker::Now(work),
            Passage::Queued(turn) => Worker::Later(turn),
        };
        let (reply, replied) = oneshot::channel();
        let lab = self.clone();
        // All of it runs in its own task, so a request whose client gave up still takes its
        // worker when its turn comes: that work is wasted, and it is what keeps an overloaded
        // service overloaded after the trigger has gone.
        tokio::spawn(async move {
            let work = match turn {
                Worker::Now(work) => work,
                Worker::Later(turn) => match turn.await {
                    Ok(Turn::Work(work)) => work,
                    Ok(Turn::Dropped(why)) => {
                        let _ = reply.send(Err(lab.dropped(why)));
                        return;
                    }
                    Err(_) => return, // the pipeline dropped the line (the lab is gone)
                },
            };
            tokio::time::sleep(Duration::from_millis(work.latency_ms)).await;
            // The worker goes back in the same step as the decision, before the commit.
            let outcome = match lab.decide_served(&key, digest, (outside, true)).await {
                Ok(decided) => lab.clone().respond(key.clone(), decided).await,
                Err(refused) => Err(refused),
            };
            let wasted = reply.send(outcome).is_err();
            lab.downstream_work_done(&key, wasted);
        });
        replied.await.unwrap_or(Err(Refusal::Reset { waited: true }))
    }

    fn dropped(&self, why: Dropped) -> Refusal {
        let settings = self.downstream_settings();
        let pushback = why.by == DefenceKind::RetriesFirst && settings.defences.pushback;
        Refusal::Dropped { why, retry_after_s: settings.retry_after_s, pushback }
    }

    async fn decide_served(
        &self,
        key: &IdempotencyKey,
        digest: BodyDigest,
        (outside, worked): (bool, bool),
    ) -> Result<Decided, Refusal> {
        self.downstream_decide(key, digest, (outside, worked))
            .await
            .map_err(|e| Refusal::Unreadable(e.to_string()))
    }

    /// Answers a decided request.
    async fn respond(
        self: Arc<Self>,
        key: IdempotencyKey,
        Decided { decision, epoch, durable_at }: Decided,
    ) -> Result<Served, Refusal> {
        match decision {
            Decision::Replay(response) => {
                // The first answer may not be committed yet: after a crash the key could be
                // applied again, so its repeat waits for that commit too (and only for that one).
                self.persisted_through(durable_at).await?;
                Ok(Served { response, replayed: true })
            }
            Decision::InProgress => Err(Refusal::InProgress),
            Decision::BodyMismatch => Err(Refusal::BodyMismatch),
            // Also when the mode changed while an overloaded request waited in line (an outage
            // window began): it is answered by the mode now in force.
            Decision::Unavailable { retry_after_s } => Err(Refusal::Unavailable { retry_after_s }),
            Decision::StorageFull { limit } => Err(Refusal::StorageFull { limit }),
            Decision::Recall { .. } => {
                Err(Refusal::Unreadable("the key changed while it was read back".into()))
            }
            Decision::AppliedEarly { response, answer_after_ms } => {
                self.once_committed(&key, (epoch, durable_at), response, answer_after_ms).await
            }
            Decision::Applied(response) => self.once_committed(&key, (epoch, durable_at), response, 0).await,
            Decision::Process { latency_ms } => self.process(key, epoch, latency_ms).await,
        }
    }

    /// Applies a reserved key's write after `latency_ms`, in a task of its own: axum drops the
    /// handler's future when the client hangs up, and a write that has begun must still land
    /// with its key.
    async fn process(
        self: Arc<Self>,
        key: IdempotencyKey,
        epoch: u64,
        latency_ms: u64,
    ) -> Result<Served, Refusal> {
        let work = tokio::spawn(async move {
            if latency_ms > 0 {
                tokio::time::sleep(Duration::from_millis(latency_ms)).await;
            }
            let (response, applied_event) = self.downstream_complete(&key, epoch)?;
            // The key and its answer are committed with the write before anyone hears of it; a
            // write the store cannot keep is taken back, so a 503 applied nothing.
            let kept = self.persisted_through(applied_event).await;
            if kept.is_err() {
                self.downstream_unapply(&key, epoch);
            }
            Some(kept.map(|()| response))
        });
        match work.await {
            Ok(Some(Ok(response))) => Ok(Served { response, replayed: false }),
            Ok(Some(Err(not_durable))) => Err(not_durable.into()),
            _ => Err(Refusal::Reset { waited: false }),
        }
    }

    /// A write applied in the decision itself, answered once it is committed (its event,
    /// `durable_at`) and `answer_after_ms` later; a write the store cannot keep is taken back,
    /// so a 503 applied nothing.
    async fn once_committed(
        &self,
        key: &IdempotencyKey,
        (epoch, durable_at): (u64, u64),
        response: StoredResponse,
        answer_after_ms: u64,
    ) -> Result<Served, Refusal> {
        if let Err(refused) = self.persisted_through(durable_at).await {
            self.downstream_unapply(key, epoch);
            return Err(refused.into());
        }
        if answer_after_ms > 0 {
            tokio::time::sleep(Duration::from_millis(answer_after_ms)).await;
        }
        Ok(Served { response, replayed: false })
    }
}

/// When a request's worker is its: now, or when its place in line says so.
enum Worker {
    Now(Work),
    Later(oneshot::Receiver<Turn>),
}

//! The lab's side of its endpoint: each request is counted where it arrives, let
//! past the endpoint's pipeline (the rate limit, the workers and their line), decided against
//! the ledger and its write applied, all under the lab's lock, so a key can never be applied
//! twice and every answer is an event in order with the client's own. The waiting and the
//! working around these steps are `serve.rs`'s.

use std::sync::atomic::Ordering;

use tokio::sync::oneshot;

use super::outside::ended_outside;
use super::{Lab, LabState, unix_now_ms};
use crate::callers::{CallerName, Ending, Spoken, Ticket, Unparsed};
use crate::domain::Answer;
use crate::downstream::{
    BodyDigest, Caller, Clock, Decision, DefenceKind, Hints, IdempotencyKey, Moved, Request, StoredResponse,
    Turn, Waiter,
};
use crate::events::Event;
use crate::store::StoreError;

/// The lab's endpoint: a request waiting in the overloaded mode's line is handed its worker
/// (and the work to do) over a oneshot channel.
pub(super) type Endpoint = crate::downstream::Endpoint<oneshot::Sender<Turn>>;

/// How a request got past the pipeline; one waiting in line awaits its worker on the
/// receiver.
pub type Passage = crate::downstream::Passage<oneshot::Receiver<Turn>>;

impl Waiter for oneshot::Sender<Turn> {
    fn hand_over(self, turn: Turn) -> bool {
        self.send(turn).is_ok()
    }
}

/// What a request's headers said that the endpoint may use, and which did not parse.
#[derive(Debug, Clone, Copy, Default)]
pub struct Said {
    pub hints: Hints,
    /// The hint headers that were there but did not parse: counted, and ignored.
    pub unparsed: Unparsed,
}

impl Said {
    /// A hint header did not parse.
    pub fn ignored(&self) -> bool {
        self.unparsed.timeout || self.unparsed.previous_attempts
    }

    /// What an outside caller's attempt keeps of it: the numbers as sent (a timeout is at most
    /// a day, so it fits in 32 bits) and which did not parse.
    pub fn spoken(&self) -> Spoken {
        Spoken {
            timeout_ms: self.hints.timeout_ms.map(|ms| u32::try_from(ms).unwrap_or(u32::MAX)),
            previous_attempts: self.hints.previous_attempts,
            unparsed: self.unparsed,
        }
    }
}

/// A request arrived at the endpoint: the load bin it is counted in (for `downstream_done`),
/// how it got past the pipeline, and where an outside caller's request is kept.
#[derive(Debug)]
pub struct Arrival {
    pub arrived_t_ms: u64,
    pub passage: Passage,
    /// Admission control let it through: its answer goes in admission control's window.
    pub judged: bool,
    pub ticket: Option<Ticket>,
}

/// The `Retry-After` a repeat of a request still in line or in work is sent: its first answer
/// is due within about a second.
pub const BUSY_RETRY_AFTER_S: u64 = 1;

/// A request decided against the ledger.
#[derive(Debug)]
pub struct Decided {
    pub decision: Decision,
    /// The epoch it was decided in: a reset in between voids a pending write.
    pub epoch: u64,
    /// The lab's event that must be committed before the answer goes out: the write that
    /// applied the key (for a repeat too: after a crash the key could be applied again).
    pub durable_at: u64,
}

impl Lab {
    /// A request was read: counts it where it arrives and lets it past the pipeline, or
    /// refuses it (and says so in an event), and keeps an outside caller's request (`from`:
    /// who, and its body's digest), in one step. Returns the load bin it is counted in (for
    /// `downstream_done`). A request let on to its work is counted in process from here.
    pub fn downstream_pass(
        &self,
        key: &IdempotencyKey,
        said: Said,
        from: Option<(&CallerName, String)>,
    ) -> Arrival {
        let mut state = self.lock();
        let now = self.now_ms();
        let LabState { record, endpoint, .. } = &mut *state;
        endpoint.ledger.count_request();
        let arrived = record.load.arrive(now);
        if said.ignored() {
            record.load.ignored_hint(now);
        }
        let passage = endpoint.pass((key, said.hints), now, &mut rand::rng(), oneshot::channel);
        let judged = endpoint.hears_answers()
            && !matches!(passage, Passage::Dropped(dropped) if dropped.by == DefenceKind::AdmissionControl);
        if let Some(limit) = endpoint.adaptive_limit() {
            record.load.limit(now, limit);
        }
        if endpoint.line_view(now).lifo {
            record.load.lifo(now);
        }
        let refused = match passage {
            Passage::Dropped(why) => {
                record.load.dropped(now, why.said().counted);
                Some((503, why.said().event))
            }
            Passage::Throttled { .. } => Some((429, "over the rate limit, nothing applied")),
            Passage::Shed { .. } => Some((503, "shed: no worker free and no room in the queue")),
            // Answered here: it never reaches its work, nor `downstream_done`.
            Passage::Busy => {
                record.load.answer(arrived, Answer::Status(409));
                if judged {
                    // Admission control's window hears every answer it let through: a 409 is
                    // under 500, a success by Envoy's default criteria.
                    endpoint.answered(now, true);
                }
                Some((409, "key still being processed"))
            }
            Passage::Open | Passage::Work(_) => {
                record.load.work_started(now);
                None
            }
            Passage::Queued(_) => None,
        };
        // A first attempt may have taken a retry's place in line.
        let shed = Moved { handed: 0, dropped: endpoint.take_dropped() };
        self.moved(&mut state, shed, now);
        let busy = matches!(passage, Passage::Busy);
        let mut ticket = None;
        if let Some((caller, digest)) = from {
            // A repeat refused as busy is kept as a refusal before the ledger: without its body.
            let digest = (!busy).then_some(digest);
            let (kept, untracked) =
                self.arrived_outside(&mut state, (caller, key.as_str(), said.spoken(), digest), now);
            if let Some(event) = untracked {
                self.publish(&mut state, &event, now);
            }
            ticket = kept;
        }
        if let Some((status, detail)) = refused {
            let event = Event::DownstreamRequest {
                key: key.as_str().into(),
                status,
                applied: false,
                replayed: false,
                detail: Some(detail),
            };
            self.publish(&mut state, &event, now);
        }
        if busy && let Some(ticket) = ticket.take() {
            let ending =
                Ending::Answered { status: 409, retry_after_s: Some(BUSY_RETRY_AFTER_S), pushback_ms: None };
            if let Some(event) = ended_outside(&mut state, ticket, ending, now) {
                self.publish(&mut state, &event, now);
            }
        }
        Arrival { arrived_t_ms: arrived, passage, ticket, judged }
    }

    /// How the request counted in bin `arrived_t_ms` was answered; `working` when it was let
    /// straight on (its work ends here too); `judged` when admission control let it through
    /// (its answer counts there: a success under 500, a client gone a failure); an outside
    /// caller's request kept at its ticket ends with it.
    pub fn downstream_done(
        &self,
        arrived_t_ms: u64,
        (answer, working, judged): (Answer, bool, bool),
        kept: Option<(Ticket, Ending)>,
    ) {
        let mut state = self.lock();
        if working {
            state.record.load.work_finished();
        }
        if judged {
            let now = self.now_ms();
            let success = matches!(answer, Answer::Status(status) if status < 500);
            state.endpoint.answered(now, success);
        }
        state.record.load.answer(arrived_t_ms, answer);
        if let Some((ticket, ending)) = kept {
            let now = self.now_ms();
            if let Some(event) = ended_outside(&mut state, ticket, ending, now) {
                self.publish(&mut state, &event, now);
            }
        }
    }

    /// Counts what a worker going free set in motion: work begun, requests dropped from the
    /// line (each said in an event; its waiter answers it 503).
    pub(super) fn moved(&self, state: &mut LabState, Moved { handed, dropped }: Moved, now: u64) {
        for _ in 0..handed {
            state.record.load.work_started(now);
        }
        for (key, why) in dropped {
            state.record.load.dropped(now, why.said().counted);
            let event = Event::DownstreamRequest {
                key,
                status: 503,
                applied: false,
                replayed: false,
                detail: Some(why.said().event),
            };
            self.publish(state, &event, now);
        }
    }

    /// A worker's work on the request with `key` has ended, and so has its wait for the
    /// store: the key may come in again; `wasted` when its client had already given up.
    pub fn downstream_work_done(&self, key: &IdempotencyKey, wasted: bool) {
        let now = self.now_ms();
        let mut state = self.lock();
        state.endpoint.release(key, now, wasted);
        state.record.load.work_finished();
        if let Some(limit) = state.endpoint.adaptive_limit() {
            state.record.load.limit(now, limit);
        }
        if wasted {
            state.record.load.wasted(now);
        }
    }

    /// Publishes the load bins that changed since the last call, if any.
    /// Also what the steady traffic did meanwhile, and a refusal of an outside request held
    /// back (`arrived_outside`).
    pub fn publish_load(&self) {
        let mut state = self.lock();
        let now = self.now_ms();
        let bins = state.record.load.take_changed();
        if !bins.is_empty() {
            self.publish(&mut state, &Event::Load { bins }, now);
        }
        self.publish_untracked(&mut state, now);
        self.publish_traffic(&mut state, now);
    }

    /// Decides a downstream request against the ledger (see `Decided`). A key the ledger holds
    /// cold is read back from the store first, off the lab's lock, then decided like any other.
    /// A request a worker held (`worked`) gives its worker back in the same step.
    pub(super) async fn downstream_decide(
        &self,
        key: &IdempotencyKey,
        digest: BodyDigest,
        (outside, worked): (bool, bool),
    ) -> Result<Decided, StoreError> {
        let (mut leave, mut asked) = (worked, false);
        // Once is enough, unless a concurrent request with the same key changed it meanwhile.
        for _ in 0..3 {
            let request = Request { digest, caller: Caller::Lab, worked, asked };
            let decided = self.decide_now(key, request, (outside, leave));
            leave = false;
            let Decision::Recall { applied_unix_ms } = decided.decision else {
                return Ok(decided);
            };
            let read =
                self.store.read_key(self.id.to_string(), key.as_str().to_owned(), applied_unix_ms).await?;
            let mut state = self.lock();
            let ledger = &mut state.endpoint.ledger;
            let before = ledger.outside_keys();
            match applied_unix_ms {
                Some(at) => ledger.recall(key, at, read.map(|(row, _)| row), unix_now_ms()),
                None => {
                    ledger.found(key, read, unix_now_ms());
                    asked = true;
                }
            }
            let after = ledger.outside_keys();
            self.count_outside_keys(before, after);
        }
        Err(StoreError::Failed("the key changed each time it was read back from the store".into()))
    }

    /// Decides a request against the ledger as it is in memory.
    /// An outside caller's new key is refused (507) past the limits on outside keys; the lab's
    /// own client is never held to them.
    /// With `leave`, the worker that held it goes back first (to the next in line).
    fn decide_now(&self, key: &IdempotencyKey, request: Request, (outside, leave): (bool, bool)) -> Decided {
        let mut rng = rand::rng();
        let mut state = self.lock();
        let now = self.now_ms();
        if leave {
            // The worker is done once its latency is: waiting for the store to commit the
            // write is not the worker's, so the capacity is `capacity / latency_ms` whatever
            // the store's pace.
            let moved = state.endpoint.leave(now, &mut rng);
            self.moved(&mut state, moved, now);
        }
        let (decision, event) = {
            let endpoint = &mut state.endpoint;
            let clock = Clock { now_ms: now, unix_ms: unix_now_ms() };
            let before = endpoint.ledger.outside_keys();
            let caller = match outside {
                false => Caller::Lab,
                true if before >= self.limits.max_outside_keys_per_lab => {
                    Caller::Outside(Err("max_outside_keys_per_lab"))
                }
                true if self.outside_keys_total.load(Ordering::Relaxed) >= self.limits.max_outside_keys => {
                    Caller::Outside(Err("max_outside_keys"))
                }
                true => Caller::Outside(Ok(())),
            };
            let decision = endpoint.decide(key, Request { caller, ..request }, clock, &mut rng);
            self.count_outside_keys(before, endpoint.ledger.outside_keys());
            let said = match &decision {
                Decision::Replay(r) => Some((r.status, false, true, None)),
                Decision::InProgress => Some((409, false, false, Some("key still being processed"))),
                Decision::BodyMismatch => Some((422, false, false, Some("key reused with another body"))),
                Decision::Unavailable { .. } => {
                    Some((503, false, false, Some("unavailable, nothing applied")))
                }
                Decision::AppliedEarly { .. } => Some((200, true, false, Some("applied; answering slowly"))),
                Decision::Applied(r) => Some((r.status, true, false, None)),
                Decision::StorageFull { .. } => {
                    Some((507, false, false, Some("no room for another outside key")))
                }
                // Published when the write lands, in `downstream_complete`, or once the key is
                // read back and decided again.
                Decision::Process { .. } | Decision::Recall { .. } => None,
            };
            let event = said.map(|(status, applied, replayed, detail)| Event::DownstreamRequest {
                key: key.as_str().into(),
                status,
                applied,
                replayed,
                detail,
            });
            (decision, event)
        };
        if let Some(event) = event {
            self.publish(&mut state, &event, now);
        }
        let durable_at = match decision {
            // The first answer may not be committed yet; `u64::MAX` is an instant after a
            // write, before its event had a number: then everything so far.
            Decision::Replay(_) => match state.endpoint.ledger.applied_event(key) {
                u64::MAX => state.log.last_id(),
                applied_event => applied_event,
            },
            Decision::Applied(_) | Decision::AppliedEarly { .. } => {
                let applied_event = state.log.last_id();
                state.endpoint.ledger.set_applied_event(key, applied_event);
                applied_event
            }
            _ => 0,
        };
        Decided { decision, epoch: state.record.epoch, durable_at }
    }

    /// Applies a reserved key's write, unless the lab was reset since it was reserved; returns
    /// the answer and the event that applied it (to wait for its commit).
    pub fn downstream_complete(&self, key: &IdempotencyKey, epoch: u64) -> Option<(StoredResponse, u64)> {
        let mut state = self.lock();
        if state.record.epoch != epoch {
            return None;
        }
        let now = self.now_ms();
        let response = state.endpoint.ledger.complete(key, now, unix_now_ms());
        let event = Event::DownstreamRequest {
            key: key.as_str().into(),
            status: response.status,
            applied: true,
            replayed: false,
            detail: None,
        };
        self.publish(&mut state, &event, now);
        let applied_event = state.log.last_id();
        state.endpoint.ledger.set_applied_event(key, applied_event);
        Some((response, applied_event))
    }

    /// Takes back a write the store could not keep, unless the lab was reset since: the key
    /// is forgotten, so the client's retry applies it.
    pub fn downstream_unapply(&self, key: &IdempotencyKey, epoch: u64) {
        self.change(|LabState { record, endpoint, .. }, _| {
            if record.epoch != epoch {
                return None;
            }
            endpoint.unapply(key);
            let event = Event::DownstreamRequest {
                key: key.as_str().into(),
                status: 503,
                applied: false,
                replayed: false,
                detail: Some("write taken back: the store could not keep it"),
            };
            Some(((), Some(event)))
        });
    }

    /// The downstream refused a request before reading its key or body: it is counted as it
    /// arrived and answered, and said so in an event when there is a `detail`.
    pub fn downstream_refused(&self, status: u16, detail: Option<&'static str>) {
        self.change(|LabState { record, endpoint, .. }, now| {
            endpoint.ledger.count_request();
            let arrived = record.load.arrive(now);
            record.load.answer(arrived, Answer::Status(status));
            let detail = detail?;
            let event = Event::DownstreamRequest {
                key: String::new(),
                status,
                applied: false,
                replayed: false,
                detail: Some(detail),
            };
            Some(((), Some(event)))
        });
    }
}

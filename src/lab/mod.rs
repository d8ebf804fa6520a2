//! A lab: one isolated playground with its own downstream settings, retry policy, messages,
//! dead letters, ledger and event log. Every change to a lab goes through `Lab::change`, which
//! applies it to the store and publishes its event under one lock, so event ids follow the
//! order of the changes and a snapshot always matches an event id.

mod registry;

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use serde::Serialize;
use tokio::sync::{Semaphore, broadcast};
use tokio::task::AbortHandle;

use crate::config::Limits;
use crate::downstream::{self, Decision, DownstreamSettings, IdempotencyKey, StoredResponse};
use crate::events::{Event, EventLog, Published, ReplayedMessage, Start};
use crate::retry::{Policy, Wait};
use crate::store::{AttemptEnd, Counters, DeadLetter, LabRecord, Message};

pub use registry::{LabId, Labs};

pub struct Lab {
    pub id: LabId,
    /// The lab's clock: every `*_ms` time is measured from here.
    origin: Instant,
    state: Mutex<LabState>,
    /// Connection slots to the downstream: a burst queues for them instead of opening
    /// thousands of sockets at once.
    pub request_slots: Semaphore,
    /// Running deliveries, so a reset can stop them.
    tasks: Mutex<HashMap<u64, AbortHandle>>,
    max_burst: usize,
    max_messages: usize,
}

struct LabState {
    record: LabRecord,
    log: EventLog,
}

/// What a subscriber receives first.
pub enum Opening {
    Resume(Vec<Published>),
    Snapshot { id: u64, json: String },
}

#[derive(Serialize)]
struct SnapshotView<'a> {
    id: &'a LabId,
    now_ms: u64,
    last_event_id: u64,
    downstream: &'a DownstreamSettings,
    policy: &'a Policy,
    counters: Counters,
    limits: SnapshotLimits,
    messages: &'a [Message],
    dead_letters: &'a [DeadLetter],
}

#[derive(Serialize)]
struct SnapshotLimits {
    max_burst: usize,
}

/// Why a burst was refused.
#[derive(Debug)]
pub enum BurstError {
    Count { max: usize },
    LabFull { max: usize, held: usize },
}

impl Lab {
    fn new(id: LabId, limits: &Limits) -> Self {
        Lab {
            id,
            origin: Instant::now(),
            state: Mutex::new(LabState {
                record: LabRecord::default(),
                log: EventLog::new(limits.event_window, limits.subscriber_lag),
            }),
            request_slots: Semaphore::new(limits.max_concurrent_requests),
            tasks: Mutex::new(HashMap::new()),
            max_burst: limits.max_burst,
            max_messages: limits.max_messages_per_lab,
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    fn lock(&self) -> MutexGuard<'_, LabState> {
        // A panic while holding the lock cannot leave the record half-changed in a way that
        // matters more than losing the lab, so a poisoned lock is used as is.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies one change and publishes the event it yields, atomically.
    /// The closure returns `None` to change nothing, and may yield no event.
    fn change<R, E: Into<Option<Event>>>(
        &self,
        f: impl FnOnce(&mut LabRecord, u64) -> Option<(R, E)>,
    ) -> Option<R> {
        let mut state = self.lock();
        let now = self.now_ms();
        let (result, event) = f(&mut state.record, now)?;
        if let Some(event) = event.into() {
            let counters = state.record.counters();
            state.log.publish(&event, now, counters);
        }
        Some(result)
    }

    pub fn policy(&self) -> Policy {
        self.lock().record.policy
    }

    pub fn counters(&self) -> Counters {
        self.lock().record.counters()
    }

    pub fn downstream_mode(&self) -> downstream::Mode {
        self.lock().record.downstream.mode
    }

    fn snapshot_view(&self, state: &LabState) -> String {
        let record = &state.record;
        let view = SnapshotView {
            id: &self.id,
            now_ms: self.now_ms(),
            last_event_id: state.log.last_id(),
            downstream: &record.downstream,
            policy: &record.policy,
            counters: record.counters(),
            limits: SnapshotLimits { max_burst: self.max_burst },
            messages: record.messages(),
            dead_letters: record.dead_letters(),
        };
        serde_json::to_string(&view).expect("snapshots serialize: they hold only plain data")
    }

    /// The whole lab as JSON.
    pub fn snapshot(&self) -> String {
        self.snapshot_view(&self.lock())
    }

    /// Subscribes to the lab's events, resuming after `last_event_id` when the window allows.
    pub fn subscribe(&self, last_event_id: Option<u64>) -> (Opening, broadcast::Receiver<Published>) {
        let state = self.lock();
        let (start, receiver) = state.log.subscribe(last_event_id);
        let opening = match start {
            Start::Resume(events) => Opening::Resume(events),
            Start::Snapshot => {
                Opening::Snapshot { id: state.log.last_id(), json: self.snapshot_view(&state) }
            }
        };
        (opening, receiver)
    }

    /// A fresh subscription that starts from a snapshot, for a subscriber that fell behind:
    /// the snapshot and the new receiver are taken under one lock, so nothing falls between.
    pub fn resubscribe(&self) -> (u64, String, broadcast::Receiver<Published>) {
        let state = self.lock();
        let (_, receiver) = state.log.subscribe(None);
        (state.log.last_id(), self.snapshot_view(&state), receiver)
    }

    /// Applies a settings change computed from the current settings, or returns its error.
    pub fn modify_settings(
        &self,
        f: impl FnOnce(&DownstreamSettings, &Policy) -> Result<(DownstreamSettings, Policy), String>,
    ) -> Result<(DownstreamSettings, Policy), String> {
        let mut error = None;
        let changed = self.change(|record, _| match f(&record.downstream, &record.policy) {
            Ok((downstream, policy)) => {
                record.downstream = downstream;
                record.policy = policy;
                Some(((downstream, policy), Event::SettingsChanged { downstream, policy }))
            }
            Err(e) => {
                error = Some(e);
                None
            }
        });
        changed.ok_or_else(|| error.unwrap_or_default())
    }

    /// Accepts a burst of `count` new messages; returns their ids.
    pub fn accept_burst(&self, count: usize) -> Result<Vec<u64>, BurstError> {
        if count == 0 || count > self.max_burst {
            return Err(BurstError::Count { max: self.max_burst });
        }
        let mut full = None;
        let ids = self.change(|record, now| {
            let held = record.messages().len();
            if held + count > self.max_messages {
                full = Some(BurstError::LabFull { max: self.max_messages, held });
                return None;
            }
            let messages = record.create_messages(count, now);
            let ids = messages.iter().map(|m| m.id).collect();
            Some((ids, Event::MessagesCreated { messages }))
        });
        ids.ok_or_else(|| full.expect("a refused burst says why"))
    }

    /// The key and current round of a message, if it still exists.
    pub fn message_key(&self, id: u64) -> Option<(String, u32)> {
        let state = self.lock();
        state.record.message(id).map(|m| (m.key.clone(), m.round))
    }

    pub fn attempt_started(&self, id: u64, n: u32) -> bool {
        self.change(|record, now| {
            let (attempt, waited_ms) = record.start_attempt(id, n, now)?;
            Some(((), Event::AttemptStarted { message_id: id, attempt, waited_ms }))
        })
        .is_some()
    }

    pub fn attempt_finished(&self, id: u64, end: AttemptEnd) {
        self.change(|record, _| {
            let attempt = record.finish_attempt(id, end)?;
            Some(((), Event::AttemptFinished { message_id: id, attempt }))
        });
    }

    pub fn wait_scheduled(&self, id: u64, wait: Wait) {
        self.change(|record, _| {
            let (round, n) = record.schedule_wait(id, wait)?;
            Some(((), Event::WaitScheduled { message_id: id, round, n, wait }))
        });
    }

    pub fn delivered(&self, id: u64) {
        self.change(|record, _| record.deliver(id).then_some(((), Event::Delivered { message_id: id })));
    }

    pub fn dead_lettered(&self, id: u64, reason: String) {
        self.change(|record, now| {
            let dead_letter = record.dead_letter(id, reason, now)?;
            Some(((), Event::DeadLettered { dead_letter }))
        });
    }

    /// Moves dead letters back to the queue for a new round (all of them with `None`).
    /// On error, returns the ids that are not in the dead-letter queue.
    pub fn replay(&self, ids: Option<&[u64]>) -> Result<Vec<u64>, Vec<u64>> {
        let mut missing = Vec::new();
        let replayed = self.change(|record, _| match record.replay(ids) {
            Ok(moved) => {
                let ids = moved.iter().map(|&(id, _)| id).collect();
                let messages = moved.into_iter().map(|(id, round)| ReplayedMessage { id, round }).collect();
                Some((ids, Event::ReplayStarted { messages }))
            }
            Err(m) => {
                missing = m;
                None
            }
        });
        replayed.ok_or(missing)
    }

    /// Stops every delivery and clears messages, dead letters and the ledger.
    pub fn reset(&self) {
        for (_, task) in self.tasks_lock().drain() {
            task.abort();
        }
        let mut state = self.lock();
        state.record.reset();
        let now = self.now_ms();
        let snapshot = serde_json::from_str(&self.snapshot_view(&state)).expect("a snapshot is JSON");
        let counters = state.record.counters();
        state.log.publish(&Event::Reset { snapshot }, now, counters);
    }

    pub fn track(&self, id: u64, task: AbortHandle) {
        self.tasks_lock().insert(id, task);
    }

    /// Forgets a finished delivery, unless a newer one (a replay) has taken its place.
    pub fn untrack(&self, id: u64, task: tokio::task::Id) {
        let mut tasks = self.tasks_lock();
        if tasks.get(&id).is_some_and(|t| t.id() == task) {
            tasks.remove(&id);
        }
    }

    fn tasks_lock(&self) -> MutexGuard<'_, HashMap<u64, AbortHandle>> {
        self.tasks.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Decides a downstream request against the ledger; returns the decision and the epoch
    /// it was made in (a reset in between voids a pending write).
    pub fn downstream_decide(&self, key: &IdempotencyKey, body: &serde_json::Value) -> (Decision, u64) {
        let mut rng = rand::rng();
        self.change(|record, now| {
            let settings = record.downstream;
            let decision = downstream::decide(&mut record.ledger, &settings, key, body, now, &mut rng);
            let (status, applied, replayed, detail) = match &decision {
                Decision::Replay(r) => (r.status, false, true, "replayed the stored answer"),
                Decision::InProgress => (409, false, false, "key still being processed"),
                Decision::BodyMismatch => (422, false, false, "key reused with another body"),
                Decision::Unavailable { .. } => (503, false, false, "unavailable, nothing applied"),
                Decision::AppliedEarly { .. } => (200, true, false, "applied; answering slowly"),
                // Published when the write lands, in `downstream_complete`.
                Decision::Process { .. } => return Some(((decision, record.epoch), None)),
            };
            let event =
                Event::DownstreamRequest { key: key.as_str().into(), status, applied, replayed, detail };
            Some(((decision, record.epoch), Some(event)))
        })
        .expect("a decision is always made")
    }

    /// Applies a reserved key's write, unless the lab was reset since it was reserved.
    pub fn downstream_complete(&self, key: &IdempotencyKey, epoch: u64) -> Option<StoredResponse> {
        self.change(|record, now| {
            if record.epoch != epoch {
                return None;
            }
            let response = record.ledger.complete(key, now);
            let event = Event::DownstreamRequest {
                key: key.as_str().into(),
                status: response.status,
                applied: true,
                replayed: false,
                detail: "applied",
            };
            Some((response, Some(event)))
        })
    }

    /// Counts a request the downstream refused before reading its key or body.
    pub fn downstream_refused(&self, status: u16, detail: &'static str) {
        self.change(|record, _| {
            record.ledger.count_request();
            let event = Event::DownstreamRequest {
                key: String::new(),
                status,
                applied: false,
                replayed: false,
                detail,
            };
            Some(((), Some(event)))
        });
    }
}

//! A lab: one isolated playground with its own downstream settings, retry policy, messages,
//! dead letters, ledger and event log. Every change to a lab goes through `Lab::change`, which
//! applies it to the record, publishes its event and schedules the store's commit under one
//! lock, so event ids follow the order of the changes and a snapshot always matches an id.

mod registry;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::{Semaphore, broadcast, watch};
use tokio::task::AbortHandle;

use crate::config::{Limits, Retention};
use crate::downstream::{self, Decision, DownstreamSettings, IdempotencyKey, StoredResponse};
use crate::events::{Event, EventLog, Published, ReplayedMessage, Start};
use crate::retry::{Policy, Wait};
use crate::store::{
    AttemptEnd, Batch, Counters, DeadLetter, Flush, LabRecord, LabRow, Message, ReplayRefusal, ResumePoint,
    Store,
};

pub use registry::{LabId, Labs};

/// How long a caller waits for the store to confirm a commit before answering 503.
const STORE_PATIENCE: Duration = Duration::from_secs(10);

pub struct Lab {
    pub id: LabId,
    /// The lab's clock: every `*_ms` time is milliseconds since this wall-clock instant, so
    /// times stay comparable across restarts.
    origin_unix_ms: u64,
    state: Mutex<LabState>,
    /// Connection slots to the downstream: a burst queues for them instead of opening
    /// thousands of sockets at once.
    pub request_slots: Semaphore,
    /// Running deliveries, so a reset or a crash can stop them.
    tasks: Mutex<HashMap<u64, AbortHandle>>,
    store: Store,
    /// This lab, for handing itself to the store's writer.
    this: Weak<Lab>,
    /// The last event id the store has committed.
    durable: watch::Sender<u64>,
    /// Open event streams.
    subscribers: AtomicUsize,
    limits: Limits,
    retention: Retention,
}

struct LabState {
    record: LabRecord,
    log: EventLog,
    /// Already handed to the store's writer, which has not yet taken the changes.
    flush_pending: bool,
    active_unix_ms: u64,
    deleted: bool,
}

/// What a subscriber receives first.
pub enum Opening {
    Resume(Vec<Published>),
    Snapshot { id: u64, json: String },
}

/// Everything about a lab: settings, counters, every message with every attempt, dead letters.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Snapshot)]
pub struct SnapshotView<'a> {
    #[schema(value_type = String, format = Uuid)]
    id: &'a LabId,
    now_ms: u64,
    last_event_id: u64,
    downstream: &'a DownstreamSettings,
    policy: &'a Policy,
    counters: Counters,
    limits: SnapshotLimits,
    retention: &'a Retention,
    messages: &'a [Message],
    dead_letters: &'a [DeadLetter],
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct SnapshotLimits {
    max_burst: usize,
    max_messages_per_lab: usize,
}

/// Why a burst was refused.
#[derive(Debug)]
pub enum BurstError {
    Count { max: usize },
    LabFull { max: usize, held: usize },
    TooManyActive { max: usize, active: usize },
}

/// The store did not confirm a commit in time.
#[derive(Debug)]
pub struct NotDurable;

pub fn unix_now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Lab {
    fn build(
        this: Weak<Lab>,
        id: LabId,
        origin_unix_ms: u64,
        record: LabRecord,
        last_event_id: u64,
        registry: &Labs,
    ) -> Self {
        let limits = registry.limits.clone();
        Lab {
            id,
            origin_unix_ms,
            state: Mutex::new(LabState {
                record,
                log: EventLog::new(limits.event_window, limits.subscriber_lag, last_event_id),
                flush_pending: false,
                active_unix_ms: unix_now_ms(),
                deleted: false,
            }),
            request_slots: Semaphore::new(limits.max_concurrent_requests),
            tasks: Mutex::new(HashMap::new()),
            store: registry.store.clone(),
            this,
            durable: watch::Sender::new(last_event_id),
            subscribers: AtomicUsize::new(0),
            limits,
            retention: registry.retention.clone(),
        }
    }

    pub fn now_ms(&self) -> u64 {
        unix_now_ms().saturating_sub(self.origin_unix_ms)
    }

    fn lock(&self) -> MutexGuard<'_, LabState> {
        // A panic while holding the lock cannot leave the record half-changed in a way that
        // matters more than losing the lab, so a poisoned lock is used as is.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies one change and publishes the event it yields, atomically, and schedules the
    /// commit. The closure returns `None` to change nothing, and may yield no event.
    fn change<R, E: Into<Option<Event>>>(
        &self,
        f: impl FnOnce(&mut LabRecord, u64) -> Option<(R, E)>,
    ) -> Option<R> {
        let mut state = self.lock();
        let now = self.now_ms();
        let (result, event) = f(&mut state.record, now)?;
        if let Some(event) = event.into() {
            self.publish(&mut state, &event, now);
        }
        Some(result)
    }

    fn publish(&self, state: &mut LabState, event: &Event, now: u64) {
        let counters = state.record.counters();
        state.log.publish(event, now, counters);
        state.active_unix_ms = unix_now_ms();
        self.schedule_flush(state);
    }

    /// Hands the lab to the store's writer, unless it already has it.
    fn schedule_flush(&self, state: &mut LabState) {
        if !state.flush_pending {
            state.flush_pending = true;
            if let Some(this) = self.this.upgrade() {
                self.store.schedule(this);
            }
        }
    }

    /// Waits until every change made so far is committed to the store.
    pub async fn persisted(&self) -> Result<(), NotDurable> {
        let target = self.lock().log.last_id();
        let mut durable = self.durable.subscribe();
        match tokio::time::timeout(STORE_PATIENCE, durable.wait_for(|&d| d >= target)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(NotDurable),
        }
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

    pub fn active_unix_ms(&self) -> u64 {
        self.lock().active_unix_ms
    }

    fn view<'a>(&'a self, state: &'a LabState) -> SnapshotView<'a> {
        let record = &state.record;
        SnapshotView {
            id: &self.id,
            now_ms: self.now_ms(),
            last_event_id: state.log.last_id(),
            downstream: &record.downstream,
            policy: &record.policy,
            counters: record.counters(),
            limits: SnapshotLimits {
                max_burst: self.limits.max_burst,
                max_messages_per_lab: self.limits.max_messages_per_lab,
            },
            retention: &self.retention,
            messages: record.messages(),
            dead_letters: record.dead_letters(),
        }
    }

    fn snapshot_view(&self, state: &LabState) -> String {
        serde_json::to_string(&self.view(state)).expect("snapshots serialize: they hold only plain data")
    }

    /// The snapshot as a value, for events that carry it (serialized once, not parsed back).
    fn snapshot_value(&self, state: &LabState) -> serde_json::Value {
        serde_json::to_value(self.view(state)).expect("snapshots serialize: they hold only plain data")
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
        if count == 0 || count > self.limits.max_burst {
            return Err(BurstError::Count { max: self.limits.max_burst });
        }
        let max = self.limits.max_messages_per_lab;
        let max_active = self.limits.max_active_messages_per_lab;
        let mut full = None;
        let ids = self.change(|record, now| {
            let held = record.messages().len();
            if held + count > max {
                full = Some(BurstError::LabFull { max, held });
                return None;
            }
            let active = record.active_messages();
            if active + count > max_active {
                full = Some(BurstError::TooManyActive { max: max_active, active });
                return None;
            }
            let messages = record.create_messages(count, now);
            let ids = messages.iter().map(|m| m.id).collect();
            Some((ids, Event::MessagesCreated { messages }))
        });
        ids.ok_or_else(|| full.expect("a refused burst says why"))
    }

    /// Where the message's delivery continues; `None` if it is no longer owed one.
    pub fn resume_point(&self, id: u64) -> Option<ResumePoint> {
        self.lock().record.resume_point(id, self.now_ms())
    }

    pub fn attempt_started(&self, id: u64, n: u32) -> bool {
        self.change(|record, now| {
            let (attempt, waited_ms) = record.start_attempt(id, n, now)?;
            let attempt = (&attempt).into();
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
            let dead_letter = record.dead_letter(id, reason, now, unix_now_ms())?;
            Some(((), Event::DeadLettered { dead_letter }))
        });
    }

    /// Moves dead letters back to the queue for a new round (all but the quarantined with `None`).
    pub fn replay(&self, ids: Option<&[u64]>, confirm_quarantined: bool) -> Result<Vec<u64>, ReplayRefusal> {
        let mut refusal = None;
        let max_active = self.limits.max_active_messages_per_lab;
        let replayed = self.change(|record, _| match record.replay(ids, confirm_quarantined, max_active) {
            Ok(moved) => {
                let ids = moved.iter().map(|&(id, _)| id).collect();
                let messages = moved.into_iter().map(|(id, round)| ReplayedMessage { id, round }).collect();
                Some((ids, Event::ReplayStarted { messages }))
            }
            Err(r) => {
                refusal = Some(r);
                None
            }
        });
        replayed.ok_or_else(|| refusal.expect("a refused replay says why"))
    }

    /// Stops every delivery and clears messages, dead letters and the ledger.
    pub fn reset(&self) {
        self.abort_deliveries();
        let mut state = self.lock();
        state.record.reset();
        let now = self.now_ms();
        let snapshot = self.snapshot_value(&state);
        self.publish(&mut state, &Event::Reset { snapshot }, now);
    }

    /// Stops every delivery where it stands, without recording anything: a crash.
    pub fn abort_deliveries(&self) {
        for (_, task) in self.tasks_lock().drain() {
            task.abort();
        }
    }

    /// Replaces the messages and dead letters with the store's copy (after a client crash).
    pub fn reload(&self, messages: Vec<Message>, dead_letters: Vec<DeadLetter>) {
        self.lock().record.replace_messages(messages, dead_letters);
    }

    /// Picks up after the client died: attempts that were running count as interrupted, and
    /// every message still owed a delivery is returned to be resumed.
    pub fn recover(&self, reason: &'static str) -> Vec<u64> {
        let mut state = self.lock();
        let now = self.now_ms();
        let active: Vec<u64> =
            state.record.messages().iter().filter(|m| m.state.is_active()).map(|m| m.id).collect();
        if active.is_empty() {
            return active;
        }
        for &id in &active {
            state.record.interrupt(id, now);
        }
        let snapshot = self.snapshot_value(&state);
        self.publish(&mut state, &Event::Recovered { reason, resumed: active.clone(), snapshot }, now);
        active
    }

    /// Applies the retention windows; returns how many dead letters and keys expired.
    pub fn expire(&self, now_unix_ms: u64) -> (usize, usize) {
        let retention = &self.retention;
        let mut state = self.lock();
        let letters_before = now_unix_ms.saturating_sub(retention.dead_letter_ttl_s.saturating_mul(1000));
        let keys_before = now_unix_ms.saturating_sub(retention.key_ttl_s.saturating_mul(1000));
        let letters = state.record.expire_dead_letters(letters_before);
        let keys = state.record.expire_keys(keys_before);
        if !letters.is_empty() || keys > 0 {
            let now = self.now_ms();
            let snapshot = self.snapshot_value(&state);
            let event = Event::Expired { dead_letters: letters.clone(), keys, snapshot };
            self.publish(&mut state, &event, now);
        }
        (letters.len(), keys)
    }

    /// Marks the lab deleted; its rows go with the next commit.
    pub fn delete(&self) {
        self.abort_deliveries();
        let mut state = self.lock();
        state.deleted = true;
        self.schedule_flush(&mut state);
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

    /// Counts an open event stream, unless the lab already has `max_subscribers_per_lab`.
    pub fn add_subscriber(&self) -> Result<(), usize> {
        let max = self.limits.max_subscribers_per_lab;
        self.subscribers
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |open| (open < max).then_some(open + 1))
            .map(|_| ())
            .map_err(|_| max)
    }

    pub fn remove_subscriber(&self) {
        self.subscribers.fetch_sub(1, Ordering::SeqCst);
    }

    pub fn has_subscribers(&self) -> bool {
        self.subscribers.load(Ordering::SeqCst) > 0
    }

    pub fn has_deliveries(&self) -> bool {
        !self.tasks_lock().is_empty()
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
            let clock = (now, unix_now_ms());
            let decision = downstream::decide(&mut record.ledger, &settings, key, body, clock, &mut rng);
            let (status, applied, replayed, detail) = match &decision {
                Decision::Replay(r) => (r.status, false, true, None),
                Decision::InProgress => (409, false, false, Some("key still being processed")),
                Decision::BodyMismatch => (422, false, false, Some("key reused with another body")),
                Decision::Unavailable { .. } => (503, false, false, Some("unavailable, nothing applied")),
                Decision::AppliedEarly { .. } => (200, true, false, Some("applied; answering slowly")),
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
            let response = record.ledger.complete(key, now, unix_now_ms());
            let event = Event::DownstreamRequest {
                key: key.as_str().into(),
                status: response.status,
                applied: true,
                replayed: false,
                detail: None,
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
                detail: Some(detail),
            };
            Some(((), Some(event)))
        });
    }
}

impl Flush for Lab {
    fn take_batch(&self) -> Option<Batch> {
        let mut state = self.lock();
        state.flush_pending = false;
        let lab_id = self.id.to_string();
        if state.deleted {
            return Some(Batch { lab_id, row: None, delete: true, changes: Default::default(), upto: 0 });
        }
        let record = &mut state.record;
        let changes = record.take_changes();
        let row = LabRow {
            id: lab_id.clone(),
            origin_unix_ms: self.origin_unix_ms,
            active_unix_ms: state.active_unix_ms,
            downstream: serde_json::to_string(&state.record.downstream).expect("settings serialize"),
            policy: serde_json::to_string(&state.record.policy).expect("a policy serializes"),
            counts: state.record.ledger.counts(),
            next_message_id: state.record.next_message_id(),
            last_event_id: state.log.last_id(),
            epoch: state.record.epoch,
        };
        Some(Batch { lab_id, row: Some(row), delete: false, changes, upto: state.log.last_id() })
    }

    fn failed(&self, batch: Batch) {
        let mut state = self.lock();
        if batch.delete {
            state.deleted = true;
        } else {
            state.record.restore_changes(batch.changes);
        }
        self.schedule_flush(&mut state);
    }

    fn committed(&self, upto: u64) {
        self.durable.send_if_modified(|durable| {
            let newer = upto > *durable;
            if newer {
                *durable = upto;
            }
            newer
        });
    }
}

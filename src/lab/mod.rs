//! A lab: one isolated playground with its own downstream settings, retry policy, messages,
//! dead letters, ledger and event log. Every change to a lab goes through `Lab::change`, which
//! applies it to the state, publishes its event and schedules the store's commit under one
//! lock, so event ids follow the order of the changes and a snapshot always matches an id.
//!
//! This file holds the lab's state and its lock, and what the lab does as a whole: a burst
//! accepted or withdrawn, a replay, a reset, a recovery, an expiry, a deletion. The other files
//! each hold one seam of the lab: `settings` (its downstream and policy as they change, and the
//! markers), `attempts` (its clients around each attempt and a hedged round's hedges, and their
//! protections), `endpoint` (its side of its endpoint: the pipeline and the decisions), `serve`
//! (a request's waiting and working at the endpoint), `outside` (its outside callers),
//! `traffic` (its steady traffic), `queue` (its dead-letter queue as an operator works it),
//! `snapshot` (the lab as one document), `subscribers` (who watches it), `flush` (how its
//! changes reach the store), `holds` (how long its lock is held), `rest` (a lab at rest, in the
//! store only), `deliveries` (its running tasks), `clock` (its time, monotonic from an origin
//! on the wall clock), `registry` (all labs).

mod attempts;
mod clock;
mod deliveries;
mod endpoint;
mod flush;
mod holds;
mod outside;
mod queue;
mod registry;
mod rest;
mod serve;
mod settings;
mod snapshot;
mod subscribers;
mod traffic;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::{Semaphore, watch};

use crate::callers::Callers;
use crate::client::Clients;
use crate::config::{Limits, Retention};
use crate::dlq::{DeadLetter, DeadLetterQueue, ReplayRefusal, Target};
use crate::domain::{Counters, LabId, LabRecord, Message};
use crate::downstream::{DownstreamSettings, HeldKeys, LedgerCounts};
use crate::events::{Event, EventLog, ReplayedMessage};
use crate::retry::Policy;
use crate::store::Store;

pub use attempts::{Cancelled, Go, Slots};
use endpoint::Endpoint;
pub use endpoint::{Arrival, BUSY_RETRY_AFTER_S, Passage, Said};
pub use flush::NotDurable;
pub use holds::{HOLD_STEPS_MS, LockHolds};
pub use queue::{Deleted, Detail, DryRun, Listing, RedriveRefusal, Step};
pub use registry::Labs;
pub use serve::{Refusal, Served};
pub use settings::Settings;
pub use snapshot::{SnapshotLimits, SnapshotView};
pub use subscribers::Opening;

pub struct Lab {
    pub id: LabId,
    /// The lab's clock: every `*_ms` time is milliseconds since its origin, a wall-clock
    /// instant the store keeps (so times stay comparable across restarts), measured within
    /// this process on the monotonic clock (so a step of the system clock cannot move them).
    clock: clock::LabClock,
    state: Mutex<LabState>,
    /// Connection slots to the downstream: a burst queues for them instead of opening
    /// thousands of sockets at once.
    pub request_slots: Semaphore,
    /// Running deliveries, so a reset or a crash can stop them.
    deliveries: deliveries::Deliveries,
    /// The task that creates the steady traffic's arrivals, while it runs.
    traffic_task: Mutex<Option<tokio::task::AbortHandle>>,
    store: Store,
    /// This lab, for handing itself to the store's writer.
    this: Weak<Lab>,
    /// The last event id the store has committed.
    durable: watch::Sender<u64>,
    /// Open event streams.
    subscribers: AtomicUsize,
    /// The size of the last snapshot made of this lab, in bytes: what the next will cost.
    snapshot_bytes: AtomicUsize,
    /// Idempotency keys kept for outside callers by every lab of this server.
    outside_keys_total: Arc<AtomicUsize>,
    /// Outside messages (a caller's key) kept by every lab of this server.
    outside_messages_total: Arc<AtomicUsize>,
    /// Every lab of this server (the registry's), for what they owe together.
    neighbours: Weak<registry::Held>,
    /// How long the labs' locks were held (the registry's, for every lab of this server).
    lock_holds: Arc<LockHolds>,
    /// The server's limits this lab is held to.
    limits: Limits,
    retention: Retention,
}

/// A lab's parts as they start: fresh, or as the store kept them.
#[derive(Default)]
struct Parts {
    record: LabRecord,
    endpoint: Endpoint,
    clients: Clients,
    dead_letters: DeadLetterQueue,
    callers: Callers,
}

/// The lab's state: its messages, its endpoint's state and its client's, each owned by its own
/// type, side by side, with what the store has yet to be told.
struct LabState {
    record: LabRecord,
    endpoint: Endpoint,
    /// The policy, each client's state, and what the clients share.
    clients: Clients,
    traffic: crate::domain::Traffic,
    dead_letters: DeadLetterQueue,
    /// What the endpoint observed of outside callers.
    callers: Callers,
    untracked_news: outside::UntrackedNews,
    log: EventLog,
    /// Already handed to the store's writer, which has not yet taken the changes.
    flush_pending: bool,
    /// Batches the writer took, and of them the ones it committed (it commits one before it
    /// takes the next): equal when the store holds everything taken.
    batches_taken: u64,
    batches_saved: u64,
    /// The lab's last event and activity when a sweep found it ready to rest (`rest`).
    rest_mark: Option<(u64, u64)>,
    /// When this process made or read the lab back: a lab woken by a request stays in memory
    /// for `idle_lab_rest_ms` at least, though reading it is no change.
    awake_since_unix_ms: u64,
    active_unix_ms: u64,
    /// When the last page watching the lab stopped, while none watches again.
    unwatched_since_unix_ms: Option<u64>,
    deleted: bool,
}

impl LabState {
    fn counters(&self) -> Counters {
        let LedgerCounts { requests, applied, applied_twice } = self.endpoint.ledger.counts();
        Counters { requests, applied, applied_twice, ..self.record.counters(self.dead_letters.quarantined()) }
    }
}

/// What the retention windows took from a lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    pub dead_letters: usize,
    pub keys: usize,
}

/// Why a burst was refused.
#[derive(Debug)]
pub enum BurstError {
    Count {
        max: usize,
    },
    /// The lab holds `max` messages that do not leave to make room: `dead_letters` and those
    /// still `owed` a delivery (delivered ones make room).
    LabFull {
        max: usize,
        held: usize,
        dead_letters: usize,
        owed: usize,
    },
    TooManyActive {
        max: usize,
        active: usize,
    },
}

pub fn unix_now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Lab {
    fn build(
        this: Weak<Lab>,
        id: LabId,
        origin_unix_ms: u64,
        Parts { record, endpoint, clients, dead_letters, callers }: Parts,
        last_event_id: u64,
        registry: &Labs,
    ) -> Self {
        let limits = registry.limits.clone();
        Lab {
            id,
            clock: clock::LabClock::new(origin_unix_ms),
            state: Mutex::new(LabState {
                record,
                endpoint,
                clients,
                traffic: Default::default(),
                dead_letters,
                callers,
                untracked_news: Default::default(),
                log: EventLog::new(limits.event_window, limits.subscriber_lag, last_event_id)
                    .with_max_bytes(limits.event_window_bytes),
                flush_pending: false,
                batches_taken: 0,
                batches_saved: 0,
                rest_mark: None,
                awake_since_unix_ms: unix_now_ms(),
                active_unix_ms: unix_now_ms(),
                unwatched_since_unix_ms: None,
                deleted: false,
            }),
            request_slots: Semaphore::new(limits.max_concurrent_requests),
            deliveries: Default::default(),
            traffic_task: Mutex::new(None),
            store: registry.store.clone(),
            this,
            durable: watch::Sender::new(last_event_id),
            subscribers: AtomicUsize::new(0),
            snapshot_bytes: AtomicUsize::new(0),
            outside_keys_total: registry.outside_keys.clone(),
            outside_messages_total: registry.outside_messages.clone(),
            neighbours: registry.held(),
            lock_holds: registry.lock_holds.clone(),
            limits,
            retention: registry.retention.clone(),
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn lock(&self) -> holds::Held<'_, LabState> {
        // A panic while holding the lock cannot leave the record half-changed in a way that
        // matters more than losing the lab, so a poisoned lock is used as is.
        let guard = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        holds::Held { guard, since: std::time::Instant::now(), holds: &self.lock_holds }
    }

    /// Applies one change and publishes the event it yields, atomically, and schedules the
    /// commit. The closure returns `None` to change nothing, and may yield no event.
    fn change<R, E: Into<Option<Event>>>(
        &self,
        f: impl FnOnce(&mut LabState, u64) -> Option<(R, E)>,
    ) -> Option<R> {
        let mut state = self.lock();
        let now = self.now_ms();
        let (result, event) = f(&mut state, now)?;
        if let Some(event) = event.into() {
            self.publish(&mut state, &event, now);
        }
        Some(result)
    }

    fn publish(&self, state: &mut LabState, event: &Event, now: u64) {
        let counters = state.counters();
        state.log.publish(event, now, counters);
        state.active_unix_ms = unix_now_ms();
        self.schedule_flush(state);
    }

    pub fn policy(&self) -> Policy {
        self.lock().clients.policy().clone()
    }

    pub fn counters(&self) -> Counters {
        self.lock().counters()
    }

    /// Applied keys in memory: held whole, and held by fingerprint only.
    pub fn held_keys(&self) -> HeldKeys {
        self.lock().endpoint.ledger.held()
    }

    pub fn downstream_settings(&self) -> DownstreamSettings {
        self.lock().endpoint.settings
    }

    pub fn active_unix_ms(&self) -> u64 {
        self.lock().active_unix_ms
    }

    /// Reads the lab's messages, its dead letters and its counters, under the lock (keep `f`
    /// short).
    pub fn read<R>(&self, f: impl FnOnce(&LabRecord, &DeadLetterQueue, Counters) -> R) -> R {
        let state = self.lock();
        f(&state.record, &state.dead_letters, state.counters())
    }

    /// Messages still owed a delivery.
    pub fn active_messages(&self) -> usize {
        self.lock().record.active_messages()
    }

    /// Messages the server's other labs owe a delivery (this lab's own not locked or counted).
    fn active_elsewhere(&self) -> usize {
        let Some(held) = self.neighbours.upgrade() else { return 0 };
        registry::active_in(&held, Some(&self.id))
    }

    /// Accepts a burst of `count` new messages; returns their ids.
    pub fn accept_burst(&self, count: usize) -> Result<Vec<u64>, BurstError> {
        if count == 0 || count > self.limits.max_burst {
            return Err(BurstError::Count { max: self.limits.max_burst });
        }
        let max = self.limits.max_messages_per_lab;
        let max_active = self.limits.max_active_messages_per_lab;
        let mut state = self.lock();
        let now = self.now_ms();
        let record = &mut state.record;
        let (held, (delivered, dead_letters)) = (record.held(), record.delivered_and_dead());
        // Delivered messages make room (`make_room`); dead letters and those owed a delivery
        // stay until a person replays or deletes them, or they finish.
        if held - delivered + count > max {
            return Err(BurstError::LabFull {
                max,
                held,
                dead_letters,
                owed: held - delivered - dead_letters,
            });
        }
        let active = record.active_messages();
        if active + count > max_active {
            return Err(BurstError::TooManyActive { max: max_active, active });
        }
        let forgotten = record.make_room(count, max);
        let messages = record.create_messages(count, now);
        let ids = messages.iter().map(|m| m.id).collect();
        if !forgotten.is_empty() {
            self.publish(&mut state, &Event::MessagesForgotten { message_ids: forgotten }, now);
        }
        self.publish(&mut state, &Event::MessagesCreated { messages }, now);
        Ok(ids)
    }

    /// Moves dead letters back to the queue for a new round (all but the quarantined with
    /// `Target::All`), keeping their keys; returns them as they were (to take the replay back
    /// with `withdraw_replay`). Changes nothing when refused.
    pub fn replay(
        &self,
        target: &Target,
        confirm_quarantined: bool,
    ) -> Result<Vec<DeadLetter>, ReplayRefusal> {
        let mut state = self.lock();
        let chosen = state.select(target, (true, confirm_quarantined))?.ids;
        let (max, active) = (self.limits.max_active_messages_per_lab, state.record.active_messages());
        if active + chosen.len() > max {
            return Err(ReplayRefusal::TooManyActive { max, active, asked: chosen.len() });
        }
        let letters = state.dead_letters.remove(&chosen);
        let moved = state.record.requeue(&chosen);
        let messages = moved.into_iter().map(|(id, round)| ReplayedMessage { id, round }).collect();
        let now = self.now_ms();
        self.publish(&mut state, &Event::ReplayStarted { messages }, now);
        Ok(letters)
    }

    /// Takes back a replay the store could not keep: the letters are dead letters again.
    pub fn withdraw_replay(&self, letters: Vec<DeadLetter>) {
        let mut state = self.lock();
        for letter in &letters {
            state.record.return_to_dead_letters(letter.id, letter.round);
        }
        let ids: Vec<u64> = letters.iter().map(|d| d.id).collect();
        state.dead_letters.put_back(letters);
        self.publish_withdrawn(
            &mut state,
            "replay",
            Withdrawal { messages: &ids, letters: &ids, removed: &[] },
        );
    }

    /// Takes back a burst the store could not keep: its messages are gone.
    pub fn withdraw_burst(&self, ids: &[u64]) {
        let mut state = self.lock();
        state.record.remove_messages(ids);
        self.publish_withdrawn(&mut state, "burst", Withdrawal { removed: ids, ..Withdrawal::default() });
    }

    /// Says what a withdrawal put back, each part as it now is.
    fn publish_withdrawn(&self, state: &mut LabState, what: &'static str, touched: Withdrawal) {
        let now = self.now_ms();
        let messages = touched
            .messages
            .iter()
            .filter_map(|&id| state.record.message(id).map(|m| m.into_owned()))
            .collect();
        let dead_letters = touched
            .letters
            .iter()
            .filter_map(|&id| state.dead_letters.get(id))
            .map(|d| state.as_ledger_says(d))
            .collect();
        let redrive = state.dead_letters.redrive();
        let removed = touched.removed.to_vec();
        self.publish(state, &Event::Withdrawn { what, messages, removed, dead_letters, redrive }, now);
    }

    /// Stops the traffic and every delivery and clears messages, dead letters and the ledger.
    pub fn reset(&self) {
        self.abort_deliveries();
        self.stop_traffic_task();
        let mut state = self.lock();
        state.traffic = Default::default();
        self.count_outside_keys(state.endpoint.ledger.outside_keys(), 0);
        state.record.reset();
        state.endpoint.reset();
        state.clients.reset();
        state.dead_letters.clear();
        self.forget_outside(&state);
        state.callers.reset();
        state.untracked_news = Default::default();
        // What came before the reset is of no use to a resume: the reset event carries the lab.
        state.log.forget_window();
        let now = self.now_ms();
        let snapshot = self.snapshot_value(&state);
        self.publish(&mut state, &Event::Reset { snapshot }, now);
    }

    /// Replaces the messages and dead letters with the store's copy (after a client crash).
    pub fn reload(&self, messages: Vec<Message>, dead_letters: Vec<DeadLetter>) {
        let mut state = self.lock();
        state.record.replace_messages(messages);
        state.dead_letters.replace(dead_letters);
    }

    /// Picks up after the client died: attempts that were running count as interrupted, and
    /// every message still owed a delivery is returned to be resumed.
    pub fn recover(&self, reason: &'static str) -> Vec<u64> {
        let mut state = self.lock();
        let now = self.now_ms();
        let active = state.record.active_ids();
        if active.is_empty() {
            return active;
        }
        for &id in &active {
            state.record.interrupt(id, now);
        }
        // Probes that were cut off never answer.
        state.clients.forget_probes();
        let snapshot = self.snapshot_value(&state);
        self.publish(&mut state, &Event::Recovered { reason, resumed: active.clone(), snapshot }, now);
        active
    }

    /// Applies the retention windows; returns how many dead letters and keys expired.
    pub fn expire(&self, now_unix_ms: u64) -> Expired {
        let retention = &self.retention;
        let mut state = self.lock();
        let letters_before = now_unix_ms.saturating_sub(retention.dead_letter_ttl_s.saturating_mul(1000));
        let keys_before = now_unix_ms.saturating_sub(retention.key_ttl_s.saturating_mul(1000));
        let letters = state.dead_letters.expire(letters_before);
        state.record.remove_messages(&letters);
        let outside_before = state.endpoint.ledger.outside_keys();
        let state = &mut *state;
        let needed = state.record.keys_needed();
        let needed: Vec<&str> = needed.iter().map(String::as_str).collect();
        let keys = state.endpoint.expire_keys(keys_before, &needed);
        self.count_outside_keys(outside_before, state.endpoint.ledger.outside_keys());
        if !letters.is_empty() || keys > 0 {
            let now = self.now_ms();
            let snapshot = self.snapshot_value(state);
            let event = Event::Expired { dead_letters: letters.clone(), keys, snapshot };
            self.publish(state, &event, now);
        }
        Expired { dead_letters: letters.len(), keys }
    }

    /// Marks the lab deleted; its rows go with the next commit.
    pub fn delete(&self) {
        self.abort_deliveries();
        self.stop_traffic_task();
        let mut state = self.lock();
        if !state.deleted {
            self.count_outside_keys(state.endpoint.ledger.outside_keys(), 0);
            self.forget_outside(&state);
        }
        state.deleted = true;
        self.schedule_flush(&mut state);
    }

    /// Moves the server-wide count of outside keys by this lab's change from `before` to `after`.
    fn count_outside_keys(&self, before: usize, after: usize) {
        if after > before {
            self.outside_keys_total.fetch_add(after - before, Ordering::Relaxed);
        } else if before > after {
            self.outside_keys_total.fetch_sub(before - after, Ordering::Relaxed);
        }
    }
}

/// The ids a withdrawal touched: messages put back, dead letters put back or changed back,
/// messages taken away.
#[derive(Default)]
struct Withdrawal<'a> {
    messages: &'a [u64],
    letters: &'a [u64],
    removed: &'a [u64],
}

#[cfg(test)]
mod tests {
    /// The map at the top of this file names every file of `src/lab/`, and only those: a file
    /// renamed or added without the map fails here.
    #[test]
    fn the_map_names_every_file_of_the_lab() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lab");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().trim_end_matches(".rs").to_owned())
            .filter(|name| name != "mod")
            .collect();
        files.sort();
        let text = std::fs::read_to_string(dir.join("mod.rs")).unwrap();
        let doc: Vec<&str> = text.lines().map_while(|l| l.strip_prefix("//!")).map(str::trim).collect();
        let doc = doc.join(" ");
        let map = doc.split("The other files").nth(1).expect("the map: \"The other files ...\"");
        // Each seam is named as `name` followed by its words in brackets.
        let mut named: Vec<String> = map
            .split('`')
            .collect::<Vec<_>>()
            .windows(2)
            .filter(|w| w[1].trim_start().starts_with('('))
            .map(|w| w[0].to_owned())
            .collect();
        named.sort();
        assert_eq!(named, files, "the map in src/lab/mod.rs (left) against the files of src/lab/ (right)");
    }
}

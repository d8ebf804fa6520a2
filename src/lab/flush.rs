//! The flush protocol between a lab and the store's writer: a change hands the lab to the
//! writer once; the writer takes every row changed since, commits, and reports the event id
//! that is now durable; callers that promise durability wait for that id.

use std::time::Duration;

use super::{Lab, LabState};
use crate::dlq::DeadLetterChanges;
use crate::domain::MessageChanges;
use crate::downstream::KeyChanges;
use crate::store::{Batch, Flush, LabRow, RecordChanges};

/// How long a caller waits for the store to confirm a commit before answering 503.
const STORE_PATIENCE: Duration = Duration::from_secs(10);

/// The store did not confirm a commit: it failed (full, or another error), or did not answer
/// in time.
#[derive(Debug)]
pub struct NotDurable {
    /// Out of room: the disk, or `--max-db-bytes`.
    pub full: bool,
    /// Why the store's last commit failed; `None` when it simply took too long.
    pub error: Option<String>,
}

impl Lab {
    /// Hands the lab to the store's writer, unless it already has it.
    pub(super) fn schedule_flush(&self, state: &mut LabState) {
        if !state.flush_pending {
            state.flush_pending = true;
            if let Some(this) = self.this.upgrade() {
                self.store.schedule(this);
            }
        }
    }

    /// Waits until every change made so far is committed to the store. Gives up at once
    /// when the store's commits are failing: the caller then takes its change back, so a
    /// refusal leaves nothing behind.
    pub async fn persisted(&self) -> Result<(), NotDurable> {
        let target = self.lock().log.last_id();
        self.persisted_through(target).await
    }

    /// Waits until every change up to event `target` is committed (see `persisted`).
    pub async fn persisted_through(&self, target: u64) -> Result<(), NotDurable> {
        if *self.durable.borrow() >= target {
            return Ok(()); // a repeat of a key committed long ago, most often
        }
        self.store.hurry();
        let mut durable = self.durable.subscribe();
        let mut health = self.store.health();
        tokio::select! {
            done = durable.wait_for(|&d| d >= target) => match done {
                Ok(_) => Ok(()),
                Err(_) => Err(NotDurable { full: false, error: None }),
            },
            failing = health.wait_for(|h| h.failing.is_some()) => {
                let health = failing.map(|h| h.clone()).unwrap_or_default();
                // The commit that holds this change may have gone through just before.
                if *self.durable.borrow() >= target {
                    return Ok(());
                }
                Err(NotDurable { full: health.full, error: health.failing })
            }
            // The commit may have landed just as the patience ran out.
            () = tokio::time::sleep(STORE_PATIENCE) => match *self.durable.borrow() >= target {
                true => Ok(()),
                false => Err(NotDurable { full: false, error: None }),
            },
        }
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
        let state = &mut *state;
        // Keys committed by an earlier batch may be held cold now: the store has their rows.
        state.endpoint.ledger.cool(self.limits.hot_keys_per_lab, *self.durable.borrow());
        let changes = state.take_changes();
        let record = &state.record;
        let row = LabRow {
            id: lab_id.clone(),
            origin_unix_ms: self.clock.origin_unix_ms(),
            active_unix_ms: state.active_unix_ms,
            downstream: serde_json::to_string(&state.endpoint.view()).expect("settings serialize"),
            policy: serde_json::to_string(state.clients.policy()).expect("a policy serializes"),
            counts: state.endpoint.ledger.counts(),
            next_message_id: record.next_message_id(),
            last_event_id: state.log.last_id(),
            epoch: record.epoch,
            traffic: serde_json::to_string(&state.traffic.settings).expect("traffic settings serialize"),
            traffic_sent: state.traffic.sent,
            traffic_refused: state.traffic.refused,
            forgotten_delivered: record.forgotten_delivered,
        };
        Some(Batch { lab_id, row: Some(row), delete: false, changes, upto: state.log.last_id() })
    }

    fn failed(&self, batch: Batch) {
        let mut state = self.lock();
        if batch.delete {
            state.deleted = true;
        } else {
            state.restore_changes(batch.changes);
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

impl LabState {
    /// Everything the store is owed, from each part: the messages, the dead letters, the
    /// endpoint's keys and the clients' breaker histories.
    fn take_changes(&mut self) -> RecordChanges {
        let MessageChanges { cleared, messages, deleted_messages, load, markers } =
            self.record.take_changes();
        let mut letters = DeadLetterChanges::default();
        self.dead_letters.take_changes(&mut letters);
        let KeyChanges { keys, expired_before, kept, removed } = self.endpoint.take_changes();
        RecordChanges {
            cleared,
            messages,
            deleted_messages,
            dead_letters: letters.dead_letters,
            deleted_dead_letters: letters.deleted_dead_letters,
            keys,
            keys_expired_before: expired_before,
            keys_kept: kept,
            removed_keys: removed,
            load,
            markers,
            breakers: self.clients.take_changes(),
            outside: self.callers.take_changes(),
        }
    }

    /// Hands changes the store could not commit back to the parts they came from.
    fn restore_changes(&mut self, changes: RecordChanges) {
        let RecordChanges {
            cleared,
            messages,
            deleted_messages,
            dead_letters,
            deleted_dead_letters,
            keys,
            keys_expired_before,
            keys_kept,
            removed_keys,
            load,
            markers,
            breakers,
            outside,
        } = changes;
        self.callers.restore_changes(&outside);
        self.dead_letters.restore_changes(&DeadLetterChanges { dead_letters, deleted_dead_letters });
        self.record.restore_changes(MessageChanges { cleared, messages, deleted_messages, load, markers });
        self.endpoint.restore_changes(KeyChanges {
            keys,
            expired_before: keys_expired_before,
            kept: keys_kept,
            removed: removed_keys,
        });
        self.clients.changes_not_saved(&breakers);
    }
}

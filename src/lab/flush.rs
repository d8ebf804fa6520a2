//! The flush protocol between a lab and the store's writer: a change hands the lab to the
//! writer once; the writer takes every row changed since, commits, and reports the event id
//! that is now durable; callers that promise durability wait for that id.

use std::time::Duration;

use super::holds::Held;
use super::{Lab, LabState};
use crate::config::Limits;
use crate::dlq::DeadLetterChanges;
use crate::domain::{LabRecord, MessageChanges};
use crate::downstream::{KeyChanges, KeyNaming, Ledger};
use crate::store::{Batch, Flush, LabRow, Named, RecordChanges};

/// How long a caller waits for the store to confirm a commit before answering 503.
const STORE_PATIENCE: Duration = Duration::from_secs(10);

/// Changed dead letters turned into rows under one hold of the lab's lock: an action on a
/// whole queue (20,000 quarantined or marked for a redrive) is written out this many at a time,
/// with the lock let go between, so the lab's requests do not wait for all of it at once.
const ROWS_PER_HOLD: usize = 1_000;

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
        // The rows of many changed letters are taken a chunk per hold; every chunk goes into
        // this one batch, so they are still committed together with the lab's row. Bounded by
        // what was owed at the start, so letters changing meanwhile cannot keep it going.
        let (mut state, early) = self.take_early(|| ());
        state.flush_pending = false;
        state.batches_taken += 1;
        let lab_id = self.id.to_string();
        if state.deleted {
            return Some(Batch { lab_id, row: None, delete: true, changes: Default::default(), upto: 0 });
        }
        let state = &mut *state;
        // Keys committed by an earlier batch may be held cold now: the store has their rows.
        let committed = *self.durable.borrow();
        let naming = keep_keys_within(&mut state.endpoint.ledger, &state.record, &self.limits, committed);
        let changes = state.take_changes(early, naming);
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
            // While the rows are being named, the store sets it with the last of them.
            keys_named: changes.naming == KeyNaming::Named,
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

    fn committed(&self, upto: u64, named: Named) {
        {
            let mut state = self.lock();
            state.batches_saved = state.batches_taken;
            // This commit named the last key row: the next batch lets keys go, even if the lab
            // changes nothing else meanwhile (one just read back from the store, say). One that
            // named only some calls for the next batch to name more, whether or not the lab changed.
            let ledger = &mut state.endpoint.ledger;
            if let Some(through_ms) = named.through_ms {
                ledger.named_through(through_ms);
            }
            let named_now = named.all && ledger.keys_named();
            let naming = ledger.naming() == KeyNaming::NameAll;
            if naming || (named_now && ledger.cold_over(self.limits.cold_keys_per_lab)) {
                self.schedule_flush(&mut state);
            }
        }
        self.durable.send_if_modified(|durable| {
            let newer = upto > *durable;
            if newer {
                *durable = upto;
            }
            newer
        });
    }
}

impl Lab {
    /// Takes the rows of many changed dead letters a chunk per hold of the lab's lock, letting
    /// go between (when `between` runs); returns the lock, held once more for the rest of the
    /// batch, and the rows taken.
    fn take_early(&self, mut between: impl FnMut()) -> (Held<'_, LabState>, DeadLetterChanges) {
        let mut early = DeadLetterChanges::default();
        let mut state = self.lock();
        let mut holds = state.dead_letters.unsaved() / ROWS_PER_HOLD;
        let mut epoch = state.record.epoch;
        while holds > 0 && !state.deleted && state.dead_letters.unsaved() > ROWS_PER_HOLD {
            // Chunk by chunk, so a letter deleted in one and written again in a later one is
            // kept as it last was.
            let mut chunk = DeadLetterChanges::default();
            state.dead_letters.take_changes(&mut chunk, ROWS_PER_HOLD);
            early = early.then(chunk);
            drop(state);
            between();
            holds -= 1;
            state = self.lock();
            if state.record.epoch != epoch {
                // A reset between two holds cleared the letters: the rows taken before it
                // would bring them back.
                early = DeadLetterChanges::default();
                epoch = state.record.epoch;
            }
        }
        (state, early)
    }
}

/// Holds a lab's keys to its limits: those applied by events through `committed_event` cool
/// past the newest `--hot-keys-per-lab`; past `--cold-keys-per-lab` the oldest cold ones go
/// from memory (their rows were committed before they cooled), never those the lab still
/// needs; then either key map gives back the room it holds past its share.
///
/// A key goes only once the store names every row of the lab (`KeyNaming`), since a request
/// with a key let go is looked up by its name: past the bound, each batch names some of the
/// rows (`KEYS_NAMED_PER_BATCH`), and the keys go with the first batch after the commit that
/// named the last (`Flush::committed`). Returns how this batch writes the key rows.
/// `committed_event` is the last event committed.
pub(super) fn keep_keys_within(
    ledger: &mut Ledger,
    record: &LabRecord,
    limits: &Limits,
    committed_event: u64,
) -> KeyNaming {
    ledger.cool(limits.hot_keys_per_lab, committed_event);
    if ledger.cold_over(limits.cold_keys_per_lab) {
        match ledger.naming() {
            KeyNaming::Named => {
                let needed = record.keys_needed();
                ledger.spill(limits.cold_keys_per_lab, needed.iter().map(String::as_str));
            }
            KeyNaming::Unnamed => ledger.name_all(),
            KeyNaming::NameAll => {} // the keys wait for the commit that names the last row
        }
    }
    ledger.give_back_room(limits.hot_keys_per_lab, limits.cold_keys_per_lab);
    ledger.naming()
}

impl LabState {
    /// Everything the store is owed, from each part: the messages, the dead letters (after
    /// the `early` ones taken in chunks), the endpoint's keys (written as `naming` says) and the
    /// clients' breaker histories.
    fn take_changes(&mut self, early: DeadLetterChanges, naming: KeyNaming) -> RecordChanges {
        let MessageChanges { cleared, messages, deleted_messages, load, markers } =
            self.record.take_changes();
        let mut letters = DeadLetterChanges::default();
        self.dead_letters.take_changes(&mut letters, usize::MAX);
        let letters = early.then(letters);
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
            naming,
            naming_from_ms: self.endpoint.ledger.naming_from_ms(),
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
            naming: _, // the next batch says again
            naming_from_ms: _,
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

#[cfg(test)]
mod tests {
    use super::{ROWS_PER_HOLD, keep_keys_within};
    use crate::config::Limits;
    use crate::dlq::{Cause, DeadLetter, Selection, Target};
    use crate::domain::{LabRecord, Message, MessageState};
    use crate::downstream::{KeyNaming, Ledger, LedgerCounts};
    use crate::lab::{Lab, Labs};
    use crate::store::Flush;

    #[test]
    fn keys_past_the_cold_bound_go_only_once_a_commit_named_the_last_row() {
        let limits = Limits { hot_keys_per_lab: 4, cold_keys_per_lab: 8, ..Default::default() };
        let (mut ledger, record) = (Ledger::restore(LedgerCounts::default(), false), LabRecord::default());
        for i in 0..6 {
            ledger.restore_key(&format!("k{i}"), i, false);
        }
        // Within the bound: rows unnamed, and none goes.
        assert_eq!(keep_keys_within(&mut ledger, &record, &limits, 0), KeyNaming::Unnamed);
        for i in 6..20 {
            ledger.restore_key(&format!("k{i}"), i, false);
        }
        // Past it: every batch names some rows and keeps every key, until a commit reports the
        // last named (a commit that named only some, or failed, reports nothing).
        assert_eq!(keep_keys_within(&mut ledger, &record, &limits, 0), KeyNaming::NameAll);
        assert_eq!(keep_keys_within(&mut ledger, &record, &limits, 0), KeyNaming::NameAll);
        assert_eq!((ledger.held().fingerprint, ledger.held().let_go), (20, 0));
        // Each chunk starts where the ones committed before it ended.
        assert_eq!(ledger.naming_from_ms(), 0);
        ledger.named_through(7);
        ledger.named_through(3); // a report out of order takes nothing back
        assert_eq!(ledger.naming_from_ms(), 7);
        assert!(ledger.keys_named(), "the ledger was waiting for the last row");
        assert!(!ledger.keys_named(), "once only");
        // The next batch lets the oldest go, its rows named.
        assert_eq!(keep_keys_within(&mut ledger, &record, &limits, 0), KeyNaming::Named);
        assert_eq!((ledger.held().fingerprint, ledger.held().let_go), (6, 14));
        // A report from a batch taken before a reset does not name the rows of the lab after it.
        let mut reset = Ledger::restore(LedgerCounts::default(), false);
        reset.named_through(7);
        assert!(!reset.keys_named());
        assert_eq!(reset.naming_from_ms(), 0);
        assert_eq!(reset.naming(), KeyNaming::Unnamed);
        // Read back from a store that says its rows are named (migration 13), the lab lets the
        // oldest go at once, with no batch to name them again; read back unnamed, it waits.
        for (named, naming, held) in [(true, KeyNaming::Named, 6), (false, KeyNaming::NameAll, 20)] {
            let mut ledger = Ledger::restore(LedgerCounts::default(), named);
            for i in 0..20 {
                ledger.restore_key(&format!("k{i}"), i, false);
            }
            assert_eq!(keep_keys_within(&mut ledger, &record, &limits, 0), naming);
            assert_eq!(ledger.held().fingerprint, held, "named in the store: {named}");
        }
    }

    #[tokio::test]
    async fn an_action_on_more_letters_than_a_hold_takes_is_one_batch_of_each_letter_once() {
        let labs = Labs::temporary();
        let count = ROWS_PER_HOLD * 5 / 2;
        let lab = lab_with_saved_letters(&labs, count).await;
        let moved = lab.quarantine(&Target::Filter(Selection::everything()), true).unwrap();
        assert_eq!(moved.len(), count);
        let batch = lab.take_batch().expect("rows to write");
        let mut ids: Vec<u64> = batch.changes.dead_letters.iter().map(|(id, _, _)| *id).collect();
        ids.sort_unstable();
        let every: Vec<u64> = (1..=count as u64).collect();
        assert!(ids == every, "every letter, once, in one batch: {} rows of {count}", ids.len());
        assert!(batch.changes.dead_letters.iter().all(|(_, _, json)| json.contains("\"quarantined\":true")));
        assert_eq!(batch.upto, lab.lock().log.last_id(), "the batch holds everything up to the last event");
        assert_eq!(lab.lock().dead_letters.unsaved(), 0);
    }

    /// `count` dead letters, ids 1 to `count`.
    fn letters(count: usize) -> Vec<DeadLetter> {
        (1..=count as u64)
            .map(|id| {
                let key = format!("k{id}");
                let state = MessageState::DeadLetter;
                let message = Message {
                    id,
                    key: key.into(),
                    state,
                    round: 0,
                    created_ms: 0,
                    attempts: Default::default(),
                };
                DeadLetter::new(&message, (Cause::AttemptsUsedUp, "x".into()), (id, id), 3)
            })
            .collect()
    }

    fn push_letters(lab: &Lab, count: usize) {
        let mut state = lab.lock();
        for letter in letters(count) {
            state.dead_letters.push(letter);
        }
    }

    /// A lab holding `count` dead letters, all of them saved, that the store's writer will not
    /// take a batch from: the test takes its batches itself.
    async fn lab_with_saved_letters(labs: &Labs, count: usize) -> std::sync::Arc<Lab> {
        let lab = labs.create().unwrap();
        // The writer, on its own thread, has committed the new lab and let go of it.
        lab.persisted().await.unwrap();
        push_letters(&lab, count);
        drop(lab.take_batch());
        assert_eq!(lab.lock().dead_letters.unsaved(), 0);
        // As if the writer had the lab already: no change now hands it the lab.
        lab.lock().flush_pending = true;
        lab
    }

    #[tokio::test]
    async fn a_reset_between_two_holds_brings_no_letter_back() {
        let labs = Labs::temporary();
        let count = ROWS_PER_HOLD * 5 / 2;
        let lab = lab_with_saved_letters(&labs, count).await;
        lab.quarantine(&Target::Filter(Selection::everything()), true).unwrap();
        let mut resets = 0;
        let (state, early) = lab.take_early(|| {
            if resets == 0 {
                lab.reset();
            }
            resets += 1;
        });
        assert_eq!(resets, 1, "one chunk taken before the reset");
        let rows = early.dead_letters.len() + early.deleted_dead_letters.len();
        assert_eq!(rows, 0, "the rows taken before the reset are dropped");
        assert!(state.dead_letters.letters().is_empty());
    }

    #[tokio::test]
    async fn a_letter_deleted_in_one_chunk_and_back_in_a_later_one_is_written_as_it_is() {
        let labs = Labs::temporary();
        let count = ROWS_PER_HOLD * 5 / 2;
        let lab = lab_with_saved_letters(&labs, count).await;
        let ids: Vec<u64> = (1..=count as u64).collect();
        lab.lock().dead_letters.remove(&ids);
        // After the first chunk (deleted rows), every letter comes back: the next chunks hold
        // some of the first chunk's ids again, as letters.
        let mut back = false;
        let (mut state, early) = lab.take_early(|| {
            if !std::mem::replace(&mut back, true) {
                push_letters(&lab, count);
            }
        });
        let changes = state.take_changes(early, KeyNaming::Unnamed);
        assert_eq!(changes.deleted_dead_letters, Vec::<u64>::new(), "every letter is in the queue");
        let mut written: Vec<u64> = changes.dead_letters.iter().map(|(id, _, _)| *id).collect();
        written.sort_unstable();
        assert_eq!(written, ids, "each letter written once, as it is");
    }
}

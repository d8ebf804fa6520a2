//! One lab's messages in memory, with every attempt, and what its endpoint measured. Every
//! change goes through a method here, which also notes what it touched, so the store can
//! persist exactly the rows that changed. The dead letters live beside it, in `dlq`; the
//! endpoint's state in `downstream::Endpoint`; the client's in `client::ClientState`.

use std::borrow::Cow;
use std::collections::HashSet;

use serde::Serialize;

use super::load::{BinChanges, Load, LoadBin};
use super::marker::{Marker, Markers};
use super::message::{
    Attempt, AttemptEnd, Message, MessageKey, MessageState, Outcome, ResumePoint, WaitRecord, saturate,
};
use super::packed::{PACK_EVERY, Packed, PackedList};
use super::to_json;
use crate::retry::Wait;

const STATES: usize = MessageState::COUNT;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Counters {
    pub queued: u64,
    pub in_flight: u64,
    pub backing_off: u64,
    pub delivered: u64,
    pub dead_letter: u64,
    pub quarantined: u64,
    pub requests: u64,
    pub applied: u64,
    pub applied_twice: u64,
}

impl Counters {
    /// Each counter with its name, as it serializes (a unit test holds the two together).
    pub fn named(&self) -> [(&'static str, u64); 9] {
        [
            ("queued", self.queued),
            ("in_flight", self.in_flight),
            ("backing_off", self.backing_off),
            ("delivered", self.delivered),
            ("dead_letter", self.dead_letter),
            ("quarantined", self.quarantined),
            ("requests", self.requests),
            ("applied", self.applied),
            ("applied_twice", self.applied_twice),
        ]
    }
}

/// The rows of messages, load and markers a set of changes touched, serialized for the store.
#[derive(Debug, Default)]
pub struct MessageChanges {
    /// Everything of the lab's was deleted first (a reset).
    pub cleared: bool,
    pub messages: Vec<(u64, String)>,
    pub deleted_messages: Vec<u64>,
    /// Load bins changed (and dropped).
    pub load: BinChanges,
    /// Every marker, as JSON, when they changed.
    pub markers: Option<String>,
}

#[derive(Debug, Default)]
struct Dirty {
    cleared: bool,
    messages: HashSet<u64>,
}

/// One lab's messages with their state machine, what its endpoint measured and its markers.
/// The endpoint's own state is `downstream::Endpoint`'s, the client's `client::ClientState`'s;
/// the lab holds the three side by side.
#[derive(Debug, Default)]
pub struct LabRecord {
    /// What the downstream measured, per 100 ms.
    pub load: Load,
    pub markers: Markers,
    /// Bumped by every reset, so work begun before it cannot write into the fresh state.
    pub epoch: u64,
    /// Delivered messages that left the window of settled messages: still counted.
    pub forgotten_delivered: u64,
    /// In the order of their ids (each is made after the last), so a message is found by a
    /// binary search: an index by id took 35 bytes a message more. Messages delivered by their
    /// first attempt move to `packed` now and then (`PACK_EVERY`).
    messages: Vec<Message>,
    /// Delivered messages that fit in a `Packed`, in the order of their ids: a message is in
    /// one of the two lists, never both.
    packed: PackedList,
    /// Deliveries since the last pass that packed them.
    delivered_since_pack: u32,
    next_message_id: u64,
    by_state: [u64; STATES],
    dirty: Dirty,
}

/// What the store keeps of a lab record.
#[derive(Debug, Default)]
pub struct StoredRecord {
    pub epoch: u64,
    pub next_message_id: u64,
    pub messages: Vec<Message>,
    pub load_bins: Vec<LoadBin>,
    pub markers: Vec<Marker>,
    pub forgotten_delivered: u64,
}

impl LabRecord {
    pub fn restore(parts: StoredRecord) -> Self {
        let mut record = LabRecord {
            epoch: parts.epoch,
            next_message_id: parts.next_message_id,
            load: Load::restore(parts.load_bins),
            markers: Markers::restore(parts.markers),
            forgotten_delivered: parts.forgotten_delivered,
            ..Default::default()
        };
        record.replace_messages(parts.messages);
        record
    }

    /// Swaps in messages as the store holds them (after a client crash).
    pub fn replace_messages(&mut self, messages: Vec<Message>) {
        (self.messages, self.packed) = (Vec::new(), PackedList::with_keys(self.packed.keys()));
        self.put_back(messages);
    }

    /// Counts the messages in each state again, after messages were swapped in or let go.
    fn recount(&mut self) {
        self.by_state = [0; STATES];
        for message in &self.messages {
            self.by_state[message.state as usize] += 1;
        }
        self.by_state[MessageState::Delivered as usize] += self.packed.len() as u64;
    }

    /// Moves the delivered messages that fit into `packed`, keeping it in the order of ids.
    /// `packed` grows by an eighth at a time; the list of whole messages, once a burst is
    /// delivered and it is left far smaller than its room, gives that room back.
    fn pack(&mut self) {
        self.delivered_since_pack = 0;
        let mut fresh = Vec::new();
        self.messages.retain(|message| match Packed::of(message) {
            Some(packed) => {
                fresh.push(packed);
                false
            }
            None => true,
        });
        if self.messages.capacity() > 2 * self.messages.len() + 64 {
            // The room a burst took, once it is delivered.
            shrink(&mut self.messages);
        }
        self.packed.extend(fresh);
    }

    /// The messages' counters; `quarantined` comes from the dead-letter queue. The endpoint's
    /// (`requests`, `applied`, `applied_twice`) are its ledger's, zero here.
    pub fn counters(&self, quarantined: u64) -> Counters {
        let [queued, in_flight, backing_off, delivered, dead_letter] = self.by_state;
        Counters {
            queued,
            in_flight,
            backing_off,
            delivered: delivered + self.forgotten_delivered,
            dead_letter,
            quarantined,
            ..Default::default()
        }
    }

    /// Every message the lab holds, in the order of their ids; a packed one is unpacked as it
    /// is read.
    pub fn messages(&self) -> impl Iterator<Item = Cow<'_, Message>> {
        let (mut whole, mut packed) = (self.messages.iter().peekable(), self.packed.iter().peekable());
        std::iter::from_fn(move || match (whole.peek(), packed.peek()) {
            (Some(m), Some(p)) if p.id() < m.id => packed.next().map(|p| Cow::Owned(p.unpack())),
            (Some(_), _) => whole.next().map(Cow::Borrowed),
            (None, _) => packed.next().map(|p| Cow::Owned(p.unpack())),
        })
    }

    /// How many messages the lab holds.
    pub fn held(&self) -> usize {
        self.messages.len() + self.packed.len()
    }

    /// The ids of messages still owed a delivery.
    pub fn active_ids(&self) -> Vec<u64> {
        self.messages.iter().filter(|m| m.state.is_active()).map(|m| m.id).collect()
    }

    /// The keys of messages that may still send them: owed a delivery, or dead letters a
    /// person may replay. The ledger keeps these whatever its windows and bounds.
    pub fn keys_needed(&self) -> Vec<String> {
        self.messages
            .iter()
            .filter(|m| m.state.is_active() || m.state == MessageState::DeadLetter)
            .map(|m| m.key.to_string())
            .collect()
    }

    pub fn message(&self, id: u64) -> Option<Cow<'_, Message>> {
        match self.messages.binary_search_by_key(&id, |m| m.id) {
            Ok(i) => Some(Cow::Borrowed(&self.messages[i])),
            Err(_) => self.packed.get(id).map(|p| Cow::Owned(p.unpack())),
        }
    }

    /// Messages still owed a delivery: queued, in flight or backing off.
    pub fn active_messages(&self) -> usize {
        let [queued, in_flight, backing_off, ..] = self.by_state;
        (queued + in_flight + backing_off) as usize
    }

    pub fn next_message_id(&self) -> u64 {
        self.next_message_id
    }

    /// Creates `count` queued messages, each with a fresh, stable idempotency key.
    pub fn create_messages(&mut self, count: usize, now_ms: u64) -> Vec<Message> {
        self.load.offered(now_ms, count as u64);
        // Grown by an eighth at a time, not doubled: a lab at its settled window holds about
        // as many messages for hours, and a doubled list would keep up to twice their room.
        if self.messages.capacity() - self.messages.len() < count {
            self.messages.reserve_exact(count.max(self.messages.len() / 8));
        }
        (0..count)
            .map(|_| {
                self.next_message_id += 1;
                let message = Message {
                    id: self.next_message_id,
                    key: MessageKey::Uuid(self.packed.keys().key(self.next_message_id)),
                    state: MessageState::Queued,
                    round: 0,
                    created_ms: now_ms,
                    attempts: Default::default(),
                };
                self.messages.push(message.clone());
                self.by_state[MessageState::Queued as usize] += 1;
                self.dirty.messages.insert(message.id);
                message
            })
            .collect()
    }

    /// When message `id`'s current round started (its first attempt), once one has.
    pub fn round_started_ms(&self, id: u64) -> Option<u64> {
        let message = self.message(id)?;
        message.attempts.iter().find(|a| a.round == message.round).map(|a| a.started_ms)
    }

    /// Where the message's delivery continues; `None` if it is not owed one.
    pub fn resume_point(&self, id: u64, now_ms: u64) -> Option<ResumePoint> {
        let message = self.message(id).filter(|m| m.state.is_active())?;
        let round: Vec<&Attempt> = message.attempts.iter().filter(|a| a.round == message.round).collect();
        let (delay_ms, previous_wait_ms) = match round.last().and_then(|a| Some((a, *a.wait.as_deref()?))) {
            Some((last, wait)) => {
                let due = last.started_ms + u64::from(last.duration_ms.unwrap_or(0)) + wait.plan.planned_ms;
                (due.saturating_sub(now_ms), Some(wait.plan.chosen_ms))
            }
            None => (0, None),
        };
        Some(ResumePoint {
            key: message.key.to_string(),
            next_n: round.len() as u32 + 1,
            delay_ms,
            previous_wait_ms,
            round_started_ms: round.first().map(|a| a.started_ms),
        })
    }

    /// Marks the message's running attempts, if any, as cut off by a crash (a hedged round
    /// has several at once). No request is in flight after a crash, whatever the record said:
    /// the message waits for a connection slot again, as `queued` (else `in_flight` would
    /// count it beside the ones that take the free slots, and read past
    /// `max_concurrent_requests`).
    pub fn interrupt(&mut self, id: u64, now_ms: u64) -> Vec<Attempt> {
        if self.message(id).is_some_and(|m| m.state == MessageState::InFlight) {
            self.set_state(id, MessageState::Queued);
        }
        let Some(message) = self.message_mut(id) else { return Vec::new() };
        let round = message.round;
        let running = message.attempts.iter_mut().filter(|a| a.round == round && a.outcome.is_none());
        let cut: Vec<Attempt> = running
            .map(|attempt| {
                attempt.duration_ms = Some(saturate(now_ms.saturating_sub(attempt.started_ms)));
                attempt.outcome = Some(Outcome::Interrupted);
                attempt.clone()
            })
            .collect();
        if !cut.is_empty() {
            self.dirty.messages.insert(id);
        }
        cut
    }

    /// Starts attempt `n` of the message's current round; returns it and the measured wait
    /// that preceded it (stored on the previous attempt, with `queued_ms`, the part of it
    /// spent waiting for a connection slot after the planned wait was over).
    pub fn start_attempt(
        &mut self,
        id: u64,
        n: u32,
        now_ms: u64,
        queued_ms: u64,
    ) -> Option<(Attempt, Option<u64>)> {
        let message = self.message_mut(id)?;
        let waited_ms = message.attempts.last_mut().and_then(|last| {
            let wait = last.wait.as_mut().filter(|_| last.round == message.round)?;
            let ended = last.started_ms + u64::from(last.duration_ms.unwrap_or(0));
            wait.actual_ms = Some(now_ms.saturating_sub(ended));
            wait.queued_ms = Some(queued_ms);
            wait.actual_ms
        });
        let attempt = Attempt {
            n,
            round: message.round,
            started_ms: now_ms,
            duration_ms: None,
            status: None,
            outcome: None,
            replayed: false,
            retry_after_s: None,
            wait: None,
            refused_by: None,
        };
        message.attempts.push(attempt.clone());
        self.set_state(id, MessageState::InFlight);
        Some((attempt, waited_ms))
    }

    /// Attempt `n` of the message's current round ended (the latest of that number: hedged
    /// attempts overlap, so it need not be the last one started).
    pub fn finish_attempt(
        &mut self,
        id: u64,
        n: u32,
        end: AttemptEnd,
        refused_by: Option<&str>,
    ) -> Option<Attempt> {
        let message = self.message_mut(id)?;
        let round = message.round;
        let attempt = message.attempts.iter_mut().rev().find(|a| a.round == round && a.n == n)?;
        attempt.refused_by = refused_by.map(Box::from);
        attempt.duration_ms = Some(saturate(end.duration_ms));
        attempt.status = end.status;
        attempt.outcome = Some(end.outcome);
        attempt.replayed = end.replayed;
        attempt.retry_after_s = end.retry_after_s.map(saturate);
        let attempt = attempt.clone();
        self.dirty.messages.insert(id);
        Some(attempt)
    }

    /// A hedge still in flight when a sibling's answer settled its round: the client hung up on
    /// it at `now_ms`. `None` when it had ended already.
    pub fn cancel_attempt(&mut self, id: u64, n: u32, now_ms: u64) -> Option<Attempt> {
        let message = self.message_mut(id)?;
        let round = message.round;
        let attempt = message.attempts.iter_mut().rev().find(|a| a.round == round && a.n == n)?;
        if attempt.outcome.is_some() {
            return None;
        }
        attempt.duration_ms = Some(saturate(now_ms.saturating_sub(attempt.started_ms)));
        attempt.outcome = Some(Outcome::Cancelled);
        let attempt = attempt.clone();
        self.dirty.messages.insert(id);
        Some(attempt)
    }

    /// Records the wait planned after the message's latest attempt; returns its (round, n).
    pub fn schedule_wait(&mut self, id: u64, plan: Wait) -> Option<(u32, u32)> {
        let attempt = self.message_mut(id)?.attempts.last_mut()?;
        attempt.wait = Some(Box::new(WaitRecord { plan, actual_ms: None, queued_ms: None }));
        let at = (attempt.round, attempt.n);
        self.set_state(id, MessageState::BackingOff);
        Some(at)
    }

    /// The message was delivered. It may be kept for long after (`--settled-window`), so it
    /// gives back the room its list of attempts had grown for, and is packed with the next
    /// pass (`PACK_EVERY`) if it fits.
    pub fn deliver(&mut self, id: u64) -> bool {
        let delivered = self.set_state(id, MessageState::Delivered);
        if delivered && let Some(message) = self.message_mut(id) {
            message.attempts.shrink_to_fit();
            self.delivered_since_pack += 1;
            if self.delivered_since_pack >= PACK_EVERY {
                self.pack();
            }
        }
        delivered
    }

    /// Gives up on a message: it leaves the active states. Returns it, for its dead letter.
    pub fn dead_letter(&mut self, id: u64) -> Option<&Message> {
        if !self.set_state(id, MessageState::DeadLetter) {
            return None;
        }
        // Kept for the dead letter's whole retention: as small as it can be.
        let message = self.message_mut(id)?;
        message.attempts.shrink_to_fit();
        Some(message)
    }

    /// Puts dead-lettered messages back in the queue for a new round, keeping their keys;
    /// returns each with its new round.
    pub fn requeue(&mut self, ids: &[u64]) -> Vec<(u64, u32)> {
        ids.iter()
            .filter_map(|&id| {
                let message = self.message_mut(id).filter(|m| m.state == MessageState::DeadLetter)?;
                message.round += 1;
                let round = message.round;
                self.set_state(id, MessageState::Queued);
                Some((id, round))
            })
            .collect()
    }

    /// Takes a replay back: the message is a dead letter again, in the round it had.
    pub fn return_to_dead_letters(&mut self, id: u64, round: u32) {
        if let Some(message) = self.message_mut(id) {
            message.round = round;
        }
        self.set_state(id, MessageState::DeadLetter);
    }

    /// Drops messages whose dead letters expired.
    pub fn remove_messages(&mut self, ids: &[u64]) {
        let gone: HashSet<u64> = ids.iter().copied().collect();
        self.messages.retain(|m| !gone.contains(&m.id));
        self.packed.retain(|p| !gone.contains(&p.id()));
        shrink(&mut self.messages);
        self.recount();
        self.dirty.messages.extend(gone);
    }

    /// Puts messages back beside those the lab holds (a delete the store could not keep).
    pub fn put_back(&mut self, messages: Vec<Message>) {
        self.messages.extend(messages);
        self.messages.sort_by_key(|m| m.id);
        self.pack();
        self.recount();
    }

    /// Keeps the newest `keep` delivered messages (by creation) and lets the older ones go,
    /// from memory and, with the next commit, from the store; they stay counted in
    /// `delivered` and in the load bins. Dead letters are never let go here. Runs only once
    /// the window is over by a margin, so the list is rebuilt now and then, not per delivery.
    /// Returns the ids that left.
    pub fn forget_delivered(&mut self, keep: usize) -> Vec<u64> {
        let delivered = self.by_state[MessageState::Delivered as usize] as usize;
        if delivered <= keep + (keep / 8).max(16) {
            return Vec::new();
        }
        let gone: Vec<u64> = self
            .messages()
            .filter(|m| m.state == MessageState::Delivered)
            .take(delivered - keep)
            .map(|m| m.id)
            .collect();
        self.forgotten_delivered += gone.len() as u64;
        self.remove_messages(&gone);
        gone
    }

    /// Lets go of the oldest delivered messages, the window's too, until `count` new ones fit
    /// under `max` or none is left: new traffic comes before the history of settled messages
    /// (they stay counted, as `forget_delivered`'s do). Dead letters and messages owed a
    /// delivery are never let go here. Returns the ids that left.
    pub fn make_room(&mut self, count: usize, max: usize) -> Vec<u64> {
        let over = (self.held() + count).saturating_sub(max);
        if over == 0 {
            return Vec::new();
        }
        let delivered = self.messages().filter(|m| m.state == MessageState::Delivered);
        let gone: Vec<u64> = delivered.take(over).map(|m| m.id).collect();
        self.forgotten_delivered += gone.len() as u64;
        self.remove_messages(&gone);
        gone
    }

    /// How many of the messages held are delivered (kept for the window, or until room is
    /// needed) and how many are dead letters.
    pub fn delivered_and_dead(&self) -> (usize, usize) {
        let count = |state: MessageState| self.by_state[state as usize] as usize;
        (count(MessageState::Delivered), count(MessageState::DeadLetter))
    }

    /// Clears messages and what was measured, and lets go of the room they took: a lab reset
    /// after thousands of messages costs what an empty one does, not what it held at its peak.
    pub fn reset(&mut self) {
        self.messages = Vec::new();
        self.packed = PackedList::default();
        self.delivered_since_pack = 0;
        self.by_state = [0; STATES];
        self.load.clear();
        self.markers.clear();
        self.forgotten_delivered = 0;
        self.epoch += 1;
        self.dirty = Dirty { cleared: true, ..Default::default() };
    }

    /// The rows changed since the last call, ready for the store.
    pub fn take_changes(&mut self) -> MessageChanges {
        let dirty = std::mem::take(&mut self.dirty);
        let mut changes = MessageChanges {
            cleared: dirty.cleared,
            load: self.load.take_unsaved(),
            markers: self.markers.take_unsaved(),
            ..Default::default()
        };
        for id in dirty.messages {
            match self.message(id) {
                Some(m) => changes.messages.push((id, to_json(&m))),
                None => changes.deleted_messages.push(id),
            }
        }
        changes
    }

    /// Takes back changes the store could not commit, so the next `take_changes` has them.
    pub fn restore_changes(&mut self, changes: MessageChanges) {
        self.dirty.cleared |= changes.cleared;
        let messages = changes.messages.into_iter().map(|(id, _)| id).chain(changes.deleted_messages);
        self.dirty.messages.extend(messages);
        self.load.mark_unsaved(changes.load);
        if changes.markers.is_some() {
            self.markers.mark_unsaved();
        }
    }

    /// The message, to change: a packed one is unpacked back into `messages` first.
    fn message_mut(&mut self, id: u64) -> Option<&mut Message> {
        let i = match self.messages.binary_search_by_key(&id, |m| m.id) {
            Ok(i) => i,
            Err(i) => {
                let packed = self.packed.remove(id)?;
                self.messages.insert(i, packed.unpack());
                i
            }
        };
        Some(&mut self.messages[i])
    }

    fn set_state(&mut self, id: u64, state: MessageState) -> bool {
        let Some(message) = self.message_mut(id) else {
            return false;
        };
        let previous = std::mem::replace(&mut message.state, state);
        self.by_state[previous as usize] -= 1;
        self.by_state[state as usize] += 1;
        self.dirty.messages.insert(id);
        true
    }
}

/// Gives back the room a list kept past an eighth more than it holds.
fn shrink<T>(list: &mut Vec<T>) {
    let room = list.len() + list.len() / 8;
    if list.capacity() > room + 16 {
        list.shrink_to(room);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_lets_go_of_the_room_its_messages_took() {
        let mut record = LabRecord::default();
        record.create_messages(3_000, 0);
        assert!(record.messages.capacity() >= 3_000);
        record.reset();
        assert_eq!(record.messages.capacity(), 0);
        assert_eq!(record.create_messages(2, 5).len(), 2, "and takes new messages after");
    }

    fn answered(ms: u64) -> AttemptEnd {
        AttemptEnd {
            duration_ms: ms,
            status: Some(200),
            outcome: Outcome::Ok,
            replayed: false,
            retry_after_s: None,
            pushback: None,
        }
    }

    /// Delivers message `id` by one attempt, or by two with a wait between them.
    fn deliver(record: &mut LabRecord, id: u64, retried: bool, now: u64) {
        record.start_attempt(id, 1, now, 0).unwrap();
        if retried {
            record.finish_attempt(id, 1, AttemptEnd { status: Some(503), ..answered(3) }, None).unwrap();
            let plan = Wait {
                nominal_ms: 10,
                low_ms: 0,
                high_ms: 10,
                chosen_ms: 7,
                floor_ms: None,
                planned_ms: 7,
                reason: crate::retry::WaitReason::Backoff,
            };
            record.schedule_wait(id, plan).unwrap();
            record.start_attempt(id, 2, now + 10, 1).unwrap();
            record.finish_attempt(id, 2, answered(4), None).unwrap();
        } else {
            record.finish_attempt(id, 1, answered(5), None).unwrap();
        }
        assert!(record.deliver(id));
    }

    #[test]
    fn a_lab_s_own_keys_are_made_so_its_packed_messages_keep_none_even_after_a_client_crash() {
        let mut record = LabRecord::default();
        let made: Vec<Message> = record.create_messages(128, 0);
        let keys: std::collections::HashSet<&MessageKey> = made.iter().map(|m| &m.key).collect();
        assert_eq!(keys.len(), 128, "each message its own key");
        assert!(made.iter().all(|m| matches!(m.key, MessageKey::Uuid(k) if k.get_version_num() == 4)));
        for message in &made {
            deliver(&mut record, message.id, false, message.id);
        }
        assert_eq!(record.packed.len(), 128);
        // Without their keys, the 128 take at most 7 bytes each; with them, 23.
        assert!(record.packed.bytes() <= 7 * 128, "{} bytes", record.packed.bytes());
        let read: Vec<Message> = record.messages().map(Cow::into_owned).collect();
        assert_eq!(
            read.iter().map(|m| &m.key).collect::<Vec<_>>(),
            made.iter().map(|m| &m.key).collect::<Vec<_>>()
        );
        // Swapped back in as the store holds them (a client crash), they are made as before.
        record.replace_messages(read.clone());
        assert!(record.packed.bytes() <= 7 * 128, "{} bytes", record.packed.bytes());
        assert_eq!(record.messages().map(Cow::into_owned).collect::<Vec<_>>(), read);
        // A lab that starts again (a restart) makes other keys, and keeps those it read back whole.
        let mut restarted = LabRecord::default();
        restarted.replace_messages(read.clone());
        assert!(restarted.packed.bytes() >= 16 * 128, "{} bytes", restarted.packed.bytes());
        assert_eq!(restarted.messages().map(Cow::into_owned).collect::<Vec<_>>(), read);
    }

    #[test]
    fn messages_delivered_by_their_first_attempt_are_packed_and_read_back_as_they_were() {
        let mut record = LabRecord::default();
        let ids: Vec<u64> = record.create_messages(300, 0).iter().map(|m| m.id).collect();
        // Every fifth retried, every seventh dead-lettered, and the first ten delivered last.
        // Each is read as it settled: most are not yet packed then (a pass packs 64 at once).
        let mut settled = std::collections::HashMap::new();
        for &id in ids[10..].iter().chain(&ids[..10]) {
            match id {
                _ if id % 7 == 0 => {
                    record.dead_letter(id).unwrap();
                }
                _ => deliver(&mut record, id, id % 5 == 0, id),
            }
            settled.insert(id, record.message(id).unwrap().into_owned());
        }
        let whole = record.messages.clone();
        let packed = record.packed.len();
        // 300 ids: 42 dead letters, 52 of the rest retried.
        assert!((200..=206).contains(&packed), "{packed} packed, {} whole", whole.len());
        assert_eq!(record.held(), 300);
        let read: Vec<Message> = record.messages().map(Cow::into_owned).collect();
        assert!(read.windows(2).all(|w| w[0].id < w[1].id), "in the order of their ids");
        assert_eq!(read.iter().map(|m| m.id).collect::<Vec<_>>(), ids);
        let of_one = read.iter().filter(|m| m.attempts.len() == 1 && m.state == MessageState::Delivered);
        assert_eq!(of_one.count(), 206, "every message delivered by its first attempt reads back so");
        for message in &read {
            assert_eq!(Some(message), settled.get(&message.id), "as it settled");
            assert_eq!(record.message(message.id).as_deref(), Some(message));
        }
        let counters = record.counters(0);
        assert_eq!((counters.delivered, counters.dead_letter), (258, 42));

        // A packed message changed (a hedge's late end, say) is whole again, and changed.
        let late = read.iter().find(|m| Packed::of(m).is_some()).unwrap().id;
        record.cancel_attempt(late, 1, 999);
        record.finish_attempt(late, 1, AttemptEnd { status: Some(201), ..answered(9) }, None).unwrap();
        assert_eq!(record.message(late).unwrap().attempts[0].status, Some(201));
        assert_eq!(record.held(), 300);
        assert_eq!(record.messages().filter(|m| m.id == late).count(), 1, "in one list, not both");

        // The oldest delivered go first, packed or not; dead letters stay.
        let gone = record.forget_delivered(100);
        assert_eq!(gone.len(), 158);
        let kept: Vec<Message> = record.messages().map(Cow::into_owned).collect();
        assert_eq!(kept.len(), 142);
        let oldest_kept =
            kept.iter().filter(|m| m.state == MessageState::Delivered).map(|m| m.id).min().unwrap();
        assert!(gone.iter().all(|&id| id < oldest_kept));
        assert_eq!(record.counters(0).delivered, 258, "still counted");
        let rows = record.take_changes();
        assert!(gone.iter().all(|id| rows.deleted_messages.contains(id)));
        let written = rows.messages.iter().find(|(id, _)| *id == kept.last().unwrap().id).unwrap();
        assert_eq!(written.1, to_json(kept.last().unwrap()));
    }

    #[test]
    fn counters_are_named_as_they_serialize() {
        let counters = Counters {
            queued: 1,
            in_flight: 2,
            backing_off: 3,
            delivered: 4,
            dead_letter: 5,
            quarantined: 6,
            requests: 7,
            applied: 8,
            applied_twice: 9,
        };
        let named: Vec<String> = counters.named().iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        assert_eq!(format!("{{{}}}", named.join(",")), serde_json::to_string(&counters).unwrap());
    }

    #[test]
    fn changes_the_store_could_not_commit_come_back() {
        let mut record = LabRecord::default();
        let created = record.create_messages(3, 0);
        record.dead_letter(created[0].id);
        let first = record.take_changes();
        assert_eq!(first.messages.len(), 3);
        assert!(record.take_changes().messages.is_empty(), "taken once");

        record.restore_changes(first);
        let again = record.take_changes();
        let mut ids: Vec<u64> = again.messages.iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        assert_eq!(ids, created.iter().map(|m| m.id).collect::<Vec<_>>());
    }
}

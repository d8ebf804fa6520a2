//! One lab's state in memory: settings, messages with every attempt, dead letters and the
//! downstream's ledger. Every change goes through a method here, which also notes what it
//! touched, so the store can persist exactly the rows that changed.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::downstream::{DownstreamSettings, KeyRow, Ledger, LedgerCounts};
use crate::retry::{Policy, Wait};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageState {
    /// Accepted, waiting for a free connection slot.
    Queued,
    InFlight,
    BackingOff,
    Delivered,
    DeadLetter,
}

const STATES: usize = 5;

impl MessageState {
    /// Still owed a delivery attempt: these resume after a crash.
    pub fn is_active(self) -> bool {
        matches!(self, MessageState::Queued | MessageState::InFlight | MessageState::BackingOff)
    }
}

/// How one attempt ended, as the client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    HttpError,
    Timeout,
    TransportError,
    /// The client died mid-attempt (a crash or a restart); it counts as a failed attempt.
    Interrupted,
}

/// A planned wait and, once the next attempt starts, how long it really lasted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WaitRecord {
    #[serde(flatten)]
    pub plan: Wait,
    pub actual_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Attempt {
    /// 1-based within its round.
    pub n: u32,
    /// 0 for the first delivery, 1.. for each replay from the dead-letter queue.
    pub round: u32,
    pub started_ms: u64,
    pub duration_ms: Option<u64>,
    pub status: Option<u16>,
    pub outcome: Option<Outcome>,
    /// The downstream answered with `Idempotent-Replayed: true`.
    pub replayed: bool,
    pub retry_after_s: Option<u64>,
    pub wait: Option<WaitRecord>,
}

/// The measured end of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptEnd {
    pub duration_ms: u64,
    pub status: Option<u16>,
    pub outcome: Outcome,
    pub replayed: bool,
    pub retry_after_s: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Message {
    pub id: u64,
    pub key: String,
    pub state: MessageState,
    pub round: u32,
    pub created_ms: u64,
    pub attempts: Vec<Attempt>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeadLetter {
    /// The message's id.
    pub id: u64,
    pub key: String,
    pub round: u32,
    pub reason: String,
    pub attempts: Vec<Attempt>,
    pub dead_lettered_ms: u64,
    /// Wall-clock time, for the retention window.
    pub dead_lettered_unix_ms: u64,
    /// Dead-lettered again after too many replays: "replay all" leaves it for a person.
    pub quarantined: bool,
}

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

/// Where a message's delivery picks up: the next attempt number in its round, and how long
/// is left of the wait planned before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumePoint {
    pub key: String,
    pub next_n: u32,
    pub delay_ms: u64,
    /// The wait chosen last time (decorrelated jitter grows from it).
    pub previous_wait_ms: Option<u64>,
}

/// The rows a set of changes touched, serialized for the store.
#[derive(Debug, Default)]
pub struct RecordChanges {
    /// Everything of the lab's was deleted first (a reset).
    pub cleared: bool,
    pub messages: Vec<(u64, String)>,
    pub deleted_messages: Vec<u64>,
    pub dead_letters: Vec<(u64, u64, String)>,
    pub deleted_dead_letters: Vec<u64>,
    pub keys: Vec<KeyRow>,
    pub expired_keys: Vec<String>,
}

#[derive(Debug, Default)]
struct Dirty {
    cleared: bool,
    messages: HashSet<u64>,
    dead_letters: HashSet<u64>,
    expired_keys: Vec<String>,
}

/// One lab's whole state.
#[derive(Debug, Default)]
pub struct LabRecord {
    pub downstream: DownstreamSettings,
    pub policy: Policy,
    pub ledger: Ledger,
    /// Bumped by every reset, so work begun before it cannot write into the fresh state.
    pub epoch: u64,
    messages: Vec<Message>,
    index: HashMap<u64, usize>,
    dead_letters: Vec<DeadLetter>,
    next_message_id: u64,
    by_state: [u64; STATES],
    /// Dead letters that are quarantined, kept as a count so counters stay cheap.
    quarantined: u64,
    dirty: Dirty,
}

/// What the store keeps of a lab record.
#[derive(Debug)]
pub struct RecordParts {
    pub downstream: DownstreamSettings,
    pub policy: Policy,
    pub ledger: Ledger,
    pub epoch: u64,
    pub next_message_id: u64,
    pub messages: Vec<Message>,
    pub dead_letters: Vec<DeadLetter>,
}

impl LabRecord {
    pub fn restore(parts: RecordParts) -> Self {
        let mut record = LabRecord {
            downstream: parts.downstream,
            policy: parts.policy,
            ledger: parts.ledger,
            epoch: parts.epoch,
            next_message_id: parts.next_message_id,
            ..Default::default()
        };
        record.replace_messages(parts.messages, parts.dead_letters);
        record
    }

    /// Swaps in messages and dead letters as the store holds them (after a client crash).
    pub fn replace_messages(&mut self, mut messages: Vec<Message>, dead_letters: Vec<DeadLetter>) {
        messages.sort_by_key(|m| m.id);
        self.index = messages.iter().enumerate().map(|(i, m)| (m.id, i)).collect();
        self.by_state = [0; STATES];
        for message in &messages {
            self.by_state[message.state as usize] += 1;
        }
        self.messages = messages;
        self.dead_letters = dead_letters;
        self.dead_letters.sort_by_key(|d| (d.dead_lettered_unix_ms, d.id));
        self.quarantined = self.dead_letters.iter().filter(|d| d.quarantined).count() as u64;
    }

    pub fn counters(&self) -> Counters {
        let [queued, in_flight, backing_off, delivered, dead_letter] = self.by_state;
        let LedgerCounts { requests, applied, applied_twice } = self.ledger.counts();
        Counters {
            queued,
            in_flight,
            backing_off,
            delivered,
            dead_letter,
            quarantined: self.quarantined,
            requests,
            applied,
            applied_twice,
        }
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    pub fn dead_letters(&self) -> &[DeadLetter] {
        &self.dead_letters
    }

    pub fn message(&self, id: u64) -> Option<&Message> {
        self.index.get(&id).map(|&i| &self.messages[i])
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
        (0..count)
            .map(|_| {
                self.next_message_id += 1;
                let message = Message {
                    id: self.next_message_id,
                    key: uuid::Uuid::new_v4().to_string(),
                    state: MessageState::Queued,
                    round: 0,
                    created_ms: now_ms,
                    attempts: Vec::new(),
                };
                self.index.insert(message.id, self.messages.len());
                self.messages.push(message.clone());
                self.by_state[MessageState::Queued as usize] += 1;
                self.dirty.messages.insert(message.id);
                message
            })
            .collect()
    }

    /// Where the message's delivery continues; `None` if it is not owed one.
    pub fn resume_point(&self, id: u64, now_ms: u64) -> Option<ResumePoint> {
        let message = self.message(id).filter(|m| m.state.is_active())?;
        let round: Vec<&Attempt> = message.attempts.iter().filter(|a| a.round == message.round).collect();
        let (delay_ms, previous_wait_ms) = match round.last().and_then(|a| Some((a, a.wait?))) {
            Some((last, wait)) => {
                let due = last.started_ms + last.duration_ms.unwrap_or(0) + wait.plan.planned_ms;
                (due.saturating_sub(now_ms), Some(wait.plan.chosen_ms))
            }
            None => (0, None),
        };
        Some(ResumePoint {
            key: message.key.clone(),
            next_n: round.len() as u32 + 1,
            delay_ms,
            previous_wait_ms,
        })
    }

    /// Marks the message's running attempt, if any, as cut off by a crash.
    pub fn interrupt(&mut self, id: u64, now_ms: u64) -> Option<Attempt> {
        let attempt = self.message_mut(id)?.attempts.last_mut().filter(|a| a.outcome.is_none())?;
        attempt.duration_ms = Some(now_ms.saturating_sub(attempt.started_ms));
        attempt.outcome = Some(Outcome::Interrupted);
        let attempt = attempt.clone();
        self.dirty.messages.insert(id);
        Some(attempt)
    }

    /// Starts attempt `n` of the message's current round; returns it and the measured wait
    /// that preceded it (stored on the previous attempt).
    pub fn start_attempt(&mut self, id: u64, n: u32, now_ms: u64) -> Option<(Attempt, Option<u64>)> {
        let message = self.message_mut(id)?;
        let waited_ms = message.attempts.last_mut().and_then(|last| {
            let wait = last.wait.as_mut().filter(|_| last.round == message.round)?;
            let ended = last.started_ms + last.duration_ms.unwrap_or(0);
            wait.actual_ms = Some(now_ms.saturating_sub(ended));
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
        };
        message.attempts.push(attempt.clone());
        self.set_state(id, MessageState::InFlight);
        Some((attempt, waited_ms))
    }

    pub fn finish_attempt(&mut self, id: u64, end: AttemptEnd) -> Option<Attempt> {
        let attempt = self.message_mut(id)?.attempts.last_mut()?;
        attempt.duration_ms = Some(end.duration_ms);
        attempt.status = end.status;
        attempt.outcome = Some(end.outcome);
        attempt.replayed = end.replayed;
        attempt.retry_after_s = end.retry_after_s;
        let attempt = attempt.clone();
        self.dirty.messages.insert(id);
        Some(attempt)
    }

    /// Records the wait planned after the message's latest attempt; returns its (round, n).
    pub fn schedule_wait(&mut self, id: u64, plan: Wait) -> Option<(u32, u32)> {
        let attempt = self.message_mut(id)?.attempts.last_mut()?;
        attempt.wait = Some(WaitRecord { plan, actual_ms: None });
        let at = (attempt.round, attempt.n);
        self.set_state(id, MessageState::BackingOff);
        Some(at)
    }

    pub fn deliver(&mut self, id: u64) -> bool {
        self.set_state(id, MessageState::Delivered)
    }

    /// Moves a message to the dead-letter queue; quarantined when this is its
    /// `policy.quarantine_after`-th replay or later.
    pub fn dead_letter(&mut self, id: u64, reason: String, now_ms: u64, unix_ms: u64) -> Option<DeadLetter> {
        let quarantine_after = self.policy.quarantine_after;
        let message = self.message(id)?;
        let letter = DeadLetter {
            id,
            key: message.key.clone(),
            round: message.round,
            reason,
            attempts: message.attempts.clone(),
            dead_lettered_ms: now_ms,
            dead_lettered_unix_ms: unix_ms,
            quarantined: message.round >= quarantine_after,
        };
        self.quarantined += u64::from(letter.quarantined);
        self.dead_letters.push(letter.clone());
        self.dirty.dead_letters.insert(id);
        self.set_state(id, MessageState::DeadLetter);
        Some(letter)
    }

    /// Moves dead letters back into the queue for a new round, keeping their keys.
    /// `ids = None` takes every one that is not quarantined; naming a quarantined one needs
    /// `confirm_quarantined`; no more than `max_active` messages may be owed a delivery after.
    /// Fails, changing nothing, saying why.
    pub fn replay(
        &mut self,
        ids: Option<&[u64]>,
        confirm_quarantined: bool,
        max_active: usize,
    ) -> Result<Vec<(u64, u32)>, ReplayRefusal> {
        let chosen: Vec<u64> = match ids {
            None => self.dead_letters.iter().filter(|d| !d.quarantined).map(|d| d.id).collect(),
            Some(ids) => {
                let mut ids = ids.to_vec();
                ids.sort_unstable();
                ids.dedup();
                let held: HashMap<u64, bool> =
                    self.dead_letters.iter().map(|d| (d.id, d.quarantined)).collect();
                let missing: Vec<u64> = ids.iter().copied().filter(|id| !held.contains_key(id)).collect();
                if !missing.is_empty() {
                    return Err(ReplayRefusal::NotDeadLetters(missing));
                }
                let quarantined: Vec<u64> = ids.iter().copied().filter(|id| held[id]).collect();
                if !quarantined.is_empty() && !confirm_quarantined {
                    return Err(ReplayRefusal::Quarantined(quarantined));
                }
                ids
            }
        };
        let active = self.active_messages();
        if active + chosen.len() > max_active {
            return Err(ReplayRefusal::TooManyActive { max: max_active, active, asked: chosen.len() });
        }
        let chosen_set: HashSet<u64> = chosen.iter().copied().collect();
        self.dead_letters.retain(|d| !chosen_set.contains(&d.id));
        self.quarantined = self.dead_letters.iter().filter(|d| d.quarantined).count() as u64;
        self.dirty.dead_letters.extend(&chosen);
        Ok(chosen
            .into_iter()
            .filter_map(|id| {
                let message = self.message_mut(id)?;
                message.round += 1;
                let round = message.round;
                self.set_state(id, MessageState::Queued);
                Some((id, round))
            })
            .collect())
    }

    /// Drops dead letters (and their messages) older than the retention window; returns their ids.
    pub fn expire_dead_letters(&mut self, dead_lettered_before_unix_ms: u64) -> Vec<u64> {
        let expired: HashSet<u64> = self
            .dead_letters
            .iter()
            .filter(|d| d.dead_lettered_unix_ms < dead_lettered_before_unix_ms)
            .map(|d| d.id)
            .collect();
        if expired.is_empty() {
            return Vec::new();
        }
        self.dead_letters.retain(|d| !expired.contains(&d.id));
        let (gone, kept): (Vec<Message>, Vec<Message>) =
            std::mem::take(&mut self.messages).into_iter().partition(|m| expired.contains(&m.id));
        let dead_letters = std::mem::take(&mut self.dead_letters);
        self.replace_messages(kept, dead_letters);
        self.dirty.dead_letters.extend(&expired);
        self.dirty.messages.extend(gone.iter().map(|m| m.id));
        gone.into_iter().map(|m| m.id).collect()
    }

    /// Forgets applied keys older than the dedup window.
    pub fn expire_keys(&mut self, applied_before_unix_ms: u64) -> usize {
        let expired = self.ledger.expire(applied_before_unix_ms);
        let count = expired.len();
        self.dirty.expired_keys.extend(expired);
        count
    }

    /// Clears messages, dead letters and the ledger; settings stay.
    pub fn reset(&mut self) {
        self.messages.clear();
        self.index.clear();
        self.dead_letters.clear();
        self.ledger = Ledger::default();
        self.by_state = [0; STATES];
        self.quarantined = 0;
        self.epoch += 1;
        self.dirty = Dirty { cleared: true, ..Default::default() };
    }

    /// The rows changed since the last call, ready for the store.
    pub fn take_changes(&mut self) -> RecordChanges {
        let dirty = std::mem::take(&mut self.dirty);
        let mut changes = RecordChanges {
            cleared: dirty.cleared,
            keys: self.ledger.take_unsaved(),
            expired_keys: dirty.expired_keys,
            ..Default::default()
        };
        for id in dirty.messages {
            match self.message(id) {
                Some(m) => changes.messages.push((id, to_json(m))),
                None => changes.deleted_messages.push(id),
            }
        }
        let letters: HashMap<u64, &DeadLetter> = match dirty.dead_letters.is_empty() {
            true => HashMap::new(),
            false => self.dead_letters.iter().map(|d| (d.id, d)).collect(),
        };
        for id in dirty.dead_letters {
            match letters.get(&id) {
                Some(d) => changes.dead_letters.push((id, d.dead_lettered_unix_ms, to_json(d))),
                None => changes.deleted_dead_letters.push(id),
            }
        }
        changes
    }

    /// Takes back changes the store could not commit, so the next `take_changes` has them.
    pub fn restore_changes(&mut self, changes: RecordChanges) {
        self.dirty.cleared |= changes.cleared;
        let messages = changes.messages.into_iter().map(|(id, _)| id).chain(changes.deleted_messages);
        self.dirty.messages.extend(messages);
        let letters =
            changes.dead_letters.into_iter().map(|(id, _, _)| id).chain(changes.deleted_dead_letters);
        self.dirty.dead_letters.extend(letters);
        self.dirty.expired_keys.extend(changes.expired_keys);
        self.ledger.mark_unsaved(changes.keys.into_iter().map(|row| row.key));
    }

    fn message_mut(&mut self, id: u64) -> Option<&mut Message> {
        self.index.get(&id).map(|&i| &mut self.messages[i])
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

/// Why a replay was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum ReplayRefusal {
    NotDeadLetters(Vec<u64>),
    Quarantined(Vec<u64>),
    TooManyActive { max: usize, active: usize, asked: usize },
}

fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string(value).expect("records serialize: they hold only plain data")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_the_store_could_not_commit_come_back() {
        let mut record = LabRecord::default();
        let created = record.create_messages(3, 0);
        record.dead_letter(created[0].id, "gave up".into(), 5, 5);
        let first = record.take_changes();
        assert_eq!(first.messages.len(), 3);
        assert_eq!(first.dead_letters.len(), 1);
        assert!(record.take_changes().messages.is_empty(), "taken once");

        record.restore_changes(first);
        let again = record.take_changes();
        let mut ids: Vec<u64> = again.messages.iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        assert_eq!(ids, created.iter().map(|m| m.id).collect::<Vec<_>>());
        assert_eq!(again.dead_letters.len(), 1);
    }
}

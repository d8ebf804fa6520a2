//! The lab's state, behind one boundary: settings, messages with every attempt, dead letters and
//! the downstream's ledger. Every change goes through a method here, so the lab can publish
//! an event for it in the same step and a snapshot is always consistent with the event ids.
//!
//! Today the state lives in memory for the life of the process; the methods are the seam where
//! a durable store takes over.

use std::collections::HashMap;

use serde::Serialize;

use crate::downstream::{DownstreamSettings, Ledger};
use crate::retry::{Policy, Wait};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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

/// How one attempt ended, as the client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    HttpError,
    Timeout,
    TransportError,
}

/// A planned wait and, once the next attempt starts, how long it really lasted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WaitRecord {
    #[serde(flatten)]
    pub plan: Wait,
    pub actual_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    pub id: u64,
    pub key: String,
    pub state: MessageState,
    pub round: u32,
    pub created_ms: u64,
    pub attempts: Vec<Attempt>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetter {
    /// The message's id.
    pub id: u64,
    pub key: String,
    pub round: u32,
    pub reason: String,
    pub attempts: Vec<Attempt>,
    pub dead_lettered_ms: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub queued: u64,
    pub in_flight: u64,
    pub backing_off: u64,
    pub delivered: u64,
    pub dead_letter: u64,
    pub requests: u64,
    pub applied: u64,
    pub applied_twice: u64,
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
}

impl LabRecord {
    pub fn counters(&self) -> Counters {
        let [queued, in_flight, backing_off, delivered, dead_letter] = self.by_state;
        Counters {
            queued,
            in_flight,
            backing_off,
            delivered,
            dead_letter,
            requests: self.ledger.requests(),
            applied: self.ledger.applied(),
            applied_twice: self.ledger.applied_twice(),
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
                message
            })
            .collect()
    }

    /// Starts attempt `n` of the message's current round; returns it and the measured wait
    /// that preceded it (stored on the previous attempt).
    pub fn start_attempt(&mut self, id: u64, n: u32, now_ms: u64) -> Option<(Attempt, Option<u64>)> {
        let message = self.message_mut(id)?;
        let waited_ms = message.attempts.last_mut().and_then(|last| {
            let wait = last.wait.as_mut().filter(|_| last.round == message.round)?;
            wait.actual_ms = Some(now_ms.saturating_sub(last.started_ms + last.duration_ms.unwrap_or(0)));
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
        Some(attempt.clone())
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

    pub fn dead_letter(&mut self, id: u64, reason: String, now_ms: u64) -> Option<DeadLetter> {
        let message = self.message(id)?;
        let letter = DeadLetter {
            id,
            key: message.key.clone(),
            round: message.round,
            reason,
            attempts: message.attempts.clone(),
            dead_lettered_ms: now_ms,
        };
        self.dead_letters.push(letter.clone());
        self.set_state(id, MessageState::DeadLetter);
        Some(letter)
    }

    /// Moves dead letters back into the queue for a new round, keeping their keys.
    /// `ids = None` takes them all. Fails, changing nothing, if an id is not a dead letter.
    pub fn replay(&mut self, ids: Option<&[u64]>) -> Result<Vec<(u64, u32)>, Vec<u64>> {
        let chosen: Vec<u64> = match ids {
            None => self.dead_letters.iter().map(|d| d.id).collect(),
            Some(ids) => {
                let missing: Vec<u64> =
                    ids.iter().copied().filter(|id| !self.dead_letters.iter().any(|d| d.id == *id)).collect();
                if !missing.is_empty() {
                    return Err(missing);
                }
                let mut ids = ids.to_vec();
                ids.sort_unstable();
                ids.dedup();
                ids
            }
        };
        self.dead_letters.retain(|d| !chosen.contains(&d.id));
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

    /// Clears messages, dead letters and the ledger; settings stay.
    pub fn reset(&mut self) {
        self.messages.clear();
        self.index.clear();
        self.dead_letters.clear();
        self.ledger = Ledger::default();
        self.by_state = [0; STATES];
        self.epoch += 1;
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
        true
    }
}

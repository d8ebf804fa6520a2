//! A delivered message in 36 bytes. A busy lab keeps up to `--settled-window` settled
//! messages (2,000 by default, and an eighth more before the oldest go), nearly all delivered
//! by their first attempt, and a `Message` with its one attempt held in place takes 112 bytes.
//! Packed, such a message keeps only what can differ from one to the next: its id, its key's
//! 16 bytes, when it was made, when its attempt started and how long it took, and how it was
//! answered. Everything else is known from "delivered by its first attempt". A message that
//! does not fit (retried, waited, refused, replayed from the dead-letter queue, a key that is
//! not a UUID, a number past 32 bits) stays a `Message`.

use super::message::{Attempt, Attempts, Message, MessageKey, MessageState, Outcome};

/// A message delivered by its first attempt of round 0, with no wait planned after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Packed {
    id: u32,
    created_ms: u32,
    /// How long after `created_ms` its attempt started.
    started_after_ms: u32,
    duration_ms: u32,
    key: uuid::Uuid,
    /// The answer's status; 0 for none (no HTTP status is 0).
    status: u16,
    outcome: Option<Outcome>,
    replayed: bool,
}

impl Packed {
    /// The message packed, when it fits.
    pub(super) fn of(message: &Message) -> Option<Packed> {
        let MessageKey::Uuid(key) = message.key else { return None };
        let Attempts::One(attempt) = &message.attempts else { return None };
        let delivered = message.state == MessageState::Delivered && message.round == 0;
        let plain = attempt.n == 1
            && attempt.round == 0
            && attempt.wait.is_none()
            && attempt.retry_after_s.is_none()
            && attempt.refused_by.is_none()
            && attempt.status != Some(0);
        if !delivered || !plain {
            return None;
        }
        Some(Packed {
            id: u32::try_from(message.id).ok()?,
            created_ms: u32::try_from(message.created_ms).ok()?,
            started_after_ms: u32::try_from(attempt.started_ms.checked_sub(message.created_ms)?).ok()?,
            duration_ms: attempt.duration_ms?,
            key,
            status: attempt.status.unwrap_or(0),
            outcome: attempt.outcome,
            replayed: attempt.replayed,
        })
    }

    pub(super) fn id(&self) -> u64 {
        u64::from(self.id)
    }

    /// The message as it was before it was packed.
    pub(super) fn unpack(&self) -> Message {
        let created_ms = u64::from(self.created_ms);
        Message {
            id: self.id(),
            key: MessageKey::Uuid(self.key),
            state: MessageState::Delivered,
            round: 0,
            created_ms,
            attempts: Attempts::One(Attempt {
                n: 1,
                round: 0,
                started_ms: created_ms + u64::from(self.started_after_ms),
                duration_ms: Some(self.duration_ms),
                status: (self.status != 0).then_some(self.status),
                outcome: self.outcome,
                replayed: self.replayed,
                retry_after_s: None,
                wait: None,
                refused_by: None,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::WaitRecord;
    use crate::retry::{Wait, WaitReason};

    fn delivered(id: u64) -> Message {
        Message {
            id,
            key: MessageKey::random(),
            state: MessageState::Delivered,
            round: 0,
            created_ms: 1_000 + id,
            attempts: Attempts::One(Attempt {
                n: 1,
                round: 0,
                started_ms: 1_250 + id,
                duration_ms: Some(12),
                status: Some(200),
                outcome: Some(Outcome::Ok),
                replayed: true,
                retry_after_s: None,
                wait: None,
                refused_by: None,
            }),
        }
    }

    #[test]
    fn a_message_delivered_by_its_first_attempt_packs_into_36_bytes_and_back() {
        assert_eq!(std::mem::size_of::<Packed>(), 36);
        let message = delivered(7);
        let packed = Packed::of(&message).expect("it fits");
        assert_eq!((packed.id(), packed.unpack()), (7, message));
        let mut unanswered = delivered(8);
        let Attempts::One(attempt) = &mut unanswered.attempts else { unreachable!() };
        (attempt.status, attempt.outcome) = (None, None);
        assert_eq!(Packed::of(&unanswered).unwrap().unpack(), unanswered);
    }

    #[test]
    fn a_message_that_holds_more_than_the_packed_fields_stays_whole() {
        type Change = (&'static str, fn(&mut Message));
        let changes: [Change; 11] = [
            ("queued", |m| m.state = MessageState::Queued),
            ("a dead letter", |m| m.state = MessageState::DeadLetter),
            ("a replay's round", |m| m.round = 1),
            ("a key not a UUID", |m| m.key = MessageKey::from("k1")),
            ("two attempts", |m| {
                let first = m.attempts[0].clone();
                m.attempts.push(first);
            }),
            ("a wait", |m| {
                let plan = Wait {
                    nominal_ms: 10,
                    low_ms: 0,
                    high_ms: 10,
                    chosen_ms: 10,
                    floor_ms: None,
                    planned_ms: 10,
                    reason: WaitReason::Backoff,
                };
                m.attempts[0].wait = Some(Box::new(WaitRecord { plan, actual_ms: None, queued_ms: None }));
            }),
            ("a Retry-After", |m| m.attempts[0].retry_after_s = Some(1)),
            ("a refusal", |m| m.attempts[0].refused_by = Some("breaker".into())),
            ("status 0", |m| m.attempts[0].status = Some(0)),
            ("an id past 32 bits", |m| m.id = 1 << 32),
            ("an attempt before its message", |m| m.attempts[0].started_ms = 0),
        ];
        for (what, change) in changes {
            let mut message = delivered(3);
            change(&mut message);
            assert_eq!(Packed::of(&message), None, "{what}");
        }
        let mut running = delivered(4);
        running.attempts[0].duration_ms = None;
        assert_eq!(Packed::of(&running), None, "an attempt not ended");
    }
}

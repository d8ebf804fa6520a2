//! A redrive: dead letters replayed one at a time at a set rate, as SQS's message-move tasks
//! do, so that a replay does not become its own thundering herd. What it still owes is kept on
//! the letters themselves (each carries the redrive's rate and size), so the commit that takes
//! a letter out of the queue for its replay also records the redrive's progress: after a
//! crash, a letter is either still owed or already replayed, never both.

use serde::{Deserialize, Serialize};

use super::DeadLetterQueue;

/// On each letter a redrive still owes: the redrive it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RedriveMark {
    /// Replays per second.
    pub rate_per_s: f64,
    /// How many letters the redrive took on.
    pub total: u64,
}

/// A redrive's progress, as the snapshot and the events show it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Redrive {
    /// Letters the redrive took on.
    pub total: u64,
    /// Of those, letters no longer waiting for it: replayed (or taken out of the queue by hand
    /// meanwhile).
    pub sent: u64,
    pub rate_per_s: f64,
}

impl DeadLetterQueue {
    /// The running redrive, if any.
    pub fn redrive(&self) -> Option<Redrive> {
        let mut owed = self.letters.iter().filter_map(|d| d.redrive);
        let mark = owed.next()?;
        let waiting = 1 + owed.count() as u64;
        Some(Redrive {
            total: mark.total,
            sent: mark.total.saturating_sub(waiting),
            rate_per_s: mark.rate_per_s,
        })
    }

    /// Starts a redrive of `ids` (dead letters, oldest first in the queue's order) at `rate_per_s`.
    pub fn start_redrive(&mut self, ids: &[u64], rate_per_s: f64) -> Redrive {
        let mark = RedriveMark { rate_per_s, total: ids.len() as u64 };
        let chosen: std::collections::HashSet<u64> = ids.iter().copied().collect();
        for letter in self.letters.iter_mut().filter(|d| chosen.contains(&d.id)) {
            letter.redrive = Some(mark);
            self.dirty.insert(letter.id);
        }
        Redrive { total: mark.total, sent: 0, rate_per_s }
    }

    /// The next letter the redrive owes a replay: the oldest still marked.
    pub fn next_redriven(&self) -> Option<u64> {
        self.letters.iter().find(|d| d.redrive.is_some()).map(|d| d.id)
    }

    /// Stops the redrive: the letters it had not replayed stay in the queue. Returns it as it
    /// stood.
    pub fn cancel_redrive(&mut self) -> Option<Redrive> {
        let redrive = self.redrive()?;
        for letter in self.letters.iter_mut().filter(|d| d.redrive.is_some()) {
            letter.redrive = None;
            self.dirty.insert(letter.id);
        }
        Some(redrive)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlq::{Cause, DeadLetter, DeadLetterChanges};
    use crate::domain::{Message, MessageState};

    fn letter(id: u64, at: u64) -> DeadLetter {
        let key = format!("k{id}");
        let message = Message {
            id,
            key: key.into(),
            state: MessageState::DeadLetter,
            round: 0,
            created_ms: 0,
            attempts: Default::default(),
        };
        DeadLetter::new(&message, (Cause::AttemptsUsedUp, "gave up".into()), (at, at), 3)
    }

    #[test]
    fn a_redrive_goes_oldest_first_and_its_progress_survives_the_store() {
        let mut queue = DeadLetterQueue::default();
        for (id, at) in [(1, 30), (2, 10), (3, 20)] {
            queue.push(letter(id, at));
        }
        queue.put_back(Vec::new()); // sorts by time, as the store's copy is
        let mut changes = DeadLetterChanges::default();
        queue.take_changes(&mut changes, usize::MAX);
        assert_eq!(queue.redrive(), None);

        queue.start_redrive(&[1, 2], 5.0);
        assert_eq!(queue.next_redriven(), Some(2), "the oldest of the two");
        queue.remove(&[2]);
        assert_eq!(queue.redrive(), Some(Redrive { total: 2, sent: 1, rate_per_s: 5.0 }));

        // What a restart reads back: the letters as the store holds them.
        let mut changes = DeadLetterChanges::default();
        queue.take_changes(&mut changes, usize::MAX);
        let stored: Vec<DeadLetter> = queue.letters().to_vec();
        let restored = DeadLetterQueue::restore(stored);
        assert_eq!(restored.redrive(), Some(Redrive { total: 2, sent: 1, rate_per_s: 5.0 }));
        assert_eq!(restored.next_redriven(), Some(1));

        // A rate stored before rates had a floor comes back at the lowest.
        let mut tiny = DeadLetterQueue::restore(vec![letter(4, 40)]);
        tiny.start_redrive(&[4], 1e-300);
        let tiny = DeadLetterQueue::restore(tiny.letters().to_vec());
        assert_eq!(tiny.redrive().map(|r| r.rate_per_s), Some(crate::domain::MIN_RATE_PER_S));

        let mut cancelled = restored;
        assert_eq!(cancelled.cancel_redrive().map(|r| r.sent), Some(1));
        assert_eq!(
            (cancelled.redrive(), cancelled.next_redriven(), cancelled.letters().len()),
            (None, None, 2)
        );
    }
}

//! The dead-letter queue: the messages the client gave up on, each with every attempt and the
//! reason, kept until a person replays them or their retention window ends. It owns the rules
//! of replay and quarantine: a replay moves letters back into the queue with their keys for a
//! new round; a message that comes back again and again is quarantined, so "replay all" leaves
//! it alone and replaying it by id needs a confirmation. `filter` picks the letters an operator
//! means; `redrive` replays them at a rate.

mod filter;
mod redrive;

pub use filter::{Chosen, Facets, Filter, FilterError, LastStatus, Selection, Target, matching, page};
pub use redrive::{Redrive, RedriveMark};

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::domain::{Attempt, Message, to_json};
use crate::retry::protection::{ProtectionKind, Refuser};

/// The dead letters' rows a set of changes touched, serialized for the store.
#[derive(Debug, Default)]
pub struct DeadLetterChanges {
    /// (id, when dead-lettered in wall-clock ms, the letter as JSON).
    pub dead_letters: Vec<(u64, u64, String)>,
    pub deleted_dead_letters: Vec<u64>,
}

impl DeadLetterChanges {
    /// These rows followed by `later` ones, taken after: a letter in both is written as `later`
    /// has it (kept or deleted), once.
    pub fn then(self, later: DeadLetterChanges) -> DeadLetterChanges {
        if self.dead_letters.is_empty() && self.deleted_dead_letters.is_empty() {
            return later;
        }
        let mut rows: HashMap<u64, Option<(u64, String)>> = HashMap::new();
        for changes in [self, later] {
            rows.extend(changes.dead_letters.into_iter().map(|(id, at, json)| (id, Some((at, json)))));
            rows.extend(changes.deleted_dead_letters.into_iter().map(|id| (id, None)));
        }
        let mut merged = DeadLetterChanges::default();
        for (id, row) in rows {
            match row {
                Some((at, json)) => merged.dead_letters.push((id, at, json)),
                None => merged.deleted_dead_letters.push(id),
            }
        }
        merged
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeadLetter {
    /// The message's id.
    pub id: u64,
    pub key: String,
    pub round: u32,
    /// What ended the round, in words.
    pub reason: String,
    /// What ended the round, as a name to count by.
    #[serde(default)]
    pub cause: Cause,
    pub attempts: Vec<Attempt>,
    pub dead_lettered_ms: u64,
    /// Wall-clock time, for the retention window.
    pub dead_lettered_unix_ms: u64,
    /// Waiting for its turn in a redrive at a rate; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redrive: Option<RedriveMark>,

    /// Dead-lettered again after too many replays: "replay all" leaves it for a person.
    pub quarantined: bool,
    /// The downstream's ledger holds the key as applied (a timeout whose write landed): a
    /// replay is answered from the stored result and applies nothing. Read from the ledger
    /// when a snapshot is made, so a write that landed after the letter was made counts too.
    #[serde(default)]
    pub applied: bool,
}

/// What ended a round without a delivery: one of the fixed causes, or a protection's refusal,
/// filed under the protection's kind. Written as its name (`attempts_used_up`, `token_bucket`),
/// as the stored letters have always held it; a name no cause has does not read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Cause {
    /// Every attempt the policy allows was used.
    #[default]
    AttemptsUsedUp,
    /// The next wait would have ended past the policy's `max_total_ms`.
    TimeBudget,
    /// The last attempt was refused by the open circuit breaker.
    CircuitOpen,
    /// The downstream answered with an error that retrying cannot fix.
    Permanent,
    /// The downstream said not to retry (`X-Retry-Pushback-Ms` negative, as gRFC A6's
    /// `grpc-retry-pushback-ms`).
    Pushback,
    /// A protection refused the retry, or the last attempt before it was sent (the policy's
    /// `retry_budget` files under the listed `retry_budget`); for `grpc_hedging`, a hedged
    /// round ended without a success: a fatal status, or the throttle refused the next hedge
    /// with none left in flight.
    Refused(ProtectionKind),
}

impl Cause {
    /// The cause of a round a protection ended: the breaker's is `circuit_open`, any other's
    /// its kind.
    pub fn refused_by(refuser: Refuser) -> Cause {
        match refuser {
            Refuser::Breaker => Cause::CircuitOpen,
            Refuser::Kind(kind) => Cause::Refused(kind),
        }
    }
}

impl Serialize for Cause {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Cause {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Cause::parse(&name).ok_or_else(|| serde::de::Error::custom(format!("no dead-letter cause {name:?}")))
    }
}

impl utoipa::PartialSchema for Cause {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        let names: Vec<&str> = Cause::all().map(Cause::as_str).collect();
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(
                "What ended the round: a fixed cause, or the kind of the protection that refused it",
            ))
            .enum_values(Some(names))
            .into()
    }
}

impl utoipa::ToSchema for Cause {}

impl DeadLetter {
    /// The letter for a message given up on in its current round; quarantined when this is
    /// its `quarantine_after`-th replay or later.
    pub fn new(
        message: &Message,
        (cause, reason): (Cause, String),
        (now_ms, unix_ms): (u64, u64),
        quarantine_after: u32,
    ) -> Self {
        DeadLetter {
            id: message.id,
            key: message.key.to_string(),
            round: message.round,
            reason,
            cause,
            attempts: message.attempts.to_vec(),
            dead_lettered_ms: now_ms,
            dead_lettered_unix_ms: unix_ms,
            redrive: None,
            quarantined: message.round >= quarantine_after,
            applied: false,
        }
    }
}

/// Why a replay was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum ReplayRefusal {
    NotDeadLetters(Vec<u64>),
    Quarantined(Vec<u64>),
    TooManyActive {
        max: usize,
        active: usize,
        asked: usize,
    },
    /// A filter that matches no letter was acted on.
    NothingMatches,
    /// A delete by filter matches more letters now than the person confirmed.
    MoreThanConfirmed {
        confirmed: usize,
        matching: usize,
    },
}

/// One lab's dead letters, oldest first.
#[derive(Debug, Default)]
pub struct DeadLetterQueue {
    letters: Vec<DeadLetter>,
    /// Where each letter sits in `letters`, by id: an export or a page reads letters by id, and
    /// a search per letter made those quadratic in the queue's length, under the lab's lock.
    index: HashMap<u64, usize>,
    /// Kept as a count so the counters stay cheap.
    quarantined: u64,
    /// Letters added or removed since the store last took them.
    dirty: HashSet<u64>,
}

impl DeadLetterQueue {
    /// The queue as the store holds it.
    pub fn restore(mut letters: Vec<DeadLetter>) -> Self {
        letters.sort_by_key(|d| (d.dead_lettered_unix_ms, d.id));
        // A store from before rates had a floor may hold a redrive too slow to pace.
        for mark in letters.iter_mut().filter_map(|d| d.redrive.as_mut()) {
            mark.rate_per_s = crate::domain::paced_rate(mark.rate_per_s);
        }
        let quarantined = letters.iter().filter(|d| d.quarantined).count() as u64;
        let mut queue = DeadLetterQueue { letters, quarantined, ..Default::default() };
        queue.reindex();
        queue
    }

    /// Rebuilds `index` after the letters moved.
    fn reindex(&mut self) {
        self.index = self.letters.iter().enumerate().map(|(i, d)| (d.id, i)).collect();
    }

    pub fn letters(&self) -> &[DeadLetter] {
        &self.letters
    }

    pub fn quarantined(&self) -> u64 {
        self.quarantined
    }

    pub fn push(&mut self, letter: DeadLetter) {
        self.quarantined += u64::from(letter.quarantined);
        self.dirty.insert(letter.id);
        self.index.insert(letter.id, self.letters.len());
        self.letters.push(letter);
    }

    /// Takes the given letters out of the queue (they are being replayed or expired); returns
    /// them.
    pub fn remove(&mut self, ids: &[u64]) -> Vec<DeadLetter> {
        let gone: HashSet<u64> = ids.iter().copied().collect();
        let (removed, kept) =
            std::mem::take(&mut self.letters).into_iter().partition(|d| gone.contains(&d.id));
        self.letters = kept;
        self.reindex();
        self.quarantined = self.letters.iter().filter(|d| d.quarantined).count() as u64;
        self.dirty.extend(gone);
        removed
    }

    /// Moves letters into quarantine (`true`) or out of it; returns those whose flag changed, in
    /// id order.
    pub fn set_quarantined(&mut self, ids: &[u64], quarantined: bool) -> Vec<u64> {
        let chosen: HashSet<u64> = ids.iter().copied().collect();
        let mut changed = Vec::new();
        for letter in
            self.letters.iter_mut().filter(|d| chosen.contains(&d.id) && d.quarantined != quarantined)
        {
            letter.quarantined = quarantined;
            self.dirty.insert(letter.id);
            changed.push(letter.id);
        }
        self.quarantined = self.letters.iter().filter(|d| d.quarantined).count() as u64;
        changed.sort_unstable();
        changed
    }

    /// The letter with this id.
    pub fn get(&self, id: u64) -> Option<&DeadLetter> {
        self.index.get(&id).map(|&i| &self.letters[i])
    }

    /// Puts letters back where they were (a replay the store could not keep).
    pub fn put_back(&mut self, letters: Vec<DeadLetter>) {
        for letter in letters {
            self.push(letter);
        }
        self.letters.sort_by_key(|d| (d.dead_lettered_unix_ms, d.id));
        self.reindex();
    }

    /// Removes letters older than the retention window; returns their ids.
    pub fn expire(&mut self, dead_lettered_before_unix_ms: u64) -> Vec<u64> {
        let expired: Vec<u64> = self
            .letters
            .iter()
            .filter(|d| d.dead_lettered_unix_ms < dead_lettered_before_unix_ms)
            .map(|d| d.id)
            .collect();
        if !expired.is_empty() {
            self.remove(&expired);
        }
        expired
    }

    /// Empties the queue (a reset: the store clears the lab's rows itself).
    pub fn clear(&mut self) {
        *self = DeadLetterQueue::default();
    }

    /// Swaps in the letters as the store holds them (after a client crash).
    pub fn replace(&mut self, letters: Vec<DeadLetter>) {
        let dirty = std::mem::take(&mut self.dirty);
        *self = DeadLetterQueue::restore(letters);
        self.dirty = dirty;
    }

    /// How many letters changed since the store last took them.
    pub fn unsaved(&self) -> usize {
        self.dirty.len()
    }

    /// Adds at most `max` of the rows changed since the last call to `changes`; the rest are
    /// left for the next call.
    pub fn take_changes(&mut self, changes: &mut DeadLetterChanges, max: usize) {
        let taken: Vec<u64> = match self.dirty.len() <= max {
            true => std::mem::take(&mut self.dirty).into_iter().collect(),
            false => self.dirty.iter().take(max).copied().collect(),
        };
        for id in taken {
            self.dirty.remove(&id);
            match self.get(id) {
                Some(d) => changes.dead_letters.push((id, d.dead_lettered_unix_ms, to_json(d))),
                None => changes.deleted_dead_letters.push(id),
            }
        }
    }

    /// Takes back rows the store could not commit, so the next `take_changes` has them.
    pub fn restore_changes(&mut self, changes: &DeadLetterChanges) {
        let letters = changes.dead_letters.iter().map(|(id, _, _)| *id);
        self.dirty.extend(letters.chain(changes.deleted_dead_letters.iter().copied()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::domain::MessageState;

    fn message(id: u64, round: u32) -> Message {
        let key = format!("k{id}");
        Message {
            id,
            key: key.into(),
            state: MessageState::DeadLetter,
            round,
            created_ms: 0,
            attempts: Default::default(),
        }
    }

    #[test]
    fn replay_all_skips_the_quarantined_and_by_id_needs_a_confirmation() {
        let mut queue = DeadLetterQueue::default();
        queue.push(DeadLetter::new(&message(1, 0), (Cause::AttemptsUsedUp, "gave up".into()), (5, 5), 3));
        queue.push(DeadLetter::new(&message(2, 3), (Cause::AttemptsUsedUp, "gave up".into()), (6, 6), 3));
        assert_eq!(queue.quarantined(), 1);
        let choose =
            |target: &Target, confirm| queue.select(target, (true, confirm), |_| false).map(|c| c.ids);
        assert_eq!(choose(&Target::All, false), Ok(vec![1]));
        assert_eq!(choose(&Target::Ids(vec![2, 2]), false), Err(ReplayRefusal::Quarantined(vec![2])));
        assert_eq!(choose(&Target::Ids(vec![2]), true), Ok(vec![2]));
        assert_eq!(choose(&Target::Ids(vec![1, 9]), true), Err(ReplayRefusal::NotDeadLetters(vec![9])));
        let by_filter = Target::Filter(Selection::everything());
        let skipped = queue.select(&by_filter, (true, false), |_| false).unwrap();
        assert_eq!((skipped.ids, skipped.quarantined_skipped), (vec![1], 1));
        let nothing = Target::Filter(Selection::everything().quarantined(false));
        queue.remove(&[1]);
        assert_eq!(queue.select(&nothing, (true, false), |_| false), Err(ReplayRefusal::NothingMatches));
        queue.put_back(vec![DeadLetter::new(
            &message(1, 0),
            (Cause::AttemptsUsedUp, "gave up".into()),
            (5, 5),
            3,
        )]);
        queue.remove(&[2]);
        assert_eq!((queue.letters().len(), queue.quarantined()), (1, 0));
    }

    #[test]
    fn rows_the_store_could_not_commit_come_back() {
        let mut queue = DeadLetterQueue::default();
        queue.push(DeadLetter::new(&message(1, 0), (Cause::AttemptsUsedUp, "gave up".into()), (5, 5), 3));
        let mut first = DeadLetterChanges::default();
        queue.take_changes(&mut first, usize::MAX);
        assert_eq!(first.dead_letters.len(), 1);
        let mut none = DeadLetterChanges::default();
        queue.take_changes(&mut none, usize::MAX);
        assert!(none.dead_letters.is_empty(), "taken once");
        queue.restore_changes(&first);
        let mut again = DeadLetterChanges::default();
        queue.take_changes(&mut again, usize::MAX);
        assert_eq!(again.dead_letters.len(), 1);
    }

    #[test]
    fn changes_taken_a_few_at_a_time_are_each_written_once_as_they_last_were() {
        let letter =
            |id, at| DeadLetter::new(&message(id, 0), (Cause::AttemptsUsedUp, "x".into()), (at, at), 3);
        let mut queue = DeadLetterQueue::default();
        for id in 1..=5 {
            queue.push(letter(id, id * 10));
        }
        let mut early = DeadLetterChanges::default();
        queue.take_changes(&mut early, 3);
        assert_eq!((early.dead_letters.len(), queue.unsaved()), (3, 2), "three taken, two left");
        // Between two takes, a letter already taken changes again and another goes.
        let (again, gone) = (early.dead_letters[0].0, early.dead_letters[1].0);
        queue.set_quarantined(&[again], true);
        queue.remove(&[gone]);
        let mut late = DeadLetterChanges::default();
        queue.take_changes(&mut late, usize::MAX);
        assert_eq!(queue.unsaved(), 0);
        let merged = early.then(late);
        let mut kept: Vec<u64> = merged.dead_letters.iter().map(|(id, _, _)| *id).collect();
        kept.sort_unstable();
        let mut expected: Vec<u64> = (1..=5).filter(|&id| id != gone).collect();
        expected.sort_unstable();
        assert_eq!(kept, expected, "each kept letter once");
        assert_eq!(merged.deleted_dead_letters, [gone], "the letter that went is deleted, not written");
        let (_, _, json) = merged.dead_letters.iter().find(|(id, _, _)| *id == again).unwrap();
        assert!(json.contains("\"quarantined\":true"), "as it last was: {json}");
    }

    #[test]
    fn a_letter_is_found_by_id_however_the_queue_moved() {
        let letter =
            |id, at| DeadLetter::new(&message(id, 0), (Cause::AttemptsUsedUp, "x".into()), (at, at), 3);
        let mut queue = DeadLetterQueue::restore(vec![letter(3, 30), letter(1, 10)]);
        queue.push(letter(2, 20));
        let found = |q: &DeadLetterQueue| [1, 2, 3, 4].map(|id| q.get(id).map(|d| d.dead_lettered_ms));
        assert_eq!(found(&queue), [Some(10), Some(20), Some(30), None]);
        let taken = queue.remove(&[1]);
        assert_eq!(found(&queue), [None, Some(20), Some(30), None]);
        queue.put_back(taken);
        queue.put_back(vec![letter(4, 5)]);
        assert_eq!(found(&queue), [Some(10), Some(20), Some(30), Some(5)]);
        assert_eq!(queue.letters().iter().map(|d| d.id).collect::<Vec<_>>(), [4, 1, 2, 3], "oldest first");
        queue.clear();
        assert_eq!(found(&queue), [None; 4]);
    }

    #[test]
    fn expired_letters_leave_the_queue() {
        let mut queue = DeadLetterQueue::default();
        queue.push(DeadLetter::new(&message(1, 0), (Cause::AttemptsUsedUp, "old".into()), (5, 100), 3));
        queue.push(DeadLetter::new(&message(2, 0), (Cause::AttemptsUsedUp, "new".into()), (6, 900), 3));
        assert_eq!(queue.expire(500), vec![1]);
        assert_eq!(queue.letters().iter().map(|d| d.id).collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn a_protections_refusal_files_under_its_kind_written_as_stored_letters_hold_it() {
        assert_eq!(Cause::refused_by(Refuser::Breaker), Cause::CircuitOpen);
        for &kind in ProtectionKind::ALL {
            let cause = Cause::refused_by(Refuser::Kind(kind));
            assert_eq!(cause.as_str(), kind.name(), "each kind its cause, named as the kind is");
            assert_eq!(serde_json::to_value(cause).unwrap(), kind.name(), "stored as the filter names it");
            assert_eq!(cause.words(), kind.words());
        }
        // The names stored rows hold read back as the causes they were.
        let stored =
            ["attempts_used_up", "time_budget", "circuit_open", "retry_budget", "permanent", "pushback"];
        for name in stored.into_iter().chain(["token_bucket", "aws_standard_2026", "grpc_hedging"]) {
            let cause: Cause = serde_json::from_value(serde_json::json!(name)).unwrap();
            assert_eq!(cause.as_str(), name);
        }
        assert!(serde_json::from_value::<Cause>(serde_json::json!("nope")).is_err(), "no fallback");
        let names: HashSet<&str> = Cause::all().map(Cause::as_str).collect();
        assert_eq!(names.len(), Cause::all().count(), "a name given twice");
    }
}

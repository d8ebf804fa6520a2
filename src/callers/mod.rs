//! Outside callers of a lab's endpoint, told apart: each is named (`name`), the requests one
//! caller sends with one `Idempotency-Key` make one outside message, and each caller's retry
//! behaviour is graded from what the endpoint observed (`grade`), its waits pooled over its keys
//! (`timing`), with advice by what its timing shows (`advice`). Pure: times are the lab's
//! milliseconds, handed in.
//!
//! An attempt is measured at the endpoint, from its arrival to its answer or to the client
//! hanging up; a wait, from one answer to the key's next arrival.

mod advice;
mod grade;
mod held;
mod name;
mod timing;

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;
use serde::{Deserialize, Serialize};

use held::{Held, HeldAttempt};

pub use grade::{CallerReport, Check, Checks, report};

/// A check's verdict on a caller's card; the card (`grade`) gives it and the advice
/// (`advice`) reads it, so it is neither's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Warn,
    Fail,
    NotSeen,
    /// Seen, but the evidence cannot tell a right client from a wrong one (too few keys, or
    /// a spread no larger than the caller's own process adds): not a pass; the evidence says why.
    NotJudged,
}
pub use name::{CallerName, MAX_NAME_CHARS, unseen_in};

/// One request of an outside message, as the endpoint saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OutsideAttempt {
    /// 1 for the key's first request.
    pub n: u32,
    pub started_ms: u64,
    /// When it was answered or the client hung up; null while it runs.
    pub ended_ms: Option<u64>,
    /// The status sent; null when the client hung up first (or while it runs).
    pub status: Option<u16>,
    /// The client hung up before the answer: its own timeout.
    pub hung_up: bool,
    /// The `Retry-After` the endpoint sent with the answer, in seconds.
    pub retry_after_s: Option<u64>,
    /// From the previous request's end to this one's arrival; null for the first, and when the
    /// previous had not ended yet (sent side by side).
    pub waited_ms: Option<u64>,
    /// The `X-Request-Timeout-Ms` it sent (how long it said it would wait); absent when it sent
    /// none or one that did not parse. Absent fields are left out, so a kept attempt stays small
    /// and the rows an earlier release stored still read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u32>,
    /// The `X-Previous-Attempts` it sent; absent as above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_attempts: Option<u32>,
    /// The hint headers it sent that did not parse (the endpoint ignored them).
    #[serde(default, skip_serializing_if = "Unparsed::is_none")]
    pub unparsed: Unparsed,
    /// The `X-Retry-Pushback-Ms` the endpoint sent with the answer (`-1`: do not retry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pushback_ms: Option<i32>,
}

/// Which of a request's hint headers were there but did not parse: two flags, not strings, so
/// an attempt costs a byte for them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Unparsed {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timeout: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub previous_attempts: bool,
}

impl Unparsed {
    fn is_none(&self) -> bool {
        !self.timeout && !self.previous_attempts
    }
}

/// What a request's hint headers said, as an outside attempt keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spoken {
    pub timeout_ms: Option<u32>,
    pub previous_attempts: Option<u32>,
    pub unparsed: Unparsed,
}

/// The requests of one caller that carried one `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OutsideMessage {
    /// Numbered in the order first seen in the lab, from 1.
    pub id: u64,
    pub caller: String,
    pub key: String,
    /// The first body's SHA-256 (`sha256:` and hex); null when it was refused before it was read.
    pub digest: Option<String>,
    /// Requests seen with this key, also those past `max_outside_attempts_per_key` (not kept).
    pub requests: u64,
    pub attempts: Vec<OutsideAttempt>,
}

/// The bounds on what is kept of outside callers in one lab.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Outside messages (caller and key) kept per lab: `max_outside_keys_per_lab`.
    pub max_messages: usize,
    pub max_callers: usize,
    pub max_attempts_per_key: usize,
}

/// Requests not kept because a bound was reached, by the setting that held them back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Untracked {
    /// New keys past `max_outside_keys_per_lab` or `max_outside_keys`.
    pub max_outside_keys: u64,
    /// Requests of new callers past `max_callers_per_lab`.
    pub max_callers_per_lab: u64,
    /// Requests of a key past `max_outside_attempts_per_key`.
    pub max_outside_attempts_per_key: u64,
}

/// Why a request was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Keys,
    Callers,
    Attempts,
}

/// Where an arrived request is kept, to be ended by `Callers::end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    pub message_id: u64,
    index: usize,
}

/// What ended a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// With the `Retry-After` (s) and the `X-Retry-Pushback-Ms` sent, if any.
    Answered {
        status: u16,
        retry_after_s: Option<u64>,
        pushback_ms: Option<i32>,
    },
    HungUp,
}

/// What a lab keeps of its outside callers, with what the store is owed. Each message is held
/// compactly (`held`), found by its caller and key through an index of positions that hashes
/// them where the message holds them, so neither string is kept twice.
#[derive(Debug, Default)]
pub struct Callers {
    /// In the order first seen, so by id.
    messages: Vec<Held>,
    by_key: HashTable<u32>,
    hasher: RandomState,
    /// Callers seen, in the order first seen (a message's `caller` is an index here), and by name.
    names: Vec<Box<str>>,
    by_name: BTreeMap<Box<str>, u16>,
    /// The digests not of the endpoint's spelling, by message id: none but in rows of a test's
    /// making, but a row reads back as it was stored.
    odd_digests: BTreeMap<u64, Box<str>>,
    untracked: Untracked,
    /// Messages changed since the store last took them, by id; everything, after a reset.
    changed: BTreeSet<u64>,
    cleared: bool,
}

/// The most callers one lab can tell apart, whatever `max_callers_per_lab` says: a message
/// names its caller in 16 bits.
pub const MAX_CALLERS: usize = u16::MAX as usize + 1;
/// The most outside messages one lab keeps, whatever `max_outside_keys_per_lab` says: the index
/// finds a message by its place in 32 bits (and so many would take a terabyte).
const MAX_MESSAGES: usize = u32::MAX as usize;

/// The outside messages the store is owed, serialized.
#[derive(Debug, Default)]
pub struct CallerChanges {
    pub cleared: bool,
    pub messages: Vec<(u64, String)>,
}

impl Callers {
    /// As the store kept them.
    pub fn restore(mut messages: Vec<OutsideMessage>) -> Callers {
        messages.sort_by_key(|m| m.id);
        let mut callers = Callers::default();
        for message in messages {
            let Some(caller) = callers.name_index(&message.caller) else {
                continue; // more callers than a message can name, which no lab keeps
            };
            let mut held = Held::new(message.id, caller, &message.key);
            held.requests = u32::try_from(message.requests).unwrap_or(u32::MAX);
            if let Some(odd) = message.digest.and_then(|digest| held.set_digest(digest)) {
                callers.odd_digests.insert(held.id, odd.into());
            }
            held.attempts = message.attempts.iter().map(HeldAttempt::of).collect();
            let hash = callers.hasher.hash_one((caller, &*held.key));
            let Ok(position) = u32::try_from(callers.messages.len()) else {
                break; // past MAX_MESSAGES, which no lab keeps
            };
            let Callers { messages, by_key, hasher, .. } = &mut callers;
            match by_key.find_mut(hash, |&at| same(&messages[at as usize], caller, &held.key)) {
                // A key stored twice: found as the later, as before.
                Some(at) => *at = position,
                None => {
                    by_key.insert_unique(hash, position, |&at| hash_of(hasher, &messages[at as usize]));
                }
            }
            callers.messages.push(held);
        }
        callers
    }

    pub fn len(&self) -> usize {
        self.messages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Each message as the events, the store and the API see it, made as it is read.
    pub fn messages(&self) -> impl ExactSizeIterator<Item = OutsideMessage> + '_ {
        self.messages.iter().map(|held| self.message(held))
    }

    fn message(&self, held: &Held) -> OutsideMessage {
        let odd = self.odd_digests.get(&held.id).map(|digest| &**digest);
        held.message(&self.names[usize::from(held.caller)], odd)
    }

    pub fn untracked(&self) -> Untracked {
        self.untracked
    }

    /// Callers seen, by name.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(|name| &**name)
    }

    /// The index of `name` among the callers seen, which it joins if new; `None` when there is
    /// no index left for it.
    fn name_index(&mut self, name: &str) -> Option<u16> {
        if let Some(&index) = self.by_name.get(name) {
            return Some(index);
        }
        let index = u16::try_from(self.names.len()).ok()?;
        self.names.push(name.into());
        self.by_name.insert(name.into(), index);
        Some(index)
    }

    /// A request of `caller` with `key` arrived at `now_ms`. `room` says whether the server
    /// has room for another outside key (the limit across labs). Returns where it is kept, or
    /// which bound held it back (counted in `untracked`).
    pub fn arrive(
        &mut self,
        (caller, key, spoken): (&CallerName, &str, Spoken),
        digest: Option<String>,
        now_ms: u64,
        (bounds, room): (Bounds, bool),
    ) -> Result<Ticket, Refusal> {
        let known = self.by_name.get(caller.as_str()).copied();
        let found = known.and_then(|index| {
            let hash = self.hasher.hash_one((index, key));
            self.by_key.find(hash, |&at| same(&self.messages[at as usize], index, key)).copied()
        });
        let position = match found {
            Some(position) => position as usize,
            None => {
                let refusal = if known.is_none() && self.names.len() >= bounds.max_callers.min(MAX_CALLERS) {
                    Some(Refusal::Callers)
                } else if self.messages.len() >= bounds.max_messages.min(MAX_MESSAGES) || !room {
                    Some(Refusal::Keys)
                } else {
                    None
                };
                // A caller refused is not named: a new one joins the names only with its key.
                let index = match refusal {
                    None => self.name_index(caller.as_str()).ok_or(Refusal::Callers),
                    Some(refusal) => Err(refusal),
                };
                let index = index.inspect_err(|&refusal| self.count(refusal))?;
                let position = self.messages.len() as u32;
                let id = self.messages.last().map_or(1, |m| m.id + 1);
                let held = Held::new(id, index, key);
                let hash = self.hasher.hash_one((index, key));
                let Callers { messages, by_key, hasher, .. } = self;
                by_key.insert_unique(hash, position, |&at| hash_of(hasher, &messages[at as usize]));
                self.messages.push(held);
                position as usize
            }
        };
        let held = &mut self.messages[position];
        held.requests = held.requests.saturating_add(1);
        if !held.has_digest()
            && let Some(digest) = digest
            && let Some(odd) = held.set_digest(digest)
        {
            self.odd_digests.insert(held.id, odd.into());
        }
        if held.attempts.len() >= bounds.max_attempts_per_key {
            // Counted among its requests, and no attempt of it will end: stored now.
            self.changed.insert(held.id);
            self.count(Refusal::Attempts);
            return Err(Refusal::Attempts);
        }
        // Stored when the attempt ends (`end`), not also as it arrives: a new key's commit
        // would otherwise write the row once before its answer and once after.
        let waited_ms = match held.attempts.last() {
            Some(previous) => previous.ended_ms().map(|ended| now_ms.saturating_sub(ended)),
            None => None,
        };
        held.push(HeldAttempt::arrived(now_ms, waited_ms, spoken));
        Ok(Ticket { message_id: held.id, index: held.attempts.len() - 1 })
    }

    /// The request kept at `ticket` ended at `now_ms`; returns its message, to be published.
    pub fn end(&mut self, ticket: Ticket, ending: Ending, now_ms: u64) -> Option<OutsideMessage> {
        let position = self.messages.binary_search_by_key(&ticket.message_id, |m| m.id).ok()?;
        let held = &mut self.messages[position];
        let attempt = held.attempts.get_mut(ticket.index)?;
        attempt.end(now_ms);
        match ending {
            Ending::Answered { status, retry_after_s, pushback_ms } => {
                attempt.answered(status, retry_after_s, pushback_ms)
            }
            Ending::HungUp => attempt.hung_up(),
        }
        self.changed.insert(held.id);
        Some(self.message(&self.messages[position]))
    }

    fn count(&mut self, refusal: Refusal) {
        let counter = match refusal {
            Refusal::Keys => &mut self.untracked.max_outside_keys,
            Refusal::Callers => &mut self.untracked.max_callers_per_lab,
            Refusal::Attempts => &mut self.untracked.max_outside_attempts_per_key,
        };
        *counter += 1;
    }

    /// Forgets every caller (a lab's reset).
    pub fn reset(&mut self) {
        *self = Callers { cleared: true, ..Callers::default() };
    }

    /// What the store is owed since the last call.
    pub fn take_changes(&mut self) -> CallerChanges {
        let changed = std::mem::take(&mut self.changed);
        let messages = changed
            .into_iter()
            .filter_map(|id| self.messages.binary_search_by_key(&id, |m| m.id).ok())
            .map(|at| {
                let message = self.message(&self.messages[at]);
                (message.id, serde_json::to_string(&message).expect("an outside message serializes"))
            })
            .collect();
        CallerChanges { cleared: std::mem::take(&mut self.cleared), messages }
    }

    /// Changes the store could not commit, to be written with the next.
    pub fn restore_changes(&mut self, changes: &CallerChanges) {
        self.cleared |= changes.cleared;
        self.changed.extend(changes.messages.iter().map(|(id, _)| *id));
    }

    /// The bytes the messages hold, as asked of the allocator: the list (with its room to
    /// grow), each key and list of attempts, and the index.
    #[cfg(test)]
    fn held_bytes(&self) -> usize {
        let each: usize =
            self.messages.iter().map(|held| held.key.len() + std::mem::size_of_val(&*held.attempts)).sum();
        self.messages.capacity() * std::mem::size_of::<Held>() + each + self.by_key.allocation_size()
    }
}

/// Whether `held` is the message of caller `index` and `key`.
fn same(held: &Held, index: u16, key: &str) -> bool {
    held.caller == index && &*held.key == key
}

fn hash_of(hasher: &RandomState, held: &Held) -> u64 {
    hasher.hash_one((held.caller, &*held.key))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds { max_messages: 3, max_callers: 2, max_attempts_per_key: 3 };

    fn name(n: &str) -> CallerName {
        CallerName::from_request(Some(n.as_bytes()), None, None).unwrap()
    }

    #[test]
    fn a_key_s_requests_make_one_message_with_its_waits_measured_between_answer_and_arrival() {
        let mut callers = Callers::default();
        let a = name("a");
        let first = callers
            .arrive((&a, "k1", Spoken::default()), Some("sha256:1".into()), 100, (BOUNDS, true))
            .unwrap();
        callers.end(first, Ending::Answered { status: 503, retry_after_s: Some(1), pushback_ms: None }, 130);
        let second = callers.arrive((&a, "k1", Spoken::default()), None, 1_140, (BOUNDS, true)).unwrap();
        let message = callers.end(second, Ending::HungUp, 1_240).unwrap();
        assert_eq!(message.requests, 2);
        assert_eq!(message.digest.as_deref(), Some("sha256:1"));
        let [one, two] = &message.attempts[..] else { panic!("two attempts") };
        assert_eq!((one.status, one.retry_after_s, one.ended_ms), (Some(503), Some(1), Some(130)));
        assert_eq!((two.n, two.waited_ms, two.hung_up, two.status), (2, Some(1_010), true, None));
        // Another caller's same key is another message.
        let other =
            callers.arrive((&name("b"), "k1", Spoken::default()), None, 1_300, (BOUNDS, true)).unwrap();
        assert_ne!(other.message_id, first.message_id);
    }

    #[test]
    fn each_bound_is_counted_when_reached() {
        let mut callers = Callers::default();
        let (a, b, c) = (name("a"), name("b"), name("c"));
        callers.arrive((&a, "1", Spoken::default()), None, 0, (BOUNDS, true)).unwrap();
        callers.arrive((&b, "2", Spoken::default()), None, 0, (BOUNDS, true)).unwrap();
        assert_eq!(
            callers.arrive((&c, "3", Spoken::default()), None, 0, (BOUNDS, true)),
            Err(Refusal::Callers)
        );
        callers.arrive((&a, "3", Spoken::default()), None, 0, (BOUNDS, true)).unwrap();
        assert_eq!(callers.arrive((&a, "4", Spoken::default()), None, 0, (BOUNDS, true)), Err(Refusal::Keys));
        assert_eq!(
            callers.arrive((&b, "5", Spoken::default()), None, 0, (BOUNDS, false)),
            Err(Refusal::Keys)
        );
        for _ in 0..2 {
            callers.arrive((&a, "1", Spoken::default()), None, 0, (BOUNDS, true)).unwrap();
        }
        assert_eq!(
            callers.arrive((&a, "1", Spoken::default()), None, 0, (BOUNDS, true)),
            Err(Refusal::Attempts)
        );
        let untracked = callers.untracked();
        assert_eq!(
            (
                untracked.max_callers_per_lab,
                untracked.max_outside_keys,
                untracked.max_outside_attempts_per_key
            ),
            (1, 2, 1)
        );
        assert_eq!(callers.messages().next().unwrap().requests, 4, "a request past the bound still counts");
    }

    #[test]
    fn a_message_is_stored_as_its_attempts_end_and_a_request_past_the_bound_as_it_comes() {
        let mut callers = Callers::default();
        let (a, ok) = (name("a"), Ending::Answered { status: 200, retry_after_s: None, pushback_ms: None });
        let t = callers.arrive((&a, "k", Spoken::default()), None, 5, (BOUNDS, true)).unwrap();
        assert!(callers.take_changes().messages.is_empty(), "nothing to store while it is in work");
        callers.end(t, ok, 9);
        let stored = callers.take_changes().messages;
        let message: OutsideMessage = serde_json::from_str(&stored[0].1).unwrap();
        assert_eq!((stored.len(), message.attempts[0].ended_ms), (1, Some(9)), "stored once, ended");
        // A request past --max-outside-attempts-per-key ends no attempt, yet counts.
        for _ in 1..BOUNDS.max_attempts_per_key {
            let t = callers.arrive((&a, "k", Spoken::default()), None, 10, (BOUNDS, true)).unwrap();
            callers.end(t, Ending::HungUp, 11);
        }
        callers.take_changes();
        assert!(callers.arrive((&a, "k", Spoken::default()), None, 12, (BOUNDS, true)).is_err());
        let stored = callers.take_changes().messages;
        let message: OutsideMessage = serde_json::from_str(&stored[0].1).unwrap();
        assert_eq!(message.requests, BOUNDS.max_attempts_per_key as u64 + 1);
    }

    #[test]
    fn what_the_store_kept_reads_back_the_same() {
        let mut callers = Callers::default();
        let t = callers.arrive((&name("a"), "k", Spoken::default()), None, 5, (BOUNDS, true)).unwrap();
        callers.end(t, Ending::Answered { status: 200, retry_after_s: None, pushback_ms: None }, 9);
        let changes = callers.take_changes();
        let kept: Vec<OutsideMessage> =
            changes.messages.iter().map(|(_, body)| serde_json::from_str(body).unwrap()).collect();
        let restored = Callers::restore(kept);
        assert!(restored.messages().eq(callers.messages()));
        assert!(callers.take_changes().messages.is_empty());
    }

    /// Issue 33 wants an outside message to cost little memory: the headers' part of an attempt
    /// is three small numbers and two flags (24 bytes beside the 72 of the rest).
    #[test]
    fn an_outside_attempt_stays_small() {
        assert!(std::mem::size_of::<OutsideAttempt>() <= 96, "{}", std::mem::size_of::<OutsideAttempt>());
    }

    #[test]
    fn the_hints_sent_and_the_pushback_answered_are_kept_and_left_out_when_absent() {
        let mut callers = Callers::default();
        let spoken = Spoken {
            timeout_ms: Some(400),
            previous_attempts: None,
            unparsed: Unparsed { timeout: false, previous_attempts: true },
        };
        let t = callers.arrive((&name("a"), "k", spoken), None, 5, (BOUNDS, true)).unwrap();
        let ending = Ending::Answered { status: 503, retry_after_s: Some(1), pushback_ms: Some(-1) };
        let message = callers.end(t, ending, 9).unwrap();
        let [attempt] = &message.attempts[..] else { panic!("one attempt") };
        assert_eq!(
            (attempt.timeout_ms, attempt.previous_attempts, attempt.unparsed, attempt.pushback_ms),
            (Some(400), None, spoken.unparsed, Some(-1))
        );
        let body = callers.take_changes().messages.remove(0).1;
        assert!(
            body.contains(r#""timeout_ms":400,"unparsed":{"previous_attempts":true},"pushback_ms":-1"#),
            "{body}"
        );
        // A plain attempt carries none of them, so a row stored before them reads the same.
        let t = callers.arrive((&name("a"), "plain", Spoken::default()), None, 10, (BOUNDS, true)).unwrap();
        callers.end(t, Ending::Answered { status: 200, retry_after_s: None, pushback_ms: None }, 12);
        let plain = callers.take_changes().messages.remove(0).1;
        for field in ["timeout_ms", "previous_attempts", "unparsed", "pushback_ms"] {
            assert!(!plain.contains(field), "{plain}");
        }
        let read: OutsideMessage = serde_json::from_str(&plain).unwrap();
        assert_eq!(read.attempts[0].unparsed, Unparsed::default());
    }

    /// Issue 33: an outside message costs at most 300 bytes. Counted where the list has the
    /// most room unused (just past a doubling), for UUID keys sent twice each.
    #[test]
    fn an_outside_message_is_held_within_300_bytes() {
        assert_eq!((std::mem::size_of::<Held>(), std::mem::size_of::<HeldAttempt>()), (80, 40));
        let mut callers = Callers::default();
        let bounds = Bounds { max_messages: 10_000, max_callers: 20, max_attempts_per_key: 100 };
        let a = name("a");
        let count = 1_025;
        for i in 0..count {
            let key = format!("{i:08x}-0000-4000-8000-000000000000");
            let digest = format!("sha256:{i:064x}");
            for n in 0..2 {
                let digest = Some(digest.clone());
                let t = callers
                    .arrive((&a, &key, Spoken::default()), digest, 10 * i + n, (bounds, true))
                    .unwrap();
                let ending = Ending::Answered { status: 503, retry_after_s: Some(1), pushback_ms: None };
                callers.end(t, ending, 10 * i + n + 1);
            }
        }
        assert_eq!(callers.len(), count as usize);
        let per_message = callers.held_bytes() / callers.len();
        assert!((200..=300).contains(&per_message), "{per_message} bytes a message");
    }

    /// What a lab holds writes the same `OutsideMessage` as the one it was made from: every
    /// field of an attempt, the digest as the endpoint spells it, another spelling, or none.
    #[test]
    fn a_held_message_reads_back_as_the_message_it_was() {
        let attempt = OutsideAttempt {
            n: 1,
            started_ms: 5_000_000_000,
            ended_ms: Some(5_000_000_130),
            status: Some(503),
            hung_up: false,
            retry_after_s: Some(2),
            waited_ms: None,
            timeout_ms: Some(u32::MAX),
            previous_attempts: Some(0),
            unparsed: Unparsed { timeout: false, previous_attempts: true },
            pushback_ms: Some(-1),
        };
        let second = OutsideAttempt {
            n: 2,
            started_ms: 5_000_002_140,
            ended_ms: Some(5_000_003_000),
            status: None,
            hung_up: true,
            retry_after_s: None,
            waited_ms: Some(2_010),
            timeout_ms: None,
            previous_attempts: None,
            unparsed: Unparsed { timeout: true, previous_attempts: false },
            pushback_ms: Some(0),
        };
        let running = OutsideAttempt {
            n: 1,
            started_ms: 7,
            ended_ms: None,
            status: None,
            hung_up: false,
            retry_after_s: None,
            waited_ms: None,
            timeout_ms: None,
            previous_attempts: None,
            unparsed: Unparsed::default(),
            pushback_ms: None,
        };
        let message =
            |id: u64, caller: &str, digest: Option<&str>, attempts: Vec<OutsideAttempt>| OutsideMessage {
                id,
                caller: caller.into(),
                key: format!("key-{id}"),
                digest: digest.map(str::to_owned),
                requests: 3,
                attempts,
            };
        let messages = vec![
            message(1, "a", Some(&format!("sha256:{}", "0f".repeat(32))), vec![attempt, second]),
            message(2, "b", Some("sha256:1"), vec![running.clone()]),
            message(3, "a", Some(&format!("sha256:{}", "0F".repeat(32))), vec![running]),
            message(4, "b", None, Vec::new()),
        ];
        let callers = Callers::restore(messages.clone());
        let read: Vec<OutsideMessage> = callers.messages().collect();
        assert_eq!(read, messages);
        let json = |m: &[OutsideMessage]| serde_json::to_string(m).unwrap();
        assert_eq!(json(&read), json(&messages));
        assert_eq!(callers.names().collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn a_caller_whose_first_key_is_refused_is_not_named() {
        let mut callers = Callers::default();
        let one = Bounds { max_messages: 1, ..BOUNDS };
        callers.arrive((&name("a"), "k", Spoken::default()), None, 1, (one, true)).unwrap();
        let refused = callers.arrive((&name("b"), "k", Spoken::default()), None, 2, (one, true));
        assert_eq!(refused, Err(Refusal::Keys));
        assert_eq!(callers.names().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn a_key_is_found_again_after_a_restore() {
        let mut callers = Callers::default();
        let (a, b) = (name("a"), name("b"));
        callers.arrive((&a, "k", Spoken::default()), None, 1, (BOUNDS, true)).unwrap();
        callers.arrive((&b, "k", Spoken::default()), None, 2, (BOUNDS, true)).unwrap();
        let mut restored = Callers::restore(callers.messages().collect());
        let again = restored.arrive((&b, "k", Spoken::default()), None, 3, (BOUNDS, true)).unwrap();
        assert_eq!((again.message_id, again.index), (2, 1));
        assert_eq!(restored.len(), 2);
    }
}

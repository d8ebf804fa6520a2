//! A delivered message in 36 bytes. A busy lab keeps up to `--settled-window` settled
//! messages (2,000 by default, and an eighth more before the oldest go), nearly all delivered
//! by their first attempt, and a `Message` with its one attempt held in place takes 112 bytes.
//! Packed, such a message keeps only what can differ from one to the next: its id, its key's
//! 16 bytes, when it was made, when its attempt started and how long it took, and how it was
//! answered. Everything else is known from "delivered by its first attempt". A message that
//! does not fit (retried, waited, refused, replayed from the dead-letter queue, a key that is
//! not a UUID, a number past 32 bits) stays a `Message`. The lab holds its packed messages
//! in runs of bytes (`PackedList`), each written against the one before it, and a key the list
//! made from the message's id (`KeyMaker`) is made again rather than kept: about 7 bytes a
//! message under steady traffic.

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

/// The outcomes a packed message may have, by their code in a run's tag byte (code 0 is none).
const OUTCOMES: [Outcome; 7] = [
    Outcome::Ok,
    Outcome::HttpError,
    Outcome::Timeout,
    Outcome::TransportError,
    Outcome::Interrupted,
    Outcome::ShortCircuited,
    Outcome::Cancelled,
];
/// In a packed message's tag byte, beside its outcome's code (the low 3 bits).
const REPLAYED: u8 = 1 << 3;
const STATUS_200: u8 = 1 << 4;
/// The key is the one the list made for the message's id (`KeyMaker`): its 16 bytes are not
/// written.
const KEY_MADE: u8 = 1 << 5;
/// Delivered messages are packed this many at a time (`Record`): moving each out of the list as
/// it is delivered would shift the rest of a burst of thousands along, once per delivery.
pub(super) const PACK_EVERY: u32 = 64;
/// The most messages a run is made with: a pass's worth.
const RUN: usize = PACK_EVERY as usize;

/// Packed messages in order of their ids, a pass's worth (`PACK_EVERY`, 64) to a run of
/// bytes: a `Packed` is 36 bytes, and the list it sat in kept an eighth more room. In a run,
/// each message is written against the one before it: its id and when it was made as the
/// steps from that one's (a byte or two each under steady traffic), its attempt's start and
/// length as they are, in as few bytes as they need, one byte for its outcome and whether it was
/// a replay (and whether its status is 200, else the status follows), and its key's 16 bytes,
/// unless the list made it (`KeyMaker`). About 7 bytes a message under steady traffic.
#[derive(Debug, Default)]
pub(super) struct PackedList {
    runs: Vec<Run>,
    len: usize,
    keys: KeyMaker,
}

/// The idempotency keys of a lab's own messages, each made from the message's id and a number
/// drawn for the list, by SipHash under two keys drawn when the process starts: UUIDs of
/// version 4 like those drawn at random, as unlikely to meet, and not to be foreseen by anyone
/// without the process's secrets. A key made so need not be kept once its message is packed:
/// it is made again from the id. A key made otherwise (by an earlier process, read back from
/// the store) keeps its 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct KeyMaker(u64);

impl Default for KeyMaker {
    fn default() -> Self {
        KeyMaker(rand::random())
    }
}

impl KeyMaker {
    pub(super) fn key(self, id: u64) -> uuid::Uuid {
        let bits = super::secret_hash((self.0, id));
        uuid::Builder::from_random_bytes(bits.to_be_bytes()).into_uuid()
    }
}

#[derive(Debug)]
struct Run {
    first: u32,
    last: u32,
    bytes: Box<[u8]>,
}

/// Writes `n` in 7-bit groups, the lowest first, each byte's top bit saying another follows
/// (LEB128): a number below 128 takes one byte.
fn put(bytes: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        bytes.push(n as u8 | 0x80);
        n >>= 7;
    }
    bytes.push(n as u8);
}

/// Reads a number `put` wrote; `None` past the end.
fn take(bytes: &mut impl Iterator<Item = u8>) -> Option<u64> {
    let mut n = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = bytes.next()?;
        n |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(n);
        }
    }
    None
}

impl Run {
    /// `packed`, in order of their ids.
    fn of(packed: &[Packed], keys: KeyMaker) -> Run {
        let mut bytes = Vec::with_capacity(packed.len() * 24);
        let (mut id, mut created) = (packed[0].id, 0u32);
        for p in packed {
            put(&mut bytes, u64::from(p.id - id));
            // A message may be made before the one with the id before it (ids are handed out
            // in order, but not always as they are made): the step is zigzag-coded.
            let step = i64::from(p.created_ms) - i64::from(created);
            put(&mut bytes, ((step << 1) ^ (step >> 63)) as u64);
            put(&mut bytes, u64::from(p.started_after_ms));
            put(&mut bytes, u64::from(p.duration_ms));
            let outcome =
                p.outcome.map_or(0, |o| OUTCOMES.iter().position(|x| *x == o).map_or(0, |i| i as u8 + 1));
            let status_200 = if p.status == 200 { STATUS_200 } else { 0 };
            let made = if p.key == keys.key(p.id()) { KEY_MADE } else { 0 };
            bytes.push(outcome | if p.replayed { REPLAYED } else { 0 } | status_200 | made);
            if status_200 == 0 {
                put(&mut bytes, u64::from(p.status));
            }
            if made == 0 {
                bytes.extend_from_slice(p.key.as_bytes());
            }
            (id, created) = (p.id, p.created_ms);
        }
        Run { first: packed[0].id, last: packed[packed.len() - 1].id, bytes: bytes.into_boxed_slice() }
    }

    /// The messages, in order.
    fn packed(&self, keys: KeyMaker) -> impl Iterator<Item = Packed> + '_ {
        let mut bytes = self.bytes.iter().copied();
        let (mut id, mut created) = (self.first, 0u32);
        std::iter::from_fn(move || {
            id += take(&mut bytes)? as u32;
            let zigzag = take(&mut bytes)? as i64;
            created = (i64::from(created) + ((zigzag >> 1) ^ -(zigzag & 1))) as u32;
            let started_after_ms = take(&mut bytes)? as u32;
            let duration_ms = take(&mut bytes)? as u32;
            let tag = bytes.next()?;
            let status = if tag & STATUS_200 != 0 { 200 } else { take(&mut bytes)? as u16 };
            let key = if tag & KEY_MADE != 0 {
                keys.key(u64::from(id))
            } else {
                uuid::Uuid::from_bytes(std::array::from_fn(|_| bytes.next().unwrap_or(0)))
            };
            Some(Packed {
                id,
                created_ms: created,
                started_after_ms,
                duration_ms,
                key,
                status,
                outcome: OUTCOMES.get(usize::from(tag & 7).wrapping_sub(1)).copied(),
                replayed: tag & REPLAYED != 0,
            })
        })
    }
}

impl PackedList {
    /// An empty list that makes keys as `keys` does.
    pub(super) fn with_keys(keys: KeyMaker) -> PackedList {
        PackedList { keys, ..Default::default() }
    }

    /// What makes the keys of the messages this list will hold.
    pub(super) fn keys(&self) -> KeyMaker {
        self.keys
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The bytes its runs hold.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.runs.iter().map(|run| run.bytes.len()).sum()
    }

    /// Every message, in order of their ids.
    pub(super) fn iter(&self) -> impl Iterator<Item = Packed> + '_ {
        self.runs.iter().flat_map(|run| run.packed(self.keys))
    }

    /// The run that may hold `id`.
    fn run(&self, id: u64) -> Option<usize> {
        let id = u32::try_from(id).ok()?;
        let i = self.runs.partition_point(|run| run.last < id);
        self.runs.get(i).filter(|run| run.first <= id).map(|_| i)
    }

    pub(super) fn get(&self, id: u64) -> Option<Packed> {
        self.runs[self.run(id)?].packed(self.keys).find(|p| p.id() == id)
    }

    pub(super) fn remove(&mut self, id: u64) -> Option<Packed> {
        let i = self.run(id)?;
        let mut packed: Vec<Packed> = self.runs[i].packed(self.keys).collect();
        let at = packed.iter().position(|p| p.id() == id)?;
        let gone = packed.remove(at);
        self.replace(i, packed.len() + 1, &packed);
        Some(gone)
    }

    /// Run `i`, which held `was` messages, holds `packed` now (none: it goes).
    fn replace(&mut self, i: usize, was: usize, packed: &[Packed]) {
        self.len = self.len + packed.len() - was;
        if packed.is_empty() {
            self.runs.remove(i);
        } else {
            self.runs[i] = Run::of(packed, self.keys);
        }
    }

    /// Adds `fresh` (in order of their ids) as a run of its own, or, when some come before the
    /// newest already held (a slow first attempt), into the runs where they belong.
    pub(super) fn extend(&mut self, mut fresh: Vec<Packed>) {
        let Some(newest) = self.runs.last().map(|run| run.last) else {
            return self.push(&fresh);
        };
        let later = fresh.partition_point(|p| p.id <= newest);
        let late: Vec<Packed> = fresh.drain(..later).collect();
        for p in late {
            let id = p.id;
            let i = self.runs.partition_point(|run| run.last < id).min(self.runs.len() - 1);
            let mut packed: Vec<Packed> = self.runs[i].packed(self.keys).collect();
            let at = packed.partition_point(|q| q.id < id);
            packed.insert(at, p);
            self.runs[i] = Run::of(&packed, self.keys);
            self.len += 1;
        }
        self.push(&fresh);
    }

    /// Runs of at most `RUN` (messages read back from the store are packed all at once): a
    /// message is found by decoding its run.
    fn push(&mut self, fresh: &[Packed]) {
        for chunk in fresh.chunks(RUN) {
            self.runs.push(Run::of(chunk, self.keys));
            self.len += chunk.len();
        }
    }

    /// Keeps the messages `keep` says to; a run that loses some is written again.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&Packed) -> bool) {
        let mut i = 0;
        while i < self.runs.len() {
            let packed: Vec<Packed> = self.runs[i].packed(self.keys).collect();
            let kept: Vec<Packed> = packed.iter().copied().filter(|p| keep(p)).collect();
            if kept.len() == packed.len() {
                i += 1;
                continue;
            }
            self.replace(i, packed.len(), &kept);
            if !kept.is_empty() {
                i += 1;
            }
        }
        self.runs.shrink_to(self.runs.len() + self.runs.len() / 8);
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

    /// A packed message of any fields, from a seeded draw.
    fn drawn(id: u32, rng: &mut rand::rngs::StdRng) -> Packed {
        use rand::RngExt;
        let wide = |rng: &mut rand::rngs::StdRng| match rng.random_range(0..4) {
            0 => 0,
            1 => u32::MAX,
            _ => rng.random_range(0..100_000),
        };
        Packed {
            id,
            created_ms: wide(rng),
            started_after_ms: wide(rng),
            duration_ms: wide(rng),
            key: uuid::Uuid::from_u128(rng.random_range(0..=u128::MAX)),
            status: [0, 200, 201, 503, u16::MAX][rng.random_range(0..5)],
            outcome: [None, Some(Outcome::Ok), Some(Outcome::Cancelled), Some(Outcome::Interrupted)]
                [rng.random_range(0..4)],
            replayed: rng.random_range(0..2) == 0,
        }
    }

    #[test]
    fn packed_messages_are_held_in_runs_and_read_back_as_they_were() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let all: Vec<Packed> = (0..300).filter(|id| id % 9 != 4).map(|id| drawn(id, &mut rng)).collect();
        let mut list = PackedList::default();
        // The first ten packed last, into the runs where they belong; a pass's worth at a time.
        for pass in all[10..].chunks(64) {
            list.extend(pass.to_vec());
        }
        list.extend(all[..10].to_vec());
        assert_eq!(list.iter().collect::<Vec<_>>(), all, "every field, in order of their ids");
        assert_eq!(list.len(), all.len());
        assert!(list.runs.windows(2).all(|pair| pair[0].last < pair[1].first), "runs do not overlap");
        assert_eq!(list.get(14), all.iter().find(|p| p.id == 14).copied());
        assert!(list.get(4).is_none() && list.get(300).is_none() && list.get(u64::MAX).is_none());

        assert_eq!(list.remove(14).map(|p| p.id()), Some(14));
        assert!(list.remove(14).is_none() && list.get(14).is_none());
        list.retain(|p| p.id >= 100);
        let kept: Vec<Packed> = all.iter().filter(|p| p.id >= 100).copied().collect();
        assert_eq!(list.iter().collect::<Vec<_>>(), kept);
        assert_eq!(list.len(), kept.len());
        list.retain(|_| false);
        assert_eq!((list.len(), list.runs.len()), (0, 0));
    }

    /// 640 messages of steady traffic, one every 100 ms, each with the key `key` gives its id.
    fn steady(key: impl Fn(u64) -> uuid::Uuid) -> Vec<Packed> {
        (0..640u32)
            .map(|i| Packed {
                id: 1_000 + i,
                created_ms: 600_000 + 100 * i,
                started_after_ms: 0,
                duration_ms: 2,
                key: key(u64::from(1_000 + i)),
                status: 200,
                outcome: Some(Outcome::Ok),
                replayed: false,
            })
            .collect()
    }

    #[test]
    fn steady_messages_pack_into_about_23_bytes_each() {
        let steady = steady(|_| uuid::Uuid::new_v4());
        let mut list = PackedList::default();
        for pass in steady.chunks(64) {
            list.extend(pass.to_vec());
        }
        let bytes = list.bytes();
        assert!(bytes <= 23 * steady.len(), "{bytes} bytes for {} messages", steady.len());
        assert_eq!(list.iter().collect::<Vec<_>>(), steady);
    }

    #[test]
    fn steady_messages_with_keys_the_list_made_pack_into_about_7_bytes_each() {
        let mut list = PackedList::default();
        let keys = list.keys();
        let steady = steady(|id| keys.key(id));
        for pass in steady.chunks(64) {
            list.extend(pass.to_vec());
        }
        let bytes = list.bytes();
        assert!(bytes <= 7 * steady.len(), "{bytes} bytes for {} messages", steady.len());
        assert_eq!(list.iter().collect::<Vec<_>>(), steady);
        // A key another list made (an earlier process's, read back) keeps its 16 bytes.
        let mut other = PackedList::with_keys(KeyMaker::default());
        other.extend(steady.clone());
        let bytes = other.bytes();
        assert!(bytes >= 16 * steady.len(), "{bytes} bytes for {} messages", steady.len());
        assert_eq!(other.iter().collect::<Vec<_>>(), steady);
    }

    #[test]
    fn made_keys_are_version_4_uuids_the_same_for_an_id_and_unlike_for_another_list() {
        let (one, two) = (KeyMaker::default(), KeyMaker::default());
        let keys: std::collections::HashSet<uuid::Uuid> = (0..10_000).map(|id| one.key(id)).collect();
        assert_eq!(keys.len(), 10_000, "each id its own key");
        assert!(keys.iter().all(|k| k.get_version_num() == 4 && k.get_variant() == uuid::Variant::RFC4122));
        assert_eq!(one.key(42), one.key(42));
        assert!((0..10_000).all(|id| !keys.contains(&two.key(id))), "another list's keys are others");
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

//! A message and its attempts: the state machine a delivery moves through, and what each
//! attempt and each wait between attempts measured.

use serde::{Deserialize, Serialize};

pub use crate::retry::Outcome;
use crate::retry::Wait;

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

impl MessageState {
    pub const COUNT: usize = 5;

    /// Still owed a delivery attempt: these resume after a crash.
    pub fn is_active(self) -> bool {
        matches!(self, MessageState::Queued | MessageState::InFlight | MessageState::BackingOff)
    }
}

/// A planned wait and, once the next attempt starts, how long it really lasted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WaitRecord {
    #[serde(flatten)]
    pub plan: Wait,
    pub actual_ms: Option<u64>,
    /// Of `actual_ms`, the time spent waiting for a connection slot after the planned wait
    /// ended (a burst larger than the slots queues for them); the timer's own error is
    /// `actual - planned - queued`.
    #[serde(default)]
    pub queued_ms: Option<u64>,
}

/// One attempt, as a lab holds it for as long as it keeps the message: the first field is
/// 8 bytes and the rest fit in 56 more (durations and `Retry-After` in 32 bits, saturating, as
/// an outside caller's attempts are), because a busy lab keeps thousands of settled messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Attempt {
    /// 1-based within its round.
    pub n: u32,
    /// 0 for the first delivery, 1.. for each replay from the dead-letter queue.
    pub round: u32,
    pub started_ms: u64,
    /// How long it took, in ms (49 days at most: longer reads as that).
    #[serde(default, deserialize_with = "saturating")]
    pub duration_ms: Option<u32>,
    pub status: Option<u16>,
    pub outcome: Option<Outcome>,
    /// The downstream answered with `Idempotent-Replayed: true`.
    pub replayed: bool,
    /// The answer's `Retry-After`, in seconds (136 years at most: longer reads as that).
    #[serde(default, deserialize_with = "saturating")]
    pub retry_after_s: Option<u32>,
    /// Boxed: most attempts plan no wait (a delivery's last, every attempt of a healthy run),
    /// and a settled message is held for a long while, so the common attempt stays small.
    pub wait: Option<Box<WaitRecord>>,
    /// The client's protection that refused it before it was sent (`breaker`, `sre`, ...):
    /// no request went out. Left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub refused_by: Option<Box<str>>,
}

impl Attempt {
    /// When it ended, in lab ms, once it has.
    pub fn ended_ms(&self) -> Option<u64> {
        Some(self.started_ms + u64::from(self.duration_ms?))
    }
}

/// A whole number held in 32 bits: larger ones (from a row an older build wrote, say) read as
/// the largest.
pub fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Reads an optional whole number into 32 bits, saturating (`saturate`).
fn saturating<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    Ok(Option::<u64>::deserialize(deserializer)?.map(saturate))
}

/// The measured end of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptEnd {
    pub duration_ms: u64,
    pub status: Option<u16>,
    pub outcome: Outcome,
    pub replayed: bool,
    pub retry_after_s: Option<u64>,
    /// What the answer's `X-Retry-Pushback-Ms` said, when it had one.
    pub pushback: Option<Pushback>,
}

/// A server's pushback, as gRFC A6 ("Pushback") defines `grpc-retry-pushback-ms` and the lab's
/// `X-Retry-Pushback-Ms` mirrors it: "an ASCII encoded signed 32-bit integer ... that represents
/// how many milliseconds to wait before sending a retry. If the value for pushback is negative
/// or unparseble, then it will be seen as the server asking the client not to retry at all."
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushback {
    /// Retry after this many ms: the lab's client waits exactly that, and its backoff starts
    /// again after it (its own endpoint sends only `-1`).
    AfterMs(u32),
    /// Do not retry.
    DoNotRetry,
}

impl Pushback {
    /// The header's value as A6 reads it.
    pub fn parse(value: &[u8]) -> Pushback {
        let ms = std::str::from_utf8(value).ok().and_then(|v| v.parse::<i32>().ok());
        match ms.and_then(|ms| u32::try_from(ms).ok()) {
            Some(ms) => Pushback::AfterMs(ms),
            None => Pushback::DoNotRetry,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Message {
    pub id: u64,
    #[schema(value_type = String)]
    pub key: MessageKey,
    pub state: MessageState,
    pub round: u32,
    pub created_ms: u64,
    #[schema(value_type = Vec<Attempt>)]
    pub attempts: Attempts,
}

/// A message's attempts. Most messages a lab keeps settled after one attempt, so that one is
/// held in the message itself, not in a list of its own: a settled message of one attempt is
/// then one block of memory, not two.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempts {
    One(Attempt),
    Many(Vec<Attempt>),
}

impl Default for Attempts {
    fn default() -> Self {
        Attempts::Many(Vec::new())
    }
}

impl Attempts {
    pub fn push(&mut self, attempt: Attempt) {
        match self {
            Attempts::Many(list) if list.is_empty() => *self = Attempts::One(attempt),
            Attempts::Many(list) => list.push(attempt),
            Attempts::One(_) => {
                let Attempts::One(first) = std::mem::take(self) else { unreachable!("matched above") };
                *self = Attempts::Many(vec![first, attempt]);
            }
        }
    }

    /// Gives back the room a list kept for more attempts than it holds.
    pub fn shrink_to_fit(&mut self) {
        if let Attempts::Many(list) = self {
            if list.len() == 1 {
                *self = Attempts::One(list.pop().expect("one"));
            } else {
                list.shrink_to_fit();
            }
        }
    }
}

impl From<Vec<Attempt>> for Attempts {
    fn from(mut list: Vec<Attempt>) -> Self {
        if list.len() == 1 { Attempts::One(list.pop().expect("one")) } else { Attempts::Many(list) }
    }
}

impl std::ops::Deref for Attempts {
    type Target = [Attempt];

    fn deref(&self) -> &[Attempt] {
        match self {
            Attempts::One(attempt) => std::slice::from_ref(attempt),
            Attempts::Many(list) => list,
        }
    }
}

impl std::ops::DerefMut for Attempts {
    fn deref_mut(&mut self) -> &mut [Attempt] {
        match self {
            Attempts::One(attempt) => std::slice::from_mut(attempt),
            Attempts::Many(list) => list,
        }
    }
}

impl<'a> IntoIterator for &'a Attempts {
    type Item = &'a Attempt;
    type IntoIter = std::slice::Iter<'a, Attempt>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl Serialize for Attempts {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Attempts {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Vec::<Attempt>::deserialize(deserializer)?.into())
    }
}

impl Message {
    /// The body the client sends for message `id` of `lab`, the same on every attempt (the
    /// downstream refuses a key reused with another body).
    pub fn body(lab: &super::LabId, id: u64) -> String {
        serde_json::json!({ "message_id": id, "lab": lab.to_string() }).to_string()
    }
}

/// A message's idempotency key. The lab makes each a version-4 UUID from the message's id
/// (`KeyMaker`), held as its 16 bytes (a `String` of its text took 72: a lab keeps up to
/// `--settled-window` settled messages, and issue 33 wants a busy lab within a megabyte); any
/// other text (a test's `k1`, a row from an older store) is held as it is. It reads and writes
/// as its text everywhere.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MessageKey {
    Uuid(uuid::Uuid),
    Text(Box<str>),
}

impl MessageKey {
    /// A fresh random key, for tests: the lab makes its own from the message's id (`KeyMaker`).
    #[cfg(test)]
    pub fn random() -> MessageKey {
        MessageKey::Uuid(uuid::Uuid::new_v4())
    }
}

impl MessageKey {
    /// The key's text, written into `buffer` when it is a UUID (no allocation).
    pub fn text<'a>(&'a self, buffer: &'a mut [u8; uuid::fmt::Hyphenated::LENGTH]) -> &'a str {
        match self {
            MessageKey::Uuid(uuid) => uuid.hyphenated().encode_lower(buffer),
            MessageKey::Text(text) => text,
        }
    }
}

impl From<&str> for MessageKey {
    /// Held as a UUID only when that writes back as the same text (lowercase, hyphenated).
    fn from(text: &str) -> MessageKey {
        let mut buffer = [0; uuid::fmt::Hyphenated::LENGTH];
        match uuid::Uuid::try_parse(text) {
            Ok(uuid) if uuid.hyphenated().encode_lower(&mut buffer) == text => MessageKey::Uuid(uuid),
            _ => MessageKey::Text(text.into()),
        }
    }
}

impl From<String> for MessageKey {
    fn from(text: String) -> MessageKey {
        MessageKey::from(text.as_str())
    }
}

impl std::fmt::Display for MessageKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MessageKey::Uuid(uuid) => uuid.hyphenated().fmt(f),
            MessageKey::Text(text) => f.write_str(text),
        }
    }
}

impl Serialize for MessageKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MessageKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<MessageKey, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Ok(MessageKey::from(&*text))
    }
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
    /// When the round's first attempt started, for the time budget; `None` before it.
    pub round_started_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_key_reads_and_writes_as_its_text() {
        let uuid = "0b7e1f2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b";
        let odd = ["k1", "0B7E1F2A-3C4D-4E5F-8A9B-0C1D2E3F4A5B", "0b7e1f2a3c4d4e5f8a9b0c1d2e3f4a5b", ""];
        assert!(matches!(MessageKey::from(uuid), MessageKey::Uuid(_)), "a lab's own key is held as 16 bytes");
        for text in std::iter::once(uuid).chain(odd) {
            let key = MessageKey::from(text);
            assert_eq!(key.to_string(), text);
            let json = serde_json::to_string(&key).unwrap();
            assert_eq!(json, serde_json::to_string(text).unwrap());
            assert_eq!(serde_json::from_str::<MessageKey>(&json).unwrap(), key);
        }
        for text in odd {
            assert!(matches!(MessageKey::from(text), MessageKey::Text(_)), "{text:?} is kept as written");
        }
        let random = MessageKey::random();
        assert_eq!(MessageKey::from(random.to_string()), random);
    }

    #[test]
    fn an_attempt_is_held_in_64_bytes_and_reads_back_large_numbers_saturated() {
        assert_eq!(std::mem::size_of::<Attempt>(), 64);
        let row = r#"{"n":2,"round":1,"started_ms":7,"duration_ms":5000000000,"status":503,"outcome":"http_error",
            "replayed":false,"retry_after_s":99999999999,"wait":null,"refused_by":"breaker"}"#;
        let attempt: Attempt = serde_json::from_str(row).unwrap();
        assert_eq!((attempt.duration_ms, attempt.retry_after_s), (Some(u32::MAX), Some(u32::MAX)));
        assert_eq!(attempt.refused_by.as_deref(), Some("breaker"));
        assert_eq!(attempt.ended_ms(), Some(7 + u64::from(u32::MAX)));
        // A row an older build wrote without the newer fields reads as none.
        let old =
            r#"{"n":1,"round":0,"started_ms":0,"status":null,"outcome":null,"replayed":false,"wait":null}"#;
        let attempt: Attempt = serde_json::from_str(old).unwrap();
        assert_eq!((attempt.duration_ms, attempt.retry_after_s, attempt.ended_ms()), (None, None, None));
        let written = serde_json::to_value(Attempt { duration_ms: Some(12), ..attempt }).unwrap();
        assert_eq!((written["duration_ms"].as_u64(), written.get("refused_by")), (Some(12), None));
    }

    #[test]
    fn a_message_holds_its_one_attempt_itself_and_a_list_past_it() {
        let size = std::mem::size_of::<Message>();
        assert!(size <= 112, "a message is {size} bytes");
        let attempt = |n| Attempt {
            n,
            round: 0,
            started_ms: u64::from(n) * 10,
            duration_ms: Some(3),
            status: Some(503),
            outcome: None,
            replayed: false,
            retry_after_s: None,
            wait: None,
            refused_by: None,
        };
        let mut attempts = Attempts::default();
        assert!(attempts.is_empty());
        attempts.push(attempt(1));
        assert!(matches!(attempts, Attempts::One(_)), "the first is held in place");
        attempts.push(attempt(2));
        attempts.push(attempt(3));
        assert_eq!(attempts.iter().map(|a| a.n).collect::<Vec<_>>(), [1, 2, 3], "in order, none lost");
        attempts[2].status = Some(200);
        assert_eq!(attempts.last().and_then(|a| a.status), Some(200));
        // As a list of attempts, whichever way it is held, and read back the way it was written.
        let json = serde_json::to_value(&attempts).unwrap();
        assert_eq!(json.as_array().map(Vec::len), Some(3));
        assert_eq!(serde_json::from_value::<Attempts>(json).unwrap(), attempts);
        let one: Attempts = serde_json::from_str(&serde_json::to_string(&[attempt(1)]).unwrap()).unwrap();
        assert!(matches!(one, Attempts::One(ref a) if a.n == 1), "one read back is held in place");
        let mut shrunk = Attempts::Many(Vec::with_capacity(4));
        shrunk.push(attempt(1));
        assert!(matches!(shrunk, Attempts::One(_)));
        let mut listed = Attempts::Many(vec![attempt(1)]);
        listed.shrink_to_fit();
        assert!(matches!(listed, Attempts::One(_)), "a list of one gives up its room");
    }
}

//! An outside message as a lab holds it between requests: compact, because a public lab keeps
//! up to `max_outside_keys_per_lab` of them (issue 33 wants each within 300 bytes). The caller
//! is an index into the lab's names, the key a `Box<str>`, the digest its 32 bytes, and each
//! attempt a row of small numbers with a flag for each part that may be absent. The public
//! `OutsideMessage` (the events', the store's and the API's shape) is made from it where one
//! is needed, and says the same as before, field for field.

use super::{OutsideAttempt, OutsideMessage, Unparsed};

/// What an outside message's digest is, as its `OutsideMessage` writes it.
const DIGEST_PREFIX: &str = "sha256:";

/// One outside message: 80 bytes, and its key and attempts on the heap.
#[derive(Debug)]
pub(super) struct Held {
    pub id: u64,
    pub key: Box<str>,
    /// Grown one at a time: most keys are sent once or twice, and a `Vec` would reserve four.
    pub attempts: Box<[HeldAttempt]>,
    /// The SHA-256 when `flags` has `DIGEST`.
    pub digest: [u8; 32],
    /// Counts to `u32::MAX` and stays there: at the endpoint's rate for one caller that is
    /// years of requests under one key.
    pub requests: u32,
    /// An index into the lab's names.
    pub caller: u16,
    pub flags: u8,
}

impl Held {
    /// The digest is in `digest`.
    pub const DIGEST: u8 = 1;
    /// The digest was not one the endpoint writes (`sha256:` and 64 lowercase hex digits), so
    /// it is kept whole beside the messages (`Callers::odd_digests`): a stored row reads back
    /// the same whatever it holds.
    pub const ODD_DIGEST: u8 = 2;

    pub fn new(id: u64, caller: u16, key: &str) -> Held {
        Held { id, key: key.into(), attempts: Box::default(), digest: [0; 32], requests: 0, caller, flags: 0 }
    }

    /// Takes `digest` as the first body's. Returns it back when it is not one the endpoint
    /// writes, to be kept whole.
    pub fn set_digest(&mut self, digest: String) -> Option<String> {
        match parse_digest(&digest) {
            Some(bytes) => {
                self.digest = bytes;
                self.flags |= Held::DIGEST;
                None
            }
            None => {
                self.flags |= Held::ODD_DIGEST;
                Some(digest)
            }
        }
    }

    pub fn has_digest(&self) -> bool {
        self.flags & (Held::DIGEST | Held::ODD_DIGEST) != 0
    }

    pub fn push(&mut self, attempt: HeldAttempt) {
        let mut attempts = std::mem::take(&mut self.attempts).into_vec();
        attempts.reserve_exact(1);
        attempts.push(attempt);
        self.attempts = attempts.into_boxed_slice();
    }

    /// As the events, the store and the API see it; `caller` is its name and `odd_digest` the
    /// digest kept whole, if it has one.
    pub fn message(&self, caller: &str, odd_digest: Option<&str>) -> OutsideMessage {
        let digest = if self.flags & Held::DIGEST != 0 {
            Some(write_digest(&self.digest))
        } else {
            odd_digest.map(str::to_owned)
        };
        OutsideMessage {
            id: self.id,
            caller: caller.to_owned(),
            key: self.key.to_string(),
            digest,
            requests: u64::from(self.requests),
            attempts: self.attempts.iter().enumerate().map(|(i, a)| a.attempt(i)).collect(),
        }
    }
}

/// One attempt: 40 bytes. Its end is kept as a duration from its start, in 32 bits (49 days,
/// far past any request the server lets run), and the `Retry-After` in 32 bits of seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct HeldAttempt {
    pub started_ms: u64,
    pub waited_ms: u64,
    pub took_ms: u32,
    pub retry_after_s: u32,
    pub timeout_ms: u32,
    pub previous_attempts: u32,
    pub pushback_ms: i32,
    pub status: u16,
    pub flags: u16,
}

impl HeldAttempt {
    const ENDED: u16 = 1;
    const STATUS: u16 = 1 << 1;
    const HUNG_UP: u16 = 1 << 2;
    const RETRY_AFTER: u16 = 1 << 3;
    const WAITED: u16 = 1 << 4;
    const TIMEOUT: u16 = 1 << 5;
    const PREVIOUS_ATTEMPTS: u16 = 1 << 6;
    const PUSHBACK: u16 = 1 << 7;
    const UNPARSED_TIMEOUT: u16 = 1 << 8;
    const UNPARSED_PREVIOUS_ATTEMPTS: u16 = 1 << 9;

    /// Held as `attempt` says (its `n` is its place among its message's attempts).
    pub fn of(attempt: &OutsideAttempt) -> HeldAttempt {
        let mut held = HeldAttempt { started_ms: attempt.started_ms, ..HeldAttempt::default() };
        if let Some(ended) = attempt.ended_ms {
            held.end(ended);
        }
        if let Some(status) = attempt.status {
            held.status = status;
            held.flags |= HeldAttempt::STATUS;
        }
        if attempt.hung_up {
            held.flags |= HeldAttempt::HUNG_UP;
        }
        held.set_answer(attempt.retry_after_s, attempt.pushback_ms);
        if let Some(waited) = attempt.waited_ms {
            held.waited_ms = waited;
            held.flags |= HeldAttempt::WAITED;
        }
        held.set_spoken(attempt.timeout_ms, attempt.previous_attempts, attempt.unparsed);
        held
    }

    /// The record of an attempt that has not ended.
    pub fn arrived(started_ms: u64, waited_ms: Option<u64>, spoken: super::Spoken) -> HeldAttempt {
        let mut held = HeldAttempt { started_ms, ..HeldAttempt::default() };
        if let Some(waited) = waited_ms {
            held.waited_ms = waited;
            held.flags |= HeldAttempt::WAITED;
        }
        held.set_spoken(spoken.timeout_ms, spoken.previous_attempts, spoken.unparsed);
        held
    }

    fn set_spoken(&mut self, timeout_ms: Option<u32>, previous_attempts: Option<u32>, unparsed: Unparsed) {
        if let Some(timeout) = timeout_ms {
            self.timeout_ms = timeout;
            self.flags |= HeldAttempt::TIMEOUT;
        }
        if let Some(previous) = previous_attempts {
            self.previous_attempts = previous;
            self.flags |= HeldAttempt::PREVIOUS_ATTEMPTS;
        }
        if unparsed.timeout {
            self.flags |= HeldAttempt::UNPARSED_TIMEOUT;
        }
        if unparsed.previous_attempts {
            self.flags |= HeldAttempt::UNPARSED_PREVIOUS_ATTEMPTS;
        }
    }

    pub fn end(&mut self, ended_ms: u64) {
        let took = ended_ms.saturating_sub(self.started_ms);
        self.took_ms = u32::try_from(took).unwrap_or(u32::MAX);
        self.flags |= HeldAttempt::ENDED;
    }

    pub fn answered(&mut self, status: u16, retry_after_s: Option<u64>, pushback_ms: Option<i32>) {
        self.status = status;
        self.flags |= HeldAttempt::STATUS;
        self.set_answer(retry_after_s, pushback_ms);
    }

    pub fn hung_up(&mut self) {
        self.flags |= HeldAttempt::HUNG_UP;
    }

    fn set_answer(&mut self, retry_after_s: Option<u64>, pushback_ms: Option<i32>) {
        if let Some(seconds) = retry_after_s {
            self.retry_after_s = u32::try_from(seconds).unwrap_or(u32::MAX);
            self.flags |= HeldAttempt::RETRY_AFTER;
        }
        if let Some(pushback) = pushback_ms {
            self.pushback_ms = pushback;
            self.flags |= HeldAttempt::PUSHBACK;
        }
    }

    pub fn ended_ms(&self) -> Option<u64> {
        self.has(HeldAttempt::ENDED).then(|| self.started_ms.saturating_add(u64::from(self.took_ms)))
    }

    fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }

    /// As `OutsideMessage` lists it, the `index`th of its message's attempts.
    pub fn attempt(&self, index: usize) -> OutsideAttempt {
        OutsideAttempt {
            n: u32::try_from(index + 1).unwrap_or(u32::MAX),
            started_ms: self.started_ms,
            ended_ms: self.ended_ms(),
            status: self.has(HeldAttempt::STATUS).then_some(self.status),
            hung_up: self.has(HeldAttempt::HUNG_UP),
            retry_after_s: self.has(HeldAttempt::RETRY_AFTER).then_some(u64::from(self.retry_after_s)),
            waited_ms: self.has(HeldAttempt::WAITED).then_some(self.waited_ms),
            timeout_ms: self.has(HeldAttempt::TIMEOUT).then_some(self.timeout_ms),
            previous_attempts: self.has(HeldAttempt::PREVIOUS_ATTEMPTS).then_some(self.previous_attempts),
            unparsed: Unparsed {
                timeout: self.has(HeldAttempt::UNPARSED_TIMEOUT),
                previous_attempts: self.has(HeldAttempt::UNPARSED_PREVIOUS_ATTEMPTS),
            },
            pushback_ms: self.has(HeldAttempt::PUSHBACK).then_some(self.pushback_ms),
        }
    }
}

/// The 32 bytes of a digest the endpoint writes: `sha256:` and 64 lowercase hex digits (any
/// other spelling would not be written back the same, so it is not one).
fn parse_digest(digest: &str) -> Option<[u8; 32]> {
    let hex = digest.strip_prefix(DIGEST_PREFIX)?.as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut bytes = [0u8; 32];
    for (byte, pair) in bytes.iter_mut().zip(hex.chunks_exact(2)) {
        *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(bytes)
}

fn write_digest(bytes: &[u8; 32]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(DIGEST_PREFIX.len() + 64);
    text.push_str(DIGEST_PREFIX);
    for byte in bytes {
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    text
}

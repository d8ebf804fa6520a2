//! The lab's event log: every change gets the next number, is kept in a bounded window for
//! `Last-Event-ID` resumes, from which live subscribers read too (woken with the newest id).
//! Events are serialized once, when published, and held once, in the window.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::watch;

use crate::callers::{OutsideMessage, Untracked};
use crate::client::{BreakerCounts, BreakerShare};
use crate::dlq::{DeadLetter, Redrive};
use crate::domain::{Attempt, Counters, LoadBin, Marker, Message, TrafficView};
use crate::downstream::DownstreamView;
use crate::retry::{BreakerState, PolicyView, Wait};

/// How far a lab's event ids jump when the server starts again: events reach subscribers
/// before the store commits them, so after a crash ids up to this many past the last committed
/// one may have been seen by a page. Numbering the next run's events past them means an id a
/// subscriber saw is never given to another event, and a page that reconnects with one gets a
/// snapshot of what the server really holds. 2^32 events uncommitted is more than a lab can
/// publish in a day at its fastest; 2^21 restarts still fit a JavaScript number exactly.
pub const RESTART_GAP: u64 = 1 << 32;

/// One change in a lab, as the page and other subscribers receive it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
// The downstream's settings (with the endpoint's defences) are the large variant; events are
// built one at a time and sent on, so the size is not worth a box at every use.
#[allow(clippy::large_enum_variant)]
pub enum Event {
    MessagesCreated {
        messages: Vec<Message>,
    },
    AttemptStarted {
        message_id: u64,
        /// Only what is known when it starts: the rest is null until it finishes.
        attempt: StartedAttempt,
        /// The measured wait before this attempt; `None` for the first of a round.
        waited_ms: Option<u64>,
        /// Of `waited_ms`, the time spent waiting for a connection slot.
        #[serde(skip_serializing_if = "Option::is_none")]
        queued_ms: Option<u64>,
    },
    AttemptFinished {
        message_id: u64,
        attempt: Attempt,
    },
    WaitScheduled {
        message_id: u64,
        round: u32,
        n: u32,
        wait: Wait,
    },
    Delivered {
        message_id: u64,
    },
    DeadLettered {
        dead_letter: DeadLetter,
    },
    ReplayStarted {
        messages: Vec<ReplayedMessage>,
    },
    /// Dead letters deleted by hand, with their messages.
    DeadLettersDeleted {
        ids: Vec<u64>,
    },
    /// Dead letters moved into quarantine (`quarantined: true`) or out of it.
    DeadLettersQuarantined {
        ids: Vec<u64>,
        quarantined: bool,
    },
    /// A redrive at a rate started or moved on (`null`: it is over, done or cancelled).
    Redrive {
        redrive: Option<Redrive>,
    },
    DownstreamRequest {
        key: String,
        status: u16,
        applied: bool,
        replayed: bool,
        /// Said only when `status`, `applied` and `replayed` do not already tell it.
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<&'static str>,
    },
    SettingsChanged {
        downstream: DownstreamView,
        policy: PolicyView,
    },
    /// The client's circuit breaker changed state.
    BreakerChanged {
        state: BreakerState,
    },
    /// Something the messages react to: a settings change, a scheduled revert, a crash, a restart.
    Marker {
        marker: Marker,
    },
    /// Load bins that changed since the last `load` event, whole.
    Load {
        bins: Vec<LoadBin>,
    },
    /// The steady traffic was set, stopped or ended, or has sent (or refused) more since the
    /// last `traffic` event (at most one every 250 ms).
    Traffic {
        traffic: TrafficView,
    },
    /// With more than one client (`clients`): one of their breakers changed state; how many
    /// stand in each state now (and every such change, oldest first).
    Clients {
        clients: ClientsView,
    },
    /// Delivered messages that left the window of settled messages (`--settled-window`):
    /// they are gone from the lab, and stay counted in `delivered` and the load bins.
    MessagesForgotten {
        message_ids: Vec<u64>,
    },
    Reset {
        #[schema(value_type = Object)]
        snapshot: serde_json::Value,
    },
    /// A change the store could not keep was taken back (`what`: a burst, a replay, a delete, a
    /// quarantine, a redrive): what it touched, as it now is, not the whole lab, since a redrive
    /// against a full store takes back a letter several times a second.
    Withdrawn {
        what: &'static str,
        /// Messages it put back as they were, whole.
        messages: Vec<Message>,
        /// Messages it took away (a burst's).
        removed: Vec<u64>,
        /// Dead letters it put back or changed back, whole.
        dead_letters: Vec<DeadLetter>,
        /// The redrive as it now stands.
        redrive: Option<Redrive>,
    },
    /// The client came back (after a restart or a crash) and picked up from the store.
    Recovered {
        reason: &'static str,
        /// Messages whose delivery resumes.
        resumed: Vec<u64>,
        #[schema(value_type = Object)]
        snapshot: serde_json::Value,
    },
    /// Retention windows ran out for some dead letters (removed with their messages) and keys.
    Expired {
        dead_letters: Vec<u64>,
        keys: usize,
        #[schema(value_type = Object)]
        snapshot: serde_json::Value,
    },
    LabCreated,
    /// A request of an outside caller ended (answered, or its client hung up): its outside
    /// message whole, with every attempt so far.
    OutsideAttempt {
        message: OutsideMessage,
    },
    /// A request of an outside caller was answered but not kept: `limit` was reached.
    OutsideUntracked {
        caller: String,
        limit: &'static str,
        untracked: Untracked,
    },
}

/// The lab's clients: how many, how many breakers stand in each state, and the counts after
/// each change of one of them, oldest first (only with more than one client; stored, so they
/// survive a restart, which closes every breaker and adds the count after it).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ClientsView {
    pub count: u32,
    pub breakers: BreakerCounts,
    pub changes: Vec<BreakerShare>,
}

/// An attempt as it starts.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct StartedAttempt {
    pub n: u32,
    pub round: u32,
    pub started_ms: u64,
}

impl From<&Attempt> for StartedAttempt {
    fn from(attempt: &Attempt) -> Self {
        StartedAttempt { n: attempt.n, round: attempt.round, started_ms: attempt.started_ms }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReplayedMessage {
    pub id: u64,
    pub round: u32,
}

/// An event as sent: its number and its JSON.
#[derive(Debug, Clone)]
pub struct Published {
    pub id: u64,
    pub data: Arc<str>,
}

/// An event as sent: the event's own fields, then `at_ms`, then `counters`, only those that
/// moved since the previous event (most events move one or two, and a burst of thousands
/// should not repeat all nine thousands of times). Written by hand: this runs for every
/// request the endpoint answers, and serde's `flatten` would buffer the whole event first.
fn envelope(event: &Event, at_ms: u64, moved: &[(&'static str, u64)]) -> String {
    use std::fmt::Write;
    let mut data = serde_json::to_string(event).expect("events serialize: they hold only plain data");
    // A tagged enum always serializes as an object: reopen it to add the envelope's fields.
    debug_assert!(data.ends_with('}'));
    data.pop();
    let _ = write!(data, ",\"at_ms\":{at_ms}");
    if !moved.is_empty() {
        data.push_str(",\"counters\":{");
        for (i, (name, value)) in moved.iter().enumerate() {
            let comma = if i == 0 { "" } else { "," };
            let _ = write!(data, "{comma}\"{name}\":{value}");
        }
        data.push('}');
    }
    data.push('}');
    data
}

/// What a subscriber reads next from the window.
#[derive(Debug)]
pub enum Since {
    /// The events after the subscriber's last one, oldest first (empty when it has them all).
    Events(Vec<Published>),
    /// It fell further behind than it may (`lag`), or past what the window keeps: it starts
    /// again from a snapshot.
    Behind,
}

/// What each event kept costs beyond its text: the shared string's counts and the window's
/// slot, so the window's bound is on the memory it holds, not only on the text.
pub const EVENT_OVERHEAD_BYTES: usize = 48;

/// The newest events are kept as they were sent, for the subscribers that keep up; once they
/// hold twice this much text, the older half is sealed into a deflated block. Event JSON is
/// repetitive (the same field names, ids that count up), so a block holds about a tenth of
/// its text: the window reaches back several times further for the same memory.
pub const SEALED_BLOCK_BYTES: usize = 32 * 1024;

/// What a sealed block costs beyond its deflated bytes.
const BLOCK_OVERHEAD_BYTES: usize = 48;

/// Where a new subscriber starts.
pub enum Start {
    /// The events after the subscriber's `Last-Event-ID`, all still in the window.
    Resume(Vec<Published>),
    /// The window no longer reaches back far enough (or there was no id): start from a snapshot.
    Snapshot,
}

/// Older events of the window, deflated together: their texts joined by newlines (JSON as
/// serde writes it holds none), numbered on from `first_id`.
struct Block {
    first_id: u64,
    count: usize,
    deflated: Box<[u8]>,
}

impl Block {
    fn seal(events: &[Published]) -> Block {
        let mut text = Vec::with_capacity(events.iter().map(|e| e.data.len() + 1).sum());
        for (i, event) in events.iter().enumerate() {
            if i > 0 {
                text.push(b'\n');
            }
            text.extend_from_slice(event.data.as_bytes());
        }
        // Level 1: the fastest, since this runs under the lab's lock; a higher level would
        // save a few per cent more.
        let deflated = miniz_oxide::deflate::compress_to_vec(&text, 1).into_boxed_slice();
        Block { first_id: events[0].id, count: events.len(), deflated }
    }

    fn last_id(&self) -> u64 {
        self.first_id + self.count as u64 - 1
    }

    fn cost(&self) -> usize {
        self.deflated.len() + BLOCK_OVERHEAD_BYTES
    }

    /// The block's events from `from` on, as they were published.
    fn open(&self, from: u64) -> Vec<Published> {
        let text = miniz_oxide::inflate::decompress_to_vec(&self.deflated)
            .expect("a block reads back: the window deflated it itself");
        let text = std::str::from_utf8(&text).expect("events are JSON text");
        let skip = from.saturating_sub(self.first_id) as usize;
        text.split('\n')
            .enumerate()
            .skip(skip)
            .map(|(i, data)| Published { id: self.first_id + i as u64, data: data.into() })
            .collect()
    }
}

/// The lab's events: numbered, kept in one window for resumes, and read from that window by
/// every subscriber (a wake-up carries only the newest id), so each event is held once and
/// counted once against the window's bounds, however many pages watch. The window's newest
/// events are held as sent; older ones in deflated blocks (`SEALED_BLOCK_BYTES`), counted
/// against the bound at their deflated size.
pub struct EventLog {
    last_id: u64,
    /// The counters as of the last event; `None` before the first.
    last_counters: Option<Counters>,
    /// The older part of the window, oldest first; ids run on without a gap into `recent`.
    sealed: VecDeque<Block>,
    /// The newest events, as sent, and their text's length.
    recent: VecDeque<Published>,
    recent_text: usize,
    /// Events in the window, sealed or not, and the most it keeps.
    kept: usize,
    capacity: usize,
    /// The window's size in bytes, and its bound: events that carry a whole snapshot (a reset,
    /// a recovery, an expiry) can weigh megabytes each, so a count alone does not bound memory.
    window_bytes: usize,
    max_bytes: usize,
    /// How many events a subscriber may fall behind.
    lag: usize,
    /// Wakes the subscribers with the newest id; they read the events from the window.
    wakeup: watch::Sender<u64>,
    /// No page has watched for a while (`rest`): events are numbered but not kept, until a page
    /// reads the snapshot or subscribes (`wake`).
    resting: bool,
}

impl EventLog {
    /// `capacity` events are kept for resumes; a subscriber more than `lag` events behind
    /// is resynchronised with a snapshot.
    /// A log whose next event is `last_id + 1` (ids continue across restarts).
    pub fn new(capacity: usize, lag: usize, last_id: u64) -> Self {
        EventLog {
            last_id,
            last_counters: None,
            sealed: VecDeque::new(),
            recent: VecDeque::new(),
            recent_text: 0,
            kept: 0,
            capacity: capacity.max(1),
            window_bytes: 0,
            max_bytes: usize::MAX,
            lag: lag.max(1),
            wakeup: watch::channel(last_id).0,
            resting: false,
        }
    }

    /// Bounds the window by its size too: the oldest events go until it is within `max_bytes`
    /// (a resume from before them then starts from a snapshot).
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    pub fn last_id(&self) -> u64 {
        self.last_id
    }

    /// Numbers, stores and broadcasts one event. The caller holds the lab's lock, so ids are
    /// handed out in the order the changes happened.
    /// While the log rests, the event is numbered and its counters noted, and nothing else:
    /// no page reads it, and a resume from before the next subscriber starts from a snapshot.
    pub fn publish(&mut self, event: &Event, at_ms: u64, counters: Counters) -> Option<Published> {
        self.last_id += 1;
        if self.resting {
            // The next event kept lists the counters that moved since this one.
            self.last_counters = Some(counters);
            return None;
        }
        let moved = self.moved(counters);
        let data = envelope(event, at_ms, &moved);
        let published = Published { id: self.last_id, data: data.into() };
        self.window_bytes += cost(&published);
        self.recent_text += published.data.len();
        self.recent.push_back(published.clone());
        self.kept += 1;
        if self.recent_text > 2 * SEALED_BLOCK_BYTES {
            self.seal_older_half();
        }
        while self.kept > self.capacity || self.window_bytes > self.max_bytes {
            if !self.drop_oldest() {
                break;
            }
        }
        if self.wakeup.receiver_count() > 0 {
            self.wakeup.send_replace(self.last_id);
        }
        Some(published)
    }

    /// Deflates the oldest events of `recent` into a block, leaving the newest
    /// `SEALED_BLOCK_BYTES` of text or so as they are.
    fn seal_older_half(&mut self) {
        let (mut count, mut text) = (0, 0);
        for event in &self.recent {
            if text >= self.recent_text - SEALED_BLOCK_BYTES {
                break;
            }
            text += event.data.len();
            count += 1;
        }
        // The newest event stays as sent, for the subscribers woken by it.
        let count = count.min(self.recent.len() - 1);
        if count == 0 {
            return;
        }
        let events: Vec<Published> = self.recent.drain(..count).collect();
        let block = Block::seal(&events);
        for event in &events {
            self.window_bytes -= cost(event);
            self.recent_text -= event.data.len();
        }
        self.window_bytes += block.cost();
        self.sealed.push_back(block);
    }

    /// Drops the window's oldest block, or its oldest event when nothing is sealed; `false`
    /// when the window is empty.
    fn drop_oldest(&mut self) -> bool {
        if let Some(block) = self.sealed.pop_front() {
            self.window_bytes -= block.cost();
            self.kept -= block.count;
        } else if let Some(oldest) = self.recent.pop_front() {
            self.window_bytes -= cost(&oldest);
            self.recent_text -= oldest.data.len();
            self.kept -= 1;
        } else {
            return false;
        }
        true
    }

    /// The counters that differ from the ones last published (all of them the first time).
    fn moved(&mut self, counters: Counters) -> Vec<(&'static str, u64)> {
        let before = self.last_counters.replace(counters).map(|c| c.named());
        let now = counters.named();
        match before {
            Some(before) => now.into_iter().zip(before).filter(|(n, b)| n.1 != b.1).map(|(n, _)| n).collect(),
            None => now.to_vec(),
        }
    }

    /// The bytes of the events kept for resumes (and for subscribers to read): those held as
    /// sent each with `EVENT_OVERHEAD_BYTES`, the sealed blocks at their deflated size.
    pub fn window_bytes(&self) -> usize {
        self.window_bytes
    }

    /// Lets go of every event kept for resumes: a resume from before now starts from a
    /// snapshot (and so does a subscriber that had not read them). After a reset, or once an
    /// unwatched lab has been quiet for a while, the window is memory no page will ask for.
    pub fn forget_window(&mut self) {
        self.sealed = VecDeque::new();
        self.recent = VecDeque::new();
        self.recent_text = 0;
        self.kept = 0;
        self.window_bytes = 0;
    }

    /// Lets go of the window and keeps no event until `wake`: no page has watched the lab for
    /// a while, busy or not, so none will resume from its events.
    pub fn rest(&mut self) {
        self.forget_window();
        self.resting = true;
    }

    /// Keeps events again: a page is about to watch (it read a snapshot, or subscribed).
    pub fn wake(&mut self) {
        self.resting = false;
    }

    /// Whether the log keeps no events now (see `rest`).
    pub fn resting(&self) -> bool {
        self.resting
    }

    /// The oldest id the window holds.
    fn first_id(&self) -> Option<u64> {
        self.sealed.front().map(|b| b.first_id).or_else(|| self.recent.front().map(|e| e.id))
    }

    /// The window's events from `from` on (which it must hold), at most `max`: from the
    /// events held as sent when it is among them, else from the block that holds it.
    fn read_from(&self, from: u64, max: usize) -> Vec<Published> {
        if let Some(first) = self.recent.front().map(|e| e.id)
            && from >= first
        {
            // Ids in the window run on without a gap.
            return self.recent.range((from - first) as usize..).take(max).cloned().collect();
        }
        let at = self.sealed.partition_point(|b| b.last_id() < from);
        let mut events = self.sealed[at].open(from);
        events.truncate(max);
        events
    }

    /// Every event of the window from `from` on (which it must hold), for a resume.
    fn read_all_from(&self, from: u64) -> Vec<Published> {
        let at = self.sealed.partition_point(|b| b.last_id() < from);
        let mut events: Vec<Published> = self.sealed.range(at..).flat_map(|block| block.open(from)).collect();
        let first = self.recent.front().map_or(u64::MAX, |e| e.id);
        events.extend(self.recent.range(from.saturating_sub(first) as usize..).cloned());
        events
    }

    /// At most `max` events after `after`, for a subscriber that has read up to it.
    pub fn since(&self, after: u64, max: usize) -> Since {
        if after >= self.last_id {
            return Since::Events(Vec::new());
        }
        let Some(first) = self.first_id() else { return Since::Behind };
        if self.last_id - after > self.lag as u64 || first > after + 1 {
            return Since::Behind;
        }
        Since::Events(self.read_from(after + 1, max))
    }

    /// Subscribes; with `after` (a `Last-Event-ID`) resumes from it if the window allows. The
    /// receiver wakes when an event is published; `since` reads it.
    pub fn subscribe(&mut self, after: Option<u64>) -> (Start, watch::Receiver<u64>) {
        // Its events are kept from now on; a rested window holds none before.
        self.wake();
        let receiver = self.wakeup.subscribe();
        let start = match after {
            Some(after) if after == self.last_id => Start::Resume(Vec::new()),
            Some(after)
                if after < self.last_id && self.first_id().is_some_and(|first| first <= after + 1) =>
            {
                Start::Resume(self.read_all_from(after + 1))
            }
            _ => Start::Snapshot,
        };
        (start, receiver)
    }
}

/// What an event held as sent costs.
fn cost(event: &Published) -> usize {
    event.data.len() + EVENT_OVERHEAD_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_its_fields_then_its_time_then_the_counters_that_moved() {
        let mut log = EventLog::new(10, 10, 0);
        let event = Event::AttemptStarted {
            message_id: 7,
            attempt: StartedAttempt { n: 2, round: 0, started_ms: 40 },
            waited_ms: Some(12),
            queued_ms: None,
        };
        let first = log.publish(&event, 99, Counters { in_flight: 1, ..Default::default() }).unwrap();
        let mut expected = serde_json::to_value(&event).unwrap();
        expected["at_ms"] = 99.into();
        expected["counters"] = serde_json::to_value(Counters { in_flight: 1, ..Default::default() }).unwrap();
        assert_eq!(serde_json::from_str::<serde_json::Value>(&first.data).unwrap(), expected);
        assert!(first.data.starts_with(r#"{"type":"attempt_started""#), "{}", first.data);
        let next = log
            .publish(
                &Event::Delivered { message_id: 7 },
                100,
                Counters { delivered: 1, ..Default::default() },
            )
            .unwrap();
        assert_eq!(
            &*next.data,
            r#"{"type":"delivered","message_id":7,"at_ms":100,"counters":{"in_flight":0,"delivered":1}}"#
        );
    }

    fn publish_n(log: &mut EventLog, n: u64) {
        for id in 0..n {
            log.publish(&Event::Delivered { message_id: id }, 0, Counters::default());
        }
    }

    #[test]
    fn a_forgotten_window_resumes_only_from_now() {
        let mut log = EventLog::new(10, 10, 0);
        publish_n(&mut log, 5);
        log.forget_window();
        assert!(matches!(log.subscribe(Some(2)).0, Start::Snapshot));
        assert!(matches!(log.subscribe(Some(5)).0, Start::Resume(ref missed) if missed.is_empty()));
        assert!(log.kept == 0 && log.window_bytes == 0);
        publish_n(&mut log, 1);
        assert!(matches!(log.subscribe(Some(5)).0, Start::Resume(ref missed) if missed.len() == 1));
    }

    #[test]
    fn a_resting_log_numbers_its_events_and_keeps_none_until_a_page_subscribes() {
        let mut log = EventLog::new(10, 10, 0);
        publish_n(&mut log, 3);
        log.rest();
        assert!(log.resting() && log.kept == 0 && log.window_bytes == 0);
        let quiet = log.publish(&Event::LabCreated, 0, Counters { delivered: 4, ..Default::default() });
        assert!(quiet.is_none(), "a rested log keeps no event");
        publish_n(&mut log, 2);
        assert_eq!((log.last_id(), log.kept, log.window_bytes), (6, 0, 0), "numbered, not kept");
        // A page that saw event 3 starts again from a snapshot; from then on events are kept.
        assert!(matches!(log.subscribe(Some(3)).0, Start::Snapshot));
        assert!(!log.resting());
        let kept =
            log.publish(&Event::LabCreated, 0, Counters { delivered: 5, ..Default::default() }).unwrap();
        assert_eq!(kept.id, 7);
        // Its counters moved since the last event numbered (delivered 4, then 0, then 5), not
        // since the last one kept.
        let data: serde_json::Value = serde_json::from_str(&kept.data).unwrap();
        assert_eq!(data["counters"], serde_json::json!({ "delivered": 5 }), "{data}");
        assert!(matches!(log.subscribe(Some(6)).0, Start::Resume(ref missed) if missed.len() == 1));
    }

    #[test]
    fn resume_returns_exactly_the_missed_events() {
        let mut log = EventLog::new(10, 10, 0);
        publish_n(&mut log, 6);
        let (Start::Resume(missed), _) = log.subscribe(Some(3)) else { panic!("resume") };
        assert_eq!(missed.iter().map(|e| e.id).collect::<Vec<_>>(), [4, 5, 6]);
        assert!(matches!(log.subscribe(Some(6)).0, Start::Resume(v) if v.is_empty()));
    }

    #[test]
    fn events_carry_only_the_counters_that_moved() {
        let mut log = EventLog::new(10, 10, 0);
        let first = log.publish(&Event::LabCreated, 0, Counters::default()).unwrap();
        assert!(first.data.contains("\"applied_twice\":0"), "the first event has them all: {}", first.data);
        let same = log.publish(&Event::LabCreated, 0, Counters::default()).unwrap();
        assert!(!same.data.contains("counters"), "nothing moved: {}", same.data);
        let moved =
            log.publish(&Event::LabCreated, 0, Counters { delivered: 3, ..Default::default() }).unwrap();
        let data: serde_json::Value = serde_json::from_str(&moved.data).unwrap();
        assert_eq!(data["counters"], serde_json::json!({ "delivered": 3 }));
    }

    #[test]
    fn the_window_is_bounded_by_bytes_as_well_as_by_count() {
        let big = |n: usize| Event::Reset { snapshot: serde_json::json!({ "pad": "x".repeat(n) }) };
        let mut log = EventLog::new(100, 10, 0).with_max_bytes(3_000);
        for _ in 0..5 {
            log.publish(&big(1_000), 0, Counters::default());
        }
        let kept: usize = log.recent.iter().map(cost).sum();
        assert!(kept <= 3_000 && log.window_bytes == kept, "{kept} bytes kept");
        assert_eq!(log.recent.len(), 2, "the three oldest went");
        assert!(matches!(log.subscribe(Some(3)).0, Start::Resume(v) if v.len() == 2));
        assert!(matches!(log.subscribe(Some(2)).0, Start::Snapshot), "3 is gone: a snapshot");
        // An event larger than the whole bound is not kept at all; resuming past it needs a
        // snapshot, resuming at it needs nothing.
        log.publish(&big(5_000), 0, Counters::default());
        assert!(log.recent.is_empty() && log.window_bytes == 0);
        assert!(matches!(log.subscribe(Some(5)).0, Start::Snapshot));
        assert!(matches!(log.subscribe(Some(6)).0, Start::Resume(v) if v.is_empty()));
    }

    #[test]
    fn subscribers_read_the_window_itself_woken_by_the_newest_id() {
        let mut log = EventLog::new(10, 8_192, 0);
        publish_n(&mut log, 3);
        let (_, mut receiver) = log.subscribe(Some(3));
        assert!(!receiver.has_changed().unwrap());
        publish_n(&mut log, 2);
        assert_eq!(*receiver.borrow_and_update(), 5);
        // The very events the window holds, not copies: one of each, however many read it.
        let Since::Events(read) = log.since(3, 10) else { panic!("behind") };
        assert_eq!(read.iter().map(|e| e.id).collect::<Vec<_>>(), [4, 5]);
        assert!(Arc::ptr_eq(&read[0].data, &log.recent[3].data));
        let Since::Events(one) = log.since(3, 1) else { panic!("behind") };
        assert_eq!(one.len(), 1, "at most max at a time");
        assert!(matches!(log.since(5, 10), Since::Events(v) if v.is_empty()));
    }

    #[test]
    fn a_subscriber_past_its_lag_or_the_window_is_behind() {
        let mut log = EventLog::new(5, 3, 0);
        publish_n(&mut log, 8);
        assert!(matches!(log.since(5, 10), Since::Events(v) if v.len() == 3));
        assert!(matches!(log.since(4, 10), Since::Behind), "4 behind, lag 3");
        let mut log = EventLog::new(3, 100, 0);
        publish_n(&mut log, 8);
        assert!(matches!(log.since(4, 10), Since::Behind), "5 is no longer kept");
        log.forget_window();
        assert!(matches!(log.since(7, 10), Since::Behind));
        assert!(matches!(log.since(8, 10), Since::Events(v) if v.is_empty()));
    }

    #[test]
    fn a_gap_past_the_window_or_an_unknown_id_needs_a_snapshot() {
        let mut log = EventLog::new(4, 4, 0);
        publish_n(&mut log, 10);
        assert!(matches!(log.subscribe(Some(2)).0, Start::Snapshot), "7..10 kept, 3 lost");
        assert!(matches!(log.subscribe(Some(6)).0, Start::Resume(v) if v.len() == 4));
        assert!(matches!(log.subscribe(Some(5)).0, Start::Snapshot), "6 is no longer kept");
        assert!(matches!(log.subscribe(Some(99)).0, Start::Snapshot), "id from the future");
        assert!(matches!(log.subscribe(None).0, Start::Snapshot));
    }

    /// Events like a busy lab's: a finished attempt each, numbers that move.
    fn publish_attempts(log: &mut EventLog, n: u64) -> Vec<Published> {
        (0..n)
            .map(|id| {
                let attempt = Attempt {
                    n: 1 + (id % 3) as u32,
                    round: 0,
                    started_ms: 1_000 + id * 7,
                    duration_ms: Some((id % 50) as u32),
                    status: Some(if id % 4 == 0 { 503 } else { 200 }),
                    outcome: None,
                    replayed: false,
                    retry_after_s: None,
                    wait: None,
                    refused_by: None,
                };
                let event = Event::AttemptFinished { message_id: id / 3, attempt };
                log.publish(&event, 1_000 + id * 7, Counters { delivered: id, ..Default::default() }).unwrap()
            })
            .collect()
    }

    #[test]
    fn older_events_are_sealed_deflated_and_read_back_as_they_were_sent() {
        let mut log = EventLog::new(100_000, 100_000, 0);
        let sent = publish_attempts(&mut log, 3_000);
        let text: usize = sent.iter().map(|e| e.data.len()).sum();
        assert!(log.sealed.len() >= 3, "{} blocks for {text} bytes of text", log.sealed.len());
        assert!(log.recent_text <= 2 * SEALED_BLOCK_BYTES, "{}", log.recent_text);
        assert_eq!(log.kept, 3_000);
        // Held in much less than its text, counted at what it holds.
        let held: usize =
            log.sealed.iter().map(Block::cost).sum::<usize>() + log.recent.iter().map(cost).sum::<usize>();
        assert_eq!(log.window_bytes, held);
        assert!(held * 4 < text, "{held} bytes held for {text} of text");
        // A resume from the start reads every event back, in order, each as it was sent.
        let (Start::Resume(missed), _) = log.subscribe(Some(0)) else { panic!("resume") };
        assert_eq!(missed.len(), 3_000);
        assert!(missed.iter().zip(&sent).all(|(a, b)| a.id == b.id && a.data == b.data));
        // A subscriber behind reads on from inside a block, at most `max` at a time.
        let Since::Events(read) = log.since(10, 5) else { panic!("behind") };
        assert_eq!(read.iter().map(|e| e.id).collect::<Vec<_>>(), [11, 12, 13, 14, 15]);
        assert_eq!(read[0].data, sent[10].data);
        // Reading on to the end, block after block, misses nothing.
        let mut after = 0;
        while let Since::Events(read) = log.since(after, 1_000) {
            let Some(last) = read.last() else { break };
            assert_eq!(read[0].id, after + 1);
            after = last.id;
        }
        assert_eq!(after, 3_000);
        // The newest event is never sealed: the subscribers woken by it read it as sent.
        assert!(Arc::ptr_eq(&log.recent.back().unwrap().data, &sent[2_999].data));
    }

    #[test]
    fn a_window_of_sealed_blocks_keeps_to_its_bounds_dropping_the_oldest_block() {
        let mut log = EventLog::new(100_000, 100_000, 0).with_max_bytes(40_000);
        publish_attempts(&mut log, 5_000);
        assert!(log.window_bytes <= 40_000, "{}", log.window_bytes);
        let first = log.first_id().unwrap();
        assert!(first > 1, "the oldest went");
        assert!(matches!(log.subscribe(Some(first - 2)).0, Start::Snapshot));
        let (Start::Resume(missed), _) = log.subscribe(Some(first - 1)) else { panic!("resume") };
        assert_eq!(missed.len() as u64, 5_000 - first + 1);
        // The count bound holds too.
        let mut log = EventLog::new(1_000, 100_000, 0);
        publish_attempts(&mut log, 5_000);
        assert!(log.kept <= 1_000 && log.kept > 0, "{}", log.kept);
        assert_eq!(log.first_id().unwrap(), 5_000 - log.kept as u64 + 1);
    }
}

//! The lab as one JSON document: settings, counters, every message with every attempt, dead
//! letters. Sent by `GET /api/labs/{lab}`, first on every event stream, and with the events
//! that replace the page's whole view (a reset, a recovery, an expiry).

use std::borrow::Cow;

use serde::Serialize;

use super::{Lab, LabState};
use crate::callers::{Callers, OutsideMessage, Untracked};
use crate::client::{BreakerChange, ProtectionView};
use crate::config::Retention;
use crate::dlq::{DeadLetter, Redrive};
use crate::domain::{BIN_MS, Counters, LabId, LabRecord, LoadBin, Marker, Message, TrafficView};
use crate::downstream::{DownstreamView, LineView};
use crate::events::ClientsView;
use crate::retry::{BreakerState, PolicyView};

/// Everything about a lab: settings, counters, every message with every attempt, dead letters.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Snapshot)]
pub struct SnapshotView<'a> {
    #[schema(value_type = String, format = Uuid)]
    id: &'a LabId,
    now_ms: u64,
    last_event_id: u64,
    downstream: DownstreamView,
    /// The endpoint's line and workers now: how many wait and work, and whether the line is
    /// served newest first (LIFO, or adaptive LIFO while a standing queue exists).
    line: LineView,
    policy: PolicyView,
    counters: Counters,
    breaker: BreakerView<'a>,
    traffic: TrafficView,
    clients: ClientsView,
    /// The retry budget and each protection the policy lists, as they stand now.
    protections: Vec<ProtectionView>,
    markers: &'a [Marker],
    load: LoadView,
    limits: SnapshotLimits,
    retention: RetentionView,
    #[schema(value_type = Vec<Message>)]
    messages: MessageList<'a>,
    #[schema(value_type = Vec<DeadLetter>)]
    dead_letters: Cow<'a, [DeadLetter]>,
    /// A redrive at a rate in progress; null when none runs.
    redrive: Option<Redrive>,
    outside: OutsideView<'a>,
}

/// What the endpoint observed of outside callers: a message per caller and key, in the order
/// first seen, and the requests not kept because a bound was reached.
#[derive(Serialize, utoipa::ToSchema)]
pub struct OutsideView<'a> {
    #[schema(value_type = Vec<OutsideMessage>)]
    messages: OutsideList<'a>,
    untracked: Untracked,
    max_callers_per_lab: usize,
    max_outside_keys_per_lab: usize,
    max_outside_attempts_per_key: usize,
}

/// The outside messages as a snapshot lists them: made from what the lab holds as they are
/// written (a snapshot under the lab's lock), or copied out before (a captured one).
pub enum OutsideList<'a> {
    Held(&'a Callers),
    Copied(&'a [OutsideMessage]),
}

impl Serialize for OutsideList<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            OutsideList::Held(callers) => serializer.collect_seq(callers.messages()),
            OutsideList::Copied(messages) => messages.serialize(serializer),
        }
    }
}

/// The lab's messages as a snapshot lists them: read from the record as they are written
/// (packed ones unpacked one at a time), or copied out before.
pub enum MessageList<'a> {
    Held(&'a LabRecord),
    Copied(&'a [Message]),
}

impl Serialize for MessageList<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            MessageList::Held(record) => serializer.collect_seq(record.messages()),
            MessageList::Copied(messages) => messages.serialize(serializer),
        }
    }
}

/// The first client's circuit breaker (the only one with one client; `clients` counts every
/// client's): its state now and every change, oldest first.
#[derive(Serialize, utoipa::ToSchema)]
pub struct BreakerView<'a> {
    state: BreakerState,
    changes: &'a [BreakerChange],
}

/// What the downstream measured, per `bin_ms` of lab time; only bins with activity.
#[derive(Serialize, utoipa::ToSchema)]
pub struct LoadView {
    bin_ms: u64,
    bins: Vec<LoadBin>,
}

/// How long things are kept, as the page shows it: its own type, so renaming a flag cannot
/// change the API.
#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
#[schema(as = Retention)]
pub struct RetentionView {
    /// The dedup window: an applied idempotency key is remembered this long, in seconds.
    key_ttl_s: u64,
    /// Dead letters are kept this long for a person to look at and replay, in seconds.
    dead_letter_ttl_s: u64,
    /// A lab nobody has touched for this long is deleted, in seconds.
    idle_lab_ttl_s: u64,
    /// How often the retention windows are applied, in milliseconds.
    sweep_interval_ms: u64,
}

impl From<&Retention> for RetentionView {
    fn from(retention: &Retention) -> Self {
        RetentionView {
            key_ttl_s: retention.key_ttl_s,
            dead_letter_ttl_s: retention.dead_letter_ttl_s,
            idle_lab_ttl_s: retention.idle_lab_ttl_s,
            sweep_interval_ms: retention.sweep_interval_ms,
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct SnapshotLimits {
    max_burst: usize,
    max_messages_per_lab: usize,
}

impl Lab {
    fn view<'a>(&'a self, state: &'a LabState) -> SnapshotView<'a> {
        let record = &state.record;
        SnapshotView {
            id: &self.id,
            now_ms: self.now_ms(),
            last_event_id: state.log.last_id(),
            downstream: state.endpoint.view(),
            line: state.endpoint.line_view(self.now_ms()),
            policy: state.clients.policy().view(),
            counters: state.counters(),
            breaker: BreakerView {
                state: state.clients.first().breaker_state(),
                changes: state.clients.first().breaker_changes(),
            },
            traffic: state.traffic.view(),
            clients: super::attempts::clients_view(state),
            protections: state.clients.protections(self.now_ms()),
            markers: record.markers.all(),
            load: LoadView { bin_ms: BIN_MS, bins: record.load.bins() },
            limits: SnapshotLimits {
                max_burst: self.limits.max_burst,
                max_messages_per_lab: self.limits.max_messages_per_lab,
            },
            retention: (&self.retention).into(),
            messages: MessageList::Held(record),
            dead_letters: with_ledger(state, Cow::Borrowed(state.dead_letters.letters())),
            redrive: state.dead_letters.redrive(),
            outside: self.outside_view(OutsideList::Held(&state.callers), state.callers.untracked()),
        }
    }

    fn outside_view<'a>(&self, messages: OutsideList<'a>, untracked: Untracked) -> OutsideView<'a> {
        OutsideView {
            messages,
            untracked,
            max_callers_per_lab: self.limits.max_callers_per_lab,
            max_outside_keys_per_lab: self.limits.max_outside_keys_per_lab,
            max_outside_attempts_per_key: self.limits.max_outside_attempts_per_key,
        }
    }

    /// The snapshot as a value, for events that carry it (serialized once, not parsed back).
    pub(super) fn snapshot_value(&self, state: &LabState) -> serde_json::Value {
        serde_json::to_value(self.view(state)).expect("snapshots serialize: they hold only plain data")
    }

    /// Copies what a snapshot shows, under the lock; it is serialized after the lock is let
    /// go, so a large lab's snapshot does not stall its deliveries and its endpoint meanwhile
    /// (copying is several times quicker than writing the JSON).
    pub(super) fn capture(&self, state: &LabState) -> Captured {
        let record = &state.record;
        Captured {
            id: self.id,
            now_ms: self.now_ms(),
            last_event_id: state.log.last_id(),
            downstream: state.endpoint.view(),
            line: state.endpoint.line_view(self.now_ms()),
            policy: state.clients.policy().view(),
            counters: state.counters(),
            breaker: (
                state.clients.first().breaker_state(),
                state.clients.first().breaker_changes().to_vec(),
            ),
            traffic: state.traffic.view(),
            clients: super::attempts::clients_view(state),
            protections: state.clients.protections(self.now_ms()),
            markers: record.markers.all().to_vec(),
            bins: record.load.bins(),
            limits: (self.limits.max_burst, self.limits.max_messages_per_lab),
            retention: (&self.retention).into(),
            messages: record.messages().map(Cow::into_owned).collect(),
            dead_letters: with_ledger(state, Cow::Borrowed(state.dead_letters.letters())).into_owned(),
            redrive: state.dead_letters.redrive(),
            outside: (state.callers.messages().collect(), state.callers.untracked()),
            outside_limits: [
                self.limits.max_callers_per_lab,
                self.limits.max_outside_keys_per_lab,
                self.limits.max_outside_attempts_per_key,
            ],
        }
    }

    /// The whole lab as JSON.
    pub fn snapshot(&self) -> String {
        let captured = self.capture(&self.lock());
        self.written_out(captured)
    }

    /// The whole lab as JSON, for a page that subscribes after it with `Last-Event-ID` set to
    /// its `last_event_id` (`GET /api/labs/{lab}`): with no page watching, the lab keeps its
    /// events from here as if a page had just left (`rest_event_window`), resting or not.
    pub fn snapshot_to_watch(&self) -> String {
        let mut state = self.lock();
        if !self.has_subscribers() {
            state.log.wake();
            state.unwatched_since_unix_ms = Some(super::unix_now_ms());
        }
        let captured = self.capture(&state);
        drop(state);
        self.written_out(captured)
    }

    /// A snapshot copied under the lock, written out after it.
    fn written_out(&self, captured: Captured) -> String {
        let json = captured.json();
        self.snapshot_bytes.store(json.len(), std::sync::atomic::Ordering::Relaxed);
        json
    }

    /// About how many bytes the next snapshot of this lab will be: the last one's size, or a
    /// guess from its messages before the first.
    pub fn snapshot_estimate(&self) -> usize {
        match self.snapshot_bytes.load(std::sync::atomic::Ordering::Relaxed) {
            0 => 4096 + 400 * self.lock().record.held(),
            known => known,
        }
    }
}

/// The dead letters with `applied` as the ledger has it now (a write can land after its
/// message was given up on); copied only when one differs.
fn with_ledger<'a>(state: &LabState, letters: Cow<'a, [DeadLetter]>) -> Cow<'a, [DeadLetter]> {
    let ledger = &state.endpoint.ledger;
    if letters.iter().all(|l| l.applied == ledger.is_applied(&l.key)) {
        return letters;
    }
    let mut letters = letters.into_owned();
    for letter in &mut letters {
        letter.applied = ledger.is_applied(&letter.key);
    }
    Cow::Owned(letters)
}

/// A snapshot's contents, copied out of the lab.
pub(super) struct Captured {
    id: LabId,
    now_ms: u64,
    pub(super) last_event_id: u64,
    downstream: DownstreamView,
    line: LineView,
    policy: PolicyView,
    counters: Counters,
    breaker: (BreakerState, Vec<BreakerChange>),
    traffic: TrafficView,
    clients: ClientsView,
    protections: Vec<ProtectionView>,
    markers: Vec<Marker>,
    bins: Vec<LoadBin>,
    limits: (usize, usize),
    retention: RetentionView,
    messages: Vec<Message>,
    dead_letters: Vec<DeadLetter>,
    redrive: Option<Redrive>,
    outside: (Vec<OutsideMessage>, Untracked),
    outside_limits: [usize; 3],
}

impl Captured {
    pub(super) fn json(self) -> String {
        let view = SnapshotView {
            id: &self.id,
            now_ms: self.now_ms,
            last_event_id: self.last_event_id,
            downstream: self.downstream,
            line: self.line,
            policy: self.policy,
            counters: self.counters,
            breaker: BreakerView { state: self.breaker.0, changes: &self.breaker.1 },
            traffic: self.traffic,
            clients: self.clients,
            protections: self.protections,
            markers: &self.markers,
            load: LoadView { bin_ms: BIN_MS, bins: self.bins },
            limits: SnapshotLimits { max_burst: self.limits.0, max_messages_per_lab: self.limits.1 },
            retention: self.retention,
            messages: MessageList::Copied(&self.messages),
            dead_letters: Cow::Borrowed(&self.dead_letters),
            redrive: self.redrive,
            outside: OutsideView {
                messages: OutsideList::Copied(&self.outside.0),
                untracked: self.outside.1,
                max_callers_per_lab: self.outside_limits[0],
                max_outside_keys_per_lab: self.outside_limits[1],
                max_outside_attempts_per_key: self.outside_limits[2],
            },
        };
        serde_json::to_string(&view).expect("snapshots serialize: they hold only plain data")
    }
}

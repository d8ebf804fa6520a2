//! The lab's state and rules, with no I/O and no clock of its own: messages and their state
//! machine, attempts and waits, counters, load, markers, lab ids, and the record that holds one
//! lab's messages in memory and notes what each change touched, so the store can persist
//! exactly the rows that changed.

mod history;
mod ids;
mod load;
mod marker;
mod message;
mod packed;
mod record;
mod traffic;

pub use history::History;
pub use ids::{Instance, LabId, secret_hash};
pub use load::{Answer, BIN_MS, BinChanges, COARSE_BIN_MS, DropCause, FINE_FOR_MS, Load, LoadBin};
pub use marker::{Marker, MarkerKind, Markers};
pub use message::{
    Attempt, AttemptEnd, Message, MessageKey, MessageState, Outcome, Pushback, ResumePoint, WaitRecord,
    saturate,
};
pub use record::{Counters, LabRecord, MessageChanges, StoredRecord};
pub use traffic::{
    Arrivals, Lateness, MIN_RATE_PER_S, Schedule, Traffic, TrafficCaps, TrafficRefusal, TrafficSettings,
    TrafficUpdate, TrafficView, paced_rate,
};

/// A record as the store keeps it: JSON.
pub fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("records serialize: they hold only plain data")
}

//! Markers on the lab's time axis: what the messages were reacting to. Every settings change
//! (by a person or by a schedule), every crash of the client and every server restart.

use serde::{Deserialize, Serialize};

/// Markers kept per lab; the oldest go first.
const MAX_MARKERS: usize = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MarkerKind {
    /// A person changed the downstream or the policy.
    Settings,
    /// A timed setting ran out and the downstream went back by itself.
    Scheduled,
    /// The client was crashed and recovered from the store.
    Crash,
    /// The server restarted and the client resumed.
    Restart,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Marker {
    pub at_ms: u64,
    pub kind: MarkerKind,
    pub label: String,
}

/// A lab's markers, the newest `MAX_MARKERS`.
pub type Markers = super::history::History<Marker, MAX_MARKERS>;

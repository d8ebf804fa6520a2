//! Markers on the lab's time axis: what the messages were reacting to. Every settings change
//! (by a person or by a schedule), every crash of the client and every server restart.

use serde::Serialize;

/// Markers kept per lab; the oldest go first.
const MAX_MARKERS: usize = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Marker {
    pub at_ms: u64,
    pub kind: MarkerKind,
    pub label: String,
}

#[derive(Debug, Default)]
pub struct Markers(Vec<Marker>);

impl Markers {
    pub fn add(&mut self, marker: Marker) {
        if self.0.len() >= MAX_MARKERS {
            self.0.remove(0);
        }
        self.0.push(marker);
    }

    pub fn all(&self) -> &[Marker] {
        &self.0
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }
}

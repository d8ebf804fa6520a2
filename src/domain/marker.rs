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

#[derive(Debug, Default)]
pub struct Markers {
    all: Vec<Marker>,
    /// Changed since the store last took them.
    unsaved: bool,
}

impl Markers {
    /// Markers as the store kept them.
    pub fn restore(all: Vec<Marker>) -> Self {
        Markers { all, unsaved: false }
    }

    pub fn add(&mut self, marker: Marker) {
        if self.all.len() >= MAX_MARKERS {
            self.all.remove(0);
        }
        self.all.push(marker);
        self.unsaved = true;
    }

    pub fn all(&self) -> &[Marker] {
        &self.all
    }

    pub fn clear(&mut self) {
        self.all.clear();
        self.unsaved = true;
    }

    /// All of them as JSON, if they changed since the last call (they are written whole:
    /// a short list that changes seldom).
    pub fn take_unsaved(&mut self) -> Option<String> {
        std::mem::take(&mut self.unsaved)
            .then(|| serde_json::to_string(&self.all).expect("markers serialize"))
    }

    /// The store could not keep them: they go with the next commit.
    pub fn mark_unsaved(&mut self) {
        self.unsaved = true;
    }
}

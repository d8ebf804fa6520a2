//! Who is watching a lab: subscribing to its events (resuming after a `Last-Event-ID` when the
//! window allows, else from a snapshot taken under the same lock) and counting open streams
//! against their limit.

use std::sync::atomic::Ordering;

use tokio::sync::watch;

use super::Lab;
use crate::events::{Published, Since, Start};

/// What a subscriber receives first.
pub enum Opening {
    Resume(Vec<Published>),
    Snapshot { id: u64, json: String },
}

impl Lab {
    /// Subscribes to the lab's events, resuming after `last_event_id` when the window allows;
    /// the receiver wakes at each new event, which `events_since` reads.
    pub fn subscribe(&self, last_event_id: Option<u64>) -> (Opening, watch::Receiver<u64>) {
        let mut state = self.lock();
        let (start, receiver) = state.log.subscribe(last_event_id);
        let opening = match start {
            Start::Resume(events) => Opening::Resume(events),
            Start::Snapshot => {
                // Copied under the lock, so it matches its id; written out after.
                let captured = self.capture(&state);
                drop(state);
                Opening::Snapshot { id: captured.last_event_id, json: captured.json() }
            }
        };
        (opening, receiver)
    }

    /// At most `max` events after `after`, from the window every subscriber reads.
    pub fn events_since(&self, after: u64, max: usize) -> Since {
        self.lock().log.since(after, max)
    }

    /// A snapshot and the id it is as of, for a subscriber that fell behind: the events after
    /// that id are read from the window as they come.
    pub fn resubscribe(&self) -> (u64, String) {
        let state = self.lock();
        let captured = self.capture(&state);
        drop(state);
        (captured.last_event_id, captured.json())
    }

    /// Counts an open event stream, unless the lab already has `max_subscribers_per_lab`.
    pub fn add_subscriber(&self) -> Result<(), usize> {
        let max = self.limits.max_subscribers_per_lab;
        self.subscribers
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |open| (open < max).then_some(open + 1))
            .map(|_| ())
            .map_err(|_| max)
    }

    pub fn remove_subscriber(&self) {
        self.subscribers.fetch_sub(1, Ordering::SeqCst);
    }

    pub fn has_subscribers(&self) -> bool {
        self.subscribers.load(Ordering::SeqCst) > 0
    }

    /// The bytes of the events this lab keeps for resumes.
    pub fn event_window_bytes(&self) -> usize {
        self.lock().log.window_bytes()
    }

    /// Lets go of the events kept for resumes when no page watches and the lab has published
    /// nothing for `retention.idle_event_window_ms`: an idle lab then costs what an empty one
    /// does.
    pub fn rest_event_window(&self, now_unix_ms: u64) {
        if self.has_subscribers() {
            return;
        }
        let mut state = self.lock();
        if now_unix_ms.saturating_sub(state.active_unix_ms) >= self.retention.idle_event_window_ms {
            state.log.forget_window();
        }
    }

    /// Whether the lab may be deleted to make room or for being idle: nobody watches it, it
    /// owes no deliveries, and it holds no dead letters (kept for their whole retention).
    pub fn evictable(&self) -> bool {
        !self.has_subscribers() && !self.has_deliveries() && self.lock().dead_letters.letters().is_empty()
    }
}

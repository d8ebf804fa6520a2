//! Who is watching a lab: subscribing to its events (resuming after a `Last-Event-ID` when the
//! window allows, else from a snapshot taken under the same lock) and counting open streams
//! against their limit.

use std::sync::atomic::Ordering;

use tokio::sync::watch;

use super::{Lab, unix_now_ms};
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
        state.unwatched_since_unix_ms = None;
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
        let mut state = self.lock();
        if self.subscribers.fetch_sub(1, Ordering::SeqCst) == 1 {
            state.unwatched_since_unix_ms = Some(unix_now_ms());
        }
    }

    pub fn has_subscribers(&self) -> bool {
        self.subscribers.load(Ordering::SeqCst) > 0
    }

    /// The bytes of the events this lab keeps for resumes.
    pub fn event_window_bytes(&self) -> usize {
        self.lock().log.window_bytes()
    }

    /// Lets go of the events kept for resumes when no page watches: once the lab has published
    /// nothing for `retention.idle_event_window_ms`, so an idle lab costs what an empty one
    /// does (events it publishes later are kept again); or once the last page to watch it left
    /// (or read its snapshot) that long ago, however busy the lab still is (its steady traffic,
    /// outside callers). That one rests: it numbers its events without writing them out until
    /// a page reads its snapshot or subscribes. A page that comes back after that long starts
    /// from a snapshot.
    pub fn rest_event_window(&self, now_unix_ms: u64) {
        let mut state = self.lock();
        // Counted under the lock: a page that subscribes meanwhile wakes the log (`subscribe`).
        if self.has_subscribers() || state.log.resting() {
            return;
        }
        let window_ms = self.retention.idle_event_window_ms;
        let for_long = |since: u64| now_unix_ms.saturating_sub(since) >= window_ms;
        if state.unwatched_since_unix_ms.is_some_and(for_long) {
            state.log.rest();
        } else if for_long(state.active_unix_ms) {
            // A lab no page has looked at may still be resumed from an id the API gave (a
            // write's event): what it publishes next is kept.
            state.log.forget_window();
        }
    }

    /// Whether the lab may be deleted to make room or for being idle: nobody watches it, it
    /// owes no deliveries, and it holds no dead letters (kept for their whole retention).
    pub fn evictable(&self) -> bool {
        !self.has_subscribers() && !self.has_deliveries() && self.lock().dead_letters.letters().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::Opening;
    use crate::lab::{Labs, unix_now_ms};

    #[tokio::test]
    async fn a_busy_lab_its_page_left_keeps_no_events_until_a_page_comes_back() {
        let labs = Labs::temporary();
        let lab = labs.create().unwrap();
        let window_ms = lab.retention.idle_event_window_ms;
        lab.add_subscriber().unwrap();
        let _watching = lab.subscribe(None);
        lab.set_policy(&Default::default()).unwrap();
        let seen = lab.lock().log.last_id();
        lab.remove_subscriber();
        let left = lab.lock().unwatched_since_unix_ms.expect("the page left");
        assert!(left <= unix_now_ms());
        // Busy all along (an event at each sweep), so only the page's leaving can rest it.
        let sweep = |at: u64| {
            lab.lock().active_unix_ms = at;
            lab.rest_event_window(at);
        };
        sweep(left + window_ms - 1);
        assert!(lab.event_window_bytes() > 0, "kept for a page coming back soon");
        sweep(left + window_ms);
        assert_eq!(lab.event_window_bytes(), 0);
        lab.set_policy(&Default::default()).unwrap();
        let state = lab.lock();
        assert!(state.log.resting() && state.log.last_id() > seen, "numbered, not kept");
        drop(state);
        assert_eq!(lab.event_window_bytes(), 0);
        // A page reading the snapshot first (as the page does) has the events after it kept
        // for its stream, as if a page had just left.
        let json = lab.snapshot_to_watch();
        let state = lab.lock();
        assert!(!state.log.resting() && state.unwatched_since_unix_ms >= Some(left));
        drop(state);
        lab.set_policy(&Default::default()).unwrap();
        let read: serde_json::Value = serde_json::from_str(&json).unwrap();
        let after = read["last_event_id"].as_u64().unwrap();
        lab.add_subscriber().unwrap();
        assert!(matches!(lab.subscribe(Some(after)).0, Opening::Resume(ref missed) if !missed.is_empty()));
        lab.remove_subscriber();
        lab.lock().unwatched_since_unix_ms = Some(left);
        sweep(left + window_ms);
        assert!(lab.lock().log.resting());
        // The page comes back after that: it starts from a snapshot, and events are kept again.
        lab.add_subscriber().unwrap();
        let (opening, _) = lab.subscribe(Some(seen));
        assert!(matches!(opening, Opening::Snapshot { .. }));
        lab.set_policy(&Default::default()).unwrap();
        assert!(lab.event_window_bytes() > 0);
        let newest = lab.lock().log.last_id();
        assert!(
            matches!(lab.subscribe(Some(newest - 1)).0, Opening::Resume(ref missed) if missed.len() == 1)
        );
        // Watched, it keeps its window however long ago a page left before.
        sweep(left + 10 * window_ms);
        assert!(lab.event_window_bytes() > 0);
    }

    #[tokio::test]
    async fn a_busy_lab_no_page_has_watched_keeps_its_window() {
        let labs = Labs::temporary();
        let lab = labs.create().unwrap();
        lab.set_policy(&Default::default()).unwrap();
        let later = unix_now_ms() + 10 * lab.retention.idle_event_window_ms;
        lab.lock().active_unix_ms = later;
        lab.rest_event_window(later);
        assert!(lab.event_window_bytes() > 0, "a resume from an id the API gave may still come");
        // Quiet as long, it lets the window go, and keeps what it publishes next.
        lab.rest_event_window(later + lab.retention.idle_event_window_ms);
        assert_eq!(lab.event_window_bytes(), 0);
        assert!(!lab.lock().log.resting());
        lab.set_policy(&Default::default()).unwrap();
        assert!(lab.event_window_bytes() > 0);
        // A snapshot read for a page counts as a page that just left: it rests a window later.
        let read_at = unix_now_ms();
        let _json = lab.snapshot_to_watch();
        let at = read_at + 10 * lab.retention.idle_event_window_ms;
        lab.lock().active_unix_ms = at;
        lab.rest_event_window(at);
        assert!(lab.lock().log.resting());
        // A snapshot for another use (the claims, a reset's answer) changes nothing.
        let _json = lab.snapshot();
        assert!(lab.lock().log.resting());
    }
}

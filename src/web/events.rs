//! `GET /api/labs/{lab}/events`: Server-Sent Events. A snapshot first (or, after a reconnect
//! with `Last-Event-ID`, exactly the missed events), then every change as it happens. A
//! subscriber that falls behind gets a fresh snapshot, never a silent gap.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Deserialize;
use tokio::sync::watch;

use super::error::{AppError, Problem};
use super::responses::LabErrors;
use super::{AppState, LabParam, LabPath};
use crate::events::{Published, Since};
use crate::lab::{Lab, Opening};

#[derive(Deserialize, utoipa::IntoParams)]
pub struct StreamQuery {
    /// For clients that cannot set the `Last-Event-ID` header.
    last_event_id: Option<u64>,
}

/// What a subscriber sends next.
#[derive(Debug)]
enum Outgoing {
    Live(Published),
    Snapshot { id: u64, json: String },
}

impl Outgoing {
    fn into_event(self) -> Event {
        match self {
            Outgoing::Live(published) => Event::default().id(published.id.to_string()).data(&*published.data),
            Outgoing::Snapshot { id, json } => {
                Event::default().event("snapshot").id(id.to_string()).data(json)
            }
        }
    }
}

/// The most events a subscriber takes from the window at once (under the lab's lock).
const BATCH: usize = 256;

struct Subscriber {
    lab: Arc<Lab>,
    /// Wakes when the lab publishes; the events are read from its window.
    wakeup: watch::Receiver<u64>,
    pending: VecDeque<Outgoing>,
    last_id: u64,
    shutdown: watch::Receiver<bool>,
    /// Counts this stream among the open ones while it lives.
    _open: OpenStream,
}

/// Counts a stream among the open ones, overall and in its lab, for as long as it lives.
struct OpenStream {
    gauge: prometheus_client::metrics::gauge::Gauge,
    lab: Arc<Lab>,
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.gauge.dec();
        self.lab.remove_subscriber();
    }
}

/// Server-Sent Events: a snapshot, then every change; resumes after `Last-Event-ID`.
#[utoipa::path(
    get,
    path = "/api/labs/{lab}/events",
    tag = "labs",
    params(
        LabParam,
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this event"),
        StreamQuery,
    ),
    responses(
        (status = 200, description = "`event: snapshot` with a Snapshot, then unnamed events, each an Event", content_type = "text/event-stream", body = crate::events::Event),
        LabErrors,
        (status = 429, description = "Too many open event streams: in this lab (max_subscribers_per_lab) or on the server (max_subscribers); or, for a stream that starts from a snapshot, too many bytes of snapshots (snapshot_bytes_per_s, max_snapshot_bytes_building)", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn stream(
    State(app): State<AppState>,
    LabPath(lab): LabPath,
    headers: HeaderMap,
    query: Result<Query<StreamQuery>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, AppError> {
    let Query(query) = query.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let resume_after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok()?.trim().parse().ok())
        .or(query.last_event_id);
    // The gauge counts every open stream on the server: it is the server-wide cap's count too.
    let max = app.limits.max_subscribers;
    if app.metrics.sse_subscribers.inc() >= i64::try_from(max).unwrap_or(i64::MAX) {
        app.metrics.sse_subscribers.dec();
        return Err(AppError::Limit {
            status: StatusCode::TOO_MANY_REQUESTS,
            limit: "max_subscribers",
            detail: format!(
                "this server already has {max} open event streams (max_subscribers); try again later"
            ),
        });
    }
    lab.add_subscriber().map_err(|max| {
        app.metrics.sse_subscribers.dec();
        AppError::Limit {
            status: StatusCode::TOO_MANY_REQUESTS,
            limit: "max_subscribers_per_lab",
            detail: format!(
                "this lab already has {max} open event streams (max_subscribers_per_lab); close a tab"
            ),
        }
    })?;
    let open = OpenStream { gauge: app.metrics.sse_subscribers.clone(), lab: lab.clone() };
    let subscriber = Subscriber::new(lab, resume_after, app.shutdown.clone(), open);
    let events = futures_util::stream::unfold(subscriber, |mut s| async move {
        let outgoing = s.next().await?;
        Some((Ok(outgoing.into_event()), s))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

impl Subscriber {
    fn new(
        lab: Arc<Lab>,
        resume_after: Option<u64>,
        shutdown: watch::Receiver<bool>,
        open: OpenStream,
    ) -> Self {
        let (opening, wakeup) = lab.subscribe(resume_after);
        let (pending, last_id) = match opening {
            Opening::Resume(events) => {
                let last = events.last().map_or(resume_after.unwrap_or(0), |e| e.id);
                (events.into_iter().map(Outgoing::Live).collect(), last)
            }
            Opening::Snapshot { id, json } => (VecDeque::from([Outgoing::Snapshot { id, json }]), id),
        };
        Subscriber { lab, wakeup, pending, last_id, shutdown, _open: open }
    }

    /// The next event to send; `None` ends the stream.
    async fn next(&mut self) -> Option<Outgoing> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if *self.shutdown.borrow() {
                return None;
            }
            // Seen before the window is read: an event published after wakes the wait below.
            self.wakeup.borrow_and_update();
            match self.lab.events_since(self.last_id, BATCH) {
                Since::Events(events) if !events.is_empty() => {
                    self.last_id = events.last().map_or(self.last_id, |e| e.id);
                    self.pending.extend(events.into_iter().map(Outgoing::Live));
                    continue;
                }
                Since::Events(_) => {}
                // Fell behind: a fresh snapshot, and the events after it from the window.
                Since::Behind => {
                    let (id, json) = self.lab.resubscribe();
                    self.last_id = id;
                    return Some(Outgoing::Snapshot { id, json });
                }
            }
            tokio::select! {
                changed = self.shutdown.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
                changed = self.wakeup.changed() => {
                    // The lab's log is gone.
                    if changed.is_err() {
                        return None;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Limits;
    use crate::lab::Labs;
    use crate::store::Store;

    #[tokio::test]
    async fn a_lagging_subscriber_gets_a_fresh_snapshot_not_a_gap() {
        let limits = Limits { subscriber_lag: 4, ..Default::default() };
        let labs = Labs::new(limits, Default::default(), Store::temporary(), Vec::new());
        let lab = labs.create().unwrap();
        let (_stop, shutdown) = watch::channel(false);
        lab.add_subscriber().unwrap();
        let open = OpenStream { gauge: Default::default(), lab: lab.clone() };
        let mut subscriber = Subscriber::new(lab.clone(), None, shutdown, open);
        let opening = subscriber.next().await;
        assert!(matches!(opening, Some(Outgoing::Snapshot { id: 1, .. })), "lab_created is 1: {opening:?}");
        // Ten changes (each a settings event and its marker) while the subscriber is not
        // reading: more than the 4 events it may fall behind.
        for _ in 0..10 {
            lab.set_policy(&Default::default()).unwrap();
        }
        let resync = subscriber.next().await;
        assert!(matches!(resync, Some(Outgoing::Snapshot { id: 21, .. })), "{resync:?}");
        assert_eq!(subscriber.last_id, 21, "the resync snapshot covers every change so far");
        // Nothing is sent twice after the resync: the next event is the next change.
        lab.set_policy(&Default::default()).unwrap();
        let live = subscriber.next().await;
        assert!(matches!(live, Some(Outgoing::Live(Published { id: 22, .. }))), "{live:?}");
    }
}

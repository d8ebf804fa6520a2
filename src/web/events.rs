//! `GET /api/labs/{lab}/events`: Server-Sent Events. A snapshot first (or, after a reconnect
//! with `Last-Event-ID`, exactly the missed events), then every change as it happens. A
//! subscriber that falls behind gets a fresh snapshot, never a silent gap.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Deserialize;
use tokio::sync::broadcast::{Receiver, error::RecvError};
use tokio::sync::watch;

use super::{AppState, LabPath};
use crate::events::Published;
use crate::lab::{Lab, Opening};

#[derive(Deserialize)]
pub struct StreamQuery {
    /// For clients that cannot set the `Last-Event-ID` header.
    last_event_id: Option<u64>,
}

struct Subscriber {
    lab: Arc<Lab>,
    receiver: Receiver<Published>,
    pending: VecDeque<Event>,
    last_id: u64,
    shutdown: watch::Receiver<bool>,
}

pub async fn stream(
    State(app): State<AppState>,
    LabPath(lab): LabPath,
    headers: HeaderMap,
    Query(query): Query<StreamQuery>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let resume_after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok()?.trim().parse().ok())
        .or(query.last_event_id);
    let (opening, receiver) = lab.subscribe(resume_after);
    let (pending, last_id) = match opening {
        Opening::Resume(events) => {
            let last = events.last().map_or(resume_after.unwrap_or(0), |e| e.id);
            (events.iter().map(live_event).collect(), last)
        }
        Opening::Snapshot { id, json } => (VecDeque::from([snapshot_event(id, json)]), id),
    };
    let subscriber = Subscriber { lab, receiver, pending, last_id, shutdown: app.shutdown.clone() };
    let events = futures_util::stream::unfold(subscriber, |mut s| async move {
        let event = s.next().await?;
        Some((Ok(event), s))
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}

impl Subscriber {
    /// The next event to send; `None` ends the stream.
    async fn next(&mut self) -> Option<Event> {
        if let Some(event) = self.pending.pop_front() {
            return Some(event);
        }
        loop {
            if *self.shutdown.borrow() {
                return None;
            }
            tokio::select! {
                changed = self.shutdown.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
                received = self.receiver.recv() => match received {
                    // Already covered by the snapshot or the resumed events.
                    Ok(published) if published.id <= self.last_id => {}
                    Ok(published) => {
                        self.last_id = published.id;
                        return Some(live_event(&published));
                    }
                    Err(RecvError::Lagged(_)) => {
                        let (id, json) = self.lab.resync();
                        self.last_id = id;
                        return Some(snapshot_event(id, json));
                    }
                    Err(RecvError::Closed) => return None,
                },
            }
        }
    }
}

fn live_event(published: &Published) -> Event {
    Event::default().id(published.id.to_string()).data(&*published.data)
}

fn snapshot_event(id: u64, json: String) -> Event {
    Event::default().event("snapshot").id(id.to_string()).data(json)
}

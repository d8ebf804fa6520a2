//! The lab's side of its outside callers: each request of an outside caller that carries a
//! key is kept as an attempt of that caller's outside message, within the bounds, and its end
//! is published; a request a bound held back is counted and said so.

use std::sync::atomic::Ordering;

use super::{Lab, LabState};
use crate::callers::{Bounds, CallerName, CallerReport, Ending, Refusal, Spoken, Ticket, Untracked, report};
use crate::events::Event;

/// A refused outside request is said at once only if none was said this long before, in lab
/// ms; those that come sooner are gathered and said with the next load tick
/// (`Lab::publish_load`, every 250 ms), counted as they are then. A caller past a bound is
/// most often a client in a loop, and an event for each of its requests (its JSON, its room in
/// the event window) tells a page nothing the next one will not: about 2 % of the server's CPU
/// on repeats past the bound (BENCHMARKS.md, "Session 26").
pub(super) const UNTRACKED_EVERY_MS: u64 = 250;

/// The last `outside_untracked` event sent, and the one held back since.
#[derive(Debug, Default)]
pub(super) struct UntrackedNews {
    sent_ms: Option<u64>,
    /// The caller and the limit of the latest refusal not yet said.
    due: Option<(String, &'static str)>,
}

/// `Lab::outside_ended` within a change of the lab's: the event to publish.
pub(super) fn ended_outside(
    LabState { callers, .. }: &mut LabState,
    ticket: Ticket,
    ending: Ending,
    now: u64,
) -> Option<Event> {
    let message = callers.end(ticket, ending, now)?;
    Some(Event::OutsideAttempt { message })
}

impl Lab {
    fn caller_bounds(&self) -> Bounds {
        Bounds {
            max_messages: self.limits.max_outside_keys_per_lab,
            max_callers: self.limits.max_callers_per_lab,
            max_attempts_per_key: self.limits.max_outside_attempts_per_key,
        }
    }

    /// A request of an outside caller with `key` arrived: where it is kept, or `None` when a
    /// bound held it back (counted, and said in an event).
    pub fn outside_arrived(
        &self,
        (caller, key, spoken): (&CallerName, &str, Spoken),
        digest: Option<String>,
    ) -> Option<Ticket> {
        self.change(|state, now| Some(self.arrived_outside(state, (caller, key, spoken, digest), now)))
            .flatten()
    }

    /// `outside_arrived` within a change of the lab's: the ticket, and the event to publish.
    /// A refusal is said at once unless one was said less than `UNTRACKED_EVERY_MS` ago; then
    /// it waits for `publish_untracked`, and the store still hears of it with its next batch.
    pub(super) fn arrived_outside(
        &self,
        state: &mut LabState,
        (caller, key, spoken, digest): (&CallerName, &str, Spoken, Option<String>),
        now: u64,
    ) -> (Option<Ticket>, Option<Event>) {
        let bounds = self.caller_bounds();
        let room = self.outside_messages_total.load(Ordering::Relaxed) < self.limits.max_outside_keys;
        let callers = &mut state.callers;
        let before = callers.len();
        match callers.arrive((caller, key, spoken), digest, now, (bounds, room)) {
            Ok(ticket) => {
                if callers.len() > before {
                    self.outside_messages_total.fetch_add(1, Ordering::Relaxed);
                }
                (Some(ticket), None)
            }
            Err(refusal) => {
                let limit = match refusal {
                    Refusal::Keys if room => "max_outside_keys_per_lab",
                    Refusal::Keys => "max_outside_keys",
                    Refusal::Callers => "max_callers_per_lab",
                    Refusal::Attempts => "max_outside_attempts_per_key",
                };
                let news = &mut state.untracked_news;
                let recent =
                    news.sent_ms.is_some_and(|sent| (sent..sent + UNTRACKED_EVERY_MS).contains(&now));
                if recent {
                    news.due = Some((caller.as_str().to_owned(), limit));
                    self.schedule_flush(state);
                    return (None, None);
                }
                news.sent_ms = Some(now);
                news.due = None;
                let event = Event::OutsideUntracked {
                    caller: caller.as_str().to_owned(),
                    limit,
                    untracked: callers.untracked(),
                };
                (None, Some(event))
            }
        }
    }

    /// Says the refusal `arrived_outside` held back, if any, with the counts as they are now.
    pub(super) fn publish_untracked(&self, state: &mut LabState, now: u64) {
        let Some((caller, limit)) = state.untracked_news.due.take() else { return };
        state.untracked_news.sent_ms = Some(now);
        let event = Event::OutsideUntracked { caller, limit, untracked: state.callers.untracked() };
        self.publish(state, &event, now);
    }

    /// Outside messages the lab holds.
    pub fn outside_messages_held(&self) -> usize {
        self.lock().callers.len()
    }

    /// The request kept at `ticket` was answered, or its client hung up.
    pub fn outside_ended(&self, ticket: Ticket, ending: Ending) {
        self.change(|state, now| Some(((), ended_outside(state, ticket, ending, now)?)));
    }

    /// A report card per outside caller, and the requests the bounds held back.
    pub fn caller_reports(&self) -> (Vec<CallerReport>, Untracked) {
        let (messages, untracked) = {
            let state = self.lock();
            (state.callers.messages().collect::<Vec<_>>(), state.callers.untracked())
        };
        (report(&messages), untracked)
    }

    /// Gives this lab's outside messages back to the server-wide count (a reset, a deletion).
    pub(super) fn forget_outside(&self, state: &LabState) {
        self.outside_messages_total.fetch_sub(state.callers.len(), Ordering::Relaxed);
    }
}

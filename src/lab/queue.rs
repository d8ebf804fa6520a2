//! The lab's dead-letter queue as an operator works it: a filtered page with the facet counts,
//! one letter in detail, and the actions on a selection (replay, delete, quarantine and back),
//! each with a dry run that changes nothing; a redrive at a rate, one letter a step.

use serde::Serialize;

use super::{Lab, LabState, Withdrawal};
use crate::client::BreakerCounts;
use crate::dlq::{Chosen, DeadLetter, Facets, Redrive, ReplayRefusal, Selection, Target, matching, page};
use crate::downstream::Mode;
use crate::events::{Event, ReplayedMessage};
use crate::retry::BreakerState;

/// One page of the letters a filter matches, with the counts of the whole queue.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Listing {
    pub dead_letters: Vec<DeadLetter>,
    pub facets: Facets,
    /// How many letters match the filter, on every page.
    pub matched: usize,
    /// The cursor for the next page (`after`), when more match.
    pub next: Option<u64>,
    /// When the oldest letter in the queue was dead-lettered (wall clock, ms); null when empty.
    pub oldest_unix_ms: Option<u64>,
}

/// One dead letter with what the ledger knows of its write.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Detail {
    pub dead_letter: DeadLetter,
    /// The body the client sends on every attempt, with the key as `Idempotency-Key`.
    pub body: String,
    /// The downstream's ledger holds the key as applied: a replay will be answered from the
    /// stored result and apply nothing.
    pub applied: bool,
    /// How many times it was replayed before it gave up this time.
    pub replays: u32,
    /// How its last attempt ended: an HTTP status or an outcome.
    pub last_status: String,
}

/// What an action would do, and changes nothing.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DryRun {
    pub dry_run: bool,
    /// How many letters the action would take.
    pub count: usize,
    /// Their ids, in id order.
    pub ids: Vec<u64>,
    /// Quarantined letters it would leave alone (a replay without `confirm_quarantined`).
    pub quarantined_skipped: u64,
    /// The downstream's mode now.
    #[schema(value_type = String)]
    pub mode: &'static str,
    /// The first client's circuit breaker now.
    pub breaker: BreakerState,
    /// How many clients' breakers stand in each state now (every client's, the first's too).
    pub breakers: BreakerCounts,
    /// Said when the endpoint is failing: replayed now, the letters would most likely come back.
    pub warning: Option<String>,
}

/// Why a redrive could not start or be cancelled.
#[derive(Debug)]
pub enum RedriveRefusal {
    Running(Redrive),
    Chosen(ReplayRefusal),
}

/// What one step of a redrive did.
#[derive(Debug)]
pub enum Step {
    /// The letter went back to the queue for a new round; deliver it once it is committed.
    Sent(DeadLetter),
    /// The lab owes too many deliveries now: try again a little later.
    Busy,
    /// Nothing is owed: the redrive is done, cancelled, or its lab is gone.
    Done,
}

impl LabState {
    fn applied(&self) -> impl Fn(&str) -> bool + '_ {
        |key| self.endpoint.ledger.is_applied(key)
    }

    /// A copy of the letter with `applied` as the ledger has it now (a write can land after
    /// its message was given up on).
    pub(super) fn as_ledger_says(&self, letter: &DeadLetter) -> DeadLetter {
        DeadLetter { applied: self.endpoint.ledger.is_applied(&letter.key), ..letter.clone() }
    }

    pub(super) fn select(&self, target: &Target, guard: (bool, bool)) -> Result<Chosen, ReplayRefusal> {
        self.dead_letters.select(target, guard, self.applied())
    }
}

impl Lab {
    /// The letters `selection` matches, after `after`, at most `limit`.
    pub fn dead_letters_page(&self, selection: &Selection, after: Option<u64>, limit: usize) -> Listing {
        let state = self.lock();
        let letters = state.dead_letters.letters();
        let ids = matching(letters, selection, state.applied());
        let (shown, next) = page(&ids, after, limit);
        let dead_letters = shown
            .iter()
            .filter_map(|&id| state.dead_letters.get(id))
            .map(|d| state.as_ledger_says(d))
            .collect();
        Listing {
            dead_letters,
            facets: Facets::of(letters),
            matched: ids.len(),
            next,
            oldest_unix_ms: letters.iter().map(|d| d.dead_lettered_unix_ms).min(),
        }
    }

    /// What an operator watches: the depth per cause, and when the oldest letter was
    /// dead-lettered (wall clock, ms).
    pub fn dead_letter_signals(&self) -> (Facets, Option<u64>) {
        let state = self.lock();
        let letters = state.dead_letters.letters();
        (Facets::of(letters), letters.iter().map(|d| d.dead_lettered_unix_ms).min())
    }

    /// The ids `selection` matches, in id order (an export reads their letters a few at a time).
    pub fn matching_dead_letters(&self, selection: &Selection) -> Vec<u64> {
        let state = self.lock();
        matching(state.dead_letters.letters(), selection, state.applied())
    }

    /// About how many bytes an export of these letters takes: their count times the size of
    /// the first one (a letter's size varies with its attempts, not by orders of magnitude).
    pub fn export_estimate(&self, ids: &[u64]) -> usize {
        let Some(&first) = ids.first() else { return 0 };
        let state = self.lock();
        let one = state.dead_letters.get(first).map_or(0, |d| crate::domain::to_json(d).len() + 1);
        one * ids.len()
    }

    /// The letters with these ids still in the queue, in the order asked, each with `applied`
    /// as the ledger has it now.
    pub fn dead_letters_for_export(&self, ids: &[u64]) -> Vec<DeadLetter> {
        let state = self.lock();
        ids.iter().filter_map(|&id| state.dead_letters.get(id)).map(|d| state.as_ledger_says(d)).collect()
    }

    pub fn dead_letter_detail(&self, id: u64) -> Option<Detail> {
        let state = self.lock();
        let letter = state.as_ledger_says(state.dead_letters.get(id)?);
        Some(Detail {
            applied: letter.applied,
            replays: letter.round,
            last_status: crate::dlq::LastStatus::of(&letter).to_string(),
            body: crate::domain::Message::body(&self.id, letter.id),
            dead_letter: letter,
        })
    }

    /// What an action on `target` would take, with the endpoint's state now. `replay` applies
    /// the replay's rule for quarantined letters.
    pub fn dry_run(
        &self,
        target: &Target,
        replay: bool,
        confirm_quarantined: bool,
    ) -> Result<DryRun, ReplayRefusal> {
        let state = self.lock();
        let chosen = state.select(target, (replay, confirm_quarantined))?;
        let mode = state.endpoint.settings.mode;
        let breaker = state.clients.first().breaker_state();
        let breakers = state.clients.breakers();
        let warning =
            (replay && !chosen.ids.is_empty()).then(|| failing(mode, breakers)).flatten().map(|why| {
                format!("{why}: these would most likely dead-letter again; find and fix the cause first")
            });
        Ok(DryRun {
            dry_run: true,
            count: chosen.ids.len(),
            ids: chosen.ids,
            quarantined_skipped: chosen.quarantined_skipped,
            mode: mode.as_str(),
            breaker,
            breakers,
            warning,
        })
    }

    /// Deletes the letters `target` names, with their messages: they are gone from the store
    /// once committed. With `confirmed`, nothing is deleted when more letters match now than
    /// the person confirmed (counted and deleted under one lock). Returns what was deleted (to
    /// take it back with `withdraw_delete`).
    pub fn delete_dead_letters(
        &self,
        target: &Target,
        confirmed: Option<usize>,
    ) -> Result<Deleted, ReplayRefusal> {
        let mut state = self.lock();
        let chosen = state.select(target, (false, false))?;
        if let Some(confirmed) = confirmed
            && chosen.ids.len() > confirmed
        {
            return Err(ReplayRefusal::MoreThanConfirmed { confirmed, matching: chosen.ids.len() });
        }
        let letters = state.dead_letters.remove(&chosen.ids);
        let messages =
            chosen.ids.iter().filter_map(|&id| state.record.message(id).map(|m| m.into_owned())).collect();
        state.record.remove_messages(&chosen.ids);
        let now = self.now_ms();
        self.publish(&mut state, &Event::DeadLettersDeleted { ids: chosen.ids }, now);
        Ok(Deleted { letters, messages })
    }

    /// Takes back a delete the store could not keep.
    pub fn withdraw_delete(&self, deleted: Deleted) {
        let mut state = self.lock();
        let ids: Vec<u64> = deleted.letters.iter().map(|d| d.id).collect();
        state.record.put_back(deleted.messages);
        state.dead_letters.put_back(deleted.letters);
        self.publish_withdrawn(
            &mut state,
            "delete",
            Withdrawal { messages: &ids, letters: &ids, removed: &[] },
        );
    }

    /// Moves the letters `target` names into quarantine (`true`) or out of it; returns those
    /// whose flag changed.
    pub fn quarantine(&self, target: &Target, quarantined: bool) -> Result<Vec<u64>, ReplayRefusal> {
        let mut state = self.lock();
        let chosen = state.select(target, (false, false))?;
        let changed = state.dead_letters.set_quarantined(&chosen.ids, quarantined);
        let now = self.now_ms();
        let event = Event::DeadLettersQuarantined { ids: changed.clone(), quarantined };
        self.publish(&mut state, &event, now);
        Ok(changed)
    }

    /// Takes back a quarantine move the store could not keep.
    pub fn withdraw_quarantine(&self, ids: &[u64], quarantined: bool) {
        let mut state = self.lock();
        state.dead_letters.set_quarantined(ids, !quarantined);
        self.publish_withdrawn(
            &mut state,
            "quarantine",
            Withdrawal { letters: ids, ..Withdrawal::default() },
        );
    }

    /// The running redrive, if any.
    pub fn redrive(&self) -> Option<Redrive> {
        self.lock().dead_letters.redrive()
    }

    /// Starts a redrive of the letters `target` names at `rate_per_s`; one at a time per lab.
    pub fn start_redrive(
        &self,
        target: &Target,
        confirm_quarantined: bool,
        rate_per_s: f64,
    ) -> Result<(Chosen, Redrive), RedriveRefusal> {
        let mut state = self.lock();
        if let Some(running) = state.dead_letters.redrive() {
            return Err(RedriveRefusal::Running(running));
        }
        let chosen = state.select(target, (true, confirm_quarantined)).map_err(RedriveRefusal::Chosen)?;
        if chosen.ids.is_empty() {
            return Err(RedriveRefusal::Chosen(ReplayRefusal::NothingMatches));
        }
        let redrive = state.dead_letters.start_redrive(&chosen.ids, rate_per_s);
        let now = self.now_ms();
        self.publish(&mut state, &Event::Redrive { redrive: Some(redrive) }, now);
        self.redrive_turned();
        Ok((chosen, redrive))
    }

    /// Takes back a redrive's start the store could not keep.
    pub fn withdraw_redrive(&self) {
        let mut state = self.lock();
        let owed: Vec<u64> =
            state.dead_letters.letters().iter().filter(|d| d.redrive.is_some()).map(|d| d.id).collect();
        state.dead_letters.cancel_redrive();
        self.publish_withdrawn(&mut state, "redrive", Withdrawal { letters: &owed, ..Withdrawal::default() });
        self.redrive_turned();
    }

    /// Stops the running redrive; the letters it had not replayed stay in the queue.
    pub fn cancel_redrive(&self) -> Option<Redrive> {
        let mut state = self.lock();
        let cancelled = state.dead_letters.cancel_redrive()?;
        let now = self.now_ms();
        self.publish(&mut state, &Event::Redrive { redrive: None }, now);
        self.redrive_turned();
        Some(cancelled)
    }

    /// One step of the redrive: the oldest letter it still owes goes back to the queue for a
    /// new round, in the same change that records the redrive's progress.
    pub fn redrive_step(&self) -> Step {
        let mut state = self.lock();
        if state.deleted {
            return Step::Done;
        }
        let Some(id) = state.dead_letters.next_redriven() else { return Step::Done };
        if state.record.active_messages() >= self.limits.max_active_messages_per_lab {
            return Step::Busy;
        }
        let Some(letter) = state.dead_letters.remove(&[id]).pop() else { return Step::Done };
        let messages =
            state.record.requeue(&[id]).into_iter().map(|(id, round)| ReplayedMessage { id, round });
        let now = self.now_ms();
        self.publish(&mut state, &Event::ReplayStarted { messages: messages.collect() }, now);
        let redrive = state.dead_letters.redrive();
        self.publish(&mut state, &Event::Redrive { redrive }, now);
        Step::Sent(letter)
    }
}

/// What a delete took, to put back if the store cannot keep it.
#[derive(Debug)]
pub struct Deleted {
    pub letters: Vec<DeadLetter>,
    messages: Vec<crate::domain::Message>,
}

/// Why replaying now would most likely fail again, if it would: any client's open breaker, or
/// the endpoint's mode.
fn failing(mode: Mode, breakers: BreakerCounts) -> Option<String> {
    let BreakerCounts { closed, open, half_open } = breakers;
    match (open, closed + open + half_open) {
        (0, _) => {}
        (_, 1) => return Some("the circuit breaker is open".into()),
        (open, all) => return Some(format!("{open} of {all} circuit breakers are open")),
    }
    match mode {
        Mode::Healthy => None,
        mode => Some(format!("the downstream is {}", mode.as_str())),
    }
}

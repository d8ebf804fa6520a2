//! Which dead letters an operator means: a filter by cause, last status, replays, when they
//! were dead-lettered, id or key prefix, quarantine and whether the write was applied; the
//! counts per cause and per status over the whole queue; pages of the letters that match, in
//! id order, so a cursor stays valid while letters come and go.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Cause, DeadLetter, DeadLetterQueue, ReplayRefusal};
use crate::domain::Outcome;
use crate::retry::protection::ProtectionKind;

/// A filter as it arrives (a query string, or `"filter"` in a request body): every field
/// optional, lists comma-separated. `Filter::parse` checks it.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    /// Causes, comma-separated, each a `Cause` as `Cause::as_str` names it (every one is in
    /// `Cause::all`; the API's description lists them from there).
    pub cause: Option<String>,
    /// Last statuses, comma-separated: an HTTP status (`503`) or how the last attempt ended
    /// without one (`timeout`, `transport_error`, `interrupted`, `short_circuited`).
    pub status: Option<String>,
    /// Replayed exactly this many times before (the round it gave up in).
    pub replays: Option<u32>,
    /// Dead-lettered at or after this lab time, in ms.
    pub since_ms: Option<u64>,
    /// Dead-lettered at or before this lab time, in ms.
    pub until_ms: Option<u64>,
    /// A message id (`#12`, only the id), or text that is a message id or the start of an
    /// idempotency key (`12`, `3f2a`).
    pub q: Option<String>,
    /// Whether the downstream's ledger holds the write as applied.
    pub applied: Option<bool>,
    /// Whether the letter is quarantined.
    pub quarantined: Option<bool>,
}

/// A filter that was refused, naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    pub field: &'static str,
    pub detail: String,
}

/// How a dead letter's last attempt ended: an HTTP status, or an outcome without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LastStatus {
    Http(u16),
    Ended(OutcomeName),
    /// No attempt was recorded.
    None,
}

/// The outcomes that end an attempt without an HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OutcomeName {
    Timeout,
    TransportError,
    Interrupted,
    ShortCircuited,
    Cancelled,
}

impl OutcomeName {
    const ALL: [(OutcomeName, &'static str); 5] = [
        (OutcomeName::Timeout, "timeout"),
        (OutcomeName::TransportError, "transport_error"),
        (OutcomeName::Interrupted, "interrupted"),
        (OutcomeName::ShortCircuited, "short_circuited"),
        (OutcomeName::Cancelled, "cancelled"),
    ];

    fn as_str(self) -> &'static str {
        Self::ALL.iter().find(|(o, _)| *o == self).map_or("", |(_, name)| name)
    }
}

impl fmt::Display for LastStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LastStatus::Http(code) => write!(f, "{code}"),
            LastStatus::Ended(outcome) => f.write_str(outcome.as_str()),
            LastStatus::None => f.write_str("none"),
        }
    }
}

impl LastStatus {
    pub fn of(letter: &DeadLetter) -> LastStatus {
        let Some(last) = letter.attempts.last() else { return LastStatus::None };
        if let Some(code) = last.status {
            return LastStatus::Http(code);
        }
        match last.outcome {
            Some(Outcome::Timeout) => LastStatus::Ended(OutcomeName::Timeout),
            Some(Outcome::TransportError) => LastStatus::Ended(OutcomeName::TransportError),
            Some(Outcome::ShortCircuited) => LastStatus::Ended(OutcomeName::ShortCircuited),
            Some(Outcome::Cancelled) => LastStatus::Ended(OutcomeName::Cancelled),
            // An attempt cut off mid-flight, or one recorded without an end.
            Some(Outcome::Interrupted) | None => LastStatus::Ended(OutcomeName::Interrupted),
            // An answer always has a status; kept total for an older row without one.
            Some(Outcome::Ok | Outcome::HttpError) => LastStatus::None,
        }
    }

    fn parse(raw: &str) -> Option<LastStatus> {
        if let Ok(code) = raw.parse::<u16>() {
            return (100..=599).contains(&code).then_some(LastStatus::Http(code));
        }
        if raw == "none" {
            return Some(LastStatus::None);
        }
        OutcomeName::ALL.iter().find(|(_, name)| *name == raw).map(|(o, _)| LastStatus::Ended(*o))
    }
}

impl Cause {
    /// The causes that are no protection's refusal.
    const FIXED: [Cause; 5] =
        [Cause::AttemptsUsedUp, Cause::TimeBudget, Cause::CircuitOpen, Cause::Permanent, Cause::Pushback];

    /// Every cause: the fixed ones, then one per protection kind.
    pub fn all() -> impl Iterator<Item = Cause> {
        Cause::FIXED.into_iter().chain(ProtectionKind::ALL.iter().map(|&kind| Cause::Refused(kind)))
    }

    /// Its name, as the stored letters, the filter and the counts have it.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::AttemptsUsedUp => "attempts_used_up",
            Cause::TimeBudget => "time_budget",
            Cause::CircuitOpen => "circuit_open",
            Cause::Permanent => "permanent",
            Cause::Pushback => "pushback",
            Cause::Refused(kind) => kind.name(),
        }
    }

    /// The cause in words, as the page names it.
    pub fn words(self) -> &'static str {
        match self {
            Cause::AttemptsUsedUp => "attempts used up",
            Cause::TimeBudget => "time budget",
            Cause::CircuitOpen => "circuit open",
            Cause::Permanent => "permanent error",
            Cause::Pushback => "told not to retry",
            Cause::Refused(kind) => kind.words(),
        }
    }

    /// The protection whose refusal this is, if one's.
    pub fn kind(self) -> Option<ProtectionKind> {
        match self {
            Cause::Refused(kind) => Some(kind),
            _ => None,
        }
    }

    pub(super) fn parse(raw: &str) -> Option<Cause> {
        Cause::all().find(|c| c.as_str() == raw)
    }
}

/// A checked filter: only what it holds narrows the queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    causes: Vec<Cause>,
    statuses: Vec<LastStatus>,
    replays: Option<u32>,
    since_ms: Option<u64>,
    until_ms: Option<u64>,
    q: Option<Find>,
    applied: Option<bool>,
    quarantined: Option<bool>,
}

/// What `q` looks for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Find {
    /// `#12`: that message only.
    Id(u64),
    /// A message id, or the start of a key (lowercase, as keys are written).
    Text(String),
}

impl Find {
    fn matches(&self, letter: &DeadLetter) -> bool {
        match self {
            Find::Id(id) => letter.id == *id,
            Find::Text(text) => letter.id.to_string() == *text || letter.key.starts_with(text.as_str()),
        }
    }
}

impl Filter {
    /// Checks every field; an unknown cause or status, or a time range that ends before it
    /// starts, is refused naming the field.
    pub fn parse(&self) -> Result<Selection, FilterError> {
        let causes = list(self.cause.as_deref(), "cause", Cause::parse, || {
            Cause::all().map(Cause::as_str).collect::<Vec<_>>().join(", ")
        })?;
        let statuses = list(self.status.as_deref(), "status", LastStatus::parse, || {
            let names: Vec<&str> = OutcomeName::ALL.iter().map(|(_, n)| *n).collect();
            format!("an HTTP status (100-599), {} or none", names.join(", "))
        })?;
        if let (Some(since), Some(until)) = (self.since_ms, self.until_ms)
            && until < since
        {
            return Err(FilterError {
                field: "until_ms",
                detail: format!("until_ms ({until}) is before since_ms ({since}): the range holds nothing"),
            });
        }
        let q = match self.q.as_deref().map(str::trim).filter(|q| !q.is_empty()) {
            None => None,
            Some(q) => Some(match q.strip_prefix('#') {
                Some(id) => Find::Id(id.parse().map_err(|_| FilterError {
                    field: "q",
                    detail: format!("q: {q:?} is not a message id (#12), nor text without the #"),
                })?),
                None => Find::Text(q.to_lowercase()),
            }),
        };
        Ok(Selection {
            causes,
            statuses,
            replays: self.replays,
            since_ms: self.since_ms,
            until_ms: self.until_ms,
            q,
            applied: self.applied,
            quarantined: self.quarantined,
        })
    }
}

/// A comma-separated list of names, each checked by `parse`.
fn list<T>(
    raw: Option<&str>,
    field: &'static str,
    parse: impl Fn(&str) -> Option<T>,
    valid: impl Fn() -> String,
) -> Result<Vec<T>, FilterError> {
    let Some(raw) = raw else { return Ok(Vec::new()) };
    raw.split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(|name| {
            parse(name).ok_or_else(|| FilterError {
                field,
                detail: format!("{field}: unknown value {name:?}; valid: {}", valid()),
            })
        })
        .collect()
}

impl Selection {
    /// Every letter; what "replay all" means.
    pub fn everything() -> Selection {
        Selection::default()
    }

    /// Only the quarantined, or only those that are not.
    pub fn quarantined(mut self, quarantined: bool) -> Selection {
        self.quarantined = Some(quarantined);
        self
    }

    /// Whether the filter narrows the queue at all: a blank `q`, an empty list, or no field
    /// is no filter.
    pub fn narrows(&self) -> bool {
        *self != Selection::default()
    }

    /// Whether the filter narrows nothing about quarantine (a bulk replay then skips them).
    pub fn says_quarantined(&self) -> bool {
        self.quarantined.is_some()
    }

    /// Whether the letter matches; `applied` says whether the ledger holds a key as applied
    /// (asked only when the filter needs it).
    pub fn matches(&self, letter: &DeadLetter, applied: impl Fn(&str) -> bool) -> bool {
        (self.causes.is_empty() || self.causes.contains(&letter.cause))
            && (self.statuses.is_empty() || self.statuses.contains(&LastStatus::of(letter)))
            && self.replays.is_none_or(|r| letter.round == r)
            && self.since_ms.is_none_or(|t| letter.dead_lettered_ms >= t)
            && self.until_ms.is_none_or(|t| letter.dead_lettered_ms <= t)
            && self.quarantined.is_none_or(|q| letter.quarantined == q)
            && self.q.as_ref().is_none_or(|q| q.matches(letter))
            && self.applied.is_none_or(|a| applied(&letter.key) == a)
    }
}

/// The counts per cause (every cause, zeros too) and per last status (those present).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Facets {
    pub cause: BTreeMap<String, u64>,
    pub status: BTreeMap<String, u64>,
}

impl Facets {
    pub fn of<'a>(letters: impl IntoIterator<Item = &'a DeadLetter>) -> Facets {
        let mut facets = Facets {
            cause: Cause::all().map(|c| (c.as_str().to_owned(), 0)).collect(),
            status: BTreeMap::new(),
        };
        for letter in letters {
            *facets.cause.entry(letter.cause.as_str().to_owned()).or_default() += 1;
            *facets.status.entry(LastStatus::of(letter).to_string()).or_default() += 1;
        }
        facets
    }
}

/// The ids of the letters that match, in id order.
pub fn matching(letters: &[DeadLetter], selection: &Selection, applied: impl Fn(&str) -> bool) -> Vec<u64> {
    let mut ids: Vec<u64> = letters.iter().filter(|d| selection.matches(d, &applied)).map(|d| d.id).collect();
    ids.sort_unstable();
    ids
}

/// One page of `ids` (sorted): those after `after`, at most `limit`, and the cursor for the
/// next page when more follow.
pub fn page(ids: &[u64], after: Option<u64>, limit: usize) -> (&[u64], Option<u64>) {
    let start = after.map_or(0, |after| ids.partition_point(|&id| id <= after));
    let end = (start + limit).min(ids.len());
    let page = &ids[start..end];
    let next = (end < ids.len()).then(|| page.last().copied()).flatten();
    (page, next)
}

/// The letters an action names: every one, some by id, or those a filter matches.
#[derive(Debug, Clone)]
pub enum Target {
    All,
    Ids(Vec<u64>),
    Filter(Selection),
}

/// The letters an action takes, and the quarantined ones it left alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chosen {
    pub ids: Vec<u64>,
    pub quarantined_skipped: u64,
}

impl DeadLetterQueue {
    /// The letters `target` names, in id order. By id, each must be in the queue. A replay
    /// (`guard_quarantined`) leaves quarantined letters alone unless `confirm_quarantined`:
    /// named by id it is refused, matched by a filter or "all" they are skipped and counted.
    /// A filter that matches nothing is refused. Changes nothing.
    pub fn select(
        &self,
        target: &Target,
        (guard_quarantined, confirm_quarantined): (bool, bool),
        applied: impl Fn(&str) -> bool,
    ) -> Result<Chosen, ReplayRefusal> {
        let guard = guard_quarantined && !confirm_quarantined;
        match target {
            Target::Ids(ids) => {
                let mut ids = ids.clone();
                ids.sort_unstable();
                ids.dedup();
                let held: HashMap<u64, bool> = self.letters.iter().map(|d| (d.id, d.quarantined)).collect();
                let missing: Vec<u64> = ids.iter().copied().filter(|id| !held.contains_key(id)).collect();
                if !missing.is_empty() {
                    return Err(ReplayRefusal::NotDeadLetters(missing));
                }
                let quarantined: Vec<u64> = ids.iter().copied().filter(|id| held[id]).collect();
                if guard && !quarantined.is_empty() {
                    return Err(ReplayRefusal::Quarantined(quarantined));
                }
                Ok(Chosen { ids, quarantined_skipped: 0 })
            }
            Target::All | Target::Filter(_) => {
                let selection = match target {
                    Target::Filter(selection) => selection,
                    _ => &Selection::everything(),
                };
                let matched = matching(&self.letters, selection, applied);
                let before = matched.len() as u64;
                if matched.is_empty() && matches!(target, Target::Filter(_)) {
                    return Err(ReplayRefusal::NothingMatches);
                }
                let ids: Vec<u64> = match guard {
                    true => {
                        let held: HashSet<u64> =
                            self.letters.iter().filter(|d| d.quarantined).map(|d| d.id).collect();
                        matched.into_iter().filter(|id| !held.contains(id)).collect()
                    }
                    false => matched,
                };
                Ok(Chosen { quarantined_skipped: before - ids.len() as u64, ids })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Attempt, Message, MessageState};

    fn letter(id: u64, cause: Cause, status: Option<u16>, outcome: Outcome, at_ms: u64) -> DeadLetter {
        let attempt = Attempt {
            n: 1,
            round: 0,
            started_ms: at_ms,
            duration_ms: Some(1),
            status,
            outcome: Some(outcome),
            replayed: false,
            retry_after_s: None,
            wait: None,
            refused_by: None,
        };
        let message = Message {
            id,
            key: format!("k{id:02}-key").into(),
            state: MessageState::DeadLetter,
            round: 0,
            created_ms: 0,
            attempts: vec![attempt].into(),
        };
        DeadLetter::new(&message, (cause, "gave up".into()), (at_ms, at_ms), 3)
    }

    fn queue() -> Vec<DeadLetter> {
        vec![
            letter(1, Cause::AttemptsUsedUp, Some(503), Outcome::HttpError, 100),
            letter(2, Cause::AttemptsUsedUp, None, Outcome::Timeout, 200),
            letter(3, Cause::CircuitOpen, None, Outcome::ShortCircuited, 300),
            letter(4, Cause::Permanent, Some(422), Outcome::HttpError, 400),
        ]
    }

    fn ids(filter: Filter) -> Vec<u64> {
        matching(&queue(), &filter.parse().unwrap(), |key| key.starts_with("k02"))
    }

    #[test]
    fn each_field_narrows_the_queue() {
        let all = |f: Filter| ids(f);
        assert_eq!(all(Filter::default()), [1, 2, 3, 4]);
        assert_eq!(all(Filter { cause: Some("attempts_used_up".into()), ..Default::default() }), [1, 2]);
        assert_eq!(
            all(Filter { cause: Some("permanent, circuit_open".into()), ..Default::default() }),
            [3, 4]
        );
        assert_eq!(all(Filter { status: Some("503,timeout".into()), ..Default::default() }), [1, 2]);
        assert_eq!(all(Filter { status: Some("short_circuited".into()), ..Default::default() }), [3]);
        assert_eq!(all(Filter { since_ms: Some(200), until_ms: Some(300), ..Default::default() }), [2, 3]);
        assert_eq!(all(Filter { q: Some("#3".into()), ..Default::default() }), [3]);
        assert_eq!(all(Filter { q: Some("K04".into()), ..Default::default() }), [4]);
        assert_eq!(all(Filter { applied: Some(true), ..Default::default() }), [2]);
        assert_eq!(all(Filter { applied: Some(false), ..Default::default() }), [1, 3, 4]);
        assert_eq!(all(Filter { replays: Some(1), ..Default::default() }), Vec::<u64>::new());
    }

    #[test]
    fn unknown_names_and_empty_ranges_are_refused_naming_the_field() {
        let cause = Filter { cause: Some("gremlins".into()), ..Default::default() }.parse().unwrap_err();
        assert_eq!(cause.field, "cause");
        assert!(cause.detail.contains("gremlins") && cause.detail.contains("attempts_used_up"));
        let status = Filter { status: Some("700".into()), ..Default::default() }.parse().unwrap_err();
        assert_eq!(status.field, "status");
        let range =
            Filter { since_ms: Some(5), until_ms: Some(4), ..Default::default() }.parse().unwrap_err();
        assert_eq!(range.field, "until_ms");
    }

    #[test]
    fn facets_count_the_whole_queue_every_cause_named() {
        let facets = Facets::of(&queue());
        assert_eq!(facets.cause["attempts_used_up"], 2);
        assert_eq!(facets.cause["time_budget"], 0);
        assert_eq!(facets.cause.values().sum::<u64>(), 4);
        let status: Vec<(&str, u64)> = facets.status.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(status, [("422", 1), ("503", 1), ("short_circuited", 1), ("timeout", 1)]);
    }

    #[test]
    fn pages_follow_the_cursor_even_when_its_letter_is_gone() {
        let ids = [2, 5, 9, 11, 12];
        assert_eq!(page(&ids, None, 2), (&ids[..2], Some(5)));
        assert_eq!(page(&ids, Some(5), 2), (&ids[2..4], Some(11)));
        assert_eq!(page(&ids, Some(10), 2), (&ids[3..5], None));
        assert_eq!(page(&ids, Some(12), 2), (&ids[5..], None));
    }
}

//! Claims that check themselves: each sentence the story says about a run ("all eight are
//! dead-lettered", "nothing is applied twice"), defined once, here, as a test over the lab's
//! published snapshot. The page shows each claim's verdict and the figure it rests on
//! (`GET /api/labs/{lab}/claims`), and the tests evaluate the same definitions on the snapshot
//! they read, so the page and the tests cannot say a claim two ways.
//!
//! It reads the snapshot as JSON, the contract every client of the API sees, and so uses
//! nothing of the lab's inner types.

use serde::{Deserialize, Serialize};

/// Every claim a step can make, by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClaimId {
    /// Every message of the run ended in the dead-letter queue.
    DeadLettered,
    /// Every dead letter of the run used all the attempts the policy allows.
    AttemptsUsedUp,
    /// Every measured wait that followed a `Retry-After` lasted at least that long.
    WaitsHonourRetryAfter,
    /// The endpoint applied none of the run's dead letters' writes.
    NothingApplied,
    /// Every message of the run was delivered.
    Delivered,
    /// No key was applied twice, in the whole lab.
    NoneAppliedTwice,
    /// At least one attempt timed out at the client.
    TimedOut,
    /// At least one attempt was answered from the stored result (`Idempotent-Replayed`).
    AnsweredFromStore,
    /// At least one attempt was cut off by the client's crash.
    Interrupted,
    /// Nine in ten of the run's requests (attempts that reached the endpoint) were 503s.
    MostlyUnavailable,
    /// Fewer than half as many 503s as the run before.
    HalfTheUnavailableOfBefore,
    /// More than half of the run's requests were 429s.
    MostlyThrottled,
    /// Fewer 429s than the run before, and not none.
    FewerThrottledNotNone,
    /// Many messages, at least one in five, ended as dead letters.
    ManyDeadLettered,
    /// No message of the run ended as a dead letter.
    NoneDeadLettered,
    /// Nearly every message, nine in ten, was delivered.
    NearlyAllDelivered,
    /// At least one message of the run ended as a dead letter.
    SomeDeadLettered,
    /// The run before had no dead letter.
    NoneDeadLetteredBefore,
    /// More messages were delivered than in the run before.
    MoreDeliveredThanBefore,
    /// Every wait of the run was exactly its nominal length: no band to draw from (no jitter).
    WaitsExactlyNominal,
    /// Three in four of the run's retries left in the busiest 200 ms windows, one per wait the
    /// policy has: the retries stand in columns.
    RetriesInColumns,
    /// Those windows hold a smaller share of the run's retries than of the run before's, by at
    /// least 5 points: the columns dissolve.
    RetriesOutOfColumns,
    /// Before the timed change that the last ↩ flag ended (from the first bin with traffic to
    /// half a second before the last settings flag before it): at least eight in ten of the new
    /// messages offered were delivered in those seconds, with at least 20 offered: goodput
    /// follows the offered load while the endpoint is healthy.
    GoodputFollowsOffered,
    /// From half a second after the slowdown ended (the last ↩ flag) for ten seconds, every
    /// second's goodput stayed below half of what was offered in it, and traffic kept arriving
    /// (at least 8 new messages a second): the metastable failure outlasts its trigger.
    GoodputStaysDown,
    /// Within 6 s of the change the run starts with (`from_ms`), a 3 s window delivered nine in
    /// ten of the messages offered in it, and 9 s after the change one still delivers eight in
    /// ten: goodput is back on the offered load and stays near it (a server defence that drops
    /// work, CoDel's, lets a burst of arrivals wait for their retries: a window can fall to 0.88
    /// while the run as a whole delivers all it is offered; stuck, it is under a half).
    GoodputBack,
    /// `goodput_back` for a fix that first drains a full queue with what the workers have left
    /// over: a 3 s window within 10 s of the change, and again 13 s after it.
    #[serde(rename = "goodput_back_within_10_s")]
    GoodputBackWithin10S,
    /// The first half of `goodput_back` alone, with room for a second open spell: within 10 s
    /// of the change a 3 s window delivered nine in ten of the messages offered in it. For an
    /// ending that clears the queue but leaves the client's lockstep retries as they were (the
    /// breaker that fails fast): the retries an earlier breaker sent off to wait, or a later
    /// burst, can open it once more (4 s), so staying back is not part of what it promises.
    GoodputReturns,
    /// Every hedge of the run (an attempt sent while another of its round was out, under
    /// `grpc_hedging`) that was sent was answered 409: its sibling's key was still in work.
    #[serde(rename = "hedges_met_409")]
    HedgesMet409,
    /// At least one attempt was cancelled: another attempt's answer settled its round first.
    Cancelled,
    /// The run's messages sent at most 1.3 requests each (attempts that reached the endpoint):
    /// a retry protection kept the retries to a few in ten messages.
    FewRequestsPerMessage,
    /// The run's messages sent at least a quarter more requests each than the run before's.
    MoreRequestsPerMessageThanBefore,
}

impl ClaimId {
    pub const ALL: [ClaimId; 31] = [
        ClaimId::DeadLettered,
        ClaimId::AttemptsUsedUp,
        ClaimId::WaitsHonourRetryAfter,
        ClaimId::NothingApplied,
        ClaimId::Delivered,
        ClaimId::NoneAppliedTwice,
        ClaimId::TimedOut,
        ClaimId::AnsweredFromStore,
        ClaimId::Interrupted,
        ClaimId::MostlyUnavailable,
        ClaimId::HalfTheUnavailableOfBefore,
        ClaimId::MostlyThrottled,
        ClaimId::FewerThrottledNotNone,
        ClaimId::ManyDeadLettered,
        ClaimId::NoneDeadLettered,
        ClaimId::NearlyAllDelivered,
        ClaimId::SomeDeadLettered,
        ClaimId::NoneDeadLetteredBefore,
        ClaimId::MoreDeliveredThanBefore,
        ClaimId::WaitsExactlyNominal,
        ClaimId::RetriesInColumns,
        ClaimId::RetriesOutOfColumns,
        ClaimId::GoodputFollowsOffered,
        ClaimId::GoodputStaysDown,
        ClaimId::GoodputBack,
        ClaimId::GoodputBackWithin10S,
        ClaimId::GoodputReturns,
        ClaimId::HedgesMet409,
        ClaimId::Cancelled,
        ClaimId::FewRequestsPerMessage,
        ClaimId::MoreRequestsPerMessageThanBefore,
    ];

    /// The id as the API and the page write it.
    pub fn name(self) -> &'static str {
        match self {
            ClaimId::DeadLettered => "dead_lettered",
            ClaimId::AttemptsUsedUp => "attempts_used_up",
            ClaimId::WaitsHonourRetryAfter => "waits_honour_retry_after",
            ClaimId::NothingApplied => "nothing_applied",
            ClaimId::Delivered => "delivered",
            ClaimId::NoneAppliedTwice => "none_applied_twice",
            ClaimId::TimedOut => "timed_out",
            ClaimId::AnsweredFromStore => "answered_from_store",
            ClaimId::Interrupted => "interrupted",
            ClaimId::MostlyUnavailable => "mostly_unavailable",
            ClaimId::HalfTheUnavailableOfBefore => "half_the_unavailable_of_before",
            ClaimId::MostlyThrottled => "mostly_throttled",
            ClaimId::FewerThrottledNotNone => "fewer_throttled_not_none",
            ClaimId::ManyDeadLettered => "many_dead_lettered",
            ClaimId::NoneDeadLettered => "none_dead_lettered",
            ClaimId::NearlyAllDelivered => "nearly_all_delivered",
            ClaimId::SomeDeadLettered => "some_dead_lettered",
            ClaimId::NoneDeadLetteredBefore => "none_dead_lettered_before",
            ClaimId::MoreDeliveredThanBefore => "more_delivered_than_before",
            ClaimId::WaitsExactlyNominal => "waits_exactly_nominal",
            ClaimId::RetriesInColumns => "retries_in_columns",
            ClaimId::RetriesOutOfColumns => "retries_out_of_columns",
            ClaimId::GoodputFollowsOffered => "goodput_follows_offered",
            ClaimId::GoodputStaysDown => "goodput_stays_down",
            ClaimId::GoodputBack => "goodput_back",
            ClaimId::GoodputBackWithin10S => "goodput_back_within_10_s",
            ClaimId::GoodputReturns => "goodput_returns",
            ClaimId::HedgesMet409 => "hedges_met_409",
            ClaimId::Cancelled => "cancelled",
            ClaimId::FewRequestsPerMessage => "few_requests_per_message",
            ClaimId::MoreRequestsPerMessageThanBefore => "more_requests_per_message_than_before",
        }
    }

    pub fn parse(name: &str) -> Option<ClaimId> {
        ClaimId::ALL.into_iter().find(|id| id.name() == name)
    }
}

/// Whether the run bore a claim out; `Pending` until the run's messages have settled, and
/// `Unknown` when some of them are no longer in the lab (a reset, or forgotten): what is left
/// cannot say, and waiting would never settle it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
// Its own name in the OpenAPI description: the callers' card has a `Verdict` too.
#[schema(as = ClaimVerdict)]
pub enum Verdict {
    Pending,
    Holds,
    Fails,
    Unknown,
}

/// A claim judged on one run: the verdict, the figure it rests on ("8 of 8") and the sentence
/// the page shows with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Judged {
    pub id: ClaimId,
    pub verdict: Verdict,
    pub figure: String,
    pub said: String,
}

/// The part of a lab's snapshot (`GET /api/labs/{lab}`) the claims read.
#[derive(Debug, Clone, Deserialize)]
pub struct Run {
    pub policy: RunPolicy,
    pub counters: RunCounters,
    pub messages: Vec<RunMessage>,
    pub dead_letters: Vec<RunDeadLetter>,
    /// Lab time now, the load per bin and the flags: what the claims about goodput read.
    #[serde(default)]
    pub now_ms: u64,
    #[serde(default)]
    pub load: RunLoad,
    #[serde(default)]
    pub markers: Vec<RunMarker>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct RunLoad {
    pub bins: Vec<RunBin>,
}

/// One bin of the load chart: new messages offered and messages delivered in it.
#[derive(Debug, Clone, Deserialize)]
pub struct RunBin {
    pub t_ms: u64,
    #[serde(default)]
    pub offered: u64,
    #[serde(default)]
    pub delivered: u64,
}

/// A flag on the timeline; `scheduled` is a timed change going back by itself (↩).
#[derive(Debug, Clone, Deserialize)]
pub struct RunMarker {
    pub at_ms: u64,
    pub kind: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RunPolicy {
    pub max_attempts: u32,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RunCounters {
    pub applied: u64,
    pub applied_twice: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RunMessage {
    pub id: u64,
    pub state: String,
    pub round: u32,
    pub attempts: Vec<RunAttempt>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RunAttempt {
    pub round: u32,
    /// The attempt's number in its round, 1 for the first.
    #[serde(default)]
    pub n: u32,
    #[serde(default)]
    pub started_ms: u64,
    /// Null while it runs.
    #[serde(default)]
    pub duration_ms: Option<u64>,
    pub status: Option<u16>,
    pub outcome: Option<String>,
    pub replayed: bool,
    pub retry_after_s: Option<u64>,
    pub wait: Option<RunWait>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RunWait {
    pub floor_ms: Option<u64>,
    pub actual_ms: Option<u64>,
    /// The band the wait was drawn from, and what was drawn.
    #[serde(default)]
    pub low_ms: Option<u64>,
    #[serde(default)]
    pub high_ms: Option<u64>,
    #[serde(default)]
    pub planned_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RunDeadLetter {
    pub id: u64,
    #[serde(default)]
    pub applied: bool,
}

/// Which messages a claim speaks of: the run's (`messages`; empty: every message of the lab),
/// and, for a claim that compares, the run before it (`before`).
#[derive(Debug, Clone, Default)]
pub struct Scope {
    pub messages: Vec<u64>,
    pub before: Vec<u64>,
    /// When the run began, in lab time, for the claims about the seconds after a change of
    /// settings (a fix turned on while traffic runs, with no messages of its own).
    pub from_ms: Option<u64>,
}

impl Scope {
    pub fn of(messages: &[u64]) -> Scope {
        Scope { messages: messages.to_vec(), ..Scope::default() }
    }
}

impl Run {
    /// Reads a snapshot's JSON.
    pub fn from_snapshot(json: &str) -> serde_json::Result<Run> {
        serde_json::from_str(json)
    }

    /// The run's messages: those named in `scope`, or every message when `scope` is empty.
    fn scoped<'a>(&'a self, scope: &'a [u64]) -> impl Iterator<Item = &'a RunMessage> + 'a {
        self.messages.iter().filter(move |m| scope.is_empty() || scope.contains(&m.id))
    }

    /// Settled: every message of the run has arrived where it ends (delivered or dead letter),
    /// and there is at least one.
    pub fn settled(&self, scope: &[u64]) -> bool {
        let mut any = false;
        for m in self.scoped(scope) {
            any = true;
            if m.state != "delivered" && m.state != "dead_letter" {
                return false;
            }
        }
        any
    }

    /// The ten seconds `goodput_stays_down` speaks of: from half a second after the last ↩ flag
    /// (a timed change of the endpoint going back by itself), if there is one.
    fn after_the_flag(&self) -> Option<(u64, u64)> {
        let flag = self.markers.iter().filter(|m| m.kind == "scheduled").map(|m| m.at_ms).max()?;
        Some((flag + 500, flag + 10_500))
    }

    /// The seconds `goodput_follows_offered` speaks of: from the first bin with new messages
    /// to half a second before the timed change the last ↩ flag ended began (the last settings
    /// flag before it), once that flag is up.
    fn before_the_change(&self) -> Option<(u64, u64)> {
        let flag = self.markers.iter().filter(|m| m.kind == "scheduled").map(|m| m.at_ms).max()?;
        let began =
            self.markers.iter().filter(|m| m.kind == "settings" && m.at_ms < flag).map(|m| m.at_ms).max()?;
        // The last half second's messages meet the change in the queue: left out.
        let to = began.saturating_sub(500);
        let first = self.load.bins.iter().filter(|b| b.offered > 0 && b.t_ms < to).map(|b| b.t_ms).min()?;
        Some((first, to))
    }

    /// New messages offered and delivered, per second of `[from, to)`, from the load bins.
    pub fn per_second(&self, from: u64, to: u64) -> Vec<(u64, u64)> {
        (from..to)
            .step_by(1_000)
            .map(|t| {
                let inside = self.load.bins.iter().filter(|b| (t..(t + 1_000).min(to)).contains(&b.t_ms));
                inside.fold((0, 0), |(o, d), b| (o + b.offered, d + b.delivered))
            })
            .collect()
    }

    /// How many of `scope`'s messages the lab no longer holds (a reset, or forgotten).
    fn missing(&self, scope: &[u64]) -> usize {
        let held: std::collections::HashSet<u64> = self.messages.iter().map(|m| m.id).collect();
        scope.iter().filter(|id| !held.contains(id)).count()
    }

    /// Judges each of `claims` on the messages in `scope` (empty: every message). Every verdict
    /// is `Pending` until the run has settled; `Unknown`, saying why, when messages it speaks of
    /// (the run's, or the run before's for a claim that compares) are gone from the lab.
    pub fn judge(&self, claims: &[ClaimId], scope: &Scope) -> Vec<Judged> {
        let settled = self.settled(&scope.messages);
        let (gone, gone_before) = (self.missing(&scope.messages), self.missing(&scope.before));
        claims
            .iter()
            .map(|&id| {
                let compares = matches!(
                    id,
                    ClaimId::HalfTheUnavailableOfBefore
                        | ClaimId::FewerThrottledNotNone
                        | ClaimId::NoneDeadLetteredBefore
                        | ClaimId::MoreDeliveredThanBefore
                        | ClaimId::RetriesOutOfColumns
                        | ClaimId::MoreRequestsPerMessageThanBefore
                );
                let (lost, of, whose) = match (gone, compares && gone_before > 0) {
                    (0, false) => (0, 0, ""),
                    (0, true) => (gone_before, scope.before.len(), "the run before's"),
                    _ => (gone, scope.messages.len(), "the run's"),
                };
                if lost > 0 {
                    let said = format!(
                        "cannot be judged: {lost} of {of} of {whose} messages are no longer in the lab \
                         (reset, or forgotten as old)"
                    );
                    return Judged { id, verdict: Verdict::Unknown, figure: "–".into(), said };
                }
                let (holds, figure, said) = self.figure(id, scope);
                // A claim about the seconds after a flag is ready once they have passed, not
                // once messages settle (steady traffic never does).
                let settled = match id {
                    ClaimId::GoodputStaysDown => {
                        self.after_the_flag().is_some_and(|(_, to)| self.now_ms >= to)
                    }
                    ClaimId::GoodputFollowsOffered => self.before_the_change().is_some(),
                    ClaimId::GoodputBack | ClaimId::GoodputBackWithin10S => {
                        let (_, again_s) = back_within(id);
                        scope.from_ms.is_some_and(|from| self.now_ms >= from + (again_s + 3) * 1_000)
                    }
                    // Settled by the first window that is back (only whole windows count), or
                    // when the last that could be has passed.
                    ClaimId::GoodputReturns => {
                        let (within_s, _) = back_within(id);
                        holds
                            || scope.from_ms.is_some_and(|from| self.now_ms >= from + (within_s + 3) * 1_000)
                    }
                    _ => settled,
                };
                let verdict = match (settled, holds) {
                    (false, _) => Verdict::Pending,
                    (true, true) => Verdict::Holds,
                    (true, false) => Verdict::Fails,
                };
                Judged { id, verdict, figure, said }
            })
            .collect()
    }

    /// Whether claim `id` holds on the run now, the figure, and the sentence that says it.
    /// The requests of the messages in `scope` (attempts that reached the endpoint, so not
    /// those the breaker refused) and how many were answered `status`.
    fn answered(&self, scope: &[u64], status: u16) -> (usize, usize) {
        let requests = self.scoped(scope).flat_map(|m| m.attempts.iter());
        let requests: Vec<_> = requests.filter(|a| a.outcome.as_deref() != Some("short_circuited")).collect();
        (requests.iter().filter(|a| a.status == Some(status)).count(), requests.len())
    }

    /// How many of the retries of the messages in `scope` (attempts after a round's first)
    /// left in the busiest 200 ms windows, one window per wait the policy has, and of how many
    /// retries: the columns a schedule without jitter stands its retries in. Each window is two
    /// neighbouring 100 ms bins of the load chart, taken out before the next is sought.
    fn in_columns(&self, scope: &[u64]) -> (usize, usize) {
        let mut bins: Vec<(u64, usize)> = Vec::new();
        let retries = self.scoped(scope).flat_map(|m| m.attempts.iter()).filter(|a| a.n >= 2);
        for started in retries.map(|a| a.started_ms - a.started_ms % 100) {
            match bins.iter_mut().find(|b| b.0 == started) {
                Some(bin) => bin.1 += 1,
                None => bins.push((started, 1)),
            }
        }
        let retries = bins.iter().map(|b| b.1).sum();
        let mut held = 0;
        for _ in 1..self.policy.max_attempts {
            let window =
                |t: u64| bins.iter().filter(|b| b.0 == t || b.0 == t + 100).map(|b| b.1).sum::<usize>();
            let Some(t) = bins.iter().map(|b| b.0).max_by_key(|&t| window(t)) else { break };
            held += window(t);
            bins.retain(|b| b.0 != t && b.0 != t + 100);
        }
        (held, retries)
    }

    fn figure(&self, id: ClaimId, whole: &Scope) -> (bool, String, String) {
        let scope = whole.messages.as_slice();
        let total = self.scoped(scope).count();
        let in_state = |state: &str| self.scoped(scope).filter(|m| m.state == state).count();
        let before = |state: &str| {
            let ours = self.messages.iter().filter(|m| whole.before.contains(&m.id));
            (ours.clone().count(), ours.filter(|m| m.state == state).count())
        };
        let attempts = || self.scoped(scope).flat_map(|m| m.attempts.iter());
        let outcomes = |outcome: &str| attempts().filter(|a| a.outcome.as_deref() == Some(outcome)).count();
        match id {
            ClaimId::DeadLettered => {
                let n = in_state("dead_letter");
                all_of(n, total, noun(total, "message was dead-lettered", "messages were dead-lettered"))
            }
            ClaimId::AttemptsUsedUp => {
                let max = self.policy.max_attempts;
                let letters: Vec<_> = self.scoped(scope).filter(|m| m.state == "dead_letter").collect();
                let used_up = letters
                    .iter()
                    .filter(|m| m.attempts.iter().filter(|a| a.round == m.round).count() == max as usize)
                    .count();
                let what = noun(letters.len(), "dead letter used", "dead letters used");
                all_of(used_up, letters.len(), &format!("{what} all {max} attempts"))
            }
            ClaimId::WaitsHonourRetryAfter => {
                let waits: Vec<(u64, u64)> = attempts()
                    .filter(|a| a.retry_after_s.is_some())
                    .filter_map(|a| a.wait.as_ref())
                    .filter_map(|w| Some((w.floor_ms?, w.actual_ms?)))
                    .collect();
                let kept = waits.iter().filter(|(floor, actual)| actual >= floor).count();
                all_of(kept, waits.len(), "waits after a Retry-After lasted at least that long")
            }
            ClaimId::NothingApplied => {
                let letters: Vec<_> =
                    self.dead_letters.iter().filter(|l| scope.is_empty() || scope.contains(&l.id)).collect();
                let applied = letters.iter().filter(|l| l.applied).count();
                let figure = format!("{applied} of {}", letters.len());
                let said = format!("{figure} dead letters' writes were applied");
                (applied == 0 && !letters.is_empty(), figure, said)
            }
            ClaimId::Delivered => {
                let n = in_state("delivered");
                all_of(n, total, noun(total, "message was delivered", "messages were delivered"))
            }
            ClaimId::NoneAppliedTwice => {
                let (twice, applied) = (self.counters.applied_twice, self.counters.applied);
                let figure = twice.to_string();
                let said = format!("applied twice: {twice} (of {applied} writes applied)");
                (twice == 0, figure, said)
            }
            ClaimId::TimedOut => at_least_one(outcomes("timeout"), "timed out at the client"),
            ClaimId::AnsweredFromStore => at_least_one(
                attempts().filter(|a| a.replayed).count(),
                "answered from the stored result (↺), nothing applied again",
            ),
            ClaimId::Interrupted => at_least_one(outcomes("interrupted"), "cut off by the crash (!)"),
            ClaimId::HedgesMet409 => {
                // A hedge: an attempt sent (not refused) while an earlier one of its round was out.
                let sent = |a: &&RunAttempt| a.outcome.as_deref() != Some("short_circuited");
                let hedges: Vec<&RunAttempt> = self
                    .scoped(scope)
                    .flat_map(|m| {
                        let round: Vec<&RunAttempt> =
                            m.attempts.iter().filter(|a| a.round == m.round).collect();
                        let out_at = |a: &RunAttempt| {
                            round.iter().any(|x| {
                                x.n < a.n
                                    && x.started_ms <= a.started_ms
                                    && x.duration_ms.is_none_or(|d| x.started_ms + d > a.started_ms)
                            })
                        };
                        round.iter().copied().filter(sent).filter(|a| out_at(a)).collect::<Vec<_>>()
                    })
                    .collect();
                let met = hedges.iter().filter(|a| a.status == Some(409)).count();
                all_of(met, hedges.len(), "hedges were answered 409: the key was still in work")
            }
            ClaimId::Cancelled => {
                at_least_one(outcomes("cancelled"), "cancelled: another attempt's answer came first (✂)")
            }
            ClaimId::FewRequestsPerMessage => {
                let requests = self.answered(scope, 0).1;
                // 1.3 a message, in whole numbers: requests * 10 <= messages * 13.
                let holds = total > 0 && requests * 10 <= total * 13;
                let figure = format!("{:.2}", requests as f64 / total.max(1) as f64);
                let said = format!(
                    "{requests} requests for {total} messages, {figure} a message ({})",
                    if holds { "at most 1.3" } else { "more than 1.3" }
                );
                (holds, figure, said)
            }
            ClaimId::MoreRequestsPerMessageThanBefore => {
                let per = |ids: &[u64]| {
                    let messages = self.scoped(ids).count();
                    (self.answered(ids, 0).1, messages)
                };
                let ((now, of), (then, of_then)) = (per(scope), per(&whole.before));
                // now / of >= 1.25 * then / of_then, in whole numbers.
                let holds =
                    !whole.before.is_empty() && of > 0 && of_then > 0 && now * of_then * 4 >= then * of * 5;
                let ratio = |n: usize, m: usize| n as f64 / m.max(1) as f64;
                let figure = format!("{:.2} against {:.2}", ratio(now, of), ratio(then, of_then));
                let said = format!(
                    "{:.2} requests a message against {:.2} the run before ({})",
                    ratio(now, of),
                    ratio(then, of_then),
                    if holds { "at least a quarter more" } else { "not a quarter more" }
                );
                (holds, figure, said)
            }
            ClaimId::MostlyUnavailable => {
                let (n, requests) = self.answered(scope, 503);
                share(n, requests, 9, 10, "requests were 503s", "at least nine in ten")
            }
            ClaimId::MostlyThrottled => {
                let (n, requests) = self.answered(scope, 429);
                let holds = n * 2 > requests;
                let figure = format!("{n} of {requests}");
                let said =
                    format!("{figure} requests were 429s ({})", if holds { "most" } else { "not most" });
                (holds, figure, said)
            }
            ClaimId::HalfTheUnavailableOfBefore => {
                let (now, before) = (self.answered(scope, 503).0, self.answered(&whole.before, 503).0);
                let holds = !whole.before.is_empty() && now * 2 < before;
                let figure = format!("{now} against {before}");
                let said = format!(
                    "{now} 503s against {before} the run before ({})",
                    if holds { "fewer than half" } else { "not fewer than half" }
                );
                (holds, figure, said)
            }
            ClaimId::FewerThrottledNotNone => {
                let (now, before) = (self.answered(scope, 429).0, self.answered(&whole.before, 429).0);
                let holds = !whole.before.is_empty() && now > 0 && now < before;
                let figure = format!("{now} against {before}");
                (holds, figure, format!("{now} 429s against {before} the run before"))
            }
            ClaimId::ManyDeadLettered => {
                let n = in_state("dead_letter");
                share(n, total, 1, 5, "messages ended as dead letters", "at least one in five")
            }
            ClaimId::NoneDeadLettered => {
                let n = in_state("dead_letter");
                (total > 0 && n == 0, n.to_string(), format!("{n} of {total} messages ran out of attempts"))
            }
            ClaimId::NearlyAllDelivered => {
                let n = in_state("delivered");
                share(n, total, 9, 10, "messages were delivered", "at least nine in ten")
            }
            ClaimId::SomeDeadLettered => {
                let n = in_state("dead_letter");
                (n > 0, format!("{n} of {total}"), format!("{n} of {total} messages became dead letters"))
            }
            ClaimId::NoneDeadLetteredBefore => {
                let (of, n) = before("dead_letter");
                (
                    of > 0 && n == 0,
                    format!("{n} of {of}"),
                    format!("{n} of {of} messages of the run before became dead letters"),
                )
            }
            ClaimId::WaitsExactlyNominal => {
                let waits: Vec<&RunWait> = attempts().filter_map(|a| a.wait.as_ref()).collect();
                let exact = waits
                    .iter()
                    .filter(|w| w.low_ms.is_some() && w.low_ms == w.high_ms && w.planned_ms == w.low_ms);
                all_of(
                    exact.count(),
                    waits.len(),
                    "waits were exactly their nominal length, with no band to draw from",
                )
            }
            ClaimId::RetriesInColumns => {
                let (held, retries) = self.in_columns(scope);
                let windows = self.policy.max_attempts.saturating_sub(1);
                let what = format!("retries left in the {windows} busiest 200 ms windows");
                share(held, retries, 3, 4, &what, "at least three in four")
            }
            ClaimId::RetriesOutOfColumns => {
                let ((now, of), (then, of_then)) = (self.in_columns(scope), self.in_columns(&whole.before));
                let percent = |n: usize, of: usize| if of == 0 { 0.0 } else { n as f64 * 100.0 / of as f64 };
                let (now_pct, then_pct) = (percent(now, of), percent(then, of_then));
                let holds = of > 0 && of_then > 0 && now_pct + 5.0 <= then_pct;
                let figure = format!("{now_pct:.0} % against {then_pct:.0} %");
                let said = format!(
                    "the busiest 200 ms windows held {figure} of the retries the run before ({})",
                    if holds { "the columns dissolved" } else { "not 5 points fewer" }
                );
                (holds, figure, said)
            }
            ClaimId::GoodputFollowsOffered => {
                let Some((from, to)) = self.before_the_change() else {
                    return (
                        false,
                        "–".into(),
                        "waiting for the slowdown to begin and end (the ↩ flag)".into(),
                    );
                };
                let seconds = self.per_second(from, to);
                let (offered, delivered) = seconds.iter().fold((0, 0), |(o, d), s| (o + s.0, d + s.1));
                let holds = offered >= 20 && delivered * 10 >= offered * 8;
                let figure = format!("{delivered} of {offered}");
                let said = match (holds, offered >= 20) {
                    (_, false) => format!("only {offered} new messages before the slowdown: too few to say"),
                    (true, _) => format!(
                        "before the slowdown, {figure} new messages were delivered in the {} s they arrived in",
                        seconds.len()
                    ),
                    (false, _) => {
                        format!("only {figure} new messages delivered before the slowdown (8 in 10 needed)")
                    }
                };
                (holds, figure, said)
            }
            ClaimId::GoodputStaysDown => {
                let Some((from, to)) = self.after_the_flag() else {
                    return (false, "–".into(), "waiting for the slowdown to end (the ↩ flag)".into());
                };
                let seconds = self.per_second(from, to);
                let down = seconds.iter().filter(|(o, d)| *o >= 8 && d * 2 < *o).count();
                let (offered, delivered) = seconds.iter().fold((0, 0), |(o, d), s| (o + s.0, d + s.1));
                let holds = seconds.len() == 10 && down == 10;
                let figure = format!("{down} of {} s", seconds.len());
                let said = format!(
                    "{figure} after the ↩ flag had goodput under half of the offered load ({delivered} of {offered} delivered)"
                );
                (holds, figure, said)
            }
            ClaimId::GoodputBack | ClaimId::GoodputBackWithin10S | ClaimId::GoodputReturns => {
                let Some(from) = whole.from_ms else {
                    return (false, "–".into(), "no change to measure from".into());
                };
                let (within_s, again_s) = back_within(id);
                // Of a 3 s window's new messages, `tenths` in ten delivered, with traffic arriving;
                // a window still running says nothing yet.
                let back = |at: u64, tenths: u64| {
                    let (offered, delivered) =
                        self.per_second(at, at + 3_000).iter().fold((0, 0), |(o, d), s| (o + s.0, d + s.1));
                    at + 3_000 <= self.now_ms && offered >= 45 && delivered * 10 >= offered * tenths
                };
                let recovered = (0..=within_s).find(|s| back(from + s * 1_000, 9));
                if id == ClaimId::GoodputReturns {
                    let figure = recovered.map_or("–".to_owned(), |s| format!("{s} s"));
                    let said = match recovered {
                        Some(s) => format!("goodput back on the offered load {s} s after the change"),
                        None => {
                            format!("goodput not back on the offered load within {within_s} s of the change")
                        }
                    };
                    return (recovered.is_some(), figure, said);
                }
                let stays = back(from + again_s * 1_000, 8);
                let holds = recovered.is_some() && stays;
                let figure = recovered.map_or("–".to_owned(), |s| format!("{s} s"));
                let said = match (recovered, stays) {
                    (Some(s), true) => format!(
                        "goodput back on the offered load {s} s after the change, and still {again_s} s after"
                    ),
                    (Some(s), false) => {
                        format!("goodput back {s} s after the change, but not still {again_s} s after")
                    }
                    (None, _) => {
                        format!("goodput not back on the offered load within {within_s} s of the change")
                    }
                };
                (holds, figure, said)
            }
            ClaimId::MoreDeliveredThanBefore => {
                let (now, (of, then)) = (in_state("delivered"), before("delivered"));
                let holds = of > 0 && now > then;
                (
                    holds,
                    format!("{now} against {then}"),
                    format!("{now} messages delivered against {then} the run before"),
                )
            }
        }
    }
}

/// For the claims that goodput is back after a change: how many seconds after it the first
/// good 3 s window may start, and when the window that says it stayed back starts.
fn back_within(id: ClaimId) -> (u64, u64) {
    match id {
        ClaimId::GoodputBackWithin10S | ClaimId::GoodputReturns => (10, 13),
        _ => (6, 9),
    }
}

/// "8 of 8 messages dead-lettered" holds when all of at least one did; when not, the sentence
/// says "only".
fn all_of(n: usize, total: usize, what: &str) -> (bool, String, String) {
    let holds = total > 0 && n == total;
    let figure = format!("{n} of {total}");
    let said = if holds { format!("{figure} {what}") } else { format!("only {figure} {what}") };
    (holds, figure, said)
}

/// "454 of 474 requests were 503s" holds when `n` is at least `num`/`den` of `total` (and
/// `total` is not 0); the sentence names the share it needed either way.
fn share(n: usize, total: usize, num: usize, den: usize, what: &str, needed: &str) -> (bool, String, String) {
    let holds = total > 0 && n * den >= total * num;
    let figure = format!("{n} of {total}");
    let said = if holds { format!("{figure} {what}") } else { format!("only {figure} {what}, not {needed}") };
    (holds, figure, said)
}

/// "2 attempts timed out" holds from one on.
fn at_least_one(n: usize, what: &str) -> (bool, String, String) {
    (n > 0, n.to_string(), format!("{n} {} {what}", noun(n, "attempt", "attempts")))
}

/// The words that go with a count of `n`: "1 message was", "8 messages were".
fn noun<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(messages: serde_json::Value, counters: (u64, u64)) -> Run {
        serde_json::from_value(serde_json::json!({
            "policy": { "max_attempts": 2 },
            "counters": { "applied": counters.0, "applied_twice": counters.1 },
            "messages": messages,
            "dead_letters": [],
        }))
        .unwrap()
    }

    fn attempt(round: u32, outcome: &str) -> serde_json::Value {
        serde_json::json!({ "round": round, "status": null, "outcome": outcome, "replayed": false, "retry_after_s": null, "wait": null })
    }

    #[test]
    fn a_run_still_moving_is_pending_and_a_settled_one_says_only_when_it_falls_short() {
        let moving = run(
            serde_json::json!([
                { "id": 1, "state": "dead_letter", "round": 0, "attempts": [attempt(0, "http_error"), attempt(0, "http_error")] },
                { "id": 2, "state": "backing_off", "round": 0, "attempts": [attempt(0, "http_error")] },
            ]),
            (0, 0),
        );
        let judged = moving.judge(&[ClaimId::DeadLettered], &Scope::default());
        assert_eq!(judged[0].verdict, Verdict::Pending);
        // The same run scoped to its settled message holds.
        let judged = moving.judge(&[ClaimId::DeadLettered, ClaimId::AttemptsUsedUp], &Scope::of(&[1]));
        assert_eq!(judged[0].verdict, Verdict::Holds);
        assert_eq!(judged[0].said, "1 of 1 message was dead-lettered");
        assert_eq!(judged[1].figure, "1 of 1");

        let settled = run(
            serde_json::json!([
                { "id": 1, "state": "dead_letter", "round": 0, "attempts": [attempt(0, "http_error"), attempt(0, "http_error")] },
                { "id": 2, "state": "delivered", "round": 0, "attempts": [attempt(0, "ok")] },
            ]),
            (1, 0),
        );
        let judged = settled
            .judge(&[ClaimId::DeadLettered, ClaimId::TimedOut, ClaimId::NoneAppliedTwice], &Scope::default());
        assert_eq!(judged[0].verdict, Verdict::Fails);
        assert_eq!(judged[0].said, "only 1 of 2 messages were dead-lettered");
        assert_eq!((judged[1].verdict, judged[1].figure.as_str()), (Verdict::Fails, "0"));
        assert_eq!(judged[1].said, "0 attempts timed out at the client");
        assert_eq!(judged[2].verdict, Verdict::Holds);
    }

    /// A retry (attempt `n` of round 0) that started at `started_ms`, after a wait drawn from
    /// [low, high].
    fn retry(n: u32, started_ms: u64, band: (u64, u64), planned: u64) -> serde_json::Value {
        serde_json::json!({ "round": 0, "n": n, "started_ms": started_ms, "status": 503, "outcome": "http_error",
            "replayed": false, "retry_after_s": null,
            "wait": { "floor_ms": null, "actual_ms": planned, "low_ms": band.0, "high_ms": band.1, "planned_ms": planned } })
    }

    #[test]
    fn retries_without_jitter_stand_in_columns_and_jitter_dissolves_them() {
        // Three messages, each retried at 500 and 1,500 ms exactly (max_attempts 2 in `run`: one
        // wait, so one column): in columns. Then three whose retries spread over a second.
        let exact = |id: u64, at: u64| {
            serde_json::json!({ "id": id, "state": "delivered", "round": 0,
                "attempts": [retry(1, 0, (500, 500), 500), retry(2, at, (500, 500), 500)] })
        };
        let spread = |id: u64, at: u64| {
            serde_json::json!({ "id": id, "state": "delivered", "round": 0,
                "attempts": [retry(1, 0, (0, 500), 120), retry(2, at, (0, 500), 120)] })
        };
        let lab = run(
            serde_json::json!([
                exact(1, 500),
                exact(2, 520),
                exact(3, 610),
                spread(4, 1000),
                spread(5, 1400),
                spread(6, 1900)
            ]),
            (6, 0),
        );
        let first = Scope::of(&[1, 2, 3]);
        let judged = lab.judge(&[ClaimId::WaitsExactlyNominal, ClaimId::RetriesInColumns], &first);
        assert_eq!((judged[0].verdict, judged[0].figure.as_str()), (Verdict::Holds, "6 of 6"));
        assert_eq!(
            (judged[1].verdict, judged[1].figure.as_str()),
            (Verdict::Holds, "3 of 3"),
            "{}",
            judged[1].said
        );
        let then = Scope { messages: vec![4, 5, 6], before: vec![1, 2, 3], from_ms: None };
        let judged = lab.judge(
            &[ClaimId::WaitsExactlyNominal, ClaimId::RetriesInColumns, ClaimId::RetriesOutOfColumns],
            &then,
        );
        assert_eq!(judged[0].verdict, Verdict::Fails, "{}", judged[0].said);
        assert_eq!(
            (judged[1].verdict, judged[1].figure.as_str()),
            (Verdict::Fails, "1 of 3"),
            "{}",
            judged[1].said
        );
        assert_eq!((judged[2].verdict, judged[2].figure.as_str()), (Verdict::Holds, "33 % against 100 %"));
        // Compared with itself, nothing dissolved.
        let same = Scope { messages: vec![1, 2, 3], before: vec![1, 2, 3], from_ms: None };
        assert_eq!(lab.judge(&[ClaimId::RetriesOutOfColumns], &same)[0].verdict, Verdict::Fails);
    }

    #[test]
    fn a_claim_whose_messages_are_gone_is_unknown_and_says_why_instead_of_pending_for_ever() {
        let lab = run(
            serde_json::json!([{ "id": 3, "state": "delivered", "round": 0, "attempts": [attempt(0, "ok")] }]),
            (1, 0),
        );
        // Messages 1 and 2 were reset away: nothing left would ever settle them.
        let judged = lab.judge(&[ClaimId::Delivered], &Scope::of(&[1, 2]));
        assert_eq!((judged[0].verdict, judged[0].figure.as_str()), (Verdict::Unknown, "–"));
        assert!(
            judged[0].said.contains("2 of 2 of the run's messages are no longer in the lab"),
            "{}",
            judged[0].said
        );
        // A claim that compares needs the run before too; one that does not, only its own run.
        let scope = Scope { messages: vec![3], before: vec![1], from_ms: None };
        let judged = lab.judge(&[ClaimId::MoreDeliveredThanBefore, ClaimId::Delivered], &scope);
        assert_eq!(judged[0].verdict, Verdict::Unknown);
        assert!(judged[0].said.contains("the run before's"), "{}", judged[0].said);
        assert_eq!(judged[1].verdict, Verdict::Holds);
        assert_eq!(serde_json::to_value(Verdict::Unknown).unwrap(), "unknown");
    }

    #[test]
    fn goodput_stays_down_waits_for_ten_seconds_after_the_flag_and_needs_every_one_down() {
        let mut lab = run(serde_json::json!([]), (0, 0));
        let judged = lab.judge(&[ClaimId::GoodputStaysDown], &Scope::default());
        assert_eq!(judged[0].verdict, Verdict::Pending, "no flag yet: {}", judged[0].said);
        lab.markers = vec![RunMarker { at_ms: 3_000, kind: "scheduled".into() }];
        // 20 offered a second in two bins, 2 delivered: down, from 3.5 s for 10 s.
        lab.load.bins = (0..40)
            .map(|i| RunBin { t_ms: 3_500 + i * 500, offered: 10, delivered: if i == 7 { 12 } else { 1 } })
            .collect();
        lab.now_ms = 13_000;
        let judged = lab.judge(&[ClaimId::GoodputStaysDown], &Scope::default());
        assert_eq!(judged[0].verdict, Verdict::Pending, "not ten seconds yet: {}", judged[0].said);
        lab.now_ms = 13_600;
        let judged = lab.judge(&[ClaimId::GoodputStaysDown], &Scope::default());
        // The fourth second (bins 6 and 7) delivered 13 of 20: not down.
        assert_eq!(
            (judged[0].verdict, judged[0].figure.as_str()),
            (Verdict::Fails, "9 of 10 s"),
            "{}",
            judged[0].said
        );
        lab.load.bins[7].delivered = 1;
        let judged = lab.judge(&[ClaimId::GoodputStaysDown], &Scope::default());
        assert_eq!(judged[0].verdict, Verdict::Holds, "{}", judged[0].said);
        assert!(judged[0].said.ends_with("(20 of 200 delivered)"), "{}", judged[0].said);
    }

    #[test]
    fn goodput_back_needs_a_window_of_nine_in_ten_within_6_s_of_the_change_and_eight_in_ten_9_s_after() {
        let mut lab = run(serde_json::json!([]), (0, 0));
        // 20 offered a second; nothing delivered for the first 4 s after the change at 10 s.
        lab.load.bins = (0..40)
            .map(|i| RunBin { t_ms: 10_000 + i * 500, offered: 10, delivered: if i < 8 { 0 } else { 10 } })
            .collect();
        let scope = Scope { from_ms: Some(10_000), ..Scope::default() };
        lab.now_ms = 21_000;
        assert_eq!(lab.judge(&[ClaimId::GoodputBack], &scope)[0].verdict, Verdict::Pending);
        lab.now_ms = 22_000;
        let judged = &lab.judge(&[ClaimId::GoodputBack], &scope)[0];
        assert_eq!((judged.verdict, judged.figure.as_str()), (Verdict::Holds, "4 s"), "{}", judged.said);
        // Eight in ten 9 s after is still near the offered load; seven in ten is not.
        for bin in &mut lab.load.bins[18..24] {
            bin.delivered = 8;
        }
        assert_eq!(lab.judge(&[ClaimId::GoodputBack], &scope)[0].verdict, Verdict::Holds);
        for bin in &mut lab.load.bins[18..24] {
            bin.delivered = 7;
        }
        assert_eq!(lab.judge(&[ClaimId::GoodputBack], &scope)[0].verdict, Verdict::Fails);
        // Not back 9 s after: it fails, and says so.
        for bin in &mut lab.load.bins[18..24] {
            bin.delivered = 0;
        }
        let judged = &lab.judge(&[ClaimId::GoodputBack], &scope)[0];
        assert_eq!(judged.verdict, Verdict::Fails);
        assert_eq!(judged.said, "goodput back 4 s after the change, but not still 9 s after");
        // Without a change to measure from it never settles.
        assert_eq!(lab.judge(&[ClaimId::GoodputBack], &Scope::default())[0].verdict, Verdict::Pending);
        // Back only 8 s after the change: too late for goodput_back, in time for the slower
        // fix's claim, which settles 16 s after and looks again 13 s after.
        for (i, bin) in lab.load.bins.iter_mut().enumerate() {
            bin.delivered = if i < 16 { 0 } else { 10 };
        }
        lab.now_ms = 25_000;
        let judged = &lab.judge(&[ClaimId::GoodputBack], &scope)[0];
        assert_eq!(
            (judged.verdict, judged.said.as_str()),
            (Verdict::Fails, "goodput not back on the offered load within 6 s of the change")
        );
        let judged = &lab.judge(&[ClaimId::GoodputBackWithin10S], &scope)[0];
        assert_eq!(judged.verdict, Verdict::Pending);
        lab.now_ms = 26_000;
        let judged = &lab.judge(&[ClaimId::GoodputBackWithin10S], &scope)[0];
        assert_eq!((judged.verdict, judged.figure.as_str()), (Verdict::Holds, "8 s"), "{}", judged.said);
    }

    #[test]
    fn goodput_returns_holds_on_the_first_whole_window_back_within_10_s_and_asks_nothing_after() {
        let mut lab = run(serde_json::json!([]), (0, 0));
        // 20 offered a second; nothing delivered for the first 4 s after the change at 10 s,
        // then all of it, and from 9 s after the change nothing again (the breaker reopened).
        let delivered = |i: u64| if (8..18).contains(&i) { 10 } else { 0 };
        lab.load.bins = (0..40)
            .map(|i| RunBin { t_ms: 10_000 + i * 500, offered: 10, delivered: delivered(i) })
            .collect();
        let scope = Scope { from_ms: Some(10_000), ..Scope::default() };
        // The window from 4 s is whole at 7 s after the change, not before.
        lab.now_ms = 16_900;
        let judged = &lab.judge(&[ClaimId::GoodputReturns], &scope)[0];
        assert_eq!((judged.verdict, judged.figure.as_str()), (Verdict::Pending, "–"), "{}", judged.said);
        lab.now_ms = 17_000;
        let judged = &lab.judge(&[ClaimId::GoodputReturns], &scope)[0];
        assert_eq!((judged.verdict, judged.figure.as_str()), (Verdict::Holds, "4 s"), "{}", judged.said);
        assert_eq!(judged.said, "goodput back on the offered load 4 s after the change");
        // The stronger claim fails the same run: it is not still back 9 s after.
        lab.now_ms = 22_000;
        assert_eq!(lab.judge(&[ClaimId::GoodputBack], &scope)[0].verdict, Verdict::Fails);
        assert_eq!(lab.judge(&[ClaimId::GoodputReturns], &scope)[0].verdict, Verdict::Holds);
        // Back only after a second open spell, 9 s after the change: in time.
        for (i, bin) in lab.load.bins.iter_mut().enumerate() {
            bin.delivered = if i >= 18 { 10 } else { 0 };
        }
        let judged = &lab.judge(&[ClaimId::GoodputReturns], &scope)[0];
        assert_eq!((judged.verdict, judged.figure.as_str()), (Verdict::Holds, "9 s"), "{}", judged.said);
        // Never back within 10 s: it fails once the last window that could be has passed.
        for bin in &mut lab.load.bins {
            bin.delivered = 4;
        }
        lab.now_ms = 22_900;
        assert_eq!(lab.judge(&[ClaimId::GoodputReturns], &scope)[0].verdict, Verdict::Pending);
        lab.now_ms = 23_000;
        let judged = &lab.judge(&[ClaimId::GoodputReturns], &scope)[0];
        assert_eq!(
            (judged.verdict, judged.said.as_str()),
            (Verdict::Fails, "goodput not back on the offered load within 10 s of the change")
        );
    }

    #[test]
    fn goodput_follows_offered_reads_the_seconds_before_the_timed_change_once_its_flag_is_up() {
        let mut lab = run(serde_json::json!([]), (0, 0));
        // Traffic from 1 s; the change at 4 s, its ↩ flag at 6 s; nothing delivered after 4 s.
        lab.load.bins = (2..24)
            .map(|i| RunBin { t_ms: i * 500, offered: 5, delivered: if i < 8 { 5 } else { 0 } })
            .collect();
        let flag = |at_ms: u64, kind: &str| RunMarker { at_ms, kind: kind.to_owned() };
        lab.markers = vec![flag(0, "settings"), flag(4_000, "settings")];
        let judged = &lab.judge(&[ClaimId::GoodputFollowsOffered], &Scope::default())[0];
        assert_eq!(judged.verdict, Verdict::Pending, "no ↩ flag yet: {}", judged.said);
        lab.markers.push(flag(6_000, "scheduled"));
        lab.markers.push(flag(7_000, "settings"));
        let judged = &lab.judge(&[ClaimId::GoodputFollowsOffered], &Scope::default())[0];
        // The seconds from 1 s to 3.5 s: the last half second before the change is left out.
        assert_eq!((judged.verdict, judged.figure.as_str()), (Verdict::Holds, "25 of 25"), "{}", judged.said);
        // A bin before the change that delivered nothing: 20 of 25 is still eight in ten, 10 is not.
        lab.load.bins[0].delivered = 0;
        assert_eq!(
            lab.judge(&[ClaimId::GoodputFollowsOffered], &Scope::default())[0].verdict,
            Verdict::Holds
        );
        lab.load.bins[1].delivered = 0;
        lab.load.bins[2].delivered = 0;
        let judged = &lab.judge(&[ClaimId::GoodputFollowsOffered], &Scope::default())[0];
        assert_eq!((judged.verdict, judged.figure.as_str()), (Verdict::Fails, "10 of 25"), "{}", judged.said);
        // Too few new messages to say anything.
        lab.load.bins.iter_mut().for_each(|b| b.offered = 1);
        assert_eq!(
            lab.judge(&[ClaimId::GoodputFollowsOffered], &Scope::default())[0].verdict,
            Verdict::Fails
        );
    }

    #[test]
    fn every_claim_has_a_name_that_parses_back() {
        for id in ClaimId::ALL {
            assert_eq!(ClaimId::parse(id.name()), Some(id));
            assert_eq!(serde_json::to_value(id).unwrap(), id.name());
        }
        assert_eq!(ClaimId::parse("nope"), None);
    }
}

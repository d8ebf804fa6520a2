//! gRPC's hedging, as gRFC A6 ("gRPC Retry Design", github.com/grpc/proposal,
//! `A6-client-retries.md`, "Hedging Policy") specifies it: the first attempt goes at once, and
//! another every `hedgingDelay` while no answer has settled the call, up to `maxAttempts` in all;
//! the attempts overlap. An OK answer wins and every other attempt is cancelled; a status listed
//! in `nonFatalStatusCodes` sends the next hedge at once ("shortcutting its hedging delay"), and
//! the hedges after it resume at `hedgingDelay`; any other status is fatal: the others are
//! cancelled and the call fails with it. When every attempt has failed there is no retry.
//!
//! Hedges are throttled by the same token count as gRPC's retries (A6, "Throttling Retry
//! Attempts and Hedged RPCs"): the first attempt always goes, a hedge only while the count is
//! above `maxTokens / 2`; a hedge that may not go is not sent and no later one is. Here the
//! count is this protection's own (`max_tokens`, `token_ratio`, as the `grpc` kind's), and only
//! an answer with a non-fatal status takes a token ("The only RPCs that are counted as failures
//! for the throttling policy are RPCs that fail with a status code that qualifies as ...
//! non-fatal").
//!
//! Statuses are HTTP's here. The proposal's example list, `UNAVAILABLE`, `INTERNAL` and
//! `ABORTED`, is 503, 500 and 409 by google.rpc.Code's HTTP mapping (googleapis, `google/rpc/code.proto`:
//! "HTTP Mapping: 409 Conflict" for `ABORTED`), so the default makes the
//! endpoint's 409 ("a request with this key is in progress", what a hedge meets while its
//! sibling is in work) non-fatal: the hedge is spent and the next goes at once. Leave 409 out
//! and it is fatal: the hedge's 409 cancels the sibling that was about to succeed.
//!
//! The lab's client has a per-attempt timeout; gRPC has a deadline for the whole call ("call
//! deadlines apply to the entire chain of hedged requests"). Under hedging the policy's
//! `timeout_ms` is that deadline: each attempt is sent with what is left of it, and when it
//! passes the call fails, whatever is in flight.
//!
//! `HedgeRound` is the schedule of one message's round: pure, fed the time.

use std::collections::BTreeSet;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::grpc::{GrpcSettings, GrpcThrottle};
use super::{Ended, KindSettings, OutOfRange, Protection, Refuser, Report, within};

/// gRFC A6, "Limits on Retries and Hedges": `maxAttempts` "have, by default, a client-side
/// maximum value of 5 ... higher values will be treated as equal to the maximum value".
pub const MAX_HEDGED_ATTEMPTS: u32 = 5;

/// The most statuses `non_fatal_statuses` lists.
pub const MAX_NON_FATAL_STATUSES: usize = 8;

/// A short list of HTTP statuses, kept in place so the settings stay `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
#[schema(value_type = Vec<u16>)]
pub struct Statuses([u16; MAX_NON_FATAL_STATUSES]);

impl Statuses {
    pub fn of(listed: &[u16]) -> Option<Self> {
        let mut statuses = [0; MAX_NON_FATAL_STATUSES];
        (listed.len() <= MAX_NON_FATAL_STATUSES).then(|| {
            statuses[..listed.len()].copy_from_slice(listed);
            Statuses(statuses)
        })
    }

    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        self.0.iter().copied().filter(|&s| s != 0)
    }

    pub fn contains(&self, status: u16) -> bool {
        self.iter().any(|s| s == status)
    }
}

impl Serialize for Statuses {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Statuses {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let listed = Vec::<u16>::deserialize(deserializer)?;
        // The field's name between backticks: the policy's reader names the field at fault by it.
        let too_many = || {
            serde::de::Error::custom(format!(
                "`non_fatal_statuses` lists at most {MAX_NON_FATAL_STATUSES} statuses (MAX_NON_FATAL_STATUSES)"
            ))
        };
        Statuses::of(&listed).ok_or_else(too_many)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcHedgingSettings {
    /// Attempts in all, the first included (`maxAttempts`); above 5 it counts as 5.
    pub max_attempts: u32,
    /// The time between one attempt and the next hedge (`hedgingDelay`); 0 sends them all at once.
    pub hedging_delay_ms: u64,
    /// Statuses after which the other attempts may still succeed (`nonFatalStatusCodes`).
    pub non_fatal_statuses: Statuses,
    /// The throttle's tokens: what it starts with and holds at most (`maxTokens`).
    pub max_tokens: f64,
    /// What a success adds to them (`tokenRatio`).
    pub token_ratio: f64,
}

impl Default for GrpcHedgingSettings {
    /// `hedgingDelay` as the proposal has it when unset: "Set this to "0s", or leave unset, to
    /// immediately send all maxAttempts RPCs". The fields it requires take its example policy's
    /// values: `maxAttempts` 4, `UNAVAILABLE`, `INTERNAL` and `ABORTED` (503, 500, 409), and its
    /// `retryThrottling` example, 10 and 0.1. The `grpc-hedging` preset sets the example's
    /// `hedgingDelay`, ".5s".
    fn default() -> Self {
        GrpcHedgingSettings {
            max_attempts: 4,
            hedging_delay_ms: 0,
            non_fatal_statuses: Statuses::of(&[503, 500, 409]).expect("three fit"),
            max_tokens: 10.0,
            token_ratio: 0.1,
        }
    }
}

/// Its words, and its parameters' ranges (a policy listing it out of them is a 422 naming the
/// parameter).
impl KindSettings for GrpcHedgingSettings {
    const WORDS: &'static str = "gRPC hedging";

    fn check(&self) -> Result<(), OutOfRange> {
        // gRFC A6: `maxAttempts` "must be two or greater"; above 5 it counts as 5, so it is
        // taken up to a bound that says a number, not refused.
        within("max_attempts", f64::from(self.max_attempts), 2.0, 100.0)?;
        within("hedging_delay_ms", self.hedging_delay_ms as f64, 0.0, 60_000.0)?;
        // A6: "`nonFatalStatusCodes` is an optional field"; empty, every answer but OK is fatal.
        if let Some(bad) = self.non_fatal_statuses.iter().find(|status| !(400..=599).contains(status)) {
            let detail = format!("non_fatal_statuses must be 4xx or 5xx statuses, not {bad}");
            return Err(("non_fatal_statuses", detail));
        }
        within("max_tokens", self.max_tokens, 1.0, 1_000.0)?;
        within("token_ratio", self.token_ratio, 0.001, self.max_tokens)
    }
}

impl GrpcHedgingSettings {
    /// The attempts a round may send: `max_attempts`, treated as 5 above 5.
    pub fn attempts(&self) -> u32 {
        self.max_attempts.min(MAX_HEDGED_ATTEMPTS)
    }

    fn throttle(&self) -> GrpcSettings {
        GrpcSettings { max_tokens: self.max_tokens, token_ratio: self.token_ratio }
    }

    /// How a sent attempt's end reads under this policy.
    pub fn answer(&self, end: &Ended) -> Answer {
        // A6, "Pushback": "If the pushback says not to retry, no further hedged requests will be
        // sent. If the pushback says to retry after a given delay, the next hedged request (if
        // any) will be issued after the given delay has elapsed."
        // A pushback is read only on an answer that is not fatal: "If any other status code is
        // received, all outstanding RPCs are canceled and the error is returned", whatever
        // header it carries.
        if end.ok {
            return Answer::Ok;
        }
        let non_fatal = match end.status {
            Some(status) => self.non_fatal_statuses.contains(status),
            // No connection is gRPC's UNAVAILABLE (503): non-fatal when 503 is listed; the call's
            // deadline passing (DEADLINE_EXCEEDED) is fatal.
            None => end.failed && !end.timed_out && self.non_fatal_statuses.contains(503),
        };
        match (non_fatal, end.pushed_back, end.pushback_ms) {
            (false, _, _) => Answer::Fatal,
            (true, true, _) => Answer::NoMoreHedges,
            (true, false, Some(ms)) => Answer::NextAfter(u64::from(ms)),
            (true, false, None) => Answer::NonFatal,
        }
    }

    /// Whether the throttle counts this end as a failure: a non-fatal status (or a pushback not
    /// to retry), and nothing else.
    fn counts_as_failure(&self, ended: &Ended) -> bool {
        let listed = ended.status.is_some_and(|s| self.non_fatal_statuses.contains(s));
        let unreachable = ended.status.is_none() && ended.failed && !ended.timed_out;
        listed || ended.pushed_back || (unreachable && self.non_fatal_statuses.contains(503))
    }
}

/// What one attempt's end means for its round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// An OK answer: it wins.
    Ok,
    /// A non-fatal status: the next hedge goes at once.
    NonFatal,
    /// A server pushback with a delay: the next hedge goes after it.
    NextAfter(u64),
    /// A pushback not to retry: no more hedges; those in flight may still win.
    NoMoreHedges,
    /// Any other status, or the deadline: the call fails, the others are cancelled.
    Fatal,
    /// A protection refused to send it (the throttle): no more hedges go, as A6 cancels a
    /// throttled hedge; those in flight may still win.
    Refused,
}

/// The throttle's state: gRPC's token count.
#[derive(Debug, Clone, Default)]
pub struct GrpcHedging {
    tokens: GrpcThrottle,
}

impl Protection for GrpcHedging {
    type Settings = GrpcHedgingSettings;

    /// A6: "The first outgoing RPC will always be sent, but subsequent hedged RPCs will only be
    /// sent if `token_count` is greater than the threshold."
    fn gate(
        &mut self,
        settings: &GrpcHedgingSettings,
        n: u32,
        now_ms: u64,
        rng: &mut dyn rand::Rng,
    ) -> Result<(), String> {
        if n == 1 {
            return Ok(());
        }
        let throttle = settings.throttle();
        self.tokens.retry(&throttle, &Ended::failure(n), now_ms, rng).map_err(|_| {
            let tokens = self.tokens.report(&throttle, now_ms).level.unwrap_or(0.0);
            let threshold = settings.max_tokens / 2.0;
            format!("gRPC throttling has {tokens} tokens, a hedge needs more than {threshold}")
        })
    }

    /// Every answered attempt moves the count: a non-fatal one takes a token, an OK one adds
    /// `token_ratio`; a fatal status, a deadline or a cancelled attempt changes nothing.
    fn ended(&mut self, settings: &GrpcHedgingSettings, ended: &Ended, now_ms: u64) {
        let counted = Ended { failed: settings.counts_as_failure(ended), ..*ended };
        self.tokens.ended(&settings.throttle(), &counted, now_ms);
    }

    /// A6: "If all instances of a hedged RPC fail, there are no additional retry attempts."
    fn retry(
        &mut self,
        _settings: &GrpcHedgingSettings,
        _after: &Ended,
        _now_ms: u64,
        _rng: &mut dyn rand::Rng,
    ) -> Result<(), String> {
        Err("hedging makes no retries: every attempt it allows was sent as a hedge".into())
    }

    fn report(&self, settings: &GrpcHedgingSettings, now_ms: u64) -> Report {
        self.tokens.report(&settings.throttle(), now_ms)
    }
}

/// How a hedged round ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Attempt `n` answered OK; the ones still in flight are cancelled.
    Won(u32),
    /// Attempt `n`'s answer was fatal; the ones still in flight are cancelled.
    Fatal(u32),
    /// Every attempt sent has failed and no more will be: the last was attempt `n`.
    AllFailed { n: u32, why: AllFailed },
}

/// Why no more hedges came after the last failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllFailed {
    /// `max_attempts` were sent.
    AttemptsUsedUp,
    /// The throttle refused the next hedge.
    Throttled,
    /// A pushback said not to retry.
    Pushback,
    /// The call's deadline passed before the next hedge was due.
    Deadline,
}

/// One message's hedged round: which attempts are out, when the next is due, and whether
/// any more may go.
#[derive(Debug, Clone)]
pub struct HedgeRound {
    /// The attempt number of the next hedge to send.
    next_n: u32,
    /// The last number the round may send.
    last_n: u32,
    delay_ms: u64,
    /// When the next hedge is due.
    due_ms: u64,
    /// When the call's deadline passes (the round's start plus the policy's `timeout_ms`).
    deadline_ms: u64,
    in_flight: BTreeSet<u32>,
    /// The attempt that ended last, once one has.
    last_ended: u32,
    /// Why no more hedges go, once none will.
    stopped: Option<AllFailed>,
    /// The protection that refused a hedge, when one did (this one's throttle, or another).
    refused_by: Option<Refuser>,
}

impl HedgeRound {
    /// A round whose first attempt (number `first_n`: 1, or where a crash left it) is due at
    /// `started_ms`, with a deadline of `deadline_ms` after it.
    pub fn new(settings: &GrpcHedgingSettings, first_n: u32, started_ms: u64, deadline_ms: u64) -> Self {
        let last_n = settings.attempts();
        HedgeRound {
            next_n: first_n,
            last_n,
            delay_ms: settings.hedging_delay_ms,
            due_ms: started_ms,
            deadline_ms: started_ms.saturating_add(deadline_ms),
            in_flight: BTreeSet::new(),
            last_ended: first_n.saturating_sub(1),
            stopped: None,
            refused_by: None,
        }
    }

    /// The attempt to send now, if one is due.
    pub fn due(&self, now_ms: u64) -> Option<u32> {
        (self.open(now_ms) && now_ms >= self.due_ms).then_some(self.next_n)
    }

    /// Whether another hedge may still go at `now_ms`: nothing stopped the round (a pushback
    /// not to retry, the throttle, the attempts used up) and the call's deadline has not passed.
    pub fn open(&self, now_ms: u64) -> bool {
        self.stopped.is_none() && self.next_n <= self.last_n && now_ms < self.deadline_ms
    }

    /// When to look again for a hedge to send (`None`: no more will go).
    pub fn wake_at(&self) -> Option<u64> {
        (self.stopped.is_none() && self.next_n <= self.last_n).then_some(self.due_ms.min(self.deadline_ms))
    }

    /// How long an attempt sent at `now_ms` may take: what is left of the call's deadline.
    pub fn timeout_at(&self, now_ms: u64) -> u64 {
        self.deadline_ms.saturating_sub(now_ms).max(1)
    }

    /// A protection (`kind`) refused to send a hedge; `answered` with `Answer::Refused` follows.
    pub fn refused_by(&mut self, kind: Refuser) {
        self.refused_by.get_or_insert(kind);
    }

    /// The protection that refused a hedge, if one did.
    pub fn refusal(&self) -> Option<Refuser> {
        self.refused_by
    }

    /// The attempts in flight.
    pub fn in_flight(&self) -> impl Iterator<Item = u32> + '_ {
        self.in_flight.iter().copied()
    }

    /// Attempt `n` was sent at `now_ms`: the next is due a `hedgingDelay` later.
    pub fn sent(&mut self, n: u32, now_ms: u64) {
        self.in_flight.insert(n);
        self.next_n = n + 1;
        self.due_ms = now_ms.saturating_add(self.delay_ms);
        if self.next_n > self.last_n {
            self.stopped = Some(AllFailed::AttemptsUsedUp);
        }
    }

    /// No more hedges are due before the deadline passes: the round ends when the ones in
    /// flight have, and past the deadline they are cut off by their own timeouts.
    pub fn check_deadline(&mut self, now_ms: u64) -> Option<Settled> {
        if now_ms >= self.deadline_ms && self.stopped.is_none() {
            self.stopped = Some(AllFailed::Deadline);
        }
        self.settle_if_done()
    }

    /// Attempt `n` ended at `now_ms` as `answer` says: the round is settled, or goes on.
    pub fn answered(&mut self, n: u32, answer: Answer, now_ms: u64) -> Option<Settled> {
        self.in_flight.remove(&n);
        self.last_ended = n;
        match answer {
            Answer::Ok => return Some(Settled::Won(n)),
            Answer::Fatal => return Some(Settled::Fatal(n)),
            // "the next hedged request in line is sent immediately, shortcutting its hedging
            // delay"; never later than it was due anyway.
            Answer::NonFatal => self.due_ms = self.due_ms.min(now_ms),
            // "Send next hedged request in n ms. Subsequent hedged requests will resume at
            // n + hedgingDelay" (`sent` adds the delay to the time it goes).
            Answer::NextAfter(ms) => self.due_ms = now_ms.saturating_add(ms),
            Answer::NoMoreHedges => {
                self.stopped.get_or_insert(AllFailed::Pushback);
            }
            // A6: the throttled hedge "is cancelled, and if there are no other already-sent
            // hedged RPCs the failure is returned"; no later hedge goes either.
            Answer::Refused => self.stopped = Some(AllFailed::Throttled),
        }
        self.check_deadline(now_ms)
    }

    fn settle_if_done(&self) -> Option<Settled> {
        let why = self.stopped?;
        let n = self.last_ended;
        (self.in_flight.is_empty() && n > 0).then_some(Settled::AllFailed { n, why })
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    fn settings(max_attempts: u32, hedging_delay_ms: u64) -> GrpcHedgingSettings {
        GrpcHedgingSettings { max_attempts, hedging_delay_ms, ..GrpcHedgingSettings::default() }
    }

    /// Sends every hedge that is due at each ms from 0 to `until_ms`; returns when each went.
    fn send_due(round: &mut HedgeRound, until_ms: u64) -> Vec<(u32, u64)> {
        let mut sent = Vec::new();
        for now in 0..=until_ms {
            while let Some(n) = round.due(now) {
                round.sent(n, now);
                sent.push((n, now));
            }
        }
        sent
    }

    /// An answer with `status`: a 2xx is a success, anything else a failure.
    fn answered(status: u16) -> Ended {
        let ok = (200..300).contains(&status);
        Ended { n: 1, ok, failed: !ok, status: Some(status), ..Ended::default() }
    }

    #[test]
    fn the_first_attempt_goes_at_once_and_a_hedge_every_delay_up_to_max_attempts() {
        let mut round = HedgeRound::new(&settings(4, 500), 1, 0, 10_000);
        assert_eq!(send_due(&mut round, 3_000), [(1, 0), (2, 500), (3, 1_000), (4, 1_500)]);
        assert_eq!(round.in_flight().collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(round.wake_at(), None, "no fifth");
        // The defaults, as a policy writes them: A6's unset delay, its example's other fields.
        let spec: super::super::ProtectionSpec = serde_json::from_str(r#"{"kind": "grpc_hedging"}"#).unwrap();
        assert_eq!(
            serde_json::to_value(spec).unwrap(),
            serde_json::json!({"kind": "grpc_hedging", "max_attempts": 4, "hedging_delay_ms": 0,
                "non_fatal_statuses": [503, 500, 409], "max_tokens": 10.0, "token_ratio": 0.1, "scope": "per_client"})
        );
        // The proposal's "0s" (and its unset delay) sends every attempt at once.
        let mut at_once = HedgeRound::new(&settings(3, 0), 1, 200, 10_000);
        assert_eq!(send_due(&mut at_once, 200), [(1, 200), (2, 200), (3, 200)]);
    }

    #[test]
    fn max_attempts_above_five_counts_as_five() {
        let mut round = HedgeRound::new(&settings(9, 10), 1, 0, 10_000);
        let sent = send_due(&mut round, 1_000);
        assert_eq!(sent.len(), 5, "{sent:?}");
        assert_eq!(sent.last(), Some(&(5, 40)));
        assert_eq!(settings(9, 10).attempts(), 5);
        assert_eq!(settings(3, 10).attempts(), 3);
    }

    #[test]
    fn a_non_fatal_status_sends_the_next_hedge_at_once_and_the_ones_after_resume_at_the_delay() {
        let hedging = settings(4, 500);
        let mut round = HedgeRound::new(&hedging, 1, 0, 10_000);
        assert_eq!(send_due(&mut round, 0), [(1, 0)]);
        // Attempt 1 answers 503 at 120 ms: attempt 2 goes then, not at 500.
        let answer = hedging.answer(&answered(503));
        assert_eq!(answer, Answer::NonFatal);
        assert_eq!(round.answered(1, answer, 120), None);
        assert_eq!(round.due(120), Some(2));
        round.sent(2, 120);
        assert_eq!(round.due(619), None);
        assert_eq!(round.due(620), Some(3), "the delay counts again from the hedge sent early");
        // The sibling in work makes the endpoint answer 409: non-fatal by the default list.
        assert_eq!(hedging.answer(&answered(409)), Answer::NonFatal);
        // No connection is UNAVAILABLE; on a non-fatal answer a pushback sets what follows.
        assert_eq!(hedging.answer(&Ended::failure(1)), Answer::NonFatal);
        assert_eq!(
            hedging.answer(&Ended { pushback_ms: Some(700), ..answered(500) }),
            Answer::NextAfter(700)
        );
        assert_eq!(hedging.answer(&Ended { pushed_back: true, ..answered(503) }), Answer::NoMoreHedges);
        assert_eq!(hedging.answer(&answered(404)), Answer::Fatal, "not listed");
        // A fatal status is fatal whatever pushback it carries: the others are cancelled.
        assert_eq!(hedging.answer(&Ended { pushback_ms: Some(200), ..answered(404) }), Answer::Fatal);
        assert_eq!(hedging.answer(&Ended { pushed_back: true, ..answered(404) }), Answer::Fatal);
        // An empty list (A6: the field is optional): every answer but OK is fatal.
        let none = GrpcHedgingSettings { non_fatal_statuses: Statuses::of(&[]).unwrap(), ..hedging };
        assert_eq!(none.answer(&answered(503)), Answer::Fatal);
        assert_eq!(none.answer(&Ended::failure(1)), Answer::Fatal);
        assert_eq!(none.answer(&answered(200)), Answer::Ok);
    }

    #[test]
    fn a_success_wins_and_a_fatal_status_ends_the_round_with_others_in_flight() {
        let hedging = settings(4, 100);
        let mut round = HedgeRound::new(&hedging, 1, 0, 10_000);
        send_due(&mut round, 250);
        assert_eq!(round.in_flight().collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(round.answered(2, hedging.answer(&answered(200)), 260), Some(Settled::Won(2)));
        assert_eq!(round.in_flight().collect::<Vec<_>>(), [1, 3], "these are cancelled");
        // Without 409 in the list, a sibling's 409 is fatal.
        let strict = GrpcHedgingSettings { non_fatal_statuses: Statuses::of(&[503]).unwrap(), ..hedging };
        let mut round = HedgeRound::new(&strict, 1, 0, 10_000);
        send_due(&mut round, 100);
        let answer = strict.answer(&answered(409));
        assert_eq!(round.answered(2, answer, 101), Some(Settled::Fatal(2)));
        // The deadline passing is fatal too (DEADLINE_EXCEEDED is no listed status).
        assert_eq!(hedging.answer(&Ended::timeout(1)), Answer::Fatal);
    }

    #[test]
    fn the_round_fails_when_every_attempt_sent_has_failed_and_no_more_will_go() {
        let hedging = settings(2, 100);
        let mut round = HedgeRound::new(&hedging, 1, 0, 10_000);
        send_due(&mut round, 100);
        assert_eq!(round.answered(1, Answer::NonFatal, 150), None, "attempt 2 is still out");
        let last = round.answered(2, Answer::NonFatal, 180);
        assert_eq!(last, Some(Settled::AllFailed { n: 2, why: AllFailed::AttemptsUsedUp }));
        // A pushback not to retry stops the hedges; the one in flight may still win.
        let mut round = HedgeRound::new(&settings(4, 100), 1, 0, 10_000);
        send_due(&mut round, 100);
        assert!(round.open(110));
        assert_eq!(round.answered(1, Answer::NoMoreHedges, 120), None);
        assert_eq!(round.due(1_000), None);
        // A hedge admitted meanwhile (it waited for a connection) sees the round closed, and the
        // producer does not send it.
        assert!(!round.open(121));
        assert_eq!(round.answered(2, Answer::Ok, 130), Some(Settled::Won(2)));
        // A pushback with a delay sets when the next goes; the ones after add the delay to it.
        let mut round = HedgeRound::new(&settings(4, 100), 1, 0, 10_000);
        send_due(&mut round, 0);
        assert_eq!(round.answered(1, Answer::NextAfter(700), 50), None);
        assert_eq!(round.due(749), None);
        assert_eq!(send_due(&mut round, 900), [(2, 750), (3, 850)]);
    }

    #[test]
    fn no_hedge_is_due_past_the_deadline_and_each_is_sent_with_what_is_left_of_it() {
        let mut round = HedgeRound::new(&settings(4, 500), 1, 1_000, 1_200);
        assert!(round.open(2_199) && !round.open(2_200), "closed once the call's deadline passes");
        assert_eq!(send_due(&mut round, 3_000), [(1, 1_000), (2, 1_500), (3, 2_000)]);
        assert_eq!(round.timeout_at(2_000), 200);
        assert_eq!(round.check_deadline(2_200), None, "three are still out");
        assert_eq!(round.due(2_500), None, "past the deadline no fourth goes");
        for n in [1, 2] {
            assert_eq!(round.answered(n, Answer::Fatal, 2_200), Some(Settled::Fatal(n)));
        }
    }

    #[test]
    fn the_throttle_stops_hedges_at_half_the_tokens_but_never_the_first_attempt() {
        let hedging = settings(4, 500);
        let mut state = GrpcHedging::default();
        let mut rng = StdRng::seed_from_u64(9);
        let answered = |status| Ended { status: Some(status), ..Ended::failure(2) };
        // A 500 (listed) takes a token; a 404 (not listed) does not; a 409 does.
        state.ended(&hedging, &answered(500), 0);
        state.ended(&hedging, &Ended { status: Some(404), failed: false, ..Ended::failure(2) }, 0);
        state.ended(&hedging, &answered(409), 0);
        assert_eq!(state.report(&hedging, 0).level, Some(8.0));
        for _ in 0..2 {
            state.ended(&hedging, &answered(503), 0);
        }
        assert!(state.gate(&hedging, 2, 0, &mut rng).is_ok(), "6 tokens: above 5");
        state.ended(&hedging, &answered(503), 0);
        let refused = state.gate(&hedging, 2, 0, &mut rng).unwrap_err();
        assert_eq!(refused, "gRPC throttling has 5 tokens, a hedge needs more than 5");
        assert!(state.gate(&hedging, 1, 0, &mut rng).is_ok(), "the first attempt always goes");
        // The refused hedge stops the round's hedges; with nothing in flight it fails.
        let mut round = HedgeRound::new(&hedging, 1, 0, 10_000);
        send_due(&mut round, 0);
        assert_eq!(round.answered(1, Answer::NonFatal, 10), None);
        round.sent(2, 10);
        assert_eq!(
            round.answered(2, Answer::Refused, 10),
            Some(Settled::AllFailed { n: 2, why: AllFailed::Throttled })
        );
        // With the first still in flight, it may still win.
        let mut round = HedgeRound::new(&hedging, 1, 0, 10_000);
        send_due(&mut round, 0);
        send_due(&mut round, 500);
        assert_eq!(round.answered(2, Answer::Refused, 500), None);
        assert_eq!(round.wake_at(), None);
        // One success earns 0.1 back: just over the threshold, hedges go again.
        state.ended(&hedging, &Ended::success(1), 0);
        assert!(state.gate(&hedging, 2, 0, &mut rng).is_ok());
    }
}

//! What follows an attempt, decided in one place. Pure: no I/O and no clock of its own; the
//! caller passes the time, the round's budget and the message's random stream, so a seeded
//! run decides the same way every time.
//!
//! The order of the checks is the policy: an answer that delivers or cannot be fixed by
//! retrying ends the round first; then a refusal by the open breaker that gives up; then the
//! attempts used up; then the wait is planned (by the policy's backoff, or by a listed
//! protection that sets its own, as the AWS 2026 mode does), and the next attempt must start
//! within the round's time budget; last the protections are asked, in the client's one order
//! (`client::ORDER`: the retry budget, each one the policy lists, the breaker; each counts the
//! retry it allows, and gives it back when a later one refuses).

use rand::Rng;

use super::{ClientState, Stopped};
use crate::dlq::Cause;
use crate::domain::{AttemptEnd, Pushback};
use crate::retry::protection::{Ended, ProtectionKind, Refuser};
use crate::retry::{self, Outcome, Policy, Refused, Verdict, Wait, WaitReason};

/// Where a message's round stands between its attempts; the sending loop keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Round {
    /// When the round's first attempt started, once one has.
    pub started_ms: Option<u64>,
    /// The last wait's value chosen from its band (decorrelated jitter grows from it).
    pub previous_wait_ms: Option<u64>,
    /// The failure before the coming retry timed out (the AWS quota prices such a retry
    /// higher and gives that back when it succeeds); not kept across a crash.
    pub after_timeout: bool,
    /// The failure before the coming retry was a throttling answer (429), which the AWS
    /// 2026 quota prices lower; not kept across a crash.
    pub after_throttled: bool,
    /// The attempt whose answer last named a wait (a pushback of 0 ms or more): the backoff
    /// counts again from the initial one after it; 0 when none did. Not kept across a crash.
    pub pushed_at: u32,
}

impl Round {
    /// Attempt `n` as the protections hear of it, with what the retry that made it followed.
    pub fn ended(&self, n: u32, end: &AttemptEnd) -> Ended {
        Ended { after_timeout: self.after_timeout, after_throttled: self.after_throttled, ..ended(n, end) }
    }
}

/// How long one round may last, and the setting that says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeBudget {
    pub ms: u64,
    pub setting: &'static str,
}

/// What comes after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// The message was delivered.
    Delivered,
    /// Wait (its nominal, band, floor and chosen values), then attempt again.
    Retry(Wait),
    /// The round ends in the dead-letter queue, for this cause.
    DeadLetter(Cause, String),
    /// A protection refused the retry: the round ends in the dead-letter queue with the
    /// protection's cause (`Cause::refused_by`), for this reason, and the refusal is counted
    /// as the protection's.
    Refused(Stopped, String),
}

/// One attempt as it ended: its number in the round, what came back, when it was judged, and
/// the protection that refused it, when one did (it was not sent).
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    pub n: u32,
    pub end: &'a AttemptEnd,
    pub now_ms: u64,
    pub refused: Option<&'a Stopped>,
}

/// Whether attempt `n` may start at all: after a crash cut off the attempt that used up the
/// policy's attempts, the round ends before another.
pub fn before(policy: &Policy, n: u32) -> Option<Next> {
    (n > policy.attempts_per_round()).then(|| {
        let spent = n - 1;
        let reason = format!("attempts used up ({spent}); last: interrupted by a client crash");
        Next::DeadLetter(Cause::AttemptsUsedUp, reason)
    })
}

/// What comes after `attempt`, made under `policy`. Notes the round's start, and the wait's
/// chosen value when it retries; the client's protections, as the policy it follows now sets
/// them, count the retry they allow.
pub fn next(
    policy: &Policy,
    budget: TimeBudget,
    Attempt { n, end, now_ms, refused }: Attempt,
    round: &mut Round,
    (following, client): (&Policy, &mut ClientState),
    rng: &mut impl Rng,
) -> Next {
    let round_started_ms = *round.started_ms.get_or_insert(now_ms.saturating_sub(end.duration_ms));
    let last = match refused {
        Some(Stopped { kind: Refuser::Breaker, .. }) | None => describe(end, policy.timeout_ms),
        Some(Stopped { kind, why }) => format!("refused by {kind}: {why}"),
    };
    match retry::classify_with(end.outcome, end.status, policy.retry_statuses.as_deref()) {
        Verdict::Delivered => return Next::Delivered,
        Verdict::GiveUp => return Next::DeadLetter(Cause::Permanent, format!("permanent error: {last}")),
        Verdict::Retry => {}
    }
    // gRFC A6, "Pushback": a negative or unparseable pushback is "the server asking the client
    // not to retry at all"; the round ends on it, whatever attempts are left.
    if end.pushback == Some(Pushback::DoNotRetry) {
        let reason = format!("pushback: the endpoint said not to retry (X-Retry-Pushback-Ms); last: {last}");
        return Next::DeadLetter(Cause::Pushback, reason);
    }
    let by_breaker =
        end.outcome == Outcome::ShortCircuited && refused.is_none_or(|s| s.kind == Refuser::Breaker);
    if by_breaker && policy.breaker.is_some_and(|b| b.refused == Refused::GiveUp) {
        let reason = format!("circuit open: the breaker refused attempt {n}, and a refusal ends the round");
        return Next::DeadLetter(Cause::CircuitOpen, reason);
    }
    if n >= policy.max_attempts {
        return match (by_breaker, refused) {
            (true, _) => Next::DeadLetter(
                Cause::CircuitOpen,
                format!("circuit open: the breaker refused attempt {n} of {n}"),
            ),
            // Another protection that refused to send the last attempt: the round ends on it.
            (false, Some(stopped)) => {
                Next::DeadLetter(Cause::refused_by(stopped.kind), format!("attempt {n} of {n} {last}"))
            }
            (false, None) => {
                Next::DeadLetter(Cause::AttemptsUsedUp, format!("attempts used up ({n}); last: {last}"))
            }
        };
    }
    let failed = round.ended(n, end);
    // gRFC A6, "Pushback": a client told to retry after a given delay "will retry after exactly
    // that delay. For subsequent retries, the delay period will be reset to the initialBackoff
    // setting and scale according to the Exponential Backoff section".
    let wait = match end.pushback {
        Some(Pushback::AfterMs(ms)) => {
            round.pushed_at = n;
            let ms = u64::from(ms);
            Wait {
                nominal_ms: ms,
                low_ms: ms,
                high_ms: ms,
                chosen_ms: ms,
                floor_ms: None,
                planned_ms: ms,
                reason: WaitReason::Pushback,
            }
        }
        _ => {
            let wait = retry::plan_wait(
                &policy.backoff(),
                policy.retry_after_rule(),
                n - round.pushed_at,
                round.previous_wait_ms.filter(|_| round.pushed_at == 0 || n > round.pushed_at + 1),
                end.retry_after_s,
                rng,
            );
            // A protection that sets its own waits (the AWS 2026 mode's) plans this one, also
            // counting again from its first after a pushback.
            let counted = Ended { n: n - round.pushed_at, ..failed };
            client.wait(&counted, end.retry_after_s, rng).unwrap_or(wait)
        }
    };
    if now_ms + wait.planned_ms > round_started_ms.saturating_add(budget.ms) {
        let TimeBudget { ms, setting } = budget;
        let reason =
            format!("time budget: the next attempt would start past {ms} ms ({setting}); last: {last}");
        return Next::DeadLetter(Cause::TimeBudget, reason);
    }
    if let Err(stopped) = client.allows_retry(following, &failed, now_ms, rng) {
        let reason = match stopped.kind {
            Refuser::Kind(ProtectionKind::RetryBudget) => {
                format!("retry budget spent: {}; last: {last}", stopped.why)
            }
            kind => format!("retry not sent ({kind}): {}; last: {last}", stopped.why),
        };
        return Next::Refused(stopped, reason);
    }
    round.previous_wait_ms = Some(wait.chosen_ms);
    round.after_timeout = failed.timed_out;
    round.after_throttled = failed.throttled;
    Next::Retry(wait)
}

/// Attempt `n` as the protections hear of it (`after_timeout` is the round's to say).
pub fn ended(n: u32, end: &AttemptEnd) -> Ended {
    Ended {
        n,
        ok: end.outcome == Outcome::Ok,
        failed: end.outcome.is_failure(end.status),
        timed_out: end.outcome == Outcome::Timeout,
        throttled: end.status == Some(429),
        status: end.status,
        pushed_back: end.pushback == Some(Pushback::DoNotRetry),
        pushback_ms: match end.pushback {
            Some(Pushback::AfterMs(ms)) => Some(ms),
            _ => None,
        },
        ..Ended::default()
    }
}

/// How an attempt ended, in words, for a dead letter's reason.
pub fn describe(end: &AttemptEnd, timeout_ms: u64) -> String {
    match (end.outcome, end.status) {
        (_, Some(status)) => format!("HTTP {status}"),
        (Outcome::Timeout, None) => format!("no answer within {timeout_ms} ms"),
        (Outcome::ShortCircuited, None) => "short-circuited by the open breaker".into(),
        (Outcome::Interrupted, None) => "the client died mid-attempt".into(),
        (_, None) => "connection failed".into(),
    }
}

/// The seed of one message's random stream under a seeded policy: each client's streams are
/// its own, and the first client's are those of a lone client.
pub fn stream_seed(seed: u64, client: u64, message_id: u64) -> u64 {
    seed ^ client.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ message_id.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::retry::protection::{Aws2026Settings, ProtectionSettings, ProtectionSpec, Scope};
    use crate::retry::{BreakerSettings, BudgetSettings, Jitter};

    const BUDGET: TimeBudget = TimeBudget { ms: 60_000, setting: "max_retry_duration_ms" };

    fn policy() -> Policy {
        Policy { base_ms: 100, cap_ms: 1_000, max_attempts: 3, timeout_ms: 500, ..Policy::default() }
    }

    fn end(outcome: Outcome, status: Option<u16>) -> AttemptEnd {
        AttemptEnd { duration_ms: 20, status, outcome, replayed: false, retry_after_s: None, pushback: None }
    }

    fn decide(policy: &Policy, n: u32, end: &AttemptEnd, now_ms: u64, round: &mut Round) -> Next {
        let mut client = ClientState::default();
        next(
            policy,
            BUDGET,
            Attempt { n, end, now_ms, refused: None },
            round,
            (policy, &mut client),
            &mut StdRng::seed_from_u64(7),
        )
    }

    #[test]
    fn a_2xx_delivers_and_a_4xx_gives_up_at_once() {
        let mut round = Round::default();
        assert_eq!(decide(&policy(), 1, &end(Outcome::Ok, Some(200)), 1_000, &mut round), Next::Delivered);
        // The round starts when its first attempt did: its end less its duration.
        assert_eq!(round.started_ms, Some(980));
        let given_up =
            decide(&policy(), 1, &end(Outcome::HttpError, Some(400)), 1_000, &mut Round::default());
        assert_eq!(given_up, Next::DeadLetter(Cause::Permanent, "permanent error: HTTP 400".into()));
    }

    #[test]
    fn a_transient_failure_retries_after_the_planned_wait_drawn_from_the_seeded_stream() {
        let mut round = Round::default();
        let Next::Retry(wait) = decide(&policy(), 2, &end(Outcome::HttpError, Some(503)), 1_000, &mut round)
        else {
            panic!("a 503 on attempt 2 of 3 retries")
        };
        // Equal jitter on attempt 2: nominal 200, the band its upper half.
        assert_eq!((wait.nominal_ms, wait.low_ms, wait.high_ms), (200, 100, 200));
        assert!((100..=200).contains(&wait.chosen_ms), "{wait:?}");
        assert_eq!(wait.planned_ms, wait.chosen_ms);
        assert_eq!(round.previous_wait_ms, Some(wait.chosen_ms));
        // The same seed draws the same wait.
        let again = decide(&policy(), 2, &end(Outcome::HttpError, Some(503)), 1_000, &mut Round::default());
        assert_eq!(again, Next::Retry(wait));
    }

    #[test]
    fn retry_after_is_the_floor_of_the_wait() {
        let answer = AttemptEnd { retry_after_s: Some(2), ..end(Outcome::HttpError, Some(503)) };
        let policy = Policy { jitter: Jitter::Full, ..policy() };
        let Next::Retry(wait) = decide(&policy, 1, &answer, 0, &mut Round::default()) else { panic!() };
        assert_eq!((wait.floor_ms, wait.planned_ms), (Some(2_000), 2_000));
    }

    #[test]
    fn a_pushback_not_to_retry_ends_the_round_with_attempts_left_and_a_wait_one_does_not() {
        let told = |pushback| AttemptEnd { pushback: Some(pushback), ..end(Outcome::HttpError, Some(503)) };
        let stop = decide(&policy(), 1, &told(Pushback::DoNotRetry), 0, &mut Round::default());
        assert_eq!(
            stop,
            Next::DeadLetter(
                Cause::Pushback,
                "pushback: the endpoint said not to retry (X-Retry-Pushback-Ms); last: HTTP 503".into()
            )
        );
        let wait = decide(&policy(), 1, &told(Pushback::AfterMs(0)), 0, &mut Round::default());
        assert!(matches!(wait, Next::Retry(_)), "{wait:?}");
        // A success says nothing of retrying.
        let ok = AttemptEnd { pushback: Some(Pushback::DoNotRetry), ..end(Outcome::Ok, Some(200)) };
        assert_eq!(decide(&policy(), 1, &ok, 0, &mut Round::default()), Next::Delivered);
    }

    #[test]
    fn a_pushback_wait_replaces_the_backoff_once_and_resets_it() {
        let policy = Policy { jitter: Jitter::None, multiplier: 2.0, max_attempts: 5, ..policy() };
        let failed = end(Outcome::HttpError, Some(503));
        let told = |ms| AttemptEnd { pushback: Some(Pushback::AfterMs(ms)), ..failed };
        let planned = |next: Next| match next {
            Next::Retry(wait) => (wait.planned_ms, wait.reason),
            other => panic!("{other:?}"),
        };
        // Without a pushback: 100, 200, 400 ms.
        let mut plain = Round::default();
        let waits: Vec<_> = (1..=3).map(|n| planned(decide(&policy, n, &failed, 0, &mut plain)).0).collect();
        assert_eq!(waits, [100, 200, 400]);
        // Attempt 2 told to wait 750 ms: exactly that, then the backoff starts again at 100.
        let mut round = Round::default();
        assert_eq!(planned(decide(&policy, 1, &failed, 0, &mut round)), (100, WaitReason::Backoff));
        assert_eq!(planned(decide(&policy, 2, &told(750), 0, &mut round)), (750, WaitReason::Pushback));
        assert_eq!(planned(decide(&policy, 3, &failed, 0, &mut round)), (100, WaitReason::Backoff));
        assert_eq!(planned(decide(&policy, 4, &failed, 0, &mut round)), (200, WaitReason::Backoff));
        // A pushback of 0 ms means at once; with no attempts left it does not retry.
        assert_eq!(
            planned(decide(&policy, 1, &told(0), 0, &mut Round::default())),
            (0, WaitReason::Pushback)
        );
        let last = decide(&policy, 5, &told(10), 0, &mut Round::default());
        assert!(matches!(last, Next::DeadLetter(Cause::AttemptsUsedUp, _)), "{last:?}");
        // Decorrelated jitter grows from the last wait: after a pushback it starts from the base.
        let decorrelated = Policy { jitter: Jitter::Decorrelated, ..policy };
        let mut round = Round::default();
        planned(decide(&decorrelated, 1, &told(900), 0, &mut round));
        let Next::Retry(wait) = decide(&decorrelated, 2, &failed, 0, &mut round) else { panic!() };
        assert_eq!(wait.high_ms, 300, "3 × the base, not 3 × the 900 ms pushback: {wait:?}");
    }

    #[test]
    fn after_a_pushback_a_protections_own_waits_count_again_from_the_first() {
        let quota = ProtectionSettings::AwsStandard2026(Aws2026Settings::default());
        let listed = ProtectionSpec { settings: quota, scope: Scope::PerClient };
        let policy = Policy { max_attempts: 5, protections: vec![listed], ..Policy::default() };
        let mut clients = super::super::Clients::restore(policy.clone(), Default::default());
        let (following, client) = clients.client_mut(0);
        let following = following.clone();
        let failed = end(Outcome::HttpError, Some(503));
        let told = AttemptEnd { pushback: Some(Pushback::AfterMs(300)), ..failed };
        let mut round = Round::default();
        let mut rng = StdRng::seed_from_u64(4);
        let mut decide = |n, end: &AttemptEnd| {
            let attempt = Attempt { n, end, now_ms: 0, refused: None };
            match next(&policy, BUDGET, attempt, &mut round, (&following, &mut *client), &mut rng) {
                Next::Retry(wait) => (wait.nominal_ms, wait.reason),
                other => panic!("{other:?}"),
            }
        };
        // The 2026 mode's own waits: up to 50 ms x 2^(n-1).
        assert_eq!(decide(1, &failed).0, 50);
        assert_eq!(decide(2, &told), (300, WaitReason::Pushback));
        assert_eq!(decide(3, &failed).0, 50, "from the first again, not 200");
        assert_eq!(decide(4, &failed).0, 100);
    }

    #[test]
    fn a_pushback_is_read_as_grfc_a6_says() {
        for (value, read) in [
            ("0", Pushback::AfterMs(0)),
            ("250", Pushback::AfterMs(250)),
            ("-1", Pushback::DoNotRetry),
            ("-250", Pushback::DoNotRetry),
            ("soon", Pushback::DoNotRetry),
            ("", Pushback::DoNotRetry),
            ("1.5", Pushback::DoNotRetry),
            ("4294967296", Pushback::DoNotRetry),
        ] {
            assert_eq!(Pushback::parse(value.as_bytes()), read, "{value:?}");
        }
    }

    #[test]
    fn the_last_attempt_uses_the_attempts_up_and_says_how_it_ended() {
        let timed_out = decide(&policy(), 3, &end(Outcome::Timeout, None), 5_000, &mut Round::default());
        let reason = "attempts used up (3); last: no answer within 500 ms";
        assert_eq!(timed_out, Next::DeadLetter(Cause::AttemptsUsedUp, reason.into()));
        let refused = decide(&policy(), 3, &end(Outcome::ShortCircuited, None), 5_000, &mut Round::default());
        let reason = "circuit open: the breaker refused attempt 3 of 3";
        assert_eq!(refused, Next::DeadLetter(Cause::CircuitOpen, reason.into()));
    }

    #[test]
    fn a_refusal_that_gives_up_ends_the_round_on_any_attempt() {
        let breaker = BreakerSettings {
            failure_threshold: 2,
            open_ms: 1_000,
            half_open_probes: 1,
            refused: Refused::GiveUp,
        };
        let policy = Policy { breaker: Some(breaker), ..policy() };
        let refused = decide(&policy, 1, &end(Outcome::ShortCircuited, None), 0, &mut Round::default());
        let reason = "circuit open: the breaker refused attempt 1, and a refusal ends the round";
        assert_eq!(refused, Next::DeadLetter(Cause::CircuitOpen, reason.into()));
        // Refused with `retry`, it backs off like any failed attempt.
        let policy =
            Policy { breaker: Some(BreakerSettings { refused: Refused::Retry, ..breaker }), ..policy };
        let refused = decide(&policy, 1, &end(Outcome::ShortCircuited, None), 0, &mut Round::default());
        assert!(matches!(refused, Next::Retry(_)), "{refused:?}");
    }

    #[test]
    fn a_wait_that_would_end_past_the_time_budget_ends_the_round() {
        // The round began at 0; the next attempt would start at 9 950 + at least 100.
        let mut round = Round { started_ms: Some(0), ..Round::default() };
        let budget = TimeBudget { ms: 10_000, setting: "max_total_ms" };
        let failed = end(Outcome::HttpError, Some(500));
        let mut decide_at = |now_ms| {
            let attempt = Attempt { n: 2, end: &failed, now_ms, refused: None };
            let mut client = ClientState::default();
            next(
                &policy(),
                budget,
                attempt,
                &mut round,
                (&policy(), &mut client),
                &mut StdRng::seed_from_u64(1),
            )
        };
        let ended = decide_at(9_950);
        let Next::DeadLetter(Cause::TimeBudget, reason) = ended else { panic!("{ended:?}") };
        assert_eq!(
            reason,
            "time budget: the next attempt would start past 10000 ms (max_total_ms); last: HTTP 500"
        );
        // Within the budget, the same attempt retries.
        let retried = decide_at(5_000);
        assert!(matches!(retried, Next::Retry(_)), "{retried:?}");
    }

    #[test]
    fn the_retry_budget_refuses_the_retry_past_its_allowance_and_counts_the_ones_it_allows() {
        // No first attempts and one retry a second: ten retries in the 10 s window.
        let budget = BudgetSettings { ratio: 0.0, min_per_s: 1.0 };
        let policy = Policy { retry_budget: Some(budget), max_attempts: 100, ..policy() };
        let mut client = ClientState::default();
        let failed = end(Outcome::HttpError, Some(503));
        let mut rng = StdRng::seed_from_u64(3);
        let mut decide = |now_ms| {
            let attempt = Attempt { n: 1, end: &failed, now_ms, refused: None };
            next(&policy, BUDGET, attempt, &mut Round::default(), (&policy, &mut client), &mut rng)
        };
        for now in 0..10 {
            assert!(matches!(decide(now), Next::Retry(_)), "retry {now}");
        }
        let reason = "retry budget spent: the client retried too much in 10 s; last: HTTP 503";
        let stopped = Stopped {
            kind: Refuser::Kind(ProtectionKind::RetryBudget),
            why: "the client retried too much in 10 s".into(),
        };
        assert_eq!(decide(10), Next::Refused(stopped, reason.into()));
        // Once the window has moved past them, retries go again.
        assert!(matches!(decide(10_011), Next::Retry(_)));
    }

    #[test]
    fn the_retry_budget_is_the_one_the_client_follows_now() {
        // The attempt was made before a policy with a spent budget came in: the budget counts.
        let spent = Policy { retry_budget: Some(BudgetSettings { ratio: 0.0, min_per_s: 0.0 }), ..policy() };
        let failed = end(Outcome::HttpError, Some(503));
        let attempt = Attempt { n: 1, end: &failed, now_ms: 0, refused: None };
        let mut client = ClientState::default();
        let mut rng = StdRng::seed_from_u64(5);
        let next = next(&policy(), BUDGET, attempt, &mut Round::default(), (&spent, &mut client), &mut rng);
        assert!(
            matches!(
                next,
                Next::Refused(Stopped { kind: Refuser::Kind(ProtectionKind::RetryBudget), .. }, _)
            ),
            "{next:?}"
        );
    }

    #[test]
    fn an_attempt_past_the_policy_after_a_crash_ends_the_round_before_it_starts() {
        assert_eq!(before(&policy(), 3), None);
        let reason = "attempts used up (3); last: interrupted by a client crash";
        assert_eq!(before(&policy(), 4), Some(Next::DeadLetter(Cause::AttemptsUsedUp, reason.into())));
    }

    #[test]
    fn each_client_draws_from_its_own_stream_and_the_first_from_a_lone_clients() {
        assert_eq!(stream_seed(42, 0, 0), 42);
        assert_ne!(stream_seed(42, 1, 5), stream_seed(42, 0, 5));
        assert_ne!(stream_seed(42, 0, 5), stream_seed(42, 0, 6));
    }
}

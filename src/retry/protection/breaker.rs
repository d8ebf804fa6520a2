//! The circuit breaker: one for the lab's client, shared by all its messages, as a real
//! service has one per dependency. Closed, it counts consecutive failures; at the threshold it
//! opens and every attempt fails fast without a request; after `open_ms` it goes half-open
//! and lets a few probes through: if they succeed it closes, if one fails it opens again.
//! An attempt it refuses is either a failed attempt like any other (the message backs off and
//! tries again) or, with `refused: give_up`, the end of the message's round.
//! Pure: the caller passes `now` (lab ms) to every call.

use serde::{Deserialize, Serialize};

use super::{Ended, Protection, Report};

/// The breaker's settings, part of the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BreakerSettings {
    /// Consecutive failed attempts that open it.
    pub failure_threshold: u32,
    /// How long it stays open before it lets probes through.
    pub open_ms: u64,
    /// How many probes it lets through while half-open; all must succeed to close it.
    pub half_open_probes: u32,
    /// What a message does with an attempt the breaker refused; absent is `retry`.
    #[serde(default)]
    pub refused: Refused,
}

/// What a message does when the breaker refuses its attempt: `retry` (the default) counts it
/// as a failed attempt and backs off; `give_up` fails fast to the caller, ending the round
/// (dead-lettered as `circuit_open`), as libraries that surface an open circuit as an error do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Refused {
    /// Counts it as a failed attempt: the message backs off and tries again.
    #[default]
    Retry,
    /// Fails fast to the caller: the round ends at once, dead-lettered as `circuit_open`.
    GiveUp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

/// What the breaker says about the attempt about to be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerAnswer {
    /// Send it.
    Send,
    /// Send it as one of the half-open probes.
    Probe,
    /// Do not send it: fail fast.
    ShortCircuit,
}

#[derive(Debug, Clone, Default)]
pub struct Breaker {
    state: Phase,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Closed { failures: u32 },
    Open { until_ms: u64 },
    HalfOpen { sent: u32, succeeded: u32 },
}

impl Default for Phase {
    fn default() -> Self {
        Phase::Closed { failures: 0 }
    }
}

impl Breaker {
    pub fn state(&self) -> BreakerState {
        match self.state {
            Phase::Closed { .. } => BreakerState::Closed,
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// Decides an attempt; returns the new state too when deciding changed it (an open
    /// breaker whose time is up goes half-open).
    pub fn admit(
        &mut self,
        settings: &BreakerSettings,
        now_ms: u64,
    ) -> (BreakerAnswer, Option<BreakerState>) {
        let mut changed = None;
        if let Phase::Open { until_ms } = self.state
            && now_ms >= until_ms
        {
            self.state = Phase::HalfOpen { sent: 0, succeeded: 0 };
            changed = Some(BreakerState::HalfOpen);
        }
        let admission = match &mut self.state {
            Phase::Closed { .. } => BreakerAnswer::Send,
            Phase::Open { .. } => BreakerAnswer::ShortCircuit,
            Phase::HalfOpen { sent, .. } if *sent < settings.half_open_probes => {
                *sent += 1;
                BreakerAnswer::Probe
            }
            Phase::HalfOpen { .. } => BreakerAnswer::ShortCircuit,
        };
        (admission, changed)
    }

    /// Records how a sent attempt ended; returns the new state when it changed.
    pub fn record(&mut self, settings: &BreakerSettings, failed: bool, now_ms: u64) -> Option<BreakerState> {
        let open = Phase::Open { until_ms: now_ms.saturating_add(settings.open_ms) };
        let (next, changed) = match (self.state, failed) {
            (Phase::Closed { .. }, false) => (Phase::Closed { failures: 0 }, None),
            (Phase::Closed { failures }, true) if failures + 1 >= settings.failure_threshold => {
                (open, Some(BreakerState::Open))
            }
            (Phase::Closed { failures }, true) => (Phase::Closed { failures: failures + 1 }, None),
            // Answers to requests sent before it opened change nothing.
            (Phase::Open { .. }, _) => (self.state, None),
            (Phase::HalfOpen { .. }, true) => (open, Some(BreakerState::Open)),
            (Phase::HalfOpen { sent, succeeded }, false) if succeeded + 1 >= settings.half_open_probes => {
                let _ = sent;
                (Phase::Closed { failures: 0 }, Some(BreakerState::Closed))
            }
            (Phase::HalfOpen { sent, succeeded }, false) => {
                (Phase::HalfOpen { sent, succeeded: succeeded + 1 }, None)
            }
        };
        self.state = next;
        changed
    }

    /// Probes that were cut off (a client crash) never answer: let new ones through.
    pub fn forget_probes(&mut self) {
        if let Phase::HalfOpen { sent, succeeded } = &mut self.state {
            *sent = *succeeded;
        }
    }
}

/// The breaker behind the protections' trait: a short circuit refuses the attempt.
impl Protection for Breaker {
    type Settings = BreakerSettings;

    fn gate(
        &mut self,
        settings: &BreakerSettings,
        _n: u32,
        now_ms: u64,
        _rng: &mut dyn rand::Rng,
    ) -> Result<(), String> {
        match self.admit(settings, now_ms).0 {
            BreakerAnswer::ShortCircuit => Err("the circuit breaker is open".into()),
            BreakerAnswer::Send | BreakerAnswer::Probe => Ok(()),
        }
    }

    fn ended(&mut self, settings: &BreakerSettings, ended: &Ended, now_ms: u64) {
        self.record(settings, ended.failed, now_ms);
    }

    /// A half-open breaker's probe handed to an attempt that is then not sent comes back.
    fn gate_undone(&mut self, _settings: &BreakerSettings, _n: u32) {
        if let Phase::HalfOpen { sent, succeeded } = &mut self.state
            && *sent > *succeeded
        {
            *sent -= 1;
        }
    }

    /// A half-open probe cancelled before its answer proves nothing: it is handed back, as
    /// one not sent is.
    fn cancelled(&mut self, settings: &BreakerSettings, n: u32) {
        self.gate_undone(settings, n);
    }

    fn report(&self, _settings: &BreakerSettings, _now_ms: u64) -> Report {
        let state = match self.state() {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        };
        Report { state: Some(state), ..Report::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: BreakerSettings =
        BreakerSettings { failure_threshold: 3, open_ms: 100, half_open_probes: 2, refused: Refused::Retry };

    #[test]
    fn opens_after_consecutive_failures_and_fails_fast() {
        let mut breaker = Breaker::default();
        assert_eq!(breaker.record(&SETTINGS, true, 0), None);
        assert_eq!(breaker.record(&SETTINGS, false, 1), None, "a success resets the count");
        assert_eq!(breaker.record(&SETTINGS, true, 2), None);
        assert_eq!(breaker.record(&SETTINGS, true, 3), None);
        assert_eq!(breaker.record(&SETTINGS, true, 4), Some(BreakerState::Open));
        assert_eq!(breaker.admit(&SETTINGS, 50), (BreakerAnswer::ShortCircuit, None));
        assert_eq!(breaker.admit(&SETTINGS, 103), (BreakerAnswer::ShortCircuit, None), "open until 104");
    }

    #[test]
    fn half_open_lets_its_probes_through_and_closes_when_they_succeed() {
        let mut breaker = Breaker::default();
        for t in 0..3 {
            breaker.record(&SETTINGS, true, t);
        }
        assert_eq!(breaker.admit(&SETTINGS, 102), (BreakerAnswer::Probe, Some(BreakerState::HalfOpen)));
        assert_eq!(breaker.admit(&SETTINGS, 103), (BreakerAnswer::Probe, None));
        assert_eq!(breaker.admit(&SETTINGS, 104), (BreakerAnswer::ShortCircuit, None), "only two probes");
        assert_eq!(breaker.record(&SETTINGS, false, 105), None);
        assert_eq!(breaker.record(&SETTINGS, false, 106), Some(BreakerState::Closed));
        assert_eq!(breaker.admit(&SETTINGS, 107), (BreakerAnswer::Send, None));
    }

    #[test]
    fn a_breaker_sent_without_its_refusal_retries_what_it_refuses() {
        let sent: BreakerSettings =
            serde_json::from_str(r#"{"failure_threshold": 3, "open_ms": 100, "half_open_probes": 2}"#)
                .unwrap();
        assert_eq!(sent, SETTINGS);
        let giving_up: BreakerSettings = serde_json::from_str(
            r#"{"failure_threshold": 3, "open_ms": 100, "half_open_probes": 2, "refused": "give_up"}"#,
        )
        .unwrap();
        assert_eq!(giving_up.refused, Refused::GiveUp);
        assert!(serde_json::to_string(&giving_up).unwrap().contains(r#""refused":"give_up""#));
    }

    #[test]
    fn a_failed_probe_opens_it_again() {
        let mut breaker = Breaker::default();
        for t in 0..3 {
            breaker.record(&SETTINGS, true, t);
        }
        breaker.admit(&SETTINGS, 200);
        assert_eq!(breaker.record(&SETTINGS, true, 201), Some(BreakerState::Open));
        assert_eq!(breaker.admit(&SETTINGS, 250).0, BreakerAnswer::ShortCircuit);
        assert_eq!(breaker.admit(&SETTINGS, 301).0, BreakerAnswer::Probe);
    }
}

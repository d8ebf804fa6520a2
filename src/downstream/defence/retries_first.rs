//! Retry-aware shedding: with the line full, a first attempt takes the place of the newest
//! retry waiting, which is answered 503 at once. The client marks its retries as gRPC's do
//! (gRFC A6, `grpc-previous-rpc-attempts`; the lab's header is `X-Previous-Attempts`); a
//! request that says nothing counts as a first. With `pushback`, the retry shed is also told
//! not to retry (gRFC A6, "Pushback": `X-Retry-Pushback-Ms: -1`).

use super::{Defence, Defences, Dropped, GivesWay, Kind, Said, Waiting};
use crate::domain::DropCause;

/// A retry, shed from a full line to make room for a first attempt.
const SHED: Dropped = Dropped::new(
    Kind::RetriesFirst,
    &Said {
        event: "shed: a retry, to make room in line for a first attempt",
        answer: "shed: a retry (X-Previous-Attempts), to make room in a full line for a first attempt; nothing \
                 was applied",
        counted: DropCause::RetryShed,
        timed_out: false,
    },
);

/// Retries first, on (`"retries_first": true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetriesFirst;

impl Defence for RetriesFirst {
    fn arm(defences: &Defences, _kept: Option<Self>) -> Option<Self> {
        defences.retries_first.then_some(RetriesFirst)
    }

    fn field() -> &'static str {
        "retries_first"
    }

    fn flag(defences: &Defences) -> Option<String> {
        defences.retries_first.then(|| match defences.pushback {
            true => "retries shed first, told not to retry".to_owned(),
            false => "retries shed first".to_owned(),
        })
    }

    fn invalid(defences: &Defences) -> Option<(String, String)> {
        (defences.pushback && !defences.retries_first).then(|| {
            let detail = "pushback is sent with the retries retries_first sheds: turn retries_first on too";
            ("pushback".into(), detail.into())
        })
    }

    fn gives_way(&self, arriving: &Waiting) -> Option<GivesWay> {
        (!arriving.retry).then_some((|waiting: &Waiting| waiting.retry, SHED))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_attempt_may_take_a_retrys_place_and_a_retry_no_ones() {
        let request = |retry| Waiting { since_ms: 0, gives_up_ms: None, retry };
        let (gives_way, shed) = RetriesFirst.gives_way(&request(false)).expect("a first attempt asks");
        assert_eq!(shed.by, Kind::RetriesFirst);
        assert!(gives_way(&request(true)) && !gives_way(&request(false)));
        assert!(RetriesFirst.gives_way(&request(true)).is_none());
    }
}

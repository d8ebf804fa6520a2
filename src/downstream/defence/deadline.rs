//! The deadline drop: work that would finish after its client gives up is not begun (the
//! Amazon Builders' Library, "Using load shedding to avoid overload": a server that knows the
//! client's timeout can drop work whose client will have given up). The lab's client says how
//! long it waits in `X-Request-Timeout-Ms`; a request that says nothing is always worked.

use super::{Defence, Defences, Dropped, Kind, Line, Said, Waiting};
use crate::domain::DropCause;
use crate::downstream::pipeline::Work;

/// Its client will have given up before the work could finish.
const TOO_LATE: Dropped = Dropped::new(
    Kind::Deadline,
    &Said {
        event: "dropped: its client would have given up before the work finished",
        answer: "dropped before its work: your client would have given up (X-Request-Timeout-Ms) before it \
                 finished; nothing was applied",
        counted: DropCause::Deadline,
        timed_out: true,
    },
);

/// The deadline drop, on (`"deadline": true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline;

impl Defence for Deadline {
    fn arm(defences: &Defences, _kept: Option<Self>) -> Option<Self> {
        defences.deadline.then_some(Deadline)
    }

    fn field() -> &'static str {
        "deadline"
    }

    fn flag(defences: &Defences) -> Option<String> {
        defences.deadline.then(|| "deadline drop".to_owned())
    }

    fn before_work(&self, request: &Waiting, work: Work, _line: Line, now_ms: u64) -> Option<Dropped> {
        let too_late = request.gives_up_ms.is_some_and(|at| now_ms + work.latency_ms > at);
        too_late.then_some(TOO_LATE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_work_that_would_end_after_its_client_gives_up_is_dropped() {
        let line = Line { waiting: 0, empty_at_ms: 0 };
        let work = Work { latency_ms: 100 };
        let waiting = |gives_up_ms| Waiting { since_ms: 0, gives_up_ms, retry: false };
        let at = |gives_up_ms, now_ms| Deadline.before_work(&waiting(gives_up_ms), work, line, now_ms);
        assert_eq!(at(Some(1_000), 900), None, "ends exactly as its client gives up");
        assert_eq!(at(Some(1_000), 901), Some(TOO_LATE));
        assert_eq!(at(None, 10_000), None, "a client that said nothing is always worked");
    }
}

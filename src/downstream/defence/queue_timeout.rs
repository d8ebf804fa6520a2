//! A fixed queue timeout, as HAProxy's `timeout queue` keeps it (HAProxy configuration manual,
//! "timeout queue"): "When a server's maxconn is reached, connections are left pending in a
//! queue ... In order not to wait indefinitely, a timeout is applied to requests pending in the
//! queue. If the timeout is reached, it is considered that the request will almost never be
//! served, so it is dropped and a 503 error is returned to the client." Unlike CoDel's, the
//! bound does not move with a standing queue. HAProxy's default: unset, it takes `timeout
//! connect`'s value, which is itself unset (no limit) unless configured; so here it is off
//! (null) until given, in ms as HAProxy's timeouts are. HAProxy answers the 503 as the timer
//! runs out; the lab's pipeline keeps no timer, so a request past it is dropped when its turn
//! comes, which leaves the same requests unworked and counts them as CoDel's are
//! (`timed_out_in_queue`).

use super::{Defence, Defences, Dropped, Kind, Line, Said, Waiting};
use crate::domain::DropCause;
use crate::downstream::MAX_LATENCY_MS;
use crate::downstream::pipeline::Work;

/// It waited in line longer than the queue timeout.
const TIMED_OUT: Dropped = Dropped::new(
    Kind::QueueTimeout,
    &Said {
        event: "dropped: waited in line longer than its queue timeout (HAProxy's timeout queue)",
        answer: "dropped after waiting in line longer than the queue timeout (HAProxy's timeout queue); nothing \
                 was applied",
        counted: DropCause::TimedOutInQueue,
        timed_out: false,
    },
);

/// The queue timeout, on (`"queue_timeout_ms": MS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueTimeout {
    timeout_ms: u64,
}

impl Defence for QueueTimeout {
    fn arm(defences: &Defences, _kept: Option<Self>) -> Option<Self> {
        defences.queue_timeout_ms.map(|timeout_ms| QueueTimeout { timeout_ms })
    }

    fn field() -> &'static str {
        "queue_timeout_ms"
    }

    fn flag(defences: &Defences) -> Option<String> {
        defences.queue_timeout_ms.map(|ms| format!("queue timeout {ms} ms"))
    }

    fn invalid(defences: &Defences) -> Option<(String, String)> {
        let out = defences.queue_timeout_ms.is_some_and(|ms| !(1..=MAX_LATENCY_MS).contains(&ms));
        out.then(|| ("queue_timeout_ms".into(), format!("queue_timeout_ms must be 1 to {MAX_LATENCY_MS}, or null")))
    }

    fn before_work(&self, request: &Waiting, _work: Work, _line: Line, now_ms: u64) -> Option<Dropped> {
        (now_ms.saturating_sub(request.since_ms) > self.timeout_ms).then_some(TIMED_OUT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_past_the_timeout_is_dropped_whatever_the_line() {
        let timeout = QueueTimeout { timeout_ms: 200 };
        let came = |since_ms| Waiting { since_ms, gives_up_ms: None, retry: false };
        let work = Work { latency_ms: 100 };
        let young = Line { waiting: 1, empty_at_ms: 900 };
        let standing = Line { waiting: 9, empty_at_ms: 0 };
        assert_eq!(timeout.before_work(&came(800), work, young, 1_000), None, "exactly the timeout");
        assert_eq!(timeout.before_work(&came(799), work, young, 1_000), Some(TIMED_OUT));
        assert_eq!(timeout.before_work(&came(799), work, standing, 1_000), Some(TIMED_OUT));
        assert_eq!(timeout.before_work(&came(1_000), work, standing, 1_000), None, "as it arrives");
    }

    #[test]
    fn it_is_off_by_default_and_checked_when_given() {
        assert!(QueueTimeout::arm(&Defences::default(), None).is_none(), "HAProxy's: unset, no limit");
        let given = Defences { queue_timeout_ms: Some(300), ..Default::default() };
        assert_eq!(QueueTimeout::arm(&given, None), Some(QueueTimeout { timeout_ms: 300 }));
        let zero = Defences { queue_timeout_ms: Some(0), ..Default::default() };
        assert_eq!(QueueTimeout::invalid(&zero).map(|(field, _)| field).as_deref(), Some("queue_timeout_ms"));
        assert_eq!(given.first_on(), Some(Kind::QueueTimeout));
    }
}

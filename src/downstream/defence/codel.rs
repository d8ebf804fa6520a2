//! CoDel queue timeouts as Maurer's "Fail at Scale" (ACM Queue, 2015) states Facebook's rule:
//! "if the queue has not been empty for the last N ms, then time spent in the queue is limited
//! to M ms; if it has been empty in the last N ms, time in queue is limited to N ms" (Facebook's
//! M = 5, N = 100; the lab's are scaled, see `Defences`). A request that waited longer is
//! dropped with a 503 when its turn comes. The standing queue is also adaptive LIFO's cue.

use super::{Defence, Defences, Discipline, Dropped, Kind, Line, Said, Waiting};
use crate::domain::DropCause;
use crate::downstream::MAX_LATENCY_MS;
use crate::downstream::pipeline::Work;

/// It waited in line longer than CoDel allows.
const TIMED_OUT: Dropped = Dropped::new(
    Kind::Codel,
    &Said {
        event: "dropped: waited in line longer than CoDel allows",
        answer: "dropped after waiting in line longer than CoDel allows (a standing queue); nothing was applied",
        counted: DropCause::TimedOutInQueue,
        timed_out: false,
    },
);

/// CoDel's two times, on (`"queue": "codel"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Codel {
    /// M: the longest wait while a standing queue exists.
    target_ms: u64,
    /// N: how long the line must stay busy to be a standing queue, and the longest wait else.
    interval_ms: u64,
}

/// A standing queue: the line has not been empty for `interval_ms`.
pub fn standing(line: Line, interval_ms: u64, now_ms: u64) -> bool {
    line.waiting > 0 && now_ms.saturating_sub(line.empty_at_ms) >= interval_ms
}

impl Defence for Codel {
    fn arm(defences: &Defences, _kept: Option<Self>) -> Option<Self> {
        let Defences { queue, codel_target_ms, codel_interval_ms, .. } = *defences;
        (queue == Discipline::Codel)
            .then_some(Codel { target_ms: codel_target_ms, interval_ms: codel_interval_ms })
    }

    fn field() -> &'static str {
        "queue"
    }

    fn flag(defences: &Defences) -> Option<String> {
        (defences.queue == Discipline::Codel)
            .then(|| format!("CoDel {} ms / {} ms", defences.codel_target_ms, defences.codel_interval_ms))
    }

    /// Its two times are checked whatever the discipline: adaptive LIFO reads N too.
    fn invalid(defences: &Defences) -> Option<(String, String)> {
        if !(1..=MAX_LATENCY_MS).contains(&defences.codel_target_ms) {
            let detail = format!("codel_target_ms must be 1 to {MAX_LATENCY_MS}");
            return Some(("codel_target_ms".into(), detail));
        }
        if !(defences.codel_target_ms..=MAX_LATENCY_MS).contains(&defences.codel_interval_ms) {
            let detail = format!("codel_interval_ms must be codel_target_ms to {MAX_LATENCY_MS}");
            return Some(("codel_interval_ms".into(), detail));
        }
        None
    }

    fn before_work(&self, request: &Waiting, _work: Work, line: Line, now_ms: u64) -> Option<Dropped> {
        let waited_ms = now_ms.saturating_sub(request.since_ms);
        let allowed_ms =
            if standing(line, self.interval_ms, now_ms) { self.target_ms } else { self.interval_ms };
        (waited_ms > allowed_ms).then_some(TIMED_OUT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_allowed_is_m_in_a_standing_queue_and_n_else() {
        let codel = Codel { target_ms: 100, interval_ms: 1_000 };
        let work = Work { latency_ms: 50 };
        let came = |since_ms| Waiting { since_ms, gives_up_ms: None, retry: false };
        let busy_since = |empty_at_ms| Line { waiting: 3, empty_at_ms };
        // Busy for 1,200 ms: a standing queue, M = 100 ms.
        assert_eq!(codel.before_work(&came(1_100), work, busy_since(0), 1_200), None);
        assert_eq!(codel.before_work(&came(1_099), work, busy_since(0), 1_200), Some(TIMED_OUT));
        // Busy for 900 ms: not standing yet, N = 1,000 ms.
        assert_eq!(codel.before_work(&came(300), work, busy_since(300), 1_200), None);
        assert!(!standing(Line { waiting: 0, empty_at_ms: 0 }, 1_000, 5_000), "an empty line never stands");
    }
}

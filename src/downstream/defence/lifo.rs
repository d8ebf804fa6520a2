//! LIFO and adaptive LIFO, as Maurer's "Fail at Scale" (ACM Queue, 2015) describes Facebook's:
//! a free worker takes the newest request in line, always (`"queue": "lifo"`), or only while a
//! standing queue exists (`"adaptive_lifo"`: the line has not been empty for CoDel's N,
//! `codel_interval_ms`). The stale requests wait at the back while fresh ones are worked within
//! their clients' timeouts. Nothing is dropped: it orders.

use super::codel::standing;
use super::{Defence, Defences, Discipline, Line};

/// Newest first, always or while a standing queue exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifo {
    Always,
    /// While the line has not been empty for this many ms.
    Adaptive {
        interval_ms: u64,
    },
}

impl Defence for Lifo {
    fn arm(defences: &Defences, _kept: Option<Self>) -> Option<Self> {
        match defences.queue {
            Discipline::Lifo => Some(Lifo::Always),
            Discipline::AdaptiveLifo => Some(Lifo::Adaptive { interval_ms: defences.codel_interval_ms }),
            Discipline::Fifo | Discipline::Codel => None,
        }
    }

    fn field() -> &'static str {
        "queue"
    }

    fn flag(defences: &Defences) -> Option<String> {
        match defences.queue {
            Discipline::Lifo => Some("LIFO".to_owned()),
            Discipline::AdaptiveLifo => Some(format!("adaptive LIFO after {} ms", defences.codel_interval_ms)),
            Discipline::Fifo | Discipline::Codel => None,
        }
    }

    fn newest_first(&self, line: Line, now_ms: u64) -> bool {
        match *self {
            Lifo::Always => true,
            Lifo::Adaptive { interval_ms } => standing(line, interval_ms, now_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_lifo_serves_the_newest_only_once_the_queue_stands() {
        let adaptive = Lifo::Adaptive { interval_ms: 1_000 };
        let busy_since_0 = Line { waiting: 2, empty_at_ms: 0 };
        assert!(!adaptive.newest_first(busy_since_0, 999));
        assert!(adaptive.newest_first(busy_since_0, 1_000));
        assert!(Lifo::Always.newest_first(busy_since_0, 0));
    }
}

//! What a struggling downstream has only so much of: a rate (the `throttled` mode's limit,
//! kept with GCRA) and a capacity (the `overloaded` mode's workers, with a queue in front).

use std::collections::VecDeque;

/// The Generic Cell Rate Algorithm: one timestamp, the "theoretical arrival time" of the next
/// request if they came exactly at the rate. A request is allowed when it is no earlier than
/// that time minus the burst tolerance, and each allowed request pushes the time on by one
/// emission interval. The throttled endpoint keeps one for every caller; the server's own rate
/// limits one per client.
#[derive(Debug, Default)]
pub struct Gcra {
    tat_ms: f64,
}

impl Gcra {
    /// Allows a request at `now_ms`, or says how many ms until one would be allowed.
    pub fn check(&mut self, rate_per_s: f64, burst: u32, now_ms: u64) -> Result<(), u64> {
        let interval = 1000.0 / rate_per_s;
        let tolerance = interval * f64::from(burst.saturating_sub(1));
        let now = now_ms as f64;
        let tat = self.tat_ms.max(now);
        let allowed_at = tat - tolerance;
        if now < allowed_at {
            return Err((allowed_at - now).ceil() as u64);
        }
        self.tat_ms = tat + interval;
        Ok(())
    }

    /// Allows a request that costs `cost` requests' worth (bytes, say) at `now_ms`, or says
    /// how many ms until it would be allowed: `check` is a cost of one.
    pub fn check_n(&mut self, rate_per_s: f64, burst: u32, cost: u32, now_ms: u64) -> Result<(), u64> {
        let interval = 1000.0 / rate_per_s;
        let depth = interval * f64::from(burst);
        let now = now_ms as f64;
        let next = self.tat_ms.max(now) + interval * f64::from(cost);
        if next - now > depth {
            return Err((next - now - depth).ceil().max(1.0) as u64);
        }
        self.tat_ms = next;
        Ok(())
    }

    /// Whether a whole burst would be allowed at `now_ms`: nothing is left to remember.
    pub fn is_idle(&self, now_ms: u64) -> bool {
        self.tat_ms <= now_ms as f64
    }
}

/// A request waiting in line at the gate, as its caller holds it (the gate keeps no runtime:
/// the caller's channel says when the worker is its).
pub trait Waiter {
    /// Hands the worker over; `false` when the request stopped waiting (its client hung up and
    /// its work was dropped), and the worker goes to the next.
    fn hand_over(self) -> bool;
}

/// The overloaded downstream's workers and the queue in front of them: `capacity` requests
/// are processed at once, `queue` more wait in arrival order, the rest are shed.
#[derive(Debug)]
pub struct Gate<W> {
    in_process: u32,
    waiting: VecDeque<W>,
}

impl<W> Default for Gate<W> {
    fn default() -> Self {
        Gate { in_process: 0, waiting: VecDeque::new() }
    }
}

/// Where a request stands at the gate.
#[derive(Debug)]
pub enum Entry<T> {
    /// A worker is free: it is this request's now.
    Now,
    /// Wait in line; the worker is handed over when `T` (the caller's end of its line) says so.
    Queued(T),
    /// No worker and no room in the queue: shed.
    Full,
}

impl<W: Waiter> Gate<W> {
    /// A request arrives; `line` makes its place in line (the waiter the gate keeps, and the
    /// caller's end), called only when it must wait.
    pub fn enter<T>(&mut self, capacity: u32, queue: u32, line: impl FnOnce() -> (W, T)) -> Entry<T> {
        if self.in_process < capacity {
            self.in_process += 1;
            Entry::Now
        } else if self.waiting.len() < queue as usize {
            let (waiter, turn) = line();
            self.waiting.push_back(waiter);
            Entry::Queued(turn)
        } else {
            Entry::Full
        }
    }

    /// A worker is done: it goes to the next in line, or becomes free. With a smaller
    /// capacity than workers busy (it was just lowered), the worker is retired instead.
    pub fn leave(&mut self, capacity: u32) {
        if self.in_process <= capacity {
            while let Some(next) = self.waiting.pop_front() {
                if next.hand_over() {
                    return;
                }
            }
        }
        self.in_process = self.in_process.saturating_sub(1);
    }

    /// Lets waiting requests through after the capacity was raised or the mode changed.
    pub fn admit_waiting(&mut self, capacity: u32) {
        while self.in_process < capacity {
            let Some(next) = self.waiting.pop_front() else { break };
            if next.hand_over() {
                self.in_process += 1;
            }
        }
    }

    pub fn in_process(&self) -> u32 {
        self.in_process
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcra_allows_the_burst_then_the_rate() {
        let mut gcra = Gcra::default();
        // 10 per second with a burst of 3: three at once, then one every 100 ms.
        let at_once: Vec<bool> = (0..5).map(|_| gcra.check(10.0, 3, 1_000).is_ok()).collect();
        assert_eq!(at_once, [true, true, true, false, false]);
        assert_eq!(gcra.check(10.0, 3, 1_000), Err(100), "the next slot is 100 ms away");
        assert!(gcra.check(10.0, 3, 1_100).is_ok());
        assert!(gcra.check(10.0, 3, 1_100).is_err());
        // Quiet for a while: the burst is available again, not more.
        let later: Vec<bool> = (0..4).map(|_| gcra.check(10.0, 3, 5_000).is_ok()).collect();
        assert_eq!(later, [true, true, true, false]);
    }

    /// A place in line that records whether its worker came; one that stopped waiting refuses.
    struct Place(std::rc::Rc<std::cell::Cell<bool>>, bool);

    impl Waiter for Place {
        fn hand_over(self) -> bool {
            self.0.set(self.1);
            self.1
        }
    }

    fn place(waiting: bool) -> impl FnOnce() -> (Place, std::rc::Rc<std::cell::Cell<bool>>) {
        move || {
            let turn = std::rc::Rc::new(std::cell::Cell::new(false));
            (Place(turn.clone(), waiting), turn)
        }
    }

    #[test]
    fn the_gate_processes_capacity_queues_in_order_and_sheds_the_rest() {
        let mut gate = Gate::default();
        assert!(matches!(gate.enter(2, 3, place(true)), Entry::Now));
        assert!(matches!(gate.enter(2, 3, place(true)), Entry::Now));
        let Entry::Queued(first) = gate.enter(2, 3, place(true)) else { panic!("queued") };
        let Entry::Queued(gone) = gate.enter(2, 3, place(false)) else { panic!("queued") };
        let Entry::Queued(second) = gate.enter(2, 3, place(true)) else { panic!("queued") };
        assert!(matches!(gate.enter(2, 3, place(true)), Entry::Full), "shed beyond capacity and queue");
        gate.leave(2);
        assert!(first.get() && !second.get(), "the first in line gets the worker");
        assert_eq!(gate.in_process(), 2);
        gate.leave(2);
        assert!(!gone.get() && second.get(), "one that stopped waiting is passed over");
        gate.leave(2);
        gate.leave(2);
        assert_eq!(gate.in_process(), 0);
    }

    #[test]
    fn a_raised_capacity_lets_the_line_in() {
        let mut gate = Gate::default();
        assert!(matches!(gate.enter(1, 2, place(true)), Entry::Now));
        let Entry::Queued(waiting) = gate.enter(1, 2, place(true)) else { panic!("queued") };
        gate.admit_waiting(2);
        assert!(waiting.get());
        assert_eq!(gate.in_process(), 2);
    }
}

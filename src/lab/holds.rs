//! How long the labs' locks are held: every take is timed, and the ones of a millisecond or
//! more are counted by length, so a long hold (a bulk action on a big queue, a flush of many
//! rows) shows on `/metrics` instead of only as the lateness of every other request to the lab.

use std::ops::{Deref, DerefMut};
use std::sync::MutexGuard;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The lengths a hold is counted at, in ms: a hold of 30 ms counts at 1, 5, 10 and 25.
pub const HOLD_STEPS_MS: [u64; 8] = [1, 5, 10, 25, 50, 100, 250, 1000];

/// The server's count of long holds, by length, and the longest one.
#[derive(Debug, Default)]
pub struct LockHolds {
    at_least: [AtomicU64; HOLD_STEPS_MS.len()],
    longest_us: AtomicU64,
}

impl LockHolds {
    fn record(&self, held_us: u64) {
        if held_us < 1_000 {
            return;
        }
        for (count, step) in self.at_least.iter().zip(HOLD_STEPS_MS) {
            if held_us >= step * 1_000 {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.longest_us.fetch_max(held_us, Ordering::Relaxed);
    }

    /// How many holds lasted at least each of `HOLD_STEPS_MS`.
    pub fn at_least(&self) -> [(u64, u64); HOLD_STEPS_MS.len()] {
        std::array::from_fn(|i| (HOLD_STEPS_MS[i], self.at_least[i].load(Ordering::Relaxed)))
    }

    /// The longest hold since the server started, in microseconds (0 when none reached 1 ms).
    pub fn longest_us(&self) -> u64 {
        self.longest_us.load(Ordering::Relaxed)
    }
}

/// A lab's state while its lock is held; counted when let go.
pub(super) struct Held<'a, T> {
    pub(super) guard: MutexGuard<'a, T>,
    pub(super) since: Instant,
    pub(super) holds: &'a LockHolds,
}

impl<T> Deref for Held<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for Held<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<T> Drop for Held<'_, T> {
    fn drop(&mut self) {
        self.holds.record(self.since.elapsed().as_micros() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_are_counted_at_each_length_they_reach_and_short_ones_not_at_all() {
        let holds = LockHolds::default();
        holds.record(400);
        holds.record(30_000);
        holds.record(1_000);
        let counted: Vec<u64> = holds.at_least().iter().map(|&(_, n)| n).collect();
        assert_eq!(counted, [2, 1, 1, 1, 0, 0, 0, 0]);
        assert_eq!(holds.longest_us(), 30_000);
    }

    #[test]
    fn a_hold_is_timed_from_the_take_to_the_letting_go() {
        let holds = LockHolds::default();
        let state = std::sync::Mutex::new(0);
        {
            let mut held = Held { guard: state.lock().unwrap(), since: Instant::now(), holds: &holds };
            *held += 1;
            std::thread::sleep(std::time::Duration::from_millis(12));
        }
        assert_eq!(*state.lock().unwrap(), 1);
        let counted: Vec<u64> = holds.at_least().iter().map(|&(_, n)| n).collect();
        assert_eq!(counted[..4], [1, 1, 1, 0], "one hold of 12 ms or a little more");
        assert!(holds.longest_us() >= 12_000, "{}", holds.longest_us());
    }
}

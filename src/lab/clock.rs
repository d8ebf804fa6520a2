//! The lab's clock: every `*_ms` a lab shows is measured from its origin on this clock. Within
//! a process it runs on the monotonic clock (`Instant`), so a step of the system clock (NTP, a
//! person setting the date) cannot run lab time backwards or jump it ahead; the wall clock only
//! places the origin, which the store keeps, so lab time carries on across a restart.

use std::time::Instant;

/// Lab time in ms: where the wall clock put it when this process started the clock, plus the
/// monotonic time since.
#[derive(Debug, Clone, Copy)]
pub struct LabClock {
    /// The lab's origin on the wall clock, as the store keeps it.
    origin_unix_ms: u64,
    /// Lab time when the clock started in this process.
    start_ms: u64,
    /// The monotonic instant at `start_ms`.
    start: Instant,
}

impl LabClock {
    /// A clock for the lab whose origin is `origin_unix_ms`, started now.
    pub fn new(origin_unix_ms: u64) -> LabClock {
        LabClock::starting(origin_unix_ms, super::unix_now_ms(), Instant::now())
    }

    /// A clock started at `start` when the wall clock read `wall_ms`. A wall clock behind the
    /// origin (set back before a restart) starts the lab at 0, never below.
    pub fn starting(origin_unix_ms: u64, wall_ms: u64, start: Instant) -> LabClock {
        LabClock { origin_unix_ms, start_ms: wall_ms.saturating_sub(origin_unix_ms), start }
    }

    /// Lab time at `now`; an instant before the start reads as the start.
    pub fn at(&self, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.start).as_millis();
        self.start_ms.saturating_add(u64::try_from(since).unwrap_or(u64::MAX))
    }

    pub fn now_ms(&self) -> u64 {
        self.at(Instant::now())
    }

    pub fn origin_unix_ms(&self) -> u64 {
        self.origin_unix_ms
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn lab_time_runs_on_the_monotonic_clock_from_where_the_wall_clock_placed_it() {
        let start = Instant::now();
        let clock = LabClock::starting(1_000, 5_000, start);
        assert_eq!(clock.at(start), 4_000);
        assert_eq!(clock.at(start + Duration::from_millis(250)), 4_250);
        assert_eq!(clock.origin_unix_ms(), 1_000, "the origin the store keeps");
        // Lab time reads only the monotonic clock once started: however the wall clock steps,
        // each reading is at least the one before.
        let mut last = 0;
        for _ in 0..1_000 {
            let now = clock.now_ms();
            assert!(now >= last, "{now} after {last}");
            last = now;
        }
        if let Some(before) = start.checked_sub(Duration::from_millis(10)) {
            assert_eq!(clock.at(before), 4_000, "never before its start");
        }
    }

    #[test]
    fn a_wall_clock_behind_the_origin_starts_the_lab_at_zero() {
        let start = Instant::now();
        let clock = LabClock::starting(10_000, 4_000, start);
        assert_eq!(clock.at(start), 0);
        assert_eq!(clock.at(start + Duration::from_millis(30)), 30);
    }
}

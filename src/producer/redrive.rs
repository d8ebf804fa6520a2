//! The redrive's loop: one letter at a time at the redrive's rate, each sent only once the
//! store holds it as replayed (so a crash can neither lose it nor send it twice), until the
//! redrive is done or cancelled. One loop per lab; after a restart or a crash of the client it
//! starts again from what the store kept. A small pacer of its own: an even schedule (the
//! n-th send due n intervals after the start) that does not try to catch up after a stall.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::Producer;
use crate::domain::paced_rate;
use crate::lab::{Lab, Step};

/// How long to wait before trying again when the lab owes too many deliveries, or the store
/// could not keep a step.
const BACK_OFF: Duration = Duration::from_millis(200);

impl Producer {
    /// Runs the lab's redrive, if it has one and its loop is not already running.
    pub fn redrive(&self, lab: &Arc<Lab>) {
        if lab.redrive().is_none() {
            return;
        }
        let (producer, lab_ref) = (self.clone(), lab.clone());
        let span = tracing::info_span!("redrive", lab = %lab.id);
        lab.spawn_redrive(|| {
            tokio::spawn(async move { producer.run_redrive(&lab_ref).await }.instrument(span))
        });
    }

    async fn run_redrive(&self, lab: &Arc<Lab>) {
        let mut turns = lab.redrive_turns();
        let mut pacer: Option<Pacer> = None;
        loop {
            let Some(redrive) = lab.redrive() else {
                if lab.end_redrive_loop() {
                    return;
                }
                continue;
            };
            // A redrive started or stopped since the last step: the one there is now is paced
            // from its own start at its own rate.
            if turns.has_changed().unwrap_or(false) {
                turns.borrow_and_update();
                pacer = None;
            }
            let pacer = pacer.get_or_insert_with(|| Pacer::new(redrive.rate_per_s));
            match lab.redrive_step() {
                Step::Done => {
                    if lab.end_redrive_loop() {
                        return;
                    }
                    // Owed still: a redrive started since, or the lab is being deleted (which
                    // aborts this task at its next wait).
                    tokio::time::sleep(BACK_OFF).await;
                    continue;
                }
                Step::Busy => {
                    tokio::time::sleep(BACK_OFF).await;
                    pacer.stalled();
                    continue;
                }
                Step::Sent(letter) => {
                    let id = letter.id;
                    if lab.persisted().await.is_err() {
                        // Back in the queue, still owed by the redrive: tried again shortly.
                        lab.withdraw_replay(vec![letter]);
                        tokio::time::sleep(BACK_OFF).await;
                        pacer.stalled();
                        continue;
                    }
                    self.start(lab, vec![id]);
                }
            }
            let due = pacer.next();
            tokio::select! {
                () = tokio::time::sleep_until(due) => {}
                // Cancelled, or replaced by another: seen at the top of the loop at once.
                Ok(()) = turns.changed() => {
                    turns.mark_changed();
                }
            }
        }
    }
}

/// An even schedule at a rate: each tick is due one interval after the one before.
struct Pacer {
    interval: Duration,
    due: Instant,
}

impl Pacer {
    /// A rate below `MIN_RATE_PER_S` (only an older store can hold one) goes at that rate:
    /// the interval is always a duration the clock can add.
    fn new(rate_per_s: f64) -> Self {
        let seconds = 1.0 / paced_rate(rate_per_s);
        let interval = Duration::try_from_secs_f64(seconds).unwrap_or(Duration::from_secs(100));
        Pacer { interval, due: Instant::now() }
    }

    /// When the next tick is due. A schedule that fell more than an interval behind (a slow
    /// commit) starts again from now rather than sending a catch-up burst.
    fn next(&mut self) -> Instant {
        self.due += self.interval;
        let now = Instant::now();
        if self.due + self.interval < now {
            self.due = now;
        }
        self.due
    }

    /// A wait outside the schedule: it starts again from now.
    fn stalled(&mut self) {
        self.due = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pacer_from_a_rate_too_small_to_pace_ticks_at_the_lowest_rate() {
        for tiny in [1e-300, 5e-324, 0.0, f64::NAN, -1.0] {
            assert_eq!(Pacer::new(tiny).interval, Duration::from_secs(100), "{tiny}");
        }
        assert_eq!(Pacer::new(4.0).interval, Duration::from_millis(250));
    }
}

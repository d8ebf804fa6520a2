//! Steady traffic, open-loop: arrivals come on their schedule whether or not the endpoint
//! keeps up, as users' requests reach a real service. Each due arrival becomes a message the
//! lab accepts durably, as a burst's are, and its delivery starts once the store has it; the
//! schedule never waits for the store or for a delivery, so a struggling endpoint cannot slow
//! the load it is offered.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Producer;
use crate::domain::{Schedule, TrafficSettings};
use crate::lab::Lab;

impl Producer {
    /// Runs the lab's traffic as it is now set (in place of what ran before), or stops it.
    pub fn drive_traffic(&self, lab: &Arc<Lab>) {
        let Some(settings) = lab.traffic() else {
            lab.stop_traffic_task();
            return;
        };
        let (producer, lab_ref) = (self.clone(), lab.clone());
        let span = tracing::info_span!("traffic", lab = %lab.id);
        lab.replace_traffic_task(|| {
            tokio::spawn(tracing::Instrument::instrument(producer.traffic(lab_ref, settings), span))
        });
    }

    async fn traffic(self, lab: Arc<Lab>, settings: TrafficSettings) {
        let mut schedule = Schedule::new(settings.rate_per_s, settings.arrivals, lab.policy().seed);
        let start = Instant::now();
        let end =
            settings.until_ms.map(|until| start + Duration::from_millis(until.saturating_sub(lab.now_ms())));
        loop {
            let next = start + since_start(schedule.next_ms());
            if let Some(end) = end
                && next >= end
            {
                tokio::time::sleep_until(end).await;
                lab.traffic_ended(settings);
                return;
            }
            tokio::time::sleep_until(next).await;
            let late = schedule.take_due(start.elapsed().as_secs_f64() * 1000.0);
            let Some(ids) = lab.accept_arrivals(settings, &late) else { return };
            if ids.is_empty() {
                continue;
            }
            let (producer, lab) = (self.clone(), lab.clone());
            tokio::spawn(async move {
                match lab.persisted().await {
                    Ok(()) => producer.start(&lab, ids),
                    Err(_) => {
                        tracing::warn!(lab = %lab.id, "the store could not keep arrivals; they count as refused");
                        lab.withdraw_arrivals(&ids);
                    }
                }
            });
        }
    }
}

/// The farthest ahead an arrival is planned: past any `MIN_RATE_PER_S` gap, short of what
/// the clock can add.
const FARTHEST: Duration = Duration::from_secs(24 * 60 * 60);

/// A planned instant (ms since the schedule began) as a duration the clock can add, whatever
/// the float holds.
fn since_start(ms: f64) -> Duration {
    Duration::try_from_secs_f64(ms.max(0.0) / 1000.0).map_or(FARTHEST, |d| d.min(FARTHEST))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planned_instant_is_always_a_duration() {
        assert_eq!(since_start(1_500.0), Duration::from_millis(1_500));
        for odd in [f64::INFINITY, f64::NAN, 1e300, -5.0] {
            assert!(since_start(odd) <= FARTHEST, "{odd}");
        }
    }
}

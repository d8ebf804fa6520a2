//! The lab's client's shared protections: one circuit breaker and one retry budget for all
//! its messages, as a real service has one per dependency. The state is the client's own
//! (`client::ClientState`); here each change of the breaker becomes an event.

use super::{Lab, LabState};
use crate::events::Event;
use crate::retry::{Admission, BreakerState};

impl Lab {
    /// Asks the client's breaker whether the next attempt may be sent.
    pub fn breaker_admit(&self) -> Admission {
        let mut state = self.lock();
        let now = self.now_ms();
        let (admission, changed) = state.client.admit(now);
        self.breaker_changed(&mut state, changed, now);
        admission
    }

    /// Tells the client's breaker how a sent attempt ended.
    pub fn breaker_record(&self, failed: bool) {
        let mut state = self.lock();
        let now = self.now_ms();
        let changed = state.client.record(failed, now);
        self.breaker_changed(&mut state, changed, now);
    }

    /// Publishes the breaker's new state, if it changed.
    pub(super) fn breaker_changed(&self, state: &mut LabState, changed: Option<BreakerState>, now: u64) {
        if let Some(changed) = changed {
            self.publish(state, &Event::BreakerChanged { state: changed }, now);
        }
    }

    /// Counts a first attempt in the retry budget's window.
    pub fn budget_first_attempt(&self) {
        let now = self.now_ms();
        self.lock().client.first_attempt(now);
    }

    /// Whether the retry budget allows a retry now (always, without one); counts it if so.
    pub fn budget_allows_retry(&self) -> bool {
        let now = self.now_ms();
        self.lock().client.allows_retry(now)
    }

    /// How long one round may last, and the setting that says so: the policy's `max_total_ms`
    /// when set and shorter, else the server's `max_retry_duration_ms`, which the dedup window
    /// is sized to cover.
    pub fn round_budget(&self, policy: &crate::retry::Policy) -> (u64, &'static str) {
        let server = self.limits.max_retry_duration_ms;
        match policy.max_total_ms {
            0 => (server, "max_retry_duration_ms"),
            own if own <= server => (own, "max_total_ms"),
            _ => (server, "max_retry_duration_ms"),
        }
    }
}

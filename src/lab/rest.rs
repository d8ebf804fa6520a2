//! A lab at rest. A public server holds many labs that someone opened, ran and left; each
//! keeps its settled messages, its load history and its hot keys for as long as it lives,
//! hundreds of kilobytes. A lab that no page watches, that owes nothing and that has been idle
//! for `--idle-lab-rest-ms` leaves memory: the store has all of it, and the registry keeps its
//! id alone. The next request to it reads it back, as a restart reads every lab.
//!
//! It takes two sweeps. The first finds the lab idle, notes its last event and activity, and
//! has the store's writer take everything it is owed (a load bin or a key that no event has
//! carried yet). The second lets it go only if nothing happened since the note and the store
//! committed every batch it took; the registry then drops it under its own lock, and only when
//! it holds the one reference (no request, task or commit still has the lab).

use super::Lab;

impl Lab {
    /// Whether the lab may leave memory now (see the module). Call once per sweep: a lab found
    /// idle is marked and flushed, and is ready on the next sweep if it stayed as it was.
    pub(super) fn ready_to_rest(&self, now_unix_ms: u64, rest_ms: u64) -> bool {
        let busy = self.has_subscribers() || self.has_deliveries() || self.has_running_task();
        let mut state = self.lock();
        let since = state.active_unix_ms.max(state.awake_since_unix_ms);
        let idle = now_unix_ms.saturating_sub(since) >= rest_ms;
        let owes_nothing = state.record.active_messages() == 0
            && state.dead_letters.letters().is_empty()
            && state.traffic.settings.is_none()
            && state.endpoint.revert.is_none()
            && !state.deleted;
        if busy || !idle || !owes_nothing {
            state.rest_mark = None;
            return false;
        }
        let mark = (state.log.last_id(), state.active_unix_ms);
        let saved = !state.flush_pending && state.batches_saved == state.batches_taken;
        if state.rest_mark == Some(mark) && saved && !state.record.load.has_changed() {
            return true;
        }
        state.rest_mark = Some(mark);
        // Whatever the lab owes the store goes with the next commit, changed or not.
        state.flush_pending = true;
        if let Some(this) = self.this.upgrade() {
            self.store.schedule(this);
        }
        false
    }

    /// A redrive's loop or the steady traffic's task still runs.
    fn has_running_task(&self) -> bool {
        let traffic = self.traffic_task.lock().unwrap_or_else(|p| p.into_inner());
        traffic.as_ref().is_some_and(|task| !task.is_finished()) || self.has_redrive()
    }
}

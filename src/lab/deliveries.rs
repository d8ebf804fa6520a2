//! The lab's running deliveries, one task per message, so a reset, a crash or a shutdown can
//! stop them all where they stand.

use std::collections::HashMap;
use std::sync::MutexGuard;

use tokio::task::AbortHandle;

use super::Lab;

impl Lab {
    /// Stops every delivery where it stands, without recording anything: a crash.
    pub fn abort_deliveries(&self) {
        for (_, task) in self.tasks_lock().drain() {
            task.abort();
        }
    }

    pub fn track(&self, id: u64, task: AbortHandle) {
        self.tasks_lock().insert(id, task);
    }

    /// Forgets a finished delivery, unless a newer one (a replay) has taken its place.
    pub fn untrack(&self, id: u64, task: tokio::task::Id) {
        let mut tasks = self.tasks_lock();
        if tasks.get(&id).is_some_and(|t| t.id() == task) {
            tasks.remove(&id);
        }
    }

    pub fn has_deliveries(&self) -> bool {
        !self.tasks_lock().is_empty()
    }

    fn tasks_lock(&self) -> MutexGuard<'_, HashMap<u64, AbortHandle>> {
        self.tasks.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

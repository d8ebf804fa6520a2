//! The lab's running deliveries, one task per message, so a reset, a crash or a shutdown can
//! stop them all where they stand; and the turn a recovery takes, so only one runs at a time.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use tokio::task::AbortHandle;

use super::Lab;

/// The running delivery tasks by message id, and the lab's recovery turn.
#[derive(Default)]
pub(super) struct Deliveries {
    tasks: Mutex<HashMap<u64, AbortHandle>>,
    /// Held for the whole of a "crash the client": two recoveries at once would each abort the
    /// other's fresh tasks only in part and start a second delivery loop for the same message.
    recovery: tokio::sync::Mutex<()>,
}

impl Lab {
    /// Stops every delivery where it stands, without recording anything: a crash.
    pub fn abort_deliveries(&self) {
        for (_, task) in self.tasks_lock().drain() {
            task.abort();
        }
    }

    /// Remembers a running delivery. A task is spawned before it is tracked, so it may already
    /// have finished (and found nothing to untrack): its handle is not kept, or the lab would
    /// look busy for ever and never be evicted.
    pub fn track(&self, id: u64, task: AbortHandle) {
        let mut tasks = self.tasks_lock();
        if !task.is_finished() {
            tasks.insert(id, task);
        }
    }

    /// Forgets a finished delivery, unless a newer one (a replay) has taken its place.
    pub fn untrack(&self, id: u64, task: tokio::task::Id) {
        let mut tasks = self.tasks_lock();
        if tasks.get(&id).is_some_and(|t| t.id() == task) {
            tasks.remove(&id);
        }
    }

    /// Whether any delivery is still running. A task that untracked itself just before it was
    /// tracked can still slip in (it is finishing, not finished, when `track` looks): finished
    /// handles are dropped here, where it matters.
    pub fn has_deliveries(&self) -> bool {
        let mut tasks = self.tasks_lock();
        tasks.retain(|_, task| !task.is_finished());
        !tasks.is_empty()
    }

    /// Waits for the lab's turn to recover its client; one recovery at a time.
    pub async fn recovery_turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.deliveries.recovery.lock().await
    }

    fn tasks_lock(&self) -> MutexGuard<'_, HashMap<u64, AbortHandle>> {
        self.deliveries.tasks.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Limits;
    use crate::lab::Labs;
    use crate::store::Store;

    #[tokio::test]
    async fn a_delivery_that_finished_before_it_was_tracked_does_not_keep_the_lab_busy() {
        let labs = Labs::new(Limits::default(), Default::default(), Store::temporary(), Vec::new());
        let lab = labs.create().unwrap();
        let inner = lab.clone();
        // As `Producer::start` does: spawn, then track; here the task wins the race.
        let task = tokio::spawn(async move { inner.untrack(7, tokio::task::id()) });
        let handle = task.abort_handle();
        task.await.unwrap();
        lab.track(7, handle);
        assert!(!lab.has_deliveries(), "a finished delivery is not a running one");
    }

    #[tokio::test]
    async fn a_stale_handle_does_not_keep_the_lab_busy() {
        let labs = Labs::new(Limits::default(), Default::default(), Store::temporary(), Vec::new());
        let lab = labs.create().unwrap();
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let inner = lab.clone();
        // Untracks itself, then lingers a moment, finishing only after it was tracked.
        let task = tokio::spawn(async move {
            inner.untrack(7, tokio::task::id());
            let _ = wait.await;
        });
        tokio::task::yield_now().await; // lets it untrack first
        lab.track(7, task.abort_handle());
        go.send(()).unwrap();
        task.await.unwrap();
        assert!(!lab.has_deliveries());
    }
}

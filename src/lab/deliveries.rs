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
    /// The redrive's loop, one per lab.
    redrive: Mutex<Option<AbortHandle>>,
    /// Counts the redrives started and stopped: the loop watches it, so a new redrive is
    /// paced at its own rate from its start, not on the schedule of the one before it.
    redrive_turns: tokio::sync::watch::Sender<u64>,
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
        if let Some(redrive) = self.redrive_lock().take() {
            redrive.abort();
        }
    }

    /// Starts the redrive's loop with `spawn`, unless it is already running: one per lab, so
    /// no letter is replayed by two loops.
    pub fn spawn_redrive(&self, spawn: impl FnOnce() -> tokio::task::JoinHandle<()>) -> bool {
        let mut redrive = self.redrive_lock();
        if redrive.as_ref().is_some_and(|task| !task.is_finished()) {
            return false;
        }
        *redrive = Some(spawn().abort_handle());
        true
    }

    /// Whether the redrive's loop runs.
    pub(super) fn has_redrive(&self) -> bool {
        self.redrive_lock().as_ref().is_some_and(|task| !task.is_finished())
    }

    /// The redrive's loop found nothing owed: it ends (and returns `true`) unless a redrive
    /// started meanwhile. Decided under the loop's lock, so a redrive that starts as the loop
    /// ends is either seen here or finds the loop gone and starts a new one.
    pub fn end_redrive_loop(&self) -> bool {
        let mut redrive = self.redrive_lock();
        if self.redrive().is_some() {
            return false;
        }
        *redrive = None;
        true
    }

    /// Changes each time a redrive starts or stops.
    pub fn redrive_turns(&self) -> tokio::sync::watch::Receiver<u64> {
        self.deliveries.redrive_turns.subscribe()
    }

    /// A redrive started or stopped: the loop's pacing starts again.
    pub(super) fn redrive_turned(&self) {
        self.deliveries.redrive_turns.send_modify(|turn| *turn = turn.wrapping_add(1));
    }

    fn redrive_lock(&self) -> MutexGuard<'_, Option<AbortHandle>> {
        self.deliveries.redrive.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts the message's delivery with `spawn`, unless a delivery of it is already running:
    /// every message has one sender. Spawning under the lock means the task cannot finish
    /// (and untrack itself) before it is tracked. Returns whether it started one.
    pub fn spawn_delivery(&self, id: u64, spawn: impl FnOnce() -> tokio::task::JoinHandle<()>) -> bool {
        let mut tasks = self.tasks_lock();
        if tasks.get(&id).is_some_and(|task| !task.is_finished()) {
            return false;
        }
        tasks.insert(id, spawn().abort_handle());
        true
    }

    /// A delivery task is done with its message: it untracks itself and returns `true`, unless
    /// the message is owed a delivery again (a replay, or a recovery, that came while the task
    /// was finishing and so left the message to it): then it returns `false` and goes on.
    pub fn finish_delivery(&self, id: u64, task: tokio::task::Id) -> bool {
        let mut tasks = self.tasks_lock();
        let owed = self.lock().record.message(id).is_some_and(|m| m.state.is_active());
        if owed {
            return false;
        }
        if tasks.get(&id).is_some_and(|t| t.id() == task) {
            tasks.remove(&id);
        }
        true
    }

    /// Whether any delivery is still running (an aborted task leaves a finished handle behind:
    /// those are dropped here).
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
    use crate::lab::Labs;

    #[tokio::test]
    async fn a_message_has_one_sender_however_often_it_is_started() {
        let labs = Labs::temporary();
        let lab = labs.create().unwrap();
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let first = lab.spawn_delivery(7, || {
            tokio::spawn(async move {
                let _ = wait.await;
            })
        });
        let second =
            lab.spawn_delivery(7, || tokio::spawn(async { panic!("a second sender for message 7") }));
        assert!(first && !second, "the second start left the message to the first sender");
        assert!(lab.has_deliveries());
        go.send(()).unwrap();
    }
}

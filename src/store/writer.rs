//! The writer thread: it owns the write connection and commits every changed lab's rows in
//! groups, one transaction (one fsync) for many labs, and says whether the store can write.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::rows::{Batch, KEYS_NAMED_PER_COMMIT, Written, write_batch};
use super::schema::WalBound;
use super::{Flush, Health, StoreError, StoreStats};

/// How long the writer pauses after a failed commit before trying again.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// What the writer is asked to do.
pub(super) enum Job {
    Flush(Arc<dyn Flush>),
    /// Someone waits for a commit: make it now, without the delay.
    Hurry,
    /// Commit what is pending, then stop and answer.
    Stop(mpsc::Sender<()>),
}

/// Runs the writer, restarting it if it panics outside a commit (in a lab's code, say): the
/// labs it was writing for hand their rows back with their next change.
pub(super) fn supervise_writer(
    mut connection: Connection,
    writer: &Writer,
    health: tokio::sync::watch::Sender<Health>,
) {
    let mut outage = Outage { health: Some(health), ..Default::default() };
    loop {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            write_loop(&mut connection, writer, &mut outage)
        }));
        match run {
            Ok(()) => return,
            Err(_) => tracing::error!("the store's writer panicked; it starts again"),
        }
    }
}

/// What the writer thread works from.
pub(super) struct Writer<'a> {
    pub(super) jobs: mpsc::Receiver<Job>,
    pub(super) stats: &'a StoreStats,
    pub(super) delay: Duration,
    /// The log's share of `--max-db-bytes`, when there is a limit.
    pub(super) wal: Option<WalBound>,
}

impl Writer<'_> {
    /// The labs to commit next, and whoever asked the writer to stop. Group commit: everything
    /// that arrived while the last transaction ran goes in this one, and while nobody waits
    /// for a commit, whatever arrives within the delay goes in too.
    fn next_group(&self) -> Option<Group> {
        let mut group = Group::default();
        group.take(self.jobs.recv().ok()?);
        self.jobs.try_iter().for_each(|job| group.take(job));
        let until = Instant::now() + self.delay;
        while !group.urgent {
            let Some(left) = until.checked_duration_since(Instant::now()) else { break };
            match self.jobs.recv_timeout(left) {
                Ok(job) => group.take(job),
                Err(_) => break, // the delay is over (or every sender is gone)
            }
        }
        Some(group)
    }
}

/// The labs one commit is for.
#[derive(Default)]
struct Group {
    labs: Vec<Arc<dyn Flush>>,
    /// Whoever asked the writer to stop once this commit is made.
    stops: Vec<mpsc::Sender<()>>,
    /// Someone waits for it.
    urgent: bool,
}

impl Group {
    fn take(&mut self, job: Job) {
        match job {
            Job::Flush(lab) => self.labs.push(lab),
            Job::Hurry => self.urgent = true,
            Job::Stop(done) => {
                self.stops.push(done);
                self.urgent = true;
            }
        }
    }
}

fn write_loop(connection: &mut Connection, writer: &Writer, outage: &mut Outage) {
    let stats = writer.stats;
    while let Some(Group { mut labs, stops, .. }) = writer.next_group() {
        let mut seen = HashSet::new();
        labs.retain(|lab| seen.insert(Arc::as_ptr(lab) as *const () as usize));
        // A lab whose code panics while handing over its rows loses its own batch, not the
        // batches already taken from the others (their keys would be held cold with no row).
        let batches: Vec<(Arc<dyn Flush>, Batch)> = labs
            .into_iter()
            .filter_map(|lab| {
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| lab.take_batch())) {
                    Ok(batch) => batch.map(|batch| (lab, batch)),
                    Err(_) => {
                        tracing::error!(
                            "a lab panicked handing its rows to the store; the others' are written"
                        );
                        None
                    }
                }
            })
            .collect();
        if !batches.is_empty() {
            // A panic mid-commit must not end durability for every lab: it counts as a failed
            // commit (the transaction rolled back as it unwound) and the writer carries on.
            let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &writer.wal {
                Some(wal) => wal.keep(connection).and_then(|()| commit(connection, &batches)),
                None => commit(connection, &batches),
            }));
            let result = attempt
                .unwrap_or_else(|_| Err(StoreError::Failed("the store's writer panicked mid-commit".into())));
            match result {
                Ok(outcomes) => {
                    let rows = outcomes.iter().filter_map(|o| o.as_ref().ok()).map(|w| w.rows).sum();
                    stats.commits.fetch_add(1, Ordering::Relaxed);
                    stats.rows.fetch_add(rows, Ordering::Relaxed);
                    match outcomes.iter().find_map(|o| o.as_ref().err()) {
                        None => outage.recovered(),
                        Some(e) => outage.failed(e),
                    }
                    for ((lab, batch), outcome) in batches.into_iter().zip(outcomes) {
                        match outcome {
                            Ok(written) => lab.committed(batch.upto, written.named),
                            Err(_) => lab.failed(batch), // only its own rows come back
                        }
                    }
                }
                Err(e) => {
                    // Nothing of the transaction stuck: every lab takes its rows back and they go
                    // with its next commit. Waiters meanwhile time out and answer 503.
                    outage.failed(&e);
                    for (lab, batch) in batches {
                        lab.failed(batch);
                    }
                    thread::sleep(RETRY_PAUSE);
                }
            }
        }
        if !stops.is_empty() {
            for done in stops {
                let _ = done.send(());
            }
            return;
        }
    }
}

/// How often a store that keeps failing says so again.
const OUTAGE_SUMMARY_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// A run of failed commits, logged as an operator wants to read it: the first failure, a
/// summary now and then while it lasts, and the recovery, instead of a line per retry.
#[derive(Default)]
struct Outage {
    since: Option<std::time::Instant>,
    failures: u64,
    last_said: Option<std::time::Instant>,
    /// Tells the health check and the waiting callers.
    health: Option<tokio::sync::watch::Sender<Health>>,
}

impl Outage {
    fn failed(&mut self, error: &StoreError) {
        if let Some(health) = &self.health {
            health.send_replace(Health { failing: Some(error.to_string()), full: error.is_full() });
        }
        let now = std::time::Instant::now();
        self.failures += 1;
        match self.since {
            None => {
                self.since = Some(now);
                self.last_said = Some(now);
                tracing::error!(%error, "store commits are failing; the rows are kept and written again");
            }
            Some(since) if self.last_said.is_none_or(|said| now - said >= OUTAGE_SUMMARY_EVERY) => {
                self.last_said = Some(now);
                let for_s = (now - since).as_secs();
                tracing::error!(%error, failures = self.failures, for_s, "store commits are still failing");
            }
            Some(_) => {}
        }
    }

    fn recovered(&mut self) {
        if let Some(since) = self.since.take() {
            let for_ms = since.elapsed().as_millis() as u64;
            tracing::info!(failures = self.failures, for_ms, "store commits succeed again");
            *self = Outage { health: self.health.take(), ..Default::default() };
            if let Some(health) = &self.health {
                health.send_replace(Health::default());
            }
        }
    }
}

/// Writes every batch in one transaction, each inside a savepoint of its own when there are
/// several: a batch that fails is rolled back alone and returned, so one lab's bad rows cannot
/// fail every lab's.
/// `Err` only when the transaction itself could not be committed; else what each batch wrote,
/// or why it failed, in the order given.
pub(super) fn commit(
    connection: &mut Connection,
    batches: &[(Arc<dyn Flush>, Batch)],
) -> Result<Vec<Result<Written, StoreError>>, StoreError> {
    let mut tx = connection.transaction()?;
    let mut naming_room = KEYS_NAMED_PER_COMMIT;
    if let [(_, batch)] = batches {
        // One batch alone needs no savepoint of its own: if it fails, so does the transaction.
        return match write_batch(&tx, batch, &mut naming_room) {
            Ok(written) => tx.commit().map(|()| vec![Ok(written)]).map_err(StoreError::from),
            Err(e) => Ok(vec![Err(e)]), // dropping the transaction rolls it back
        };
    }
    let mut outcomes = Vec::with_capacity(batches.len());
    for (_, batch) in batches {
        let savepoint = tx.savepoint()?;
        let outcome = write_batch(&savepoint, batch, &mut naming_room);
        if outcome.is_ok() {
            savepoint.commit()?;
        } // else dropping the savepoint rolls its writes back
        outcomes.push(outcome);
    }
    tx.commit()?;
    Ok(outcomes)
}

//! Load as the downstream measured it, per 100 ms of lab time: the requests that arrived,
//! how each was answered (2xx, 503, 429, or never, because its client had given up), the work
//! done for clients that were already gone, and the most requests in process at once. A retry
//! storm shows as a spike here; a breaker or a retry budget as its absence.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The width of one bin, in ms of lab time.
pub const BIN_MS: u64 = 100;
/// Bins kept: the last hour of a lab's activity.
const MAX_BINS: usize = 36_000;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct LoadBin {
    /// The bin's start, ms of lab time.
    pub t_ms: u64,
    /// Requests that reached the downstream in this bin; the bins add up to `requests`.
    pub requests: u64,
    /// Of those: answered 2xx.
    pub ok: u64,
    /// Answered 503.
    pub unavailable: u64,
    /// Answered 429.
    pub throttled: u64,
    /// Never answered: the client gave up (timed out) first.
    pub timed_out: u64,
    /// Answered with another status (400, 409, 422, ...).
    pub other: u64,
    /// Work finished in this bin for a client that had already given up.
    pub wasted: u64,
    /// The most requests in process at once during this bin.
    pub peak_in_process: u64,
    /// New messages created in this bin (a burst's, or steady traffic's): the offered load.
    pub offered: u64,
    /// Messages the client delivered in this bin: the goodput.
    pub delivered: u64,
    /// Arrivals of steady traffic refused at the source in this bin (the lab owed too many).
    pub refused: u64,
}

/// How a request that reached the downstream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Status(u16),
    /// The client hung up before an answer was ready.
    TimedOut,
}

#[derive(Debug, Default)]
pub struct Load {
    bins: BTreeMap<u64, LoadBin>,
    /// Bins changed since the last `take_changed`.
    changed: BTreeSet<u64>,
    /// Bins changed since the store last took them.
    unsaved: BTreeSet<u64>,
    /// Bins before this were dropped (past `MAX_BINS`) since the store last heard.
    dropped_before: Option<u64>,
    in_process: u64,
}

/// The bins changed since the store last took them: rows to write, and a cutoff below which
/// rows go (bins dropped to keep the last hour).
#[derive(Debug, Default, Clone)]
pub struct BinChanges {
    pub bins: Vec<LoadBin>,
    pub dropped_before: Option<u64>,
}

impl Load {
    /// Bins as the store kept them.
    pub fn restore(bins: Vec<LoadBin>) -> Self {
        Load { bins: bins.into_iter().map(|bin| (bin.t_ms, bin)).collect(), ..Default::default() }
    }

    /// The bins changed since the last call, for the store.
    pub fn take_unsaved(&mut self) -> BinChanges {
        let unsaved = std::mem::take(&mut self.unsaved);
        BinChanges {
            bins: unsaved.iter().filter_map(|t| self.bins.get(t).copied()).collect(),
            dropped_before: self.dropped_before.take(),
        }
    }

    /// The store could not keep these: they go with the next commit.
    pub fn mark_unsaved(&mut self, changes: BinChanges) {
        self.unsaved.extend(changes.bins.iter().map(|bin| bin.t_ms));
        self.dropped_before = self.dropped_before.max(changes.dropped_before);
    }

    /// A request reached the downstream at `now_ms`; returns the bin it is counted in.
    pub fn arrive(&mut self, now_ms: u64) -> u64 {
        let bin = self.bin(now_ms);
        bin.requests += 1;
        bin.t_ms
    }

    /// How the request that arrived in bin `arrived_t_ms` was answered.
    pub fn answer(&mut self, arrived_t_ms: u64, answer: Answer) {
        let bin = self.bin(arrived_t_ms);
        match answer {
            Answer::Status(200..=299) => bin.ok += 1,
            Answer::Status(503) => bin.unavailable += 1,
            Answer::Status(429) => bin.throttled += 1,
            Answer::Status(_) => bin.other += 1,
            Answer::TimedOut => bin.timed_out += 1,
        }
    }

    /// Work was finished at `now_ms` for a client that had already given up.
    pub fn wasted(&mut self, now_ms: u64) {
        self.bin(now_ms).wasted += 1;
    }

    /// `count` new messages were created at `now_ms`.
    pub fn offered(&mut self, now_ms: u64, count: u64) {
        if count > 0 {
            self.bin(now_ms).offered += count;
        }
    }

    /// A message was delivered at `now_ms`.
    pub fn delivered(&mut self, now_ms: u64) {
        self.bin(now_ms).delivered += 1;
    }

    /// `count` arrivals were refused at the source at `now_ms`.
    pub fn refused(&mut self, now_ms: u64, count: u64) {
        if count > 0 {
            self.bin(now_ms).refused += count;
        }
    }

    pub fn work_started(&mut self, now_ms: u64) {
        self.in_process += 1;
        let in_process = self.in_process;
        let bin = self.bin(now_ms);
        bin.peak_in_process = bin.peak_in_process.max(in_process);
    }

    pub fn work_finished(&mut self) {
        self.in_process = self.in_process.saturating_sub(1);
    }

    pub fn bins(&self) -> Vec<LoadBin> {
        self.bins.values().copied().collect()
    }

    /// The bins changed since the last call, whole.
    pub fn take_changed(&mut self) -> Vec<LoadBin> {
        let changed = std::mem::take(&mut self.changed);
        changed.iter().filter_map(|t| self.bins.get(t).copied()).collect()
    }

    /// Forgets everything measured (a reset); work still in process stays counted.
    pub fn clear(&mut self) {
        self.bins.clear();
        self.changed.clear();
        self.unsaved.clear();
        self.dropped_before = None;
    }

    fn bin(&mut self, at_ms: u64) -> &mut LoadBin {
        let t_ms = at_ms - at_ms % BIN_MS;
        self.changed.insert(t_ms);
        self.unsaved.insert(t_ms);
        if self.bins.len() >= MAX_BINS
            && !self.bins.contains_key(&t_ms)
            && let Some((dropped, _)) = self.bins.pop_first()
        {
            self.dropped_before = self.dropped_before.max(Some(dropped + 1));
        }
        let in_process = self.in_process;
        self.bins.entry(t_ms).or_insert(LoadBin { t_ms, peak_in_process: in_process, ..Default::default() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_binned_by_arrival_and_answers_join_their_bin() {
        let mut load = Load::default();
        let first = load.arrive(42);
        let second = load.arrive(150);
        load.work_started(150);
        load.answer(first, Answer::Status(503));
        load.answer(second, Answer::TimedOut);
        load.wasted(260);
        load.work_finished();
        let bins = load.bins();
        assert_eq!(
            bins.iter().map(|b| (b.t_ms, b.requests)).collect::<Vec<_>>(),
            [(0, 1), (100, 1), (200, 0)]
        );
        assert_eq!((bins[0].unavailable, bins[1].timed_out, bins[1].peak_in_process), (1, 1, 1));
        assert_eq!(bins[2].wasted, 1);
        assert_eq!(load.take_changed().len(), 3);
        assert!(load.take_changed().is_empty(), "taken once");
    }
}

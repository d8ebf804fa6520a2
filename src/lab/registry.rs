//! The labs this server holds, by their unguessable ids.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::Endpoint;
use super::{Lab, Parts, unix_now_ms};
use crate::callers::Callers;
use crate::client::Clients;
use crate::config::{Limits, Retention};
use crate::dlq::DeadLetterQueue;
use crate::domain::{Instance, LabId, LabRecord, StoredRecord, TrafficSettings};
use crate::downstream::{DownstreamView, KeyNaming};
use crate::events::Event;
use crate::store::{LoadedLab, RecordParts, Store};

/// Every lab of a server, by id: the registry owns it, and each lab looks at it (weakly) to
/// count the deliveries the whole server owes.
pub(super) type Held = RwLock<HashMap<LabId, Arc<Lab>>>;

/// Messages owed a delivery by the labs in `held`, but for `except`'s. The labs are copied out
/// first, so no lab's lock is taken while the map is.
pub(super) fn active_in(held: &Held, except: Option<&LabId>) -> usize {
    let labs: Vec<Arc<Lab>> = held
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .filter(|lab| Some(&lab.id) != except)
        .cloned()
        .collect();
    labs.iter().map(|lab| lab.active_messages()).sum()
}

pub struct Labs {
    labs: Arc<Held>,
    /// Labs at rest (`rest`): in the store alone, each by the time it was last active. A lab
    /// is in `labs` or here, never in both; the two change together under `labs`' lock.
    resting: std::sync::Mutex<HashMap<LabId, u64>>,
    /// This instance's name, part of every lab id it makes; `None` on a single machine.
    pub instance: Option<Instance>,
    /// Idempotency keys kept for outside callers, all labs together.
    pub(super) outside_keys: Arc<std::sync::atomic::AtomicUsize>,
    /// Outside messages kept, all labs together (held to `max_outside_keys` too).
    pub(super) outside_messages: Arc<std::sync::atomic::AtomicUsize>,
    /// How long the labs' locks were held, all labs together.
    pub lock_holds: Arc<super::LockHolds>,
    pub(super) limits: Limits,
    pub(super) retention: Retention,
    pub(super) store: Store,
}

impl Labs {
    /// The registry, holding the labs the store loaded (their deliveries not yet resumed).
    pub fn new(limits: Limits, retention: Retention, store: Store, loaded: Vec<LoadedLab>) -> Self {
        let labs = Labs {
            labs: Arc::new(RwLock::new(HashMap::new())),
            resting: Default::default(),
            instance: None,
            outside_keys: Default::default(),
            outside_messages: Default::default(),
            lock_holds: Default::default(),
            limits,
            retention,
            store,
        };
        let mut map = HashMap::new();
        for loaded in loaded {
            // Ids past the last committed one may have reached a page before a crash: the
            // events of this run are numbered after every one of them.
            if let Some(lab) = labs.revive(loaded, crate::events::RESTART_GAP, true) {
                map.insert(lab.id, lab);
            }
        }
        *labs.labs.write().unwrap_or_else(|p| p.into_inner()) = map;
        labs
    }

    /// A lab as the store kept it, its deliveries not resumed; its events are numbered from
    /// `gap` past its last committed one. `count` adds its outside keys and messages to the
    /// server's counts (a lab woken from rest was counted all along).
    fn revive(
        &self,
        LoadedLab { row, parts, dead_letters }: LoadedLab,
        gap: u64,
        count: bool,
    ) -> Option<Arc<Lab>> {
        let Ok(id) = LabId::parse(&row.id) else {
            tracing::warn!(lab = %row.id, "skipping a stored lab with an unreadable id");
            return None;
        };
        let mut state = restore(parts, dead_letters);
        // Every key of the dedup window comes back cold (none whole, so none to cool): past the
        // bound, the oldest go again, once the lab's first commits have named its rows.
        let naming =
            super::flush::keep_keys_within(&mut state.endpoint.ledger, &state.record, &self.limits, 0);
        if count {
            self.outside_keys
                .fetch_add(state.endpoint.ledger.outside_keys(), std::sync::atomic::Ordering::Relaxed);
            self.outside_messages.fetch_add(state.callers.len(), std::sync::atomic::Ordering::Relaxed);
        }
        let first_id = row.last_event_id.saturating_add(gap);
        let lab =
            Arc::new_cyclic(|this| Lab::build(this.clone(), id, row.origin_unix_ms, state, first_id, self));
        {
            let mut state = lab.lock();
            if naming == KeyNaming::NameAll {
                lab.schedule_flush(&mut state);
            }
            state.active_unix_ms = row.active_unix_ms;
            let traffic: Option<TrafficSettings> = serde_json::from_str(&row.traffic).unwrap_or_else(|e| {
                tracing::warn!(lab = %row.id, error = %e, "the stored traffic is unreadable; it stays off");
                None
            });
            // A store from before rates had a floor may hold a rate too small to pace.
            state.traffic.settings =
                traffic.map(|t| TrafficSettings { rate_per_s: crate::domain::paced_rate(t.rate_per_s), ..t });
            // What the traffic did before the restart: its counts carry on from there.
            state.traffic.sent = row.traffic_sent;
            state.traffic.refused = row.traffic_refused;
        }
        Some(lab)
    }

    /// Creates a lab. At `max_labs`, the least recently used lab that nobody is watching, that
    /// owes no deliveries and holds no dead letters (they are kept for their whole retention)
    /// makes room; if every lab is in use, the answer is no. The new lab is durable once
    /// `persisted()` returns.
    pub fn create(&self) -> Result<Arc<Lab>, usize> {
        let mut labs = self.labs.write().unwrap_or_else(|p| p.into_inner());
        let mut resting = self.resting.lock().unwrap_or_else(|p| p.into_inner());
        if labs.len() + resting.len() >= self.limits.max_labs {
            // A lab at rest is unused by its nature: the least recently active goes first.
            let oldest = resting.iter().min_by_key(|(_, active)| **active).map(|(id, _)| *id);
            if let Some(oldest) = oldest {
                resting.remove(&oldest);
                if let Some(evicted) = self.wake(&oldest) {
                    tracing::info!(lab = %evicted.id, "deleted the least recently used lab to make room");
                    evicted.delete();
                }
            }
        }
        drop(resting);
        if labs.len() + self.resting_labs() >= self.limits.max_labs {
            let unused = labs
                .values()
                .filter(|lab| lab.evictable())
                .min_by_key(|lab| lab.active_unix_ms())
                .map(|lab| lab.id);
            let Some(unused) = unused else {
                return Err(self.limits.max_labs);
            };
            if let Some(evicted) = labs.remove(&unused) {
                tracing::info!(lab = %evicted.id, "deleted the least recently used lab to make room");
                evicted.delete();
            }
        }
        let id = LabId::new(self.instance);
        let lab =
            Arc::new_cyclic(|this| Lab::build(this.clone(), id, unix_now_ms(), Default::default(), 0, self));
        lab.change(|_, _| Some(((), Event::LabCreated)));
        labs.insert(id, lab.clone());
        Ok(lab)
    }

    /// Deletes a lab with everything it holds.
    pub fn remove(&self, id: &LabId) {
        let _ = self.get(id); // a lab at rest wakes to be deleted
        if let Some(lab) = self.labs.write().unwrap_or_else(|p| p.into_inner()).remove(id) {
            lab.delete();
        }
    }

    /// The lab with `id`, woken if it rests.
    pub fn get(&self, id: &LabId) -> Option<Arc<Lab>> {
        if let Some(lab) = self.labs.read().unwrap_or_else(|p| p.into_inner()).get(id) {
            return Some(lab.clone());
        }
        let mut labs = self.labs.write().unwrap_or_else(|p| p.into_inner());
        if let Some(lab) = labs.get(id) {
            return Some(lab.clone()); // woken meanwhile
        }
        let active = self.resting.lock().unwrap_or_else(|p| p.into_inner()).remove(id)?;
        match self.wake(id) {
            Some(lab) => {
                labs.insert(*id, lab.clone());
                drop(labs);
                lab.breaker_restarted();
                Some(lab)
            }
            None => {
                // Kept at rest, to be read again on the next request.
                self.resting.lock().unwrap_or_else(|p| p.into_inner()).insert(*id, active);
                None
            }
        }
    }

    /// Reads a resting lab back from the store (blocking: a lab is a few reads of its rows).
    /// Its events go on from its last one, all of which the store had committed.
    fn wake(&self, id: &LabId) -> Option<Arc<Lab>> {
        match self.store.load_lab(&id.to_string()) {
            Ok(Some(loaded)) => self.revive(loaded, 0, false),
            Ok(None) => {
                tracing::warn!(lab = %id, "a resting lab is not in the store; it is gone");
                None
            }
            Err(e) => {
                tracing::error!(lab = %id, error = %e, "could not read a resting lab back from the store");
                None
            }
        }
    }

    /// Labs at rest: in the store alone.
    pub fn resting_labs(&self) -> usize {
        self.resting.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Lets labs idle for `retention.idle_lab_rest_ms` leave memory (see `rest`); returns how
    /// many did. A lab takes two sweeps: the first has the store take all it is owed.
    pub fn rest_idle(&self, now_unix_ms: u64) -> usize {
        let rest_ms = self.retention.idle_lab_rest_ms;
        if rest_ms == 0 {
            return 0;
        }
        let ready: Vec<LabId> = self
            .all()
            .into_iter()
            .filter(|lab| lab.ready_to_rest(now_unix_ms, rest_ms))
            .map(|lab| lab.id)
            .collect();
        let mut labs = self.labs.write().unwrap_or_else(|p| p.into_inner());
        let mut rested = 0;
        for id in ready {
            // Only the map holds it: no request, task or pending commit can touch it after.
            let Some(lab) = labs.get(&id).filter(|lab| Arc::strong_count(lab) == 1) else { continue };
            if !lab.ready_to_rest(now_unix_ms, rest_ms) {
                continue;
            }
            let active = lab.active_unix_ms();
            labs.remove(&id);
            self.resting.lock().unwrap_or_else(|p| p.into_inner()).insert(id, active);
            rested += 1;
        }
        rested
    }

    /// The map of labs, for a lab to look at its neighbours.
    pub(super) fn held(&self) -> std::sync::Weak<Held> {
        Arc::downgrade(&self.labs)
    }

    /// Messages owed a delivery across all labs.
    pub fn active_messages(&self) -> usize {
        active_in(&self.labs, None)
    }

    pub fn all(&self) -> Vec<Arc<Lab>> {
        self.labs.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// Deletes labs idle for longer than the retention window, with everything they hold. A
    /// lab somebody watches is not idle, and a lab holding dead letters is kept until the last
    /// of them expires (their retention wins over the idle window).
    pub fn purge_idle(&self, now_unix_ms: u64) -> usize {
        let idle_before = now_unix_ms.saturating_sub(self.retention.idle_lab_ttl_s.saturating_mul(1000));
        let resting: Vec<LabId> = {
            let mut resting = self.resting.lock().unwrap_or_else(|p| p.into_inner());
            let idle: Vec<LabId> =
                resting.iter().filter(|(_, active)| **active < idle_before).map(|(id, _)| *id).collect();
            resting.retain(|id, _| !idle.contains(id));
            idle
        };
        let mut purged = 0;
        for id in &resting {
            // Woken to be deleted with everything it holds, as a lab in memory is.
            if let Some(lab) = self.wake(id) {
                lab.delete();
                purged += 1;
            }
        }
        let mut labs = self.labs.write().unwrap_or_else(|p| p.into_inner());
        let idle: Vec<LabId> = labs
            .values()
            .filter(|lab| lab.active_unix_ms() < idle_before && lab.evictable())
            .map(|lab| lab.id)
            .collect();
        for id in &idle {
            if let Some(lab) = labs.remove(id) {
                lab.delete();
            }
        }
        purged + idle.len()
    }
}

/// A lab's parts as the store kept them, each handed to its owner.
fn restore(parts: RecordParts, dead_letters: Vec<crate::dlq::DeadLetter>) -> Parts {
    let RecordParts {
        downstream,
        revert,
        policy,
        ledger,
        epoch,
        next_message_id,
        messages,
        load_bins,
        markers,
        breakers,
        outside_messages,
        forgotten_delivered,
    } = parts;
    let stored = StoredRecord { epoch, next_message_id, messages, load_bins, markers, forgotten_delivered };
    Parts {
        record: LabRecord::restore(stored),
        endpoint: Endpoint::restore(DownstreamView { settings: downstream, revert }, ledger),
        clients: Clients::restore(policy, breakers),
        dead_letters: DeadLetterQueue::restore(dead_letters),
        callers: Callers::restore(outside_messages),
    }
}

#[cfg(test)]
impl Labs {
    /// Labs at the default limits and retention, over a store in a temporary file: for the
    /// lab's own tests.
    pub(crate) fn temporary() -> Labs {
        Labs::new(Limits::default(), Default::default(), crate::store::Store::temporary(), Vec::new())
    }
}

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
use crate::downstream::DownstreamView;
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
            instance: None,
            outside_keys: Default::default(),
            outside_messages: Default::default(),
            lock_holds: Default::default(),
            limits,
            retention,
            store,
        };
        let mut map = HashMap::new();
        for LoadedLab { row, parts, dead_letters } in loaded {
            let Ok(id) = LabId::parse(&row.id) else {
                tracing::warn!(lab = %row.id, "skipping a stored lab with an unreadable id");
                continue;
            };
            let state = restore(parts, dead_letters);
            labs.outside_keys
                .fetch_add(state.endpoint.ledger.outside_keys(), std::sync::atomic::Ordering::Relaxed);
            labs.outside_messages.fetch_add(state.callers.len(), std::sync::atomic::Ordering::Relaxed);
            // Ids past the last committed one may have reached a page before a crash: the
            // events of this run are numbered after every one of them.
            let first_id = row.last_event_id.saturating_add(crate::events::RESTART_GAP);
            let lab = Arc::new_cyclic(|this| {
                Lab::build(this.clone(), id, row.origin_unix_ms, state, first_id, &labs)
            });
            let mut state = lab.lock();
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
            drop(state);
            map.insert(id, lab);
        }
        *labs.labs.write().unwrap_or_else(|p| p.into_inner()) = map;
        labs
    }

    /// Creates a lab. At `max_labs`, the least recently used lab that nobody is watching, that
    /// owes no deliveries and holds no dead letters (they are kept for their whole retention)
    /// makes room; if every lab is in use, the answer is no. The new lab is durable once
    /// `persisted()` returns.
    pub fn create(&self) -> Result<Arc<Lab>, usize> {
        let mut labs = self.labs.write().unwrap_or_else(|p| p.into_inner());
        if labs.len() >= self.limits.max_labs {
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
        if let Some(lab) = self.labs.write().unwrap_or_else(|p| p.into_inner()).remove(id) {
            lab.delete();
        }
    }

    pub fn get(&self, id: &LabId) -> Option<Arc<Lab>> {
        self.labs.read().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
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
        idle.len()
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

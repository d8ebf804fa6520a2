//! The labs this server holds, by their unguessable ids.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use serde::Serialize;
use uuid::Uuid;

use super::{Lab, unix_now_ms};
use crate::config::{Limits, Retention};
use crate::dlq::DeadLetterQueue;
use crate::domain::LabRecord;
use crate::events::Event;
use crate::store::{LoadedLab, Store};

/// The name of one instance of the server, past one machine (Fly's machine id, say):
/// 1 to 32 lowercase letters and digits, kept inline so a lab id stays `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Instance {
    bytes: [u8; 32],
    len: u8,
}

impl Instance {
    pub fn parse(raw: &str) -> Result<Instance, String> {
        let fits = (1..=32).contains(&raw.len())
            && raw.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !fits {
            return Err(format!("'{raw}' is not an instance id: 1 to 32 lowercase letters and digits"));
        }
        let mut bytes = [0u8; 32];
        bytes[..raw.len()].copy_from_slice(raw.as_bytes());
        Ok(Instance { bytes, len: raw.len() as u8 })
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).expect("an instance id is ASCII")
    }
}

impl fmt::Debug for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A lab's id: a random UUID v4, so a lab's URL cannot be guessed from another's, followed,
/// past one machine, by the instance that owns it: `<uuid>-<instance>`. Ids without an
/// instance were made before instances had names, and are served wherever they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LabId {
    uuid: Uuid,
    instance: Option<Instance>,
}

impl LabId {
    /// Only the canonical spelling (lowercase, hyphenated) names a lab: one lab, one URL, so
    /// the same lab cannot be opened, cached or rate-limited under several names.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let refuse = || {
            let shown: String = raw.chars().take(64).collect();
            format!(
                "'{shown}' is not a lab id: lab ids are UUIDs written in lowercase with hyphens, \
                 like 6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a, with the instance that owns the lab \
                 after one more hyphen when there are several"
            )
        };
        let (uuid, instance) = match raw.get(36..) {
            Some("") | None => (raw, None),
            Some(rest) => (&raw[..36], Some(rest.strip_prefix('-').ok_or_else(refuse)?)),
        };
        let uuid =
            Uuid::try_parse(uuid).ok().filter(|id| id.hyphenated().to_string() == uuid).ok_or_else(refuse)?;
        let instance = instance.map(Instance::parse).transpose().map_err(|_| refuse())?;
        Ok(LabId { uuid, instance })
    }

    /// A new random id, owned by `instance` (a comparison's id is made the same way).
    pub fn new(instance: Option<Instance>) -> LabId {
        LabId { uuid: Uuid::new_v4(), instance }
    }

    /// The instance that owns the lab, if it was made by a named one.
    pub fn instance(&self) -> Option<Instance> {
        self.instance
    }
}

impl fmt::Display for LabId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.instance {
            Some(instance) => write!(f, "{}-{instance}", self.uuid),
            None => self.uuid.fmt(f),
        }
    }
}

impl Serialize for LabId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for LabId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        LabId::parse(&raw).map_err(serde::de::Error::custom)
    }
}

pub struct Labs {
    labs: RwLock<HashMap<LabId, Arc<Lab>>>,
    /// This instance's name, part of every lab id it makes; `None` on a single machine.
    pub instance: Option<Instance>,
    /// Idempotency keys kept for outside callers, all labs together.
    pub(super) outside_keys: Arc<std::sync::atomic::AtomicUsize>,
    pub(super) limits: Limits,
    pub(super) retention: Retention,
    pub(super) store: Store,
}

impl Labs {
    /// The registry, holding the labs the store loaded (their deliveries not yet resumed).
    pub fn new(limits: Limits, retention: Retention, store: Store, loaded: Vec<LoadedLab>) -> Self {
        let labs = Labs {
            labs: RwLock::new(HashMap::new()),
            instance: None,
            outside_keys: Default::default(),
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
            let state = (LabRecord::restore(parts), DeadLetterQueue::restore(dead_letters));
            labs.outside_keys.fetch_add(state.0.ledger.outside_keys(), std::sync::atomic::Ordering::Relaxed);
            let lab = Arc::new_cyclic(|this| {
                Lab::build(this.clone(), id, row.origin_unix_ms, state, row.last_event_id, &labs)
            });
            lab.lock().active_unix_ms = row.active_unix_ms;
            map.insert(id, lab);
        }
        *labs.labs.write().unwrap_or_else(|p| p.into_inner()) = map;
        labs
    }

    /// Creates a lab. At `max_labs`, the least recently used lab that nobody is watching and
    /// that owes no deliveries makes room; if every lab is in use, the answer is no. The new
    /// lab is durable once `persisted()` returns.
    pub fn create(&self) -> Result<Arc<Lab>, usize> {
        let mut labs = self.labs.write().unwrap_or_else(|p| p.into_inner());
        if labs.len() >= self.limits.max_labs {
            let unused = labs
                .values()
                .filter(|lab| !lab.has_deliveries() && !lab.has_subscribers())
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

    /// Messages owed a delivery across all labs.
    pub fn active_messages(&self) -> usize {
        self.all().iter().map(|lab| lab.active_messages()).sum()
    }

    pub fn all(&self) -> Vec<Arc<Lab>> {
        self.labs.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// Deletes labs idle for longer than the retention window, with everything they hold.
    pub fn purge_idle(&self, now_unix_ms: u64) -> usize {
        let idle_before = now_unix_ms.saturating_sub(self.retention.idle_lab_ttl_s.saturating_mul(1000));
        let mut labs = self.labs.write().unwrap_or_else(|p| p.into_inner());
        let idle: Vec<LabId> = labs
            .values()
            .filter(|lab| lab.active_unix_ms() < idle_before && !lab.has_deliveries())
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

#[cfg(test)]
mod tests {
    use super::LabId;

    #[test]
    fn a_lab_id_has_one_spelling() {
        let canonical = "6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a";
        assert_eq!(LabId::parse(canonical).unwrap().to_string(), canonical);
        for other in [
            "6F1C1C3E-9D5E-4A55-8F4A-3B3C2D1E0F9A",
            "{6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a}",
            "urn:uuid:6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a",
            "6f1c1c3e9d5e4a558f4a3b3c2d1e0f9a",
            " 6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a",
        ] {
            let refused = LabId::parse(other).unwrap_err();
            assert!(refused.contains("lowercase with hyphens"), "{other}: {refused}");
        }
    }
}

#[cfg(test)]
mod id_tests {
    use super::*;

    #[test]
    fn a_lab_id_names_its_instance_after_the_uuid() {
        let plain = LabId::parse("6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a").unwrap();
        assert_eq!(plain.instance(), None);
        let owned = LabId::parse("6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a-3d8d9e2b7d5e89").unwrap();
        assert_eq!(owned.instance().unwrap().as_str(), "3d8d9e2b7d5e89");
        assert_eq!(owned.to_string(), "6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a-3d8d9e2b7d5e89");
        for bad in [
            "6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a-",
            "6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a_abc",
            "6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a-UPPER",
            "6F1C1C3E-9D5E-4A55-8F4A-3B3C2D1E0F9A",
        ] {
            assert!(LabId::parse(bad).is_err(), "{bad}");
        }
        let json = serde_json::to_string(&owned).unwrap();
        assert_eq!(serde_json::from_str::<LabId>(&json).unwrap(), owned);
    }
}

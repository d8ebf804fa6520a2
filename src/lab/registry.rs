//! The labs this server holds, by their unguessable ids.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use serde::Serialize;
use uuid::Uuid;

use super::Lab;
use crate::config::Limits;

/// A lab's id: a random UUID v4, so a lab's URL cannot be guessed from another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct LabId(Uuid);

impl LabId {
    pub fn parse(raw: &str) -> Result<Self, String> {
        Uuid::parse_str(raw).map(LabId).map_err(|_| {
            format!("'{}' is not a lab id (lab ids are UUIDs)", raw.chars().take(64).collect::<String>())
        })
    }
}

impl fmt::Display for LabId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

pub struct Labs {
    labs: RwLock<HashMap<LabId, Arc<Lab>>>,
    limits: Limits,
}

impl Labs {
    pub fn new(limits: Limits) -> Self {
        Labs { labs: RwLock::new(HashMap::new()), limits }
    }

    /// Creates a lab, unless the server already holds `max_labs`.
    pub fn create(&self) -> Result<Arc<Lab>, usize> {
        let mut labs = self.labs.write().unwrap_or_else(|p| p.into_inner());
        if labs.len() >= self.limits.max_labs {
            return Err(self.limits.max_labs);
        }
        let lab = Arc::new(Lab::new(LabId(Uuid::new_v4()), &self.limits));
        labs.insert(lab.id, lab.clone());
        Ok(lab)
    }

    pub fn get(&self, id: &LabId) -> Option<Arc<Lab>> {
        self.labs.read().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
    }
}

//! A comparison in the store: saved as it starts and as each run goes (one change at a time),
//! read back after a restart, when the runs a restart cut short are marked with the step they
//! lost.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::driver::column_done;
use super::{Comparison, ComparisonId, Comparisons, report};
use crate::lab::Labs;
use crate::store::Store;

impl Comparisons {
    /// The comparisons the store kept; unreadable rows are skipped with a warning. Nothing
    /// drives them after a restart: a run that was going when the server stopped is marked
    /// with the step it lost (and saved so), unless its whole script had run and its lab had
    /// settled, as its lab says before any delivery resumes.
    pub async fn restore(rows: Vec<(String, String)>, labs: &Labs, store: &Store) -> Comparisons {
        let mut all = HashMap::new();
        for (id, body) in rows {
            match serde_json::from_str::<Comparison>(&body) {
                Ok(mut comparison) => {
                    if cut_short(&mut comparison, labs)
                        && let Err(e) = save(store, &comparison).await
                    {
                        tracing::warn!(comparison = %id, error = %e, "could not save a comparison's lost steps");
                    }
                    all.insert(comparison.id, comparison);
                }
                Err(e) => tracing::warn!(comparison = %id, error = %e, "skipping an unreadable comparison"),
            }
        }
        Comparisons { all: Arc::new(RwLock::new(all)), late: Default::default(), driving: Default::default() }
    }
}

/// Marks each run of `comparison` that was going when the server stopped with the first step
/// it lost; true when any was marked.
fn cut_short(comparison: &mut Comparison, labs: &Labs) -> bool {
    let (scenario, burst) = (comparison.scenario, comparison.burst);
    let steps = scenario.script(burst).len() as u32;
    let mut marked = false;
    for column in comparison.columns.iter_mut().filter(|c| !c.waiting && c.lost_step.is_none()) {
        if column.finished {
            continue;
        }
        let (Some(played), Some(lab)) = (column.played, labs.get(&column.lab)) else { continue };
        let figures = lab
            .read(|record, letters, counters| report::figures(record, letters, counters, column.started_ms));
        if played >= steps && column_done(scenario, burst, column, &lab, &figures) {
            continue;
        }
        tracing::warn!(lab = %column.lab, played, steps, "a comparison's run was cut short by a restart");
        column.lost_step = Some(played.min(steps));
        marked = true;
    }
    marked
}

pub(super) async fn save(store: &Store, comparison: &Comparison) -> Result<(), String> {
    let body = serde_json::to_string(comparison).expect("a comparison serializes");
    let (writer, id, created) = (store.clone(), comparison.id.to_string(), comparison.created_unix_ms);
    tokio::task::spawn_blocking(move || writer.save_comparison(&id, created, &body))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

/// Saves changes to one driven comparison, one at a time.
#[derive(Clone)]
pub(super) struct Saver {
    pub(super) all: Arc<RwLock<HashMap<ComparisonId, Comparison>>>,
    pub(super) id: ComparisonId,
    pub(super) store: Store,
    pub(super) turn: Arc<tokio::sync::Mutex<()>>,
}

impl Saver {
    /// Makes `change` and saves the comparison with it; `None` when it is gone.
    pub(super) async fn change(
        &self,
        what: &str,
        change: impl FnOnce(&mut Comparison),
    ) -> Option<Comparison> {
        let _turn = self.turn.lock().await;
        let saved = {
            let mut all = self.all.write().unwrap_or_else(|p| p.into_inner());
            let saved = all.get_mut(&self.id)?;
            change(saved);
            saved.clone()
        };
        if let Err(e) = save(&self.store, &saved).await {
            tracing::warn!(comparison = %self.id, error = %e, "could not save a comparison's {what}");
        }
        Some(saved)
    }
}

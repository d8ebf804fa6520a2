//! Running a comparison's rounds: its runs one after another, each run's columns together,
//! the script played in each lab, the driver's clock ticking to measure how late the machine
//! ran, and a late run run again in new labs.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::saved::Saver;
use super::{
    Column, Comparison, ComparisonId, Comparisons, Driving, Figures, MAX_RE_RUNS, MakeLab, RunLateness,
    Scenario, Step, report,
};
use crate::domain::Lateness;
use crate::downstream::DownstreamUpdate;
use crate::lab::Lab;
use crate::producer::Producer;
use crate::retry::PolicyUpdate;
use crate::store::Store;

/// Runs a comparison's runs one after another, each run's policies together so they share
/// the moment's conditions, notes how late the machine kept each run, and runs a late one
/// again (up to `MAX_RE_RUNS` times) in new labs.
struct Driver {
    all: Arc<RwLock<HashMap<ComparisonId, Comparison>>>,
    id: ComparisonId,
    scenario: Scenario,
    burst: usize,
    /// In the order of the comparison's columns, with each column's settings.
    labs: Vec<Arc<Lab>>,
    settings: Vec<(PolicyUpdate, DownstreamUpdate)>,
    producer: Producer,
    store: Store,
    late: RunLateness,
    late_threshold_ms: f64,
    make_lab: MakeLab,
    /// Held while a change is saved, so a later save never carries an older copy.
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Comparisons {
    /// Holds the saved comparison and starts its driver, which runs its runs one after another.
    pub(super) fn drive(
        &self,
        comparison: &Comparison,
        (labs, settings): (Vec<Arc<Lab>>, Vec<(PolicyUpdate, DownstreamUpdate)>),
        (producer, store): (&Producer, &Store),
        make_lab: MakeLab,
    ) {
        self.all.write().unwrap_or_else(|p| p.into_inner()).insert(comparison.id, comparison.clone());
        let late = RunLateness::default();
        self.late.write().unwrap_or_else(|p| p.into_inner()).insert(comparison.id, late.clone());
        let driver = Driver {
            all: self.all.clone(),
            id: comparison.id,
            scenario: comparison.scenario,
            burst: comparison.burst,
            labs,
            settings,
            producer: producer.clone(),
            store: store.clone(),
            late,
            late_threshold_ms: comparison.late_threshold_ms,
            make_lab,
            turn: Default::default(),
        };
        self.driving.lock().unwrap_or_else(|p| p.into_inner()).insert(comparison.id);
        let driving = Driving { driving: self.driving.clone(), id: comparison.id };
        tokio::spawn(async move {
            driver.drive().await;
            drop(driving);
        });
    }
}

/// How often the driver's clock ticks while a run goes: each tick's lateness is how long the
/// machine kept it waiting.
const TICK_MS: u64 = 10;
/// Longest a run may take before the next one starts anyway (a lab deleted mid-run never
/// drains).
const RUN_PATIENCE: Duration = Duration::from_secs(600);

impl Driver {
    async fn drive(mut self) {
        let Some(runs) = self.comparison().map(|c| c.runs) else { return };
        for run in 0..runs {
            let mut attempt = 0;
            loop {
                let Some(comparison) = self.comparison() else { return };
                let ours: Vec<usize> = comparison
                    .columns
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| (c.run, c.attempt) == (run, attempt))
                    .map(|(i, _)| i)
                    .collect();
                self.play_run(&ours, (run, attempt)).await;
                let late = self.lateness(&ours, (run, attempt));
                if late.is_none_or(|late| late <= self.late_threshold_ms) || attempt == MAX_RE_RUNS {
                    break;
                }
                tracing::info!(comparison = %self.id, run, attempt, late, "a comparison's run ran late; running it again");
                if !self.again(&ours, run, attempt + 1).await {
                    break;
                }
                attempt += 1;
            }
        }
    }

    /// Starts the columns `ours` (one attempt of one run) together and waits until all have
    /// finished, ticking the clock whose lateness is the machine's.
    async fn play_run(&self, ours: &[usize], key: (u32, u32)) {
        let start = |saved: &mut Comparison| {
            for &i in ours {
                saved.columns[i].started_ms = self.labs[i].now_ms();
                saved.columns[i].waiting = false;
            }
        };
        let Some(started) = self.saver().change("run start", start).await else { return };
        let script = self.scenario.script(self.burst);
        for &i in ours {
            let (lab, producer) = (self.labs[i].clone(), self.producer.clone());
            let steps = (self.saver(), i);
            tokio::spawn(play(lab, producer, script.clone(), (self.late.clone(), key), steps));
        }
        let begun = tokio::time::Instant::now();
        let mut due = begun;
        let mut tick = 0u64;
        loop {
            due += Duration::from_millis(TICK_MS);
            tokio::time::sleep_until(due).await;
            record(&self.late, key, due.elapsed().as_secs_f64() * 1000.0);
            tick += 1;
            // A busy machine may fall behind by more than a tick: catch up, not burst.
            if due.elapsed() > Duration::from_millis(TICK_MS) {
                due = tokio::time::Instant::now();
            }
            if !tick.is_multiple_of(10) {
                continue;
            }
            if ours.iter().all(|&i| self.done(&started.columns[i], &self.labs[i])) {
                let finish =
                    |saved: &mut Comparison| ours.iter().for_each(|&i| saved.columns[i].finished = true);
                self.saver().change("run's end", finish).await;
                break;
            }
            if begun.elapsed() > RUN_PATIENCE {
                tracing::warn!(comparison = %self.id, run = key.0, "a comparison's run did not finish in time; going on");
                break;
            }
        }
    }

    /// How late the machine kept one attempt of a run: its ticks and steps, and its labs'
    /// traffic arrivals (p99, ms).
    fn lateness(&self, ours: &[usize], key: (u32, u32)) -> Option<f64> {
        let ticks = self.late.lock().unwrap_or_else(|p| p.into_inner()).get(&key).and_then(Lateness::p99_ms);
        ours.iter().filter_map(|&i| self.labs[i].traffic_view().late_ms_p99).chain(ticks).reduce(f64::max)
    }

    /// Sets up new labs for the columns `ours` as attempt `attempt` of `run`, waiting; false
    /// when the server cannot make them (the late run is then left out).
    async fn again(&mut self, ours: &[usize], run: u32, attempt: u32) -> bool {
        let mut made = Vec::new();
        for &i in ours {
            let Some(lab) = (self.make_lab)() else { return false };
            let (policy, downstream) = self.settings[i].clone();
            if lab.set_policy(&policy).is_err() || lab.set_downstream(&downstream).is_err() {
                return false;
            }
            if lab.persisted().await.is_err() {
                return false;
            }
            made.push((i, lab, (policy, downstream)));
        }
        let mut settings = Vec::new();
        let add = |saved: &mut Comparison| {
            for (i, lab, column_settings) in made {
                let (policy, defence) = (saved.columns[i].policy.clone(), saved.columns[i].defence.clone());
                saved.columns.push(Column {
                    policy,
                    defence,
                    run,
                    lab: lab.id,
                    started_ms: lab.now_ms(),
                    waiting: true,
                    attempt,
                    played: Some(0),
                    lost_step: None,
                    finished: false,
                });
                settings.push((lab, column_settings));
            }
        };
        if self.saver().change("re-run", add).await.is_none() {
            return false;
        }
        for (lab, column_settings) in settings {
            self.labs.push(lab);
            self.settings.push(column_settings);
        }
        true
    }

    fn saver(&self) -> Saver {
        Saver { all: self.all.clone(), id: self.id, store: self.store.clone(), turn: self.turn.clone() }
    }

    fn comparison(&self) -> Option<Comparison> {
        self.all.read().unwrap_or_else(|p| p.into_inner()).get(&self.id).cloned()
    }

    fn done(&self, column: &Column, lab: &Lab) -> bool {
        let figures = lab
            .read(|record, letters, counters| report::figures(record, letters, counters, column.started_ms));
        column_done(self.scenario, self.burst, column, lab, &figures)
    }
}

fn record(late: &RunLateness, key: (u32, u32), behind_ms: f64) {
    late.lock().unwrap_or_else(|p| p.into_inner()).entry(key).or_default().record(behind_ms);
}

/// Plays the scenario's script in one lab: bursts, traffic and downstream changes at their
/// times, noting how late each step came against its plan.
/// Each step that ran is saved as played, so a restart knows which it lost.
async fn play(
    lab: Arc<Lab>,
    producer: Producer,
    script: Vec<Step>,
    (late, key): (RunLateness, (u32, u32)),
    (saver, column): (Saver, usize),
) {
    let start = tokio::time::Instant::now();
    let mut counting = true;
    for (played, step) in (1..).zip(script) {
        let due = start + Duration::from_millis(step.at_ms());
        tokio::time::sleep_until(due).await;
        let behind = due.elapsed().as_secs_f64() * 1000.0;
        record(&late, key, behind);
        match step {
            Step::Traffic { update, .. } => match lab.set_traffic(&update) {
                Ok(_) => producer.drive_traffic(&lab),
                Err(e) => {
                    tracing::warn!(lab = %lab.id, error = %e.detail, "a comparison's traffic was refused")
                }
            },
            Step::Burst { count, .. } => match lab.accept_burst(count) {
                Ok(ids) => match lab.persisted().await {
                    Ok(()) => producer.start(&lab, ids),
                    Err(_) => {
                        tracing::warn!(lab = %lab.id, "the store could not keep a comparison's burst; it was taken back");
                        lab.withdraw_burst(&ids);
                    }
                },
                Err(e) => tracing::warn!(lab = %lab.id, error = ?e, "a comparison's burst was refused"),
            },
            Step::Downstream { update, .. } => {
                if let Err(e) = lab.set_downstream(&update) {
                    tracing::warn!(lab = %lab.id, error = %e, "a comparison's step was refused");
                }
            }
        }
        // Counted once what it changed in the lab is kept, and only while every step before
        // it was: a step counted has run.
        counting = counting && lab.persisted().await.is_ok();
        let count = |saved: &mut Comparison| saved.columns[column].played = Some(played);
        if counting && saver.change("steps", count).await.is_none() {
            return;
        }
    }
}

/// Whether a started column has finished: drained, and for steady traffic, its script ended.
pub(super) fn column_done(
    scenario: Scenario,
    burst: usize,
    column: &Column,
    lab: &Lab,
    figures: &Figures,
) -> bool {
    if scenario.has_traffic() {
        figures.drain_ms.is_some()
            && lab.traffic().is_none()
            && lab.now_ms() >= column.started_ms + scenario.script_ends_ms(burst)
    } else {
        figures.drain_ms.is_some() && figures.messages >= burst as u64
    }
}

//! A lab's settings as they change: the downstream (for good, or for a while, going back by
//! itself when the time is up) and the retry policy, each change an event and a marker on the
//! time axis, as are crashes and restarts.

use super::{Lab, LabState};
use crate::domain::{Marker, MarkerKind};
use crate::downstream::{DownstreamSettings, DownstreamUpdate, DownstreamView, Mode, Revert};
use crate::events::Event;
use crate::invalid::Invalid;
use crate::retry::{Policy, PolicyUpdate};

/// The settings in force: the downstream, its timed change if any, and the client's policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub downstream: DownstreamSettings,
    pub revert: Option<Revert>,
    pub policy: Policy,
}

impl Lab {
    /// Changes the downstream; absent fields keep their value. With `for_ms`, the change
    /// lasts that long and then the downstream goes back by itself to what it was.
    pub fn set_downstream(&self, update: &DownstreamUpdate) -> Result<DownstreamView, Invalid> {
        let mut state = self.lock();
        let now = self.now_ms();
        let endpoint = &mut state.endpoint;
        let next = endpoint.settings.updated(update)?;
        // Going back restores what was set before the first timed change, not a timed one.
        let before = endpoint.revert.map_or(endpoint.settings, |r| r.to);
        let only_defences = *update == DownstreamUpdate { defences: update.defences, ..Default::default() };
        endpoint.revert = match (update.for_ms, endpoint.revert) {
            (Some(ms), _) => Some(Revert { at_ms: now + ms, to: before }),
            // Defences turned on or off during a timed change (a preset's ending clicked during
            // its spike) leave the change to end when it was to, and stay after it.
            (None, Some(revert)) if only_defences && before.mode == next.mode => {
                Some(Revert { to: DownstreamSettings { defences: next.defences, ..revert.to }, ..revert })
            }
            (None, _) => None,
        };
        let label = match update.for_ms {
            Some(ms) => format!("{} for {ms} ms", describe(&next)),
            None => describe(&next),
        };
        self.apply(&mut state, next, None, Marker { at_ms: now, kind: MarkerKind::Settings, label }, now);
        let view = state.endpoint.view();
        drop(state);
        if let Some(revert) = view.revert {
            self.schedule_revert(revert);
        }
        Ok(view)
    }

    /// Changes the retry policy; absent fields keep their value.
    pub fn set_policy(&self, update: &PolicyUpdate) -> Result<Policy, Invalid> {
        let mut state = self.lock();
        let now = self.now_ms();
        let policy = state.clients.policy().updated(update)?;
        let max = self.limits.max_clients;
        if policy.clients > max {
            return Err(Invalid::new("policy.clients", format!("clients must be 1 to {max} (max_clients)")));
        }
        let label = format!("policy: {}", changed_fields(state.clients.policy(), &policy));
        let downstream = state.endpoint.settings;
        self.apply(
            &mut state,
            downstream,
            Some(policy.clone()),
            Marker { at_ms: now, kind: MarkerKind::Settings, label },
            now,
        );
        Ok(policy)
    }

    /// Puts the downstream and the policy back to a new lab's (a timed change ends with them),
    /// keeping the policy's seed, with a marker: a chapter that clears the lab then starts from
    /// the same settings whatever ran before it, the server's defences and the client's
    /// protections off.
    pub fn default_settings(&self) {
        let mut state = self.lock();
        let now = self.now_ms();
        state.endpoint.revert = None;
        let marker = Marker { at_ms: now, kind: MarkerKind::Settings, label: "a new lab's settings".into() };
        // The seed is the person's choice of a repeatable run, not a chapter's setting: it stays.
        let policy = Policy { seed: state.clients.policy().seed, ..Policy::default() };
        self.apply(&mut state, DownstreamSettings::default(), Some(policy), marker, now);
    }

    /// The settings in force: the downstream, its timed change if any, the policy.
    pub fn settings(&self) -> Settings {
        let state = self.lock();
        Settings {
            downstream: state.endpoint.settings,
            revert: state.endpoint.revert,
            policy: state.clients.policy().clone(),
        }
    }

    /// Puts settings back as they were (a change the store could not keep), without a marker.
    pub fn restore_settings(&self, Settings { downstream, revert, policy }: Settings) {
        let mut state = self.lock();
        let now = self.now_ms();
        // Through `apply`, so the pipeline's stages follow the settings put back.
        let moved = state.endpoint.apply(downstream, now, &mut rand::rng());
        self.moved(&mut state, moved, now);
        state.endpoint.revert = revert;
        state.clients.restore_policy(policy);
        self.sync_clients(&mut state, now);
        let event = Event::SettingsChanged {
            downstream: state.endpoint.view(),
            policy: state.clients.policy().view(),
        };
        self.publish(&mut state, &event, now);
    }

    /// A timed setting ran out: the downstream goes back, unless another change replaced it.
    fn revert_due(&self, at_ms: u64) {
        let mut state = self.lock();
        let Some(revert) = state.endpoint.revert.filter(|r| r.at_ms == at_ms) else { return };
        let now = self.now_ms();
        state.endpoint.revert = None;
        let label = format!("back to {}", describe(&revert.to));
        self.apply(
            &mut state,
            revert.to,
            None,
            Marker { at_ms: now, kind: MarkerKind::Scheduled, label },
            now,
        );
    }

    /// Arms the timer of a timed setting (again, after a restart).
    pub fn schedule_revert(&self, revert: Revert) {
        let Some(lab) = self.this.upgrade() else { return };
        let delay = revert.at_ms.saturating_sub(self.now_ms());
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
            lab.revert_due(revert.at_ms);
        });
    }

    /// The settings in force, and when a timed one goes back.
    pub fn pending_revert(&self) -> Option<Revert> {
        self.lock().endpoint.revert
    }

    fn apply(
        &self,
        state: &mut LabState,
        downstream: DownstreamSettings,
        policy: Option<Policy>,
        marker: Marker,
        now: u64,
    ) {
        let moved = state.endpoint.apply(downstream, now, &mut rand::rng());
        self.moved(state, moved, now);
        if let Some(policy) = policy {
            let closed = state.clients.set_policy(policy, now);
            self.breaker_changed(state, closed, now);
            self.sync_clients(state, now);
        }
        state.record.markers.push(marker.clone());
        let event = Event::SettingsChanged {
            downstream: state.endpoint.view(),
            policy: state.clients.policy().view(),
        };
        self.publish(state, &event, now);
        self.publish(state, &Event::Marker { marker }, now);
    }

    /// The server restarted: every client's breaker starts closed again, and its history says
    /// so (and, with several clients, how many stand open).
    pub fn breaker_restarted(&self) {
        let mut state = self.lock();
        let now = self.now_ms();
        let (first, others) = state.clients.restarted(now);
        self.breaker_changed(&mut state, first, now);
        if others && first.is_none() {
            self.shares_changed(&mut state, now);
        }
    }

    /// Adds a marker on the time axis (a crash, a restart).
    pub fn mark(&self, kind: MarkerKind, label: &str) {
        let mut state = self.lock();
        let now = self.now_ms();
        let marker = Marker { at_ms: now, kind, label: label.to_owned() };
        state.record.markers.push(marker.clone());
        self.publish(&mut state, &Event::Marker { marker }, now);
    }
}

/// A downstream setting in a few words, for its marker; the answer time too where it counts,
/// so a flag for a slowdown says it is one.
fn describe(settings: &DownstreamSettings) -> String {
    let latency = match settings.latency_ms {
        [lo, hi] if lo == hi => format!("{lo} ms"),
        [lo, hi] => format!("{lo}–{hi} ms"),
    };
    match settings.mode {
        Mode::Healthy => format!("healthy ({latency})"),
        Mode::Flaky => format!("flaky ({:.0} % fail, {latency})", settings.failure_rate * 100.0),
        Mode::Throttled => {
            format!("throttled at {}/s (burst {})", settings.rate_per_s, settings.burst)
        }
        Mode::Overloaded => {
            let defences = settings.defences.flags();
            let defended = match defences.is_empty() {
                true => String::new(),
                false => format!("; defences: {}", defences.join(", ")),
            };
            format!(
                "overloaded (capacity {}, queue {}, {latency} each{defended})",
                settings.capacity, settings.queue
            )
        }
        mode => mode.as_str().to_owned(),
    }
}

/// The policy fields a change touched, as `name value` pairs.
fn changed_fields(before: &Policy, after: &Policy) -> String {
    let (serde_json::Value::Object(before), serde_json::Value::Object(after)) =
        (serde_json::json!(before), serde_json::json!(after))
    else {
        return String::new();
    };
    let changed: Vec<String> =
        after.iter().filter(|(k, v)| before.get(*k) != Some(v)).map(|(k, v)| format!("{k} {v}")).collect();
    if changed.is_empty() { "unchanged".into() } else { changed.join(", ") }
}

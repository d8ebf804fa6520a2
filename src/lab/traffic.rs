//! The lab's steady traffic: how it is set (each change a marker), the arrivals it creates,
//! each accepted as a burst's messages are, or refused and counted when the lab already owes
//! too many deliveries, and the task that runs it (started by the producer).

use super::{Lab, LabState};
use crate::domain::{
    Marker, MarkerKind, Traffic, TrafficCaps, TrafficRefusal, TrafficSettings, TrafficUpdate,
};
use crate::domain::{Message, TrafficView};
use crate::events::Event;

impl Lab {
    /// Sets (or, at rate 0, stops) the steady traffic; returns it as it now is, and what it
    /// was (to put back with `restore_traffic` when the store cannot keep the change).
    pub fn set_traffic(
        &self,
        update: &TrafficUpdate,
    ) -> Result<(TrafficView, Option<TrafficSettings>), TrafficRefusal> {
        let caps = TrafficCaps {
            max_rate_per_s: self.limits.max_traffic_rate_per_s,
            max_for_ms: self.limits.max_traffic_for_ms,
        };
        let mut state = self.lock();
        let now = self.now_ms();
        let settings = update.settings(caps, now)?;
        let before = std::mem::replace(&mut state.traffic.settings, settings);
        if settings.is_some() {
            state.traffic.lateness.clear();
        }
        let label = Traffic::describe(settings.as_ref(), now);
        self.traffic_changed(&mut state, MarkerKind::Settings, label, now);
        Ok((state.traffic.view(), before))
    }

    /// Puts the traffic back as it was (a change the store could not keep), without a marker.
    pub fn restore_traffic(&self, settings: Option<TrafficSettings>) {
        let mut state = self.lock();
        state.traffic.settings = settings;
        let now = self.now_ms();
        let traffic = state.traffic.view();
        self.publish(&mut state, &Event::Traffic { traffic }, now);
    }

    /// The traffic's `for_ms` ran out: it stops, unless it was set anew meanwhile.
    pub fn traffic_ended(&self, settings: TrafficSettings) {
        let mut state = self.lock();
        if state.traffic.settings != Some(settings) {
            return;
        }
        state.traffic.settings = None;
        let now = self.now_ms();
        self.traffic_changed(&mut state, MarkerKind::Scheduled, "traffic ended".into(), now);
    }

    fn traffic_changed(&self, state: &mut LabState, kind: MarkerKind, label: String, now: u64) {
        let marker = Marker { at_ms: now, kind, label };
        state.record.markers.push(marker.clone());
        let traffic = state.traffic.view();
        state.traffic.changed = false;
        self.publish(state, &Event::Traffic { traffic }, now);
        self.publish(state, &Event::Marker { marker }, now);
    }

    /// The traffic as the snapshot shows it.
    pub fn traffic_view(&self) -> TrafficView {
        self.lock().traffic.view()
    }

    /// The traffic in force, if any.
    pub fn traffic(&self) -> Option<TrafficSettings> {
        self.lock().traffic.settings
    }

    /// Arrivals are due, each `late_ms` behind its plan: creates a message for each one the
    /// lab has room for (`--max-active-messages-per-lab`, `--max-messages-per-lab`, and the
    /// whole server's `--max-active-messages`) and counts the others as refused at the source.
    /// Returns the ids created; they are owed a delivery once the store has them
    /// (`persisted`), as a burst's are. `None` when the traffic is no longer `settings`
    /// (stopped or changed since): its task is done.
    pub fn accept_arrivals(&self, settings: TrafficSettings, late_ms: &[f64]) -> Option<Vec<u64>> {
        // Counted before this lab is locked: a lab never holds its own lock while taking another's.
        let elsewhere = self.active_elsewhere();
        let mut state = self.lock();
        if state.traffic.settings != Some(settings) {
            return None;
        }
        let now = self.now_ms();
        // Delivered messages kept for the window make room for new arrivals.
        let forgotten = state.record.make_room(late_ms.len(), self.limits.max_messages_per_lab);
        if !forgotten.is_empty() {
            self.publish(&mut state, &Event::MessagesForgotten { message_ids: forgotten }, now);
        }
        let record = &state.record;
        let active = record.active_messages();
        let room_active = self.limits.max_active_messages_per_lab.saturating_sub(active);
        let room_server = self.limits.max_active_messages.saturating_sub(elsewhere + active);
        let room_held = self.limits.max_messages_per_lab.saturating_sub(record.held());
        let accepted = late_ms.len().min(room_active).min(room_server).min(room_held);
        let refused = (late_ms.len() - accepted) as u64;
        for &late in late_ms {
            state.traffic.lateness.record(late);
        }
        state.traffic.sent += accepted as u64;
        state.traffic.refused += refused;
        state.traffic.changed = true;
        state.record.load.refused(now, refused);
        if accepted == 0 {
            // No event to carry them, but the counts are kept in the store all the same.
            self.schedule_flush(&mut state);
            return Some(Vec::new());
        }
        let messages: Vec<Message> = state.record.create_messages(accepted, now);
        let ids = messages.iter().map(|m| m.id).collect();
        self.publish(&mut state, &Event::MessagesCreated { messages }, now);
        Some(ids)
    }

    /// Takes back arrivals the store could not keep: their messages are gone, and they count
    /// as refused at the source.
    pub fn withdraw_arrivals(&self, ids: &[u64]) {
        self.withdraw_burst(ids);
        let mut state = self.lock();
        let now = self.now_ms();
        let count = ids.len() as u64;
        state.traffic.sent = state.traffic.sent.saturating_sub(count);
        state.traffic.refused += count;
        state.traffic.changed = true;
        state.record.load.refused(now, count);
    }

    /// Publishes what the traffic did since the last `traffic` event, if it did anything.
    pub(super) fn publish_traffic(&self, state: &mut LabState, now: u64) {
        if state.traffic.changed {
            state.traffic.changed = false;
            let traffic = state.traffic.view();
            self.publish(state, &Event::Traffic { traffic }, now);
        }
    }

    /// Runs the traffic with the task `spawn` starts, in place of any that ran before.
    pub fn replace_traffic_task(&self, spawn: impl FnOnce() -> tokio::task::JoinHandle<()>) {
        let mut task = self.traffic_task.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = task.take() {
            old.abort();
        }
        *task = Some(spawn().abort_handle());
    }

    /// Stops the task that runs the traffic (its settings stay: a restart resumes it).
    pub fn stop_traffic_task(&self) {
        if let Some(task) = self.traffic_task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
    }
}

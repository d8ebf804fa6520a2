//! The figures of one column of a comparison, measured in its lab: what the policy cost the
//! downstream and what it got for it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::dlq::DeadLetterQueue;
use crate::domain::{Attempt, Counters, LabRecord, MarkerKind, MessageState, Outcome};
use crate::retry::WaitReason;

/// One policy's results so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Figures {
    pub messages: u64,
    /// Requests that reached the downstream.
    pub requests: u64,
    pub requests_per_delivered: Option<f64>,
    /// Requests the downstream answered 429 (rate limited).
    pub throttled: u64,
    /// 429 answers per delivered message: what a throttled downstream was asked for nothing.
    pub throttled_per_delivered: Option<f64>,
    pub delivered: u64,
    pub dead_letter: u64,
    /// Dead letters by what ended their round.
    pub dead_letter_by_cause: BTreeMap<String, u64>,
    /// From the start to the moment the last message was delivered or dead-lettered; `None`
    /// while messages are still owed a delivery.
    pub drain_ms: Option<u64>,
    pub peak_requests_per_100ms: u64,
    /// Work the downstream did for clients that had already given up.
    pub wasted: u64,
    /// From a message's creation to the end of the attempt that delivered it.
    pub latency_p50_ms: Option<u64>,
    pub latency_p99_ms: Option<u64>,
    /// New messages created (a burst's or the traffic's): the offered load.
    pub offered: u64,
    /// Over the 10 s after the trigger ended (the last timed setting going back), messages
    /// delivered per new message offered: near 1 when the endpoint recovered with it, near 0
    /// when it stayed overloaded. `None` without a trigger or without traffic after it.
    pub goodput_after_trigger: Option<f64>,
    pub applied_twice: u64,
    /// Waits the client planned between attempts, and of them those the endpoint's
    /// `Retry-After` set alone (longer than the jittered backoff, or waited exactly, with
    /// nothing drawn on top): when every wait is the
    /// header's, the policy's backoff and jitter changed nothing the endpoint saw.
    pub waits: u64,
    pub waits_set_by_retry_after: u64,
}

/// The window `goodput_after_trigger` is measured over.
const AFTER_TRIGGER_MS: u64 = 10_000;

/// The goodput after the trigger from which the failure counts as ended: half the new messages
/// of those 10 s delivered. A policy that leaves the endpoint stuck delivers next to none of
/// them (under a quarter in every run recorded); one that ends it drains the queue within a
/// few seconds and delivers the rest.
pub const FAILURE_ENDED_AT: f64 = 0.5;

/// Whether a goodput after the trigger says the failure ended.
pub fn failure_ended(goodput_after_trigger: Option<f64>) -> Option<bool> {
    goodput_after_trigger.map(|goodput| goodput >= FAILURE_ENDED_AT)
}

/// The figures of a lab whose comparison started at `started_ms` (lab time).
pub fn figures(
    record: &LabRecord,
    letters: &DeadLetterQueue,
    counters: Counters,
    started_ms: u64,
) -> Figures {
    let messages = record.messages();
    let mut latencies: Vec<u64> = Vec::new();
    let mut last_end = started_ms;
    let (mut waits, mut waits_set_by_retry_after) = (0, 0);
    for message in messages {
        for wait in message.attempts.iter().filter_map(|a| a.wait.as_deref()) {
            waits += 1;
            // The header alone: not a wait the policy's jitter went above (`jitter_above`,
            // `nominal_floor`), which the policies' own draws still spread.
            let header_alone = wait.plan.reason == WaitReason::RetryAfter
                && wait.plan.floor_ms == Some(wait.plan.planned_ms);
            waits_set_by_retry_after += u64::from(header_alone);
        }
        let Some(end) = message.attempts.last().and_then(Attempt::ended_ms) else {
            continue;
        };
        if !message.state.is_active() {
            last_end = last_end.max(end);
        }
        let delivered = message.attempts.last().is_some_and(|a| a.outcome == Some(Outcome::Ok));
        if message.state == MessageState::Delivered && delivered {
            latencies.push(end.saturating_sub(message.created_ms));
        }
    }
    for letter in letters.letters() {
        last_end = last_end.max(letter.dead_lettered_ms);
    }
    latencies.sort_unstable();
    let mut by_cause = BTreeMap::new();
    for letter in letters.letters() {
        *by_cause.entry(letter.cause.as_str().to_owned()).or_insert(0) += 1;
    }
    let bins = record.load.bins();
    let settled = record.held() > 0 && record.active_messages() == 0;
    // The end of a timed downstream setting ("back to ..."), not the traffic's own end.
    let trigger_ended =
        record.markers.all().iter().rev().find(|m| {
            m.kind == MarkerKind::Scheduled && m.at_ms >= started_ms && m.label.starts_with("back to")
        });
    let goodput_after_trigger = trigger_ended.and_then(|ended| {
        let after = bins.iter().filter(|b| (ended.at_ms..ended.at_ms + AFTER_TRIGGER_MS).contains(&b.t_ms));
        let (offered, delivered) = after.fold((0, 0), |(o, d), b| (o + b.offered, d + b.delivered));
        (offered > 0).then(|| round2(delivered as f64 / offered as f64))
    });
    let throttled: u64 = bins.iter().map(|b| b.throttled).sum();
    let per_delivered =
        |count: u64| (counters.delivered > 0).then(|| round2(count as f64 / counters.delivered as f64));
    Figures {
        // Every message created, those that left the window of settled messages included.
        messages: record.next_message_id(),
        requests: counters.requests,
        requests_per_delivered: per_delivered(counters.requests),
        throttled,
        throttled_per_delivered: per_delivered(throttled),
        delivered: counters.delivered,
        dead_letter: counters.dead_letter,
        dead_letter_by_cause: by_cause,
        drain_ms: settled.then(|| last_end.saturating_sub(started_ms)),
        peak_requests_per_100ms: bins.iter().map(|b| b.requests).max().unwrap_or(0),
        wasted: bins.iter().map(|b| b.wasted).sum(),
        latency_p50_ms: percentile(&latencies, 50),
        latency_p99_ms: percentile(&latencies, 99),
        offered: bins.iter().map(|b| b.offered).sum(),
        goodput_after_trigger,
        applied_twice: counters.applied_twice,
        waits,
        waits_set_by_retry_after,
    }
}

/// The nearest-rank percentile of sorted values.
fn percentile(sorted: &[u64], p: usize) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    Some(sorted[rank - 1])
}

fn round2(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

/// The figures summarized over the runs, as the table's rows.
pub const ROWS: &[&str] = &[
    "requests",
    "requests_per_delivered",
    "throttled",
    "throttled_per_delivered",
    "delivered",
    "dead_letter",
    "drain_ms",
    "peak_requests_per_100ms",
    "wasted",
    "latency_p50_ms",
    "latency_p99_ms",
    "goodput_after_trigger",
    "applied_twice",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 50), Some(50));
        assert_eq!(percentile(&values, 99), Some(99));
        assert_eq!(percentile(&[7], 99), Some(7));
        assert_eq!(percentile(&[], 50), None);
    }
}

//! `/metrics` in the OpenMetrics text format (which Prometheus reads), from the
//! `prometheus-client` crate. Counters are kept as things happen; gauges that describe the
//! labs (dead-letter depth, labs, duplicates) are read from the labs at scrape time, so they
//! always agree with the snapshots.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::downstream::HeldKeys;
use crate::lab::Labs;
use crate::store::StoreStats;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    /// An HTTP status, or `timeout`, `transport_error`.
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `delivered` or `dead_lettered`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HeldLabel {
    /// `whole` (in memory, answer and all) or `fingerprint` (the answer in the store).
    held: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LabLabel {
    lab: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HoldLabel {
    /// Holds that lasted at least this many milliseconds.
    at_least_ms: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabel {
    /// What ended the round: a dead letter's cause (`attempts_used_up`, `time_budget`,
    /// `circuit_open`, `retry_budget`, `permanent`, `pushback`, or the kind of the listed
    /// protection that refused it, as docs/events.md lists them).
    cause: String,
}

pub struct Metrics {
    pub attempts: Family<StatusLabel, Counter>,
    pub messages: Family<OutcomeLabel, Counter>,
    pub waits: Histogram,
    pub sse_subscribers: Gauge,
    registry: Registry,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let attempts = Family::<StatusLabel, Counter>::default();
        let messages = Family::<OutcomeLabel, Counter>::default();
        // 10 ms to about 80 s: the lab's waits run from test-sized to the Retry-After cap.
        let waits = Histogram::new(exponential_buckets(0.01, 2.0, 14));
        let sse_subscribers = Gauge::default();
        let mut registry = Registry::with_prefix("retrylab");
        registry.register("attempts", "Delivery attempts by HTTP status or failure", attempts.clone());
        registry.register(
            "messages",
            "Messages that reached an end: delivered or dead-lettered",
            messages.clone(),
        );
        registry.register_with_unit(
            "wait",
            "Measured waits between attempts",
            prometheus_client::registry::Unit::Seconds,
            waits.clone(),
        );
        registry.register("sse_subscribers", "Open event streams", sse_subscribers.clone());
        Metrics { attempts, messages, waits, sse_subscribers, registry }
    }
}

impl Metrics {
    pub fn attempt(&self, status: String) {
        self.attempts.get_or_create(&StatusLabel { status }).inc();
    }

    pub fn message(&self, outcome: &'static str) {
        self.messages.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    /// The whole exposition: the running counters, then what the labs hold right now.
    pub fn render(&self, labs: &Labs, store: &StoreStats) -> String {
        let depth = Family::<LabLabel, Gauge>::default();
        let depth_overall = Gauge::<i64>::default();
        let applied_twice = Counter::<u64>::default();
        let active = Gauge::<i64>::default();
        let keys = Family::<HeldLabel, Gauge>::default();
        let by_cause = Family::<CauseLabel, Gauge>::default();
        let oldest_age = Family::<LabLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        let window_bytes = Gauge::<i64>::default();
        let keys_let_go = Gauge::<i64>::default();
        let mut oldest_overall: Option<u64> = None;
        let now_unix_ms = crate::lab::unix_now_ms();
        for lab in labs.all() {
            let (facets, oldest) = lab.dead_letter_signals();
            for (cause, count) in facets.cause {
                by_cause.get_or_create(&CauseLabel { cause }).inc_by(count as i64);
            }
            if let Some(oldest) = oldest {
                let age_s = now_unix_ms.saturating_sub(oldest) as f64 / 1000.0;
                oldest_age.get_or_create(&LabLabel { lab: lab.id.to_string() }).set(age_s);
                oldest_overall = Some(oldest_overall.map_or(oldest, |o| o.min(oldest)));
            }
            let HeldKeys { whole, fingerprint, let_go } = lab.held_keys();
            keys.get_or_create(&HeldLabel { held: "whole" }).inc_by(whole as i64);
            keys.get_or_create(&HeldLabel { held: "fingerprint" }).inc_by(fingerprint as i64);
            keys_let_go.inc_by(let_go as i64);
            let counters = lab.counters();
            depth.get_or_create(&LabLabel { lab: lab.id.to_string() }).set(counters.dead_letter as i64);
            depth_overall.inc_by(counters.dead_letter as i64);
            applied_twice.inc_by(counters.applied_twice);
            window_bytes.inc_by(lab.event_window_bytes() as i64);
            active.inc();
        }
        let commits = Counter::<u64>::default();
        commits.inc_by(store.commits.load(std::sync::atomic::Ordering::Relaxed));
        let rows = Counter::<u64>::default();
        rows.inc_by(store.rows.load(std::sync::atomic::Ordering::Relaxed));

        let oldest_overall_age = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        if let Some(oldest) = oldest_overall {
            oldest_overall_age.set(now_unix_ms.saturating_sub(oldest) as f64 / 1000.0);
        }
        // The counts before the longest hold, which only grows: it is never below the highest
        // step they show.
        let long_holds = Family::<HoldLabel, Counter>::default();
        for (at_least_ms, count) in labs.lock_holds.at_least() {
            long_holds.get_or_create(&HoldLabel { at_least_ms }).inc_by(count);
        }
        let longest_hold = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        longest_hold.set(labs.lock_holds.longest_us() as f64 / 1e6);

        let mut now = Registry::with_prefix("retrylab");
        now.register("dead_letter_depth", "Dead letters waiting in each lab", depth);
        now.register("dead_letter_depth_overall", "Dead letters waiting in all labs", depth_overall);
        now.register(
            "dead_letter_depth_by_cause",
            "Dead letters waiting in all labs, by what ended their round",
            by_cause,
        );
        now.register_with_unit(
            "dead_letter_oldest_age",
            "How long the oldest dead letter of each lab has waited",
            prometheus_client::registry::Unit::Seconds,
            oldest_age,
        );
        now.register_with_unit(
            "dead_letter_oldest_age_overall",
            "How long the oldest dead letter of all labs has waited (0 when there is none)",
            prometheus_client::registry::Unit::Seconds,
            oldest_overall_age,
        );
        now.register("applied_twice", "Idempotency keys applied more than once (must stay 0)", applied_twice);
        now.register("active_labs", "Labs this server holds in memory", active);
        let resting = Gauge::<i64>::default();
        resting.set(labs.resting_labs() as i64);
        now.register(
            "resting_labs",
            "Labs at rest: idle past --idle-lab-rest-ms, held in the store alone until a request wakes them",
            resting,
        );
        now.register_with_unit(
            "event_window",
            "Events kept for resumes, in all labs (each lab's bound is --event-window-bytes)",
            prometheus_client::registry::Unit::Bytes,
            window_bytes,
        );
        now.register("idempotency_keys", "Applied idempotency keys in memory, by how they are held", keys);
        now.register(
            "idempotency_keys_let_go",
            "Applied idempotency keys the labs in memory let go past --cold-keys-per-lab (the store holds them, and \
             a lab that let some go looks a key it does not hold up in the store)",
            keys_let_go,
        );
        now.register(
            "lab_lock_long_holds",
            "Holds of a lab's lock that lasted at least at_least_ms milliseconds, all labs together",
            long_holds,
        );
        now.register_with_unit(
            "lab_lock_longest_hold",
            "The longest any lab's lock was held since the server started (0 when none reached 1 ms)",
            prometheus_client::registry::Unit::Seconds,
            longest_hold,
        );
        now.register("store_commits", "Transactions the store committed", commits);
        now.register("store_rows", "Rows the store wrote", rows);

        let mut text = String::new();
        encode_registry(&mut text, &self.registry).expect("writing to a String cannot fail");
        encode_registry(&mut text, &now).expect("writing to a String cannot fail");
        encode_eof(&mut text).expect("writing to a String cannot fail");
        text
    }
}

//! The lab's side of its downstream endpoint: each request is decided against the ledger, and
//! each write applied, under the lab's lock, so a key can never be applied twice and every
//! answer is an event in order with the client's own.

use super::{Lab, unix_now_ms};
use crate::downstream::{self, Decision, IdempotencyKey, StoredResponse};
use crate::events::Event;

impl Lab {
    /// Decides a downstream request against the ledger; returns the decision and the epoch
    /// it was made in (a reset in between voids a pending write).
    pub fn downstream_decide(&self, key: &IdempotencyKey, body: &serde_json::Value) -> (Decision, u64) {
        let mut rng = rand::rng();
        self.change(|record, now| {
            let settings = record.downstream;
            let clock = (now, unix_now_ms());
            let decision = downstream::decide(&mut record.ledger, &settings, key, body, clock, &mut rng);
            let (status, applied, replayed, detail) = match &decision {
                Decision::Replay(r) => (r.status, false, true, None),
                Decision::InProgress => (409, false, false, Some("key still being processed")),
                Decision::BodyMismatch => (422, false, false, Some("key reused with another body")),
                Decision::Unavailable { .. } => (503, false, false, Some("unavailable, nothing applied")),
                Decision::AppliedEarly { .. } => (200, true, false, Some("applied; answering slowly")),
                // Published when the write lands, in `downstream_complete`.
                Decision::Process { .. } => return Some(((decision, record.epoch), None)),
            };
            let event =
                Event::DownstreamRequest { key: key.as_str().into(), status, applied, replayed, detail };
            Some(((decision, record.epoch), Some(event)))
        })
        .expect("a decision is always made")
    }

    /// Applies a reserved key's write, unless the lab was reset since it was reserved.
    pub fn downstream_complete(&self, key: &IdempotencyKey, epoch: u64) -> Option<StoredResponse> {
        self.change(|record, now| {
            if record.epoch != epoch {
                return None;
            }
            let response = record.ledger.complete(key, now, unix_now_ms());
            let event = Event::DownstreamRequest {
                key: key.as_str().into(),
                status: response.status,
                applied: true,
                replayed: false,
                detail: None,
            };
            Some((response, Some(event)))
        })
    }

    /// Counts a request the downstream refused before reading its key or body.
    pub fn downstream_refused(&self, status: u16, detail: &'static str) {
        self.change(|record, _| {
            record.ledger.count_request();
            let event = Event::DownstreamRequest {
                key: String::new(),
                status,
                applied: false,
                replayed: false,
                detail: Some(detail),
            };
            Some(((), Some(event)))
        });
    }
}

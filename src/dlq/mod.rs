//! The dead-letter queue's operations. Dead letters themselves are kept by the store, with
//! every attempt and the reason; replaying sends them again with the same idempotency keys
//! and a fresh attempt budget, as a new round.

use std::sync::Arc;

use crate::lab::Lab;
use crate::producer::Producer;

/// Replays the given dead letters (all of them with `None`); returns the replayed ids, or the
/// ids that are not in the queue (nothing is replayed then).
pub fn replay(lab: &Arc<Lab>, producer: &Producer, ids: Option<&[u64]>) -> Result<Vec<u64>, Vec<u64>> {
    let replayed = lab.replay(ids)?;
    producer.start(lab, replayed.clone());
    Ok(replayed)
}

//! The dead-letter queue's operations. Dead letters themselves are kept by the store, with
//! every attempt and the reason; replaying sends them again with the same idempotency keys
//! and a fresh attempt budget, as a new round. A message that keeps coming back is
//! quarantined: "replay all" leaves it alone, and replaying it by id needs a confirmation.

use std::sync::Arc;

use crate::lab::Lab;
use crate::producer::Producer;
use crate::store::ReplayRefusal;

/// Replays the given dead letters (every one not quarantined with `None`); returns the
/// replayed ids. Nothing is replayed when any named id cannot be.
pub fn replay(
    lab: &Arc<Lab>,
    producer: &Producer,
    ids: Option<&[u64]>,
    confirm_quarantined: bool,
) -> Result<Vec<u64>, ReplayRefusal> {
    let replayed = lab.replay(ids, confirm_quarantined)?;
    producer.start(lab, replayed.clone());
    Ok(replayed)
}

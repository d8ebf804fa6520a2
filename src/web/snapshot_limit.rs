//! Snapshots cost their size: a big lab's is megabytes of JSON built fresh for each read, so
//! reads are held to a rate in bytes per client, and the bytes being built at once, for all
//! clients together, to a bound. Past either, the answer is 429 naming the limit.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::AppError;
use super::rate_limit::RateLimiter;
use crate::config::Limits;

pub struct SnapshotGate {
    per_client: RateLimiter,
    /// Kibibytes of snapshots being built now.
    building: Arc<Semaphore>,
    max_building_kib: u32,
    burst_bytes: u64,
}

impl SnapshotGate {
    pub fn new(limits: &Limits, client_ip_header: Option<String>) -> Self {
        let max_building_kib =
            u32::try_from(limits.max_snapshot_bytes_building.div_ceil(1024).max(1)).unwrap_or(u32::MAX);
        SnapshotGate {
            per_client: RateLimiter::bytes(
                limits.snapshot_bytes_per_s,
                limits.snapshot_burst_bytes,
                client_ip_header,
            ),
            building: Arc::new(Semaphore::new(max_building_kib as usize)),
            max_building_kib,
            burst_bytes: limits.snapshot_burst_bytes.max(1),
        }
    }

    pub fn limiter(&self) -> &RateLimiter {
        &self.per_client
    }

    /// Takes `bytes` from `client`'s allowance for a read that streams in bounded memory (an
    /// export), or says it is spent: the bound on bytes being built does not apply.
    pub fn charge(&self, client: IpAddr, bytes: usize) -> Result<(), AppError> {
        let bytes = (bytes as u64).min(self.burst_bytes);
        self.per_client.take_n(client, u32::try_from(bytes).unwrap_or(u32::MAX), Instant::now()).map_err(
            |wait| AppError::RateLimited {
                limit: "snapshot_bytes_per_s",
                retry_after_s: wait.as_secs_f64().ceil().max(1.0) as u64,
            },
        )
    }

    /// Lets `client` build a snapshot of about `bytes`, or says which limit refuses it. The
    /// permit is held while it is built; a snapshot larger than a bound costs the whole bound,
    /// so it can still be read alone.
    pub fn admit(&self, client: IpAddr, bytes: usize) -> Result<OwnedSemaphorePermit, AppError> {
        self.charge(client, bytes)?;
        let bytes = (bytes as u64).min(self.burst_bytes);
        let kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX).clamp(1, self.max_building_kib);
        self.building
            .clone()
            .try_acquire_many_owned(kib)
            .map_err(|_| AppError::RateLimited { limit: "max_snapshot_bytes_building", retry_after_s: 1 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_are_held_to_their_bytes_per_client_and_to_a_bound_being_built() {
        let limits = Limits {
            snapshot_bytes_per_s: 1_000,
            snapshot_burst_bytes: 100_000,
            max_snapshot_bytes_building: 50 * 1024,
            ..Default::default()
        };
        let gate = SnapshotGate::new(&limits, None);
        let (me, other) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = gate.admit(me, 30 * 1024).expect("within both");
        let building = gate.admit(other, 30 * 1024).map(|_| ()).unwrap_err();
        assert!(matches!(building, AppError::RateLimited { limit: "max_snapshot_bytes_building", .. }));
        drop(first);
        let third = "10.0.0.3".parse().unwrap();
        let alone = gate.admit(third, 10_000_000).expect("a snapshot past the bound is read alone");
        drop(alone);
        drop(gate.admit(me, 60_000).expect("the rest of the burst"));
        let rate = gate.admit(me, 30_000).map(|_| ()).unwrap_err();
        assert!(matches!(rate, AppError::RateLimited { limit: "snapshot_bytes_per_s", .. }));
    }
}

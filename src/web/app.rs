//! The state every handler shares: the labs, the comparisons, the client, the store, the
//! metrics, the limits and the rate limiters, and the shutdown signal.

use std::ops::Deref;
use std::sync::Arc;

use tokio::sync::watch;

use super::{RateLimiter, SnapshotGate};
use crate::compare::Comparisons;
use crate::config::{Limits, Retention};
use crate::lab::Labs;
use crate::metrics::Metrics;
use crate::producer::Producer;
use crate::store::Store;

pub struct App {
    pub labs: Labs,
    pub comparisons: Comparisons,
    pub producer: Producer,
    pub store: Store,
    pub metrics: Arc<Metrics>,
    pub limits: Limits,
    pub retention: Retention,
    pub rate_limiter: RateLimiter,
    /// Each outside client's rate on the labs' endpoints.
    pub endpoint_limiter: RateLimiter,
    /// Each client's rate of creating labs.
    pub create_limiter: RateLimiter,
    /// Snapshot reads: bytes per client, and bytes being built at once.
    pub snapshot_gate: SnapshotGate,
    /// Flips to `true` when the server is shutting down, so open event streams end.
    pub shutdown: watch::Receiver<bool>,
}

#[derive(Clone)]
pub struct AppState(pub Arc<App>);

impl Deref for AppState {
    type Target = App;
    fn deref(&self) -> &App {
        &self.0
    }
}

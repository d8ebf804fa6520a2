//! The lab's state, behind one boundary. `record` holds a lab's state in memory and notes what
//! each change touched; `sqlite` makes those changes durable with group commit and loads them
//! back after a restart or a crash.

mod record;
mod sqlite;

pub use record::*;
pub use sqlite::{Batch, Flush, LabRow, LoadedLab, Store, StoreError, StoreStats};

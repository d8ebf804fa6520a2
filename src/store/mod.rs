//! Persistence only: one SQLite file, its versioned migrations, and the writer thread that
//! commits every lab's changed rows in groups and loads them back after a restart or a crash.

mod changes;
mod sqlite;

pub use changes::{RecordChanges, RecordParts};

pub use sqlite::{Batch, Flush, Health, LabRow, LoadedLab, Store, StoreError, StoreSettings, StoreStats};

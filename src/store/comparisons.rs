//! Comparisons: each written once, when it starts (what it measures lives in its labs).

use rusqlite::params;

use super::schema::connect;
use super::{Store, StoreError};

impl Store {
    /// Saves a comparison (blocking). A comparison is written once, when it starts: what it
    /// measures lives in its labs.
    pub fn save_comparison(&self, id: &str, created_unix_ms: u64, body: &str) -> Result<(), StoreError> {
        let connection = connect(&self.path, self.cache_kib)?;
        connection.execute(
            "INSERT OR REPLACE INTO comparisons (id, created_unix_ms, body) VALUES (?1, ?2, ?3)",
            params![id, created_unix_ms, body],
        )?;
        Ok(())
    }

    /// Every comparison, oldest first, as `(id, body)` (blocking).
    pub fn load_comparisons(&self) -> Result<Vec<(String, String)>, StoreError> {
        let connection = connect(&self.path, self.cache_kib)?;
        let mut statement =
            connection.prepare("SELECT id, body FROM comparisons ORDER BY created_unix_ms")?;
        let rows = statement.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

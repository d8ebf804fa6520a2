//! A setting's unusable value, naming its field as the page's forms name it
//! (`policy.timeout_ms`, `downstream.capacity`), so a 422 can say which input to fix.
//! A leaf: the settings' own modules return it.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The field, dotted from its settings' name.
    pub field: String,
    /// What is wrong with it, in words.
    pub detail: String,
}

impl Invalid {
    pub fn new(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Invalid { field: field.into(), detail: detail.into() }
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

impl std::error::Error for Invalid {}

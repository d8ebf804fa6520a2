//! A short history kept with a lab (its markers, its breaker's changes of state): the newest
//! `CAP` entries, the oldest going first, written to the store whole when it changed.

use serde::Serialize;

#[derive(Debug)]
pub struct History<T, const CAP: usize> {
    all: Vec<T>,
    /// Changed since the store last took it.
    unsaved: bool,
}

impl<T, const CAP: usize> Default for History<T, CAP> {
    fn default() -> Self {
        History { all: Vec::new(), unsaved: false }
    }
}

impl<T: Serialize, const CAP: usize> History<T, CAP> {
    /// A history as the store kept it.
    pub fn restore(all: Vec<T>) -> Self {
        History { all, unsaved: false }
    }

    pub fn push(&mut self, entry: T) {
        if self.all.len() >= CAP {
            self.all.remove(0);
        }
        self.all.push(entry);
        self.unsaved = true;
    }

    pub fn all(&self) -> &[T] {
        &self.all
    }

    pub fn clear(&mut self) {
        self.all.clear();
        self.unsaved = true;
    }

    /// All of it as JSON, if it changed since the last call (written whole: a short list that
    /// changes seldom).
    pub fn take_unsaved(&mut self) -> Option<String> {
        std::mem::take(&mut self.unsaved)
            .then(|| serde_json::to_string(&self.all).expect("a history serializes: plain data"))
    }

    /// The store could not keep it: it goes with the next commit.
    pub fn mark_unsaved(&mut self) {
        self.unsaved = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_keeps_the_newest_and_says_when_it_changed() {
        let mut history = History::<u32, 2>::restore(vec![1]);
        assert_eq!(history.take_unsaved(), None, "as the store kept it");
        history.push(2);
        history.push(3);
        assert_eq!(history.all(), [2, 3]);
        assert_eq!(history.take_unsaved().as_deref(), Some("[2,3]"));
        assert_eq!(history.take_unsaved(), None, "taken once");
        history.mark_unsaved();
        assert_eq!(history.take_unsaved().as_deref(), Some("[2,3]"));
        history.clear();
        assert_eq!(history.take_unsaved().as_deref(), Some("[]"));
    }
}

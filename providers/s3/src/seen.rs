//! What this instance last read or wrote of each object, so that a free object it saw is taken
//! with one `If-Match` write, and forgetting it when an acquire may have changed the object.

use std::sync::PoisonError;

use crate::{object::State, store::S3Store};

/// How many objects [`Inner::seen`] remembers before it starts over.
const SEEN_CAPACITY: usize = 4096;

/// Forgets what this instance saw of a key unless disarmed: an acquire that failed or was
/// dropped mid-flight (a timeout, a cancelled task) may have changed the object.
pub(crate) struct ForgetOnDrop<'a> {
    pub(crate) store: &'a S3Store,
    pub(crate) key: &'a str,
    pub(crate) armed: bool,
}

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.store.forget(self.key);
        }
    }
}

impl S3Store {
    pub(crate) fn remember(&self, key: &str, etag: String, state: State) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() >= SEEN_CAPACITY {
            seen.clear();
        }
        seen.insert(key.to_owned(), (etag, state));
    }

    pub(crate) fn seen(&self, key: &str) -> Option<(String, State)> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).get(key).cloned()
    }

    pub(crate) fn forget(&self, key: &str) {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
    }
}

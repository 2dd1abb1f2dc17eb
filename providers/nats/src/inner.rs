//! [`Inner`], what clones of a provider share: the client, the subjects of the bucket's API,
//! the settings and the lock messages already seen.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
};

use async_nats::Client;
use shedlock::{store::Settings, support::unix_micros};
use tokio::sync::OnceCell;

use crate::{PermissionWatch, keys::key_for};

pub(crate) struct Inner {
    pub(crate) client: Client,
    /// The client's permission violations, if the application routes its events here.
    pub(crate) watch: Option<PermissionWatch>,
    /// The client's inbox prefix: replies come back on `<inbox_prefix>.…`.
    pub(crate) inbox_prefix: String,
    pub(crate) bucket: String,
    pub(crate) stream: String,
    pub(crate) subject_prefix: String,
    pub(crate) direct_get: String,
    pub(crate) purge: String,
    pub(crate) info: String,
    pub(crate) create: String,
    pub(crate) consumer_create: String,
    pub(crate) consumer_delete: String,
    /// `locked_by`, the time limit, whose clock judges expiry and this instance's clock.
    pub(crate) settings: Settings,
    /// Per subject, the sequence of the last lock message a direct get found there (and its
    /// `lock_until` in client time): a publish that trips over it again is answered "held"
    /// without a second look.
    pub(crate) seen: Mutex<HashMap<String, (u64, Option<i64>)>>,
    /// Set once the bucket was found fit for locks.
    pub(crate) checked: OnceCell<()>,
}

/// How many subjects [`Inner::seen`] remembers before it starts over.
pub(crate) const SEEN_CAPACITY: usize = 4096;
impl Inner {
    /// `Some(lock_until)` when message `seq` of `subject` was seen to be a lock message (not a
    /// tombstone). Stream sequences are never reused, so while `seq` is still the subject's last
    /// message, it is that same lock message.
    pub(crate) fn known_lock(&self, subject: &str, seq: u64) -> Option<Option<i64>> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.get(subject).filter(|(s, _)| *s == seq).map(|(_, until)| *until)
    }

    pub(crate) fn remember_lock(&self, subject: &str, seq: u64, until: Option<i64>) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() >= SEEN_CAPACITY {
            seen.clear();
        }
        seen.insert(subject.to_owned(), (seq, until));
    }

    pub(crate) fn subject(&self, name: &str) -> String {
        let mut s = String::with_capacity(self.subject_prefix.len() + name.len());
        s.push_str(&self.subject_prefix);
        s.push_str(&key_for(name));
        s
    }

    pub(crate) fn now_us(&self) -> Option<i64> {
        self.settings.client_now().map(unix_micros)
    }
}

//! What operators need when a job does not run: the lock records as the backend holds them
//! ([`LockProvider::inspect`](crate::LockProvider::inspect),
//! [`list`](crate::LockProvider::list)) and a release that cannot hit a lock taken again
//! ([`force_release`](crate::LockProvider::force_release)).
//!
//! Inspection only reads: it never changes a record and never blocks a contender. Whether a
//! record is held is the backend's own judgement, by the clock the provider's leases use
//! ([`LockInfo::judged_by`]): a server-time provider asks the server's clock, so an operator's
//! skewed laptop cannot make a held lock look free.
//!
//! A forced release is a compare-and-delete on what the operator saw: it releases only the
//! acquisition of the [`LockInfo`] it is given ([`LockInfo::acquisition`]), so a lock that was
//! released and taken again in the meantime is never touched. The holder that lost its lock
//! that way sees [`Error::LockLost`](crate::Error::LockLost) on its next extend, and its unlock
//! changes nothing (it is owner-checked).

use std::time::SystemTime;

use crate::support::TimeSource;

/// One lock record as the backend holds it, and the backend's judgement of it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock name.
    pub name: String,
    /// Whether the lock is held now, judged by [`judged_by`](Self::judged_by)'s clock: the
    /// record's lease has not ended. A record that is still stored but whose lease has ended is
    /// free (the next `try_lock` takes it).
    pub held: bool,
    /// Who holds (or last held) it, as stored (`None` where the backend stores no holder).
    pub locked_by: Option<String>,
    /// When the current acquisition (or its last extension) happened, where stored.
    pub locked_at: Option<SystemTime>,
    /// When the lease ends (or ended), where stored. `None` on backends whose lease is a
    /// relative TTL the server does not report.
    pub lock_until: Option<SystemTime>,
    /// The fencing token of the acquisition, where the provider issues them.
    pub fencing_token: Option<u64>,
    /// Whose clock judged [`held`](Self::held): the backend's ([`TimeSource::Server`]) or this
    /// process's ([`TimeSource::Client`], on providers whose leases are client time).
    pub judged_by: TimeSource,
    /// What tells this acquisition from every other of the same name, as the backend stores it
    /// (an owner id, a revision, ShedLock's `locked_by`): opaque, only compared.
    /// [`force_release`](crate::LockProvider::force_release) releases only a record whose
    /// acquisition is still this one.
    pub acquisition: String,
}

impl LockInfo {
    /// A record of `name` belonging to `acquisition`, `held` or not by `judged_by`'s clock; the
    /// optional fields are set with the `with_` methods.
    pub fn new(
        name: impl Into<String>,
        acquisition: impl Into<String>,
        held: bool,
        judged_by: TimeSource,
    ) -> Self {
        Self {
            name: name.into(),
            held,
            locked_by: None,
            locked_at: None,
            lock_until: None,
            fencing_token: None,
            judged_by,
            acquisition: acquisition.into(),
        }
    }

    /// Sets [`locked_by`](Self::locked_by).
    #[must_use]
    pub fn with_locked_by(mut self, locked_by: impl Into<String>) -> Self {
        self.locked_by = Some(locked_by.into());
        self
    }

    /// Sets [`locked_at`](Self::locked_at).
    #[must_use]
    pub fn with_locked_at(mut self, at: SystemTime) -> Self {
        self.locked_at = Some(at);
        self
    }

    /// Sets [`lock_until`](Self::lock_until).
    #[must_use]
    pub fn with_lock_until(mut self, until: SystemTime) -> Self {
        self.lock_until = Some(until);
        self
    }

    /// Sets [`fencing_token`](Self::fencing_token).
    #[must_use]
    pub fn with_fencing_token(mut self, token: Option<u64>) -> Self {
        self.fencing_token = token;
        self
    }
}

/// One page of [`LockProvider::list`](crate::LockProvider::list).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LockPage {
    /// The records of this page (held and free), at most the limit asked for.
    pub records: Vec<LockInfo>,
    /// Where the next page starts: give it back to `list` as its cursor. `None`: this was the
    /// last page. Opaque (a name on ordered backends, a scan position on others).
    pub next: Option<String>,
}

impl LockPage {
    /// A page of `records`, followed by the page at `next` (`None`: the last page).
    pub fn new(records: Vec<LockInfo>, next: Option<String>) -> Self {
        Self { records, next }
    }

    /// A page from records fetched one past `limit` (in name order): at most `limit` of them,
    /// and, when there were more, the cursor of the next page (the last name kept). How a
    /// provider pages: ask the backend for `limit + 1` records after the cursor.
    pub fn from_overfetch(mut records: Vec<LockInfo>, limit: usize) -> Self {
        let more = records.len() > limit;
        records.truncate(limit);
        let next = if more { records.last().map(|r| r.name.clone()) } else { None };
        Self { records, next }
    }
}

/// What [`LockProvider::force_release`](crate::LockProvider::force_release) did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForceRelease {
    /// The record was still the acquisition seen, and is now released: the record as it was
    /// just before.
    Released(LockInfo),
    /// The record is no longer the acquisition seen (released and taken again, or gone):
    /// nothing was changed. The record as it is now, if any.
    Changed(Option<LockInfo>),
}

/// The longest page [`LockProvider::list`](crate::LockProvider::list) returns: 1 000 records,
/// whatever limit is asked for.
pub const MAX_PAGE: usize = 1000;

/// The limit a provider applies to a page: `limit` within `1..=`[`MAX_PAGE`].
pub fn page_limit(limit: usize) -> usize {
    limit.clamp(1, MAX_PAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_from_an_overfetch_keeps_the_limit_and_names_the_next_cursor_only_when_more_came() {
        let info = |n: &str| LockInfo::new(n, "me", true, crate::TimeSource::Server);
        let page = LockPage::from_overfetch(vec![info("a"), info("b"), info("c")], 2);
        assert_eq!(page.records.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(page.next.as_deref(), Some("b"));
        let last = LockPage::from_overfetch(vec![info("a"), info("b")], 2);
        assert_eq!(last.records.len(), 2);
        assert_eq!(last.next, None);
        assert_eq!(LockPage::from_overfetch(Vec::new(), 5).next, None);
    }
}

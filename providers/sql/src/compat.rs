//! The ShedLock-compatible mode's acquisition rule: how a row written by one of our
//! acquisitions (its `locked_by` ends with ` #` and 16 hex digits) is told from a ShedLock
//! node's, what names an acquisition for operators, and what a forced release compares.

use shedlock::support::unix_micros;

use crate::{Dialect, LockRecord, store::SqlStore};

/// The length of what the ShedLock-compatible mode appends to `locked_by`: ` #` and 16 hex
/// digits.
pub const OWNER_SUFFIX_LEN: usize = shedlock::support::ACQUISITION_SUFFIX_LEN;

impl<D: Dialect> SqlStore<D> {
    /// The acquisition of a row: its owner id; in the ShedLock-compatible mode its `locked_by`,
    /// which is unique per acquisition when one of ours wrote it (` #` and 16 hex digits), and
    /// with its `locked_at` when a ShedLock node did (whose `locked_by` is its host's, the same
    /// for each of its acquisitions; ShedLock's extend leaves `locked_at` as it is).
    pub(crate) fn acquisition(&self, r: &LockRecord) -> String {
        match self.seen_locked_at(r) {
            _ if !self.compat => r.acquisition_id.to_string(),
            0 => format!("by:{}", r.locked_by),
            at => format!("at:{at}:by:{}", r.locked_by),
        }
    }

    /// The `locked_at` a forced release compares: 0 (any) unless the row is a ShedLock node's
    /// in the compatible mode.
    pub(crate) fn seen_locked_at(&self, r: &LockRecord) -> i64 {
        if self.compat && !has_acquisition_suffix(&r.locked_by) {
            unix_micros(r.locked_at).max(1)
        } else {
            0
        }
    }
}

/// Whether `locked_by` ends with the suffix an acquisition of ours appends in the
/// ShedLock-compatible mode: ` #` and 16 lower-case hex digits.
fn has_acquisition_suffix(locked_by: &str) -> bool {
    let b = locked_by.as_bytes();
    b.len() >= OWNER_SUFFIX_LEN && {
        let tail = &b[b.len() - OWNER_SUFFIX_LEN..];
        tail.starts_with(b" #") && tail[2..].iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
    }
}

//! The ShedLock-compatible mode: its extend, and the `lockedBy` of our own acquisitions.

use mongodb::bson::doc;
use shedlock::{Result, store::Request, support::ACQUISITION_SUFFIX_LEN};

use crate::{documents::id, error::map_err, refusal::Cmd, store::MongoStore};

/// Whether `locked_by` ends with what an acquisition of ours appends to it in the
/// ShedLock-compatible mode: ` #` and 16 lower-case hex digits.
pub(crate) fn has_acquisition_suffix(locked_by: &str) -> bool {
    let b = locked_by.as_bytes();
    b.len() >= ACQUISITION_SUFFIX_LEN && {
        let tail = &b[b.len() - ACQUISITION_SUFFIX_LEN..];
        tail.starts_with(b" #") && tail[2..].iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
    }
}

impl MongoStore {
    /// The compatible mode's extend: ShedLock's (`{_id, lockedBy, lockUntil: {$gt: now}}`),
    /// with this acquisition's `lockedBy`; in server time the liveness test is an `$expr` on
    /// [`server_now`], so the match alone says whether the lock was still held.
    ///
    /// [`server_now`]: crate::documents::server_now
    pub(crate) async fn prolong_compat(&self, req: &Request<'_>) -> Result<bool> {
        let name = req.name();
        let (now, client_now) = Self::now_expr(req);
        let (lock_until, locked_at) = self.lease_fields(client_now, req.lock_at_most_for());
        let by = req.owner().locked_by();
        let filter = match client_now {
            Some(_) => doc! { "_id": id(name), "lockedBy": by, "lockUntil": { "$gt": now } },
            None => doc! {
                "_id": id(name),
                "lockedBy": by,
                "$expr": { "$gt": ["$lockUntil", now] },
            },
        };
        let update = vec![doc! { "$set": { "lockUntil": lock_until, "lockedAt": locked_at } }];
        let r = self
            .collection
            .update_one(filter, update)
            .write_concern(self.write_concern.clone())
            .await
            .map_err(|e| map_err(self, "extend", Cmd::Update, e))?;
        Ok(r.matched_count == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_compatible_locked_by_identifies_an_acquisition_alone() {
        assert!(has_acquisition_suffix("host/1 #0123456789abcdef"));
        assert!(!has_acquisition_suffix("host/1 #0123456789ABCDEF"));
        assert!(!has_acquisition_suffix("java-host"));
        assert!(!has_acquisition_suffix(""));
    }
}

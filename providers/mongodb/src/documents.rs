//! The lock document as written: `_id`, the owner id, and the lease and fencing-token fields,
//! computed by the server from `$$NOW` or from this instance's clock.

use std::time::Duration;

use mongodb::bson::{Bson, DateTime, Document, doc};
use shedlock::{
    store::Request,
    support::{duration_millis_ceil, unix_millis},
};

use crate::store::MongoStore;

/// The server's current time as a BSON date, for comparisons with stored dates:
/// `{$toDate: {$toLong: "$$NOW"}}`. On MongoDB this is exactly `$$NOW`; the round trip through
/// epoch milliseconds makes it comparable on wire-compatible servers that compare `$$NOW`
/// itself wrongly with stored dates (SecantusDB 0.7 answers `{$lte: [<a date 30 s ahead>,
/// "$$NOW"]}` with true). Stored values (`lockUntil: {$add: ["$$NOW", ms]}`) use `$$NOW`
/// directly.
pub(crate) fn server_now() -> Bson {
    Bson::Document(doc! { "$toDate": { "$toLong": "$$NOW" } })
}

/// The fencing token of a write: one more than the document's last token, and at least the
/// server's time in microseconds (milliseconds × 1000), so a token issued after the document
/// was deleted still exceeds every earlier one (unless more than 1 000 acquisitions of one
/// name happened within a millisecond, or the server clock went back).
pub(crate) fn next_token() -> Document {
    doc! {
        "$max": [
            { "$add": [{ "$ifNull": ["$token", 0_i64] }, 1_i64] },
            { "$multiply": [{ "$toLong": "$$NOW" }, 1000_i64] },
        ]
    }
}

/// A lock name as the document's `_id`.
pub(crate) fn id(name: &str) -> Bson {
    Bson::String(name.to_owned())
}

/// An acquisition id as stored (BSON has no unsigned 64-bit integer: the same bits, signed).
pub(crate) fn owner_value(owner: u64) -> i64 {
    i64::from_ne_bytes(owner.to_ne_bytes())
}

pub(crate) fn duration_ms(d: Duration) -> i64 {
    duration_millis_ceil(d)
}

impl MongoStore {
    /// `now` for a filter: the server's (see [`server_now`]) or this instance's clock, as a
    /// literal date.
    pub(crate) fn now_expr(req: &Request<'_>) -> (Bson, Option<i64>) {
        match req.client_now() {
            None => (server_now(), None),
            Some(t) => {
                let ms = unix_millis(t);
                (Bson::DateTime(DateTime::from_millis(ms)), Some(ms))
            }
        }
    }

    /// `lockUntil` and `lockedAt` of a write holding the lock for `hold`: computed by the
    /// server from `$$NOW`, or from this instance's clock.
    pub(crate) fn lease_fields(&self, client_now_ms: Option<i64>, hold: Duration) -> (Bson, Bson) {
        let ms = duration_ms(hold);
        match client_now_ms {
            None => (Bson::Document(doc! { "$add": ["$$NOW", ms] }), Bson::String("$$NOW".into())),
            Some(now) => (
                Bson::Document(doc! {
                    "$literal": DateTime::from_millis(now.saturating_add(ms))
                }),
                Bson::Document(doc! { "$literal": DateTime::from_millis(now) }),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_ids_keep_every_bit() {
        for id in [0, 1, u64::MAX, 1 << 63, 0x0123_4567_89ab_cdef] {
            let stored = owner_value(id);
            assert_eq!(u64::from_ne_bytes(stored.to_ne_bytes()), id);
        }
        assert_ne!(owner_value(1 << 63), owner_value(0));
    }
}

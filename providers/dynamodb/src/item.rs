//! The lock item: its attributes, and reading one back for an operator.

use std::{collections::HashMap, fmt};

use aws_sdk_dynamodb::types::AttributeValue;
use shedlock::{
    Error, Result,
    support::{from_unix_micros, iso8601_millis},
};

use crate::{BACKEND, compat::parse_iso_millis, store::DynamoStore};

/// The partition key attribute (a string): the lock name.
pub const ATTR_ID: &str = "_id";
/// Until when the lock is held: a number, milliseconds since the Unix epoch (client time).
/// Missing on a released lock.
pub const ATTR_LOCK_UNTIL: &str = "lockUntil";
/// When the lock was taken or last extended: a number, milliseconds since the Unix epoch.
pub const ATTR_LOCKED_AT: &str = "lockedAt";
/// Who took it (informational): a string, `hostname/pid` by default.
pub const ATTR_LOCKED_BY: &str = "lockedBy";
/// The owner check: a random id of the acquisition (a string of 16 hex digits). Removed by
/// unlock.
pub const ATTR_ACQUISITION_ID: &str = "acquisitionId";
/// The fencing token: a number, incremented by every acquisition.
pub const ATTR_FENCING_TOKEN: &str = "fencingToken";

pub(crate) fn num(n: impl fmt::Display) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

impl DynamoStore {
    /// A time (ms since the epoch) as stored: a number, or ShedLock's ISO string.
    pub(crate) fn time(&self, ms: i64) -> AttributeValue {
        if self.compat {
            AttributeValue::S(iso8601_millis(from_unix_micros(ms.saturating_mul(1000))))
        } else {
            num(ms)
        }
    }
}

/// A lock item that cannot be read as one: [`Error::Backend`] naming the attribute.
pub(crate) fn bad_item(name: &str, what: impl fmt::Display) -> Error {
    Error::backend(BACKEND, format!("the item of lock {name:?} {what}"))
}

/// One lock item as stored, read for an operator.
pub(crate) struct Item {
    pub(crate) name: String,
    /// `lockUntil` in ms since the epoch; `None` on a released lock.
    pub(crate) lock_until: Option<i64>,
    /// `lockedAt` in ms since the epoch.
    pub(crate) locked_at: Option<i64>,
    /// `lockedAt` as stored (a number, or ShedLock's ISO string), for a forced release's
    /// condition.
    pub(crate) locked_at_value: Option<AttributeValue>,
    pub(crate) locked_by: Option<String>,
    pub(crate) acquisition_id: Option<String>,
    /// `fencingToken` as stored.
    pub(crate) token_value: Option<AttributeValue>,
    pub(crate) token: Option<u64>,
}

impl Item {
    pub(crate) fn parse(attrs: &HashMap<String, AttributeValue>) -> Result<Self> {
        let name = match attrs.get(ATTR_ID) {
            Some(AttributeValue::S(s)) => s.clone(),
            other => {
                return Err(Error::backend(
                    BACKEND,
                    format!("a lock item has a {ATTR_ID} that is not a string: {other:?}"),
                ));
            }
        };
        let time = |attr: &str| -> Result<Option<i64>> {
            match attrs.get(attr) {
                None | Some(AttributeValue::Null(_)) => Ok(None),
                Some(AttributeValue::N(n)) => n
                    .parse::<i64>()
                    .map(Some)
                    .map_err(|_| bad_item(&name, format_args!("has a {attr} that is not ms: {n}"))),
                Some(AttributeValue::S(s)) => parse_iso_millis(s).map(Some).ok_or_else(|| {
                    bad_item(&name, format_args!("has a {attr} that is not an ISO time: {s:?}"))
                }),
                Some(other) => {
                    Err(bad_item(&name, format_args!("has a {attr} of another type: {other:?}")))
                }
            }
        };
        let string = |attr: &str| -> Result<Option<String>> {
            match attrs.get(attr) {
                None | Some(AttributeValue::Null(_)) => Ok(None),
                Some(AttributeValue::S(s)) => Ok(Some(s.clone())),
                Some(other) => Err(bad_item(
                    &name,
                    format_args!("has a {attr} that is not a string: {other:?}"),
                )),
            }
        };
        let token_value = attrs.get(ATTR_FENCING_TOKEN).cloned();
        let token = match &token_value {
            None => None,
            Some(AttributeValue::N(n)) => Some(n.parse::<u64>().map_err(|_| {
                bad_item(&name, format_args!("has a {ATTR_FENCING_TOKEN} that is not a u64: {n}"))
            })?),
            Some(other) => {
                return Err(bad_item(
                    &name,
                    format_args!("has a {ATTR_FENCING_TOKEN} that is not a number: {other:?}"),
                ));
            }
        };
        Ok(Self {
            lock_until: time(ATTR_LOCK_UNTIL)?,
            locked_at: time(ATTR_LOCKED_AT)?,
            locked_at_value: attrs.get(ATTR_LOCKED_AT).cloned(),
            locked_by: string(ATTR_LOCKED_BY)?,
            acquisition_id: string(ATTR_ACQUISITION_ID)?,
            token_value,
            token,
            name,
        })
    }
}

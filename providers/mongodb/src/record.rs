//! A lock document read back for an operator: its fields, type-checked.

use mongodb::bson::{Bson, DateTime, Document};
use shedlock::{Error, Result};

use crate::BACKEND;

/// The field a read adds to each document it returns in server time: the server's clock
/// ([`server_now`]), read in the same `aggregate`.
///
/// [`server_now`]: crate::documents::server_now
pub(crate) const NOW_FIELD: &str = "__shedlockNow";

/// A lock document that cannot be read as one: [`Error::Backend`] naming the field.
pub(crate) fn bad_document(name: &str, what: &str) -> Error {
    Error::backend(BACKEND, format!("the lock document {name:?} {what}"))
}

/// A date field of a lock document (`None` when absent; an error when it is not a date).
fn date_field(doc: &Document, name: &str, field: &str) -> Result<Option<DateTime>> {
    match doc.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::DateTime(d)) => Ok(Some(*d)),
        Some(other) => {
            Err(bad_document(name, &format!("has a {field} that is not a date: {other}")))
        }
    }
}

/// A 64-bit integer field of a lock document (`None` when absent).
fn long_field(doc: &Document, name: &str, field: &str) -> Result<Option<i64>> {
    match doc.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Int64(v)) => Ok(Some(*v)),
        Some(Bson::Int32(v)) => Ok(Some(i64::from(*v))),
        Some(other) => {
            Err(bad_document(name, &format!("has a {field} that is not an integer: {other}")))
        }
    }
}

/// What an operator sees of one lock document: its fields, and whether it is held.
pub(crate) struct Record {
    pub(crate) name: String,
    pub(crate) lock_until: DateTime,
    pub(crate) locked_at: Option<DateTime>,
    pub(crate) locked_by: Option<String>,
    pub(crate) owner: Option<i64>,
    pub(crate) token: Option<i64>,
    /// The server's clock, read with the document (server time only).
    pub(crate) server_now: Option<DateTime>,
}

impl Record {
    pub(crate) fn parse(doc: &Document) -> Result<Self> {
        let name = match doc.get("_id") {
            Some(Bson::String(s)) => s.clone(),
            other => {
                return Err(Error::backend(
                    BACKEND,
                    format!("a lock document has an _id that is not a string: {other:?}"),
                ));
            }
        };
        let lock_until = date_field(doc, &name, "lockUntil")?
            .ok_or_else(|| bad_document(&name, "has no lockUntil"))?;
        let locked_by = match doc.get("lockedBy") {
            None | Some(Bson::Null) => None,
            Some(Bson::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(bad_document(
                    &name,
                    &format!("has a lockedBy that is not a string: {other}"),
                ));
            }
        };
        Ok(Self {
            lock_until,
            locked_at: date_field(doc, &name, "lockedAt")?,
            locked_by,
            owner: long_field(doc, &name, "owner")?,
            token: long_field(doc, &name, "token")?,
            server_now: date_field(doc, &name, NOW_FIELD)?,
            name,
        })
    }
}

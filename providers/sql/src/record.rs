//! The lock row as read: [`LockRecord`] (for operators and tests), [`Inspected`] (a record with
//! the database's clock) and their decoding from a row of a dialect's select statement.

use std::time::SystemTime;

use shedlock::support::from_unix_micros;
use sqlx::{ColumnIndex, Decode, Row, Type};

/// One lock row as stored, for inspection by operators and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockRecord {
    /// The lock name.
    pub name: String,
    /// Until when the lock is held (database time unless the holder used client time).
    pub lock_until: SystemTime,
    /// When the current acquisition or extension happened (the base of `lock_at_least_for`).
    pub locked_at: SystemTime,
    /// Who holds (or last held) it.
    pub locked_by: String,
    /// The owner token of the acquisition that wrote the row.
    pub acquisition_id: i64,
    /// The fencing token of that acquisition.
    pub fencing_token: i64,
}

impl LockRecord {
    /// Builds a record from raw column values (times in microseconds since the Unix epoch).
    pub fn from_raw(
        name: String,
        lock_until_micros: i64,
        locked_at_micros: i64,
        locked_by: String,
        acquisition_id: i64,
        fencing_token: i64,
    ) -> Self {
        Self {
            name,
            lock_until: from_unix_micros(lock_until_micros),
            locked_at: from_unix_micros(locked_at_micros),
            locked_by,
            acquisition_id,
            fencing_token,
        }
    }
}

/// A fencing token read from the database as an unsigned value (tokens are positive by
/// construction; a negative one planted by hand is reported as 0).
pub fn token_u64(token: i64) -> u64 {
    u64::try_from(token).unwrap_or(0)
}

/// A [`LockRecord`] from a row of the dialect's select statement: `name` (decoded by the
/// dialect), then `lock_until` and `locked_at` in microseconds since the Unix epoch,
/// `locked_by`, `acquisition_id` and `fencing_token`.
pub fn record_from_row<R>(row: &R, name: String) -> std::result::Result<LockRecord, sqlx::Error>
where
    R: Row,
    usize: ColumnIndex<R>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(LockRecord::from_raw(
        name,
        row.try_get(1)?,
        row.try_get(2)?,
        row.try_get(3)?,
        row.try_get(4)?,
        row.try_get(5)?,
    ))
}

/// A row read for inspection: the record, and the database's clock in microseconds since the
/// epoch when it was read (it judges whether the record is held in database time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    /// The stored record.
    pub record: LockRecord,
    /// The database's clock, µs since the Unix epoch.
    pub db_micros: i64,
}

/// An [`Inspected`] from a row of the dialect's select or list statement: the columns of
/// [`record_from_row`], then the database's clock in microseconds since the Unix epoch.
pub fn inspected_from_row<R>(row: &R, name: String) -> std::result::Result<Inspected, sqlx::Error>
where
    R: Row,
    usize: ColumnIndex<R>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(Inspected { record: record_from_row(row, name)?, db_micros: row.try_get(6)? })
}

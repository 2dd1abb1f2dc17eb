//! The generic SQL lock provider of [`shedlock`]: [`SqlLockProvider<D>`](SqlLockProvider) and
//! its builder, over any SQL database for which a [`Dialect`] exists.
//!
//! Use it through a dialect crate, which names the types for its database:
//! `shedlock-postgres` (`PostgresLockProvider = SqlLockProvider<PostgresDialect>`),
//! `shedlock-mysql` (MySQL and MariaDB) and `shedlock-sqlite`. To add a database (CockroachDB,
//! SQL Server, …), implement [`Dialect`] in a crate of your own and prove it with
//! `shedlock-conformance`; everything else is here, written once:
//!
//! - the builder ([`SqlLockProviderBuilder`]): table and column names, `locked_by`, the longest
//!   name, the time source, the clock, the operation timeout, and the dialect's own settings
//!   ([`DialectOption`], [`DedicatedConnection`], [`AsynchronousCommit`], [`UnloggedTable`],
//!   [`ShedlockTable`]);
//! - identifier validation ([`TableName`], [`Columns`]): table and column names are checked
//!   against `[A-Za-z_][A-Za-z0-9_]*` (at most [`MAX_IDENT_LEN`] bytes) and then quoted, so no
//!   unvalidated text is ever spliced into SQL;
//! - a small statement builder ([`StmtBuilder`]) that records which value goes into which
//!   placeholder, so statements are built once per provider and only bound per call;
//! - [`LockConn`]: lock statements on a connection of the provider's own, one round trip each;
//! - the mapping of `sqlx` errors to [`shedlock::Error`] (a missing table says how to create
//!   it), the `CREATE TABLE` race between nodes, and the record helpers
//!   ([`SqlLockProvider::record`], [`write_record`](SqlLockProvider::write_record), …);
//! - the lock flow itself: [`SqlLockProvider`] is a [`shedlock::store::LeaseStore`] on the
//!   table's rows, run by core's [`shedlock::store::StoreProvider`] (name checks, owner ids,
//!   timeouts, spans, lease validity).

mod conn;
mod error;
mod ident;
mod provider;
mod stmt;

use std::time::SystemTime;

pub use conn::LockConn;
pub use error::{Call, DbErrorKind, ErrorContext, map_sqlx_error};
pub use ident::{Columns, MAX_IDENT_LEN, QuotedNames, TableName, validate_ident};
pub use provider::{
    AsynchronousCommit, DEFAULT_TIMEOUT, DedicatedConnection, Dialect, DialectOption, Inspected,
    OWNER_SUFFIX_LEN, Op, RecordAdmin, Settings, ShedlockTable, SqlLockProvider,
    SqlLockProviderBuilder, TRANSIENT_ATTEMPTS, UnloggedTable, bind, inspected_from_row,
    record_from_row, retry_transient,
};
/// The builder setters every provider shares (`operation_timeout`, `locked_by`, `clock`).
pub use shedlock::{ClockBuilder, ProviderBuilder};
pub use stmt::{Arg, ArgValues, Placeholder, Stmt, StmtBuilder, Value};

use shedlock::{Error, support::from_unix_micros};

/// The default longest lock name, in bytes (the DDL's name column holds this many characters).
pub const DEFAULT_MAX_NAME_LEN: usize = 255;

/// Checks a configured maximum name length against the SQL column size limit used in the DDL.
pub fn check_max_name_len(backend: &'static str, max: usize, limit: usize) -> Result<(), Error> {
    if max == 0 || max > limit {
        return Err(Error::Setup {
            backend,
            message: format!("max_name_len must be between 1 and {limit} (got {max})"),
        });
    }
    Ok(())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_name_len_is_checked() {
        assert!(check_max_name_len("x", 0, 255).is_err());
        assert!(check_max_name_len("x", 256, 255).is_err());
        assert!(check_max_name_len("x", 255, 255).is_ok());
    }
}

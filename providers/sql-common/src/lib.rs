//! Shared internals of the shedlock SQL providers (`shedlock-postgres`, `shedlock-mysql`,
//! `shedlock-sqlite`).
//!
//! This crate is an implementation detail: its API may change in any release. It holds what the
//! three dialects have in common:
//!
//! - identifier validation ([`TableName`], [`Columns`]): table and column names are checked
//!   against `[A-Za-z_][A-Za-z0-9_]*` (at most [`MAX_IDENT_LEN`] bytes) and then quoted, so no
//!   unvalidated text is ever spliced into SQL;
//! - a small statement builder ([`StmtBuilder`]) that records which value goes into which
//!   placeholder, so statements are built once per provider and only bound per call;
//! - the mapping of `sqlx` errors to [`shedlock::Error`] (the backend-neutral helpers — owner
//!   ids, name checks, timeouts, retries, time conversions, [`shedlock::TimeSource`] — are in
//!   [`shedlock::support`]);
//! - the provider flow itself ([`SqlProvider`]: builder settings, `try_lock`, the lock handle's
//!   unlock / extend, capabilities, record helpers), generic over a [`Dialect`] that supplies
//!   only its statements, their execution and its error classification.

mod conn;
mod error;
mod ident;
mod provider;
mod stmt;

/// What [`sql_provider_api!`] expands to needs, reachable through this crate.
#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
    pub use shedlock;
}

/// The setters a SQL provider builder shares, for a builder whose field `core` is a
/// [`BuilderCore`]. The doc comments of the dialect-specific setters come from the caller.
#[macro_export]
macro_rules! sql_builder_setters {
    ($builder:ident {
        $(#[$table_doc:meta])* table;
        $(#[$max_doc:meta])* max_name_len;
        $(#[$time_doc:meta])* time_source;
        $(#[$timeout_doc:meta])* operation_timeout;
    }) => {
        impl $builder {
            $(#[$table_doc])*
            pub fn table(mut self, table: impl Into<String>) -> Self {
                self.core.table = table.into();
                self
            }

            /// The column names (validated like the table name).
            pub fn columns(mut self, columns: $crate::Columns) -> Self {
                self.core.columns = columns;
                self
            }

            /// What to store in `locked_by` (informational; default `hostname/pid`). At most 255
            /// bytes. Ownership never depends on it: every acquisition has its own random id.
            pub fn locked_by(mut self, locked_by: impl Into<String>) -> Self {
                self.core.settings.set_locked_by(locked_by);
                self
            }

            $(#[$max_doc])*
            pub fn max_name_len(mut self, max: usize) -> Self {
                self.core.max_name_len = max;
                self
            }

            $(#[$time_doc])*
            pub fn time_source(mut self, time: $crate::__private::shedlock::TimeSource) -> Self {
                self.core.settings.set_time_source(time);
                self
            }

            /// This instance's clock (default: the system clock). It computes `lock_until` only
            /// with [`TimeSource::Client`](shedlock::TimeSource::Client); with server time it is
            /// never consulted, so a skewed clock changes nothing.
            pub fn clock(mut self, clock: $crate::__private::shedlock::SharedClock) -> Self {
                self.core.settings.set_clock(clock);
                self
            }

            $(#[$timeout_doc])*
            pub fn operation_timeout(mut self, timeout: Option<::std::time::Duration>) -> Self {
                self.core.settings.set_timeout(timeout);
                self
            }
        }
    };
}

/// The public API a SQL provider type shares (`ddl`, `create_table`, `record`,
/// `delete_record`, `write_record`, the hidden `records`, and [`shedlock::LockProvider`]), for a
/// type whose field `inner` is a [`SqlProvider`]. `$time` completes the sentence on the time
/// `write_record` stores (its precision).
#[macro_export]
macro_rules! sql_provider_api {
    ($provider:ident, $time:literal) => {
        impl $provider {
            /// The `CREATE TABLE IF NOT EXISTS` statement for the configured table and columns.
            pub fn ddl(&self) -> &str {
                self.inner.ddl()
            }

            /// Creates the lock table if it does not exist (runs [`ddl`](Self::ddl)).
            pub async fn create_table(&self) -> $crate::__private::shedlock::Result<()> {
                self.inner.create_table().await
            }

            /// The stored row of `name`, if any (for operators and tests).
            pub async fn record(
                &self,
                name: &str,
            ) -> $crate::__private::shedlock::Result<Option<$crate::LockRecord>> {
                self.inner.record(name).await
            }

            /// Deletes the row of `name`, as an operator might; returns whether there was one. A
            /// held lock deleted this way is simply free; the next acquisition recreates the row
            /// with a larger fencing token.
            pub async fn delete_record(
                &self,
                name: &str,
            ) -> $crate::__private::shedlock::Result<bool> {
                self.inner.delete_record(name).await
            }

            #[doc = concat!(
                "Creates or overwrites the row of `name` with `lock_until` (and `locked_at`) set \
                 to the given time",
                $time,
                ", a fresh owner nobody holds, and a larger fencing token, as a process that \
                 crashed would have left it. For tests and manual repair; `lock_until` in the \
                 past frees the lock, in the future blocks it."
            )]
            pub async fn write_record(
                &self,
                name: &str,
                lock_until: ::std::time::SystemTime,
            ) -> $crate::__private::shedlock::Result<()> {
                self.inner.write_record(name, lock_until).await
            }

            /// The record helpers as a shareable object (shared test support and admin tools).
            #[doc(hidden)]
            pub fn records(&self) -> ::std::sync::Arc<dyn $crate::RecordAdmin> {
                self.inner.records()
            }
        }

        #[$crate::__private::async_trait]
        impl $crate::__private::shedlock::LockProvider for $provider {
            async fn try_lock(
                &self,
                config: &$crate::__private::shedlock::LockConfig,
            ) -> $crate::__private::shedlock::Result<Option<$crate::__private::shedlock::Lock>> {
                self.inner.try_lock(config).await
            }

            fn capabilities(&self) -> $crate::__private::shedlock::Capabilities {
                self.inner.capabilities()
            }

            fn backend_name(&self) -> &'static str {
                self.inner.backend_name()
            }
        }
    };
}

use std::time::SystemTime;

pub use conn::LockConn;
pub use error::{DbErrorKind, ErrorContext, map_sqlx_error};
pub use ident::{Columns, MAX_IDENT_LEN, QuotedNames, TableName, validate_ident};
pub use provider::{
    BuilderCore, DEFAULT_TIMEOUT, Dialect, OWNER_SUFFIX_LEN, Op, RecordAdmin, Settings,
    SqlProvider, TRANSIENT_ATTEMPTS, bind, record_from_row, retry_transient,
};
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

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
//! - lock-name checks ([`check_lock_name`]), the default `locked_by` ([`default_locked_by`]) and
//!   per-acquisition owner ids ([`acquisition_id`]);
//! - time and duration conversions and the mapping of `sqlx` errors to [`shedlock::Error`];
//! - the provider flow itself ([`SqlProvider`]: builder settings, `try_lock`, the lock handle's
//!   unlock / extend, capabilities, record helpers), generic over a [`Dialect`] that supplies
//!   only its statements, their execution and its error classification.

mod conn;
mod error;
mod ident;
mod provider;
mod stmt;
#[cfg(feature = "testing")]
pub mod testing;

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
        $(#[$time_doc:meta])* time_mode;
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
                self.core.locked_by = Some(locked_by.into());
                self
            }

            $(#[$max_doc])*
            pub fn max_name_len(mut self, max: usize) -> Self {
                self.core.max_name_len = max;
                self
            }

            $(#[$time_doc])*
            pub fn time_mode(mut self, time: $crate::TimeMode) -> Self {
                self.core.time = time;
                self
            }

            $(#[$timeout_doc])*
            pub fn operation_timeout(mut self, timeout: Option<::std::time::Duration>) -> Self {
                self.core.timeout = timeout;
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
        }
    };
}

use std::{
    collections::hash_map::RandomState,
    hash::{BuildHasher, Hasher},
    sync::{
        OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

pub use conn::LockConn;
pub use error::{DbErrorKind, ErrorContext, map_sqlx_error};
pub use ident::{Columns, MAX_IDENT_LEN, QuotedNames, TableName, validate_ident};
pub use provider::{
    BuilderCore, DEFAULT_TIMEOUT, Dialect, Op, RecordAdmin, Settings, SqlProvider,
    TRANSIENT_ATTEMPTS, bind, record_from_row, retry_transient,
};
pub use stmt::{Arg, ArgValues, Placeholder, Stmt, StmtBuilder, Value};

use shedlock::{Error, SharedClock};

/// The default longest lock name, in bytes (the DDL's name column holds this many characters).
pub const DEFAULT_MAX_NAME_LEN: usize = 255;

/// The longest `locked_by` value, in bytes (the DDL's `locked_by` column holds 255 characters).
pub const MAX_LOCKED_BY_LEN: usize = 255;

/// Durations longer than this are capped to it (a lock held for 1000 years is held forever; the
/// cap keeps every computed timestamp inside every dialect's range).
pub const MAX_DURATION: Duration = Duration::from_secs(1000 * 365 * 24 * 3600);

/// Whose clock judges expiry.
#[derive(Debug, Clone, Default)]
pub enum TimeMode {
    /// The database's clock: `lock_until` is computed in SQL, so client clock skew cannot break
    /// exclusion. The default.
    #[default]
    Database,
    /// This instance's own clock (the given one): `lock_until` is computed by the client, as
    /// ShedLock's default JDBC provider does. Client clock skew can then break exclusion.
    Client(SharedClock),
}

impl TimeMode {
    /// Whether the database clock judges expiry.
    pub fn is_database(&self) -> bool {
        matches!(self, TimeMode::Database)
    }

    /// The client's current time in microseconds since the Unix epoch (`0` in database mode,
    /// where it is not used).
    pub fn client_now_micros(&self) -> i64 {
        match self {
            TimeMode::Database => 0,
            TimeMode::Client(clock) => unix_micros(clock.now()),
        }
    }
}

/// Microseconds since the Unix epoch (negative before it; saturating).
pub fn unix_micros(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_micros()).map(|v| -v).unwrap_or(i64::MIN),
    }
}

/// The time `micros` microseconds after the Unix epoch.
pub fn from_unix_micros(micros: i64) -> SystemTime {
    if micros >= 0 {
        UNIX_EPOCH + Duration::from_micros(micros.unsigned_abs())
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_micros(micros.unsigned_abs())).unwrap_or(UNIX_EPOCH)
    }
}

/// A duration in whole microseconds, capped at [`MAX_DURATION`] and rounded up (a lock is
/// never held for less than asked).
pub fn duration_micros(d: Duration) -> i64 {
    let d = d.min(MAX_DURATION);
    let micros = d.as_micros() + u128::from(!d.subsec_nanos().is_multiple_of(1000));
    i64::try_from(micros).unwrap_or(i64::MAX)
}

/// A duration in whole milliseconds, capped at [`MAX_DURATION`] and rounded up (a lock is
/// never held for less than asked).
pub fn duration_millis_ceil(d: Duration) -> i64 {
    let d = d.min(MAX_DURATION);
    let millis = d.as_millis() + u128::from(!d.subsec_nanos().is_multiple_of(1_000_000));
    i64::try_from(millis).unwrap_or(i64::MAX)
}

/// Checks a lock name before it is bound: at most `max_len` bytes, and no NUL character when
/// the dialect cannot store one (`reject_nul`). Names are never truncated or rewritten.
pub fn check_lock_name(
    backend: &'static str,
    name: &str,
    max_len: usize,
    reject_nul: bool,
) -> Result<(), Error> {
    if name.len() > max_len {
        return Err(Error::InvalidName {
            backend,
            name: name.to_owned(),
            reason: format!(
                "{} bytes long; the name column holds at most {max_len} bytes",
                name.len()
            ),
        });
    }
    if reject_nul && name.contains('\0') {
        return Err(Error::InvalidName {
            backend,
            name: name.to_owned(),
            reason: "contains a NUL character, which this database cannot store in text".into(),
        });
    }
    Ok(())
}

/// Checks a configured `locked_by` value.
pub fn check_locked_by(backend: &'static str, locked_by: &str) -> Result<(), Error> {
    if locked_by.len() > MAX_LOCKED_BY_LEN || locked_by.contains('\0') {
        return Err(Error::Setup {
            backend,
            message: format!(
                "locked_by must be at most {MAX_LOCKED_BY_LEN} bytes and contain no NUL \
                 character (got {} bytes)",
                locked_by.len()
            ),
        });
    }
    Ok(())
}

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

/// The default `locked_by`: `hostname/pid`, so two processes on one host differ (ShedLock
/// #317). Computed once per process.
pub fn default_locked_by() -> String {
    static LOCKED_BY: OnceLock<String> = OnceLock::new();
    LOCKED_BY
        .get_or_init(|| {
            let host = gethostname::gethostname().to_string_lossy().into_owned();
            let host = if host.is_empty() { "unknown-host".to_owned() } else { host };
            let mut s = format!("{host}/{}", std::process::id());
            // Keep it storable whatever the host name is.
            s.retain(|c| c != '\0');
            while s.len() > MAX_LOCKED_BY_LEN {
                s.pop();
            }
            s
        })
        .clone()
}

/// A fresh, unpredictable 64-bit id for one acquisition: the owner token that unlock and extend
/// compare, so a stale holder (same `locked_by`, even the same process) never matches a later
/// acquisition. Drawn from the standard library's randomly keyed SipHash over a process-wide
/// counter and the time: distinct within a process, and colliding across processes with
/// probability 2^-64 per pair.
pub fn acquisition_id() -> i64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(n);
    h.write_i64(unix_micros(SystemTime::now()));
    h.write_u32(std::process::id());
    h.finish() as i64
}

/// Runs `fut` under an optional time limit, mapping expiry to [`Error::Timeout`]. Dropping the
/// inner future on expiry is safe: every provider statement runs in autocommit.
pub async fn with_timeout<T>(
    operation: &'static str,
    limit: Option<Duration>,
    fut: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match limit {
        None => fut.await,
        Some(after) => match tokio::time::timeout(after, fut).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout { operation, after }),
        },
    }
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
    fn durations_round_up_and_cap() {
        assert_eq!(duration_micros(Duration::from_nanos(1)), 1);
        assert_eq!(duration_micros(Duration::from_micros(5)), 5);
        assert_eq!(duration_millis_ceil(Duration::from_micros(1001)), 2);
        assert_eq!(duration_millis_ceil(Duration::from_millis(7)), 7);
        assert_eq!(duration_millis_ceil(Duration::MAX), duration_millis_ceil(MAX_DURATION));
        assert!(duration_micros(Duration::MAX) > 0);
    }

    #[test]
    fn micros_round_trip() {
        let t = UNIX_EPOCH + Duration::from_micros(1_764_000_000_123_456);
        assert_eq!(from_unix_micros(unix_micros(t)), t);
        let before = UNIX_EPOCH - Duration::from_secs(5);
        assert_eq!(unix_micros(before), -5_000_000);
        assert_eq!(from_unix_micros(-5_000_000), before);
    }

    #[test]
    fn lock_names_are_checked_not_truncated() {
        assert!(check_lock_name("x", &"a".repeat(255), 255, true).is_ok());
        let long = "a".repeat(256);
        match check_lock_name("x", &long, 255, true) {
            Err(Error::InvalidName { name, .. }) => assert_eq!(name, long),
            other => panic!("{other:?}"),
        }
        // Bytes, not characters: 64 four-byte characters are 256 bytes.
        assert!(check_lock_name("x", &"😀".repeat(64), 255, true).is_err());
        assert!(check_lock_name("x", "a\0b", 255, true).is_err());
        assert!(check_lock_name("x", "a\0b", 255, false).is_ok());
    }

    #[test]
    fn acquisition_ids_differ() {
        let ids: std::collections::HashSet<i64> = (0..10_000).map(|_| acquisition_id()).collect();
        assert_eq!(ids.len(), 10_000);
    }

    #[test]
    fn default_locked_by_has_pid() {
        let by = default_locked_by();
        assert!(by.ends_with(&format!("/{}", std::process::id())), "{by}");
        assert!(check_locked_by("x", &by).is_ok());
    }
}

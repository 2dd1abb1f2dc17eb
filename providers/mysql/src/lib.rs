//! MySQL and MariaDB lock provider for [`shedlock`], on the caller's [`sqlx`] pool.
//!
//! - **MariaDB (≥ 10.5): one statement, one round trip** per acquire, whether or not the row
//!   exists: `INSERT … ON DUPLICATE KEY UPDATE` where every assignment is guarded by
//!   `IF(lock_until <= now, new, old)` (`lock_until` assigned last), followed by
//!   `RETURNING acquisition_id, fencing_token`. The lock is ours iff the returned owner id is the
//!   random id this acquisition sent. Rows-affected is never used to decide (with
//!   `CLIENT_FOUND_ROWS`, which sqlx always sets, it reports 1 both for "inserted" and for "held
//!   by someone else"), and no `INSERT IGNORE` swallows unrelated errors.
//! - **MySQL proper has no `RETURNING`**: the same guarded upsert is followed by a primary-key
//!   `SELECT` of the owner id and token on the same connection: two statements, two round trips,
//!   both in autocommit. See [`Flavor`].
//! - **Database time, UTC, explicitly**: times are `DATETIME(3)` computed with
//!   `UTC_TIMESTAMP(3)`; the session `time_zone` is never consulted (ShedLock #91).
//!   [`TimeSource::Client`] uses the instance's own [`Clock`](shedlock::Clock) instead.
//! - Each statement runs with `sql_mode = 'STRICT_ALL_TABLES'` (MariaDB `SET STATEMENT … FOR`,
//!   MySQL `SET_VAR` hint), so a name too long for the column is an error, never truncated into
//!   a collision, whatever the session's mode.
//! - Names are `VARBINARY`: compared byte for byte (no case folding, no trailing-space padding,
//!   no charset conversion).
//! - **Owner-checked** unlock and extend, **fencing tokens** (`greatest(old + 1, server clock in
//!   µs)`), no "row exists" cache, statements in autocommit on a connection of the provider's own
//!   (see [Connections](#connections)).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_mysql::{Flavor, MySqlLockProvider};
//!
//! let pool = shedlock_mysql::recommended_pool_options()
//!     .connect("mysql://app@127.0.0.1/app")
//!     .await?;
//! let provider = MySqlLockProvider::builder(pool).option(Flavor::MariaDb).build()?;
//! provider.create_table().await?; // or run provider.ddl() in a migration
//!
//! let cfg = LockConfig::new("nightly-report", Duration::from_secs(600), Duration::from_secs(30))?;
//! if let Some(lock) = provider.try_lock(&cfg).await? {
//!     // ... run the task ...
//!     lock.unlock().await?;
//! }
//! # Ok(()) }
//! ```
//!
//! # Connections
//!
//! A statement on a pooled sqlx 0.9 connection is not one round trip: sqlx pings every
//! connection when it goes back to the pool (always), and with `test_before_acquire(true)`
//! (sqlx's default) once more at checkout. So by default the provider takes **one connection of
//! its own** from your pool, detaches it (the pool may then open one more than its
//! `max_connections`) and runs lock statements on it: one round trip each on MariaDB, nothing
//! after. A statement that finds it busy (another lock call of this provider in flight) uses a
//! pooled connection instead of queueing. A failed connection is dropped and the next call opens
//! a fresh one; a connection the server closed while idle (`KILL`, restart, `wait_timeout`:
//! MariaDB says nothing, the client sees EOF) therefore fails one call with the retryable
//! [`Error::Unavailable`](shedlock::Error::Unavailable): the statement is not repeated blindly,
//! since it may have run. A call cancelled mid-statement drops the connection. The connection
//! follows the pool's `max_lifetime` and `idle_timeout` (10 minutes by default, well under the
//! server's `wait_timeout`) and goes when the pool is closed.
//! [`dedicated_connection(false)`](SqlLockProviderBuilder::dedicated_connection) runs every
//! statement on a pooled connection instead (one server connection fewer, two or three round
//! trips per operation).
//!
//! # Pool settings
//!
//! The provider never changes your pool. [`recommended_pool_options`] turns off
//! `test_before_acquire` (saving a round trip on the pooled path) and sets an `acquire_timeout`
//! so an unreachable server fails fast.

mod builder;
mod dialect;
mod error;
mod flavor;
mod statements;
mod table;

pub use builder::{
    MySqlLockProvider, MySqlLockProviderBuilder, MySqlOptions, recommended_pool_options,
};
pub use dialect::MySqlDialect;
pub use flavor::Flavor;
pub use shedlock::TimeSource;
/// The builder setters every provider shares (`operation_timeout`, `locked_by`, `clock`).
pub use shedlock_sql::{ClockBuilder, ProviderBuilder};
pub use shedlock_sql::{
    Columns, DEFAULT_MAX_NAME_LEN, Dialect, LockRecord, SqlLockProvider, SqlLockProviderBuilder,
};

const BACKEND: &str = "mysql";
/// The largest `max_name_len` accepted: the name is an InnoDB primary key, limited to 3072
/// bytes.
pub const MAX_NAME_LEN_LIMIT: usize = 3072;

/// The README's examples, compiled (and, where they need no server, run) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

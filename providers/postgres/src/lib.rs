//! PostgreSQL lock provider for [`shedlock`], on the caller's [`sqlx`] pool.
//!
//! - **One statement, one round trip** per acquire, whether or not the row exists:
//!   `INSERT … ON CONFLICT (name) DO UPDATE … WHERE lock_until <= now RETURNING fencing_token`.
//!   No duplicate-key noise in the server log, no INSERT-then-UPDATE, no "row exists" cache.
//! - **Database time** by default: `lock_until` is computed in SQL from the server's `now()`,
//!   so client clock skew cannot break exclusion. [`TimeSource::Client`] uses the instance's own
//!   [`Clock`](shedlock::Clock) instead (ShedLock's default behaviour), for comparison.
//! - **Owner-checked** unlock and extend: they change the row only if this acquisition still
//!   owns it (its random `acquisition_id` and its fencing token both match).
//! - **Fencing tokens**: every acquisition gets a token greater than every earlier one for the
//!   name: `greatest(old + 1, server clock in µs)`, so even a row deleted and recreated gets a
//!   larger token unless the server clock was stepped back.
//! - Lock statements run on a connection of the provider's own, taken from the pool (see
//!   [Connections](#connections)), in autocommit, never inside a caller's transaction.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_postgres::PostgresLockProvider;
//!
//! let pool = shedlock_postgres::recommended_pool_options()
//!     .connect("postgres://app@127.0.0.1/app")
//!     .await?;
//! let provider = PostgresLockProvider::builder(pool).table("shedlock").build()?;
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
//! connection when it goes back to the pool (always; the kit's proxy sees it as 1.6–2
//! turnarounds per operation), and with `test_before_acquire(true)` (sqlx's default) once more
//! at checkout. So by default the provider takes **one connection of its own** from your pool,
//! detaches it (the pool may then open one more than its `max_connections`) and runs lock
//! statements on it: one round trip each, nothing after. A statement that finds it busy (another
//! lock call of this provider in flight) uses a pooled connection instead of queueing. A failed
//! connection is dropped and replaced by the next call; when the server ended it (restart,
//! `pg_terminate_backend`: PostgreSQL says so with FATAL 57P01) the statement is retried at
//! once on a fresh one, since it never ran. A connection lost without a word (reset, EOF) fails
//! that one call with the retryable [`Error::Unavailable`](shedlock::Error::Unavailable),
//! because the statement may have run. A call cancelled mid-statement drops the connection. The
//! connection follows the pool's `max_lifetime` and `idle_timeout` and goes when the pool is
//! closed. [`dedicated_connection(false)`](SqlLockProviderBuilder::dedicated_connection)
//! runs every statement on a pooled connection instead (one server connection fewer, two or
//! three round trips per operation).
//!
//! # Pool settings
//!
//! The provider never changes your pool. [`recommended_pool_options`] turns off
//! `test_before_acquire` (saving a round trip on the pooled path) and sets an `acquire_timeout`
//! so an unreachable server fails fast.
//!
//! # Cheaper commits, and what a crash then loses
//!
//! A lock is a committed row, so on a durable server (`fsync` and `synchronous_commit` on, the
//! defaults) every acquire and release waits for a WAL flush to disk. That wait is what keeps a
//! granted lock through a server crash. A session advisory lock (`pg_try_advisory_lock`, sqlx's
//! `PgAdvisoryLock`) writes nothing and is faster, but it is not the same guarantee: it lives
//! in the server's memory and belongs to one connection, so it is released when that connection
//! drops (a network blip, a pool recycling it, a failover), it has no `lock_at_most_for` (a hung
//! holder keeps it for ever), no `lock_at_least_for` (it cannot outlive the holder's run to keep
//! a fleet with skewed clocks from running a job twice), no record of who holds it, no fencing
//! token, and its key is a 64-bit integer, so names must be hashed. Two opt-in settings make the
//! provider's commits cheaper instead, each at a stated price:
//!
//! - [`asynchronous_commit(true)`](SqlLockProviderBuilder::asynchronous_commit) runs
//!   `SET synchronous_commit = off` on the provider's own connection when it opens it (a
//!   session setting on a connection that is no longer the pool's: the pool is unchanged).
//!   Commits then return before their WAL is flushed. **A server crash** (or an immediate
//!   shutdown) **can lose the commits of the last moments**, up to 3 × `wal_writer_delay`
//!   (600 ms by default): a lock granted then is forgotten after the restart, and another
//!   instance may take it while the first still runs (a lost extension likewise; a lost
//!   unlock only keeps the lock until its `lock_until`). The database itself stays
//!   consistent. With synchronous replication, such commits do not wait for the standby
//!   either. Statements that fall back to a pooled connection (the dedicated one busy, or
//!   [`dedicated_connection(false)`](SqlLockProviderBuilder::dedicated_connection)) commit
//!   synchronously, as the pool's connections do.
//! - [`unlogged_table(true)`](SqlLockProviderBuilder::unlogged_table) makes [`ddl`](
//!   SqlLockProvider::ddl) and [`create_table`](SqlLockProvider::create_table)
//!   `CREATE UNLOGGED TABLE …`: the table's writes skip the WAL. **A crash (not a clean
//!   shutdown) truncates the table**, releasing every lock at once. An unlogged table is not
//!   replicated: after a fail-over to a streaming replica every lock is gone. It changes only
//!   the DDL; an existing table stays as it is (`ALTER TABLE … SET UNLOGGED` changes one).
//!
//! Neither loses anything on a clean restart. Fencing tokens still increase after such a loss
//! (they follow the server clock), unless the server clock was stepped back.

mod builder;
mod dialect;
mod error;
mod statements;
mod table;

pub use builder::{
    PostgresLockProvider, PostgresLockProviderBuilder, PostgresOptions, recommended_pool_options,
};
pub use dialect::PostgresDialect;
pub use shedlock::TimeSource;
/// The builder setters every provider shares (`operation_timeout`, `locked_by`, `clock`).
pub use shedlock_sql::{ClockBuilder, ProviderBuilder};
pub use shedlock_sql::{
    Columns, DEFAULT_MAX_NAME_LEN, Dialect, LockRecord, SqlLockProvider, SqlLockProviderBuilder,
};

const BACKEND: &str = "postgres";
/// The largest `max_name_len` accepted: names are a b-tree key, which PostgreSQL limits to
/// about 2.7 kB.
pub const MAX_NAME_LEN_LIMIT: usize = 2000;

/// The README's examples, compiled (and, where they need no server, run) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

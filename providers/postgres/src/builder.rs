//! What a provider is built with: [`recommended_pool_options`], the provider and builder types
//! ([`PostgresLockProvider`], [`PostgresLockProviderBuilder`]) and the dialect's builder settings
//! ([`PostgresOptions`]: the dedicated connection, asynchronous commit, the unlogged table; the
//! ShedLock-compatible mode).

use std::time::Duration;

use shedlock_sql::{AsynchronousCommit, DedicatedConnection, ShedlockTable, UnloggedTable};
use sqlx::postgres::PgPoolOptions;

use crate::{PostgresDialect, SqlLockProvider, SqlLockProviderBuilder};

/// Pool options suited to a pool used for locks: no ping before each checkout (saves a round
/// trip whenever a statement runs on a pooled connection; the provider's own connection is
/// pinged once when it is taken idle from such a pool), 5 s acquire timeout, at most 4 connections. Start from these
/// and adjust; the provider works with any pool.
pub fn recommended_pool_options() -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(4)
        .test_before_acquire(false)
        .acquire_timeout(Duration::from_secs(5))
}

/// A [`LockProvider`](shedlock::LockProvider) on a PostgreSQL table: the generic
/// [`SqlLockProvider`] over [`PostgresDialect`]. Cheap to clone.
pub type PostgresLockProvider = SqlLockProvider<PostgresDialect>;

/// Builds a [`PostgresLockProvider`]: [`PostgresLockProvider::builder`] on your pool. Besides
/// the shared settings it has
/// [`dedicated_connection`](SqlLockProviderBuilder::dedicated_connection) (see
/// [Connections](crate#connections)),
/// [`asynchronous_commit`](SqlLockProviderBuilder::asynchronous_commit) and
/// [`unlogged_table`](SqlLockProviderBuilder::unlogged_table) (both opt-in; see
/// [Cheaper commits](crate#cheaper-commits-and-what-a-crash-then-loses)) and
/// [`shedlock_compatible`](SqlLockProviderBuilder::shedlock_compatible): PostgreSQL's
/// ShedLock table has times as `TIMESTAMP` in UTC; database time is ShedLock's `usingDbTime()`,
/// `timezone('utc', now())`. See the README's "Joining a ShedLock fleet".
pub type PostgresLockProviderBuilder = SqlLockProviderBuilder<PostgresDialect>;

/// The builder settings of [`PostgresDialect`] (set through the builder).
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    pub(crate) dedicated: bool,
    pub(crate) asynchronous_commit: bool,
    pub(crate) unlogged: bool,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self { dedicated: true, asynchronous_commit: false, unlogged: false }
    }
}

impl DedicatedConnection for PostgresDialect {
    fn set_dedicated_connection(options: &mut PostgresOptions, dedicated: bool) {
        options.dedicated = dedicated;
    }
}

/// `SET synchronous_commit = off` on the provider's own connection, right after it is opened.
impl AsynchronousCommit for PostgresDialect {
    fn set_asynchronous_commit(options: &mut PostgresOptions, asynchronous: bool) {
        options.asynchronous_commit = asynchronous;
    }
}

/// `CREATE UNLOGGED TABLE` in the DDL.
impl UnloggedTable for PostgresDialect {
    fn set_unlogged_table(options: &mut PostgresOptions, unlogged: bool) {
        options.unlogged = unlogged;
    }
}

impl ShedlockTable for PostgresDialect {}

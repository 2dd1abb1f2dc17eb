//! What a provider is built with: [`recommended_pool_options`], the provider and builder types
//! ([`MySqlLockProvider`], [`MySqlLockProviderBuilder`]) and the dialect's builder settings
//! ([`MySqlOptions`]: the [`Flavor`] and the dedicated connection; the ShedLock-compatible mode).

use std::time::Duration;

use shedlock_sql::{DedicatedConnection, DialectOption, ShedlockTable};
use sqlx::mysql::MySqlPoolOptions;

use crate::{Flavor, MySqlDialect, SqlLockProvider, SqlLockProviderBuilder};

/// Pool options suited to a pool used for locks: no ping before each checkout (saves a round
/// trip whenever a statement runs on a pooled connection; the provider's own connection is
/// pinged once when it is taken idle from such a pool), 5 s acquire timeout, at most 4 connections.
pub fn recommended_pool_options() -> MySqlPoolOptions {
    MySqlPoolOptions::new()
        .max_connections(4)
        .test_before_acquire(false)
        .acquire_timeout(Duration::from_secs(5))
}

/// A [`LockProvider`](shedlock::LockProvider) on a MySQL or MariaDB table: the generic
/// [`SqlLockProvider`] over [`MySqlDialect`]. Cheap to clone.
pub type MySqlLockProvider = SqlLockProvider<MySqlDialect>;

/// Builds a [`MySqlLockProvider`]: [`MySqlLockProvider::builder`] on your pool. Besides the
/// shared settings it has [`option`](SqlLockProviderBuilder::option)`(`[`Flavor`]`)`,
/// [`dedicated_connection`](SqlLockProviderBuilder::dedicated_connection) (see
/// [Connections](crate#connections)) and
/// [`shedlock_compatible`](SqlLockProviderBuilder::shedlock_compatible): the table of
/// ShedLock's JDBC providers for MySQL and MariaDB, times as `TIMESTAMP(3)`, database time
/// `UTC_TIMESTAMP(3)`. MySQL converts `TIMESTAMP` values through the **session** `time_zone`, so
/// every node of the fleet must use the same one; the first call in that mode checks that this
/// pool's session zone has the server default's offset (what a JDBC node uses unless configured
/// otherwise) and fails with [`Error::Setup`](shedlock::Error::Setup) if not (sqlx sets
/// `+00:00`, which matches a server whose `time_zone` is UTC, or `SYSTEM` on a UTC host). The
/// compatible table has a `VARBINARY` name (byte-exact names; ShedLock's statements work on it
/// unchanged), and the acquire knows it won by reading its own `locked_by` back. See the README's
/// "Joining a ShedLock fleet".
pub type MySqlLockProviderBuilder = SqlLockProviderBuilder<MySqlDialect>;

/// The builder settings of [`MySqlDialect`] (set through the builder).
#[derive(Debug, Clone)]
pub struct MySqlOptions {
    pub(crate) flavor: Flavor,
    pub(crate) dedicated: bool,
}

impl Default for MySqlOptions {
    fn default() -> Self {
        Self { flavor: Flavor::Detect, dedicated: true }
    }
}

/// The server flavor, given to the builder's [`option`](SqlLockProviderBuilder::option)
/// (default [`Flavor::Detect`]).
impl DialectOption<MySqlDialect> for Flavor {
    fn apply(self, options: &mut MySqlOptions) {
        options.flavor = self;
    }
}

impl DedicatedConnection for MySqlDialect {
    fn set_dedicated_connection(options: &mut MySqlOptions, dedicated: bool) {
        options.dedicated = dedicated;
    }
}

impl ShedlockTable for MySqlDialect {}

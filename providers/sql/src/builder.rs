//! [`SqlLockProviderBuilder`]: the table and column names, the longest name, the shared settings
//! and the dialect's own, validated once in [`build`](SqlLockProviderBuilder::build).

use std::fmt;

use shedlock::{
    ClockBuilder, Error, ProviderBuilder, Result, TimeSource,
    store::{ProviderSettings, StoreProvider},
};

use crate::{
    AsynchronousCommit, Columns, DedicatedConnection, Dialect, DialectOption, QuotedNames,
    Settings, ShedlockTable, SqlLockProvider, TableName, UnloggedTable, store::SqlStore,
};

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

/// Builds a [`SqlLockProvider`]: [`SqlLockProvider::builder`] on the caller's pool.
///
/// The shared setters (`operation_timeout`, `locked_by`, `clock`) come from [`ProviderBuilder`]
/// (and [`ClockBuilder`]), in scope with `use shedlock_sql::ProviderBuilder;`. Here the time limit
/// includes waiting for a pooled connection (and, in SQLite, for the database's write lock); the
/// clock computes `lock_until` only with [`TimeSource::Client`].
#[must_use]
pub struct SqlLockProviderBuilder<D: Dialect> {
    pub(crate) pool: D::Pool,
    pub(crate) options: D::Options,
    pub(crate) table: String,
    pub(crate) columns: Columns,
    pub(crate) max_name_len: usize,
    pub(crate) settings: ProviderSettings,
}

impl<D: Dialect> fmt::Debug for SqlLockProviderBuilder<D> {
    /// Everything but the pool (whose options may hold credentials).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlLockProviderBuilder")
            .field("backend", &D::BACKEND)
            .field("table", &self.table)
            .field("columns", &self.columns)
            .field("max_name_len", &self.max_name_len)
            .field("options", &self.options)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> ProviderBuilder for SqlLockProviderBuilder<D> {
    fn settings_mut(&mut self) -> &mut ProviderSettings {
        &mut self.settings
    }
}

impl<D: Dialect> ClockBuilder for SqlLockProviderBuilder<D> {}

impl<D: Dialect> SqlLockProviderBuilder<D> {
    /// The lock table, `table` or `schema.table` (default `shedlock`). Each part must be a plain
    /// identifier (`[A-Za-z_][A-Za-z0-9_]*`, at most 63 bytes); it is quoted in SQL, so it is
    /// case-sensitive where the database is (use lower case to match a PostgreSQL table created
    /// with unquoted DDL). Anything else is [`Error::Setup`] at [`build`](Self::build): no
    /// unvalidated text is ever spliced into SQL.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The column names (validated like the table name).
    pub fn columns(mut self, columns: Columns) -> Self {
        self.columns = columns;
        self
    }

    /// The longest lock name in bytes (default [`DEFAULT_MAX_NAME_LEN`], at most the dialect's
    /// [`MAX_NAME_LEN_LIMIT`](Dialect::MAX_NAME_LEN_LIMIT)); it sizes the name column in
    /// [`ddl`](SqlLockProvider::ddl) where the database has sized text. Longer names get
    /// [`Error::InvalidName`], never truncated.
    pub fn max_name_len(mut self, max: usize) -> Self {
        self.max_name_len = max;
        self
    }

    /// Whose clock judges expiry (default [`TimeSource::Server`]: the database's).
    pub fn time_source(mut self, time: TimeSource) -> Self {
        self.settings.set_time_source(time);
        self
    }

    /// A setting of the dialect (e.g. `shedlock_mysql::Flavor`).
    pub fn option(mut self, option: impl DialectOption<D>) -> Self {
        option.apply(&mut self.options);
        self
    }

    /// Validates the configuration and builds the provider. Invalid identifiers, `locked_by`
    /// or `max_name_len` give [`Error::Setup`]. Does no I/O.
    pub fn build(self) -> Result<SqlLockProvider<D>> {
        let table = TableName::parse(D::BACKEND, &self.table)?;
        let names = QuotedNames::new(D::BACKEND, &table, &self.columns, D::QUOTE)?;
        let provider = self.settings.validate(D::BACKEND)?;
        check_max_name_len(D::BACKEND, self.max_name_len, D::MAX_NAME_LEN_LIMIT)?;
        let settings = Settings { names, max_name_len: self.max_name_len, provider };
        let ddl = D::ddl(&self.options, &settings);
        let dialect = D::new(self.pool, self.options, &settings)?;
        let store = SqlStore {
            dialect,
            table: settings.names.table_display.clone(),
            table_name: table,
            ddl,
            max_name_len: settings.max_name_len,
            compat: settings.compat(),
        };
        Ok(SqlLockProvider { inner: StoreProvider::new(store, settings.provider) })
    }
}

impl<D: DedicatedConnection> SqlLockProviderBuilder<D> {
    /// Whether lock statements run on a connection of the provider's own (default `true`) or
    /// each on a connection checked out of the pool (`false`).
    ///
    /// `true`: one round trip per lock operation, nothing after it, and one server connection
    /// more than the pool's own (the dedicated one is detached from the pool). `false`: no extra
    /// connection, but sqlx 0.9 pings each pooled connection when it returns to the pool, and
    /// with `test_before_acquire(true)` before checkout too: two or three round trips per
    /// operation. Both are equally safe: a statement never runs on a connection left in an
    /// unknown state, and every call runs in autocommit. See [`LockConn`](crate::LockConn).
    pub fn dedicated_connection(mut self, dedicated: bool) -> Self {
        D::set_dedicated_connection(&mut self.options, dedicated);
        self
    }
}

impl<D: AsynchronousCommit> SqlLockProviderBuilder<D> {
    /// Opt-in (default `false`): the lock statements on the provider's own connection commit
    /// without waiting for the database to make them durable. Each commit then costs no disk
    /// flush (on a durable server, often most of a lock operation's time), but **a server crash can
    /// forget the latest commits**: a lock granted just before it is free again after the
    /// restart, so another instance may take it while the first still runs its task. A clean
    /// restart loses nothing. Only the dedicated connection's statements are affected: one
    /// that runs on a pooled connection (the dedicated one busy, or
    /// [`dedicated_connection(false)`](Self::dedicated_connection)) commits as the pool's
    /// connections do, and the pool itself is never changed. The dialect crate's
    /// documentation says what exactly a crash loses.
    pub fn asynchronous_commit(mut self, asynchronous: bool) -> Self {
        D::set_asynchronous_commit(&mut self.options, asynchronous);
        self
    }
}

impl<D: UnloggedTable> SqlLockProviderBuilder<D> {
    /// Opt-in (default `false`): [`ddl`](SqlLockProvider::ddl) and
    /// [`create_table`](SqlLockProvider::create_table) create an unlogged table, whose writes
    /// skip the database's log: cheaper commits, but **a server crash empties the table**,
    /// releasing every lock at once, and replicas do not get its rows. It changes only the DDL:
    /// an existing table stays what it is. The dialect crate's documentation says what exactly
    /// a crash loses.
    pub fn unlogged_table(mut self, unlogged: bool) -> Self {
        D::set_unlogged_table(&mut self.options, unlogged);
        self
    }
}

impl<D: ShedlockTable> SqlLockProviderBuilder<D> {
    /// ShedLock-compatible mode: read and write exactly the table of ShedLock's JDBC provider
    /// for this database (`name`, `lock_until`, `locked_at`, `locked_by`; the column names are
    /// the configured [`columns`](Self::columns)), so that this provider and Java ShedLock nodes
    /// lock the same jobs on the same table. See the dialect crate's README, "Joining a
    /// ShedLock fleet", for its time types and zone rules.
    ///
    /// - Database time is ShedLock's `usingDbTime()`; with [`TimeSource::Client`] the times
    ///   are this instance's clock in UTC, as ShedLock's default mode writes them.
    /// - No fencing (ShedLock's table has no column for it):
    ///   [`Lock::fencing_token`](shedlock::Lock::fencing_token) is `None`.
    /// - Owner-checked through `locked_by`: each acquisition writes the configured value
    ///   followed by ` #` and its own 16 hex digits (so `locked_by` may be at most 237 bytes),
    ///   and unlock and extend change the row only while it carries that value.
    /// - [`ddl`](SqlLockProvider::ddl) and `create_table` give ShedLock's documented table. A
    ///   table in the native schema is refused at the first call with [`Error::Setup`] (and the
    ///   native mode refuses a ShedLock table the same way).
    pub fn shedlock_compatible(mut self) -> Self {
        self.settings.set_shedlock_compatible(true);
        self
    }
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

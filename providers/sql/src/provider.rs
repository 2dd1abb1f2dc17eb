//! The provider every dialect shares: [`SqlLockProvider`] (built by its builder, in `builder.rs`),
//! `try_lock` / unlock / extend through core's [`StoreProvider`] (on the store of `store.rs`, which
//! declares the capabilities), the table's creation and the record helpers. A dialect supplies
//! only its primitives ([`Dialect`]): the statements, how to run them, the units of its times and
//! how to classify its errors.

use std::{fmt, sync::Arc, time::SystemTime};

use async_trait::async_trait;
#[cfg(doc)]
use shedlock::store::LeaseStore;
use shedlock::{
    Error, LockProvider, Result,
    store::{DelegatingProvider, Operation, ProviderSettings, StoreProvider},
    support::{check_lock_name, unix_micros, with_timeout},
};

use crate::{
    ArgValues, Call, Columns, DEFAULT_MAX_NAME_LEN, DbErrorKind, Dialect, LockRecord, Op,
    SqlLockProviderBuilder, store::SqlStore,
};

/// How often a `CREATE TABLE IF NOT EXISTS` that lost a catalog race is run in all.
const DDL_ATTEMPTS: usize = 3;

/// A lock provider on a SQL table, over dialect `D`: the table's rows as a [`LeaseStore`], run by
/// core's [`StoreProvider`]. Implements [`LockProvider`](shedlock::LockProvider). Cheap to clone.
///
/// Each dialect crate names it: `shedlock_postgres::PostgresLockProvider` is
/// `SqlLockProvider<PostgresDialect>`.
pub struct SqlLockProvider<D: Dialect> {
    pub(crate) inner: StoreProvider<SqlStore<D>>,
}

impl<D: Dialect> Clone for SqlLockProvider<D> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone() }
    }
}

impl<D: Dialect> fmt::Debug for SqlLockProvider<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let store = self.store();
        f.debug_struct(D::PROVIDER)
            .field("table", &store.table)
            .field("dialect", &store.dialect)
            .field("max_name_len", &store.max_name_len)
            .field("settings", self.inner.settings())
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> DelegatingProvider for SqlLockProvider<D> {
    fn delegate(&self) -> &dyn LockProvider {
        &self.inner
    }
}

impl<D: Dialect> SqlLockProvider<D> {
    /// Starts a builder on the caller's pool.
    pub fn builder(pool: D::Pool) -> SqlLockProviderBuilder<D> {
        SqlLockProviderBuilder {
            pool,
            options: D::Options::default(),
            table: "shedlock".into(),
            columns: Columns::default(),
            max_name_len: DEFAULT_MAX_NAME_LEN,
            settings: ProviderSettings::new(),
        }
    }

    fn store(&self) -> &SqlStore<D> {
        self.inner.store()
    }

    /// Whether this provider runs in the ShedLock-compatible mode.
    pub fn is_shedlock_compatible(&self) -> bool {
        self.store().compat
    }

    /// The dialect (for what it reports of itself, e.g. the MySQL flavor in use).
    pub fn dialect(&self) -> &D {
        &self.store().dialect
    }

    /// The `CREATE TABLE IF NOT EXISTS` statement for the configured table and columns.
    pub fn ddl(&self) -> &str {
        &self.store().ddl
    }

    /// Creates the lock table if it does not exist (runs [`ddl`](Self::ddl)). Safe when every
    /// node of a fleet calls it at start-up at once: `CREATE TABLE IF NOT EXISTS` is not atomic
    /// in every database (PostgreSQL), and a node that loses the race fails on the catalog
    /// ([`Dialect::is_ddl_race`]); it then runs the DDL again, which finds the table.
    pub async fn create_table(&self) -> Result<()> {
        let store = self.store();
        with_timeout(Operation::CreateTable, self.inner.settings().timeout(), async {
            let mut attempt = 1;
            let result = loop {
                match store.dialect.run_ddl(&store.ddl).await {
                    Err(sqlx::Error::Database(db))
                        if attempt < DDL_ATTEMPTS && D::is_ddl_race(db.as_ref()) =>
                    {
                        tracing::debug!(
                            table = %store.table,
                            error = %db,
                            "another node created the lock table concurrently; running the DDL again"
                        );
                        attempt += 1;
                    }
                    other => break other,
                }
            };
            result.map_err(|e| {
                // A missing privilege is the user's set-up, and says which grant to give; the
                // messages of a missing table or column would only say to run the DDL again.
                let denied = matches!(&e, sqlx::Error::Database(db)
                    if D::classify(db.as_ref()) == DbErrorKind::PermissionDenied);
                match store.err(Call::CreateTable, None, e) {
                    e @ Error::Unavailable { .. } => e,
                    e @ Error::Setup { .. } if denied => e,
                    Error::Setup { message, .. } => Error::backend(D::BACKEND, message),
                    e => e,
                }
            })
        })
        .await
    }

    /// The stored row of `name`, if any (for operators and tests).
    pub async fn record(&self, name: &str) -> Result<Option<LockRecord>> {
        let store = self.store();
        let values = store.values(self.inner.settings(), name);
        with_timeout(Operation::ReadRecord, self.inner.settings().timeout(), async {
            store.dialect.record(&values).await.map_err(|e| store.err(Call::Record, Some(name), e))
        })
        .await
    }

    /// Deletes the row of `name`, as an operator might; returns whether there was one. A held
    /// lock deleted this way is simply free; the next acquisition recreates the row with a
    /// larger fencing token.
    pub async fn delete_record(&self, name: &str) -> Result<bool> {
        let store = self.store();
        let values = store.values(self.inner.settings(), name);
        with_timeout(Operation::DeleteRecord, self.inner.settings().timeout(), async {
            store.execute(Op::Delete, &values).await.map(|n| n > 0)
        })
        .await
    }

    /// Creates or overwrites the row of `name` with `lock_until` (and `locked_at`) set to the
    /// given time (in the dialect's precision: MySQL and SQLite floor it to the millisecond), a
    /// fresh owner nobody holds, and a larger fencing token, as a process that crashed would
    /// have left it. For tests and manual repair; `lock_until` in the past frees the lock, in
    /// the future blocks it.
    pub async fn write_record(&self, name: &str, lock_until: SystemTime) -> Result<()> {
        let store = self.store();
        check_lock_name(D::BACKEND, name, Some(store.max_name_len), D::REJECT_NUL)?;
        let values = ArgValues {
            until: D::time(unix_micros(lock_until)),
            acquisition_id: self.inner.settings().new_owner().id_i64(),
            ..store.values(self.inner.settings(), name)
        };
        with_timeout(Operation::WriteRecord, self.inner.settings().timeout(), async {
            store.execute(Op::Write, &values).await.map(|_| ())
        })
        .await
    }

    /// The record helpers as a shareable object (shared test support and admin tools that work
    /// on any SQL provider).
    pub fn records(&self) -> Arc<dyn RecordAdmin> {
        Arc::new(self.clone())
    }
}

/// The record helpers of a provider, as an object (for test support and admin tools that work
/// on any SQL provider).
#[async_trait]
pub trait RecordAdmin: Send + Sync + 'static {
    /// The stored row of `name`, if any.
    async fn record(&self, name: &str) -> Result<Option<LockRecord>>;
    /// Deletes the row of `name`; returns whether there was one.
    async fn delete_record(&self, name: &str) -> Result<bool>;
    /// Creates or overwrites the row of `name` with the given `lock_until`.
    async fn write_record(&self, name: &str, lock_until: SystemTime) -> Result<()>;
}

#[async_trait]
impl<D: Dialect> RecordAdmin for SqlLockProvider<D> {
    async fn record(&self, name: &str) -> Result<Option<LockRecord>> {
        SqlLockProvider::record(self, name).await
    }

    async fn delete_record(&self, name: &str) -> Result<bool> {
        SqlLockProvider::delete_record(self, name).await
    }

    async fn write_record(&self, name: &str, lock_until: SystemTime) -> Result<()> {
        SqlLockProvider::write_record(self, name, lock_until).await
    }
}

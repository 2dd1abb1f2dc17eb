//! The provider flow the three dialects share: builder settings, `try_lock` / unlock / extend,
//! capabilities and the record helpers. A dialect supplies only its primitives ([`Dialect`]):
//! the statements, how to run them, the units of its times and how to classify its errors.

use std::{fmt, sync::Arc, time::Duration, time::SystemTime};

use async_trait::async_trait;
use shedlock::{
    Capabilities, Error, Lock, LockConfig, LockProvider, Result,
    store::{self, Extension, Granted, LeaseStore, ProviderSettings, Request, StoreProvider},
    support::{check_lock_name, unix_micros, with_timeout},
};
use sqlx::{
    AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Row, Type, error::DatabaseError,
    query::Query,
};

use crate::{
    ArgValues, Columns, DEFAULT_MAX_NAME_LEN, DbErrorKind, ErrorContext, LockRecord, QuotedNames,
    Stmt, TableName, Value, check_max_name_len, map_sqlx_error, token_u64,
};

/// The default time limit of each lock operation: 10 s, as for every provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT as DEFAULT_TIMEOUT;

/// How often a statement rolled back by a deadlock or serialization failure is tried in all.
pub const TRANSIENT_ATTEMPTS: usize = 3;

/// A statement a dialect runs for its rows-affected count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Owner-checked unlock (keeps `lock_at_least_for`).
    Unlock,
    /// Owner-checked extend; must report 1 iff the row is still held by this acquisition.
    Extend,
    /// Deletes the row of a name.
    Delete,
    /// Creates or overwrites the row of a name with a given `lock_until`.
    Write,
}

/// What a SQL dialect provides: its primitives. Everything else (name checks, owner ids,
/// timeouts, error mapping, the handle) is shared.
pub trait Dialect: Send + Sync + Sized + 'static {
    /// The backend name in errors and logs.
    const BACKEND: &'static str;
    /// Whether a lock name with a NUL character is refused before it is bound.
    const REJECT_NUL: bool;

    /// Classifies a database error.
    fn classify(e: &dyn DatabaseError) -> DbErrorKind;

    /// A duration in the dialect's integer units (rounded up).
    fn duration(d: Duration) -> i64;

    /// An absolute time, in microseconds since the Unix epoch, in the dialect's units.
    fn time(micros: i64) -> i64;

    /// Runs the acquire: the fencing token if this acquisition (`values.acquisition_id`) won
    /// the lock, `None` if it is held elsewhere. One round trip where the dialect allows it.
    fn acquire(
        &self,
        values: &ArgValues<'_>,
    ) -> impl Future<Output = std::result::Result<Option<i64>, sqlx::Error>> + Send;

    /// Runs `op`, returning the rows affected.
    fn execute(
        &self,
        op: Op,
        values: &ArgValues<'_>,
    ) -> impl Future<Output = std::result::Result<u64, sqlx::Error>> + Send;

    /// Reads the row of `values.name`.
    fn record(
        &self,
        values: &ArgValues<'_>,
    ) -> impl Future<Output = std::result::Result<Option<LockRecord>, sqlx::Error>> + Send;

    /// Whether a failed DDL lost a race with another node creating the same table (the table
    /// exists now; running the DDL again finds it). Default: a unique violation.
    fn is_ddl_race(e: &dyn DatabaseError) -> bool {
        e.is_unique_violation()
    }

    /// Runs the DDL (one or more statements, no parameters).
    fn run_ddl(
        &self,
        ddl: &str,
    ) -> impl Future<Output = std::result::Result<(), sqlx::Error>> + Send;
}

/// Binds `values` to `stmt` for any `sqlx` database that takes text and 64-bit integers.
pub fn bind<'q, DB>(stmt: &Stmt, values: &ArgValues<'q>) -> Query<'q, DB, DB::Arguments>
where
    DB: Database,
    &'q str: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
{
    let mut q = sqlx::query(AssertSqlSafe(stmt.sql().clone()));
    for v in stmt.values(values) {
        q = match v {
            Value::Text(s) => q.bind(s),
            Value::Int(i) => q.bind(i),
        };
    }
    q
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

/// Runs `f` up to [`TRANSIENT_ATTEMPTS`] times while it fails with a deadlock or serialization
/// failure (the statement was rolled back; each attempt is a fresh autocommit statement), through
/// [`shedlock::support::retry_transient`].
pub async fn retry_transient<T, F, Fut>(
    classify: fn(&dyn DatabaseError) -> DbErrorKind,
    f: F,
) -> std::result::Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, sqlx::Error>>,
{
    let transient = |e: &sqlx::Error| matches!(e, sqlx::Error::Database(db) if classify(db.as_ref()) == DbErrorKind::Transient);
    shedlock::support::retry_transient(TRANSIENT_ATTEMPTS, transient, f).await
}

/// The configuration every SQL builder shares, with its defaults.
#[derive(Debug)]
pub struct BuilderCore {
    /// The table, `table` or `schema.table`.
    pub table: String,
    /// The column names.
    pub columns: Columns,
    /// The longest lock name in bytes.
    pub max_name_len: usize,
    /// What every provider's builder holds: `locked_by`, timeout, time source, clock and the
    /// ShedLock-compatible mode.
    pub settings: ProviderSettings,
}

impl Default for BuilderCore {
    fn default() -> Self {
        Self {
            table: "shedlock".into(),
            columns: Columns::default(),
            max_name_len: DEFAULT_MAX_NAME_LEN,
            settings: ProviderSettings::new(),
        }
    }
}

/// A validated [`BuilderCore`]: the quoted names to build statements and DDL from.
#[derive(Debug)]
pub struct Settings {
    /// The quoted table and column names.
    pub names: QuotedNames,
    /// The longest lock name in bytes.
    pub max_name_len: usize,
    /// The validated settings every provider shares.
    pub provider: store::Settings,
}

impl Settings {
    /// Whether the database's clock judges expiry.
    pub fn database_time(&self) -> bool {
        self.provider.time_source().is_server()
    }

    /// Whether the ShedLock-compatible mode is on.
    pub fn compat(&self) -> bool {
        self.provider.is_shedlock_compatible()
    }
}

impl BuilderCore {
    /// Validates the identifiers (quoted with `quote`), `locked_by` and `max_name_len` (at
    /// most `max_name_len_limit`): [`Error::Setup`] otherwise. Does no I/O.
    pub fn validate(
        self,
        backend: &'static str,
        quote: char,
        max_name_len_limit: usize,
    ) -> Result<Settings> {
        let table = TableName::parse(backend, &self.table)?;
        let names = QuotedNames::new(backend, &table, &self.columns, quote)?;
        let provider = self.settings.validate(backend)?;
        check_max_name_len(backend, self.max_name_len, max_name_len_limit)?;
        Ok(Settings { names, max_name_len: self.max_name_len, provider })
    }
}

/// The length of what the ShedLock-compatible mode appends to `locked_by`: ` #` and 16 hex
/// digits.
pub const OWNER_SUFFIX_LEN: usize = shedlock::support::ACQUISITION_SUFFIX_LEN;

/// How often a `CREATE TABLE IF NOT EXISTS` that lost a catalog race is run in all.
const DDL_ATTEMPTS: usize = 3;

/// The rows of one lock table: the [`LeaseStore`] every SQL provider runs through core's
/// [`StoreProvider`].
struct SqlStore<D> {
    dialect: D,
    table: String,
    ddl: String,
    max_name_len: usize,
    compat: bool,
}

impl<D: Dialect> SqlStore<D> {
    fn err(&self, name: Option<&str>, e: sqlx::Error) -> Error {
        let ctx = ErrorContext {
            backend: D::BACKEND,
            table: &self.table,
            ddl: &self.ddl,
            name,
            compat: self.compat,
        };
        map_sqlx_error(&ctx, e, D::classify)
    }

    /// The values of a statement on `name` outside an acquisition (record helpers).
    fn values<'a>(&self, settings: &'a store::Settings, name: &'a str) -> ArgValues<'a> {
        ArgValues {
            name,
            locked_by: settings.locked_by(),
            now: D::time(settings.client_now().map_or(0, unix_micros)),
            clock_micros: unix_micros(SystemTime::now()),
            ..Default::default()
        }
    }

    /// The values of a statement of `req`'s acquisition (its owner id and `locked_by`).
    fn owned_values<'a>(&self, req: &Request<'a>, fencing_token: i64) -> ArgValues<'a> {
        ArgValues {
            name: req.name(),
            locked_by: req.owner().locked_by(),
            acquisition_id: req.owner().id_i64(),
            fencing_token,
            now: D::time(req.client_now().map_or(0, unix_micros)),
            clock_micros: unix_micros(SystemTime::now()),
            ..Default::default()
        }
    }

    async fn execute(&self, op: Op, values: &ArgValues<'_>) -> Result<u64> {
        self.dialect.execute(op, values).await.map_err(|e| self.err(Some(values.name), e))
    }
}

/// One acquisition's fencing token, as stored (the owner id is the request's).
struct Held {
    token: i64,
}

#[async_trait]
impl<D: Dialect> LeaseStore for SqlStore<D> {
    type Held = Held;

    fn capabilities(&self, settings: &store::Settings) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            // ShedLock's table has no column for a token.
            .with_fencing(!self.compat)
            .with_owner_checked(true)
            .with_server_time(settings.time_source().is_server())
            .with_granularity(Duration::from_millis(1))
            .with_max_name_len(Some(self.max_name_len))
    }

    fn rejects_nul(&self) -> bool {
        D::REJECT_NUL
    }

    /// One acquire statement.
    async fn acquire(&self, req: &Request<'_>) -> Result<Option<Granted<Held>>> {
        let values =
            ArgValues { at_most: D::duration(req.lock_at_most_for()), ..self.owned_values(req, 0) };
        let token =
            self.dialect.acquire(&values).await.map_err(|e| self.err(Some(req.name()), e))?;
        Ok(token.map(|token| {
            let granted = Granted::new(Held { token });
            if self.compat { granted } else { granted.with_fencing_token(token_u64(token)) }
        }))
    }

    async fn release(&self, req: &Request<'_>, held: &mut Held) -> Result<()> {
        let values = ArgValues {
            at_least: D::duration(req.lock_at_least_for()),
            ..self.owned_values(req, held.token)
        };
        if self.execute(Op::Unlock, &values).await? == 0 {
            tracing::debug!(
                lock = req.name(),
                "{} unlock by a stale holder changed nothing",
                D::BACKEND
            );
        }
        Ok(())
    }

    async fn extend(&self, req: &Request<'_>, held: &mut Held) -> Result<Extension> {
        let values = ArgValues {
            at_most: D::duration(req.lock_at_most_for()),
            ..self.owned_values(req, held.token)
        };
        let n = self.execute(Op::Extend, &values).await?;
        Ok(if n == 1 { Extension::Extended } else { Extension::Lost })
    }
}

/// A SQL lock provider over dialect `D`: its table's rows as a [`LeaseStore`], run by core's
/// [`StoreProvider`]. Cheap to clone.
pub struct SqlProvider<D> {
    inner: StoreProvider<SqlStore<D>>,
}

impl<D> Clone for SqlProvider<D> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone() }
    }
}

impl<D: Dialect> SqlProvider<D> {
    /// A provider on `dialect` with the validated settings and the table's DDL.
    pub fn new(dialect: D, settings: Settings, ddl: String) -> Self {
        let store = SqlStore {
            dialect,
            table: settings.names.table_display.clone(),
            ddl,
            max_name_len: settings.max_name_len,
            compat: settings.compat(),
        };
        Self { inner: StoreProvider::new(store, settings.provider) }
    }

    fn store(&self) -> &SqlStore<D> {
        self.inner.store()
    }

    /// Whether this provider runs in the ShedLock-compatible mode.
    pub fn is_compat(&self) -> bool {
        self.store().compat
    }

    /// The dialect.
    pub fn dialect(&self) -> &D {
        &self.store().dialect
    }

    /// The `CREATE TABLE IF NOT EXISTS` statement.
    pub fn ddl(&self) -> &str {
        &self.store().ddl
    }

    /// Writes the provider's `Debug` fields; `extra` goes right after the table.
    pub fn fmt_debug(
        &self,
        f: &mut fmt::Formatter<'_>,
        type_name: &str,
        extra: Option<(&str, &dyn fmt::Debug)>,
    ) -> fmt::Result {
        let store = self.store();
        let mut d = f.debug_struct(type_name);
        d.field("table", &store.table);
        if let Some((name, value)) = extra {
            d.field(name, value);
        }
        d.field("max_name_len", &store.max_name_len)
            .field("settings", self.inner.settings())
            .finish_non_exhaustive()
    }

    /// Creates the lock table if it does not exist (runs the DDL). Safe when every node of a
    /// fleet calls it at start-up at once: `CREATE TABLE IF NOT EXISTS` is not atomic in every
    /// database (PostgreSQL), and a node that loses the race fails on the catalog
    /// ([`Dialect::is_ddl_race`]); it then runs the DDL again, which finds the table.
    pub async fn create_table(&self) -> Result<()> {
        let store = self.store();
        with_timeout("create_table", self.inner.settings().timeout(), async {
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
            result.map_err(|e| match store.err(None, e) {
                e @ Error::Unavailable { .. } => e,
                Error::Setup { message, .. } => Error::backend(D::BACKEND, message),
                e => e,
            })
        })
        .await
    }

    /// The stored row of `name`, if any.
    pub async fn record(&self, name: &str) -> Result<Option<LockRecord>> {
        let store = self.store();
        let values = store.values(self.inner.settings(), name);
        with_timeout("record", self.inner.settings().timeout(), async {
            store.dialect.record(&values).await.map_err(|e| store.err(Some(name), e))
        })
        .await
    }

    /// Deletes the row of `name`; returns whether there was one.
    pub async fn delete_record(&self, name: &str) -> Result<bool> {
        let store = self.store();
        let values = store.values(self.inner.settings(), name);
        with_timeout("delete_record", self.inner.settings().timeout(), async {
            store.execute(Op::Delete, &values).await.map(|n| n > 0)
        })
        .await
    }

    /// Creates or overwrites the row of `name` with `lock_until` (and `locked_at`) set to the
    /// given time (in the dialect's units), a fresh owner nobody holds, and a larger token.
    pub async fn write_record(&self, name: &str, lock_until: SystemTime) -> Result<()> {
        let store = self.store();
        check_lock_name(D::BACKEND, name, Some(store.max_name_len), D::REJECT_NUL)?;
        let values = ArgValues {
            until: D::time(unix_micros(lock_until)),
            acquisition_id: self.inner.settings().new_owner().id_i64(),
            ..store.values(self.inner.settings(), name)
        };
        with_timeout("write_record", self.inner.settings().timeout(), async {
            store.execute(Op::Write, &values).await.map(|_| ())
        })
        .await
    }

    /// [`LockProvider::try_lock`](shedlock::LockProvider::try_lock): one acquire statement.
    pub async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        self.inner.try_lock(config).await
    }

    /// [`LockProvider::backend_name`](shedlock::LockProvider::backend_name): `postgres`, `mysql`
    /// or `sqlite`.
    pub fn backend_name(&self) -> &'static str {
        D::BACKEND
    }

    /// [`LockProvider::capabilities`](shedlock::LockProvider::capabilities).
    pub fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
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
impl<D: Dialect> RecordAdmin for SqlProvider<D> {
    async fn record(&self, name: &str) -> Result<Option<LockRecord>> {
        SqlProvider::record(self, name).await
    }

    async fn delete_record(&self, name: &str) -> Result<bool> {
        SqlProvider::delete_record(self, name).await
    }

    async fn write_record(&self, name: &str, lock_until: SystemTime) -> Result<()> {
        SqlProvider::write_record(self, name, lock_until).await
    }
}

impl<D: Dialect> SqlProvider<D> {
    /// The record helpers as a shareable object.
    pub fn records(&self) -> Arc<dyn RecordAdmin> {
        Arc::new(self.clone())
    }
}

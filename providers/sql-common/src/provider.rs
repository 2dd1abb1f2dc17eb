//! The provider flow the three dialects share: builder settings, `try_lock` / unlock / extend,
//! capabilities and the record helpers. A dialect supplies only its primitives ([`Dialect`]):
//! the statements, how to run them, the units of its times and how to classify its errors.

use std::{fmt, sync::Arc, time::Duration, time::SystemTime};

use async_trait::async_trait;
use shedlock::{
    Acquisition, Capabilities, Error, Lock, LockConfig, LockHandle, Result, SharedClock,
    TimeSource,
    store::Operation,
    support::{
        MAX_LOCKED_BY_LEN, acquisition_id, check_lock_name, default_locked_by, unix_micros,
        with_timeout,
    },
    system_clock,
};
use sqlx::{
    AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Row, Type, error::DatabaseError,
    query::Query,
};
use tracing::Instrument;

use crate::{
    ArgValues, Columns, DEFAULT_MAX_NAME_LEN, DbErrorKind, ErrorContext, LockRecord, QuotedNames,
    Stmt, TableName, Value, check_locked_by, check_max_name_len, map_sqlx_error, token_u64,
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
    /// `locked_by`; `None`: [`default_locked_by`].
    pub locked_by: Option<String>,
    /// The longest lock name in bytes.
    pub max_name_len: usize,
    /// Whose clock judges expiry.
    pub time: TimeSource,
    /// The instance's clock (consulted only with [`TimeSource::Client`]).
    pub clock: SharedClock,
    /// The time limit of each operation.
    pub timeout: Option<Duration>,
    /// ShedLock-compatible mode: ShedLock's four-column table, no fencing, the owner checked
    /// through a `locked_by` unique to each acquisition.
    pub compat: bool,
}

impl Default for BuilderCore {
    fn default() -> Self {
        Self {
            table: "shedlock".into(),
            columns: Columns::default(),
            locked_by: None,
            max_name_len: DEFAULT_MAX_NAME_LEN,
            time: TimeSource::Server,
            clock: system_clock(),
            timeout: Some(DEFAULT_TIMEOUT),
            compat: false,
        }
    }
}

/// A validated [`BuilderCore`]: the quoted names to build statements and DDL from.
#[derive(Debug)]
pub struct Settings {
    /// The quoted table and column names.
    pub names: QuotedNames,
    /// `locked_by`.
    pub locked_by: String,
    /// The longest lock name in bytes.
    pub max_name_len: usize,
    /// Whose clock judges expiry.
    pub time: TimeSource,
    /// The instance's clock.
    pub clock: SharedClock,
    /// The time limit of each operation.
    pub timeout: Option<Duration>,
    /// ShedLock-compatible mode.
    pub compat: bool,
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
        let locked_by = self.locked_by.unwrap_or_else(|| {
            let mut s = default_locked_by();
            if self.compat {
                // Room for the acquisition's suffix (see `owner`).
                while s.len() > MAX_LOCKED_BY_LEN - OWNER_SUFFIX_LEN {
                    s.pop();
                }
            }
            s
        });
        check_locked_by(backend, &locked_by)?;
        if self.compat && locked_by.len() > MAX_LOCKED_BY_LEN - OWNER_SUFFIX_LEN {
            return Err(Error::Setup {
                backend,
                message: format!(
                    "locked_by must be at most {} bytes in the ShedLock-compatible mode, which \
                     appends \" #\" and the acquisition's 16 hex digits to it (got {} bytes)",
                    MAX_LOCKED_BY_LEN - OWNER_SUFFIX_LEN,
                    locked_by.len()
                ),
            });
        }
        check_max_name_len(backend, self.max_name_len, max_name_len_limit)?;
        Ok(Settings {
            names,
            locked_by,
            max_name_len: self.max_name_len,
            time: self.time,
            clock: self.clock,
            timeout: self.timeout,
            compat: self.compat,
        })
    }
}

/// The length of what the ShedLock-compatible mode appends to `locked_by`: ` #` and 16 hex
/// digits.
pub const OWNER_SUFFIX_LEN: usize = shedlock::support::ACQUISITION_SUFFIX_LEN;

/// The `locked_by` an acquisition writes in the ShedLock-compatible mode: core's
/// [`acquisition_locked_by`](shedlock::support::acquisition_locked_by) of the configured value
/// and the acquisition id (the id's bits, as stored in the row).
pub fn owner(locked_by: &str, acquisition_id: i64) -> String {
    shedlock::support::acquisition_locked_by(
        locked_by,
        u64::from_ne_bytes(acquisition_id.to_ne_bytes()),
    )
}

struct Inner<D> {
    dialect: D,
    table: String,
    ddl: String,
    locked_by: String,
    max_name_len: usize,
    time: TimeSource,
    clock: SharedClock,
    timeout: Option<Duration>,
    compat: bool,
}

/// A SQL lock provider over dialect `D`. Cheap to clone.
pub struct SqlProvider<D> {
    inner: Arc<Inner<D>>,
}

impl<D> Clone for SqlProvider<D> {
    fn clone(&self) -> Self {
        Self { inner: Arc::clone(&self.inner) }
    }
}

impl<D: Dialect> Inner<D> {
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

    fn values<'a>(&'a self, name: &'a str) -> ArgValues<'a> {
        ArgValues {
            name,
            locked_by: &self.locked_by,
            now: D::time(self.time.client_now(&self.clock).map_or(0, unix_micros)),
            clock_micros: unix_micros(std::time::SystemTime::now()),
            ..Default::default()
        }
    }

    async fn execute(
        &self,
        operation: &'static str,
        op: Op,
        values: &ArgValues<'_>,
    ) -> Result<u64> {
        with_timeout(operation, self.timeout, async {
            self.dialect.execute(op, values).await.map_err(|e| self.err(Some(values.name), e))
        })
        .await
    }
}

impl<D: Dialect> SqlProvider<D> {
    /// A provider on `dialect` with the validated settings and the table's DDL.
    pub fn new(dialect: D, settings: Settings, ddl: String) -> Self {
        Self {
            inner: Arc::new(Inner {
                dialect,
                table: settings.names.table_display.clone(),
                ddl,
                locked_by: settings.locked_by,
                max_name_len: settings.max_name_len,
                time: settings.time,
                clock: settings.clock,
                timeout: settings.timeout,
                compat: settings.compat,
            }),
        }
    }

    /// Whether this provider runs in the ShedLock-compatible mode.
    pub fn is_compat(&self) -> bool {
        self.inner.compat
    }

    /// The dialect.
    pub fn dialect(&self) -> &D {
        &self.inner.dialect
    }

    /// The `CREATE TABLE IF NOT EXISTS` statement.
    pub fn ddl(&self) -> &str {
        &self.inner.ddl
    }

    /// Writes the provider's `Debug` fields; `extra` goes right after the table.
    pub fn fmt_debug(
        &self,
        f: &mut fmt::Formatter<'_>,
        type_name: &str,
        extra: Option<(&str, &dyn fmt::Debug)>,
    ) -> fmt::Result {
        let inner = &self.inner;
        let mut d = f.debug_struct(type_name);
        d.field("table", &inner.table);
        if let Some((name, value)) = extra {
            d.field(name, value);
        }
        d.field("locked_by", &inner.locked_by)
            .field("max_name_len", &inner.max_name_len)
            .field("time", &inner.time)
            .field("timeout", &inner.timeout)
            .field("shedlock_compatible", &inner.compat)
            .finish_non_exhaustive()
    }

    /// Creates the lock table if it does not exist (runs the DDL). Safe when every node of a
    /// fleet calls it at start-up at once: PostgreSQL's `CREATE TABLE IF NOT EXISTS` is not
    /// atomic, and a node that loses the race gets a unique violation on the catalog; it then
    /// runs the DDL once more, which finds the table.
    pub async fn create_table(&self) -> Result<()> {
        let inner = &self.inner;
        with_timeout("create_table", inner.timeout, async {
            let first = inner.dialect.run_ddl(&inner.ddl).await;
            let result = match first {
                Err(sqlx::Error::Database(db))
                    if db.is_unique_violation() || db.code().as_deref() == Some("42P07") =>
                {
                    tracing::debug!(
                        table = %inner.table,
                        "another node created the lock table concurrently; running the DDL again"
                    );
                    inner.dialect.run_ddl(&inner.ddl).await
                }
                other => other,
            };
            result.map_err(|e| match inner.err(None, e) {
                e @ Error::Unavailable { .. } => e,
                Error::Setup { message, .. } => Error::backend(D::BACKEND, message),
                e => e,
            })
        })
        .await
    }

    /// The stored row of `name`, if any.
    pub async fn record(&self, name: &str) -> Result<Option<LockRecord>> {
        let inner = &self.inner;
        let values = inner.values(name);
        with_timeout("record", inner.timeout, async {
            inner.dialect.record(&values).await.map_err(|e| inner.err(Some(name), e))
        })
        .await
    }

    /// Deletes the row of `name`; returns whether there was one.
    pub async fn delete_record(&self, name: &str) -> Result<bool> {
        let values = self.inner.values(name);
        self.inner.execute("delete_record", Op::Delete, &values).await.map(|n| n > 0)
    }

    /// Creates or overwrites the row of `name` with `lock_until` (and `locked_at`) set to the
    /// given time (in the dialect's units), a fresh owner nobody holds, and a larger token.
    pub async fn write_record(&self, name: &str, lock_until: SystemTime) -> Result<()> {
        let inner = &self.inner;
        check_lock_name(D::BACKEND, name, Some(inner.max_name_len), D::REJECT_NUL)?;
        let values = ArgValues {
            until: D::time(unix_micros(lock_until)),
            acquisition_id: acquisition_id() as i64,
            ..inner.values(name)
        };
        inner.execute("write_record", Op::Write, &values).await.map(|_| ())
    }

    /// [`LockProvider::try_lock`](shedlock::LockProvider::try_lock): one acquire statement.
    pub async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        let inner = &self.inner;
        let name = config.name();
        check_lock_name(D::BACKEND, name, Some(inner.max_name_len), D::REJECT_NUL)?;
        let id = acquisition_id() as i64;
        let owner = inner.compat.then(|| owner(&inner.locked_by, id));
        let values = ArgValues {
            acquisition_id: id,
            at_most: D::duration(config.lock_at_most_for()),
            locked_by: owner.as_deref().unwrap_or(&inner.locked_by),
            ..inner.values(name)
        };
        let acquisition = Acquisition::begin(config);
        let token = with_timeout(Operation::TryLock.label(), inner.timeout, async {
            inner.dialect.acquire(&values).await.map_err(|e| inner.err(Some(name), e))
        })
        .instrument(Operation::TryLock.span(D::BACKEND, name))
        .await?;
        match token {
            Some(token) => {
                tracing::debug!(lock = name, token, "{} lock acquired", D::BACKEND);
                let handle = SqlHandle {
                    inner: Arc::clone(inner),
                    acquisition_id: values.acquisition_id,
                    token,
                    owner: owner.clone(),
                };
                acquisition.grant(handle).await.map(Some)
            }
            None => {
                tracing::trace!(lock = name, "{} lock held elsewhere", D::BACKEND);
                Ok(None)
            }
        }
    }

    /// [`LockProvider::backend_name`](shedlock::LockProvider::backend_name): `postgres`, `mysql`
    /// or `sqlite`.
    pub fn backend_name(&self) -> &'static str {
        D::BACKEND
    }

    /// [`LockProvider::capabilities`](shedlock::LockProvider::capabilities).
    pub fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            // ShedLock's table has no column for a token.
            .with_fencing(!self.inner.compat)
            .with_owner_checked(true)
            .with_server_time(self.inner.time.is_server())
            .with_granularity(Duration::from_millis(1))
            .with_max_name_len(Some(self.inner.max_name_len))
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

/// One acquisition: its owner id and fencing token (and, in the ShedLock-compatible mode, the
/// `locked_by` that identifies it).
struct SqlHandle<D> {
    inner: Arc<Inner<D>>,
    acquisition_id: i64,
    token: i64,
    owner: Option<String>,
}

impl<D: Dialect> SqlHandle<D> {
    fn values<'a>(&'a self, name: &'a str) -> ArgValues<'a> {
        let mut v = ArgValues {
            acquisition_id: self.acquisition_id,
            fencing_token: self.token,
            ..self.inner.values(name)
        };
        if let Some(owner) = &self.owner {
            v.locked_by = owner;
        }
        v
    }
}

#[async_trait]
impl<D: Dialect> LockHandle for SqlHandle<D> {
    async fn unlock(&mut self, config: &LockConfig) -> Result<()> {
        let inner = &self.inner;
        let name = config.name();
        let values =
            ArgValues { at_least: D::duration(config.lock_at_least_for()), ..self.values(name) };
        let n = inner
            .execute(Operation::Unlock.label(), Op::Unlock, &values)
            .instrument(Operation::Unlock.span(D::BACKEND, name))
            .await?;
        if n == 0 {
            tracing::debug!(lock = name, "{} unlock by a stale holder changed nothing", D::BACKEND);
        }
        Ok(())
    }

    async fn extend(&mut self, config: &LockConfig) -> Result<()> {
        let inner = &self.inner;
        let name = config.name();
        let values =
            ArgValues { at_most: D::duration(config.lock_at_most_for()), ..self.values(name) };
        let n = inner
            .execute(Operation::Extend.label(), Op::Extend, &values)
            .instrument(Operation::Extend.span(D::BACKEND, name))
            .await?;
        if n == 1 { Ok(()) } else { Err(Error::LockLost { name: name.to_owned() }) }
    }

    fn fencing_token(&self) -> Option<u64> {
        if self.inner.compat { None } else { Some(token_u64(self.token)) }
    }
}

//! PostgreSQL lock provider for [`shedlock`], on the caller's [`sqlx`] pool.
//!
//! - **One statement, one round trip** per acquire, whether or not the row exists:
//!   `INSERT … ON CONFLICT (name) DO UPDATE … WHERE lock_until <= now RETURNING fencing_token`.
//!   No duplicate-key noise in the server log, no INSERT-then-UPDATE, no "row exists" cache.
//! - **Database time** by default: `lock_until` is computed in SQL from the server's `now()`,
//!   so client clock skew cannot break exclusion. [`TimeMode::Client`] uses the instance's own
//!   [`Clock`](shedlock::Clock) instead (ShedLock's default behaviour), for comparison.
//! - **Owner-checked** unlock and extend: they change the row only if this acquisition still
//!   owns it (its random `acquisition_id` and its fencing token both match).
//! - **Fencing tokens**: every acquisition gets a token greater than every earlier one for the
//!   name: `greatest(old + 1, server clock in µs)`, so even a row deleted and recreated gets a
//!   larger token unless the server clock was stepped back.
//! - Lock statements run on a connection of their own from the pool, in autocommit, never inside
//!   a caller's transaction.
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
//! # Pool settings
//!
//! The provider never changes your pool. sqlx's default `test_before_acquire(true)` pings the
//! server on every checkout, one extra round trip per lock operation; for a pool used for locks,
//! [`recommended_pool_options`] turns it off (a broken connection then surfaces as a
//! retryable [`Error::Unavailable`](shedlock::Error::Unavailable) once, and the pool replaces
//! it). Set an `acquire_timeout` so an unreachable server fails fast.

use std::{fmt, sync::Arc, time::Duration, time::SystemTime};

use async_trait::async_trait;
use shedlock::{Capabilities, Error, Lock, LockConfig, LockHandle, LockProvider, Result};
use shedlock_sql_common::{
    Arg, ArgValues, DbErrorKind, ErrorContext, Placeholder, QuotedNames, Stmt, StmtBuilder,
    TableName, Value, acquisition_id, check_lock_name, check_locked_by, check_max_name_len,
    default_locked_by, duration_micros, map_sqlx_error, unix_micros, with_timeout,
};
use sqlx::{
    AssertSqlSafe, Row,
    error::DatabaseError,
    postgres::{PgArguments, PgPool, PgPoolOptions, Postgres},
    query::Query,
};

pub use shedlock_sql_common::{Columns, DEFAULT_MAX_NAME_LEN, LockRecord, TimeMode};

const BACKEND: &str = "postgres";
/// The largest `max_name_len` accepted: names are a b-tree key, which PostgreSQL limits to
/// about 2.7 kB.
pub const MAX_NAME_LEN_LIMIT: usize = 2000;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const TRANSIENT_ATTEMPTS: usize = 3;

/// Pool options suited to a pool used for locks: no ping before each checkout (saves a round
/// trip per operation), 5 s acquire timeout, at most 4 connections. Start from these and adjust;
/// the provider works with any pool.
pub fn recommended_pool_options() -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(4)
        .test_before_acquire(false)
        .acquire_timeout(Duration::from_secs(5))
}

/// Builds a [`PostgresLockProvider`].
#[must_use]
pub struct PostgresLockProviderBuilder {
    pool: PgPool,
    table: String,
    columns: Columns,
    locked_by: Option<String>,
    max_name_len: usize,
    time: TimeMode,
    timeout: Option<Duration>,
}

impl PostgresLockProviderBuilder {
    /// The lock table, `table` or `schema.table` (default `shedlock`). Each part must be a plain
    /// identifier (`[A-Za-z_][A-Za-z0-9_]*`, at most 63 bytes); it is quoted in SQL, so it is
    /// case-sensitive: use lower case to match a table created with unquoted DDL.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The column names (validated like the table name).
    pub fn columns(mut self, columns: Columns) -> Self {
        self.columns = columns;
        self
    }

    /// What to store in `locked_by` (informational; default `hostname/pid`). At most 255 bytes.
    /// Ownership never depends on it: every acquisition has its own random id.
    pub fn locked_by(mut self, locked_by: impl Into<String>) -> Self {
        self.locked_by = Some(locked_by.into());
        self
    }

    /// The longest lock name in bytes (default 255, at most [`MAX_NAME_LEN_LIMIT`]); it sizes
    /// the name column in [`PostgresLockProvider::ddl`]. Longer names get
    /// [`Error::InvalidName`], never truncated.
    pub fn max_name_len(mut self, max: usize) -> Self {
        self.max_name_len = max;
        self
    }

    /// Whose clock judges expiry (default [`TimeMode::Database`]).
    pub fn time_mode(mut self, time: TimeMode) -> Self {
        self.time = time;
        self
    }

    /// The time limit of each lock operation, including waiting for a pooled connection
    /// (default 10 s; `None`: no limit). On expiry the call returns [`Error::Timeout`].
    pub fn operation_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Validates the configuration and builds the provider. Invalid identifiers, `locked_by`
    /// or `max_name_len` give [`Error::Setup`]. Does no I/O.
    pub fn build(self) -> Result<PostgresLockProvider> {
        let table = TableName::parse(BACKEND, &self.table)?;
        let names = QuotedNames::new(BACKEND, &table, &self.columns, '"')?;
        let locked_by = self.locked_by.unwrap_or_else(default_locked_by);
        check_locked_by(BACKEND, &locked_by)?;
        check_max_name_len(BACKEND, self.max_name_len, MAX_NAME_LEN_LIMIT)?;
        let stmts = Statements::new(&names, self.time.is_database());
        let ddl = ddl(&names, self.max_name_len);
        Ok(PostgresLockProvider {
            inner: Arc::new(Inner {
                pool: self.pool,
                table: names.table_display.clone(),
                ddl,
                locked_by,
                max_name_len: self.max_name_len,
                time: self.time,
                timeout: self.timeout,
                stmts,
            }),
        })
    }
}

/// A [`LockProvider`] on a PostgreSQL table. Cheap to clone.
#[derive(Clone)]
pub struct PostgresLockProvider {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    table: String,
    ddl: String,
    locked_by: String,
    max_name_len: usize,
    time: TimeMode,
    timeout: Option<Duration>,
    stmts: Statements,
}

impl fmt::Debug for PostgresLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresLockProvider")
            .field("table", &self.inner.table)
            .field("locked_by", &self.inner.locked_by)
            .field("max_name_len", &self.inner.max_name_len)
            .field("time", &self.inner.time)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

struct Statements {
    acquire: Stmt,
    unlock: Stmt,
    extend: Stmt,
    select: Stmt,
    delete: Stmt,
    write: Stmt,
}

/// `now` as the statement sees it: the server's `now()` (statement start in autocommit), or the
/// client's time bound as microseconds since the epoch.
fn now(b: &mut StmtBuilder, database: bool) {
    if database {
        b.sql("now()");
    } else {
        b.sql("(timestamptz 'epoch' + ").arg(Arg::Now).sql(" * interval '1 microsecond')");
    }
}

/// The server clock in microseconds since the epoch (fencing tokens always use it).
const SERVER_MICROS: &str = "(extract(epoch from now()) * 1000000)::bigint";

impl Statements {
    fn new(n: &QuotedNames, database: bool) -> Self {
        let (t, name, lu, la, lb, aid, ft) = (
            &n.table,
            &n.name,
            &n.lock_until,
            &n.locked_at,
            &n.locked_by,
            &n.acquisition_id,
            &n.fencing_token,
        );
        let mut b = StmtBuilder::new(Placeholder::Dollar);

        // Acquire: one statement whether or not the row exists.
        b.sql(&format!("INSERT INTO {t} AS cur ({name}, {lu}, {la}, {lb}, {aid}, {ft}) VALUES ("))
            .arg(Arg::Name)
            .sql(", ");
        now(&mut b, database);
        b.sql(" + ").arg(Arg::AtMost).sql(" * interval '1 microsecond', ");
        now(&mut b, database);
        b.sql(", ").arg(Arg::LockedBy).sql(", ").arg(Arg::AcquisitionId);
        b.sql(&format!(
            ", {SERVER_MICROS}) ON CONFLICT ({name}) DO UPDATE SET {lu} = EXCLUDED.{lu}, \
             {la} = EXCLUDED.{la}, {lb} = EXCLUDED.{lb}, {aid} = EXCLUDED.{aid}, \
             {ft} = greatest(cur.{ft} + 1, EXCLUDED.{ft}) \
             WHERE cur.{lu} <= EXCLUDED.{la} RETURNING {ft}"
        ));
        let acquire = b.build();

        // Unlock: keep it until max(now, locked_at + at_least), never later than it was.
        b.sql(&format!("UPDATE {t} SET {lu} = least({lu}, greatest("));
        now(&mut b, database);
        b.sql(&format!(", {la} + ")).arg(Arg::AtLeast).sql(" * interval '1 microsecond'))");
        b.sql(&format!(" WHERE {name} = ")).arg(Arg::Name);
        b.sql(&format!(" AND {aid} = ")).arg(Arg::AcquisitionId);
        b.sql(&format!(" AND {ft} = ")).arg(Arg::FencingToken);
        let unlock = b.build();

        // Extend: only while still held by this acquisition.
        b.sql(&format!("UPDATE {t} SET {lu} = "));
        now(&mut b, database);
        b.sql(" + ").arg(Arg::AtMost).sql(&format!(" * interval '1 microsecond', {la} = "));
        now(&mut b, database);
        b.sql(&format!(" WHERE {name} = ")).arg(Arg::Name);
        b.sql(&format!(" AND {aid} = ")).arg(Arg::AcquisitionId);
        b.sql(&format!(" AND {ft} = ")).arg(Arg::FencingToken);
        b.sql(&format!(" AND {lu} > "));
        now(&mut b, database);
        let extend = b.build();

        b.sql(&format!(
            "SELECT {name}, (extract(epoch from {lu}) * 1000000)::bigint, \
             (extract(epoch from {la}) * 1000000)::bigint, {lb}, {aid}, {ft} FROM {t} WHERE {name} = "
        ))
        .arg(Arg::Name);
        let select = b.build();

        b.sql(&format!("DELETE FROM {t} WHERE {name} = ")).arg(Arg::Name);
        let delete = b.build();

        b.sql(&format!("INSERT INTO {t} AS cur ({name}, {lu}, {la}, {lb}, {aid}, {ft}) VALUES ("))
            .arg(Arg::Name)
            .sql(", timestamptz 'epoch' + ")
            .arg(Arg::Until)
            .sql(" * interval '1 microsecond', timestamptz 'epoch' + ")
            .arg(Arg::Until)
            .sql(" * interval '1 microsecond', ")
            .arg(Arg::LockedBy)
            .sql(", ")
            .arg(Arg::AcquisitionId);
        b.sql(&format!(
            ", {SERVER_MICROS}) ON CONFLICT ({name}) DO UPDATE SET {lu} = EXCLUDED.{lu}, \
             {la} = EXCLUDED.{la}, {lb} = EXCLUDED.{lb}, {aid} = EXCLUDED.{aid}, \
             {ft} = greatest(cur.{ft} + 1, EXCLUDED.{ft})"
        ));
        let write = b.build();

        Self { acquire, unlock, extend, select, delete, write }
    }
}

fn ddl(n: &QuotedNames, max_name_len: usize) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {t} (\n    {name} VARCHAR({max_name_len}) NOT NULL PRIMARY KEY,\n    \
         {lu} TIMESTAMPTZ NOT NULL,\n    {la} TIMESTAMPTZ NOT NULL,\n    \
         {lb} VARCHAR(255) NOT NULL,\n    {aid} BIGINT NOT NULL,\n    {ft} BIGINT NOT NULL\n);",
        t = n.table,
        name = n.name,
        lu = n.lock_until,
        la = n.locked_at,
        lb = n.locked_by,
        aid = n.acquisition_id,
        ft = n.fencing_token,
    )
}

fn classify(e: &dyn DatabaseError) -> DbErrorKind {
    let code = e.code();
    match code.as_deref() {
        // undefined_table, invalid_schema_name, undefined_column
        Some("42P01" | "3F000" | "42703") => DbErrorKind::MissingTable,
        // string_data_right_truncation, character_not_in_repertoire, untranslatable_character
        Some("22001" | "22021" | "22P05") => DbErrorKind::NameRejected,
        // deadlock_detected, serialization_failure
        Some("40P01" | "40001") => DbErrorKind::Transient,
        // connection exceptions, operator intervention (shutdown), insufficient resources
        Some(c) if c.starts_with("08") || c.starts_with("57P") || c.starts_with("53") => {
            DbErrorKind::Unavailable
        }
        _ => DbErrorKind::Other,
    }
}

fn bind<'q>(stmt: &Stmt, values: &ArgValues<'q>) -> Query<'q, Postgres, PgArguments> {
    let mut q = sqlx::query(AssertSqlSafe(stmt.sql().clone()));
    for v in stmt.values(values) {
        q = match v {
            Value::Text(s) => q.bind(s),
            Value::Int(i) => q.bind(i),
        };
    }
    q
}

fn is_transient(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if classify(db.as_ref()) == DbErrorKind::Transient)
}

impl Inner {
    fn ctx<'a>(&'a self, name: Option<&'a str>) -> ErrorContext<'a> {
        ErrorContext { backend: BACKEND, table: &self.table, ddl: &self.ddl, name }
    }

    fn err(&self, name: Option<&str>, e: sqlx::Error) -> Error {
        map_sqlx_error(&self.ctx(name), e, classify)
    }

    fn values<'a>(&'a self, name: &'a str) -> ArgValues<'a> {
        ArgValues {
            name,
            locked_by: &self.locked_by,
            now: self.time.client_now_micros(),
            ..Default::default()
        }
    }

    /// Runs `stmt` returning an optional first column, retrying deadlocks and serialization
    /// failures (the statement was rolled back; each attempt is a fresh autocommit statement).
    async fn fetch_i64(
        &self,
        stmt: &Stmt,
        values: &ArgValues<'_>,
    ) -> Result<Option<i64>, sqlx::Error> {
        let mut attempt = 1;
        loop {
            match bind(stmt, values).fetch_optional(&self.pool).await {
                Ok(row) => return row.map(|r| r.try_get::<i64, _>(0)).transpose(),
                Err(e) if attempt < TRANSIENT_ATTEMPTS && is_transient(&e) => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    async fn execute(&self, stmt: &Stmt, values: &ArgValues<'_>) -> Result<u64, sqlx::Error> {
        let mut attempt = 1;
        loop {
            match bind(stmt, values).execute(&self.pool).await {
                Ok(r) => return Ok(r.rows_affected()),
                Err(e) if attempt < TRANSIENT_ATTEMPTS && is_transient(&e) => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

impl PostgresLockProvider {
    /// Starts a builder on the caller's pool. Lock statements take their own connection from it.
    pub fn builder(pool: PgPool) -> PostgresLockProviderBuilder {
        PostgresLockProviderBuilder {
            pool,
            table: "shedlock".into(),
            columns: Columns::default(),
            locked_by: None,
            max_name_len: DEFAULT_MAX_NAME_LEN,
            time: TimeMode::Database,
            timeout: Some(DEFAULT_TIMEOUT),
        }
    }

    /// The `CREATE TABLE IF NOT EXISTS` statement for the configured table and columns.
    pub fn ddl(&self) -> &str {
        &self.inner.ddl
    }

    /// Creates the lock table if it does not exist (runs [`ddl`](Self::ddl)).
    pub async fn create_table(&self) -> Result<()> {
        let inner = &self.inner;
        with_timeout("create_table", inner.timeout, async {
            sqlx::raw_sql(AssertSqlSafe(inner.ddl.clone()))
                .execute(&inner.pool)
                .await
                .map(|_| ())
                .map_err(|e| match inner.err(None, e) {
                    e @ Error::Unavailable { .. } => e,
                    Error::Setup { message, .. } => Error::backend(BACKEND, message),
                    e => e,
                })
        })
        .await
    }

    /// The stored row of `name`, if any (for operators and tests).
    pub async fn record(&self, name: &str) -> Result<Option<LockRecord>> {
        let inner = &self.inner;
        let values = inner.values(name);
        with_timeout("record", inner.timeout, async {
            let row = bind(&inner.stmts.select, &values)
                .fetch_optional(&inner.pool)
                .await
                .map_err(|e| inner.err(Some(name), e))?;
            row.map(|r| -> std::result::Result<LockRecord, sqlx::Error> {
                Ok(LockRecord::from_raw(
                    r.try_get(0)?,
                    r.try_get(1)?,
                    r.try_get(2)?,
                    r.try_get(3)?,
                    r.try_get(4)?,
                    r.try_get(5)?,
                ))
            })
            .transpose()
            .map_err(|e| inner.err(Some(name), e))
        })
        .await
    }

    /// Deletes the row of `name`, as an operator might; returns whether there was one. A held
    /// lock deleted this way is simply free; the next acquisition recreates the row with a larger
    /// fencing token.
    pub async fn delete_record(&self, name: &str) -> Result<bool> {
        let inner = &self.inner;
        let values = inner.values(name);
        with_timeout("delete_record", inner.timeout, async {
            inner
                .execute(&inner.stmts.delete, &values)
                .await
                .map(|n| n > 0)
                .map_err(|e| inner.err(Some(name), e))
        })
        .await
    }

    /// Creates or overwrites the row of `name` with `lock_until` (and `locked_at`) set to the
    /// given time, a fresh owner nobody holds, and a larger fencing token, as a process that
    /// crashed would have left it. For tests and manual repair; `lock_until` in the past frees
    /// the lock, in the future blocks it.
    pub async fn write_record(&self, name: &str, lock_until: SystemTime) -> Result<()> {
        let inner = &self.inner;
        check_lock_name(BACKEND, name, inner.max_name_len, true)?;
        let values = ArgValues {
            until: unix_micros(lock_until),
            acquisition_id: acquisition_id(),
            ..inner.values(name)
        };
        with_timeout("write_record", inner.timeout, async {
            inner
                .execute(&inner.stmts.write, &values)
                .await
                .map(|_| ())
                .map_err(|e| inner.err(Some(name), e))
        })
        .await
    }
}

#[async_trait]
impl LockProvider for PostgresLockProvider {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        let inner = &self.inner;
        let name = config.name();
        check_lock_name(BACKEND, name, inner.max_name_len, true)?;
        let values = ArgValues {
            acquisition_id: acquisition_id(),
            at_most: duration_micros(config.lock_at_most_for()),
            ..inner.values(name)
        };
        let token = with_timeout("try_lock", inner.timeout, async {
            inner
                .fetch_i64(&inner.stmts.acquire, &values)
                .await
                .map_err(|e| inner.err(Some(name), e))
        })
        .await?;
        match token {
            Some(token) => {
                tracing::debug!(lock = name, token, "postgres lock acquired");
                let handle = PgHandle {
                    inner: Arc::clone(inner),
                    acquisition_id: values.acquisition_id,
                    token,
                };
                Ok(Some(Lock::new(config.clone(), handle)))
            }
            None => {
                tracing::trace!(lock = name, "postgres lock held elsewhere");
                Ok(None)
            }
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(true)
            .with_owner_checked(true)
            .with_server_time(self.inner.time.is_database())
            .with_granularity(Duration::from_millis(1))
            .with_max_name_len(Some(self.inner.max_name_len))
    }
}

struct PgHandle {
    inner: Arc<Inner>,
    acquisition_id: i64,
    token: i64,
}

#[async_trait]
impl LockHandle for PgHandle {
    async fn unlock(&mut self, config: &LockConfig) -> Result<()> {
        let inner = &self.inner;
        let name = config.name();
        let values = ArgValues {
            acquisition_id: self.acquisition_id,
            fencing_token: self.token,
            at_least: duration_micros(config.lock_at_least_for()),
            ..inner.values(name)
        };
        let n = with_timeout("unlock", inner.timeout, async {
            inner.execute(&inner.stmts.unlock, &values).await.map_err(|e| inner.err(Some(name), e))
        })
        .await?;
        if n == 0 {
            tracing::debug!(lock = name, "postgres unlock by a stale holder changed nothing");
        }
        Ok(())
    }

    async fn extend(&mut self, config: &LockConfig) -> Result<()> {
        let inner = &self.inner;
        let name = config.name();
        let values = ArgValues {
            acquisition_id: self.acquisition_id,
            fencing_token: self.token,
            at_most: duration_micros(config.lock_at_most_for()),
            ..inner.values(name)
        };
        let n = with_timeout("extend", inner.timeout, async {
            inner.execute(&inner.stmts.extend, &values).await.map_err(|e| inner.err(Some(name), e))
        })
        .await?;
        if n == 1 { Ok(()) } else { Err(Error::LockLost { name: name.to_owned() }) }
    }

    fn fencing_token(&self) -> Option<u64> {
        Some(shedlock_sql_common::token_u64(self.token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> QuotedNames {
        let table = TableName::parse(BACKEND, "shedlock").unwrap();
        QuotedNames::new(BACKEND, &table, &Columns::default(), '"').unwrap()
    }

    #[test]
    fn acquire_is_one_upsert() {
        let s = Statements::new(&names(), true);
        let sql = s.acquire.sql();
        assert!(sql.starts_with("INSERT INTO \"shedlock\" AS cur"), "{sql}");
        assert!(sql.contains("ON CONFLICT (\"name\") DO UPDATE"), "{sql}");
        assert!(sql.ends_with("RETURNING \"fencing_token\""), "{sql}");
        assert_eq!(s.acquire.args(), &[Arg::Name, Arg::AtMost, Arg::LockedBy, Arg::AcquisitionId]);
        let c = Statements::new(&names(), false);
        assert!(c.acquire.args().contains(&Arg::Now));
    }

    #[test]
    fn ddl_uses_max_len() {
        let d = ddl(&names(), 100);
        assert!(d.contains("\"name\" VARCHAR(100) NOT NULL PRIMARY KEY"), "{d}");
        assert!(d.contains("TIMESTAMPTZ"));
    }
}

/// The README's examples, compiled (and, where they need no server, run) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

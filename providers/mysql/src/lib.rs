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
//!   [`TimeMode::Client`] uses the instance's own [`Clock`](shedlock::Clock) instead.
//! - Each statement runs with `sql_mode = 'STRICT_ALL_TABLES'` (MariaDB `SET STATEMENT … FOR`,
//!   MySQL `SET_VAR` hint), so a name too long for the column is an error, never truncated into
//!   a collision, whatever the session's mode.
//! - Names are `VARBINARY`: compared byte for byte (no case folding, no trailing-space padding,
//!   no charset conversion).
//! - **Owner-checked** unlock and extend, **fencing tokens** (`greatest(old + 1, server clock in
//!   µs)`), no "row exists" cache, statements on their own pooled connection in autocommit.
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
//! let provider = MySqlLockProvider::builder(pool).flavor(Flavor::MariaDb).build()?;
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
//! [`recommended_pool_options`] turns it off. Set an `acquire_timeout` so an unreachable server
//! fails fast.

use std::{fmt, sync::Arc, time::Duration, time::SystemTime};

use async_trait::async_trait;
use shedlock::{Capabilities, Error, Lock, LockConfig, LockHandle, LockProvider, Result};
use shedlock_sql_common::{
    Arg, ArgValues, DbErrorKind, ErrorContext, Placeholder, QuotedNames, Stmt, StmtBuilder,
    TableName, Value, acquisition_id, check_lock_name, check_locked_by, check_max_name_len,
    default_locked_by, duration_millis_ceil, map_sqlx_error, unix_micros, with_timeout,
};
use sqlx::{
    AssertSqlSafe, Row,
    error::DatabaseError,
    mysql::{MySql, MySqlArguments, MySqlDatabaseError, MySqlPool, MySqlPoolOptions},
    query::Query,
};
use tokio::sync::OnceCell;

pub use shedlock_sql_common::{Columns, DEFAULT_MAX_NAME_LEN, LockRecord, TimeMode};

const BACKEND: &str = "mysql";
/// The largest `max_name_len` accepted: the name is an InnoDB primary key, limited to 3072
/// bytes.
pub const MAX_NAME_LEN_LIMIT: usize = 3072;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const TRANSIENT_ATTEMPTS: usize = 3;
const STRICT: &str = "STRICT_ALL_TABLES";

/// Which server the pool talks to; it decides how an acquire learns whether it won.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Flavor {
    /// Ask the server once (`SELECT VERSION()` on first use): MariaDB ≥ 10.5 is
    /// [`MariaDb`](Flavor::MariaDb), anything else [`MySql`](Flavor::MySql).
    #[default]
    Detect,
    /// MariaDB ≥ 10.5: `INSERT … ON DUPLICATE KEY UPDATE … RETURNING`, one round trip.
    MariaDb,
    /// MySQL (no `RETURNING`), or MariaDB < 10.5: the guarded upsert, then a primary-key
    /// `SELECT` on the same connection, two round trips. The SQL is the MariaDB statement without
    /// `RETURNING` (tested here against MariaDB; MySQL 8 itself is not available in this
    /// project's test environment). `VALUES()` in `ON DUPLICATE KEY UPDATE` is deprecated in
    /// MySQL ≥ 8.0.20 (a warning) but still supported.
    MySql,
}

/// Pool options suited to a pool used for locks: no ping before each checkout (saves a round
/// trip per operation), 5 s acquire timeout, at most 4 connections.
pub fn recommended_pool_options() -> MySqlPoolOptions {
    MySqlPoolOptions::new()
        .max_connections(4)
        .test_before_acquire(false)
        .acquire_timeout(Duration::from_secs(5))
}

/// Builds a [`MySqlLockProvider`].
#[must_use]
pub struct MySqlLockProviderBuilder {
    pool: MySqlPool,
    table: String,
    columns: Columns,
    locked_by: Option<String>,
    max_name_len: usize,
    time: TimeMode,
    timeout: Option<Duration>,
    flavor: Flavor,
}

impl MySqlLockProviderBuilder {
    /// The lock table, `table` or `database.table` (default `shedlock`). Each part must be a plain
    /// identifier (`[A-Za-z_][A-Za-z0-9_]*`, at most 63 bytes); it is quoted with backticks.
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
    /// the `VARBINARY` name column in [`MySqlLockProvider::ddl`]. Longer names get
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

    /// The server flavor (default [`Flavor::Detect`]).
    pub fn flavor(mut self, flavor: Flavor) -> Self {
        self.flavor = flavor;
        self
    }

    /// Validates the configuration and builds the provider. Invalid identifiers, `locked_by`
    /// or `max_name_len` give [`Error::Setup`]. Does no I/O.
    pub fn build(self) -> Result<MySqlLockProvider> {
        let table = TableName::parse(BACKEND, &self.table)?;
        let names = QuotedNames::new(BACKEND, &table, &self.columns, '`')?;
        let locked_by = self.locked_by.unwrap_or_else(default_locked_by);
        check_locked_by(BACKEND, &locked_by)?;
        check_max_name_len(BACKEND, self.max_name_len, MAX_NAME_LEN_LIMIT)?;
        let database = self.time.is_database();
        let flavor = OnceCell::new();
        if self.flavor != Flavor::Detect {
            let _ = flavor.set(Statements::new(&names, database, self.flavor));
        }
        Ok(MySqlLockProvider {
            inner: Arc::new(Inner {
                pool: self.pool,
                table: names.table_display.clone(),
                ddl: ddl(&names, self.max_name_len),
                names,
                locked_by,
                max_name_len: self.max_name_len,
                time: self.time,
                timeout: self.timeout,
                stmts: flavor,
            }),
        })
    }
}

/// A [`LockProvider`] on a MySQL or MariaDB table. Cheap to clone.
#[derive(Clone)]
pub struct MySqlLockProvider {
    inner: Arc<Inner>,
}

struct Inner {
    pool: MySqlPool,
    table: String,
    ddl: String,
    names: QuotedNames,
    locked_by: String,
    max_name_len: usize,
    time: TimeMode,
    timeout: Option<Duration>,
    stmts: OnceCell<Statements>,
}

impl fmt::Debug for MySqlLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlLockProvider")
            .field("table", &self.inner.table)
            .field("flavor", &self.inner.stmts.get().map(|s| s.flavor))
            .field("locked_by", &self.inner.locked_by)
            .field("max_name_len", &self.inner.max_name_len)
            .field("time", &self.inner.time)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

struct Statements {
    flavor: Flavor,
    acquire: Stmt,
    /// MySQL flavor: reads the owner id and token after the upsert.
    owner: Stmt,
    unlock: Stmt,
    extend: Stmt,
    select: Stmt,
    delete: Stmt,
    write: Stmt,
}

const EPOCH: &str = "CAST('1970-01-01 00:00:00' AS DATETIME(6))";
/// The server clock in microseconds since the epoch, UTC (fencing tokens always use it).
const SERVER_MICROS: &str =
    "TIMESTAMPDIFF(MICROSECOND, CAST('1970-01-01 00:00:00' AS DATETIME(6)), UTC_TIMESTAMP(6))";

fn now(b: &mut StmtBuilder, database: bool) {
    if database {
        b.sql("UTC_TIMESTAMP(3)");
    } else {
        b.sql("TIMESTAMPADD(MICROSECOND, ").arg(Arg::Now).sql(&format!(", {EPOCH})"));
    }
}

impl Statements {
    fn new(n: &QuotedNames, database: bool, flavor: Flavor) -> Self {
        let (t, name, lu, la, lb, aid, ft) = (
            &n.table,
            &n.name,
            &n.lock_until,
            &n.locked_at,
            &n.locked_by,
            &n.acquisition_id,
            &n.fencing_token,
        );
        let mariadb = flavor != Flavor::MySql;
        // Strict mode for this statement only, whatever the session's sql_mode.
        let (prefix, hint) = if mariadb {
            (format!("SET STATEMENT sql_mode = '{STRICT}' FOR "), String::new())
        } else {
            (String::new(), format!("/*+ SET_VAR(sql_mode = '{STRICT}') */ "))
        };
        let mut b = StmtBuilder::new(Placeholder::Question);

        b.sql(&format!(
            "{prefix}INSERT {hint}INTO {t} ({name}, {lu}, {la}, {lb}, {aid}, {ft}) VALUES ("
        ))
        .arg(Arg::Name)
        .sql(", ");
        now(&mut b, database);
        b.sql(" + INTERVAL ").arg(Arg::AtMost).sql(" MICROSECOND, ");
        now(&mut b, database);
        b.sql(", ").arg(Arg::LockedBy).sql(", ").arg(Arg::AcquisitionId);
        let free = format!("{lu} <= VALUES({la})");
        b.sql(&format!(
            ", {SERVER_MICROS}) ON DUPLICATE KEY UPDATE \
             {ft} = IF({free}, GREATEST({ft} + 1, VALUES({ft})), {ft}), \
             {lb} = IF({free}, VALUES({lb}), {lb}), \
             {aid} = IF({free}, VALUES({aid}), {aid}), \
             {la} = IF({free}, VALUES({la}), {la}), \
             {lu} = IF({free}, VALUES({lu}), {lu})"
        ));
        if mariadb {
            b.sql(&format!(" RETURNING {aid}, {ft}"));
        }
        let acquire = b.build();

        b.sql(&format!("SELECT {aid}, {ft} FROM {t} WHERE {name} = ")).arg(Arg::Name);
        let owner = b.build();

        // Unlock: keep it until max(now, locked_at + at_least), never later than it was. Only old
        // values are read, so the result does not depend on assignment order.
        b.sql(&format!("{prefix}UPDATE {hint}{t} SET {lu} = LEAST({lu}, GREATEST("));
        now(&mut b, database);
        b.sql(&format!(", {la} + INTERVAL ")).arg(Arg::AtLeast).sql(" MICROSECOND))");
        b.sql(&format!(" WHERE {name} = ")).arg(Arg::Name);
        b.sql(&format!(" AND {aid} = ")).arg(Arg::AcquisitionId);
        b.sql(&format!(" AND {ft} = ")).arg(Arg::FencingToken);
        let unlock = b.build();

        b.sql(&format!("{prefix}UPDATE {hint}{t} SET {lu} = "));
        now(&mut b, database);
        b.sql(" + INTERVAL ").arg(Arg::AtMost).sql(&format!(" MICROSECOND, {la} = "));
        now(&mut b, database);
        b.sql(&format!(" WHERE {name} = ")).arg(Arg::Name);
        b.sql(&format!(" AND {aid} = ")).arg(Arg::AcquisitionId);
        b.sql(&format!(" AND {ft} = ")).arg(Arg::FencingToken);
        b.sql(&format!(" AND {lu} > "));
        now(&mut b, database);
        let extend = b.build();

        b.sql(&format!(
            "SELECT {name}, TIMESTAMPDIFF(MICROSECOND, {EPOCH}, {lu}), \
             TIMESTAMPDIFF(MICROSECOND, {EPOCH}, {la}), {lb}, {aid}, {ft} FROM {t} WHERE {name} = "
        ))
        .arg(Arg::Name);
        let select = b.build();

        b.sql(&format!("DELETE FROM {t} WHERE {name} = ")).arg(Arg::Name);
        let delete = b.build();

        b.sql(&format!(
            "{prefix}INSERT {hint}INTO {t} ({name}, {lu}, {la}, {lb}, {aid}, {ft}) VALUES ("
        ))
        .arg(Arg::Name)
        .sql(", TIMESTAMPADD(MICROSECOND, ")
        .arg(Arg::Until)
        .sql(&format!(", {EPOCH}), TIMESTAMPADD(MICROSECOND, "))
        .arg(Arg::Until)
        .sql(&format!(", {EPOCH}), "))
        .arg(Arg::LockedBy)
        .sql(", ")
        .arg(Arg::AcquisitionId);
        b.sql(&format!(
            ", {SERVER_MICROS}) ON DUPLICATE KEY UPDATE \
             {ft} = GREATEST({ft} + 1, VALUES({ft})), {lb} = VALUES({lb}), \
             {aid} = VALUES({aid}), {la} = VALUES({la}), {lu} = VALUES({lu})"
        ));
        let write = b.build();

        Self { flavor, acquire, owner, unlock, extend, select, delete, write }
    }
}

fn ddl(n: &QuotedNames, max_name_len: usize) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {t} (\n    {name} VARBINARY({max_name_len}) NOT NULL PRIMARY KEY,\n    \
         {lu} DATETIME(3) NOT NULL,\n    {la} DATETIME(3) NOT NULL,\n    \
         {lb} VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL,\n    {aid} BIGINT NOT NULL,\n    \
         {ft} BIGINT NOT NULL\n) ENGINE=InnoDB",
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
    let Some(e) = e.try_downcast_ref::<MySqlDatabaseError>() else {
        return DbErrorKind::Other;
    };
    match e.number() {
        // ER_NO_SUCH_TABLE, ER_BAD_DB_ERROR, ER_BAD_FIELD_ERROR
        1146 | 1049 | 1054 => DbErrorKind::MissingTable,
        // ER_DATA_TOO_LONG, ER_TRUNCATED_WRONG_VALUE_FOR_FIELD
        1406 | 1366 => DbErrorKind::NameRejected,
        // ER_LOCK_DEADLOCK
        1213 => DbErrorKind::Transient,
        // ER_CON_COUNT_ERROR, ER_SERVER_SHUTDOWN, ER_CONNECTION_KILLED, ER_LOCK_WAIT_TIMEOUT,
        // ER_TOO_MANY_USER_CONNECTIONS
        1040 | 1053 | 1927 | 1205 | 1203 => DbErrorKind::Unavailable,
        _ => DbErrorKind::Other,
    }
}

fn bind<'q>(stmt: &Stmt, values: &ArgValues<'q>) -> Query<'q, MySql, MySqlArguments> {
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

/// Parses `SELECT VERSION()`: MariaDB ≥ 10.5 supports `INSERT … RETURNING`.
fn flavor_of(version: &str) -> Flavor {
    if !version.to_ascii_lowercase().contains("mariadb") {
        return Flavor::MySql;
    }
    let mut parts = version.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty());
    let major: u32 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    if (major, minor) >= (10, 5) { Flavor::MariaDb } else { Flavor::MySql }
}

/// Milliseconds-aligned microseconds: `DATETIME(3)` keeps milliseconds, so client-side times are
/// floored to them before they reach the server (durations are rounded up instead).
fn floor_ms_micros(micros: i64) -> i64 {
    micros.div_euclid(1000) * 1000
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
            now: floor_ms_micros(self.time.client_now_micros()),
            ..Default::default()
        }
    }

    async fn stmts(&self) -> Result<&Statements> {
        self.stmts
            .get_or_try_init(|| async {
                let version: String = sqlx::query_scalar("SELECT VERSION()")
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|e| self.err(None, e))?;
                let flavor = flavor_of(&version);
                tracing::debug!(%version, ?flavor, "mysql flavor detected");
                Ok(Statements::new(&self.names, self.time.is_database(), flavor))
            })
            .await
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

    /// The acquire: returns the owner id and token the row holds afterwards.
    async fn acquire(
        &self,
        stmts: &Statements,
        values: &ArgValues<'_>,
    ) -> Result<Option<(i64, i64)>, sqlx::Error> {
        let mut attempt = 1;
        loop {
            let r = match stmts.flavor {
                Flavor::MySql => {
                    let mut conn = self.pool.acquire().await?;
                    match bind(&stmts.acquire, values).execute(&mut *conn).await {
                        Ok(_) => bind(&stmts.owner, values).fetch_optional(&mut *conn).await,
                        Err(e) => Err(e),
                    }
                }
                _ => bind(&stmts.acquire, values).fetch_optional(&self.pool).await,
            };
            match r {
                Ok(row) => {
                    return row
                        .map(|r| Ok((r.try_get::<i64, _>(0)?, r.try_get::<i64, _>(1)?)))
                        .transpose();
                }
                Err(e) if attempt < TRANSIENT_ATTEMPTS && is_transient(&e) => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

impl MySqlLockProvider {
    /// Starts a builder on the caller's pool. Lock statements take their own connection from it.
    pub fn builder(pool: MySqlPool) -> MySqlLockProviderBuilder {
        MySqlLockProviderBuilder {
            pool,
            table: "shedlock".into(),
            columns: Columns::default(),
            locked_by: None,
            max_name_len: DEFAULT_MAX_NAME_LEN,
            time: TimeMode::Database,
            timeout: Some(DEFAULT_TIMEOUT),
            flavor: Flavor::Detect,
        }
    }

    /// The `CREATE TABLE IF NOT EXISTS` statement for the configured table and columns.
    pub fn ddl(&self) -> &str {
        &self.inner.ddl
    }

    /// The flavor in use: the configured one, or the detected one once the provider has talked
    /// to the server (`None` before that).
    pub fn flavor(&self) -> Option<Flavor> {
        self.inner.stmts.get().map(|s| s.flavor)
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
            let stmts = inner.stmts().await?;
            let row = bind(&stmts.select, &values)
                .fetch_optional(&inner.pool)
                .await
                .map_err(|e| inner.err(Some(name), e))?;
            row.map(|r| -> std::result::Result<LockRecord, sqlx::Error> {
                let raw: Vec<u8> = r.try_get(0)?;
                let name = String::from_utf8(raw).map_err(|e| sqlx::Error::Decode(e.into()))?;
                Ok(LockRecord::from_raw(
                    name,
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

    /// Deletes the row of `name`, as an operator might; returns whether there was one. The next
    /// acquisition recreates the row with a larger fencing token.
    pub async fn delete_record(&self, name: &str) -> Result<bool> {
        let inner = &self.inner;
        let values = inner.values(name);
        with_timeout("delete_record", inner.timeout, async {
            let stmts = inner.stmts().await?;
            inner
                .execute(&stmts.delete, &values)
                .await
                .map(|n| n > 0)
                .map_err(|e| inner.err(Some(name), e))
        })
        .await
    }

    /// Creates or overwrites the row of `name` with `lock_until` (and `locked_at`) set to the
    /// given time (floored to the millisecond), a fresh owner nobody holds, and a larger fencing
    /// token, as a process that crashed would have left it. For tests and manual repair.
    pub async fn write_record(&self, name: &str, lock_until: SystemTime) -> Result<()> {
        let inner = &self.inner;
        check_lock_name(BACKEND, name, inner.max_name_len, false)?;
        let values = ArgValues {
            until: floor_ms_micros(unix_micros(lock_until)),
            acquisition_id: acquisition_id(),
            ..inner.values(name)
        };
        with_timeout("write_record", inner.timeout, async {
            let stmts = inner.stmts().await?;
            inner
                .execute(&stmts.write, &values)
                .await
                .map(|_| ())
                .map_err(|e| inner.err(Some(name), e))
        })
        .await
    }
}

#[async_trait]
impl LockProvider for MySqlLockProvider {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        let inner = &self.inner;
        let name = config.name();
        // VARBINARY stores any bytes, NUL included: only the length is checked.
        check_lock_name(BACKEND, name, inner.max_name_len, false)?;
        let values = ArgValues {
            acquisition_id: acquisition_id(),
            at_most: duration_millis_ceil(config.lock_at_most_for()).saturating_mul(1000),
            ..inner.values(name)
        };
        let row = with_timeout("try_lock", inner.timeout, async {
            let stmts = inner.stmts().await?;
            inner.acquire(stmts, &values).await.map_err(|e| inner.err(Some(name), e))
        })
        .await?;
        match row {
            Some((owner, token)) if owner == values.acquisition_id => {
                tracing::debug!(lock = name, token, "mysql lock acquired");
                let handle = MySqlHandle {
                    inner: Arc::clone(inner),
                    acquisition_id: values.acquisition_id,
                    token,
                };
                Ok(Some(Lock::new(config.clone(), handle)))
            }
            _ => {
                tracing::trace!(lock = name, "mysql lock held elsewhere");
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

struct MySqlHandle {
    inner: Arc<Inner>,
    acquisition_id: i64,
    token: i64,
}

#[async_trait]
impl LockHandle for MySqlHandle {
    async fn unlock(&mut self, config: &LockConfig) -> Result<()> {
        let inner = &self.inner;
        let name = config.name();
        let values = ArgValues {
            acquisition_id: self.acquisition_id,
            fencing_token: self.token,
            at_least: duration_millis_ceil(config.lock_at_least_for()).saturating_mul(1000),
            ..inner.values(name)
        };
        let n = with_timeout("unlock", inner.timeout, async {
            let stmts = inner.stmts().await?;
            inner.execute(&stmts.unlock, &values).await.map_err(|e| inner.err(Some(name), e))
        })
        .await?;
        if n == 0 {
            tracing::debug!(lock = name, "mysql unlock by a stale holder changed nothing");
        }
        Ok(())
    }

    async fn extend(&mut self, config: &LockConfig) -> Result<()> {
        let inner = &self.inner;
        let name = config.name();
        let values = ArgValues {
            acquisition_id: self.acquisition_id,
            fencing_token: self.token,
            at_most: duration_millis_ceil(config.lock_at_most_for()).saturating_mul(1000),
            ..inner.values(name)
        };
        // sqlx sets CLIENT_FOUND_ROWS: rows-affected counts matched rows, 1 iff still ours.
        let n = with_timeout("extend", inner.timeout, async {
            let stmts = inner.stmts().await?;
            inner.execute(&stmts.extend, &values).await.map_err(|e| inner.err(Some(name), e))
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
        QuotedNames::new(BACKEND, &table, &Columns::default(), '`').unwrap()
    }

    #[test]
    fn versions() {
        assert_eq!(flavor_of("10.11.19-MariaDB-0+deb12u1"), Flavor::MariaDb);
        assert_eq!(flavor_of("10.5.0-MariaDB"), Flavor::MariaDb);
        assert_eq!(flavor_of("10.4.30-MariaDB"), Flavor::MySql);
        assert_eq!(flavor_of("11.4.2-MariaDB-log"), Flavor::MariaDb);
        assert_eq!(flavor_of("8.0.36"), Flavor::MySql);
        assert_eq!(flavor_of("8.4.0-commercial"), Flavor::MySql);
    }

    #[test]
    fn lock_until_is_assigned_last_and_returned() {
        let s = Statements::new(&names(), true, Flavor::MariaDb);
        let sql = s.acquire.sql();
        assert!(
            sql.starts_with("SET STATEMENT sql_mode = 'STRICT_ALL_TABLES' FOR INSERT INTO"),
            "{sql}"
        );
        let (_, update) = sql.split_once("ON DUPLICATE KEY UPDATE").unwrap();
        let update = update.split(" RETURNING").next().unwrap();
        let last = update.rfind(" = IF(").unwrap();
        assert!(update[..last].ends_with("`lock_until`"), "{update}");
        assert!(sql.ends_with("RETURNING `acquisition_id`, `fencing_token`"), "{sql}");
        let m = Statements::new(&names(), true, Flavor::MySql);
        assert!(!m.acquire.sql().contains("RETURNING"));
        assert!(
            m.acquire
                .sql()
                .starts_with("INSERT /*+ SET_VAR(sql_mode = 'STRICT_ALL_TABLES') */ INTO")
        );
    }

    #[test]
    fn ms_floor() {
        assert_eq!(floor_ms_micros(1_234_567), 1_234_000);
        assert_eq!(floor_ms_micros(-1), -1000);
    }
}

/// The README's examples, compiled (and, where they need no server, run) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

//! SQLite lock provider for [`shedlock`], on the caller's [`sqlx`] pool: the embedded choice,
//! for processes on one host sharing a database file.
//!
//! - **One statement** per acquire, whether or not the row exists:
//!   `INSERT … ON CONFLICT (name) DO UPDATE … WHERE lock_until <= now RETURNING fencing_token`
//!   (SQLite ≥ 3.35; the bundled SQLite is used by default).
//! - **Database time** by default: `lock_until` is computed in SQL from SQLite's `'now'`, the
//!   host's clock, which every process using the file shares; the instance's injected
//!   [`Clock`](shedlock::Clock) is not consulted. [`TimeSource::Client`] uses that clock instead.
//!   Times are stored as INTEGER milliseconds since the Unix epoch (UTC): no time zones.
//! - **Owner-checked** unlock and extend (random per-acquisition id plus fencing token),
//!   **fencing tokens** (`max(old + 1, clock in µs)`), no "row exists" cache, statements on their
//!   own pooled connection in autocommit.
//!
//! The database must be a file (or a shared-cache memory database) that every instance opens:
//! each connection to a plain `:memory:` database is a separate database.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_sqlite::SqliteLockProvider;
//!
//! # let dir = std::env::temp_dir().join(format!("shedlock-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! # let path = dir.join("locks.db");
//! let pool = shedlock_sqlite::recommended_pool_options()
//!     .connect_with(shedlock_sqlite::recommended_connect_options(&path))
//!     .await?;
//! let provider = SqliteLockProvider::builder(pool).build()?;
//! provider.create_table().await?;
//!
//! let cfg = LockConfig::new("nightly-report", Duration::from_secs(600), Duration::ZERO)?;
//! let lock = provider.try_lock(&cfg).await?.expect("free");
//! assert!(provider.try_lock(&cfg).await?.is_none()); // held
//! lock.unlock().await?;
//! assert!(provider.try_lock(&cfg).await?.is_some()); // free again
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(()) }
//! ```
//!
//! # Durability and pool settings
//!
//! The provider never changes your pool or pragmas. [`recommended_connect_options`] creates the
//! file if missing and selects WAL with `synchronous = NORMAL` (a commit survives a process
//! crash; the last commits may be lost on power loss, when every process on the host stops
//! anyway) and a 5 s busy timeout; [`recommended_pool_options`] turns off the ping before each
//! checkout.

#[cfg(not(any(feature = "bundled", feature = "unbundled")))]
compile_error!("shedlock-sqlite needs the `bundled` (default) or the `unbundled` feature");

use std::{fmt, path::Path, time::Duration};

use shedlock::Result;
use shedlock::support::duration_millis_ceil;
use shedlock_sql::{
    Arg, ArgValues, DbErrorKind, Inspected, Op, Placeholder, QuotedNames, Settings, Stmt,
    StmtBuilder, bind, bind_values, inspected_from_row, record_from_row,
};
use sqlx::{
    AssertSqlSafe, Row,
    error::DatabaseError,
    sqlite::{
        Sqlite, SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
        SqliteSynchronous,
    },
};

pub use shedlock::TimeSource;
/// The builder setters every provider shares (`operation_timeout`, `locked_by`, `clock`).
pub use shedlock_sql::{ClockBuilder, ProviderBuilder};
pub use shedlock_sql::{
    Columns, DEFAULT_MAX_NAME_LEN, Dialect, LockRecord, SqlLockProvider, SqlLockProviderBuilder,
};

const BACKEND: &str = "sqlite";
/// The largest `max_name_len` accepted.
pub const MAX_NAME_LEN_LIMIT: usize = 65_535;

/// Connect options for a lock database at `path`: create if missing, WAL journal,
/// `synchronous = NORMAL`, 5 s busy timeout.
pub fn recommended_connect_options(path: impl AsRef<Path>) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(5))
}

/// Pool options suited to a pool used for locks: no ping before each checkout, 5 s acquire
/// timeout, at most 4 connections.
pub fn recommended_pool_options() -> SqlitePoolOptions {
    SqlitePoolOptions::new()
        .max_connections(4)
        .test_before_acquire(false)
        .acquire_timeout(Duration::from_secs(5))
}

/// A [`LockProvider`](shedlock::LockProvider) on a SQLite table: the generic
/// [`SqlLockProvider`] over [`SqliteDialect`]. Cheap to clone.
pub type SqliteLockProvider = SqlLockProvider<SqliteDialect>;

/// Builds a [`SqliteLockProvider`]: [`SqliteLockProvider::builder`] on your pool. SQLite text has
/// no declared length, so [`max_name_len`](SqlLockProviderBuilder::max_name_len) is enforced by
/// the provider; the operation timeout includes waiting for SQLite's write lock.
pub type SqliteLockProviderBuilder = SqlLockProviderBuilder<SqliteDialect>;

struct Statements {
    acquire: Stmt,
    /// The batch's upsert in three parts: before the rows, one row (its placeholders and
    /// arguments, repeated per name), after the rows.
    batch_head: String,
    batch_row: Stmt,
    batch_tail: String,
    unlock: Stmt,
    extend: Stmt,
    select: Stmt,
    list: Stmt,
    delete: Stmt,
    write: Stmt,
    force_release: Stmt,
}

/// SQLite's clock in whole milliseconds since the epoch, exactly (`'now'` is fixed for the whole
/// statement, and SQLite keeps it in milliseconds).
const SERVER_MILLIS: &str = "(CAST(strftime('%s', 'now') AS INTEGER) * 1000 + CAST(substr(strftime('%f', 'now'), 4, 3) AS INTEGER))";

fn now(b: &mut StmtBuilder, database: bool) {
    if database {
        b.sql(SERVER_MILLIS);
    } else {
        b.arg(Arg::Now);
    }
}

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
        let mut b = StmtBuilder::new(Placeholder::Question);

        b.sql(&format!("INSERT INTO {t} AS cur ({name}, {lu}, {la}, {lb}, {aid}, {ft}) VALUES ("))
            .arg(Arg::Name)
            .sql(", ");
        now(&mut b, database);
        b.sql(" + ").arg(Arg::AtMost).sql(", ");
        now(&mut b, database);
        b.sql(", ").arg(Arg::LockedBy).sql(", ").arg(Arg::AcquisitionId);
        // The token seed: the clock in µs. SQLite's own clock has milliseconds only, so a row
        // deleted and taken again within its millisecond would repeat a token; the process
        // clock (the same host clock, finer) breaks the tie.
        b.sql(&format!(", max({SERVER_MILLIS} * 1000, ")).arg(Arg::ClockMicros);
        b.sql(&format!(
            ")) ON CONFLICT ({name}) DO UPDATE SET {lu} = excluded.{lu}, \
             {la} = excluded.{la}, {lb} = excluded.{lb}, {aid} = excluded.{aid}, \
             {ft} = max(cur.{ft} + 1, excluded.{ft}) \
             WHERE cur.{lu} <= excluded.{la} RETURNING {ft}"
        ));
        let acquire = b.build();

        // The batch: the same upsert with one row per name, returning each row won.
        let batch_head =
            format!("INSERT INTO {t} AS cur ({name}, {lu}, {la}, {lb}, {aid}, {ft}) VALUES ");
        b.sql("(").arg(Arg::Name).sql(", ");
        now(&mut b, database);
        b.sql(" + ").arg(Arg::AtMost).sql(", ");
        now(&mut b, database);
        b.sql(", ").arg(Arg::LockedBy).sql(", ").arg(Arg::AcquisitionId);
        b.sql(&format!(", max({SERVER_MILLIS} * 1000, ")).arg(Arg::ClockMicros).sql("))");
        let batch_row = b.build();
        let batch_tail = format!(
            " ON CONFLICT ({name}) DO UPDATE SET {lu} = excluded.{lu}, \
             {la} = excluded.{la}, {lb} = excluded.{lb}, {aid} = excluded.{aid}, \
             {ft} = max(cur.{ft} + 1, excluded.{ft}) \
             WHERE cur.{lu} <= excluded.{la} RETURNING {name}, {ft}"
        );

        b.sql(&format!("UPDATE {t} SET {lu} = min({lu}, max("));
        now(&mut b, database);
        b.sql(&format!(", {la} + ")).arg(Arg::AtLeast).sql("))");
        b.owner_check(n);
        let unlock = b.build();

        b.sql(&format!("UPDATE {t} SET {lu} = "));
        now(&mut b, database);
        b.sql(" + ").arg(Arg::AtMost).sql(&format!(", {la} = "));
        now(&mut b, database);
        b.owner_check(n);
        b.sql(&format!(" AND {lu} > "));
        now(&mut b, database);
        let extend = b.build();

        // The record's columns, then SQLite's clock that judges it for inspection.
        let columns_read =
            format!("{name}, {lu} * 1000, {la} * 1000, {lb}, {aid}, {ft}, {SERVER_MILLIS} * 1000");
        b.sql(&format!("SELECT {columns_read} FROM {t} WHERE {name} = ")).arg(Arg::Name);
        let select = b.build();

        // A page of a listing: the prefix compared as a value, never a pattern.
        b.sql(&format!("SELECT {columns_read} FROM {t}"))
            .page(n, &format!(" WHERE substr({name}, 1, length("));
        let list = b.build();

        b.sql(&format!("DELETE FROM {t} WHERE {name} = ")).arg(Arg::Name);
        let delete = b.build();

        b.sql(&format!("DELETE FROM {t}")).seen_check(n, false, "");
        let force_release = b.build();

        b.sql(&format!("INSERT INTO {t} AS cur ({name}, {lu}, {la}, {lb}, {aid}, {ft}) VALUES ("))
            .arg(Arg::Name)
            .sql(", ")
            .arg(Arg::Until)
            .sql(", ")
            .arg(Arg::Until)
            .sql(", ")
            .arg(Arg::LockedBy)
            .sql(", ")
            .arg(Arg::AcquisitionId);
        b.sql(&format!(", max({SERVER_MILLIS} * 1000, ")).arg(Arg::ClockMicros);
        b.sql(&format!(
            ")) ON CONFLICT ({name}) DO UPDATE SET {lu} = excluded.{lu}, \
             {la} = excluded.{la}, {lb} = excluded.{lb}, {aid} = excluded.{aid}, \
             {ft} = max(cur.{ft} + 1, excluded.{ft})"
        ));
        let write = b.build();

        Self {
            acquire,
            batch_head,
            batch_row,
            batch_tail,
            unlock,
            extend,
            select,
            list,
            delete,
            write,
            force_release,
        }
    }
}

fn ddl(n: &QuotedNames) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {t} (\n    {name} TEXT NOT NULL PRIMARY KEY,\n    \
         {lu} INTEGER NOT NULL, -- milliseconds since the Unix epoch (UTC)\n    \
         {la} INTEGER NOT NULL, -- milliseconds since the Unix epoch (UTC)\n    \
         {lb} TEXT NOT NULL,\n    {aid} INTEGER NOT NULL,\n    {ft} INTEGER NOT NULL\n) WITHOUT ROWID;",
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
    let msg = e.message();
    if msg.starts_with("no such table")
        || msg.starts_with("unknown database")
        || msg.starts_with("no such column")
        || msg.contains("has no column named")
    {
        return DbErrorKind::MissingTable;
    }
    // Primary result code: the low byte of the extended code.
    let code = e.code().and_then(|c| c.parse::<i32>().ok()).map(|c| c & 0xff);
    match code {
        // SQLITE_BUSY, SQLITE_LOCKED: another connection holds the write lock past the busy
        // timeout.
        Some(5 | 6) => DbErrorKind::Unavailable,
        // SQLITE_IOERR, SQLITE_CANTOPEN, SQLITE_FULL, SQLITE_PROTOCOL
        Some(10 | 14 | 13 | 15) => DbErrorKind::Unavailable,
        // SQLITE_TOOBIG
        Some(18) => DbErrorKind::NameRejected,
        _ => DbErrorKind::Other,
    }
}

/// The SQLite primitives: the pool and the statements built for it. Times are integer
/// milliseconds. SQLite reports no deadlocks or serialization failures (a busy database waits
/// for the busy timeout), so nothing is retried.
/// The SQLite [`Dialect`]: the pool lock statements take their connections from, and the
/// statements built for the configured table. Used through [`SqliteLockProvider`].
pub struct SqliteDialect {
    pool: SqlitePool,
    stmts: Statements,
}

impl fmt::Debug for SqliteDialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteDialect").finish_non_exhaustive()
    }
}

impl Dialect for SqliteDialect {
    const BACKEND: &'static str = BACKEND;
    const PROVIDER: &'static str = "SqliteLockProvider";
    const REJECT_NUL: bool = false;
    const QUOTE: char = '"';
    const MAX_NAME_LEN_LIMIT: usize = MAX_NAME_LEN_LIMIT;
    type Pool = SqlitePool;
    type Options = ();

    fn new(pool: SqlitePool, (): (), settings: &Settings) -> Result<Self> {
        Ok(Self { pool, stmts: Statements::new(&settings.names, settings.database_time()) })
    }

    fn ddl(_options: &Self::Options, settings: &Settings) -> String {
        ddl(&settings.names)
    }

    fn classify(e: &dyn DatabaseError) -> DbErrorKind {
        classify(e)
    }

    fn duration(d: Duration) -> i64 {
        duration_millis_ceil(d)
    }

    /// Floored to the millisecond.
    fn time(micros: i64) -> i64 {
        micros.div_euclid(1000)
    }

    async fn acquire(&self, values: &ArgValues<'_>) -> Result<Option<i64>, sqlx::Error> {
        let row = bind::<Sqlite>(&self.stmts.acquire, values)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.with_path(e))?;
        row.map(|r| r.try_get::<i64, _>(0)).transpose()
    }

    const NATIVE_BATCH: bool = true;
    /// At most 7 parameters a row: 100 rows stay under the 999 parameters of older SQLites.
    const BATCH_LIMIT: usize = 100;

    /// One multi-row upsert, `RETURNING` the rows won.
    async fn acquire_many(&self, batch: &[ArgValues<'_>]) -> Result<Vec<Option<i64>>, sqlx::Error> {
        let s = &self.stmts;
        let rows = vec![&**s.batch_row.sql(); batch.len()].join(", ");
        let sql = format!("{}{rows}{}", s.batch_head, s.batch_tail);
        let mut q = sqlx::query(AssertSqlSafe(sql));
        for values in batch {
            q = bind_values(q, s.batch_row.values(values));
        }
        let rows = q.fetch_all(&self.pool).await.map_err(|e| self.with_path(e))?;
        let mut won = std::collections::HashMap::new();
        for r in &rows {
            won.insert(r.try_get::<String, _>(0)?, r.try_get::<i64, _>(1)?);
        }
        Ok(batch.iter().map(|v| won.get(v.name).copied()).collect())
    }

    async fn execute(&self, op: Op, values: &ArgValues<'_>) -> Result<u64, sqlx::Error> {
        let stmt = match op {
            Op::Unlock => &self.stmts.unlock,
            Op::Extend => &self.stmts.extend,
            Op::Delete => &self.stmts.delete,
            Op::Write => &self.stmts.write,
            Op::ForceRelease => &self.stmts.force_release,
        };
        bind::<Sqlite>(stmt, values)
            .execute(&self.pool)
            .await
            .map(|r| r.rows_affected())
            .map_err(|e| self.with_path(e))
    }

    async fn record(&self, values: &ArgValues<'_>) -> Result<Option<LockRecord>, sqlx::Error> {
        let row = bind::<Sqlite>(&self.stmts.select, values)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.with_path(e))?;
        row.map(|r| record_from_row(&r, r.try_get(0)?)).transpose()
    }

    async fn inspect(&self, values: &ArgValues<'_>) -> Result<Option<Inspected>, sqlx::Error> {
        let row = bind::<Sqlite>(&self.stmts.select, values)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.with_path(e))?;
        row.map(|r| inspected_from_row(&r, r.try_get(0)?)).transpose()
    }

    async fn list(&self, values: &ArgValues<'_>) -> Result<Vec<Inspected>, sqlx::Error> {
        let rows = bind::<Sqlite>(&self.stmts.list, values)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.with_path(e))?;
        rows.iter().map(|r| inspected_from_row(r, r.try_get(0)?)).collect()
    }

    async fn run_ddl(&self, ddl: &str) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(AssertSqlSafe(ddl.to_owned()))
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(|e| self.with_path(e))
    }
}

impl SqliteDialect {
    /// SQLite says "unable to open database file" without the file: a database that cannot
    /// be opened (SQLITE_CANTOPEN: a missing directory, no permission) names it.
    fn with_path(&self, e: sqlx::Error) -> sqlx::Error {
        match e {
            sqlx::Error::Database(db)
                if db.code().and_then(|c| c.parse::<i32>().ok()).map(|c| c & 0xff) == Some(14) =>
            {
                let file = self.pool.connect_options().get_filename().display().to_string();
                sqlx::Error::Io(std::io::Error::other(format!(
                    "cannot open the database file {file:?} (does its directory exist, and may \
                     this process write there?): {}",
                    db.message()
                )))
            }
            e => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shedlock_sql::TableName;

    fn names() -> QuotedNames {
        let table = TableName::parse(BACKEND, "shedlock").unwrap();
        QuotedNames::new(BACKEND, &table, &Columns::default(), '"').unwrap()
    }

    #[test]
    fn acquire_is_one_upsert() {
        let s = Statements::new(&names(), true);
        let sql = s.acquire.sql();
        assert!(sql.contains("ON CONFLICT (\"name\") DO UPDATE"), "{sql}");
        assert!(sql.ends_with("RETURNING \"fencing_token\""), "{sql}");
        assert_eq!(
            s.acquire.args(),
            &[Arg::Name, Arg::AtMost, Arg::LockedBy, Arg::AcquisitionId, Arg::ClockMicros]
        );
    }
}

/// The README's examples, compiled (and, where they need no server, run) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The workspace README's usage example, compiled and run as a doctest.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct WorkspaceReadmeDoctests;

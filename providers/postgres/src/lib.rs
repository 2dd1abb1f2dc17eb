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

use std::{fmt, time::Duration};

use shedlock::Result;
use shedlock::support::duration_micros;
use shedlock_sql::{
    Arg, ArgValues, AsynchronousCommit, Call, DbErrorKind, DedicatedConnection, Inspected,
    LockConn, Op, Placeholder, QuotedNames, Settings, ShedlockTable, Stmt, StmtBuilder, TableName,
    UnloggedTable, bind, inspected_from_row, record_from_row, retry_transient,
};
use sqlx::{
    AssertSqlSafe, Row,
    error::DatabaseError,
    postgres::{PgPool, PgPoolOptions, Postgres},
};

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
    dedicated: bool,
    asynchronous_commit: bool,
    unlogged: bool,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self { dedicated: true, asynchronous_commit: false, unlogged: false }
    }
}

/// What [`asynchronous_commit(true)`](SqlLockProviderBuilder::asynchronous_commit) runs on the
/// provider's own connection when it opens it.
const ASYNCHRONOUS_COMMIT: &str = "SET synchronous_commit = off";

struct Statements {
    acquire: Stmt,
    /// The acquire over zero rows, for `check`: the server checks its privileges, and it
    /// writes nothing.
    probe: Stmt,
    unlock: Stmt,
    extend: Stmt,
    select: Stmt,
    list: Stmt,
    delete: Stmt,
    write: Stmt,
    force_release: Stmt,
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

/// What a statement depends on besides the names: whose clock it reads, and the table layout
/// (native, or ShedLock's four columns in the compatible mode).
#[derive(Debug, Clone, Copy)]
struct Mode {
    database: bool,
    compat: bool,
}

impl Mode {
    /// `now`: `timestamptz` in the native mode, a UTC `timestamp` in the compatible one.
    fn now(self, b: &mut StmtBuilder) {
        if self.compat { now_utc(b, self.database) } else { now(b, self.database) }
    }

    /// The owner check of unlock and extend: the acquisition id and token, or (compatible mode)
    /// the acquisition's own `locked_by`.
    fn owner_check(self, b: &mut StmtBuilder, n: &QuotedNames) {
        if self.compat {
            b.locked_by_check(n);
        } else {
            b.owner_check(n);
        }
    }
}

impl Statements {
    fn new(n: &QuotedNames, mode: Mode) -> Self {
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

        // Acquire: one statement whether or not the row exists. The row is taken when it is
        // free, or when it already belongs to this very acquisition: a repeat of the statement
        // after a lost answer (see `LockConn`) then gets the lock it took, not "held". In the
        // compatible mode it is ShedLock's own upsert, the acquisition told by its `locked_by`,
        // and no token (`0`).
        let columns = if mode.compat {
            format!("{name}, {lu}, {la}, {lb}")
        } else {
            format!("{name}, {lu}, {la}, {lb}, {aid}, {ft}")
        };
        // The upsert of the acquire's one row (`VALUES (…)`), or with `probe` of none (`SELECT
        // … WHERE false`): the probe of `check`, which the server runs through the same
        // privilege checks (INSERT, UPDATE, and SELECT on the columns the conflict clause and
        // RETURNING read).
        let upsert = |b: &mut StmtBuilder, probe: bool| {
            let (open, close) = if probe { ("SELECT ", " WHERE false") } else { ("VALUES (", ")") };
            b.sql(&format!("INSERT INTO {t} AS cur ({columns}) {open}")).arg(Arg::Name).sql(", ");
            mode.now(b);
            b.sql(" + ").arg(Arg::AtMost).sql(" * interval '1 microsecond', ");
            mode.now(b);
            b.sql(", ").arg(Arg::LockedBy);
            if mode.compat {
                b.sql(&format!(
                    "{close} ON CONFLICT ({name}) DO UPDATE SET {lu} = EXCLUDED.{lu}, \
                     {la} = EXCLUDED.{la}, {lb} = EXCLUDED.{lb} \
                     WHERE cur.{lu} <= EXCLUDED.{la} OR cur.{lb} = EXCLUDED.{lb} \
                     RETURNING 0::bigint"
                ));
            } else {
                b.sql(", ").arg(Arg::AcquisitionId);
                b.sql(&format!(
                    ", {SERVER_MICROS}{close} ON CONFLICT ({name}) DO UPDATE SET \
                     {lu} = EXCLUDED.{lu}, {la} = EXCLUDED.{la}, {lb} = EXCLUDED.{lb}, \
                     {aid} = EXCLUDED.{aid}, {ft} = greatest(cur.{ft} + 1, EXCLUDED.{ft}) \
                     WHERE cur.{lu} <= EXCLUDED.{la} OR cur.{aid} = EXCLUDED.{aid} \
                     RETURNING {ft}"
                ));
            }
            b.build()
        };
        let acquire = upsert(&mut b, false);
        let probe = upsert(&mut b, true);

        // Unlock: keep it until max(now, locked_at + at_least), never later than it was.
        b.sql(&format!("UPDATE {t} SET {lu} = least({lu}, greatest("));
        mode.now(&mut b);
        b.sql(&format!(", {la} + ")).arg(Arg::AtLeast).sql(" * interval '1 microsecond'))");
        mode.owner_check(&mut b, n);
        let unlock = b.build();

        // Extend: only while still held by this acquisition.
        b.sql(&format!("UPDATE {t} SET {lu} = "));
        mode.now(&mut b);
        b.sql(" + ").arg(Arg::AtMost).sql(&format!(" * interval '1 microsecond', {la} = "));
        mode.now(&mut b);
        mode.owner_check(&mut b, n);
        b.sql(&format!(" AND {lu} > "));
        mode.now(&mut b);
        let extend = b.build();

        // `extract(epoch from ...)` reads a `timestamp` (compatible mode) as UTC.
        let owner =
            if mode.compat { "0::bigint, 0::bigint".to_owned() } else { format!("{aid}, {ft}") };
        // The record's columns, then the server clock that judges it for inspection.
        let la_micros = format!("(extract(epoch from {la}) * 1000000)::bigint");
        let columns_read = format!(
            "{name}, (extract(epoch from {lu}) * 1000000)::bigint, {la_micros}, {lb}, {owner}, \
             {SERVER_MICROS}"
        );
        b.sql(&format!("SELECT {columns_read} FROM {t} WHERE {name} = ")).arg(Arg::Name);
        let select = b.build();

        // A page of a listing: the prefix compared as a value, never a pattern.
        b.sql(&format!("SELECT {columns_read} FROM {t}"))
            .page(n, &format!(" WHERE left({name}, length("));
        let list = b.build();

        b.sql(&format!("DELETE FROM {t} WHERE {name} = ")).arg(Arg::Name);
        let delete = b.build();

        b.sql(&format!("DELETE FROM {t}")).seen_check(n, mode.compat, &la_micros);
        let force_release = b.build();

        let epoch = if mode.compat { "timestamp 'epoch'" } else { "timestamptz 'epoch'" };
        b.sql(&format!("INSERT INTO {t} AS cur ({columns}) VALUES ("))
            .arg(Arg::Name)
            .sql(&format!(", {epoch} + "))
            .arg(Arg::Until)
            .sql(&format!(" * interval '1 microsecond', {epoch} + "))
            .arg(Arg::Until)
            .sql(" * interval '1 microsecond', ")
            .arg(Arg::LockedBy);
        if mode.compat {
            b.sql(&format!(
                ") ON CONFLICT ({name}) DO UPDATE SET {lu} = EXCLUDED.{lu}, {la} = EXCLUDED.{la}, \
                 {lb} = EXCLUDED.{lb}"
            ));
        } else {
            b.sql(", ").arg(Arg::AcquisitionId);
            b.sql(&format!(
                ", {SERVER_MICROS}) ON CONFLICT ({name}) DO UPDATE SET {lu} = EXCLUDED.{lu}, \
                 {la} = EXCLUDED.{la}, {lb} = EXCLUDED.{lb}, {aid} = EXCLUDED.{aid}, \
                 {ft} = greatest(cur.{ft} + 1, EXCLUDED.{ft})"
            ));
        }
        let write = b.build();

        Self { acquire, probe, unlock, extend, select, list, delete, write, force_release }
    }
}

/// `now` in the ShedLock-compatible mode: a `TIMESTAMP` in UTC, ShedLock's
/// `timezone('utc', CURRENT_TIMESTAMP)` (the server's statement time), or the client's time.
fn now_utc(b: &mut StmtBuilder, database: bool) {
    if database {
        b.sql("timezone('utc', now())");
    } else {
        b.sql("(timestamp 'epoch' + ").arg(Arg::Now).sql(" * interval '1 microsecond')");
    }
}

/// ShedLock's documented PostgreSQL table (its `VARCHAR(64)` name column sized to
/// `max_name_len` instead); `table` is `TABLE` or `UNLOGGED TABLE`.
fn compat_ddl(n: &QuotedNames, max_name_len: usize, table: &str) -> String {
    format!(
        "CREATE {table} IF NOT EXISTS {t} (\n    {name} VARCHAR({max_name_len}) NOT NULL,\n    \
         {lu} TIMESTAMP NOT NULL,\n    {la} TIMESTAMP NOT NULL,\n    \
         {lb} VARCHAR(255) NOT NULL,\n    PRIMARY KEY ({name})\n);",
        t = n.table,
        name = n.name,
        lu = n.lock_until,
        la = n.locked_at,
        lb = n.locked_by,
    )
}

/// The native table; `table` is `TABLE` or `UNLOGGED TABLE`.
fn ddl(n: &QuotedNames, max_name_len: usize, table: &str) -> String {
    format!(
        "CREATE {table} IF NOT EXISTS {t} (\n    {name} VARCHAR({max_name_len}) NOT NULL PRIMARY KEY,\n    \
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
        // undefined_table, invalid_schema_name
        Some("42P01" | "3F000") => DbErrorKind::MissingTable,
        // undefined_column
        Some("42703") => DbErrorKind::MissingColumn,
        // not_null_violation: a column the statement does not write
        Some("23502") => DbErrorKind::MissingValue,
        // string_data_right_truncation, character_not_in_repertoire, untranslatable_character
        Some("22001" | "22021" | "22P05") => DbErrorKind::NameRejected,
        // deadlock_detected, serialization_failure
        Some("40P01" | "40001") => DbErrorKind::Transient,
        // insufficient_privilege: on the table, or USAGE / CREATE on its schema
        Some("42501") => DbErrorKind::PermissionDenied,
        // connection exceptions, operator intervention (shutdown), insufficient resources
        Some(c) if c.starts_with("08") || c.starts_with("57P") || c.starts_with("53") => {
            DbErrorKind::Unavailable
        }
        _ => DbErrorKind::Other,
    }
}

/// The PostgreSQL [`Dialect`]: where lock statements run, and the statements built for the
/// configured table. Used through [`PostgresLockProvider`].
pub struct PostgresDialect {
    conn: LockConn<Postgres>,
    asynchronous_commit: bool,
    stmts: Statements,
}

impl fmt::Debug for PostgresDialect {
    /// The connection mode only: the pool's options may hold credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresDialect")
            .field("dedicated_connection", &self.conn.is_dedicated())
            .field("asynchronous_commit", &self.asynchronous_commit)
            .finish_non_exhaustive()
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

impl Dialect for PostgresDialect {
    const BACKEND: &'static str = BACKEND;
    const PROVIDER: &'static str = "PostgresLockProvider";
    const REJECT_NUL: bool = true;
    /// `timestamp` keeps microseconds.
    const CLOCK_STEP: Duration = Duration::from_micros(1);
    const QUOTE: char = '"';
    const MAX_NAME_LEN_LIMIT: usize = MAX_NAME_LEN_LIMIT;
    type Pool = PgPool;
    type Options = PostgresOptions;

    fn new(pool: PgPool, options: PostgresOptions, settings: &Settings) -> Result<Self> {
        let mode = Mode { database: settings.database_time(), compat: settings.compat() };
        let stmts = Statements::new(&settings.names, mode);
        let mut conn = LockConn::new(pool, options.dedicated);
        if options.asynchronous_commit {
            conn = conn.session_setup(ASYNCHRONOUS_COMMIT);
        }
        Ok(Self { conn, asynchronous_commit: options.asynchronous_commit, stmts })
    }

    fn ddl(options: &PostgresOptions, settings: &Settings) -> String {
        let table = if options.unlogged { "UNLOGGED TABLE" } else { "TABLE" };
        if settings.compat() {
            compat_ddl(&settings.names, settings.max_name_len, table)
        } else {
            ddl(&settings.names, settings.max_name_len, table)
        }
    }

    fn classify(e: &dyn DatabaseError) -> DbErrorKind {
        classify(e)
    }

    fn duration(d: Duration) -> i64 {
        duration_micros(d)
    }

    fn time(micros: i64) -> i64 {
        micros
    }

    async fn acquire(&self, values: &ArgValues<'_>) -> Result<Option<i64>, sqlx::Error> {
        let row = retry_transient(classify, || {
            self.conn.fetch_optional(classify, &self.stmts.acquire, values)
        })
        .await?;
        row.map(|r| r.try_get::<i64, _>(0)).transpose()
    }

    async fn execute(&self, op: Op, values: &ArgValues<'_>) -> Result<u64, sqlx::Error> {
        let stmt = match op {
            Op::Unlock => &self.stmts.unlock,
            Op::Extend => &self.stmts.extend,
            Op::Delete => &self.stmts.delete,
            Op::Write => &self.stmts.write,
            Op::ForceRelease => &self.stmts.force_release,
        };
        let r = retry_transient(classify, || self.conn.execute(classify, stmt, values)).await?;
        Ok(r.rows_affected())
    }

    async fn record(&self, values: &ArgValues<'_>) -> Result<Option<LockRecord>, sqlx::Error> {
        let row = self.conn.fetch_optional(classify, &self.stmts.select, values).await?;
        row.map(|r| record_from_row(&r, r.try_get(0)?)).transpose()
    }

    async fn inspect(&self, values: &ArgValues<'_>) -> Result<Option<Inspected>, sqlx::Error> {
        let row = bind::<Postgres>(&self.stmts.select, values).fetch_optional(self.conn.pool());
        row.await?.map(|r| inspected_from_row(&r, r.try_get(0)?)).transpose()
    }

    async fn list(&self, values: &ArgValues<'_>) -> Result<Vec<Inspected>, sqlx::Error> {
        let rows = bind::<Postgres>(&self.stmts.list, values).fetch_all(self.conn.pool()).await?;
        rows.iter().map(|r| inspected_from_row(r, r.try_get(0)?)).collect()
    }

    /// `CREATE TABLE IF NOT EXISTS` is not atomic in PostgreSQL: nodes creating the table at
    /// once can fail on the catalog's unique indexes (42710 duplicate_object for the row type,
    /// 23505, 42P07) although the table then exists.
    fn is_ddl_race(e: &dyn DatabaseError) -> bool {
        matches!(e.code().as_deref(), Some("42710" | "23505" | "42P07"))
    }

    async fn run_ddl(&self, ddl: &str) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(AssertSqlSafe(ddl.to_owned()))
            .execute(&mut *self.conn.pooled().await?)
            .await
            .map(|_| ())
    }

    /// The acquire's upsert over zero rows (`INSERT … SELECT … WHERE false ON CONFLICT … DO
    /// UPDATE … RETURNING`): PostgreSQL checks its privileges when it starts the statement,
    /// whether or not a row comes, so it proves SELECT, INSERT and UPDATE on the table (and
    /// USAGE on its schema), the columns and the conflict target, and writes nothing.
    async fn probe(&self, values: &ArgValues<'_>) -> Result<(), sqlx::Error> {
        self.conn.execute(classify, &self.stmts.probe, values).await.map(drop)
    }

    /// `GRANT … ON <table> TO <role>`, with `GRANT USAGE ON SCHEMA` first for a table in a
    /// named schema; `create_table` needs CREATE on the schema (`public` for an unqualified
    /// table: the first schema of the search path, unless it is set otherwise).
    fn grant(call: Call, table: &TableName) -> String {
        let schema = table.schema().map(|s| format!("\"{s}\""));
        match (call, schema) {
            (Call::CreateTable, None) => "GRANT CREATE ON SCHEMA public TO <role>".to_owned(),
            (Call::CreateTable, Some(s)) => format!("GRANT USAGE, CREATE ON SCHEMA {s} TO <role>"),
            (call, schema) => {
                let usage = schema
                    .map(|s| format!("GRANT USAGE ON SCHEMA {s} TO <role>; "))
                    .unwrap_or_default();
                format!("{usage}GRANT {} ON {} TO <role>", call.privileges(), table.quoted('"'))
            }
        }
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
        let s = Statements::new(&names(), Mode { database: true, compat: false });
        let sql = s.acquire.sql();
        assert!(sql.starts_with("INSERT INTO \"shedlock\" AS cur"), "{sql}");
        assert!(sql.contains("ON CONFLICT (\"name\") DO UPDATE"), "{sql}");
        assert!(sql.ends_with("RETURNING \"fencing_token\""), "{sql}");
        assert!(
            sql.contains(
                "WHERE cur.\"lock_until\" <= EXCLUDED.\"locked_at\" \
                 OR cur.\"acquisition_id\" = EXCLUDED.\"acquisition_id\""
            ),
            "{sql}"
        );
        assert_eq!(s.acquire.args(), &[Arg::Name, Arg::AtMost, Arg::LockedBy, Arg::AcquisitionId]);
        // The probe of `check` is the same upsert over zero rows.
        let probe = s.probe.sql();
        let one_row =
            probe.replacen(" SELECT ", " VALUES (", 1).replacen(" WHERE false ON", ") ON", 1);
        assert_eq!(&one_row, &**sql);
        assert_eq!(s.probe.args(), s.acquire.args());
        let c = Statements::new(&names(), Mode { database: false, compat: false });
        assert!(c.acquire.args().contains(&Arg::Now));
    }

    #[test]
    fn unlogged_changes_only_the_create() {
        let d = ddl(&names(), 100, "UNLOGGED TABLE");
        assert!(d.starts_with("CREATE UNLOGGED TABLE IF NOT EXISTS \"shedlock\" ("), "{d}");
        assert_eq!(d.replace("UNLOGGED ", ""), ddl(&names(), 100, "TABLE"));
        let c = compat_ddl(&names(), 64, "UNLOGGED TABLE");
        assert!(c.starts_with("CREATE UNLOGGED TABLE IF NOT EXISTS"), "{c}");
    }

    #[test]
    fn ddl_uses_max_len() {
        let d = ddl(&names(), 100, "TABLE");
        assert!(d.contains("\"name\" VARCHAR(100) NOT NULL PRIMARY KEY"), "{d}");
        assert!(d.contains("TIMESTAMPTZ"));
    }
}

/// The README's examples, compiled (and, where they need no server, run) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

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
//!   [`TimeSource::Client`] uses the instance's own [`Clock`](shedlock::Clock) instead.
//! - Each statement runs with `sql_mode = 'STRICT_ALL_TABLES'` (MariaDB `SET STATEMENT … FOR`,
//!   MySQL `SET_VAR` hint), so a name too long for the column is an error, never truncated into
//!   a collision, whatever the session's mode.
//! - Names are `VARBINARY`: compared byte for byte (no case folding, no trailing-space padding,
//!   no charset conversion).
//! - **Owner-checked** unlock and extend, **fencing tokens** (`greatest(old + 1, server clock in
//!   µs)`), no "row exists" cache, statements in autocommit on a connection of the provider's own
//!   (see [Connections](#connections)).
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
//! let provider = MySqlLockProvider::builder(pool).option(Flavor::MariaDb).build()?;
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
//! connection when it goes back to the pool (always), and with `test_before_acquire(true)`
//! (sqlx's default) once more at checkout. So by default the provider takes **one connection of
//! its own** from your pool, detaches it (the pool may then open one more than its
//! `max_connections`) and runs lock statements on it: one round trip each on MariaDB, nothing
//! after. A statement that finds it busy (another lock call of this provider in flight) uses a
//! pooled connection instead of queueing. A failed connection is dropped and the next call opens
//! a fresh one; a connection the server closed while idle (`KILL`, restart, `wait_timeout`:
//! MariaDB says nothing, the client sees EOF) therefore fails one call with the retryable
//! [`Error::Unavailable`](shedlock::Error::Unavailable): the statement is not repeated blindly,
//! since it may have run. A call cancelled mid-statement drops the connection. The connection
//! follows the pool's `max_lifetime` and `idle_timeout` (10 minutes by default, well under the
//! server's `wait_timeout`) and goes when the pool is closed.
//! [`dedicated_connection(false)`](SqlLockProviderBuilder::dedicated_connection) runs every
//! statement on a pooled connection instead (one server connection fewer, two or three round
//! trips per operation).
//!
//! # Pool settings
//!
//! The provider never changes your pool. [`recommended_pool_options`] turns off
//! `test_before_acquire` (saving a round trip on the pooled path) and sets an `acquire_timeout`
//! so an unreachable server fails fast.

use std::{fmt, time::Duration};

use shedlock::Result;
use shedlock::support::duration_millis_ceil;
use shedlock_sql::{
    Arg, ArgValues, DbErrorKind, DedicatedConnection, DialectOption, Inspected, LockConn, Op,
    Placeholder, QuotedNames, Settings, ShedlockTable, Stmt, StmtBuilder, bind, inspected_from_row,
    record_from_row, retry_transient,
};
use sqlx::{
    AssertSqlSafe, Row,
    error::DatabaseError,
    mysql::{MySql, MySqlDatabaseError, MySqlPool, MySqlPoolOptions, MySqlRow},
};
use tokio::sync::OnceCell;

pub use shedlock::TimeSource;
/// The builder setters every provider shares (`operation_timeout`, `locked_by`, `clock`).
pub use shedlock_sql::{ClockBuilder, ProviderBuilder};
pub use shedlock_sql::{
    Columns, DEFAULT_MAX_NAME_LEN, Dialect, LockRecord, SqlLockProvider, SqlLockProviderBuilder,
};

const BACKEND: &str = "mysql";
/// The largest `max_name_len` accepted: the name is an InnoDB primary key, limited to 3072
/// bytes.
pub const MAX_NAME_LEN_LIMIT: usize = 3072;
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
    flavor: Flavor,
    dedicated: bool,
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

/// The name of a row: `VARBINARY`, which holds the name's UTF-8 bytes.
fn name_of(row: &MySqlRow) -> Result<String, sqlx::Error> {
    let raw: Vec<u8> = row.try_get(0)?;
    String::from_utf8(raw).map_err(|e| sqlx::Error::Decode(e.into()))
}

struct Statements {
    flavor: Flavor,
    acquire: Stmt,
    /// The acquire over zero rows, for `check`: the server checks its privileges, and it
    /// writes nothing.
    probe: Stmt,
    /// MySQL flavor: reads the owner id and token after the upsert.
    owner: Stmt,
    unlock: Stmt,
    extend: Stmt,
    select: Stmt,
    list: Stmt,
    delete: Stmt,
    write: Stmt,
    force_release: Stmt,
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

/// What a statement depends on besides the names and the flavor: whose clock it reads, and the
/// table layout (native, or ShedLock's four columns in the compatible mode).
#[derive(Debug, Clone, Copy)]
struct Mode {
    database: bool,
    compat: bool,
}

impl Mode {
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
    fn new(n: &QuotedNames, mode: Mode, flavor: Flavor) -> Self {
        let database = mode.database;
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
        // The native table's names are VARBINARY: bound as bytes, compared without a conversion.
        // ShedLock's table has a VARCHAR name compared by its collation, as ShedLock binds it:
        // text.
        b.binary_names(!mode.compat);

        let columns = if mode.compat {
            format!("{name}, {lu}, {la}, {lb}")
        } else {
            format!("{name}, {lu}, {la}, {lb}, {aid}, {ft}")
        };
        // The upsert of the acquire's one row (`VALUES (…)`), or with `probe` of none (`SELECT
        // … FROM DUAL WHERE 0`): the probe of `check`, which the server runs through the same
        // privilege checks (INSERT, UPDATE, and SELECT on the columns the update reads).
        let upsert = |b: &mut StmtBuilder, probe: bool| {
            let (open, close) =
                if probe { ("SELECT ", " FROM DUAL WHERE 0") } else { ("VALUES (", ")") };
            b.sql(&format!("{prefix}INSERT {hint}INTO {t} ({columns}) {open}"))
                .arg(Arg::Name)
                .sql(", ");
            now(b, database);
            b.sql(" + INTERVAL ").arg(Arg::AtMost).sql(" MICROSECOND, ");
            now(b, database);
            b.sql(", ").arg(Arg::LockedBy);
            if mode.compat {
                // ShedLock's row, taken when it is free or already this acquisition's (a
                // repeat after a lost answer). `locked_by` is assigned first: once it is this
                // acquisition's, the later guards stay true; while it is someone else's, they
                // stay false. The acquire won iff the row's `locked_by` afterwards is this
                // acquisition's.
                let free = format!("({lu} <= VALUES({la}) OR {lb} = VALUES({lb}))");
                b.sql(&format!(
                    "{close} ON DUPLICATE KEY UPDATE \
                     {lb} = IF({free}, VALUES({lb}), {lb}), \
                     {la} = IF({free}, VALUES({la}), {la}), \
                     {lu} = IF({free}, VALUES({lu}), {lu})"
                ));
                if mariadb {
                    b.sql(&format!(" RETURNING {lb}"));
                }
            } else {
                b.sql(", ").arg(Arg::AcquisitionId);
                let free = format!("{lu} <= VALUES({la})");
                b.sql(&format!(
                    ", {SERVER_MICROS}{close} ON DUPLICATE KEY UPDATE \
                     {ft} = IF({free}, GREATEST({ft} + 1, VALUES({ft})), {ft}), \
                     {lb} = IF({free}, VALUES({lb}), {lb}), \
                     {aid} = IF({free}, VALUES({aid}), {aid}), \
                     {la} = IF({free}, VALUES({la}), {la}), \
                     {lu} = IF({free}, VALUES({lu}), {lu})"
                ));
                if mariadb {
                    b.sql(&format!(" RETURNING {aid}, {ft}"));
                }
            }
            b.build()
        };
        let acquire = upsert(&mut b, false);
        let probe = upsert(&mut b, true);

        let who = if mode.compat { lb.to_string() } else { format!("{aid}, {ft}") };
        b.sql(&format!("SELECT {who} FROM {t} WHERE {name} = ")).arg(Arg::Name);
        let owner = b.build();

        // Unlock: keep it until max(now, locked_at + at_least), never later than it was. Only old
        // values are read, so the result does not depend on assignment order.
        b.sql(&format!("{prefix}UPDATE {hint}{t} SET {lu} = LEAST({lu}, GREATEST("));
        now(&mut b, database);
        b.sql(&format!(", {la} + INTERVAL ")).arg(Arg::AtLeast).sql(" MICROSECOND))");
        mode.owner_check(&mut b, n);
        let unlock = b.build();

        b.sql(&format!("{prefix}UPDATE {hint}{t} SET {lu} = "));
        now(&mut b, database);
        b.sql(" + INTERVAL ").arg(Arg::AtMost).sql(&format!(" MICROSECOND, {la} = "));
        now(&mut b, database);
        mode.owner_check(&mut b, n);
        b.sql(&format!(" AND {lu} > "));
        now(&mut b, database);
        let extend = b.build();

        // The compatible mode's `TIMESTAMP` columns are read in the session time zone, as they
        // were written (the session zone is checked on first use).
        let owner_cols = if mode.compat {
            "CAST(0 AS SIGNED), CAST(0 AS SIGNED)".to_owned()
        } else {
            format!("{aid}, {ft}")
        };
        // The record's columns, then the server clock that judges it for inspection.
        let la_micros = format!("TIMESTAMPDIFF(MICROSECOND, {EPOCH}, {la})");
        let columns_read = format!(
            "{name}, TIMESTAMPDIFF(MICROSECOND, {EPOCH}, {lu}), {la_micros}, {lb}, {owner_cols}, \
             {SERVER_MICROS}"
        );
        b.sql(&format!("SELECT {columns_read} FROM {t} WHERE {name} = ")).arg(Arg::Name);
        let select = b.build();

        // A page of a listing: the prefix compared as a value (bytes: the name is VARBINARY),
        // never a pattern.
        b.sql(&format!("SELECT {columns_read} FROM {t}"))
            .page(n, &format!(" WHERE LEFT({name}, LENGTH("));
        let list = b.build();

        b.sql(&format!("DELETE FROM {t} WHERE {name} = ")).arg(Arg::Name);
        let delete = b.build();

        b.sql(&format!("DELETE FROM {t}")).seen_check(n, mode.compat, &la_micros);
        let force_release = b.build();

        b.sql(&format!("{prefix}INSERT {hint}INTO {t} ({columns}) VALUES ("))
            .arg(Arg::Name)
            .sql(", TIMESTAMPADD(MICROSECOND, ")
            .arg(Arg::Until)
            .sql(&format!(", {EPOCH}), TIMESTAMPADD(MICROSECOND, "))
            .arg(Arg::Until)
            .sql(&format!(", {EPOCH}), "))
            .arg(Arg::LockedBy);
        if mode.compat {
            b.sql(&format!(
                ") ON DUPLICATE KEY UPDATE {lb} = VALUES({lb}), {la} = VALUES({la}), \
                 {lu} = VALUES({lu})"
            ));
        } else {
            b.sql(", ").arg(Arg::AcquisitionId);
            b.sql(&format!(
                ", {SERVER_MICROS}) ON DUPLICATE KEY UPDATE \
                 {ft} = GREATEST({ft} + 1, VALUES({ft})), {lb} = VALUES({lb}), \
                 {aid} = VALUES({aid}), {la} = VALUES({la}), {lu} = VALUES({lu})"
            ));
        }
        let write = b.build();

        Self {
            flavor,
            acquire,
            probe,
            owner,
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

/// ShedLock's documented MySQL / MariaDB table, with the name column `VARBINARY` sized to
/// `max_name_len` (ShedLock's is `VARCHAR(64)`, compared by the table's collation).
fn compat_ddl(n: &QuotedNames, max_name_len: usize) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {t} (\n    {name} VARBINARY({max_name_len}) NOT NULL,\n    \
         {lu} TIMESTAMP(3) NOT NULL,\n    \
         {la} TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),\n    \
         {lb} VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL,\n    PRIMARY KEY ({name})\n) ENGINE=InnoDB",
        t = n.table,
        name = n.name,
        lu = n.lock_until,
        la = n.locked_at,
        lb = n.locked_by,
    )
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
        // ER_NO_SUCH_TABLE, ER_BAD_DB_ERROR
        1146 | 1049 => DbErrorKind::MissingTable,
        // ER_BAD_FIELD_ERROR
        1054 => DbErrorKind::MissingColumn,
        // ER_NO_DEFAULT_FOR_FIELD, ER_BAD_NULL_ERROR: a NOT NULL column the statement does not
        // write (strict mode)
        1364 | 1048 => DbErrorKind::MissingValue,
        // ER_DATA_TOO_LONG, ER_TRUNCATED_WRONG_VALUE_FOR_FIELD
        1406 | 1366 => DbErrorKind::NameRejected,
        // ER_LOCK_DEADLOCK
        1213 => DbErrorKind::Transient,
        // ER_TABLEACCESS_DENIED_ERROR, ER_COLUMNACCESS_DENIED_ERROR, ER_DBACCESS_DENIED_ERROR,
        // ER_SPECIFIC_ACCESS_DENIED_ERROR
        1142 | 1143 | 1044 | 1227 => DbErrorKind::PermissionDenied,
        // ER_CON_COUNT_ERROR, ER_SERVER_SHUTDOWN, ER_CONNECTION_KILLED, ER_LOCK_WAIT_TIMEOUT,
        // ER_TOO_MANY_USER_CONNECTIONS
        1040 | 1053 | 1927 | 1205 | 1203 => DbErrorKind::Unavailable,
        _ => DbErrorKind::Other,
    }
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

/// The MySQL / MariaDB primitives: where lock statements run, and the statements of the flavor
/// (built on first use when the flavor is detected). Times are microseconds on millisecond
/// boundaries.
/// The MySQL and MariaDB [`Dialect`]: where lock statements run, the configured flavor, and the
/// statements (built on first use when the flavor is detected). Used through
/// [`MySqlLockProvider`].
pub struct MySqlDialect {
    conn: LockConn<MySql>,
    names: QuotedNames,
    mode: Mode,
    /// As configured.
    flavor: Flavor,
    stmts: OnceCell<Statements>,
}

impl fmt::Debug for MySqlDialect {
    /// The flavor and connection mode only: the pool's options may hold credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlDialect")
            .field("flavor", &self.flavor())
            .field("dedicated_connection", &self.conn.is_dedicated())
            .finish_non_exhaustive()
    }
}

impl MySqlDialect {
    /// The flavor in use: the configured one, or the detected one once the provider has talked
    /// to the server (`None` before that).
    pub fn flavor(&self) -> Option<Flavor> {
        self.stmts
            .get()
            .map(|s| s.flavor)
            .or((self.flavor != Flavor::Detect).then_some(self.flavor))
    }

    async fn stmts(&self) -> Result<&Statements, sqlx::Error> {
        self.stmts
            .get_or_try_init(|| async {
                if self.mode.compat {
                    self.check_time_zone().await?;
                }
                let flavor = match self.flavor {
                    Flavor::Detect => {
                        let version: String = sqlx::query_scalar("SELECT VERSION()")
                            .fetch_one(&mut *self.conn.pooled().await?)
                            .await?;
                        let flavor = flavor_of(&version);
                        tracing::debug!(%version, ?flavor, "mysql flavor detected");
                        flavor
                    }
                    f => f,
                };
                Ok(Statements::new(&self.names, self.mode, flavor))
            })
            .await
    }

    /// The compatible mode writes UTC wall-clock times into `TIMESTAMP` columns, which the
    /// server converts through the session `time_zone` (as ShedLock does): a session zone with
    /// another offset than the server default's (what JDBC nodes use unless configured) would
    /// read every Java node's `lock_until` hours off. A definite mismatch is a setup error;
    /// a server zone whose offset cannot be computed (named, without the time zone tables) is
    /// logged.
    async fn check_time_zone(&self) -> Result<(), sqlx::Error> {
        let (session, global, session_offset, global_offset): (String, String, i64, Option<i64>) =
            sqlx::query_as(
                "SELECT CAST(@@session.time_zone AS CHAR), CAST(@@global.time_zone AS CHAR), \
             TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW()), TIMESTAMPDIFF(SECOND, \
             UTC_TIMESTAMP(), CONVERT_TZ(UTC_TIMESTAMP(), '+00:00', @@global.time_zone))",
            )
            .fetch_one(&mut *self.conn.pooled().await?)
            .await?;
        match global_offset {
            Some(g) if g != session_offset => Err(sqlx::Error::Configuration(
                format!(
                    "the ShedLock-compatible mode needs this pool's session time_zone ({session}, \
                     UTC{session_offset:+} s) to have the offset of the server default \
                     ({global}, UTC{g:+} s): ShedLock's TIMESTAMP(3) columns are read and \
                     written through the session zone, and JDBC nodes use the server default \
                     unless configured otherwise, so the two would read each other's \
                     lock_until {} s apart. Connect with MySqlConnectOptions::timezone(None) \
                     (or the zone the Java nodes use), or set the server's time_zone to UTC",
                    (g - session_offset).abs()
                )
                .into(),
            )),
            Some(_) => Ok(()),
            None => {
                tracing::warn!(
                    %session, %global,
                    "shedlock-mysql: cannot compute the offset of the server's time_zone \
                     (time zone tables not loaded?); the ShedLock-compatible mode needs every \
                     node's session time_zone to be the same"
                );
                Ok(())
            }
        }
    }
}

impl Dialect for MySqlDialect {
    const BACKEND: &'static str = BACKEND;
    /// VARBINARY stores any bytes, NUL included: only the length is checked.
    const PROVIDER: &'static str = "MySqlLockProvider";
    const REJECT_NUL: bool = false;
    const QUOTE: char = '`';
    const MAX_NAME_LEN_LIMIT: usize = MAX_NAME_LEN_LIMIT;
    type Pool = MySqlPool;
    type Options = MySqlOptions;

    fn new(pool: MySqlPool, options: MySqlOptions, settings: &Settings) -> Result<Self> {
        let mode = Mode { database: settings.database_time(), compat: settings.compat() };
        let stmts = OnceCell::new();
        // The compatible mode checks the session time zone on first use, with the statements.
        if options.flavor != Flavor::Detect && !mode.compat {
            let _ = stmts.set(Statements::new(&settings.names, mode, options.flavor));
        }
        let conn = LockConn::new(pool, options.dedicated);
        Ok(Self { conn, names: settings.names.clone(), mode, flavor: options.flavor, stmts })
    }

    fn ddl(_options: &Self::Options, settings: &Settings) -> String {
        if settings.compat() {
            compat_ddl(&settings.names, settings.max_name_len)
        } else {
            ddl(&settings.names, settings.max_name_len)
        }
    }

    fn classify(e: &dyn DatabaseError) -> DbErrorKind {
        classify(e)
    }

    fn duration(d: Duration) -> i64 {
        duration_millis_ceil(d).saturating_mul(1000)
    }

    fn time(micros: i64) -> i64 {
        floor_ms_micros(micros)
    }

    /// The lock is ours iff the row's owner id afterwards is the one this acquisition sent.
    async fn acquire(&self, values: &ArgValues<'_>) -> Result<Option<i64>, sqlx::Error> {
        let stmts = self.stmts().await?;
        let row = retry_transient(classify, || async {
            let row = match stmts.flavor {
                Flavor::MySql => {
                    let (upsert, owner) = (&stmts.acquire, &stmts.owner);
                    self.conn.execute_then_fetch_optional(classify, upsert, owner, values).await?
                }
                _ => self.conn.fetch_optional(classify, &stmts.acquire, values).await?,
            };
            row.map(|r| {
                if self.mode.compat {
                    // The row's `locked_by`: this acquisition's own value iff it won.
                    let by: String = r.try_get(0)?;
                    Ok((by == values.locked_by).then_some(0))
                } else {
                    let (owner, token) = (r.try_get::<i64, _>(0)?, r.try_get::<i64, _>(1)?);
                    Ok((owner == values.acquisition_id).then_some(token))
                }
            })
            .transpose()
        })
        .await?;
        Ok(row.flatten())
    }

    /// sqlx sets CLIENT_FOUND_ROWS: rows-affected counts matched rows, so an extend reports 1
    /// iff the row is still ours.
    async fn execute(&self, op: Op, values: &ArgValues<'_>) -> Result<u64, sqlx::Error> {
        let stmts = self.stmts().await?;
        let stmt = match op {
            Op::Unlock => &stmts.unlock,
            Op::Extend => &stmts.extend,
            Op::Delete => &stmts.delete,
            Op::Write => &stmts.write,
            Op::ForceRelease => &stmts.force_release,
        };
        let r = retry_transient(classify, || self.conn.execute(classify, stmt, values)).await?;
        Ok(r.rows_affected())
    }

    async fn record(&self, values: &ArgValues<'_>) -> Result<Option<LockRecord>, sqlx::Error> {
        let stmts = self.stmts().await?;
        let row = self.conn.fetch_optional(classify, &stmts.select, values).await?;
        row.map(|r| record_from_row(&r, name_of(&r)?)).transpose()
    }

    async fn inspect(&self, values: &ArgValues<'_>) -> Result<Option<Inspected>, sqlx::Error> {
        let stmts = self.stmts().await?;
        let row = bind::<MySql>(&stmts.select, values).fetch_optional(self.conn.pool()).await?;
        row.map(|r| inspected_from_row(&r, name_of(&r)?)).transpose()
    }

    async fn list(&self, values: &ArgValues<'_>) -> Result<Vec<Inspected>, sqlx::Error> {
        let stmts = self.stmts().await?;
        let rows = bind::<MySql>(&stmts.list, values).fetch_all(self.conn.pool()).await?;
        rows.iter().map(|r| inspected_from_row(r, name_of(r)?)).collect()
    }

    async fn run_ddl(&self, ddl: &str) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(AssertSqlSafe(ddl.to_owned()))
            .execute(&mut *self.conn.pooled().await?)
            .await
            .map(|_| ())
    }

    /// The acquire's upsert over zero rows (`INSERT … SELECT … FROM DUAL WHERE 0 ON DUPLICATE
    /// KEY UPDATE …`, with `RETURNING` on MariaDB): the server checks its privileges before it
    /// runs, so it proves SELECT, INSERT and UPDATE on the table and its columns, and writes
    /// nothing. In the compatible mode the session time zone is checked first, as at the first
    /// lock call.
    async fn probe(&self, values: &ArgValues<'_>) -> Result<(), sqlx::Error> {
        let stmts = self.stmts().await?;
        self.conn.execute(classify, &stmts.probe, values).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shedlock_sql::TableName;

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
        let s = Statements::new(&names(), Mode { database: true, compat: false }, Flavor::MariaDb);
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
        let m = Statements::new(&names(), Mode { database: true, compat: false }, Flavor::MySql);
        assert!(!m.acquire.sql().contains("RETURNING"));
        assert!(
            m.acquire
                .sql()
                .starts_with("INSERT /*+ SET_VAR(sql_mode = 'STRICT_ALL_TABLES') */ INTO")
        );
    }

    #[test]
    fn the_probe_of_check_is_the_acquire_over_zero_rows() {
        for compat in [false, true] {
            for flavor in [Flavor::MariaDb, Flavor::MySql] {
                let s = Statements::new(&names(), Mode { database: true, compat }, flavor);
                let probe = s.probe.sql();
                assert!(probe.contains(" FROM DUAL WHERE 0 ON DUPLICATE KEY UPDATE"), "{probe}");
                let one_row = probe.replacen(") SELECT ", ") VALUES (", 1).replacen(
                    " FROM DUAL WHERE 0 ON",
                    ") ON",
                    1,
                );
                assert_eq!(&one_row, &**s.acquire.sql(), "{flavor:?}, compat {compat}");
                assert_eq!(s.probe.args(), s.acquire.args());
            }
        }
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

//! The provider every dialect shares: [`SqlLockProvider`] and its builder, `try_lock` / unlock /
//! extend through core's [`StoreProvider`], capabilities and the record helpers. A dialect
//! supplies only its primitives ([`Dialect`]): the statements, how to run them, the units of its
//! times and how to classify its errors.

use std::{fmt, sync::Arc, time::Duration, time::SystemTime};

use async_trait::async_trait;
use shedlock::{
    Capabilities, ClockBuilder, Error, ForceRelease, LockInfo, LockPage, LockProvider,
    ProviderBuilder, Result, TimeSource,
    store::{
        self, DelegatingProvider, Extension, Granted, LeaseStore, ProviderSettings, Request,
        StoreProvider,
    },
    support::{check_lock_name, unix_micros, with_timeout},
};
use sqlx::{
    AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Row, Type, error::DatabaseError,
    query::Query,
};

use crate::{
    ArgValues, Call, Columns, DEFAULT_MAX_NAME_LEN, DbErrorKind, ErrorContext, LockRecord,
    QuotedNames, Stmt, TableName, Value, check_max_name_len, map_sqlx_error, token_u64,
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
    /// Deletes the row of a name only while it is the acquisition an operator saw
    /// ([`StmtBuilder::seen_check`](crate::StmtBuilder::seen_check)).
    ForceRelease,
}

/// A SQL dialect: what [`SqlLockProvider`] needs from one database. Everything else (name
/// checks, owner ids, timeouts, spans, error mapping, the lock handle, the builder) is shared.
///
/// `shedlock-postgres`, `shedlock-mysql` and `shedlock-sqlite` are dialects; to add another
/// (CockroachDB, SQL Server, …) implement this trait: build the statements once in
/// [`new`](Dialect::new) with a [`StmtBuilder`](crate::StmtBuilder) from the validated, quoted
/// [`Settings::names`], and run them in [`acquire`](Dialect::acquire),
/// [`execute`](Dialect::execute) and [`record`](Dialect::record). The statements' contract is
/// written on each method; `shedlock-conformance` proves a dialect keeps it.
pub trait Dialect: Send + Sync + Sized + fmt::Debug + 'static {
    /// The backend name in errors, spans and logs (`postgres`).
    const BACKEND: &'static str;
    /// The provider's name in its `Debug` output (`PostgresLockProvider`).
    const PROVIDER: &'static str;
    /// Whether a lock name with a NUL character is refused before it is bound.
    const REJECT_NUL: bool;
    /// How the dialect quotes identifiers (`"` or `` ` ``).
    const QUOTE: char;
    /// The largest `max_name_len` the dialect's name column can hold.
    const MAX_NAME_LEN_LIMIT: usize;
    /// The step the database truncates its times to ([`Capabilities::clock_step`]): 1 ms for
    /// millisecond columns (the default), 1 µs for microsecond timestamps.
    const CLOCK_STEP: Duration = shedlock::DEFAULT_CLOCK_STEP;

    /// What [`SqlLockProvider::builder`] takes: the caller's pool.
    type Pool: Send;
    /// The dialect's own builder settings (set through [`DialectOption`]s and the capability
    /// traits [`DedicatedConnection`], [`AsynchronousCommit`], [`UnloggedTable`]); `()` for
    /// none.
    type Options: Default + fmt::Debug + Send;

    /// The dialect on `pool`, its statements built from the validated `settings`. Does no I/O.
    fn new(pool: Self::Pool, options: Self::Options, settings: &Settings) -> Result<Self>;

    /// The `CREATE TABLE IF NOT EXISTS` statement(s) for `settings` (the quoted names, the
    /// longest name, and in the ShedLock-compatible mode ShedLock's own table) and the
    /// dialect's own `options` (e.g. [`UnloggedTable`]).
    fn ddl(options: &Self::Options, settings: &Settings) -> String;

    /// Classifies a database error.
    fn classify(e: &dyn DatabaseError) -> DbErrorKind;

    /// A duration in the dialect's integer units (rounded up).
    fn duration(d: Duration) -> i64;

    /// An absolute time, in microseconds since the Unix epoch, in the dialect's units.
    fn time(micros: i64) -> i64;

    /// Runs the acquire: the fencing token if this acquisition (`values.acquisition_id`) won
    /// the lock, `None` if it is held elsewhere. The row is taken when it is free (its
    /// `lock_until` not after now) or already this acquisition's (a repeat after a lost
    /// answer). One round trip where the dialect allows it.
    fn acquire(
        &self,
        values: &ArgValues<'_>,
    ) -> impl Future<Output = std::result::Result<Option<i64>, sqlx::Error>> + Send;

    /// Runs `op`, returning the rows affected. [`Op::Unlock`] and [`Op::Extend`] change the row
    /// only while it is this acquisition's; an extend reports 1 iff it is (and still held).
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

    /// Reads the row of `values.name` with the database's clock ([`Inspected`]). Reads only.
    fn inspect(
        &self,
        values: &ArgValues<'_>,
    ) -> impl Future<Output = std::result::Result<Option<Inspected>, sqlx::Error>> + Send;

    /// Reads at most `values.limit` rows whose names start with `values.prefix` and sort after
    /// `values.after`, in the order of the name column, each with the database's clock. Reads
    /// only; the prefix is compared as a value (`left(name, length(prefix)) = prefix`, never
    /// `LIKE`), so `%` and `_` in names are plain characters.
    fn list(
        &self,
        values: &ArgValues<'_>,
    ) -> impl Future<Output = std::result::Result<Vec<Inspected>, sqlx::Error>> + Send;

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

    /// What [`check`](shedlock::LockProvider::check) runs: proves, changing nothing, that the
    /// lock statements can run on the table. A dialect that can should run a statement with
    /// the acquire's privilege checks that writes no row (the acquire's upsert over zero rows),
    /// so that a user who may read the table but not write it fails here, not at the first
    /// acquire. Default: reads the row of `values.name` ([`record`](Dialect::record)), which
    /// proves the table, its columns and read access only.
    fn probe(
        &self,
        values: &ArgValues<'_>,
    ) -> impl Future<Output = std::result::Result<(), sqlx::Error>> + Send {
        async move { self.record(values).await.map(drop) }
    }

    /// The statement(s) that give the database user what `call` needs on the lock table
    /// `table` ([`Call::privileges`]), quoted in the message of a permission error
    /// ([`DbErrorKind::PermissionDenied`]). Default: `GRANT <privileges> ON <table> TO <user>`
    /// (for `create_table`, a table-level `CREATE`, as MySQL has it).
    fn grant(call: Call, table: &TableName) -> String {
        format!("GRANT {} ON {} TO <user>", call.privileges(), table.quoted(Self::QUOTE))
    }
}

/// A setting of one dialect, given to [`SqlLockProviderBuilder::option`] (for example
/// `shedlock_mysql::Flavor`).
pub trait DialectOption<D: Dialect> {
    /// Writes this setting into the dialect's options.
    fn apply(self, options: &mut D::Options);
}

/// A dialect whose lock statements can run on a connection of the provider's own
/// ([`LockConn`](crate::LockConn)); gives the builder
/// [`dedicated_connection`](SqlLockProviderBuilder::dedicated_connection).
pub trait DedicatedConnection: Dialect {
    /// Sets whether lock statements run on the provider's own connection.
    fn set_dedicated_connection(options: &mut Self::Options, dedicated: bool);
}

/// A dialect that can commit its lock statements without waiting for them to be durable (on a
/// connection of its own, see [`LockConn::session_setup`](crate::LockConn::session_setup));
/// gives the builder [`asynchronous_commit`](SqlLockProviderBuilder::asynchronous_commit).
pub trait AsynchronousCommit: Dialect {
    /// Sets whether the lock statements on the provider's own connection commit
    /// asynchronously.
    fn set_asynchronous_commit(options: &mut Self::Options, asynchronous: bool);
}

/// A dialect whose lock table can be created without crash safety (not written to the
/// database's log); gives the builder [`unlogged_table`](SqlLockProviderBuilder::unlogged_table).
pub trait UnloggedTable: Dialect {
    /// Sets whether [`ddl`](Dialect::ddl) creates an unlogged table.
    fn set_unlogged_table(options: &mut Self::Options, unlogged: bool);
}

/// A dialect that can read and write ShedLock's own table; gives the builder
/// [`shedlock_compatible`](SqlLockProviderBuilder::shedlock_compatible).
pub trait ShedlockTable: Dialect {}

/// Binds `values` to `stmt` for any `sqlx` database that takes text, bytes and 64-bit integers.
pub fn bind<'q, DB>(stmt: &Stmt, values: &ArgValues<'q>) -> Query<'q, DB, DB::Arguments>
where
    DB: Database,
    &'q str: Encode<'q, DB> + Type<DB>,
    &'q [u8]: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
{
    let mut q = sqlx::query(AssertSqlSafe(stmt.sql().clone()));
    for v in stmt.values(values) {
        q = match v {
            Value::Text(s) => q.bind(s),
            Value::Bytes(b) => q.bind(b),
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

/// A row read for inspection: the record, and the database's clock in microseconds since the
/// epoch when it was read (it judges whether the record is held in database time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    /// The stored record.
    pub record: LockRecord,
    /// The database's clock, µs since the Unix epoch.
    pub db_micros: i64,
}

/// An [`Inspected`] from a row of the dialect's select or list statement: the columns of
/// [`record_from_row`], then the database's clock in microseconds since the Unix epoch.
pub fn inspected_from_row<R>(row: &R, name: String) -> std::result::Result<Inspected, sqlx::Error>
where
    R: Row,
    usize: ColumnIndex<R>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(Inspected { record: record_from_row(row, name)?, db_micros: row.try_get(6)? })
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

/// The validated settings of a [`SqlLockProviderBuilder`], handed to [`Dialect::new`] and
/// [`Dialect::ddl`]: the quoted names to build statements and DDL from.
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
    /// The table as configured, for the `GRANT` of a permission error.
    table_name: TableName,
    ddl: String,
    max_name_len: usize,
    compat: bool,
}

impl<D: Dialect> SqlStore<D> {
    fn err(&self, call: Call, name: Option<&str>, e: sqlx::Error) -> Error {
        let grant = D::grant(call, &self.table_name);
        let ctx = ErrorContext {
            backend: D::BACKEND,
            table: &self.table,
            ddl: &self.ddl,
            name,
            compat: self.compat,
            call,
            grant: &grant,
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
        let call = match op {
            Op::Unlock => Call::Unlock,
            Op::Extend => Call::Extend,
            Op::Delete => Call::DeleteRecord,
            Op::Write => Call::WriteRecord,
            Op::ForceRelease => Call::ForceRelease,
        };
        self.dialect.execute(op, values).await.map_err(|e| self.err(call, Some(values.name), e))
    }

    /// The row of `name` as an operator sees it, read for `call`.
    async fn read(
        &self,
        call: Call,
        name: &str,
        settings: &store::Settings,
    ) -> Result<Option<Inspected>> {
        let values = self.values(settings, name);
        self.dialect.inspect(&values).await.map_err(|e| self.err(call, Some(name), e))
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
            .with_clock_step(D::CLOCK_STEP)
            .with_max_name_len(Some(self.max_name_len))
            .with_check(true)
            .with_inspect(true)
            .with_list(true)
            .with_force_release(true)
    }

    fn rejects_nul(&self) -> bool {
        D::REJECT_NUL
    }

    /// Runs the dialect's [`probe`](Dialect::probe) on a name no lock can have (the empty
    /// name), through the same connection and error mapping as every lock call, one statement:
    /// the database answers, and the table has every configured column (a missing table is
    /// [`Error::Setup`] with its DDL; a table in the other mode says which mode it is in).
    /// PostgreSQL and MySQL run the acquire's upsert over zero rows, which the server refuses
    /// unless the user may SELECT, INSERT and UPDATE the table ([`Error::Setup`] naming the
    /// grant). Writes nothing.
    async fn check(&self, settings: &store::Settings) -> Result<()> {
        let values = self.values(settings, "");
        self.dialect.probe(&values).await.map_err(|e| self.err(Call::Check, None, e))
    }

    /// One acquire statement.
    async fn acquire(&self, req: &Request<'_>) -> Result<Option<Granted<Held>>> {
        let values =
            ArgValues { at_most: D::duration(req.lock_at_most_for()), ..self.owned_values(req, 0) };
        let token = self
            .dialect
            .acquire(&values)
            .await
            .map_err(|e| self.err(Call::TryLock, Some(req.name()), e))?;
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

    async fn inspect(&self, name: &str, settings: &store::Settings) -> Result<Option<LockInfo>> {
        let row = self.read(Call::Inspect, name, settings).await?;
        Ok(row.map(|i| self.info(i, settings)))
    }

    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
        settings: &store::Settings,
    ) -> Result<LockPage> {
        // One row more than the page, to know whether another page follows.
        let values = ArgValues {
            prefix,
            after: cursor.unwrap_or(""),
            limit: i64::try_from(limit + 1).unwrap_or(i64::MAX),
            ..self.values(settings, prefix)
        };
        let rows = self.dialect.list(&values).await.map_err(|e| self.err(Call::List, None, e))?;
        let more = rows.len() > limit;
        let records: Vec<LockInfo> =
            rows.into_iter().take(limit).map(|i| self.info(i, settings)).collect();
        let next = if more { records.last().map(|r| r.name.clone()) } else { None };
        Ok(LockPage::new(records, next))
    }

    /// Reads the row, and deletes it only if it is still the acquisition seen, in one
    /// conditional `DELETE` on the acquisition's own columns.
    async fn force_release(
        &self,
        seen: &LockInfo,
        settings: &store::Settings,
    ) -> Result<ForceRelease> {
        let name = seen.name.as_str();
        let read = self.values(settings, name);
        let row = self.read(Call::ForceRelease, name, settings).await?;
        let Some(row) = row else { return Ok(ForceRelease::Changed(None)) };
        let record = row.record.clone();
        let current = self.info(row, settings);
        if current.acquisition != seen.acquisition {
            return Ok(ForceRelease::Changed(Some(current)));
        }
        let values = ArgValues {
            locked_by: &record.locked_by,
            acquisition_id: record.acquisition_id,
            locked_at: self.seen_locked_at(&record),
            ..read
        };
        if self.execute(Op::ForceRelease, &values).await? == 1 {
            return Ok(ForceRelease::Released(current));
        }
        let now = self.read(Call::ForceRelease, name, settings).await?;
        Ok(ForceRelease::Changed(now.map(|i| self.info(i, settings))))
    }
}

impl<D: Dialect> SqlStore<D> {
    /// What an operator sees of a row: held or free by the database's clock (or in client time
    /// this instance's), and the acquisition that wrote it.
    fn info(&self, i: Inspected, settings: &store::Settings) -> LockInfo {
        let now = settings.client_now().map_or(i.db_micros, unix_micros);
        let r = i.record;
        let held = unix_micros(r.lock_until) > now;
        let token = if self.compat { None } else { Some(token_u64(r.fencing_token)) };
        LockInfo::new(r.name.clone(), self.acquisition(&r), held, settings.time_source())
            .with_locked_at(r.locked_at)
            .with_lock_until(r.lock_until)
            .with_fencing_token(token)
            .with_locked_by(r.locked_by)
    }

    /// The acquisition of a row: its owner id; in the ShedLock-compatible mode its `locked_by`,
    /// which is unique per acquisition when one of ours wrote it (` #` and 16 hex digits), and
    /// with its `locked_at` when a ShedLock node did (whose `locked_by` is its host's, the same
    /// for each of its acquisitions; ShedLock's extend leaves `locked_at` as it is).
    fn acquisition(&self, r: &LockRecord) -> String {
        match self.seen_locked_at(r) {
            _ if !self.compat => r.acquisition_id.to_string(),
            0 => format!("by:{}", r.locked_by),
            at => format!("at:{at}:by:{}", r.locked_by),
        }
    }

    /// The `locked_at` a forced release compares: 0 (any) unless the row is a ShedLock node's
    /// in the compatible mode.
    fn seen_locked_at(&self, r: &LockRecord) -> i64 {
        if self.compat && !has_acquisition_suffix(&r.locked_by) {
            unix_micros(r.locked_at).max(1)
        } else {
            0
        }
    }
}

/// Whether `locked_by` ends with the suffix an acquisition of ours appends in the
/// ShedLock-compatible mode: ` #` and 16 lower-case hex digits.
fn has_acquisition_suffix(locked_by: &str) -> bool {
    let b = locked_by.as_bytes();
    b.len() >= OWNER_SUFFIX_LEN && {
        let tail = &b[b.len() - OWNER_SUFFIX_LEN..];
        tail.starts_with(b" #") && tail[2..].iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
    }
}

/// Builds a [`SqlLockProvider`]: [`SqlLockProvider::builder`] on the caller's pool.
///
/// The shared setters (`operation_timeout`, `locked_by`, `clock`) come from [`ProviderBuilder`]
/// (and [`ClockBuilder`]), in scope with `use shedlock_sql::ProviderBuilder;`. Here the time limit
/// includes waiting for a pooled connection (and, in SQLite, for the database's write lock); the
/// clock computes `lock_until` only with [`TimeSource::Client`].
#[must_use]
pub struct SqlLockProviderBuilder<D: Dialect> {
    pool: D::Pool,
    options: D::Options,
    table: String,
    columns: Columns,
    max_name_len: usize,
    settings: ProviderSettings,
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

/// A lock provider on a SQL table, over dialect `D`: the table's rows as a [`LeaseStore`], run by
/// core's [`StoreProvider`]. Implements [`LockProvider`](shedlock::LockProvider). Cheap to clone.
///
/// Each dialect crate names it: `shedlock_postgres::PostgresLockProvider` is
/// `SqlLockProvider<PostgresDialect>`.
pub struct SqlLockProvider<D: Dialect> {
    inner: StoreProvider<SqlStore<D>>,
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
        with_timeout("record", self.inner.settings().timeout(), async {
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
        with_timeout("delete_record", self.inner.settings().timeout(), async {
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
        with_timeout("write_record", self.inner.settings().timeout(), async {
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

//! What a SQL database must supply: the [`Dialect`] trait (its statements, how to run them, the
//! units of its times and how to classify its errors), the statements it runs ([`Op`]), the
//! validated [`Settings`] it is built from, and the capability traits through which a dialect
//! offers the builder its own settings ([`DialectOption`], [`DedicatedConnection`],
//! [`AsynchronousCommit`], [`UnloggedTable`], [`ShedlockTable`]).

use std::{fmt, time::Duration};

use shedlock::{Result, store};
use sqlx::error::DatabaseError;

use crate::{ArgValues, Call, DbErrorKind, Inspected, LockRecord, QuotedNames, TableName};
#[cfg(doc)]
use crate::{SqlLockProvider, SqlLockProviderBuilder};
#[cfg(doc)]
use shedlock::Capabilities;

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

    /// Whether [`acquire_many`](Dialect::acquire_many) takes a whole batch in one statement
    /// ([`Capabilities::native_batch`]). Default: no.
    const NATIVE_BATCH: bool = false;

    /// The most names of one [`acquire_many`](Dialect::acquire_many) statement (its
    /// parameters' limit); larger batches are split. Default 500.
    const BATCH_LIMIT: usize = 500;

    /// Runs the acquires of a batch: per entry, in order, what [`acquire`](Dialect::acquire)
    /// would answer. The names are distinct and sorted (so that concurrent batches lock rows in
    /// one order and cannot deadlock); every entry has the same `now`. A dialect that declares
    /// [`NATIVE_BATCH`](Dialect::NATIVE_BATCH) runs one statement (or one round trip) for them
    /// all. Default: each [`acquire`](Dialect::acquire) in turn.
    fn acquire_many(
        &self,
        batch: &[ArgValues<'_>],
    ) -> impl Future<Output = std::result::Result<Vec<Option<i64>>, sqlx::Error>> + Send {
        async move {
            let mut out = Vec::with_capacity(batch.len());
            for values in batch {
                out.push(self.acquire(values).await?);
            }
            Ok(out)
        }
    }

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

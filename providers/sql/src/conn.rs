//! The connection lock statements run on ([`LockConn`]).

use std::{
    fmt,
    sync::{Mutex, MutexGuard, PoisonError},
    time::Instant,
};

use sqlx::{
    AssertSqlSafe, ConnectOptions, Connection, Database, Encode, Executor, IntoArguments, Pool,
    Type, error::DatabaseError, pool::PoolConnection,
};

use crate::{ArgValues, DbErrorKind, Stmt, bind};

/// Where a provider runs its lock statements: a connection of its own, or the pool.
///
/// sqlx 0.9 pings every pooled connection when it goes back to the pool (in a spawned task,
/// whatever `test_before_acquire` / `after_release` say), and, with `test_before_acquire(true)`
/// (its default), once more when it is checked out. A lock statement run on the pool therefore
/// costs two or three client→server turnarounds, not one. [`LockConn`] runs lock statements on a
/// connection of the provider's own instead: taken from the caller's pool once (so the pool's
/// connect options and `after_connect` hook apply), detached from it, and kept between calls.
///
/// - **Recovery.** A statement that fails because the connection is gone (I/O, TLS or protocol
///   error, or a database error the dialect classifies as [`DbErrorKind::Unavailable`]) drops
///   the connection, and the next statement opens a fresh one. The failed statement is retried
///   at once on a fresh connection only when the server itself answered with an error of the
///   unavailable kind, so that the statement did not take effect (e.g. PostgreSQL's FATAL
///   57P01 on a restart or `pg_terminate_backend`, which a connection that was idle receives
///   instead of a result), and that connection had served an earlier statement. A bare I/O error (connection reset, EOF) is never retried: the
///   statement may have run, and repeating it could answer "acquired" for a lock whose answer
///   is already late; the caller gets a retryable error, as with a pooled connection. (Every
///   statement of the SQL providers is idempotent for its own acquisition id all the same, so
///   even the retry after a FATAL that raced with a commit cannot take a lock twice or lose
///   one.) Any other database error leaves the connection in use (autocommit: nothing is left
///   open).
/// - **Cancellation.** While a statement runs, the connection is out of the slot; if the future
///   is dropped mid-statement, the connection is dropped with it (never reused in an unknown
///   protocol state) and the next statement takes a fresh one.
/// - **Concurrency.** There is one such connection per provider. A statement that finds it busy
///   does not wait for it: it runs on a pooled connection, as before, so concurrent lock
///   statements never queue behind each other.
/// - **Pool settings** still apply: the connection is replaced once it is older than the
///   pool's `max_lifetime` or has been idle longer than its `idle_timeout`, and it is dropped
///   when the pool is closed.
/// - **Session set-up.** A dialect may give a statement ([`session_setup`](Self::session_setup))
///   that runs on each dedicated connection right after it is opened (a session setting, such
///   as PostgreSQL's `SET synchronous_commit = off`). It never runs on a pooled connection, so
///   the pool's connections keep their own settings, and statements that fall back to the pool
///   run without it.
///
/// With `dedicated = false`, every statement takes a connection from the pool, as sqlx does.
///
/// Dropping it closes the dedicated connection (gracefully, when dropped inside a tokio
/// runtime).
pub struct LockConn<DB: Database> {
    pool: Pool<DB>,
    dedicated: bool,
    setup: Option<String>,
    slot: Mutex<Slot<DB::Connection>>,
}

enum Slot<C> {
    /// No dedicated connection (not yet opened, or dropped after an error).
    Empty,
    /// A statement is running on it (or it is being opened).
    Busy,
    /// Ready for the next statement.
    Idle(Held<C>),
}

struct Held<C> {
    conn: C,
    since: Instant,
    idle_since: Instant,
}

impl<DB: Database> fmt::Debug for LockConn<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &*self.slot() {
            Slot::Empty => "empty",
            Slot::Busy => "busy",
            Slot::Idle(_) => "idle",
        };
        f.debug_struct("LockConn")
            .field("dedicated", &self.dedicated)
            .field("session_setup", &self.setup)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

/// Whether `e` means the connection cannot be used again.
fn broken(e: &sqlx::Error, classify: fn(&dyn DatabaseError) -> DbErrorKind) -> bool {
    match e {
        sqlx::Error::Database(db) => classify(db.as_ref()) == DbErrorKind::Unavailable,
        _ => true,
    }
}

/// Whether the server itself answered with an error of the unavailable kind (ending the
/// connection on a shutdown or a terminated session, out of resources): the statement did not
/// take effect, and a fresh connection may well succeed. A bare I/O error is not enough: the
/// statement may have run, and its answer may be arriving late.
fn ended_by_server(e: &sqlx::Error, classify: fn(&dyn DatabaseError) -> DbErrorKind) -> bool {
    matches!(e, sqlx::Error::Database(db) if classify(db.as_ref()) == DbErrorKind::Unavailable)
}

/// Closes `conn` gracefully in the background when a tokio runtime is at hand; else drops it.
fn close_later<C: Connection + 'static>(conn: C) {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            let _ = conn.close().await;
        });
    }
}

enum Checkout<'a, DB: Database> {
    /// The dedicated connection, and whether it served an earlier statement.
    Own(Claim<'a, DB>, Held<DB::Connection>, bool),
    Pooled(PoolConnection<DB>),
}

/// The slot, marked busy while its connection is out. Dropped without
/// [`give_back`](Claim::give_back) (error, cancellation), it leaves the slot empty: the
/// connection, dropped with the statement's future, is never reused in an unknown state.
struct Claim<'a, DB: Database> {
    owner: &'a LockConn<DB>,
    done: bool,
}

impl<DB: Database> Claim<'_, DB> {
    fn give_back(mut self, mut held: Held<DB::Connection>) {
        held.idle_since = Instant::now();
        *self.owner.slot() = Slot::Idle(held);
        self.done = true;
    }
}

impl<DB: Database> Drop for Claim<'_, DB> {
    fn drop(&mut self) {
        if !self.done {
            *self.owner.slot() = Slot::Empty;
        }
    }
}

/// What to run.
#[derive(Clone, Copy)]
enum Work<'s> {
    Fetch(&'s Stmt),
    Execute(&'s Stmt),
    ExecuteThenFetch(&'s Stmt, &'s Stmt),
}

enum Done<DB: Database> {
    Row(Option<DB::Row>),
    Result(DB::QueryResult),
}

/// Runs `work` once on `conn`.
async fn once<DB>(
    conn: &mut DB::Connection,
    work: Work<'_>,
    values: &ArgValues<'_>,
) -> Result<Done<DB>, sqlx::Error>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> &'q [u8]: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    DB::Arguments: IntoArguments<DB>,
{
    match work {
        Work::Fetch(stmt) => conn.fetch_optional(bind::<DB>(stmt, values)).await.map(Done::Row),
        Work::Execute(stmt) => conn.execute(bind::<DB>(stmt, values)).await.map(Done::Result),
        Work::ExecuteThenFetch(first, then) => {
            (&mut *conn).execute(bind::<DB>(first, values)).await?;
            conn.fetch_optional(bind::<DB>(then, values)).await.map(Done::Row)
        }
    }
}

impl<DB: Database> LockConn<DB> {
    /// Lock statements on `pool`: on a dedicated connection taken from it when `dedicated`,
    /// else on a pooled connection each. Does no I/O.
    pub fn new(pool: Pool<DB>, dedicated: bool) -> Self {
        Self { pool, dedicated, setup: None, slot: Mutex::new(Slot::Empty) }
    }

    /// Runs `sql` (one or more statements, no parameters) on each dedicated connection right
    /// after it is taken from the pool and detached, before its first lock statement: a session
    /// setting for the lock statements alone. A connection whose set-up fails is not used (the
    /// statement's call fails with that error). Pooled connections never run it: statements
    /// that fall back to the pool (the dedicated connection busy, or `dedicated = false`) run
    /// with the pool's settings.
    pub fn session_setup(mut self, sql: impl Into<String>) -> Self {
        self.setup = Some(sql.into());
        self
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Whether lock statements use a dedicated connection.
    pub fn is_dedicated(&self) -> bool {
        self.dedicated
    }

    fn slot(&self) -> MutexGuard<'_, Slot<DB::Connection>> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<DB> LockConn<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> &'q [u8]: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    DB::Arguments: IntoArguments<DB>,
{
    /// Runs `stmt` with `values` and returns its row, if any. See [`LockConn`].
    pub async fn fetch_optional(
        &self,
        classify: fn(&dyn DatabaseError) -> DbErrorKind,
        stmt: &Stmt,
        values: &ArgValues<'_>,
    ) -> Result<Option<DB::Row>, sqlx::Error> {
        match self.run(classify, Work::Fetch(stmt), values).await? {
            Done::Row(row) => Ok(row),
            Done::Result(_) => Ok(None),
        }
    }

    /// Runs `stmt` with `values` and returns its result (rows affected). See [`LockConn`].
    pub async fn execute(
        &self,
        classify: fn(&dyn DatabaseError) -> DbErrorKind,
        stmt: &Stmt,
        values: &ArgValues<'_>,
    ) -> Result<DB::QueryResult, sqlx::Error> {
        match self.run(classify, Work::Execute(stmt), values).await? {
            Done::Result(r) => Ok(r),
            Done::Row(_) => Ok(DB::QueryResult::default()),
        }
    }

    /// Runs `first`, then `then` on the same connection (each in autocommit), and returns the
    /// row of `then`, if any. See [`LockConn`].
    pub async fn execute_then_fetch_optional(
        &self,
        classify: fn(&dyn DatabaseError) -> DbErrorKind,
        first: &Stmt,
        then: &Stmt,
        values: &ArgValues<'_>,
    ) -> Result<Option<DB::Row>, sqlx::Error> {
        match self.run(classify, Work::ExecuteThenFetch(first, then), values).await? {
            Done::Row(row) => Ok(row),
            Done::Result(_) => Ok(None),
        }
    }

    /// Runs `work` on the dedicated connection if it is free (opening it if needed), else on a
    /// pooled connection; runs it once more on a fresh connection when the server ended a
    /// reused dedicated connection (see [`LockConn`]). The statements must be safe to run
    /// twice, as every statement of the SQL providers is for its own acquisition id.
    /// `classify` tells which database errors mean the connection is gone
    /// ([`DbErrorKind::Unavailable`]).
    async fn run(
        &self,
        classify: fn(&dyn DatabaseError) -> DbErrorKind,
        work: Work<'_>,
        values: &ArgValues<'_>,
    ) -> Result<Done<DB>, sqlx::Error> {
        if !self.dedicated {
            let mut conn = self.acquire().await?;
            return once(&mut conn, work, values).await;
        }
        let mut retried = false;
        loop {
            let (claim, mut held, reused) = match self.checkout().await? {
                Checkout::Pooled(mut conn) => return once(&mut conn, work, values).await,
                Checkout::Own(claim, held, reused) => (claim, held, reused),
            };
            match once(&mut held.conn, work, values).await {
                Err(e) if broken(&e, classify) => {
                    drop(held);
                    drop(claim);
                    if reused && !retried && ended_by_server(&e, classify) {
                        tracing::debug!(error = %e, "lock connection lost; retrying on a fresh one");
                        retried = true;
                        continue;
                    }
                    return Err(e);
                }
                r => {
                    claim.give_back(held);
                    return r;
                }
            }
        }
    }

    async fn checkout(&self) -> Result<Checkout<'_, DB>, sqlx::Error> {
        if self.pool.is_closed() {
            let old = std::mem::replace(&mut *self.slot(), Slot::Empty);
            if let Slot::Idle(h) = old {
                close_later(h.conn);
            }
            return Err(sqlx::Error::PoolClosed);
        }
        let previous = std::mem::replace(&mut *self.slot(), Slot::Busy);
        let held = match previous {
            // In use by another statement: do not queue behind it.
            Slot::Busy => return Ok(Checkout::Pooled(self.acquire().await?)),
            Slot::Idle(h) => Some(h),
            Slot::Empty => None,
        };
        // From here the slot is ours (busy); the claim empties it on error or cancellation.
        let claim = Claim { owner: self, done: false };
        if let Some(h) = held {
            if !self.expired(&h) {
                return Ok(Checkout::Own(claim, h, true));
            }
            close_later(h.conn);
        }
        let h = self.open().await?;
        Ok(Checkout::Own(claim, h, false))
    }

    fn expired(&self, h: &Held<DB::Connection>) -> bool {
        let o = self.pool.options();
        o.get_max_lifetime().is_some_and(|max| h.since.elapsed() > max)
            || o.get_idle_timeout().is_some_and(|max| h.idle_since.elapsed() > max)
    }

    /// A connection from the pool for a statement outside the lock calls (a set-up query, the
    /// DDL), with the same error as theirs when the pool gives none: the cause of the failing
    /// connect, not only "pool timed out".
    pub async fn pooled(&self) -> Result<PoolConnection<DB>, sqlx::Error> {
        self.acquire().await
    }

    /// A connection from the pool. When none comes within the pool's acquire timeout, one
    /// direct connection attempt (at most [`CAUSE_PROBE`]) finds out why: sqlx retries a
    /// refused or failing connect in the background and reports only "pool timed out", which
    /// loses the cause (connection refused, authentication, TLS). The probe's error is returned
    /// with it; a pool that is merely busy (the probe connects) keeps `PoolTimedOut`.
    async fn acquire(&self) -> Result<PoolConnection<DB>, sqlx::Error> {
        match self.pool.acquire().await {
            Err(sqlx::Error::PoolTimedOut) => {
                let options = self.pool.connect_options();
                match tokio::time::timeout(CAUSE_PROBE, options.connect()).await {
                    Ok(Err(cause)) => Err(sqlx::Error::Io(std::io::Error::other(NoConnection {
                        timeout: self.pool.options().get_acquire_timeout(),
                        cause,
                    }))),
                    Ok(Ok(conn)) => {
                        close_later(conn);
                        Err(sqlx::Error::PoolTimedOut)
                    }
                    Err(_) => Err(sqlx::Error::PoolTimedOut),
                }
            }
            other => other,
        }
    }

    /// Takes a connection from the pool, detaches it and runs the
    /// [session set-up](Self::session_setup) on it. A connection that was idle in a pool that
    /// does not test connections on checkout is pinged first (once per dedicated connection, not
    /// per statement; the set-up, when there is one, serves as the ping): after a server
    /// restart, the pool's idle connections are all dead, and a fresh dedicated connection must
    /// not be one of them.
    async fn open(&self) -> Result<Held<DB::Connection>, sqlx::Error> {
        let tested = self.pool.options().get_test_before_acquire();
        let tries = self.pool.options().get_max_connections().saturating_add(1);
        let mut last = sqlx::Error::PoolTimedOut;
        for _ in 0..tries {
            let was_idle = self.pool.num_idle() > 0;
            let mut conn = self.acquire().await?.detach();
            let checked = match &self.setup {
                Some(sql) => {
                    sqlx::raw_sql(AssertSqlSafe(sql.clone())).execute(&mut conn).await.map(drop)
                }
                None if !tested && was_idle => conn.ping().await,
                None => Ok(()),
            };
            if let Err(e) = checked {
                if tested || !was_idle {
                    return Err(e);
                }
                tracing::debug!(error = %e, "pooled connection dead; trying another");
                last = e;
                continue;
            }
            let now = Instant::now();
            return Ok(Held { conn, since: now, idle_since: now });
        }
        Err(last)
    }
}

/// How long [`LockConn`] tries a direct connection to learn why the pool gave none.
pub const CAUSE_PROBE: std::time::Duration = std::time::Duration::from_secs(2);

/// The pool gave no connection, and connecting fails: the cause, kept as the source.
#[derive(Debug)]
struct NoConnection {
    timeout: std::time::Duration,
    cause: sqlx::Error,
}

impl fmt::Display for NoConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no connection from the pool within its acquire timeout ({:?}): connecting fails: {}",
            self.timeout, self.cause
        )
    }
}

impl std::error::Error for NoConnection {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.cause)
    }
}

impl<DB: Database> Drop for LockConn<DB> {
    fn drop(&mut self) {
        let slot = self.slot.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Slot::Idle(h) = std::mem::replace(slot, Slot::Empty) {
            close_later(h.conn);
        }
    }
}

//! [`PostgresDialect`]: where lock statements run (with the session setting of asynchronous
//! commit), the statements built for the configured table, and the [`Dialect`] primitives.

use std::{fmt, time::Duration};

use shedlock::Result;
use shedlock::support::duration_micros;
use shedlock_sql::{
    Arg, ArgValues, Call, DbErrorKind, Inspected, LockConn, Op, Settings, TableName, bind,
    inspected_from_row, record_from_row, retry_transient,
};
use sqlx::{
    AssertSqlSafe, Row,
    error::DatabaseError,
    postgres::{PgPool, Postgres},
};

use crate::{
    BACKEND, Dialect, LockRecord, MAX_NAME_LEN_LIMIT, PostgresOptions,
    error::classify,
    statements::{Mode, Statements},
    table::{compat_ddl, ddl},
};
#[cfg(doc)]
use crate::{PostgresLockProvider, SqlLockProviderBuilder};

/// What [`asynchronous_commit(true)`](SqlLockProviderBuilder::asynchronous_commit) runs on the
/// provider's own connection when it opens it.
const ASYNCHRONOUS_COMMIT: &str = "SET synchronous_commit = off";

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

    const NATIVE_BATCH: bool = true;
    /// Four arrays whatever the batch's size: the limit only bounds one statement's work.
    const BATCH_LIMIT: usize = 1000;

    /// One statement: the upsert over `unnest`ed arrays, on a connection of the pool.
    async fn acquire_many(&self, batch: &[ArgValues<'_>]) -> Result<Vec<Option<i64>>, sqlx::Error> {
        let stmt = &self.stmts.acquire_many;
        let rows = retry_transient(classify, || async {
            let mut q = sqlx::query(AssertSqlSafe(stmt.sql().clone()));
            for arg in stmt.args() {
                q = match arg {
                    Arg::Name => q.bind(batch.iter().map(|v| v.name).collect::<Vec<&str>>()),
                    Arg::AtMost => q.bind(batch.iter().map(|v| v.at_most).collect::<Vec<i64>>()),
                    Arg::LockedBy => {
                        q.bind(batch.iter().map(|v| v.locked_by).collect::<Vec<&str>>())
                    }
                    Arg::AcquisitionId => {
                        q.bind(batch.iter().map(|v| v.acquisition_id).collect::<Vec<i64>>())
                    }
                    Arg::Now => q.bind(batch.first().map_or(0, |v| v.now)),
                    other => {
                        return Err(sqlx::Error::Protocol(format!(
                            "the batch statement has an argument it cannot bind: {other:?}"
                        )));
                    }
                };
            }
            let mut conn = self.conn.pooled().await?;
            q.fetch_all(&mut *conn).await
        })
        .await?;
        let mut won: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
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

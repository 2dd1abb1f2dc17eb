//! [`MySqlDialect`]: where lock statements run, the flavor in use (detected on first use), the
//! ShedLock-compatible mode's session time-zone check, and the [`Dialect`] primitives.

use std::{fmt, time::Duration};

use shedlock::Result;
use shedlock::support::duration_millis_ceil;
use shedlock_sql::{
    ArgValues, DbErrorKind, Inspected, LockConn, Op, QuotedNames, Settings, bind, bind_values,
    inspected_from_row, record_from_row, retry_transient,
};
use sqlx::{
    AssertSqlSafe, Row,
    error::DatabaseError,
    mysql::{MySql, MySqlPool, MySqlRow},
};
use tokio::sync::OnceCell;

#[cfg(doc)]
use crate::MySqlLockProvider;
use crate::{
    BACKEND, Dialect, Flavor, LockRecord, MAX_NAME_LEN_LIMIT, MySqlOptions,
    error::classify,
    flavor::flavor_of,
    statements::{Mode, Statements},
    table::{compat_ddl, ddl},
};

/// The name of a row: `VARBINARY`, which holds the name's UTF-8 bytes.
fn name_of(row: &MySqlRow) -> Result<String, sqlx::Error> {
    let raw: Vec<u8> = row.try_get(0)?;
    String::from_utf8(raw).map_err(|e| sqlx::Error::Decode(e.into()))
}

/// Who a batch's row belongs to after the upsert.
enum Owner {
    /// Compatible mode: the row's `locked_by`.
    LockedBy(String),
    /// The row's acquisition id and fencing token.
    Acquisition(i64, i64),
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

    const NATIVE_BATCH: bool = true;
    /// At most 7 parameters a row (65 535 allowed).
    const BATCH_LIMIT: usize = 500;

    /// One multi-row upsert; MariaDB returns each row's name and owner, MySQL reads them in a
    /// second statement on the same connection. A row whose owner is this batch's entry's
    /// acquisition (native) or `locked_by` (compatible mode) was won.
    async fn acquire_many(&self, batch: &[ArgValues<'_>]) -> Result<Vec<Option<i64>>, sqlx::Error> {
        let stmts = self.stmts().await?;
        let rows = vec![&**stmts.batch_row.sql(); batch.len()].join(", ");
        let upsert = format!("{}{rows}{}", stmts.batch_head, stmts.batch_tail);
        let names = vec!["?"; batch.len()].join(", ");
        let owners = format!("{}{names})", stmts.batch_owner_head);
        let found = retry_transient(classify, || async {
            let mut conn = self.conn.pooled().await?;
            let mut q = sqlx::query(AssertSqlSafe(upsert.clone()));
            for values in batch {
                q = bind_values(q, stmts.batch_row.values(values));
            }
            if stmts.flavor != Flavor::MySql {
                return q.fetch_all(&mut *conn).await;
            }
            q.execute(&mut *conn).await?;
            let mut read = sqlx::query(AssertSqlSafe(owners.clone()));
            for values in batch {
                read = bind_values(read, stmts.batch_name.values(values));
            }
            read.fetch_all(&mut *conn).await
        })
        .await?;
        let mut owner_of = std::collections::HashMap::new();
        for r in &found {
            let owner = if self.mode.compat {
                Owner::LockedBy(r.try_get::<String, _>(1)?)
            } else {
                Owner::Acquisition(r.try_get::<i64, _>(1)?, r.try_get::<i64, _>(2)?)
            };
            owner_of.insert(name_of(r)?, owner);
        }
        Ok(batch
            .iter()
            .map(|v| match owner_of.get(v.name) {
                Some(Owner::LockedBy(by)) if by == v.locked_by => Some(0),
                Some(Owner::Acquisition(aid, token)) if *aid == v.acquisition_id => Some(*token),
                _ => None,
            })
            .collect())
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

    #[test]
    fn ms_floor() {
        assert_eq!(floor_ms_micros(1_234_567), 1_234_000);
        assert_eq!(floor_ms_micros(-1), -1000);
    }
}

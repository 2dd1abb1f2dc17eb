//! How a dialect runs a built statement: [`bind`] its values, and [`retry_transient`] after a
//! deadlock or serialization failure.

use sqlx::{AssertSqlSafe, Database, Encode, Type, error::DatabaseError, query::Query};

use crate::{ArgValues, DbErrorKind, Stmt, Value};

/// How often a statement rolled back by a deadlock or serialization failure is tried in all.
pub const TRANSIENT_ATTEMPTS: usize = 3;
/// Binds `values` to `stmt` for any `sqlx` database that takes text, bytes and 64-bit integers.
pub fn bind<'q, DB>(stmt: &Stmt, values: &ArgValues<'q>) -> Query<'q, DB, DB::Arguments>
where
    DB: Database,
    &'q str: Encode<'q, DB> + Type<DB>,
    &'q [u8]: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
{
    bind_values(sqlx::query(AssertSqlSafe(stmt.sql().clone())), stmt.values(values))
}

/// Binds `values` to `q`, in order: a statement whose text a dialect assembles itself (a batch's
/// rows, each bound with [`Stmt::values`]).
pub fn bind_values<'q, DB>(
    mut q: Query<'q, DB, DB::Arguments>,
    values: Vec<Value<'q>>,
) -> Query<'q, DB, DB::Arguments>
where
    DB: Database,
    &'q str: Encode<'q, DB> + Type<DB>,
    &'q [u8]: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
{
    for v in values {
        q = match v {
            Value::Text(s) => q.bind(s),
            Value::Bytes(b) => q.bind(b),
            Value::Int(i) => q.bind(i),
        };
    }
    q
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

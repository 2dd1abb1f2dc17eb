//! Mapping `sqlx` errors to [`shedlock::Error`].

use shedlock::Error;
use sqlx::error::DatabaseError;

/// How a dialect classifies a database error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DbErrorKind {
    /// The lock table (or its schema, or one of its columns) does not exist.
    MissingTable,
    /// The lock name was refused by the column (too long, bytes the column cannot store).
    NameRejected,
    /// A deadlock or serialization failure: the statement was rolled back and may be retried.
    Transient,
    /// The server is shutting down, refusing connections or out of connections.
    Unavailable,
    /// Anything else.
    Other,
}

/// What an error message needs to say.
#[derive(Debug, Clone, Copy)]
pub struct ErrorContext<'a> {
    /// The backend name (`postgres`, `mysql`, `sqlite`).
    pub backend: &'static str,
    /// The table, as configured.
    pub table: &'a str,
    /// The DDL that creates the table, quoted in the missing-table error.
    pub ddl: &'a str,
    /// The lock name, when the statement bound one.
    pub name: Option<&'a str>,
}

/// Maps a `sqlx` error: connection-level failures become [`Error::Unavailable`] (retryable),
/// a missing table becomes [`Error::Setup`] quoting the DDL, a refused name becomes
/// [`Error::InvalidName`], anything else [`Error::Backend`].
pub fn map_sqlx_error(
    ctx: &ErrorContext<'_>,
    err: sqlx::Error,
    classify: impl Fn(&dyn DatabaseError) -> DbErrorKind,
) -> Error {
    let backend = ctx.backend;
    match err {
        sqlx::Error::Database(db) => match classify(db.as_ref()) {
            DbErrorKind::MissingTable => Error::Setup {
                backend,
                message: format!(
                    "the lock table {:?} (or a column of it) does not exist: {}. Create it with \
                     the provider's create_table(), or run:\n{}",
                    ctx.table,
                    db.message(),
                    ctx.ddl
                ),
            },
            DbErrorKind::NameRejected => match ctx.name {
                Some(name) => Error::InvalidName {
                    backend,
                    name: name.to_owned(),
                    reason: format!("refused by the database: {}", db.message()),
                },
                None => Error::backend(backend, sqlx::Error::Database(db)),
            },
            DbErrorKind::Transient | DbErrorKind::Unavailable => {
                Error::unavailable(backend, sqlx::Error::Database(db))
            }
            DbErrorKind::Other => Error::backend(backend, sqlx::Error::Database(db)),
        },
        e @ (sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_)) => Error::unavailable(backend, e),
        e => Error::backend(backend, e),
    }
}

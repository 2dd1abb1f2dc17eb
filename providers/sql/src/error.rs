//! Mapping `sqlx` errors to [`shedlock::Error`].

use shedlock::Error;
use sqlx::error::DatabaseError;

/// How a dialect classifies a database error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DbErrorKind {
    /// The lock table (or its schema) does not exist.
    MissingTable,
    /// A column the statements name does not exist (e.g. the native mode on a table with
    /// ShedLock's four columns).
    MissingColumn,
    /// A NOT NULL column the statement does not write (e.g. the ShedLock-compatible mode on a
    /// table with the native schema's `acquisition_id` and `fencing_token`).
    MissingValue,
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
    /// Whether the provider runs in ShedLock-compatible mode (the table's expected layout).
    pub compat: bool,
}

/// Maps a `sqlx` error: connection-level failures become [`Error::Unavailable`] (retryable),
/// refused credentials become [`Error::Setup`] with the server's message, a missing table (or
/// a configuration error) becomes [`Error::Setup`] quoting the DDL, a
/// refused name becomes
/// [`Error::InvalidName`], anything else [`Error::Backend`].
pub fn map_sqlx_error(
    ctx: &ErrorContext<'_>,
    err: sqlx::Error,
    classify: impl Fn(&dyn DatabaseError) -> DbErrorKind,
) -> Error {
    let backend = ctx.backend;
    match err {
        // SQLSTATE class 28, invalid authorization (PostgreSQL's wrong password 28P01, MySQL's
        // and MariaDB's access denied 28000): the configuration's credentials, not a fault that
        // retrying mends. The server's own message, without the driver's decoration (sqlx
        // appends PostgreSQL's source line, which reads like a line of the user's SQL).
        // A SQLSTATE has five characters (SQLite's result codes are numbers: "2835" is not one).
        sqlx::Error::Database(db)
            if db.code().is_some_and(|c| c.len() == 5 && c.starts_with("28")) =>
        {
            Error::Setup {
                backend,
                message: format!(
                    "the server refused the connection's credentials (SQLSTATE {}): {}",
                    db.code().unwrap_or_default(),
                    db.message()
                ),
            }
        }
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
            DbErrorKind::MissingColumn if !ctx.compat => Error::Setup {
                backend,
                message: format!(
                    "the lock table {:?} lacks a column of the native schema: {}. If it is a \
                     ShedLock table (name, lock_until, locked_at, locked_by), build the provider \
                     with .shedlock_compatible() to share it with ShedLock nodes, or, once no \
                     ShedLock node uses it any more, migrate it to the native schema (README: \
                     \"Joining a ShedLock fleet\"). A new table is created by create_table():\n{}",
                    ctx.table,
                    db.message(),
                    ctx.ddl
                ),
            },
            DbErrorKind::MissingColumn => Error::Setup {
                backend,
                message: format!(
                    "the lock table {:?} lacks a column of ShedLock's layout (name, lock_until, \
                     locked_at, locked_by, or the configured column names): {}. ShedLock's \
                     table is created by create_table() in this mode:\n{}",
                    ctx.table,
                    db.message(),
                    ctx.ddl
                ),
            },
            DbErrorKind::MissingValue if ctx.compat => Error::Setup {
                backend,
                message: format!(
                    "the lock table {:?} has columns the ShedLock-compatible mode does not write \
                     ({}): it is a table in the native shedlock-rs schema (acquisition_id, \
                     fencing_token), which ShedLock nodes cannot write either. Use the native \
                     mode on it, or give the compatible mode a table with ShedLock's four \
                     columns:\n{}",
                    ctx.table,
                    db.message(),
                    ctx.ddl
                ),
            },
            DbErrorKind::MissingValue => Error::Setup {
                backend,
                message: format!(
                    "the lock table {:?} has a NOT NULL column without a default that the \
                     provider does not write: {}. Create the table with create_table(), or \
                     run:\n{}",
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
        // A configuration the provider cannot work with (a dialect's own checks report it so).
        sqlx::Error::Configuration(e) => Error::Setup { backend, message: e.to_string() },
        e => Error::backend(backend, e),
    }
}

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
    /// The database user lacks a privilege the statement needs (PostgreSQL `42501`
    /// insufficient_privilege; MySQL and MariaDB `1142` command denied on a table, `1143` on a
    /// column, `1044` access denied to a database, `1227` a specific privilege).
    PermissionDenied,
    /// Anything else.
    Other,
}

/// The provider call a statement runs for: named in errors, and it decides which privileges a
/// permission error asks for ([`privileges`](Call::privileges)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Call {
    /// `try_lock`.
    TryLock,
    /// A lock's `unlock`.
    Unlock,
    /// A lock's `extend`.
    Extend,
    /// `check`, which proves the privileges of locking.
    Check,
    /// `inspect`.
    Inspect,
    /// `list`.
    List,
    /// `force_release`.
    ForceRelease,
    /// `create_table`.
    CreateTable,
    /// The record helper `record`.
    Record,
    /// The record helper `write_record`.
    WriteRecord,
    /// The record helper `delete_record`.
    DeleteRecord,
}

impl Call {
    /// The call's name, as the caller wrote it (`try_lock`).
    pub fn label(self) -> &'static str {
        match self {
            Call::TryLock => "try_lock",
            Call::Unlock => "unlock",
            Call::Extend => "extend",
            Call::Check => "check",
            Call::Inspect => "inspect",
            Call::List => "list",
            Call::ForceRelease => "force_release",
            Call::CreateTable => "create_table",
            Call::Record => "record",
            Call::WriteRecord => "write_record",
            Call::DeleteRecord => "delete_record",
        }
    }

    /// The privileges the call's statements need, as a `GRANT` lists them: `SELECT, INSERT,
    /// UPDATE` on the lock table for locking (`try_lock`, `unlock`, `extend`, `check`,
    /// `write_record`), `SELECT` for reading (`inspect`, `list`, `record`), `SELECT, DELETE` for
    /// `force_release` and `delete_record` (each `DELETE` reads the row's columns in its
    /// `WHERE`), and `CREATE` for `create_table` (on the table in MySQL, on the schema in
    /// PostgreSQL: [`Dialect::grant`](crate::Dialect::grant) says where).
    pub fn privileges(self) -> &'static str {
        match self {
            Call::TryLock | Call::Unlock | Call::Extend | Call::Check | Call::WriteRecord => {
                "SELECT, INSERT, UPDATE"
            }
            Call::Inspect | Call::List | Call::Record => "SELECT",
            Call::ForceRelease | Call::DeleteRecord => "SELECT, DELETE",
            Call::CreateTable => "CREATE",
        }
    }

    /// What the privileges are for, in a message: `locking (try_lock, unlock, extend, check)`.
    fn purpose(self) -> &'static str {
        match self {
            Call::TryLock | Call::Unlock | Call::Extend | Call::Check => {
                "locking (try_lock, unlock, extend; check proves them)"
            }
            Call::WriteRecord => "write_record",
            Call::Inspect | Call::List | Call::Record => "reading locks (inspect, list, record)",
            Call::ForceRelease => "force_release",
            Call::DeleteRecord => "delete_record",
            Call::CreateTable => "create_table",
        }
    }
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
    /// The call the statement ran for.
    pub call: Call,
    /// The statement(s) that give the database user what `call` needs
    /// ([`Dialect::grant`](crate::Dialect::grant)), quoted in a permission error.
    pub grant: &'a str,
}

/// Maps a `sqlx` error: connection-level failures become [`Error::Unavailable`] (retryable),
/// refused credentials become [`Error::Setup`] with the server's message, a missing table (or
/// a configuration error) becomes [`Error::Setup`] quoting the DDL, a missing privilege
/// becomes [`Error::Setup`] naming the call, the privileges it needs and the `GRANT` that gives
/// them, a refused name becomes [`Error::InvalidName`], anything else [`Error::Backend`].
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
            DbErrorKind::PermissionDenied => {
                Error::Setup { backend, message: permission_denied(ctx, db.message()) }
            }
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

/// The message of a missing privilege: the server's words, the call, what it needs and the
/// `GRANT` to give it.
fn permission_denied(ctx: &ErrorContext<'_>, server: &str) -> String {
    let call = ctx.call;
    let (label, privileges, purpose) = (call.label(), call.privileges(), call.purpose());
    let what = if call == Call::CreateTable {
        format!("creating the lock table {:?} needs {privileges}", ctx.table)
    } else {
        format!(
            "the database user needs {privileges} on the lock table {:?} for {purpose}",
            ctx.table
        )
    };
    let alternative = if call == Call::CreateTable {
        " Or create the table once as a user that may (provider.ddl() in a migration), grant \
         the locking privileges on it, and do not call create_table() here: it needs CREATE \
         even when the table exists."
    } else {
        ""
    };
    format!(
        "{server} (in {label}): {what}: {}.{alternative} The provider's README lists the \
         privileges of every call (\"Permissions\").",
        ctx.grant
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx<'a>(call: Call, grant: &'a str) -> ErrorContext<'a> {
        ErrorContext { backend: "x", table: "s.t", ddl: "", name: None, compat: false, call, grant }
    }

    #[test]
    fn a_permission_error_names_the_call_its_privileges_and_the_grant() {
        let m = permission_denied(&ctx(Call::ForceRelease, "GRANT SELECT, DELETE ON s.t"), "no");
        assert!(
            m.starts_with(
                "no (in force_release): the database user needs SELECT, DELETE on the lock \
                 table \"s.t\" for force_release: GRANT SELECT, DELETE ON s.t."
            ),
            "{m}"
        );
        let m = permission_denied(&ctx(Call::CreateTable, "GRANT CREATE ON s.t"), "no");
        assert!(m.contains("creating the lock table \"s.t\" needs CREATE: GRANT CREATE"), "{m}");
        assert!(m.contains("even when the table exists"), "{m}");
    }

    #[test]
    fn locking_calls_need_select_insert_update_and_reading_select_only() {
        for call in [Call::TryLock, Call::Unlock, Call::Extend, Call::Check, Call::WriteRecord] {
            assert_eq!(call.privileges(), "SELECT, INSERT, UPDATE", "{call:?}");
        }
        for call in [Call::Inspect, Call::List, Call::Record] {
            assert_eq!(call.privileges(), "SELECT", "{call:?}");
        }
        assert_eq!(Call::ForceRelease.privileges(), "SELECT, DELETE");
        assert_eq!(Call::DeleteRecord.privileges(), "SELECT, DELETE");
        assert_eq!(Call::CreateTable.privileges(), "CREATE");
    }
}

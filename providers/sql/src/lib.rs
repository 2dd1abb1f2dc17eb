//! The generic SQL lock provider of [`shedlock`]: [`SqlLockProvider<D>`](SqlLockProvider) and
//! its builder, over any SQL database for which a [`Dialect`] exists.
//!
//! Use it through a dialect crate, which names the types for its database:
//! `shedlock-postgres` (`PostgresLockProvider = SqlLockProvider<PostgresDialect>`),
//! `shedlock-mysql` (MySQL and MariaDB) and `shedlock-sqlite`. To add a database (CockroachDB,
//! SQL Server, …), implement [`Dialect`] in a crate of your own and prove it with
//! `shedlock-conformance`; everything else is here, written once:
//!
//! - the builder ([`SqlLockProviderBuilder`]): table and column names, `locked_by`, the longest
//!   name, the time source, the clock, the operation timeout, and the dialect's own settings
//!   ([`DialectOption`], [`DedicatedConnection`], [`AsynchronousCommit`], [`UnloggedTable`],
//!   [`ShedlockTable`]);
//! - identifier validation ([`TableName`], [`Columns`]): table and column names are checked
//!   against `[A-Za-z_][A-Za-z0-9_]*` (at most [`MAX_IDENT_LEN`] bytes) and then quoted, so no
//!   unvalidated text is ever spliced into SQL;
//! - a small statement builder ([`StmtBuilder`]) that records which value goes into which
//!   placeholder, so statements are built once per provider and only bound per call;
//! - [`LockConn`]: lock statements on a connection of the provider's own, one round trip each;
//! - the mapping of `sqlx` errors to [`shedlock::Error`] (a missing table says how to create
//!   it), the `CREATE TABLE` race between nodes, and the record helpers
//!   ([`SqlLockProvider::record`], [`write_record`](SqlLockProvider::write_record), …);
//! - the lock flow itself: [`SqlLockProvider`] is a [`shedlock::store::LeaseStore`] on the
//!   table's rows, run by core's [`shedlock::store::StoreProvider`] (name checks, owner ids,
//!   timeouts, spans, lease validity).

mod builder;
mod compat;
mod conn;
mod dialect;
mod error;
mod exec;
mod ident;
mod provider;
mod record;
mod stmt;
mod store;

pub use builder::{DEFAULT_MAX_NAME_LEN, SqlLockProviderBuilder, check_max_name_len};
pub use compat::OWNER_SUFFIX_LEN;
pub use conn::LockConn;
pub use dialect::{
    AsynchronousCommit, DedicatedConnection, Dialect, DialectOption, Op, Settings, ShedlockTable,
    UnloggedTable,
};
pub use error::{Call, DbErrorKind, ErrorContext, map_sqlx_error};
pub use exec::{TRANSIENT_ATTEMPTS, bind, bind_values, retry_transient};
pub use ident::{Columns, MAX_IDENT_LEN, QuotedNames, TableName, validate_ident};
pub use provider::{RecordAdmin, SqlLockProvider};
pub use record::{Inspected, LockRecord, inspected_from_row, record_from_row, token_u64};
/// The default time limit of each lock operation: 10 s, as for every provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT;
/// The builder setters every provider shares (`operation_timeout`, `locked_by`, `clock`).
pub use shedlock::{ClockBuilder, ProviderBuilder};
pub use stmt::{Arg, ArgValues, Placeholder, Stmt, StmtBuilder, Value};

//! What a MySQL or MariaDB error number means to the provider ([`DbErrorKind`]).

use shedlock_sql::DbErrorKind;
use sqlx::{error::DatabaseError, mysql::MySqlDatabaseError};

pub(crate) fn classify(e: &dyn DatabaseError) -> DbErrorKind {
    let Some(e) = e.try_downcast_ref::<MySqlDatabaseError>() else {
        return DbErrorKind::Other;
    };
    match e.number() {
        // ER_NO_SUCH_TABLE, ER_BAD_DB_ERROR
        1146 | 1049 => DbErrorKind::MissingTable,
        // ER_BAD_FIELD_ERROR
        1054 => DbErrorKind::MissingColumn,
        // ER_NO_DEFAULT_FOR_FIELD, ER_BAD_NULL_ERROR: a NOT NULL column the statement does not
        // write (strict mode)
        1364 | 1048 => DbErrorKind::MissingValue,
        // ER_DATA_TOO_LONG, ER_TRUNCATED_WRONG_VALUE_FOR_FIELD
        1406 | 1366 => DbErrorKind::NameRejected,
        // ER_LOCK_DEADLOCK
        1213 => DbErrorKind::Transient,
        // ER_TABLEACCESS_DENIED_ERROR, ER_COLUMNACCESS_DENIED_ERROR, ER_DBACCESS_DENIED_ERROR,
        // ER_SPECIFIC_ACCESS_DENIED_ERROR
        1142 | 1143 | 1044 | 1227 => DbErrorKind::PermissionDenied,
        // ER_CON_COUNT_ERROR, ER_SERVER_SHUTDOWN, ER_CONNECTION_KILLED, ER_LOCK_WAIT_TIMEOUT,
        // ER_TOO_MANY_USER_CONNECTIONS
        1040 | 1053 | 1927 | 1205 | 1203 => DbErrorKind::Unavailable,
        _ => DbErrorKind::Other,
    }
}

//! What a PostgreSQL SQLSTATE means to the provider ([`DbErrorKind`]).

use shedlock_sql::DbErrorKind;
use sqlx::error::DatabaseError;

pub(crate) fn classify(e: &dyn DatabaseError) -> DbErrorKind {
    let code = e.code();
    match code.as_deref() {
        // undefined_table, invalid_schema_name
        Some("42P01" | "3F000") => DbErrorKind::MissingTable,
        // undefined_column
        Some("42703") => DbErrorKind::MissingColumn,
        // not_null_violation: a column the statement does not write
        Some("23502") => DbErrorKind::MissingValue,
        // string_data_right_truncation, character_not_in_repertoire, untranslatable_character
        Some("22001" | "22021" | "22P05") => DbErrorKind::NameRejected,
        // deadlock_detected, serialization_failure
        Some("40P01" | "40001") => DbErrorKind::Transient,
        // insufficient_privilege: on the table, or USAGE / CREATE on its schema
        Some("42501") => DbErrorKind::PermissionDenied,
        // connection exceptions, operator intervention (shutdown), insufficient resources
        Some(c) if c.starts_with("08") || c.starts_with("57P") || c.starts_with("53") => {
            DbErrorKind::Unavailable
        }
        _ => DbErrorKind::Other,
    }
}

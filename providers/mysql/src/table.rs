//! The `CREATE TABLE` statements: the native table, and ShedLock's for the compatible mode.

use shedlock_sql::QuotedNames;

/// ShedLock's documented MySQL / MariaDB table, with the name column `VARBINARY` sized to
/// `max_name_len` (ShedLock's is `VARCHAR(64)`, compared by the table's collation).
pub(crate) fn compat_ddl(n: &QuotedNames, max_name_len: usize) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {t} (\n    {name} VARBINARY({max_name_len}) NOT NULL,\n    \
         {lu} TIMESTAMP(3) NOT NULL,\n    \
         {la} TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),\n    \
         {lb} VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL,\n    PRIMARY KEY ({name})\n) ENGINE=InnoDB",
        t = n.table,
        name = n.name,
        lu = n.lock_until,
        la = n.locked_at,
        lb = n.locked_by,
    )
}

pub(crate) fn ddl(n: &QuotedNames, max_name_len: usize) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {t} (\n    {name} VARBINARY({max_name_len}) NOT NULL PRIMARY KEY,\n    \
         {lu} DATETIME(3) NOT NULL,\n    {la} DATETIME(3) NOT NULL,\n    \
         {lb} VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL,\n    {aid} BIGINT NOT NULL,\n    \
         {ft} BIGINT NOT NULL\n) ENGINE=InnoDB",
        t = n.table,
        name = n.name,
        lu = n.lock_until,
        la = n.locked_at,
        lb = n.locked_by,
        aid = n.acquisition_id,
        ft = n.fencing_token,
    )
}

//! The `CREATE TABLE` statements: the native table, and ShedLock's for the compatible mode, each
//! logged or unlogged.

use shedlock_sql::QuotedNames;

/// ShedLock's documented PostgreSQL table (its `VARCHAR(64)` name column sized to
/// `max_name_len` instead); `table` is `TABLE` or `UNLOGGED TABLE`.
pub(crate) fn compat_ddl(n: &QuotedNames, max_name_len: usize, table: &str) -> String {
    format!(
        "CREATE {table} IF NOT EXISTS {t} (\n    {name} VARCHAR({max_name_len}) NOT NULL,\n    \
         {lu} TIMESTAMP NOT NULL,\n    {la} TIMESTAMP NOT NULL,\n    \
         {lb} VARCHAR(255) NOT NULL,\n    PRIMARY KEY ({name})\n);",
        t = n.table,
        name = n.name,
        lu = n.lock_until,
        la = n.locked_at,
        lb = n.locked_by,
    )
}

/// The native table; `table` is `TABLE` or `UNLOGGED TABLE`.
pub(crate) fn ddl(n: &QuotedNames, max_name_len: usize, table: &str) -> String {
    format!(
        "CREATE {table} IF NOT EXISTS {t} (\n    {name} VARCHAR({max_name_len}) NOT NULL PRIMARY KEY,\n    \
         {lu} TIMESTAMPTZ NOT NULL,\n    {la} TIMESTAMPTZ NOT NULL,\n    \
         {lb} VARCHAR(255) NOT NULL,\n    {aid} BIGINT NOT NULL,\n    {ft} BIGINT NOT NULL\n);",
        t = n.table,
        name = n.name,
        lu = n.lock_until,
        la = n.locked_at,
        lb = n.locked_by,
        aid = n.acquisition_id,
        ft = n.fencing_token,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BACKEND, Columns};
    use shedlock_sql::TableName;

    fn names() -> QuotedNames {
        let table = TableName::parse(BACKEND, "shedlock").unwrap();
        QuotedNames::new(BACKEND, &table, &Columns::default(), '"').unwrap()
    }

    #[test]
    fn unlogged_changes_only_the_create() {
        let d = ddl(&names(), 100, "UNLOGGED TABLE");
        assert!(d.starts_with("CREATE UNLOGGED TABLE IF NOT EXISTS \"shedlock\" ("), "{d}");
        assert_eq!(d.replace("UNLOGGED ", ""), ddl(&names(), 100, "TABLE"));
        let c = compat_ddl(&names(), 64, "UNLOGGED TABLE");
        assert!(c.starts_with("CREATE UNLOGGED TABLE IF NOT EXISTS"), "{c}");
    }

    #[test]
    fn ddl_uses_max_len() {
        let d = ddl(&names(), 100, "TABLE");
        assert!(d.contains("\"name\" VARCHAR(100) NOT NULL PRIMARY KEY"), "{d}");
        assert!(d.contains("TIMESTAMPTZ"));
    }
}

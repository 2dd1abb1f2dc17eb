//! The statements of one table, flavor and mode, built once: the guarded upsert of the acquire
//! (and its probe over zero rows), unlock, extend, the reads of records and pages, and the record
//! helpers' writes.

use shedlock_sql::{Arg, Placeholder, QuotedNames, Stmt, StmtBuilder};

use crate::Flavor;

const STRICT: &str = "STRICT_ALL_TABLES";

pub(crate) struct Statements {
    pub(crate) flavor: Flavor,
    pub(crate) acquire: Stmt,
    /// The batch's upsert in three parts: before the rows, one row (its placeholders and
    /// arguments, repeated per name), after the rows (MariaDB: `RETURNING` each row's name and
    /// owner).
    pub(crate) batch_head: String,
    pub(crate) batch_row: Stmt,
    pub(crate) batch_tail: String,
    /// MySQL: the start of the read of the batch's rows' owners (`… IN (`), one
    /// [`batch_name`](Self::batch_name) per name.
    pub(crate) batch_owner_head: String,
    /// One name's placeholder, bound as the name column wants it (bytes or text).
    pub(crate) batch_name: Stmt,
    /// The acquire over zero rows, for `check`: the server checks its privileges, and it
    /// writes nothing.
    pub(crate) probe: Stmt,
    /// MySQL flavor: reads the owner id and token after the upsert.
    pub(crate) owner: Stmt,
    pub(crate) unlock: Stmt,
    pub(crate) extend: Stmt,
    pub(crate) select: Stmt,
    pub(crate) list: Stmt,
    pub(crate) delete: Stmt,
    pub(crate) write: Stmt,
    pub(crate) force_release: Stmt,
}

const EPOCH: &str = "CAST('1970-01-01 00:00:00' AS DATETIME(6))";
/// The server clock in microseconds since the epoch, UTC (fencing tokens always use it).
const SERVER_MICROS: &str =
    "TIMESTAMPDIFF(MICROSECOND, CAST('1970-01-01 00:00:00' AS DATETIME(6)), UTC_TIMESTAMP(6))";

fn now(b: &mut StmtBuilder, database: bool) {
    if database {
        b.sql("UTC_TIMESTAMP(3)");
    } else {
        b.sql("TIMESTAMPADD(MICROSECOND, ").arg(Arg::Now).sql(&format!(", {EPOCH})"));
    }
}

/// What a statement depends on besides the names and the flavor: whose clock it reads, and the
/// table layout (native, or ShedLock's four columns in the compatible mode).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mode {
    pub(crate) database: bool,
    pub(crate) compat: bool,
}

impl Mode {
    /// The owner check of unlock and extend: the acquisition id and token, or (compatible mode)
    /// the acquisition's own `locked_by`.
    fn owner_check(self, b: &mut StmtBuilder, n: &QuotedNames) {
        if self.compat {
            b.locked_by_check(n);
        } else {
            b.owner_check(n);
        }
    }
}

impl Statements {
    pub(crate) fn new(n: &QuotedNames, mode: Mode, flavor: Flavor) -> Self {
        let database = mode.database;
        let (t, name, lu, la, lb, aid, ft) = (
            &n.table,
            &n.name,
            &n.lock_until,
            &n.locked_at,
            &n.locked_by,
            &n.acquisition_id,
            &n.fencing_token,
        );
        let mariadb = flavor != Flavor::MySql;
        // Strict mode for this statement only, whatever the session's sql_mode.
        let (prefix, hint) = if mariadb {
            (format!("SET STATEMENT sql_mode = '{STRICT}' FOR "), String::new())
        } else {
            (String::new(), format!("/*+ SET_VAR(sql_mode = '{STRICT}') */ "))
        };
        let mut b = StmtBuilder::new(Placeholder::Question);
        // The native table's names are VARBINARY: bound as bytes, compared without a conversion.
        // ShedLock's table has a VARCHAR name compared by its collation, as ShedLock binds it:
        // text.
        b.binary_names(!mode.compat);

        let columns = if mode.compat {
            format!("{name}, {lu}, {la}, {lb}")
        } else {
            format!("{name}, {lu}, {la}, {lb}, {aid}, {ft}")
        };
        // One row's values: the name, lock_until, locked_at, locked_by (and the acquisition id
        // and the token seed).
        let row = |b: &mut StmtBuilder| {
            b.arg(Arg::Name).sql(", ");
            now(b, database);
            b.sql(" + INTERVAL ").arg(Arg::AtMost).sql(" MICROSECOND, ");
            now(b, database);
            b.sql(", ").arg(Arg::LockedBy);
            if !mode.compat {
                b.sql(", ").arg(Arg::AcquisitionId).sql(&format!(", {SERVER_MICROS}"));
            }
        };
        // What a conflicting row gets: the new values where it is free, else its own.
        let (on_duplicate, returning) = if mode.compat {
            // ShedLock's row, taken when it is free or already this acquisition's (a repeat
            // after a lost answer). `locked_by` is assigned first: once it is this
            // acquisition's, the later guards stay true; while it is someone else's, they
            // stay false. The acquire won iff the row's `locked_by` afterwards is this
            // acquisition's.
            let free = format!("({lu} <= VALUES({la}) OR {lb} = VALUES({lb}))");
            (
                format!(
                    " ON DUPLICATE KEY UPDATE \
                     {lb} = IF({free}, VALUES({lb}), {lb}), \
                     {la} = IF({free}, VALUES({la}), {la}), \
                     {lu} = IF({free}, VALUES({lu}), {lu})"
                ),
                lb.to_string(),
            )
        } else {
            let free = format!("{lu} <= VALUES({la})");
            (
                format!(
                    " ON DUPLICATE KEY UPDATE \
                     {ft} = IF({free}, GREATEST({ft} + 1, VALUES({ft})), {ft}), \
                     {lb} = IF({free}, VALUES({lb}), {lb}), \
                     {aid} = IF({free}, VALUES({aid}), {aid}), \
                     {la} = IF({free}, VALUES({la}), {la}), \
                     {lu} = IF({free}, VALUES({lu}), {lu})"
                ),
                format!("{aid}, {ft}"),
            )
        };
        // The upsert of the acquire's one row (`VALUES (…)`), or with `probe` of none (`SELECT
        // … FROM DUAL WHERE 0`): the probe of `check`, which the server runs through the same
        // privilege checks (INSERT, UPDATE, and SELECT on the columns the update reads).
        let upsert = |b: &mut StmtBuilder, probe: bool| {
            let (open, close) =
                if probe { ("SELECT ", " FROM DUAL WHERE 0") } else { ("VALUES (", ")") };
            b.sql(&format!("{prefix}INSERT {hint}INTO {t} ({columns}) {open}"));
            row(b);
            b.sql(close).sql(&on_duplicate);
            if mariadb {
                b.sql(&format!(" RETURNING {returning}"));
            }
            b.build()
        };
        let acquire = upsert(&mut b, false);
        let probe = upsert(&mut b, true);

        // The batch: the same upsert with one row per name (MariaDB returns each row's name and
        // owner; MySQL reads them after, `batch_owner`).
        let batch_head = format!("{prefix}INSERT {hint}INTO {t} ({columns}) VALUES ");
        b.sql("(");
        row(&mut b);
        let batch_row = b.sql(")").build();
        let batch_tail = if mariadb {
            format!("{on_duplicate} RETURNING {name}, {returning}")
        } else {
            on_duplicate.clone()
        };
        let batch_owner_head = format!("SELECT {name}, {returning} FROM {t} WHERE {name} IN (");
        let batch_name = b.arg(Arg::Name).build();

        let who = if mode.compat { lb.to_string() } else { format!("{aid}, {ft}") };
        b.sql(&format!("SELECT {who} FROM {t} WHERE {name} = ")).arg(Arg::Name);
        let owner = b.build();

        // Unlock: keep it until max(now, locked_at + at_least), never later than it was. Only old
        // values are read, so the result does not depend on assignment order.
        b.sql(&format!("{prefix}UPDATE {hint}{t} SET {lu} = LEAST({lu}, GREATEST("));
        now(&mut b, database);
        b.sql(&format!(", {la} + INTERVAL ")).arg(Arg::AtLeast).sql(" MICROSECOND))");
        mode.owner_check(&mut b, n);
        let unlock = b.build();

        b.sql(&format!("{prefix}UPDATE {hint}{t} SET {lu} = "));
        now(&mut b, database);
        b.sql(" + INTERVAL ").arg(Arg::AtMost).sql(&format!(" MICROSECOND, {la} = "));
        now(&mut b, database);
        mode.owner_check(&mut b, n);
        b.sql(&format!(" AND {lu} > "));
        now(&mut b, database);
        let extend = b.build();

        // The compatible mode's `TIMESTAMP` columns are read in the session time zone, as they
        // were written (the session zone is checked on first use).
        let owner_cols = if mode.compat {
            "CAST(0 AS SIGNED), CAST(0 AS SIGNED)".to_owned()
        } else {
            format!("{aid}, {ft}")
        };
        // The record's columns, then the server clock that judges it for inspection.
        let la_micros = format!("TIMESTAMPDIFF(MICROSECOND, {EPOCH}, {la})");
        let columns_read = format!(
            "{name}, TIMESTAMPDIFF(MICROSECOND, {EPOCH}, {lu}), {la_micros}, {lb}, {owner_cols}, \
             {SERVER_MICROS}"
        );
        b.sql(&format!("SELECT {columns_read} FROM {t} WHERE {name} = ")).arg(Arg::Name);
        let select = b.build();

        // A page of a listing: the prefix compared as a value (bytes: the name is VARBINARY),
        // never a pattern.
        b.sql(&format!("SELECT {columns_read} FROM {t}"))
            .page(n, &format!(" WHERE LEFT({name}, LENGTH("));
        let list = b.build();

        b.sql(&format!("DELETE FROM {t} WHERE {name} = ")).arg(Arg::Name);
        let delete = b.build();

        b.sql(&format!("DELETE FROM {t}")).seen_check(n, mode.compat, &la_micros);
        let force_release = b.build();

        b.sql(&format!("{prefix}INSERT {hint}INTO {t} ({columns}) VALUES ("))
            .arg(Arg::Name)
            .sql(", TIMESTAMPADD(MICROSECOND, ")
            .arg(Arg::Until)
            .sql(&format!(", {EPOCH}), TIMESTAMPADD(MICROSECOND, "))
            .arg(Arg::Until)
            .sql(&format!(", {EPOCH}), "))
            .arg(Arg::LockedBy);
        if mode.compat {
            b.sql(&format!(
                ") ON DUPLICATE KEY UPDATE {lb} = VALUES({lb}), {la} = VALUES({la}), \
                 {lu} = VALUES({lu})"
            ));
        } else {
            b.sql(", ").arg(Arg::AcquisitionId);
            b.sql(&format!(
                ", {SERVER_MICROS}) ON DUPLICATE KEY UPDATE \
                 {ft} = GREATEST({ft} + 1, VALUES({ft})), {lb} = VALUES({lb}), \
                 {aid} = VALUES({aid}), {la} = VALUES({la}), {lu} = VALUES({lu})"
            ));
        }
        let write = b.build();

        Self {
            flavor,
            acquire,
            batch_head,
            batch_row,
            batch_tail,
            batch_owner_head,
            batch_name,
            probe,
            owner,
            unlock,
            extend,
            select,
            list,
            delete,
            write,
            force_release,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BACKEND, Columns};
    use shedlock_sql::TableName;

    fn names() -> QuotedNames {
        let table = TableName::parse(BACKEND, "shedlock").unwrap();
        QuotedNames::new(BACKEND, &table, &Columns::default(), '`').unwrap()
    }

    #[test]
    fn lock_until_is_assigned_last_and_returned() {
        let s = Statements::new(&names(), Mode { database: true, compat: false }, Flavor::MariaDb);
        let sql = s.acquire.sql();
        assert!(
            sql.starts_with("SET STATEMENT sql_mode = 'STRICT_ALL_TABLES' FOR INSERT INTO"),
            "{sql}"
        );
        let (_, update) = sql.split_once("ON DUPLICATE KEY UPDATE").unwrap();
        let update = update.split(" RETURNING").next().unwrap();
        let last = update.rfind(" = IF(").unwrap();
        assert!(update[..last].ends_with("`lock_until`"), "{update}");
        assert!(sql.ends_with("RETURNING `acquisition_id`, `fencing_token`"), "{sql}");
        let m = Statements::new(&names(), Mode { database: true, compat: false }, Flavor::MySql);
        assert!(!m.acquire.sql().contains("RETURNING"));
        assert!(
            m.acquire
                .sql()
                .starts_with("INSERT /*+ SET_VAR(sql_mode = 'STRICT_ALL_TABLES') */ INTO")
        );
    }

    #[test]
    fn the_probe_of_check_is_the_acquire_over_zero_rows() {
        for compat in [false, true] {
            for flavor in [Flavor::MariaDb, Flavor::MySql] {
                let s = Statements::new(&names(), Mode { database: true, compat }, flavor);
                let probe = s.probe.sql();
                assert!(probe.contains(" FROM DUAL WHERE 0 ON DUPLICATE KEY UPDATE"), "{probe}");
                let one_row = probe.replacen(") SELECT ", ") VALUES (", 1).replacen(
                    " FROM DUAL WHERE 0 ON",
                    ") ON",
                    1,
                );
                assert_eq!(&one_row, &**s.acquire.sql(), "{flavor:?}, compat {compat}");
                assert_eq!(s.probe.args(), s.acquire.args());
            }
        }
    }

    #[test]
    fn a_batch_of_one_row_is_the_acquire_returning_the_name_too() {
        for compat in [false, true] {
            for database in [true, false] {
                let mode = Mode { database, compat };
                let m = Statements::new(&names(), mode, Flavor::MariaDb);
                let one = format!("{}{}{}", m.batch_head, m.batch_row.sql(), m.batch_tail);
                let acquire = m.acquire.sql().replacen(" RETURNING ", " RETURNING `name`, ", 1);
                assert_eq!(one, acquire, "{mode:?}");
                assert_eq!(m.batch_row.args(), m.acquire.args(), "{mode:?}");
                let y = Statements::new(&names(), mode, Flavor::MySql);
                let one = format!("{}{}{}", y.batch_head, y.batch_row.sql(), y.batch_tail);
                assert_eq!(one, &**y.acquire.sql(), "{mode:?}");
                assert!(y.batch_owner_head.starts_with("SELECT `name`, "), "{mode:?}");
                assert!(y.batch_owner_head.ends_with("WHERE `name` IN ("), "{mode:?}");
            }
        }
    }
}

//! The statements of one table and mode, built once: the upsert of the acquire (and its probe
//! over zero rows), unlock, extend, the reads of records and pages, and the record helpers'
//! writes.

use shedlock_sql::{Arg, Placeholder, QuotedNames, Stmt, StmtBuilder};

pub(crate) struct Statements {
    pub(crate) acquire: Stmt,
    /// The acquire of a batch: the same upsert over the rows of `unnest`ed arrays (names,
    /// at-most durations, `locked_by`s, acquisition ids), in name order, returning the name
    /// and token of each row won.
    pub(crate) acquire_many: Stmt,
    /// The acquire over zero rows, for `check`: the server checks its privileges, and it
    /// writes nothing.
    pub(crate) probe: Stmt,
    pub(crate) unlock: Stmt,
    pub(crate) extend: Stmt,
    pub(crate) select: Stmt,
    pub(crate) list: Stmt,
    pub(crate) delete: Stmt,
    pub(crate) write: Stmt,
    pub(crate) force_release: Stmt,
}

/// `now` as the statement sees it: the server's `now()` (statement start in autocommit), or the
/// client's time bound as microseconds since the epoch.
fn now(b: &mut StmtBuilder, database: bool) {
    if database {
        b.sql("now()");
    } else {
        b.sql("(timestamptz 'epoch' + ").arg(Arg::Now).sql(" * interval '1 microsecond')");
    }
}

/// The server clock in microseconds since the epoch (fencing tokens always use it).
const SERVER_MICROS: &str = "(extract(epoch from now()) * 1000000)::bigint";

/// What a statement depends on besides the names: whose clock it reads, and the table layout
/// (native, or ShedLock's four columns in the compatible mode).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mode {
    pub(crate) database: bool,
    pub(crate) compat: bool,
}

impl Mode {
    /// `now`: `timestamptz` in the native mode, a UTC `timestamp` in the compatible one.
    fn now(self, b: &mut StmtBuilder) {
        if self.compat { now_utc(b, self.database) } else { now(b, self.database) }
    }

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
    pub(crate) fn new(n: &QuotedNames, mode: Mode) -> Self {
        let (t, name, lu, la, lb, aid, ft) = (
            &n.table,
            &n.name,
            &n.lock_until,
            &n.locked_at,
            &n.locked_by,
            &n.acquisition_id,
            &n.fencing_token,
        );
        let mut b = StmtBuilder::new(Placeholder::Dollar);

        // Acquire: one statement whether or not the row exists. The row is taken when it is
        // free, or when it already belongs to this very acquisition: a repeat of the statement
        // after a lost answer (see `LockConn`) then gets the lock it took, not "held". In the
        // compatible mode it is ShedLock's own upsert, the acquisition told by its `locked_by`,
        // and no token (`0`).
        let columns = if mode.compat {
            format!("{name}, {lu}, {la}, {lb}")
        } else {
            format!("{name}, {lu}, {la}, {lb}, {aid}, {ft}")
        };
        // The upsert of the acquire's one row (`VALUES (…)`), or with `probe` of none (`SELECT
        // … WHERE false`): the probe of `check`, which the server runs through the same
        // privilege checks (INSERT, UPDATE, and SELECT on the columns the conflict clause and
        // RETURNING read).
        let upsert = |b: &mut StmtBuilder, probe: bool| {
            let (open, close) = if probe { ("SELECT ", " WHERE false") } else { ("VALUES (", ")") };
            b.sql(&format!("INSERT INTO {t} AS cur ({columns}) {open}")).arg(Arg::Name).sql(", ");
            mode.now(b);
            b.sql(" + ").arg(Arg::AtMost).sql(" * interval '1 microsecond', ");
            mode.now(b);
            b.sql(", ").arg(Arg::LockedBy);
            if mode.compat {
                b.sql(&format!(
                    "{close} ON CONFLICT ({name}) DO UPDATE SET {lu} = EXCLUDED.{lu}, \
                     {la} = EXCLUDED.{la}, {lb} = EXCLUDED.{lb} \
                     WHERE cur.{lu} <= EXCLUDED.{la} OR cur.{lb} = EXCLUDED.{lb} \
                     RETURNING 0::bigint"
                ));
            } else {
                b.sql(", ").arg(Arg::AcquisitionId);
                b.sql(&format!(
                    ", {SERVER_MICROS}{close} ON CONFLICT ({name}) DO UPDATE SET \
                     {lu} = EXCLUDED.{lu}, {la} = EXCLUDED.{la}, {lb} = EXCLUDED.{lb}, \
                     {aid} = EXCLUDED.{aid}, {ft} = greatest(cur.{ft} + 1, EXCLUDED.{ft}) \
                     WHERE cur.{lu} <= EXCLUDED.{la} OR cur.{aid} = EXCLUDED.{aid} \
                     RETURNING {ft}"
                ));
            }
            b.build()
        };
        let acquire = upsert(&mut b, false);
        let probe = upsert(&mut b, true);

        // The batch: one upsert over the arrays' rows, in name order (rows are locked in that
        // order, so concurrent batches cannot deadlock). A conflicting row that is held
        // elsewhere is neither inserted nor updated, so it is not returned.
        b.sql(&format!("INSERT INTO {t} AS cur ({columns}) SELECT v.n, "));
        mode.now(&mut b);
        b.sql(" + v.m * interval '1 microsecond', ");
        mode.now(&mut b);
        b.sql(", v.b");
        if !mode.compat {
            b.sql(&format!(", v.a, {SERVER_MICROS}"));
        }
        b.sql(" FROM unnest(").arg(Arg::Name).sql("::text[], ").arg(Arg::AtMost);
        b.sql("::bigint[], ").arg(Arg::LockedBy).sql("::text[], ").arg(Arg::AcquisitionId);
        b.sql("::bigint[]) AS v(n, m, b, a) ORDER BY v.n");
        if mode.compat {
            b.sql(&format!(
                " ON CONFLICT ({name}) DO UPDATE SET {lu} = EXCLUDED.{lu}, \
                 {la} = EXCLUDED.{la}, {lb} = EXCLUDED.{lb} \
                 WHERE cur.{lu} <= EXCLUDED.{la} OR cur.{lb} = EXCLUDED.{lb} \
                 RETURNING {name}, 0::bigint"
            ));
        } else {
            b.sql(&format!(
                " ON CONFLICT ({name}) DO UPDATE SET \
                 {lu} = EXCLUDED.{lu}, {la} = EXCLUDED.{la}, {lb} = EXCLUDED.{lb}, \
                 {aid} = EXCLUDED.{aid}, {ft} = greatest(cur.{ft} + 1, EXCLUDED.{ft}) \
                 WHERE cur.{lu} <= EXCLUDED.{la} OR cur.{aid} = EXCLUDED.{aid} \
                 RETURNING {name}, {ft}"
            ));
        }
        let acquire_many = b.build();

        // Unlock: keep it until max(now, locked_at + at_least), never later than it was.
        b.sql(&format!("UPDATE {t} SET {lu} = least({lu}, greatest("));
        mode.now(&mut b);
        b.sql(&format!(", {la} + ")).arg(Arg::AtLeast).sql(" * interval '1 microsecond'))");
        mode.owner_check(&mut b, n);
        let unlock = b.build();

        // Extend: only while still held by this acquisition.
        b.sql(&format!("UPDATE {t} SET {lu} = "));
        mode.now(&mut b);
        b.sql(" + ").arg(Arg::AtMost).sql(&format!(" * interval '1 microsecond', {la} = "));
        mode.now(&mut b);
        mode.owner_check(&mut b, n);
        b.sql(&format!(" AND {lu} > "));
        mode.now(&mut b);
        let extend = b.build();

        // `extract(epoch from ...)` reads a `timestamp` (compatible mode) as UTC.
        let owner =
            if mode.compat { "0::bigint, 0::bigint".to_owned() } else { format!("{aid}, {ft}") };
        // The record's columns, then the server clock that judges it for inspection.
        let la_micros = format!("(extract(epoch from {la}) * 1000000)::bigint");
        let columns_read = format!(
            "{name}, (extract(epoch from {lu}) * 1000000)::bigint, {la_micros}, {lb}, {owner}, \
             {SERVER_MICROS}"
        );
        b.sql(&format!("SELECT {columns_read} FROM {t} WHERE {name} = ")).arg(Arg::Name);
        let select = b.build();

        // A page of a listing: the prefix compared as a value, never a pattern.
        b.sql(&format!("SELECT {columns_read} FROM {t}"))
            .page(n, &format!(" WHERE left({name}, length("));
        let list = b.build();

        b.sql(&format!("DELETE FROM {t} WHERE {name} = ")).arg(Arg::Name);
        let delete = b.build();

        b.sql(&format!("DELETE FROM {t}")).seen_check(n, mode.compat, &la_micros);
        let force_release = b.build();

        let epoch = if mode.compat { "timestamp 'epoch'" } else { "timestamptz 'epoch'" };
        b.sql(&format!("INSERT INTO {t} AS cur ({columns}) VALUES ("))
            .arg(Arg::Name)
            .sql(&format!(", {epoch} + "))
            .arg(Arg::Until)
            .sql(&format!(" * interval '1 microsecond', {epoch} + "))
            .arg(Arg::Until)
            .sql(" * interval '1 microsecond', ")
            .arg(Arg::LockedBy);
        if mode.compat {
            b.sql(&format!(
                ") ON CONFLICT ({name}) DO UPDATE SET {lu} = EXCLUDED.{lu}, {la} = EXCLUDED.{la}, \
                 {lb} = EXCLUDED.{lb}"
            ));
        } else {
            b.sql(", ").arg(Arg::AcquisitionId);
            b.sql(&format!(
                ", {SERVER_MICROS}) ON CONFLICT ({name}) DO UPDATE SET {lu} = EXCLUDED.{lu}, \
                 {la} = EXCLUDED.{la}, {lb} = EXCLUDED.{lb}, {aid} = EXCLUDED.{aid}, \
                 {ft} = greatest(cur.{ft} + 1, EXCLUDED.{ft})"
            ));
        }
        let write = b.build();

        Self {
            acquire,
            acquire_many,
            probe,
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

/// `now` in the ShedLock-compatible mode: a `TIMESTAMP` in UTC, ShedLock's
/// `timezone('utc', CURRENT_TIMESTAMP)` (the server's statement time), or the client's time.
fn now_utc(b: &mut StmtBuilder, database: bool) {
    if database {
        b.sql("timezone('utc', now())");
    } else {
        b.sql("(timestamp 'epoch' + ").arg(Arg::Now).sql(" * interval '1 microsecond')");
    }
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
    fn acquire_is_one_upsert() {
        let s = Statements::new(&names(), Mode { database: true, compat: false });
        let sql = s.acquire.sql();
        assert!(sql.starts_with("INSERT INTO \"shedlock\" AS cur"), "{sql}");
        assert!(sql.contains("ON CONFLICT (\"name\") DO UPDATE"), "{sql}");
        assert!(sql.ends_with("RETURNING \"fencing_token\""), "{sql}");
        assert!(
            sql.contains(
                "WHERE cur.\"lock_until\" <= EXCLUDED.\"locked_at\" \
                 OR cur.\"acquisition_id\" = EXCLUDED.\"acquisition_id\""
            ),
            "{sql}"
        );
        assert_eq!(s.acquire.args(), &[Arg::Name, Arg::AtMost, Arg::LockedBy, Arg::AcquisitionId]);
        // The probe of `check` is the same upsert over zero rows.
        let probe = s.probe.sql();
        let one_row =
            probe.replacen(" SELECT ", " VALUES (", 1).replacen(" WHERE false ON", ") ON", 1);
        assert_eq!(&one_row, &**sql);
        assert_eq!(s.probe.args(), s.acquire.args());
        let c = Statements::new(&names(), Mode { database: false, compat: false });
        assert!(c.acquire.args().contains(&Arg::Now));
    }

    #[test]
    fn the_batch_is_one_upsert_over_arrays_in_name_order_returning_the_rows_won() {
        let s = Statements::new(&names(), Mode { database: true, compat: false });
        let sql = s.acquire_many.sql();
        assert!(sql.starts_with("INSERT INTO \"shedlock\" AS cur"), "{sql}");
        assert!(
            sql.contains("FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[])"),
            "{sql}"
        );
        assert!(sql.contains("ORDER BY v.n ON CONFLICT"), "{sql}");
        assert!(
            sql.contains(
                "WHERE cur.\"lock_until\" <= EXCLUDED.\"locked_at\" \
                 OR cur.\"acquisition_id\" = EXCLUDED.\"acquisition_id\""
            ),
            "{sql}"
        );
        assert!(sql.ends_with("RETURNING \"name\", \"fencing_token\""), "{sql}");
        assert_eq!(
            s.acquire_many.args(),
            &[Arg::Name, Arg::AtMost, Arg::LockedBy, Arg::AcquisitionId]
        );
        let client = Statements::new(&names(), Mode { database: false, compat: false });
        assert_eq!(client.acquire_many.args()[0], Arg::Now);
        let compat = Statements::new(&names(), Mode { database: true, compat: true });
        assert!(compat.acquire_many.sql().ends_with("RETURNING \"name\", 0::bigint"));
    }
}

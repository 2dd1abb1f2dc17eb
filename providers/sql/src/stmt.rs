//! A statement builder that records which value goes into which placeholder.

use std::sync::Arc;

use crate::QuotedNames;

/// How a dialect writes placeholders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholder {
    /// `$1`, `$2`, ... (PostgreSQL). A value used twice reuses its number.
    Dollar,
    /// `?` (MySQL, SQLite). A value used twice is bound twice.
    Question,
}

/// A value a statement takes. The provider supplies the values in an [`ArgValues`] and binds
/// them in the order of [`Stmt::args`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    /// The lock name (text).
    Name,
    /// The configured `locked_by` (text).
    LockedBy,
    /// This acquisition's owner id (integer).
    AcquisitionId,
    /// This acquisition's fencing token (integer).
    FencingToken,
    /// The client's current time (integer, dialect units), client-time mode only.
    Now,
    /// `lock_at_most_for` (integer, dialect units).
    AtMost,
    /// `lock_at_least_for` (integer, dialect units).
    AtLeast,
    /// An absolute `lock_until` (integer, dialect units), for planting records.
    Until,
    /// This process's wall clock in microseconds since the epoch (integer): the database's own
    /// clock for an embedded database, which reads the same host clock at a coarser grain.
    ClockMicros,
    /// The name prefix of a listing (text).
    Prefix,
    /// The name a page of a listing starts after (text; empty for the first page).
    After,
    /// The most rows a page of a listing returns (integer).
    Limit,
    /// The `locked_at` a forced release expects, in microseconds since the epoch as the
    /// dialect's select reads it (integer; 0: any).
    LockedAt,
}

/// The values for one execution. Integers are in the dialect's units (chosen by the provider).
#[derive(Debug, Clone, Default)]
pub struct ArgValues<'a> {
    /// The lock name.
    pub name: &'a str,
    /// `locked_by`.
    pub locked_by: &'a str,
    /// The owner id.
    pub acquisition_id: i64,
    /// The fencing token.
    pub fencing_token: i64,
    /// The client's current time.
    pub now: i64,
    /// `lock_at_most_for`.
    pub at_most: i64,
    /// `lock_at_least_for`.
    pub at_least: i64,
    /// An absolute `lock_until`.
    pub until: i64,
    /// This process's wall clock in microseconds.
    pub clock_micros: i64,
    /// The name prefix of a listing.
    pub prefix: &'a str,
    /// The name a page starts after.
    pub after: &'a str,
    /// The most rows of a page.
    pub limit: i64,
    /// The `locked_at` a forced release expects (µs; 0: any).
    pub locked_at: i64,
}

/// A bound value, as the provider should bind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Text.
    Text(&'a str),
    /// Bytes: a name, prefix or cursor bound to a binary name column (see
    /// [`StmtBuilder::binary_names`]).
    Bytes(&'a [u8]),
    /// A 64-bit integer.
    Int(i64),
}

impl<'a> ArgValues<'a> {
    /// The value of `arg`.
    pub fn get(&self, arg: Arg) -> Value<'a> {
        match arg {
            Arg::Name => Value::Text(self.name),
            Arg::LockedBy => Value::Text(self.locked_by),
            Arg::AcquisitionId => Value::Int(self.acquisition_id),
            Arg::FencingToken => Value::Int(self.fencing_token),
            Arg::Now => Value::Int(self.now),
            Arg::AtMost => Value::Int(self.at_most),
            Arg::AtLeast => Value::Int(self.at_least),
            Arg::Until => Value::Int(self.until),
            Arg::ClockMicros => Value::Int(self.clock_micros),
            Arg::Prefix => Value::Text(self.prefix),
            Arg::After => Value::Text(self.after),
            Arg::Limit => Value::Int(self.limit),
            Arg::LockedAt => Value::Int(self.locked_at),
        }
    }
}

/// A built statement: SQL text and the values it takes, in placeholder order.
#[derive(Debug, Clone)]
pub struct Stmt {
    sql: Arc<str>,
    args: Vec<Arg>,
    binary_names: bool,
}

impl Stmt {
    /// The SQL text.
    pub fn sql(&self) -> &Arc<str> {
        &self.sql
    }

    /// The values to bind, in order.
    pub fn args(&self) -> &[Arg] {
        &self.args
    }

    /// The values to bind for `values`, in order.
    pub fn values<'a>(&self, values: &ArgValues<'a>) -> Vec<Value<'a>> {
        self.args
            .iter()
            .map(|a| match (values.get(*a), a) {
                (Value::Text(t), Arg::Name | Arg::Prefix | Arg::After) if self.binary_names => {
                    Value::Bytes(t.as_bytes())
                }
                (v, _) => v,
            })
            .collect()
    }
}

/// Builds a [`Stmt`].
#[derive(Debug)]
pub struct StmtBuilder {
    style: Placeholder,
    sql: String,
    args: Vec<Arg>,
    binary_names: bool,
}

impl StmtBuilder {
    /// An empty statement.
    pub fn new(style: Placeholder) -> Self {
        Self { style, sql: String::new(), args: Vec::new(), binary_names: false }
    }

    /// Whether the statements built from now on bind the lock name, a listing's prefix and its
    /// cursor as bytes ([`Value::Bytes`]) instead of text: for a binary name column (MySQL's
    /// `VARBINARY`), where a text parameter costs the server a conversion on every comparison
    /// (measured: about 9 % of a MariaDB lock cycle).
    pub fn binary_names(&mut self, binary: bool) -> &mut Self {
        self.binary_names = binary;
        self
    }

    /// Appends SQL text (which must not contain placeholders).
    pub fn sql(&mut self, s: &str) -> &mut Self {
        self.sql.push_str(s);
        self
    }

    /// Appends a placeholder for `arg`.
    pub fn arg(&mut self, arg: Arg) -> &mut Self {
        match self.style {
            Placeholder::Question => {
                self.args.push(arg);
                self.sql.push('?');
            }
            Placeholder::Dollar => {
                let n = match self.args.iter().position(|a| *a == arg) {
                    Some(i) => i + 1,
                    None => {
                        self.args.push(arg);
                        self.args.len()
                    }
                };
                self.sql.push('$');
                self.sql.push_str(&n.to_string());
            }
        }
        self
    }

    /// Appends the owner check of unlock and extend: ` WHERE name = ? AND acquisition_id = ?
    /// AND fencing_token = ?` (the row is changed only while this acquisition holds it).
    pub fn owner_check(&mut self, n: &QuotedNames) -> &mut Self {
        self.sql(&format!(" WHERE {} = ", n.name)).arg(Arg::Name);
        self.sql(&format!(" AND {} = ", n.acquisition_id)).arg(Arg::AcquisitionId);
        self.sql(&format!(" AND {} = ", n.fencing_token)).arg(Arg::FencingToken)
    }

    /// Appends the owner check of the ShedLock-compatible mode: ` WHERE name = ? AND locked_by
    /// = ?` (each acquisition writes a `locked_by` of its own there; see [`shedlock::store::Owner`]).
    pub fn locked_by_check(&mut self, n: &QuotedNames) -> &mut Self {
        self.sql(&format!(" WHERE {} = ", n.name)).arg(Arg::Name);
        self.sql(&format!(" AND {} = ", n.locked_by)).arg(Arg::LockedBy)
    }

    /// Appends the condition and order of a listing page after `head`, the dialect's
    /// ` WHERE <the name's first length(prefix) characters>` up to the prefix placeholder (e.g.
    /// ` WHERE left(name, length(`): `?)) = ? AND name > ? ORDER BY name LIMIT ?`, the prefix
    /// compared as a value, never as a `LIKE` pattern.
    pub fn page(&mut self, n: &QuotedNames, head: &str) -> &mut Self {
        self.sql(head).arg(Arg::Prefix).sql(")) = ").arg(Arg::Prefix);
        self.sql(&format!(" AND {} > ", n.name)).arg(Arg::After);
        self.sql(&format!(" ORDER BY {} LIMIT ", n.name)).arg(Arg::Limit)
    }

    /// Appends the condition of a forced release: ` WHERE name = ? AND acquisition_id = ?`, or
    /// in the ShedLock-compatible mode (`compat`) ` WHERE name = ? AND locked_by = ? AND (? = 0
    /// OR <locked_at_micros> = ?)`, where `locked_at_micros` is the dialect's expression of the
    /// `locked_at` column in microseconds, exactly as its select reads it.
    pub fn seen_check(
        &mut self,
        n: &QuotedNames,
        compat: bool,
        locked_at_micros: &str,
    ) -> &mut Self {
        self.sql(&format!(" WHERE {} = ", n.name)).arg(Arg::Name);
        if !compat {
            return self.sql(&format!(" AND {} = ", n.acquisition_id)).arg(Arg::AcquisitionId);
        }
        self.sql(&format!(" AND {} = ", n.locked_by)).arg(Arg::LockedBy);
        self.sql(" AND (").arg(Arg::LockedAt).sql(&format!(" = 0 OR {locked_at_micros} = "));
        self.arg(Arg::LockedAt).sql(")")
    }

    /// Finishes.
    pub fn build(&mut self) -> Stmt {
        Stmt {
            sql: Arc::from(std::mem::take(&mut self.sql)),
            args: std::mem::take(&mut self.args),
            binary_names: self.binary_names,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_names_bind_the_name_prefix_and_cursor_as_bytes_and_nothing_else() {
        let mut b = StmtBuilder::new(Placeholder::Question);
        b.binary_names(true);
        b.sql("x ").arg(Arg::Name).arg(Arg::LockedBy).arg(Arg::Prefix).arg(Arg::After);
        let stmt = b.arg(Arg::AcquisitionId).build();
        let v = ArgValues {
            name: "job",
            locked_by: "me",
            prefix: "jo",
            after: "a",
            acquisition_id: 7,
            ..ArgValues::default()
        };
        assert_eq!(
            stmt.values(&v),
            [
                Value::Bytes(b"job"),
                Value::Text("me"),
                Value::Bytes(b"jo"),
                Value::Bytes(b"a"),
                Value::Int(7)
            ]
        );
        b.binary_names(false);
        let text = b.arg(Arg::Name).build();
        assert_eq!(text.values(&v), [Value::Text("job")]);
    }

    #[test]
    fn dollar_reuses_numbers() {
        let s = StmtBuilder::new(Placeholder::Dollar)
            .sql("a=")
            .arg(Arg::Name)
            .sql(" b=")
            .arg(Arg::Now)
            .sql(" c=")
            .arg(Arg::Name)
            .build();
        assert_eq!(&**s.sql(), "a=$1 b=$2 c=$1");
        assert_eq!(s.args(), &[Arg::Name, Arg::Now]);
    }

    #[test]
    fn question_repeats() {
        let s = StmtBuilder::new(Placeholder::Question)
            .sql("a=")
            .arg(Arg::Now)
            .sql(" b=")
            .arg(Arg::Now)
            .build();
        assert_eq!(&**s.sql(), "a=? b=?");
        let v = ArgValues { now: 7, ..Default::default() };
        assert_eq!(s.values(&v), vec![Value::Int(7), Value::Int(7)]);
    }
}

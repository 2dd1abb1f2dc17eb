//! Table and column names: validated as plain identifiers, then quoted.

use shedlock::Error;

/// The longest identifier accepted, in bytes (PostgreSQL's limit; MySQL allows 64).
pub const MAX_IDENT_LEN: usize = 63;

/// Checks that `ident` is a plain SQL identifier: an ASCII letter or `_`, then ASCII letters,
/// digits or `_`, at most [`MAX_IDENT_LEN`] bytes. `what` names it in the error.
pub fn validate_ident(backend: &'static str, what: &str, ident: &str) -> Result<(), Error> {
    let mut chars = ident.chars();
    let ok_first = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let ok_rest = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok_first && ok_rest && ident.len() <= MAX_IDENT_LEN {
        Ok(())
    } else {
        Err(Error::Setup {
            backend,
            message: format!(
                "{what} {ident:?} is not a valid identifier: use 1 to {MAX_IDENT_LEN} ASCII \
                 letters, digits or '_', not starting with a digit"
            ),
        })
    }
}

/// A table name, optionally qualified by a schema (PostgreSQL schema, MySQL database, SQLite
/// attached database): `table` or `schema.table`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    schema: Option<String>,
    table: String,
}

impl TableName {
    /// Parses and validates `table` or `schema.table`.
    pub fn parse(backend: &'static str, s: &str) -> Result<Self, Error> {
        match s.split_once('.') {
            None => {
                validate_ident(backend, "table name", s)?;
                Ok(Self { schema: None, table: s.to_owned() })
            }
            Some((schema, table)) => {
                validate_ident(backend, "schema name", schema)?;
                validate_ident(backend, "table name", table)?;
                Ok(Self { schema: Some(schema.to_owned()), table: table.to_owned() })
            }
        }
    }

    /// The schema, if qualified.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// The unqualified table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The quoted, possibly qualified name, e.g. `"public"."shedlock"`.
    pub fn quoted(&self, quote: char) -> String {
        match &self.schema {
            Some(schema) => format!("{q}{schema}{q}.{q}{t}{q}", q = quote, t = self.table),
            None => format!("{q}{t}{q}", q = quote, t = self.table),
        }
    }
}

/// The column names of the lock table. Defaults: `name`, `lock_until`, `locked_at`,
/// `locked_by`, `acquisition_id`, `fencing_token`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Columns {
    /// The lock name (primary key).
    pub name: String,
    /// Until when the lock is held.
    pub lock_until: String,
    /// When the current acquisition or extension happened.
    pub locked_at: String,
    /// Who holds it (informational).
    pub locked_by: String,
    /// The per-acquisition owner token.
    pub acquisition_id: String,
    /// The fencing token.
    pub fencing_token: String,
}

impl Default for Columns {
    fn default() -> Self {
        Self {
            name: "name".into(),
            lock_until: "lock_until".into(),
            locked_at: "locked_at".into(),
            locked_by: "locked_by".into(),
            acquisition_id: "acquisition_id".into(),
            fencing_token: "fencing_token".into(),
        }
    }
}

impl Columns {
    /// Sets the name column.
    #[must_use]
    pub fn with_name(mut self, c: impl Into<String>) -> Self {
        self.name = c.into();
        self
    }

    /// Sets the lock_until column.
    #[must_use]
    pub fn with_lock_until(mut self, c: impl Into<String>) -> Self {
        self.lock_until = c.into();
        self
    }

    /// Sets the locked_at column.
    #[must_use]
    pub fn with_locked_at(mut self, c: impl Into<String>) -> Self {
        self.locked_at = c.into();
        self
    }

    /// Sets the locked_by column.
    #[must_use]
    pub fn with_locked_by(mut self, c: impl Into<String>) -> Self {
        self.locked_by = c.into();
        self
    }

    /// Sets the acquisition_id column.
    #[must_use]
    pub fn with_acquisition_id(mut self, c: impl Into<String>) -> Self {
        self.acquisition_id = c.into();
        self
    }

    /// Sets the fencing_token column.
    #[must_use]
    pub fn with_fencing_token(mut self, c: impl Into<String>) -> Self {
        self.fencing_token = c.into();
        self
    }

    fn all(&self) -> [(&'static str, &str); 6] {
        [
            ("name column", &self.name),
            ("lock_until column", &self.lock_until),
            ("locked_at column", &self.locked_at),
            ("locked_by column", &self.locked_by),
            ("acquisition_id column", &self.acquisition_id),
            ("fencing_token column", &self.fencing_token),
        ]
    }

    /// Validates every column name and checks that they are distinct (case-insensitively, as
    /// MySQL and SQLite compare column names).
    pub fn validate(&self, backend: &'static str) -> Result<(), Error> {
        let all = self.all();
        for (what, c) in all {
            validate_ident(backend, what, c)?;
        }
        for (i, (what_a, a)) in all.iter().enumerate() {
            for (what_b, b) in &all[i + 1..] {
                if a.eq_ignore_ascii_case(b) {
                    return Err(Error::Setup {
                        backend,
                        message: format!("{what_a} and {what_b} are both {a:?}"),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Table and column names, validated and quoted, ready to splice into SQL.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct QuotedNames {
    /// The table.
    pub table: String,
    /// The unquoted table name, for messages.
    pub table_display: String,
    /// The name column.
    pub name: String,
    /// The lock_until column.
    pub lock_until: String,
    /// The locked_at column.
    pub locked_at: String,
    /// The locked_by column.
    pub locked_by: String,
    /// The acquisition_id column.
    pub acquisition_id: String,
    /// The fencing_token column.
    pub fencing_token: String,
}

impl QuotedNames {
    /// Validates `columns` and quotes everything with `quote` (`"` or `` ` ``).
    pub fn new(
        backend: &'static str,
        table: &TableName,
        columns: &Columns,
        quote: char,
    ) -> Result<Self, Error> {
        columns.validate(backend)?;
        let q = |s: &str| format!("{quote}{s}{quote}");
        Ok(Self {
            table: table.quoted(quote),
            table_display: match table.schema() {
                Some(s) => format!("{s}.{}", table.table()),
                None => table.table().to_owned(),
            },
            name: q(&columns.name),
            lock_until: q(&columns.lock_until),
            locked_at: q(&columns.locked_at),
            locked_by: q(&columns.locked_by),
            acquisition_id: q(&columns.acquisition_id),
            fencing_token: q(&columns.fencing_token),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        let good = ["shedlock", "_x", "ShedLock", "a1_b2", &"a".repeat(63)];
        for g in good {
            assert!(validate_ident("t", "x", g).is_ok(), "{g}");
        }
        let long = "a".repeat(64);
        let bad = [
            "", "1abc", "a-b", "a b", "a;drop", "a\"b", "a`b", "a'b", "a.b", "é", "a\0", "--", "%",
            &long,
        ];
        for b in bad {
            assert!(matches!(validate_ident("t", "x", b), Err(Error::Setup { .. })), "{b:?}");
        }
    }

    #[test]
    fn tables() {
        assert_eq!(
            TableName::parse("t", "s.t").map(|t| t.quoted('"')).ok(),
            Some("\"s\".\"t\"".into())
        );
        assert_eq!(TableName::parse("t", "t").map(|t| t.quoted('`')).ok(), Some("`t`".into()));
        for bad in ["a.b.c", ".t", "s.", "s.t;", "a\".b"] {
            assert!(TableName::parse("t", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn columns_distinct() {
        let mut c = Columns::default();
        assert!(c.validate("t").is_ok());
        c.locked_at = "Lock_Until".into();
        assert!(c.validate("t").is_err());
    }
}

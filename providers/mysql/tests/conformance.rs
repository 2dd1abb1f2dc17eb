//! The shedlock conformance suite (C01–C28) against a real MariaDB server, provider name
//! `mariadb` (database time, one-statement `RETURNING` acquire).
//!
//! - `SHEDLOCK_SQL_TIME=client` runs the client-time mode instead (`mariadb-client-time`), to
//!   show what the skew checks detect.
//! - `SHEDLOCK_MYSQL_FLAVOR=mysql` runs the MySQL code path (upsert, then a primary-key
//!   `SELECT`; no `RETURNING`) against MariaDB (`mariadb-mysql-flavor`).
//!
//! Each instance has its own pool (like a separate node). The hooks give the kit raw row access
//! (C14), the server address for its fault proxy (C24) and a restart of the server (C25) —
//! unless the server comes from `SHEDLOCK_MARIADB_URL` (as under `cargo xtask test`): a server this
//! process does not own cannot be restarted, so C25 is then expected to be "not applicable".
//! Every other check must pass.

mod maria_conformance;

fn main() -> std::process::ExitCode {
    maria_conformance::main(false)
}

//! The shedlock conformance suite (C01–C32) against a real MariaDB server, one suite per mode
//! (`cargo test --test conformance -- mariadb-client-time::` runs one):
//!
//! - `mariadb`: database time, one-statement `RETURNING` acquire;
//! - `mariadb-client-time`: the instances' own clocks, to show what the skew checks detect;
//! - `mariadb-mysql-flavor`: the MySQL code path (upsert, then a primary-key `SELECT`; no
//!   `RETURNING`) against MariaDB;
//! - `mariadb-shedlock-compat`: ShedLock's table (C20/C21 unsupported: no token);
//! - `mariadb-secure`: the native mode against a server that takes only TLS connections, as a
//!   user with only the grants of the README's "Permissions" section.
//!
//! Each instance has its own pool (like a separate node). The hooks give the kit raw row access
//! (C14), the server address for its fault proxy (C24) and a restart of the server (C25) —
//! unless the server comes from `SHEDLOCK_MARIADB_URL` (as under `cargo xtask test`): a server this
//! process does not own cannot be restarted, so C25 is then expected to be "not applicable".
//! Every other check must pass.

mod maria_conformance;

use maria_conformance::{secure_suite, suite};

fn main() -> std::process::ExitCode {
    shedlock_conformance::harness_suites(vec![
        // A client cut off from the one server while its lease runs out (and the others).
        suite(false, false, false).with_faults(shedlock_test_support::faults::plan(
            "mariadb",
            shedlock_launcher::Backend::MariaDb,
            shedlock_launcher::Backend::MariaDb,
        )),
        suite(false, true, false),
        suite(false, false, true),
        suite(true, false, false),
        secure_suite(),
    ])
}

//! The shedlock conformance suite (C01–C32) against a real PostgreSQL server, one suite per mode
//! (`cargo test --test conformance -- postgres-client-time::` runs one):
//!
//! - `postgres`: database time, one-statement upsert acquire;
//! - `postgres-client-time`: the instances' own clocks, to show what the skew checks detect;
//! - `postgres-shedlock-compat`: ShedLock's table (C20/C21 unsupported: no token);
//! - `postgres-secure`: the native mode against a server that takes only SCRAM logins over TLS,
//!   as a role with only the grants of the README's "Permissions" section.
//!
//! Each instance has its own pool (like a separate node). The hooks give the kit raw row access
//! (C14), the server address for its fault proxy (C24) and a restart of the server (C25) —
//! unless the server comes from `SHEDLOCK_POSTGRES_URL` (as under `cargo xtask test`): a server
//! this process does not own cannot be restarted, so C25 is then expected to be "not applicable".

mod pg_conformance;

use pg_conformance::{secure_suite, suite};

fn main() -> std::process::ExitCode {
    shedlock_conformance::harness_suites(vec![
        // A client cut off from the one server while its lease runs out (and the others).
        suite(false, false).with_faults(shedlock_test_support::faults::plan(
            "postgres",
            shedlock_launcher::Backend::Postgres,
            shedlock_launcher::Backend::Postgres,
        )),
        suite(false, true),
        suite(true, false),
        secure_suite(),
    ])
}

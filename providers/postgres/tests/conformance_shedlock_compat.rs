//! The shedlock conformance suite (C01–C28) against a real PostgreSQL server in the
//! **ShedLock-compatible mode** (`.shedlock_compatible()`: ShedLock's four-column table, database
//! time as ShedLock's `usingDbTime()`), provider name `postgres-shedlock-compat`. Expected
//! non-pass outcomes: C20 and C21 are "unsupported", since ShedLock's table has no column for a
//! fencing token. The factory is in `pg_conformance/`.

mod pg_conformance;

fn main() -> std::process::ExitCode {
    pg_conformance::main(true)
}

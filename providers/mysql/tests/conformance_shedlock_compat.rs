//! The shedlock conformance suite (C01–C28) against a real MariaDB server in the
//! **ShedLock-compatible mode** (`.shedlock_compatible()`: ShedLock's four-column table with
//! `TIMESTAMP(3)` times, database time as ShedLock's `usingDbTime()`), provider name
//! `mariadb-shedlock-compat`. Expected non-pass outcomes: C20 and C21 are "unsupported", since
//! ShedLock's table has no column for a fencing token. The factory is in `maria_conformance/`.

mod maria_conformance;

fn main() -> std::process::ExitCode {
    maria_conformance::main(true)
}

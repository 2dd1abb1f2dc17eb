//! The shedlock conformance suite (C01–C28) against a real PostgreSQL server, provider name
//! `postgres` (database time, the default). `SHEDLOCK_SQL_TIME=client` runs the client-time mode
//! instead, reported as `postgres-client-time`, to show what the skew checks detect. The factory
//! is in `pg_conformance/`.

mod pg_conformance;

fn main() -> std::process::ExitCode {
    pg_conformance::main(false)
}

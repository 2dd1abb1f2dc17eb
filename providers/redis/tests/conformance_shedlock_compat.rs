//! The shedlock conformance suite (C01–C28) against a real Redis server in the
//! **ShedLock-compatible mode** (`.shedlock_compatible()`: ShedLock's keys
//! `<prefix>:<environment>:<name>` and values `ADDED:<time>@<locked_by>:<uuid>`), provider name
//! `redis-shedlock-compat`. Expected non-pass outcomes: C20 and C21 are "unsupported", since
//! ShedLock's layout has no fencing counter; C25 is "not applicable" when the server comes from
//! `SHEDLOCK_REDIS_URL`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use shedlock_launcher::Backend;

fn main() -> std::process::ExitCode {
    let options = shedlock_test_support::expect_no_fencing(
        shedlock_test_support::server_options(Backend::Redis),
        "no fencing in the ShedLock-compatible mode: ShedLock's key layout has no counter",
    );
    shedlock_conformance::harness(options, || async {
        common::Single::new_with(Backend::Redis, "Redis", "redis-shedlock-compat", true).await
    })
}

//! The shedlock conformance suite (C01–C28) against a real Valkey server (the Redis fork),
//! provider name `redis-valkey`: the same provider and factory as `tests/conformance.rs`.
//! C25 is expected "not applicable" when the server comes from `SHEDLOCK_VALKEY_URL`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use shedlock_launcher::Backend;

fn main() -> std::process::ExitCode {
    let options = shedlock_test_support::server_options(Backend::Valkey);
    shedlock_conformance::harness(options, || async {
        common::Single::new(Backend::Valkey, "Valkey", "redis-valkey").await
    })
}

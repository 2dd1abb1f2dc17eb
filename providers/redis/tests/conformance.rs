//! The shedlock conformance suite (C01–C28) against a real Redis server, provider name `redis`.
//!
//! Each instance has its own reconnecting connection (like a separate node). The hooks give the
//! kit raw key access (C14), the server address for its fault proxy (C24) and a restart of the
//! server (C25) — unless the server comes from `SHEDLOCK_REDIS_URL` (as under `cargo xtask
//! test`), which is not ours to restart: C25 is then expected to be "not applicable". Every other
//! check must pass.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use shedlock_launcher::Backend;

fn main() -> std::process::ExitCode {
    let options = shedlock_test_support::server_options(Backend::Redis);
    shedlock_conformance::harness(options, || async {
        common::Single::new(Backend::Redis, "Redis", "redis").await
    })
}

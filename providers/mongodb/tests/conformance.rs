//! The shedlock conformance suite (C01–C32) against a real MongoDB server, one suite per mode
//! (`cargo test --test conformance -- mongodb-client-time::` runs one):
//!
//! - `mongodb`: server time (the default);
//! - `mongodb-client-time`: the instances' own clocks judge expiry, to show what the skew checks
//!   detect;
//! - `mongodb-shedlock-compat`: ShedLock's document layout (C20/C21 unsupported: no token).
//!
//! See `common/mod.rs` for the factory and hooks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

fn main() -> std::process::ExitCode {
    shedlock_conformance::harness_suites(vec![
        common::suite(false),
        common::suite(true),
        common::suite_compat(),
    ])
}

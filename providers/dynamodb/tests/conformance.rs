//! The shedlock conformance suite (C01–C32) against a real DynamoDB API server (dynalite here),
//! one suite per mode (`cargo test --test conformance -- dynamodb-shedlock-compat::` runs one):
//!
//! - `dynamodb`: the native item layout, with fencing tokens;
//! - `dynamodb-shedlock-compat`: ShedLock's item layout (C20/C21 unsupported: no token).
//!
//! See `common/mod.rs` for the factory and hooks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

fn main() -> std::process::ExitCode {
    shedlock_conformance::harness_suites(vec![common::suite(), common::suite_compat()])
}

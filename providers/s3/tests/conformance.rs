//! The shedlock conformance suite (C01–C32) against a real S3 API server with conditional
//! writes (moto here), provider name `s3`. See `common/mod.rs` for the factory and hooks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

fn main() -> std::process::ExitCode {
    shedlock_conformance::harness_suites(vec![common::suite()])
}

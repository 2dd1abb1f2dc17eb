//! The shedlock conformance suite (C01–C28) against a real DynamoDB API server (dynalite here),
//! provider name `dynamodb`. See `common/mod.rs` for the factory and hooks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

fn main() -> std::process::ExitCode {
    common::run()
}

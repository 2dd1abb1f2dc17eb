//! The shedlock conformance suite (C01–C28) against a MongoDB wire-protocol server, provider
//! name `mongodb`: server time (`$$NOW`), the default. See `common/mod.rs` for the factory and
//! hooks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

fn main() -> std::process::ExitCode {
    common::run(false)
}

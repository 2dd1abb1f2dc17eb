//! The shedlock conformance suite (C01–C28) in client time, provider name
//! `mongodb-client-time`: `lockUntil` from each instance's clock, as ShedLock computes it by
//! default, to show what the skew checks detect. See `common/mod.rs` for the factory and hooks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

fn main() -> std::process::ExitCode {
    common::run(true)
}

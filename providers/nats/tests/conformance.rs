//! The shedlock conformance suite (C01–C28) against a real NATS server (JetStream, 2.11 or
//! newer), provider name `nats`: server time (per-message TTL), the default. See `common/mod.rs`
//! for the factory and hooks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

fn main() -> std::process::ExitCode {
    common::run(false)
}

//! The shedlock conformance suite (C01–C31) against a real NATS server with JetStream, one suite
//! per mode (`cargo test --test conformance -- nats-client-time::` runs one):
//!
//! - `nats`: server time, per-message TTLs (NATS ≥ 2.11);
//! - `nats-client-time`: client time on a bucket without per-message TTL, as a server before 2.11
//!   offers.
//!
//! See `common/mod.rs` for the factory and hooks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

fn main() -> std::process::ExitCode {
    shedlock_conformance::harness_suites(vec![common::suite(false), common::suite(true)])
}

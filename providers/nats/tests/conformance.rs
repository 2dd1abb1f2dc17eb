//! The shedlock conformance suite (C01–C32) against a real NATS server with JetStream, one suite
//! per mode (`cargo test --test conformance -- nats-client-time::` runs one):
//!
//! - `nats`: server time, per-message TTLs (NATS ≥ 2.11);
//! - `nats-client-time`: client time on a bucket without per-message TTL, as a server before 2.11
//!   offers;
//! - `nats-secure`: server time on the launcher's secure NATS (TLS required, users), every
//!   instance the application user holding exactly the README's "Permissions" blocks for
//!   locking, inspection and force_release.
//!
//! See `common/mod.rs` (and `common/secure.rs`) for the factories and hooks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

fn main() -> std::process::ExitCode {
    shedlock_conformance::harness_suites(vec![
        common::suite(false),
        common::suite(true),
        shedlock_test_support::secure::suite(
            shedlock_launcher::Backend::Nats,
            "nats-secure",
            shedlock_test_support::secure::options(),
            common::secure::SecureNats::new,
        ),
    ])
}

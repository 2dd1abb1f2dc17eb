//! The shedlock conformance suite (C01–C28) in client time, provider name `nats-client-time`:
//! `lock_until` from each instance's clock in the message, on a bucket without per-message TTL
//! (what a server before 2.11 offers), to show what the skew checks detect. See
//! `common/mod.rs` for the factory and hooks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

fn main() -> std::process::ExitCode {
    common::run(true)
}

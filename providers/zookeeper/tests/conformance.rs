//! The shedlock conformance suite (C01–C28) against a real ZooKeeper server, provider name
//! `zookeeper`. See `common/mod.rs` for the factory and hooks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use shedlock_launcher::Backend;

fn main() -> std::process::ExitCode {
    let options = shedlock_test_support::server_options(Backend::ZooKeeper);
    shedlock_conformance::harness(options, || async { common::Zk::new(Backend::ZooKeeper).await })
}

//! The shedlock conformance suite (C01–C31) against real ZooKeeper servers, one suite per
//! deployment (`cargo test --test conformance -- zookeeper-ensemble::` runs one):
//!
//! - `zookeeper`: a single server;
//! - `zookeeper-ensemble`: the launcher's 3-node ensemble; instances connect to all three servers
//!   (C24's fault proxy fronts the first one, C25 restarts the whole ensemble).
//!
//! See `common/mod.rs` for the factory and hooks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use shedlock_launcher::Backend;
use shedlock_test_support::{faults, server_options, suite};

fn main() -> std::process::ExitCode {
    shedlock_conformance::harness_suites(vec![
        suite(Backend::ZooKeeper, "zookeeper", server_options(Backend::ZooKeeper), || {
            common::Zk::new(Backend::ZooKeeper)
        }),
        suite(
            Backend::ZooKeeperEnsemble,
            "zookeeper-ensemble",
            server_options(Backend::ZooKeeperEnsemble),
            || common::Zk::new(Backend::ZooKeeperEnsemble),
        )
        .with_faults(faults::plan(
            "zookeeper-ensemble",
            Backend::ZooKeeperEnsemble,
            Backend::ZooKeeperEnsemble,
        )),
    ])
}

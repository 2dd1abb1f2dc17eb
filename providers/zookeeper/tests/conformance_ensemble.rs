//! The shedlock conformance suite (C01–C28) against the launcher's 3-node ZooKeeper ensemble,
//! provider name `zookeeper-ensemble`: instances connect to all three servers (C24's fault proxy
//! fronts the first one, C25 restarts the whole ensemble). See `common/mod.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use shedlock_launcher::Backend;

fn main() -> std::process::ExitCode {
    let options = shedlock_test_support::server_options(Backend::ZooKeeperEnsemble);
    shedlock_conformance::harness(options, || async {
        common::Zk::new(Backend::ZooKeeperEnsemble).await
    })
}

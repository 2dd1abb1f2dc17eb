//! The shedlock conformance suite (C01–C32) against real ZooKeeper servers, one suite per
//! deployment (`cargo test --test conformance -- zookeeper-ensemble::` runs one):
//!
//! - `zookeeper`: a single server;
//! - `zookeeper-ensemble`: the launcher's 3-node ensemble; instances connect to all three servers
//!   (C24's fault proxy fronts the first one, C25 restarts the whole ensemble);
//! - `zookeeper-secure`: the launcher's secure server (a TLS-only client port, digest
//!   authentication enforced, no super user); every instance connects over TLS trusting only the
//!   launcher's CA, authenticated as `shedlock_app`, and its nodes are creator-only (the record
//!   hooks' session is that identity too).
//!
//! See `common/mod.rs` for the factory and hooks, `common/secure.rs` for the secure suite's.
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
        secure(),
    ])
}

/// `zookeeper-secure`: the secure server, reached over TLS as the application's identity.
fn secure() -> shedlock_conformance::SuiteSpec {
    shedlock_test_support::secure::suite(
        Backend::ZooKeeper,
        "zookeeper-secure",
        shedlock_test_support::secure::options(),
        common::secure::new_secure,
    )
}

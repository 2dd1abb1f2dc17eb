//! The shedlock conformance suite (C01–C31) against a real etcd server, provider name `etcd`.
//!
//! Each instance has its own client (like a separate node). The hooks give the kit raw key access
//! (C14), the server address for its fault proxy (C24 and the round-trip figures) and a restart
//! of the server (C25) — unless the server comes from `SHEDLOCK_ETCD_URL` (as under `cargo xtask
//! test`), which is not ours to restart: C25 is then expected to be "not applicable". Every other
//! check must pass.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use shedlock_launcher::Backend;
use shedlock_test_support::{faults, server_options, suite};

fn main() -> std::process::ExitCode {
    shedlock_conformance::harness_suites(vec![
        suite(Backend::Etcd, "etcd", server_options(Backend::Etcd), common::Single::new)
            // The fault scenario: the nodes' `etcd` factory on the 3-node cluster.
            .with_faults(faults::plan("etcd-cluster", Backend::EtcdCluster, Backend::Etcd)),
    ])
}

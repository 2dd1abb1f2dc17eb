//! The shedlock conformance suite (C01–C28) against a real Redis Cluster of 3 masters with one
//! replica each, provider name `redis-cluster`: the same provider on a cluster connection.
//!
//! C24 is expected "not applicable": a cluster client follows the nodes' own addresses, so the
//! kit's single fault proxy cannot stand in front of it (C24 runs on single-node Redis and
//! Valkey). C25 restarts all six nodes, unless the cluster comes from
//! `SHEDLOCK_REDIS_CLUSTER_URL` (not ours to restart: then "not applicable"). The fail-over of a
//! master mid-hold is `tests/cluster.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use shedlock_launcher::Backend;

fn main() -> std::process::ExitCode {
    let options = shedlock_test_support::server_options(Backend::RedisCluster).expect_not_applicable(
        "C24",
        "a cluster client follows the cluster's node addresses (MOVED/ASK redirects), so one fault \
         proxy cannot stand in front of it; C24 runs against single-node Redis and Valkey",
    );
    shedlock_conformance::harness(options, || async { common::Cluster::new().await })
}

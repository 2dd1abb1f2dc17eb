//! The shedlock conformance suite (C01–C32) against real servers, one suite per variant of the
//! provider (`cargo test --test conformance -- redis-valkey::` runs one):
//!
//! - `redis`: a Redis server;
//! - `redis-valkey`: a Valkey server (the Redis fork), same provider and factory; skipped, and
//!   shown as skipped, when `SHEDLOCK_SKIP_BACKENDS` names `valkey` (an optional backend);
//! - `redis-cluster`: a 3-master Redis Cluster (C24 not applicable: a cluster client follows the
//!   cluster's node addresses, so one fault proxy cannot stand in front of it);
//! - `redis-shedlock-compat`: the ShedLock-compatible key layout (C20/C21 unsupported: no
//!   fencing counter);
//! - `redis-secure`: a Redis server listening only on TLS with its default user off, every
//!   instance an ACL user with only the README's "Permissions" rules on the suite's prefix.
//!
//! Each instance has its own reconnecting connection (like a separate node). The hooks give the
//! kit raw key access (C14), the server address for its fault proxy (C24) and a restart of the
//! server (C25) — unless the server comes from its `SHEDLOCK_*_URL` (as under `cargo xtask
//! test`), which is not ours to restart: C25 is then expected to be "not applicable".
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use shedlock_launcher::Backend;
use shedlock_test_support::{expect_no_fencing, faults, server_options, suite};

fn main() -> std::process::ExitCode {
    let cluster = server_options(Backend::RedisCluster).expect_not_applicable(
        "C24",
        "a cluster client follows the cluster's node addresses (MOVED/ASK redirects), so one fault \
         proxy cannot stand in front of it; C24 runs against single-node Redis and Valkey",
    );
    let compat = expect_no_fencing(
        server_options(Backend::Redis),
        "no fencing in the ShedLock-compatible mode: ShedLock's key layout has no counter",
    );
    shedlock_conformance::harness_suites(vec![
        suite(Backend::Redis, "redis", server_options(Backend::Redis), || {
            common::Single::new(Backend::Redis, "Redis", "redis")
        }),
        suite(Backend::Valkey, "redis-valkey", server_options(Backend::Valkey), || {
            common::Single::new(Backend::Valkey, "Valkey", "redis-valkey")
        })
        .with_faults(faults::plan("valkey", Backend::Valkey, Backend::Valkey)),
        suite(Backend::RedisCluster, "redis-cluster", cluster, common::Cluster::new)
            .with_faults(
                faults::plan("redis-cluster", Backend::RedisCluster, Backend::RedisCluster)
                    .overlap_expected(
                        "asynchronous replication: a grant that has not reached the replica is \
                         lost when the replica takes over, and a master cut off from the \
                         majority keeps granting until cluster-node-timeout",
                    ),
            )
            .with_faults(
                faults::plan("redis-cluster-wait", Backend::RedisCluster, Backend::RedisCluster)
                    .node_env(common::WAIT_REPLICAS_ENV, "1")
                    .mitigation(
                        "wait_for_replicas(1, 500 ms): a grant counts once a replica acknowledged \
                         it (WAIT)",
                    )
                    .overlap_expected(
                        "WAIT makes a grant durable on a replica, not a consensus: a master cut \
                         off from the majority still answers until cluster-node-timeout",
                    ),
            ),
        suite(Backend::Redis, "redis-shedlock-compat", compat, || {
            common::Single::new_with(Backend::Redis, "Redis", "redis-shedlock-compat", true)
        }),
        shedlock_test_support::secure::suite(
            Backend::Redis,
            "redis-secure",
            shedlock_test_support::secure::options(),
            common::secure::SecureSingle::new,
        ),
    ])
}

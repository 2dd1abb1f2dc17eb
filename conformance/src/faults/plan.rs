//! [`FaultPlan`]: one scenario's backend, its clients and names, and what it may show; the
//! constants every scenario shares; the kinds of fault the nemesis makes.

use std::{sync::Arc, time::Duration};

use serde::{Deserialize, Serialize};

use super::FaultCluster;

/// One fault scenario: a backend, how long and with what, and what it may show.
#[derive(Clone)]
pub struct FaultPlan {
    pub(super) name: String,
    pub(super) cluster: Arc<dyn FaultCluster>,
    pub(super) node_env: Vec<(String, String)>,
    pub(super) overlap_expected: Option<String>,
    pub(super) mitigation: Option<String>,
    pub(super) clients: usize,
    pub(super) names: usize,
}

impl std::fmt::Debug for FaultPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultPlan")
            .field("name", &self.name)
            .field("clients", &self.clients)
            .field("names", &self.names)
            .field("overlap_expected", &self.overlap_expected)
            .finish_non_exhaustive()
    }
}

impl FaultPlan {
    /// The scenario `name` (its report's file name: `etcd-cluster`) on `cluster`, with 4
    /// client nodes contending on 6 names (enough that each master of a sharded cluster
    /// likely owns one).
    pub fn new(name: impl Into<String>, cluster: impl FaultCluster + 'static) -> Self {
        FaultPlan {
            name: name.into(),
            cluster: Arc::new(cluster),
            node_env: Vec::new(),
            overlap_expected: None,
            mitigation: None,
            clients: 4,
            names: 6,
        }
    }

    /// The scenario's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// An environment variable for the node processes beyond the cluster's own (e.g. the
    /// switch that turns a mitigation on in the suite's factory).
    #[must_use]
    pub fn node_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.node_env.push((key.into(), value.into()));
        self
    }

    /// Overlaps are what this backend is known to allow under these faults (`why`): they are
    /// measured and reported, and do not fail the test. Without it any overlap fails it.
    #[must_use]
    pub fn overlap_expected(mut self, why: impl Into<String>) -> Self {
        self.overlap_expected = Some(why.into());
        self
    }

    /// The mitigation this scenario runs with, for the report.
    #[must_use]
    pub fn mitigation(mut self, what: impl Into<String>) -> Self {
        self.mitigation = Some(what.into());
        self
    }

    /// How many client node processes (default 4, at least 2).
    #[must_use]
    pub fn clients(mut self, n: usize) -> Self {
        self.clients = n.max(2);
        self
    }
}

/// The environment variable with the scenario's length in seconds (default
/// [`SHORT_SECS`]); `cargo xtask faults --minutes N` sets it.
pub const FAULTS_SECS_ENV: &str = "SHEDLOCK_FAULTS_SECS";

/// The default length of a scenario: the short version every `cargo test` runs.
pub const SHORT_SECS: u64 = 24;

/// `lock_at_most_for` of every acquisition in a scenario.
pub const AT_MOST: Duration = Duration::from_millis(2000);
/// The longest a node works under one lock.
pub const HOLD_MAX: Duration = Duration::from_millis(800);
/// How long each fault lasts (longer than [`AT_MOST`], so that leases end during it).
pub const FAULT_FOR: Duration = Duration::from_millis(5000);
/// How long the network stays healed between faults.
pub const HEAL_FOR: Duration = Duration::from_millis(4000);
/// How often a holder checks its lease while it works.
pub const SLICE: Duration = crate::node::FAULT_SLICE;

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// The target server and client 0 on one side, everyone else on the other.
    PartitionTarget,
    /// The target server cut off from everyone.
    IsolateServer,
    /// The target server's processes frozen (SIGSTOP to the whole tree), then resumed.
    PauseServer,
    /// Client 0 frozen (SIGSTOP) while it works, then resumed.
    PauseClient,
    /// Client 0 cut off from everyone (a holder partitioned away while its lease runs out).
    IsolateClient,
    /// The target server killed (`kill -9`), restarted after the fault's time.
    KillServer,
}

impl FaultKind {
    /// Every kind, in the order the nemesis cycles through them.
    pub const ALL: [FaultKind; 6] = [
        FaultKind::PartitionTarget,
        FaultKind::PauseClient,
        FaultKind::IsolateServer,
        FaultKind::IsolateClient,
        FaultKind::PauseServer,
        FaultKind::KillServer,
    ];

    /// The kind's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::PartitionTarget => "partition-target",
            FaultKind::IsolateServer => "isolate-server",
            FaultKind::PauseServer => "pause-server",
            FaultKind::PauseClient => "pause-client",
            FaultKind::IsolateClient => "isolate-client",
            FaultKind::KillServer => "kill-server",
        }
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            FaultKind::PartitionTarget => {
                "the target server and client 0 cut off from the other servers and clients"
            }
            FaultKind::IsolateServer => "the target server cut off from everyone",
            FaultKind::PauseServer => "the target server frozen (SIGSTOP to its process tree)",
            FaultKind::PauseClient => "client 0 frozen (SIGSTOP) while it works",
            FaultKind::IsolateClient => "client 0 cut off from every server",
            FaultKind::KillServer => "the target server killed (kill -9), then restarted",
        }
    }
}

//! Fault scenarios: a backend cluster and several client node processes, each in a network
//! namespace of its own ([`net`]), contend on a few names while a nemesis cuts the network
//! (partitions, an isolated server, an isolated client), freezes processes (SIGSTOP of a
//! server or of a client holding locks) and kills a server (`kill -9`, restarted). Every
//! execution a node runs under a lock is logged on the host's monotonic clock, and the history
//! checker counts the overlaps; the report gives, per backend, the acquisitions checked, the
//! overlaps (count, worst), the windows with no holder and the recovery time after each heal.
//!
//! A node's execution is the time it *believed* it held the lock: from the end of the
//! `try_lock` call that granted it to the last check (before each slice of work, every few
//! milliseconds) that found the lease still valid (`Lock::valid_until` not passed, the lost
//! signal not fired). A correct provider never lets two of those overlap: any overlap is a
//! second holder granted while the first still had a valid lease by its own lock's word.
//!
//! The scenario is written once here, for any provider: a provider crate attaches a
//! [`FaultPlan`] to one of its suites ([`SuiteSpec::with_faults`](crate::SuiteSpec::with_faults))
//! and says how to start its backend with each server in a given namespace
//! ([`FaultCluster`]). The node processes are that test binary, re-executed in node mode, so
//! they build the suite's own factory; the plan's environment points them at the cluster.
//!
//! It needs Linux and root (network namespaces): elsewhere the scenario's test is reported
//! ignored, with the reason.

mod judge;
mod nemesis;
pub mod net;
mod plan;
mod report;
mod signal;

use shedlock::BoxError;

pub use nemesis::run_scenario;
pub use net::{Member, Net};
pub use plan::{
    AT_MOST, FAULT_FOR, FAULTS_SECS_ENV, FaultKind, FaultPlan, HEAL_FOR, HOLD_MAX, SHORT_SECS,
    SLICE,
};
pub use report::{FaultEvent, FaultOverlap, FaultReport, KindFigures, faults_report_dir};

pub use crate::node::{Execution, FaultLog};

/// A backend that a fault scenario can start with each server in a namespace of its own.
pub trait FaultCluster: Send + Sync {
    /// How many server processes it runs (each gets a [`Member`]).
    fn servers(&self) -> usize;

    /// The servers faults should aim at (a cluster's masters, say); default: all of them. The
    /// nemesis takes them in turn.
    fn targets(&self) -> Vec<usize> {
        (0..self.servers()).collect()
    }

    /// Starts the servers, server `i` in `placement[i]`'s namespace listening on its address,
    /// and waits until the backend is ready. Blocking.
    fn start(&self, placement: &[Member]) -> Result<Box<dyn RunningCluster>, BoxError>;
}

/// A started [`FaultCluster`]; dropping it stops the servers.
pub trait RunningCluster: Send {
    /// The environment that points a node process's factory at this cluster (the URL
    /// variable its setup reads).
    fn node_env(&self) -> Vec<(String, String)>;

    /// What runs (product, version), for the report. Never a URL with credentials.
    fn describe(&self) -> String;

    /// The process of server `i` (a pause signals it and every process descended from it), if
    /// it runs.
    fn server_pid(&self, i: usize) -> Option<u32>;

    /// Kills server `i` at once (`kill -9`). Blocking.
    fn kill(&self, i: usize) -> Result<(), BoxError>;

    /// Starts server `i` again (same address and data) and waits until it is ready. Blocking.
    fn restart(&self, i: usize) -> Result<(), BoxError>;

    /// The servers that matter most right now (the leader, the masters), asked of the
    /// cluster before each fault; the nemesis aims at them in turn. Empty (the default): it
    /// takes [`FaultCluster::targets`] in turn. Blocking, and quick: a server that does not
    /// answer at once (paused, cut off) is left out.
    fn primaries(&self) -> Vec<usize> {
        Vec::new()
    }
}

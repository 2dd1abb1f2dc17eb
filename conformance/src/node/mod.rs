//! Node processes: a test binary re-executed in node mode ([`NODE_ENV`], a [`NodeSpec`]) to be
//! one more instance in a process of its own. What they share is here: the spec, the run id
//! node processes inherit ([`run_id`]), the host-monotonic clock their logs share, and
//! [`node_main_if_requested`], which runs a node. What each kind of node does is a module:
//!
//! - `skew`: C28's contended workload ([`NodeLog`]), judged by `checks/c28_process_skew.rs`;
//! - `paused`: C29's paused holder ([`PausedHolder`], [`HolderLog`]);
//! - `fault`: a fault scenario's node ([`FaultLog`]), judged by [`faults`](crate::faults);
//! - `faketime`: how a node process is started under libfaketime ([`libfaketime`],
//!   [`skewed_process`]).

mod faketime;
mod fault;
mod paused;
mod skew;

use std::{
    future::Future,
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use serde::{Deserialize, Serialize};
use shedlock::{BoxError, LockConfig};

use crate::factory::ProviderFactory;

pub use faketime::{LIBFAKETIME_ENV, LIBFAKETIME_INSTALL_HINT, libfaketime, skewed_process};
pub(crate) use fault::run_fault_node;
pub use fault::{Execution, FAULT_SLICE, FaultLog};
pub(crate) use paused::run_paused_holder;
pub use paused::{HolderLog, HolderReady, HolderWrite, PausedHolder};
pub(crate) use skew::run_node;
pub use skew::{NodeAcq, NodeCall, NodeLog};

/// The environment variable that puts a test binary into node mode: a JSON [`NodeSpec`].
pub const NODE_ENV: &str = "SHEDLOCK_CONFORMANCE_NODE";

/// The environment variable naming the run, so that node processes address the same records
/// as their parent (see [`run_id`](crate::run_id)).
pub const RUN_ID_ENV: &str = "SHEDLOCK_CONFORMANCE_RUN_ID";

/// What one node process does, passed in [`NODE_ENV`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeSpec {
    /// The provider name of the suite that started the node (its factory's name): a binary
    /// with several suites ([`harness_suites`](crate::harness_suites)) sets up that one.
    #[serde(default)]
    pub provider: String,
    /// The node's index (its instance index).
    pub index: usize,
    /// The lock names all nodes contend for.
    pub names: Vec<String>,
    /// When to start, in host-monotonic nanoseconds (so that all nodes start together).
    pub start_ns: u64,
    /// How long to run the workload.
    pub run_for_ms: u64,
    /// `lock_at_most_for` of every acquisition.
    pub at_most_ms: u64,
    /// The longest a node holds a lock before unlocking.
    pub hold_max_ms: u64,
    /// For each name, the node that takes it first: the others leave it alone for `lead_ms`
    /// after the start, and the leader holds its first acquisition for `hold_max_ms`. The kit
    /// gives each name to a node whose clock is behind another's, so that a node ahead meets a
    /// name held under a lease its own clock already sees as over (what a clock-skew bug needs
    /// to show; left to chance, the node ahead tends to keep the names to itself).
    pub leaders: Vec<Option<usize>>,
    /// How long the leaders have their names to themselves.
    pub lead_ms: u64,
    /// A name of this node's own, locked and unlocked once before the start so that the
    /// node's first contended call does not also open its connections.
    pub warm_up: String,
    /// Where to write the [`NodeLog`] (JSON).
    pub out: PathBuf,
    /// A seed for the node's choices.
    pub seed: u64,
    /// C29: instead of the contended workload, hold one lock and work under it while its lease
    /// lasts (see [`PausedHolder`]).
    #[serde(default)]
    pub paused_holder: Option<PausedHolder>,
    /// A fault scenario's node ([`faults`](crate::faults)): the contended workload, each
    /// acquisition worked under in slices while its lease is valid, reported as a
    /// [`FaultLog`](crate::faults::FaultLog).
    #[serde(default)]
    pub faults: bool,
}

/// The host's monotonic clock in nanoseconds (`CLOCK_MONOTONIC`, which libfaketime leaves alone
/// with `FAKETIME_DONT_FAKE_MONOTONIC=1`): comparable across processes, unlike [`Instant`](std::time::Instant).
#[cfg(unix)]
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// The host's monotonic clock in nanoseconds (only meaningful within one process here).
#[cfg(not(unix))]
pub fn monotonic_ns() -> u64 {
    use std::sync::OnceLock;
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    u64::try_from(ORIGIN.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// In a C28 node process, the name of the suite that started it (its factory's
/// [`name`](ProviderFactory::name)); `None` in any other process. A test binary with its own
/// `main` and several factories reads it in the `setup` of [`node_main_if_requested`] to build
/// the one the node is for ([`harness_suites`](crate::harness_suites) does this itself).
pub fn node_provider() -> Option<String> {
    let spec = std::env::var(NODE_ENV).ok()?;
    serde_json::from_str::<NodeSpec>(&spec).ok().map(|s| s.provider)
}

/// If this process was started as a C28 node ([`NODE_ENV`] is set), runs the node — `setup`
/// builds the factory, one instance runs the contended workload — and returns its exit code;
/// otherwise returns `None` without calling `setup`. [`harness`](crate::harness) calls it first;
/// a test binary with its own `main` calls it before anything else to support C28:
///
/// ```no_run
/// # struct MyFactory;
/// # #[async_trait::async_trait]
/// # impl shedlock_conformance::ProviderFactory for MyFactory {
/// #     fn name(&self) -> &str { "mine" }
/// #     async fn create(&self, _: shedlock_conformance::InstanceOptions)
/// #         -> Result<std::sync::Arc<dyn shedlock::LockProvider>, shedlock::BoxError> { unimplemented!() }
/// # }
/// fn main() -> std::process::ExitCode {
///     if let Some(code) = shedlock_conformance::node_main_if_requested(|| async { Ok(MyFactory) }) {
///         return code;
///     }
///     // ... the binary's own work
/// #   std::process::ExitCode::SUCCESS
/// }
/// ```
pub fn node_main_if_requested<P, F, Fut>(setup: F) -> Option<ExitCode>
where
    P: ProviderFactory,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<P, BoxError>>,
{
    let spec = std::env::var(NODE_ENV).ok()?;
    let run = || -> Result<(), BoxError> {
        let spec: NodeSpec = serde_json::from_str(&spec)?;
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        rt.block_on(async {
            let factory = setup().await?;
            if spec.faults {
                // A node the nemesis froze must not outlive a parent killed mid-scenario.
                #[cfg(target_os = "linux")]
                let _ = rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ));
                let log = run_fault_node(&factory, &spec).await?;
                std::fs::write(&spec.out, serde_json::to_vec(&log)?)?;
                return Ok(());
            }
            if let Some(holder) = &spec.paused_holder {
                let log = run_paused_holder(&factory, &spec, holder).await?;
                std::fs::write(&spec.out, serde_json::to_vec(&log)?)?;
                return Ok(());
            }
            let log = run_node(&factory, &spec).await?;
            std::fs::write(&spec.out, serde_json::to_vec(&log)?)?;
            // No teardown: the backend and its records belong to the parent's run.
            Ok::<(), BoxError>(())
        })
    };
    Some(match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shedlock-conformance node: {e}");
            ExitCode::FAILURE
        }
    })
}

/// Locks and unlocks the node's own warm-up name (so that its first contended call does not
/// also open its connections; a failure here shows again in the workload, and is logged
/// there), then waits for the common start.
async fn warm_up_then_wait(
    p: &dyn shedlock::LockProvider,
    spec: &NodeSpec,
    at_most: Duration,
    call_limit: Duration,
) -> Result<(), BoxError> {
    let warm = LockConfig::new(spec.warm_up.clone(), at_most, Duration::ZERO)?;
    if let Ok(Ok(Some(lock))) = tokio::time::timeout(call_limit, p.try_lock(&warm)).await {
        let _ = tokio::time::timeout(call_limit, lock.unlock()).await;
    }
    let now = monotonic_ns();
    if spec.start_ns > now {
        tokio::time::sleep(Duration::from_nanos(spec.start_ns - now)).await;
    }
    Ok(())
}

/// An instant of this process on the host's monotonic clock ([`monotonic_ns`]).
fn on_monotonic(i: std::time::Instant) -> u64 {
    let now = std::time::Instant::now();
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    match i.checked_duration_since(now) {
        Some(ahead) => monotonic_ns().saturating_add(ns(ahead)),
        None => monotonic_ns().saturating_sub(ns(now.duration_since(i))),
    }
}

/// The last `lines` lines of the file at `path` (a node's stderr), for a report.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// The process's wall clock in microseconds since the Unix epoch (libfaketime's, in a node).
pub(crate) fn unix_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The id of this conformance run: the parent process's id, inherited by the node processes of
/// C28 (through `SHEDLOCK_CONFORMANCE_RUN_ID`). A factory that namespaces its records per run
/// (a table, a key prefix: needed when the backend is shared by several runs, such as a server
/// given by URL) should use it instead of its own process id, so that node processes address
/// the same records as the instances of the parent. A backend started for this run alone needs
/// no namespace at all.
pub fn run_id() -> String {
    std::env::var(RUN_ID_ENV)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| std::process::id().to_string())
}

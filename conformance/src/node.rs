//! The node protocol of C28: what a node process is asked to do ([`NodeSpec`]), what it
//! reports ([`NodeLog`]), the host-monotonic clock the logs share, the run id node processes
//! inherit ([`run_id`]), [`node_main_if_requested`], which runs a node, and how a node process
//! is started under libfaketime ([`libfaketime`], [`skewed_process`]). The check that
//! starts the nodes and judges their logs is `checks/c28_process_skew.rs`.

use std::{
    collections::BTreeMap,
    future::Future,
    path::{Path, PathBuf},
    process::{Command, ExitCode},
    time::Duration,
};

use serde::{Deserialize, Serialize};
use shedlock::{BoxError, LockConfig};

use crate::factory::{InstanceOptions, ProviderFactory};

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

/// What a C29 node does: takes [`name`](Self::name) for `at_most_ms`, tells the parent (the
/// file [`ready`](Self::ready), a [`HolderReady`]), then "writes to the fenced resource" every
/// few milliseconds for as long as its lock says the lease is valid (`Lock::valid_until` not
/// passed, its lost signal not fired), checking before each write. The parent freezes it
/// (SIGSTOP) beyond the lease, lets another instance take the name, and resumes it (SIGCONT).
/// Once the node finds its lease ended it makes one more write on purpose (which a fenced
/// resource must refuse), extends and unlocks, and reports a [`HolderLog`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PausedHolder {
    /// The name to hold.
    pub name: String,
    /// Where to write [`HolderReady`] once the lock is held.
    pub ready: PathBuf,
    /// How long the node works before it gives up waiting for its lease to end.
    pub give_up_ms: u64,
}

/// A C29 node holds its lock ([`PausedHolder::ready`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HolderReady {
    /// The fencing token of the acquisition.
    pub token: Option<u64>,
    /// The lease's end as the lock stated it, on the host's monotonic clock.
    pub valid_until_ns: u64,
}

/// One write of a C29 node: when it checked its lease (and found it valid) and when the write
/// was made, on the host's monotonic clock. A pause between the two is the race fencing
/// tokens exist for.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct HolderWrite {
    /// When the node checked its lease.
    pub checked_ns: u64,
    /// When it wrote.
    pub written_ns: u64,
}

/// What a C29 node reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HolderLog {
    /// The fencing token of its acquisition.
    pub token: Option<u64>,
    /// Its writes while it believed it held the lock.
    pub writes: Vec<HolderWrite>,
    /// When it found its lease ended (`None`: it never did, within `give_up_ms`).
    pub saw_end_ns: Option<u64>,
    /// Whether the lock's lost signal had fired by then.
    pub lost_signal: bool,
    /// When it made its one write after finding the lease ended (to be refused by fencing).
    pub stale_write_ns: Option<u64>,
    /// What its extend answered afterwards: `lost`, `extended` or the error.
    pub extend: String,
    /// What its unlock answered afterwards: `ok` or the error.
    pub unlock: String,
}

/// The environment variable that overrides where libfaketime's multi-threaded library is.
pub const LIBFAKETIME_ENV: &str = "SHEDLOCK_LIBFAKETIME";

const LIBFAKETIME_PATHS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
];

/// What to do when [`libfaketime`] finds nothing.
pub const LIBFAKETIME_INSTALL_HINT: &str = "libfaketime is not installed: `apt-get install \
    libfaketime` (Debian, Ubuntu; `cargo xtask provision` does it), or set SHEDLOCK_LIBFAKETIME \
    to libfaketimeMT.so.1";

/// libfaketime's multi-threaded library (`libfaketimeMT.so.1`), to preload into a process whose
/// wall clock should be skewed: [`LIBFAKETIME_ENV`] if set, else the first of the usual Debian,
/// Ubuntu and `/usr/local` paths that exists. `None`: not installed (see
/// [`LIBFAKETIME_INSTALL_HINT`]).
pub fn libfaketime() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(LIBFAKETIME_ENV).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    LIBFAKETIME_PATHS.iter().map(PathBuf::from).find(|p| p.is_file())
}

/// A command running `exe` with its wall clock skewed by libfaketime (`lib`, from
/// [`libfaketime`]) as `faketime` says, in libfaketime's `FAKETIME` syntax (`"+1h"`, `"-30s"`,
/// `"+0 x1.01"` for a clock running 1 % fast). The monotonic clock is left alone
/// (`FAKETIME_DONT_FAKE_MONOTONIC=1`), so [`monotonic_ns`] stays comparable
/// across processes, and the child inherits this run's [`run_id`]. C28 starts its node
/// processes this way; add the node's own environment and spawn it.
pub fn skewed_process(exe: &Path, lib: &Path, faketime: &str) -> Command {
    let mut cmd = Command::new(exe);
    cmd.env(RUN_ID_ENV, run_id())
        .env("LD_PRELOAD", lib)
        .env("FAKETIME", faketime)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    cmd
}

/// One `try_lock` call as a node saw it: on the host's monotonic clock (nanoseconds), and on
/// the node's own wall clock (microseconds since the Unix epoch, as skewed by libfaketime).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeCall {
    /// The name.
    pub name: String,
    /// When the call started.
    pub call_start_ns: u64,
    /// When it returned.
    pub call_end_ns: u64,
    /// The node's wall clock when the call started.
    pub wall_start_us: i64,
    /// The node's wall clock when it returned.
    pub wall_end_us: i64,
}

/// One acquisition as a node saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeAcq {
    /// The `try_lock` call that returned the lock.
    pub call: NodeCall,
    /// When the `unlock` call started (host monotonic nanoseconds).
    pub released_ns: u64,
}

/// What a node reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeLog {
    /// Its acquisitions.
    pub acquisitions: Vec<NodeAcq>,
    /// The `try_lock` calls that found the name held.
    pub refusals: Vec<NodeCall>,
    /// Calls that failed.
    pub errors: u64,
    /// The last error, for the report.
    pub last_error: Option<String>,
    /// The node's wall clock (ms since the Unix epoch) at `start_ns`, as the node saw it: the
    /// parent compares it with its own to prove that the offset took.
    pub wall_at_start_ms: i64,
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

pub(crate) async fn run_node(
    factory: &impl ProviderFactory,
    spec: &NodeSpec,
) -> Result<NodeLog, BoxError> {
    let p = factory.create(InstanceOptions::new(spec.index)).await?;
    let at_most = Duration::from_millis(spec.at_most_ms);
    let call_limit = at_most * 10 + Duration::from_secs(5);
    let mut log = NodeLog::default();
    warm_up_then_wait(&*p, spec, at_most, call_limit).await?;
    let late = Duration::from_nanos(monotonic_ns().saturating_sub(spec.start_ns));
    log.wall_at_start_ms = unix_us() / 1000 - i64::try_from(late.as_millis()).unwrap_or(0);
    let start = spec.start_ns.max(monotonic_ns());
    let end = start + spec.run_for_ms * 1_000_000;
    let lead_until = start + spec.lead_ms * 1_000_000;
    let leader = |n: usize| spec.leaders.get(n).copied().flatten();
    let mine = |n: usize| leader(n) == Some(spec.index);
    // The names this node leads and has not yet held.
    let mut leading: Vec<bool> = (0..spec.names.len()).map(mine).collect();
    let mut rng = fastrand::Rng::with_seed(spec.seed);
    let mut open = Vec::with_capacity(spec.names.len());
    while monotonic_ns() < end {
        let now = monotonic_ns();
        open.clear();
        open.extend(
            (0..spec.names.len())
                .filter(|&n| now >= lead_until || leader(n).is_none_or(|l| l == spec.index)),
        );
        if open.is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let n = open[rng.usize(..open.len())];
        let name = &spec.names[n];
        let cfg = LockConfig::new(name.clone(), at_most, Duration::ZERO)?;
        let (call_start_ns, wall_start_us) = (monotonic_ns(), unix_us());
        let outcome = tokio::time::timeout(call_limit, p.try_lock(&cfg)).await;
        let call = NodeCall {
            name: name.clone(),
            call_start_ns,
            call_end_ns: monotonic_ns(),
            wall_start_us,
            wall_end_us: unix_us(),
        };
        match outcome {
            Ok(Ok(Some(lock))) => {
                let hold = if std::mem::take(&mut leading[n]) {
                    spec.hold_max_ms
                } else {
                    rng.u64(0..=spec.hold_max_ms)
                };
                tokio::time::sleep(Duration::from_millis(hold)).await;
                let released_ns = monotonic_ns();
                if let Err(e) = lock.unlock().await {
                    log.errors += 1;
                    log.last_error = Some(format!("unlock: {e}"));
                }
                log.acquisitions.push(NodeAcq { call, released_ns });
            }
            Ok(Ok(None)) => log.refusals.push(call),
            Ok(Err(e)) => {
                log.errors += 1;
                log.last_error = Some(format!("try_lock: {e}"));
            }
            Err(_) => {
                log.errors += 1;
                log.last_error = Some("try_lock hung".into());
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(0..=3))).await;
    }
    Ok(log)
}

/// C29's node: see [`PausedHolder`].
pub(crate) async fn run_paused_holder(
    factory: &impl ProviderFactory,
    spec: &NodeSpec,
    holder: &PausedHolder,
) -> Result<HolderLog, BoxError> {
    let p = factory.create(InstanceOptions::new(spec.index)).await?;
    let at_most = Duration::from_millis(spec.at_most_ms);
    let cfg = LockConfig::new(holder.name.clone(), at_most, Duration::ZERO)?;
    let give_up = monotonic_ns() + holder.give_up_ms * 1_000_000;
    let lock = loop {
        if let Some(lock) = p.try_lock(&cfg).await? {
            break lock;
        }
        if monotonic_ns() > give_up {
            return Err(format!("{} stayed held by someone else", holder.name).into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let lost = lock.lost_signal();
    let mut log = HolderLog { token: lock.fencing_token(), ..HolderLog::default() };
    let ready = HolderReady {
        token: log.token,
        valid_until_ns: on_monotonic(lock.valid_until().into_std()),
    };
    // Written whole, then renamed: the parent never reads half a file.
    let partial = holder.ready.with_extension("partial");
    std::fs::write(&partial, serde_json::to_vec(&ready)?)?;
    std::fs::rename(&partial, &holder.ready)?;
    loop {
        let checked_ns = monotonic_ns();
        if tokio::time::Instant::now() >= lock.valid_until() || lost.is_lost() {
            log.saw_end_ns = Some(checked_ns);
            log.lost_signal = lost.is_lost();
            break;
        }
        log.writes.push(HolderWrite { checked_ns, written_ns: monotonic_ns() });
        if checked_ns > give_up {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    log.stale_write_ns = Some(monotonic_ns());
    let mut lock = lock;
    log.extend = match lock.extend(at_most, Duration::ZERO).await {
        Ok(()) => "extended".to_owned(),
        Err(shedlock::Error::LockLost { .. }) => "lost".to_owned(),
        Err(e) => format!("error: {e}"),
    };
    log.unlock = match lock.unlock().await {
        Ok(()) => "ok".to_owned(),
        Err(e) => format!("error: {e}"),
    };
    Ok(log)
}

/// One execution a node ran under a lock.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Execution {
    /// The name.
    pub name: String,
    /// The node.
    pub node: usize,
    /// The fencing token, if the provider gives one.
    pub token: Option<u64>,
    /// When the granting `try_lock` call started (host monotonic ns).
    pub call_start_ns: u64,
    /// When it returned the lock: the execution's start.
    pub acquired_ns: u64,
    /// The lease's end as the lock stated it.
    pub valid_until_ns: u64,
    /// The last check that found the lease valid: the execution's end.
    pub last_valid_ns: u64,
    /// Why the node stopped: `done` (its work was over), `lease ended`, `lost signal`.
    pub ended: String,
}

/// What a fault node reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FaultLog {
    /// Its executions.
    pub executions: Vec<Execution>,
    /// `try_lock` calls that found the name held.
    pub refusals: u64,
    /// Calls that failed or timed out, by the start of their error message.
    pub errors: BTreeMap<String, u64>,
}

impl FaultLog {
    fn error(&mut self, what: &str, e: &dyn std::fmt::Display) {
        let mut text = format!("{what}: {e}");
        if let Some((cut, _)) = text.char_indices().nth(100) {
            text.truncate(cut);
        }
        *self.errors.entry(text).or_default() += 1;
    }
}

/// How often a fault scenario's node checks its lease while it works.
pub const FAULT_SLICE: Duration = Duration::from_millis(5);

/// The node side of a fault scenario (in a node process whose [`NodeSpec::faults`] is set).
pub(crate) async fn run_fault_node(
    factory: &impl ProviderFactory,
    spec: &NodeSpec,
) -> Result<FaultLog, BoxError> {
    let p = factory.create(InstanceOptions::new(spec.index)).await?;
    let at_most = Duration::from_millis(spec.at_most_ms);
    // Long enough for any provider's own operation timeout to answer first.
    let call_limit = at_most * 3 + Duration::from_secs(5);
    let mut log = FaultLog::default();
    warm_up_then_wait(&*p, spec, at_most, call_limit).await?;
    let end = spec.start_ns.max(monotonic_ns()) + spec.run_for_ms * 1_000_000;
    let mut rng = fastrand::Rng::with_seed(spec.seed);
    while monotonic_ns() < end {
        let name = &spec.names[rng.usize(..spec.names.len())];
        let cfg = LockConfig::new(name.clone(), at_most, Duration::ZERO)?;
        let call_start_ns = monotonic_ns();
        match tokio::time::timeout(call_limit, p.try_lock(&cfg)).await {
            Ok(Ok(Some(lock))) => {
                let acquired_ns = monotonic_ns();
                let lost = lock.lost_signal();
                let work_until = tokio::time::Instant::now()
                    + Duration::from_millis(rng.u64(0..=spec.hold_max_ms));
                let mut last_valid_ns = acquired_ns;
                let ended = loop {
                    // The time of the check is read before it: a node descheduled between
                    // the check and the log must not stretch the execution past the check.
                    let checked_ns = monotonic_ns();
                    let now = tokio::time::Instant::now();
                    if lost.is_lost() {
                        break "lost signal";
                    }
                    if now >= lock.valid_until() {
                        break "lease ended";
                    }
                    last_valid_ns = checked_ns;
                    if now >= work_until {
                        break "done";
                    }
                    tokio::time::sleep(FAULT_SLICE).await;
                };
                log.executions.push(Execution {
                    name: name.clone(),
                    node: spec.index,
                    token: lock.fencing_token(),
                    call_start_ns,
                    acquired_ns,
                    valid_until_ns: on_monotonic(lock.valid_until().into_std()),
                    last_valid_ns,
                    ended: ended.to_owned(),
                });
                match tokio::time::timeout(call_limit, lock.unlock()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => log.error("unlock", &e),
                    Err(_) => log.error("unlock", &"no answer"),
                }
            }
            Ok(Ok(None)) => log.refusals += 1,
            Ok(Err(e)) => {
                log.error("try_lock", &e);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(_) => log.error("try_lock", &"no answer"),
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(0..=3))).await;
    }
    Ok(log)
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

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

pub mod net;

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::Duration,
};

use serde::{Deserialize, Serialize};
use shedlock::BoxError;

pub use net::{Member, Net};

pub use crate::node::{Execution, FaultLog};
use crate::node::{NODE_ENV, NodeSpec, RUN_ID_ENV, monotonic_ns, run_id, tail};

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

/// One fault scenario: a backend, how long and with what, and what it may show.
#[derive(Clone)]
pub struct FaultPlan {
    name: String,
    cluster: Arc<dyn FaultCluster>,
    node_env: Vec<(String, String)>,
    overlap_expected: Option<String>,
    mitigation: Option<String>,
    clients: usize,
    names: usize,
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

    fn describe(self) -> &'static str {
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

/// One fault the nemesis made.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultEvent {
    /// The kind.
    pub kind: FaultKind,
    /// The server it aimed at (client faults: the target of the cycle, unused).
    pub target: usize,
    /// When it began, ms after the scenario's start.
    pub start_ms: u64,
    /// When it was healed, ms after the start.
    pub healed_ms: u64,
    /// Executions that began while it lasted.
    pub acquisitions_during: usize,
    /// From the heal to the first acquisition begun after it, ms (`None`: none before the
    /// next fault or the end).
    pub recovery_ms: Option<u64>,
    /// The longest time, per name, during the fault and until its recovery, in which no
    /// execution of that name ran (the worst name), ms.
    pub longest_no_holder_ms: u64,
    /// What went wrong making or healing it (the scenario goes on).
    pub error: Option<String>,
}

/// Two executions of one name that overlapped.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultOverlap {
    /// The name.
    pub name: String,
    /// The earlier execution's node and token.
    pub first: (usize, Option<u64>),
    /// The later execution's node and token.
    pub second: (usize, Option<u64>),
    /// When the later one began, ms after the start.
    pub at_ms: u64,
    /// How long they overlapped, ms.
    pub overlap_ms: f64,
    /// The fault in progress (or just healed) when the later one began.
    pub during: Option<FaultKind>,
}

/// Per fault kind: how often, and the worst figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KindFigures {
    /// How many times it was made.
    pub count: usize,
    /// Acquisitions begun during these faults.
    pub acquisitions_during: usize,
    /// Overlaps whose later execution began during (or right after) one.
    pub overlaps: usize,
    /// Recovery after heal, ms: the median and the worst.
    pub recovery_median_ms: Option<u64>,
    /// The worst recovery, ms.
    pub recovery_max_ms: Option<u64>,
    /// Heals after which nothing was acquired before the next fault.
    pub not_recovered: usize,
    /// The longest time a name had no holder during one of these faults, ms.
    pub longest_no_holder_ms: u64,
}

/// The outcome of one scenario.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultReport {
    /// The scenario (`etcd-cluster`).
    pub scenario: String,
    /// The suite (factory) its nodes used.
    pub suite: String,
    /// What ran as the backend.
    pub server: String,
    /// The mitigation it ran with.
    pub mitigation: Option<String>,
    /// Why overlaps are expected, if they are.
    pub overlap_expected: Option<String>,
    /// How long the workload ran, s.
    pub seconds: f64,
    /// Client nodes.
    pub clients: usize,
    /// Servers.
    pub servers: usize,
    /// Names contended.
    pub names: usize,
    /// `lock_at_most_for`, ms.
    pub at_most_ms: u64,
    /// Fault and heal lengths, ms.
    pub fault_ms: u64,
    /// Heal length, ms.
    pub heal_ms: u64,
    /// Executions checked.
    pub acquisitions: usize,
    /// `try_lock` calls refused.
    pub refusals: u64,
    /// Failed calls by kind (all nodes).
    pub errors: BTreeMap<String, u64>,
    /// How executions ended (`done`, `lease ended`, `lost signal`).
    pub endings: BTreeMap<String, usize>,
    /// Overlaps found (all of them).
    pub overlaps: Vec<FaultOverlap>,
    /// The worst overlap, ms.
    pub worst_overlap_ms: f64,
    /// The faults made, in order.
    pub events: Vec<FaultEvent>,
    /// Per kind.
    pub kinds: BTreeMap<String, KindFigures>,
    /// Nodes that failed (their exit, the tail of their stderr).
    pub node_failures: Vec<String>,
    /// The verdict: `pass`, or what failed.
    pub verdict: String,
}

impl FaultReport {
    /// True when the scenario passed (no unexpected overlap, enough acquisitions, every
    /// node ran).
    pub fn passed(&self) -> bool {
        self.verdict == "pass"
    }

    /// The report as Markdown.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# Faults: {}\n", self.scenario);
        let _ = writeln!(
            s,
            "Generated by `shedlock-conformance`'s fault scenario (suite `{}`); never edited by \
             hand. Re-record with `cargo xtask faults --provider <provider> --minutes N --record`.\n",
            self.suite
        );
        let _ = writeln!(s, "| | |\n|---|---|");
        let _ = writeln!(s, "| backend | {} |", self.server);
        let _ = writeln!(s, "| verdict | **{}** |", self.verdict);
        let _ = writeln!(
            s,
            "| mitigation | {} |",
            self.mitigation.as_deref().unwrap_or("none (the provider's defaults)")
        );
        if let Some(why) = &self.overlap_expected {
            let _ = writeln!(s, "| overlaps expected | {why} |");
        }
        let _ = writeln!(
            s,
            "| run | {:.0} s, {} client processes and {} servers each in its own network \
             namespace, {} names |",
            self.seconds, self.clients, self.servers, self.names
        );
        let _ = writeln!(
            s,
            "| leases | `lock_at_most_for` {} ms; each fault lasts {} ms, then {} ms healed |",
            self.at_most_ms, self.fault_ms, self.heal_ms
        );
        let _ = writeln!(s, "| acquisitions checked | {} |", self.acquisitions);
        let _ = writeln!(
            s,
            "| overlaps | {} (worst {:.1} ms) |",
            self.overlaps.len(),
            self.worst_overlap_ms
        );
        let endings: Vec<String> = self.endings.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(s, "| how executions ended | {} |", endings.join(", "));
        let _ = writeln!(s, "| refusals | {} |", self.refusals);
        let errors: u64 = self.errors.values().sum();
        let _ = writeln!(s, "| failed calls | {errors} |");
        let _ = writeln!(s, "\n## Per fault\n");
        let _ = writeln!(
            s,
            "| fault | what | times | acquisitions during | overlaps | recovery after heal \
             (median / worst) | not recovered | longest no-holder window |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
        for kind in FaultKind::ALL {
            let Some(k) = self.kinds.get(kind.name()) else { continue };
            let ms = |v: Option<u64>| v.map_or("–".to_owned(), |v| format!("{v} ms"));
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} / {} | {} | {} ms |",
                kind.name(),
                kind.describe(),
                k.count,
                k.acquisitions_during,
                k.overlaps,
                ms(k.recovery_median_ms),
                ms(k.recovery_max_ms),
                k.not_recovered,
                k.longest_no_holder_ms
            );
        }
        if !self.overlaps.is_empty() {
            let _ = writeln!(s, "\n## Overlaps (first 20)\n");
            let _ = writeln!(
                s,
                "| name | first (node, token) | second (node, token) | at | overlap | during |"
            );
            let _ = writeln!(s, "|---|---|---|---|---|---|");
            for o in self.overlaps.iter().take(20) {
                let _ = writeln!(
                    s,
                    "| {} | {:?} | {:?} | {} ms | {:.1} ms | {} |",
                    o.name,
                    o.first,
                    o.second,
                    o.at_ms,
                    o.overlap_ms,
                    o.during.map_or("–", FaultKind::name)
                );
            }
        }
        if !self.errors.is_empty() {
            let _ = writeln!(s, "\n## Failed calls (by message)\n");
            let mut v: Vec<_> = self.errors.iter().collect();
            v.sort_by(|a, b| b.1.cmp(a.1));
            for (msg, n) in v.into_iter().take(12) {
                let _ = writeln!(s, "- {n} × `{}`", msg.replace('`', "'"));
            }
        }
        if !self.node_failures.is_empty() {
            let _ = writeln!(s, "\n## Node failures\n");
            for f in &self.node_failures {
                let _ = writeln!(s, "```\n{f}\n```");
            }
        }
        let _ = writeln!(
            s,
            "\nAn execution is the time a node believed it held the lock: from the end of the \
             granting `try_lock` to its last check (every {} ms while it works) that found \
             `valid_until` not passed and the lost signal not fired. An overlap is two executions \
             of one name from different acquisitions that intersect on the host's monotonic \
             clock. Recovery is the time from a heal to the first acquisition begun after it.",
            SLICE.as_millis()
        );
        s
    }
}

/// Where a scenario's report goes: `report_dir()/faults/<scenario>.{md,json}`.
pub fn faults_report_dir() -> PathBuf {
    crate::report_dir().join("faults")
}

fn to_ms(ns: u64, origin: u64) -> u64 {
    ns.saturating_sub(origin) / 1_000_000
}

/// The client node processes; on drop (also on an early return) every one still running is
/// resumed and killed.
struct Nodes {
    children: Vec<Child>,
}

impl Nodes {
    fn signal(&self, k: usize, stop: bool) -> Result<(), String> {
        let child = self.children.get(k).ok_or("no such node")?;
        signal_pid(child.id(), stop, false)
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.children {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = signal_pid(c.id(), false, false);
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// SIGSTOP (`stop`) or SIGCONT to a process, or (`tree`) to it and every process descended
/// from it: a server's worker processes may lead process groups of their own (PostgreSQL's
/// backends call `setsid`), so pausing the group would leave them answering.
fn signal_pid(pid: u32, stop: bool, tree: bool) -> Result<(), String> {
    #[cfg(unix)]
    {
        use rustix::process::{Pid, Signal, kill_process};
        let sig = if stop { Signal::STOP } else { Signal::CONT };
        let pids = if tree { descendants_and_self(pid) } else { vec![pid] };
        let mut first_error = None;
        for q in pids {
            let Some(p) = i32::try_from(q).ok().and_then(Pid::from_raw) else { continue };
            if let Err(e) = kill_process(p, sig)
                && q == pid
            {
                first_error = Some(format!("signal to {pid}: {e}"));
            }
        }
        first_error.map_or(Ok(()), Err)
    }
    #[cfg(not(unix))]
    {
        let _ = (pid, stop, tree);
        Err("signals need Unix".to_owned())
    }
}

/// `pid` and every process descended from it, from `/proc/<pid>/stat` (parents first).
fn descendants_and_self(pid: u32) -> Vec<u32> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(q) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{q}/stat")) else { continue };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { continue };
        if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|v| v.parse().ok()) {
            parent_of.push((q, ppid));
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(q, _)| *q));
        i += 1;
    }
    out
}

/// Runs `plan` with the node processes of test binary `exe` built by suite `suite`, for
/// `secs` seconds of workload; writes the report to [`faults_report_dir`] and returns it.
/// `Err` when the scenario could not be set up at all (the network, the cluster, the nodes).
pub fn run_scenario(
    plan: &FaultPlan,
    suite: &str,
    exe: &Path,
    secs: u64,
) -> Result<FaultReport, String> {
    let servers = plan.cluster.servers();
    let mut labels: Vec<String> = (0..servers).map(|i| format!("server {i}")).collect();
    labels.extend((0..plan.clients).map(|k| format!("client {k}")));
    let mut net = Net::create(&labels)?;
    let members = net.members().to_vec();
    let cluster = plan
        .cluster
        .start(&members[..servers])
        .map_err(|e| format!("starting the cluster in its namespaces: {e}"))?;
    let work =
        std::env::temp_dir().join(format!("shedlock-faults-{}-{}", std::process::id(), plan.name));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| format!("creating {}: {e}", work.display()))?;

    let names: Vec<String> =
        (0..plan.names).map(|i| format!("faults-{}-{}-{i}", plan.name, run_id())).collect();
    let run_for = Duration::from_secs(secs);
    // Time for the nodes to start and connect before the workload begins.
    let start_ns = monotonic_ns() + 4_000_000_000;
    let mut env: Vec<(String, String)> = cluster.node_env();
    env.extend(plan.node_env.iter().cloned());
    let mut nodes = Nodes { children: Vec::new() };
    let mut outs = Vec::new();
    for k in 0..plan.clients {
        let out = work.join(format!("node{k}.json"));
        let spec = NodeSpec {
            provider: suite.to_owned(),
            index: k,
            names: names.clone(),
            start_ns,
            run_for_ms: u64::try_from(run_for.as_millis()).unwrap_or(u64::MAX),
            at_most_ms: u64::try_from(AT_MOST.as_millis()).unwrap_or(0),
            hold_max_ms: u64::try_from(HOLD_MAX.as_millis()).unwrap_or(0),
            leaders: Vec::new(),
            lead_ms: 0,
            warm_up: format!("faults-{}-{}-warm-{k}", plan.name, run_id()),
            out: out.clone(),
            seed: 0x5eed ^ (k as u64) ^ start_ns,
            paused_holder: None,
            faults: true,
        };
        let spec_json = serde_json::to_string(&spec).map_err(|e| e.to_string())?;
        let err = std::fs::File::create(work.join(format!("node{k}.stderr")))
            .map_err(|e| e.to_string())?;
        let member = &members[servers + k];
        let child = Command::new(net::ip_program())
            .args(["netns", "exec", &member.netns])
            .arg(exe)
            .env(NODE_ENV, spec_json)
            .env(RUN_ID_ENV, run_id())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting node {k}: {e}"))?;
        nodes.children.push(child);
        outs.push(out);
    }

    // The nemesis.
    let sleep_until = |ns: u64| {
        let now = monotonic_ns();
        if ns > now {
            std::thread::sleep(Duration::from_nanos(ns - now));
        }
    };
    let workload_end = start_ns + u64::try_from(run_for.as_nanos()).unwrap_or(u64::MAX);
    let (fault_ns, heal_ns) = (
        u64::try_from(FAULT_FOR.as_nanos()).unwrap_or(0),
        u64::try_from(HEAL_FOR.as_nanos()).unwrap_or(0),
    );
    // A quiet start (HEAL_FOR), then faults while a whole fault and its heal still fit.
    let mut t = start_ns + heal_ns;
    let targets = plan.cluster.targets();
    // Scenarios start at different kinds, so that short runs cover every kind between them.
    let offset = plan.name.bytes().map(usize::from).sum::<usize>();
    let mut raw_events: Vec<(FaultKind, usize, u64, u64, Option<String>)> = Vec::new();
    let mut i = 0usize;
    while t + fault_ns + heal_ns <= workload_end {
        let kind = FaultKind::ALL[(i + offset) % FaultKind::ALL.len()];
        let turn = i / FaultKind::ALL.len() + i;
        let live = cluster.primaries();
        let target = if live.is_empty() {
            targets.get(turn % targets.len().max(1)).copied().unwrap_or(0)
        } else {
            live[turn % live.len()]
        };
        sleep_until(t);
        let began = monotonic_ns();
        let client = servers; // client 0's member index
        let mut error = None;
        let mut note = |r: Result<(), String>| {
            if let Err(e) = r {
                error.get_or_insert(e);
            }
        };
        match kind {
            FaultKind::PartitionTarget => {
                let mut groups = vec![0; members.len()];
                groups[target] = 1;
                groups[client] = 1;
                note(net.partition(&groups));
            }
            FaultKind::IsolateServer => note(net.isolate(target)),
            FaultKind::IsolateClient => note(net.isolate(client)),
            FaultKind::PauseServer => match cluster.server_pid(target) {
                Some(pid) => note(signal_pid(pid, true, true)),
                None => note(Err(format!("server {target} is not running"))),
            },
            FaultKind::PauseClient => note(nodes.signal(0, true)),
            FaultKind::KillServer => note(cluster.kill(target).map_err(|e| e.to_string())),
        }
        sleep_until(began + fault_ns);
        match kind {
            FaultKind::PauseServer => {
                if let Some(pid) = cluster.server_pid(target) {
                    note(signal_pid(pid, false, true));
                }
            }
            FaultKind::PauseClient => note(nodes.signal(0, false)),
            FaultKind::KillServer => note(cluster.restart(target).map_err(|e| e.to_string())),
            _ => note(net.heal()),
        }
        let healed = monotonic_ns();
        raw_events.push((kind, target, began, healed, error));
        t = healed + heal_ns;
        i += 1;
    }

    // Wait for the nodes (their workload ends at workload_end), then read their logs.
    let deadline = workload_end + 60_000_000_000;
    let mut node_failures = Vec::new();
    let mut logs = Vec::new();
    for (k, child) in nodes.children.iter_mut().enumerate() {
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if monotonic_ns() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                _ => break None,
            }
        };
        let stderr = tail(&work.join(format!("node{k}.stderr")), 15);
        match status {
            Some(s) if s.success() => {
                match std::fs::read(&outs[k])
                    .map_err(|e| e.to_string())
                    .and_then(|b| serde_json::from_slice::<FaultLog>(&b).map_err(|e| e.to_string()))
                {
                    Ok(log) => logs.push(log),
                    Err(e) => node_failures.push(format!("node {k}: its log: {e}\n{stderr}")),
                }
            }
            Some(s) => node_failures.push(format!("node {k} exited with {s}:\n{stderr}")),
            None => node_failures.push(format!("node {k} did not finish in time:\n{stderr}")),
        }
    }
    drop(nodes);
    let server = cluster.describe();
    drop(cluster);
    let _ = net.heal();
    drop(net);

    let report =
        judge(plan, suite, &server, start_ns, workload_end, &raw_events, logs, node_failures);
    let dir = faults_report_dir();
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join(format!("{}.md", plan.name)), report.to_markdown());
    if let Ok(json) = serde_json::to_vec_pretty(&report) {
        let _ = std::fs::write(dir.join(format!("{}.json", plan.name)), json);
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(report)
}

/// Checks the history and computes the figures.
#[allow(clippy::too_many_arguments)]
fn judge(
    plan: &FaultPlan,
    suite: &str,
    server: &str,
    origin: u64,
    end: u64,
    raw_events: &[(FaultKind, usize, u64, u64, Option<String>)],
    logs: Vec<FaultLog>,
    node_failures: Vec<String>,
) -> FaultReport {
    let mut executions: Vec<Execution> = Vec::new();
    let mut refusals = 0;
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for log in logs {
        executions.extend(log.executions);
        refusals += log.refusals;
        for (k, v) in log.errors {
            *errors.entry(k).or_default() += v;
        }
    }
    executions.sort_by_key(|e| e.acquired_ns);
    let mut endings: BTreeMap<String, usize> = BTreeMap::new();
    for e in &executions {
        *endings.entry(e.ended.clone()).or_default() += 1;
    }
    // The fault in progress (or healed less than a lease ago) at `ns`.
    let at_mostns = u64::try_from(AT_MOST.as_nanos()).unwrap_or(0);
    let during = |ns: u64| {
        raw_events.iter().find(|(_, _, b, h, _)| ns >= *b && ns <= h + at_mostns).map(|e| e.0)
    };
    // Overlaps: per name, each execution against every earlier one still running.
    let mut overlaps = Vec::new();
    let mut by_name: BTreeMap<&str, Vec<&Execution>> = BTreeMap::new();
    for e in &executions {
        by_name.entry(e.name.as_str()).or_default().push(e);
    }
    for list in by_name.values() {
        // The earlier executions still running at the current one's start (sorted by start,
        // so one that ended before this start cannot overlap any later one either).
        let mut running: Vec<&Execution> = Vec::new();
        for later in list {
            running.retain(|e| e.last_valid_ns > later.acquired_ns);
            for earlier in &running {
                {
                    let overlap =
                        earlier.last_valid_ns.min(later.last_valid_ns) - later.acquired_ns;
                    overlaps.push(FaultOverlap {
                        name: later.name.clone(),
                        first: (earlier.node, earlier.token),
                        second: (later.node, later.token),
                        at_ms: to_ms(later.acquired_ns, origin),
                        overlap_ms: overlap as f64 / 1e6,
                        during: during(later.acquired_ns),
                    });
                }
            }
            running.push(later);
        }
    }
    let worst_overlap_ms = overlaps.iter().map(|o| o.overlap_ms).fold(0.0, f64::max);
    // Per fault: acquisitions during, recovery after heal, longest no-holder window.
    let mut events = Vec::new();
    for (n, (kind, target, began, healed, error)) in raw_events.iter().enumerate() {
        let next = raw_events.get(n + 1).map_or(end, |e| e.2);
        let acquisitions_during = executions
            .iter()
            .filter(|e| e.acquired_ns >= *began && e.acquired_ns < *healed)
            .count();
        let first_after =
            executions.iter().find(|e| e.acquired_ns >= *healed && e.acquired_ns < next);
        let recovery_ms = first_after.map(|e| (e.acquired_ns - healed) / 1_000_000);
        let window_end = first_after.map_or(next, |e| e.acquired_ns).max(*healed);
        let longest_no_holder_ms =
            by_name.values().map(|list| longest_gap(list, *began, window_end)).max().unwrap_or(0)
                / 1_000_000;
        events.push(FaultEvent {
            kind: *kind,
            target: *target,
            start_ms: to_ms(*began, origin),
            healed_ms: to_ms(*healed, origin),
            acquisitions_during,
            recovery_ms,
            longest_no_holder_ms,
            error: error.clone(),
        });
    }
    let mut kinds: BTreeMap<String, KindFigures> = BTreeMap::new();
    for kind in FaultKind::ALL {
        let of: Vec<&FaultEvent> = events.iter().filter(|e| e.kind == kind).collect();
        if of.is_empty() {
            continue;
        }
        let mut rec: Vec<u64> = of.iter().filter_map(|e| e.recovery_ms).collect();
        rec.sort_unstable();
        kinds.insert(
            kind.name().to_owned(),
            KindFigures {
                count: of.len(),
                acquisitions_during: of.iter().map(|e| e.acquisitions_during).sum(),
                overlaps: overlaps.iter().filter(|o| o.during == Some(kind)).count(),
                recovery_median_ms: rec.get(rec.len() / 2).copied(),
                recovery_max_ms: rec.last().copied(),
                not_recovered: of.iter().filter(|e| e.recovery_ms.is_none()).count(),
                longest_no_holder_ms: of.iter().map(|e| e.longest_no_holder_ms).max().unwrap_or(0),
            },
        );
    }
    let mut verdict = Vec::new();
    if !node_failures.is_empty() {
        verdict.push(format!("{} node(s) failed", node_failures.len()));
    }
    if executions.len() < 10 {
        verdict.push(format!(
            "only {} acquisitions: too few for the scenario to show anything",
            executions.len()
        ));
    }
    if !overlaps.is_empty() && plan.overlap_expected.is_none() {
        verdict.push(format!(
            "{} overlap(s), worst {worst_overlap_ms:.1} ms: two holders at once",
            overlaps.len()
        ));
    }
    if let Some(e) = events.iter().find_map(|e| e.error.clone()) {
        verdict.push(format!("the nemesis failed: {e}"));
    }
    FaultReport {
        scenario: plan.name.clone(),
        suite: suite.to_owned(),
        server: server.to_owned(),
        mitigation: plan.mitigation.clone(),
        overlap_expected: plan.overlap_expected.clone(),
        seconds: end.saturating_sub(origin) as f64 / 1e9,
        clients: plan.clients,
        servers: plan.cluster.servers(),
        names: plan.names,
        at_most_ms: u64::try_from(AT_MOST.as_millis()).unwrap_or(0),
        fault_ms: u64::try_from(FAULT_FOR.as_millis()).unwrap_or(0),
        heal_ms: u64::try_from(HEAL_FOR.as_millis()).unwrap_or(0),
        acquisitions: executions.len(),
        refusals,
        errors,
        endings,
        overlaps,
        worst_overlap_ms,
        events,
        kinds,
        node_failures,
        verdict: if verdict.is_empty() { "pass".to_owned() } else { verdict.join("; ") },
    }
}

/// The longest stretch of `[from, to)` in which none of `list` (one name's executions, sorted
/// by start) ran, ns.
fn longest_gap(list: &[&Execution], from: u64, to: u64) -> u64 {
    let mut covered_until = from;
    let mut longest = 0;
    for e in list {
        if e.last_valid_ns <= covered_until {
            continue;
        }
        if e.acquired_ns >= to {
            break;
        }
        if e.acquired_ns > covered_until {
            longest = longest.max(e.acquired_ns - covered_until);
        }
        covered_until = covered_until.max(e.last_valid_ns);
    }
    longest.max(to.saturating_sub(covered_until))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(name: &str, node: usize, from_ms: u64, to_ms: u64) -> Execution {
        Execution {
            name: name.to_owned(),
            node,
            token: None,
            call_start_ns: from_ms * 1_000_000,
            acquired_ns: from_ms * 1_000_000,
            valid_until_ns: to_ms * 1_000_000,
            last_valid_ns: to_ms * 1_000_000,
            ended: "done".to_owned(),
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_process_tree_holds_a_child_that_leads_its_own_session() {
        // `setsid sleep` leads a session (and group) of its own, as PostgreSQL's backends do.
        let mut child = Command::new("setsid").args(["sleep", "30"]).spawn().unwrap();
        let mut found = false;
        for _ in 0..100 {
            if descendants_and_self(std::process::id()).contains(&child.id()) {
                found = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(found, "the child is in this process's tree");
        assert_eq!(descendants_and_self(child.id()).first(), Some(&child.id()));
    }

    #[test]
    fn longest_gap_finds_the_widest_stretch_without_an_execution() {
        let a = exec("n", 0, 10, 20);
        let b = exec("n", 1, 50, 60);
        let list = vec![&a, &b];
        assert_eq!(longest_gap(&list, 0, 100 * 1_000_000), 40 * 1_000_000);
        assert_eq!(longest_gap(&list, 15 * 1_000_000, 55 * 1_000_000), 30 * 1_000_000);
        assert_eq!(longest_gap(&[], 0, 7), 7);
    }

    struct NoCluster;
    impl FaultCluster for NoCluster {
        fn servers(&self) -> usize {
            1
        }
        fn start(&self, _: &[Member]) -> Result<Box<dyn RunningCluster>, BoxError> {
            Err("not used".into())
        }
    }

    fn judged(plan: &FaultPlan, execs: Vec<Execution>) -> FaultReport {
        let log = FaultLog { executions: execs, ..FaultLog::default() };
        judge(plan, "s", "none", 0, 1_000_000_000, &[], vec![log], Vec::new())
    }

    #[test]
    fn judge_fails_on_an_overlap_unless_the_plan_expects_it() {
        let mut execs: Vec<Execution> =
            (0..10).map(|i| exec("n", 0, i * 100, i * 100 + 50)).collect();
        execs.push(exec("n", 1, 120, 130));
        let plan = FaultPlan::new("x", NoCluster);
        let r = judged(&plan, execs.clone());
        assert_eq!(r.overlaps.len(), 1);
        assert!((r.worst_overlap_ms - 10.0).abs() < 1e-9);
        assert!(!r.passed(), "{}", r.verdict);
        let r = judged(&plan.overlap_expected("known"), execs);
        assert!(r.passed(), "{}", r.verdict);
    }

    #[test]
    fn judge_passes_back_to_back_executions_and_fails_too_few() {
        let plan = FaultPlan::new("x", NoCluster);
        let execs: Vec<Execution> =
            (0..10).map(|i| exec("n", i as usize % 2, i * 10, i * 10 + 10)).collect();
        let r = judged(&plan, execs);
        assert!(r.overlaps.is_empty());
        assert!(r.passed(), "{}", r.verdict);
        let r = judged(&plan, vec![exec("n", 0, 0, 5)]);
        assert!(!r.passed());
    }
}

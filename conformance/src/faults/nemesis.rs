//! The scenario itself: the namespaces, the cluster and the client node processes started, then
//! the nemesis making one fault after another and healing it, then the nodes' logs read and
//! judged.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use super::{
    judge::judge,
    net::{self, Net},
    plan::{AT_MOST, FAULT_FOR, FaultKind, FaultPlan, HEAL_FOR, HOLD_MAX},
    report::{FaultReport, faults_report_dir},
    signal::Nodes,
};
use crate::node::{FaultLog, NODE_ENV, NodeSpec, RUN_ID_ENV, monotonic_ns, run_id, tail};
use crate::tools::signal::signal_pid;

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

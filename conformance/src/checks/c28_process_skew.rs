//! C28: real clock skew between operating-system processes.
//!
//! C18 skews the [`Clock`](shedlock::Clock) each instance is given; a provider that reads the
//! process clock itself (`SystemTime::now()`, a client library's timestamp) escapes it. C28 runs
//! the provider in separate node processes — the test binary itself, re-executed in node mode
//! (see [`node_main_if_requested`]) — each under libfaketime with its own wall-clock offset
//! (`CLOCK_REALTIME` shifted, `CLOCK_MONOTONIC` true), all on a few shared names. Every node
//! logs its acquisitions and releases on the host's monotonic clock; the parent merges the logs
//! and runs the history checker of C16 over them.

use std::{
    collections::HashMap,
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use crate::{
    node::{
        LIBFAKETIME_INSTALL_HINT, NODE_ENV, NodeCall, NodeLog, NodeSpec, libfaketime, monotonic_ns,
        skewed_process, tail, unix_us,
    },
    outcome::Verdict,
    suite::Suite,
    tools::{
        calls::{R, finish, ms},
        history::{Interval, check_intervals},
    },
};

/// One rung of the ladder: the `FAKETIME` of each node, and the largest offset between two.
struct Rung {
    label: &'static str,
    faketime: [&'static str; 3],
    spread: Duration,
}

const LADDER: [Rung; 5] = [
    Rung { label: "no offset", faketime: ["+0", "+0", "+0"], spread: Duration::ZERO },
    Rung { label: "±1 s", faketime: ["+0", "+1s", "-1s"], spread: Duration::from_secs(2) },
    Rung { label: "±1 min", faketime: ["+0", "+1m", "-1m"], spread: Duration::from_secs(120) },
    Rung { label: "±1 h", faketime: ["+0", "+1h", "-1h"], spread: Duration::from_secs(7200) },
    Rung {
        label: "drift ×1.01 / ×0.99",
        faketime: ["+0", "+0 x1.01", "+0 x0.99"],
        spread: Duration::from_millis(100),
    },
];

/// The node that takes each name first (see [`NodeSpec::leaders`]): the first name goes to
/// node 2, whose clock is behind the others' at every rung, the second to node 0, which is
/// behind node 1.
const LEADERS: [Option<usize>; 2] = [Some(2), Some(0)];

/// What one rung's nodes did.
struct RungRun {
    intervals: Vec<Interval>,
    /// Refused calls made while another node held the name.
    cross_refusals: usize,
    /// Calls made while another node held the name, with the caller's clock past the
    /// holder's lease (see [`run_rung`]).
    probes: usize,
    acquisitions: usize,
    holders: usize,
    errors: u64,
    offsets_ms: Vec<i64>,
}

/// C28: real clock skew between processes (libfaketime). Server-time providers: no overlap at
/// any rung (0, ±1 s, ±1 min, ±1 h, and drifting clocks). Client-time providers: the largest
/// spread with no overlap is reported, and a violation below [`Options::documented_skew_bound`]
/// fails.
///
/// A rung without overlap counts only if it was *probed*: some node called `try_lock` while
/// another held the name, with its own wall clock already past the holder's lease (the
/// holder's wall clock when its call returned, plus `lock_at_most_for` and the granularity).
/// That is the moment a provider judging expiry by the caller's clock takes the name; without
/// one, a rung proves nothing (a client-time release that writes the releaser's clock, say,
/// keeps a node ahead holding every name). Each name is therefore taken first by a node whose
/// clock is behind ([`NodeSpec::leaders`]). An unprobed rung gives a client-time provider no
/// bound; a server-time provider fails on a rung ten leases wide or more that was not probed. Not applicable without libfaketime (with the install hint) or without
/// [`Hooks::with_node_env`] (the factory cannot put node processes on the same backend).
///
/// [`Options::documented_skew_bound`]: crate::Options::documented_skew_bound
/// [`Hooks::with_node_env`]: crate::Hooks::with_node_env
pub async fn c28_process_skew(suite: &Suite) -> Verdict {
    finish(c28(suite).await)
}

async fn c28(suite: &Suite) -> R {
    if !cfg!(target_os = "linux") {
        return Err(Verdict::not_applicable("libfaketime process skew needs Linux"));
    }
    let Some(node_env) = suite.hooks().node_env().map(<[_]>::to_vec) else {
        return Err(Verdict::not_applicable(
            "the factory offers no node environment (Hooks::with_node_env): node processes \
             could not reach the same backend",
        ));
    };
    let Some(lib) = libfaketime() else {
        return Err(Verdict::not_applicable(LIBFAKETIME_INSTALL_HINT));
    };
    let exe = std::env::current_exe()
        .map_err(|e| Verdict::fail(format!("cannot find the test binary to re-execute: {e}")))?;
    let t = suite.timing();
    let server_time = suite.capabilities().server_time;
    let dir = std::env::temp_dir().join(format!(
        "shedlock-c28-{}-{}",
        std::process::id(),
        suite.rng().u64(..)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| Verdict::fail(format!("temp dir: {e}")))?;
    let started = Instant::now();
    let mut lines = Vec::new();
    let mut checked = 0usize;
    let mut bound: Option<Duration> = None;
    let mut violation: Option<(String, String)> = None;
    // The first rung with clocks far apart at which no node called into another's lease.
    let mut unprobed: Option<&str> = None;
    for (k, rung) in LADDER.iter().enumerate() {
        let names =
            vec![suite.lock_name(&format!("c28r{k}a")), suite.lock_name(&format!("c28r{k}b"))];
        let run = run_rung(suite, &exe, &lib, &node_env, &dir, k, rung, &names).await;
        let run = match run {
            Ok(r) => r,
            Err(v) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(v);
            }
        };
        checked += run.acquisitions;
        suite.count_checked(run.acquisitions);
        if k == 0 {
            ensure!(
                run.holders >= 2 && run.cross_refusals > 0,
                "the node processes do not contend ({} acquisitions by {} nodes, {} refusals \
                 while another node held the name): they do not share lock state — does the \
                 factory namespace its records with shedlock_conformance::run_id() and give the \
                 backend's address in Hooks::with_node_env?",
                run.acquisitions,
                run.holders,
                run.cross_refusals
            );
        }
        let offsets_took = rung.spread.is_zero()
            || run.offsets_ms.iter().max().zip(run.offsets_ms.iter().min()).is_some_and(
                |(hi, lo)| {
                    u128::try_from(hi - lo).unwrap_or(0) + 50 >= rung.spread.as_millis()
                        || rung.label.starts_with("drift")
                },
            );
        ensure!(
            offsets_took,
            "libfaketime did not shift the node clocks at rung {} (wall offsets {:?} ms): is {} \
             the multi-threaded libfaketime?",
            rung.label,
            run.offsets_ms,
            lib.display()
        );
        let verdict = check_intervals(&run.intervals, t.early);
        if verdict.is_err() {
            suite.count_overlap();
        }
        // A rung whose clocks are far apart (ten leases) must have been probed: otherwise
        // nothing at it could have told a skew bug from a correct provider.
        let must_probe = rung.spread >= t.at_most * 10;
        let probed = rung.spread.is_zero() || run.probes > 0;
        lines.push(format!(
            "{}: {} acquisitions, {} cross-process refusals, {} probes past the holder's lease \
             by the caller's clock, {} errors{}{}",
            rung.label,
            run.acquisitions,
            run.cross_refusals,
            run.probes,
            run.errors,
            match (probed, server_time) {
                (true, _) => "",
                (false, true) => " (not probed)",
                (false, false) => " (not probed: no bound from this rung)",
            },
            match &verdict {
                Ok(()) => String::new(),
                Err(o) => format!(", OVERLAP {o}"),
            }
        ));
        match verdict {
            Ok(()) if violation.is_none() && probed => {
                bound = Some(rung.spread.max(bound.unwrap_or_default()))
            }
            Ok(()) => {}
            Err(o) if violation.is_none() => {
                violation = Some((rung.label.to_owned(), o.to_string()))
            }
            Err(_) => {}
        }
        if must_probe && !probed && violation.is_none() && unprobed.is_none() {
            unprobed = Some(rung.label);
        }
        if server_time && violation.is_some() {
            break;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let summary = lines.join("; ");
    if server_time {
        if let Some((rung, o)) = violation {
            bail!(
                "server time declared, but two processes held one lock at once at rung {rung}: \
                 {o} (a provider that reads the process clock itself; {summary})"
            );
        }
        if let Some(rung) = unprobed {
            bail!(
                "at rung {rung} no node called for a name while another held it under a lease \
                 its own clock saw as over: C28 could not tell server time from the process \
                 clock ({summary})"
            );
        }
        return Ok(format!(
            "server time: {checked} acquisitions by 3 processes, no overlap at any rung ({summary}; \
             {} ms)",
            started.elapsed().as_millis()
        ));
    }
    let Some((vrung, o)) = violation else {
        bail!(
            "client time declared, but no overlap even with process clocks ±1 h apart: is the \
             provider's time really the client's? ({summary})"
        );
    };
    let Some(safe) = bound else {
        bail!("exclusion broken without any skew: {o}");
    };
    if let Some(doc) = suite.options().documented_skew_bound {
        let first_bad =
            LADDER.iter().find(|r| r.label == vrung).map_or(Duration::ZERO, |r| r.spread);
        ensure!(
            first_bad >= doc,
            "documented skew bound {} ms, but processes {} ms apart overlapped: {o}",
            ms(doc),
            ms(first_bad)
        );
    }
    Ok(format!(
        "client time: no overlap up to {} ms between process clocks; overlap at rung {vrung} ({o}); \
         {summary}",
        ms(safe)
    ))
}

#[allow(clippy::too_many_arguments)]
async fn run_rung(
    suite: &Suite,
    exe: &Path,
    lib: &Path,
    node_env: &[(String, String)],
    dir: &Path,
    k: usize,
    rung: &Rung,
    names: &[String],
) -> Result<RungRun, Verdict> {
    let t = suite.timing();
    let run_for = suite.options().process_skew_run_for;
    let now_ns = monotonic_ns();
    let start_ns = now_ns + 1_500_000_000;
    let host_wall_at_start = unix_us() / 1000 + 1_500;
    let hold_max_ms = u64::try_from((t.at_most / 3).as_millis()).unwrap_or(100);
    let mut children = Vec::new();
    for (i, faketime) in rung.faketime.iter().enumerate() {
        let out = dir.join(format!("rung{k}-node{i}.json"));
        let err = dir.join(format!("rung{k}-node{i}.stderr"));
        let spec = NodeSpec {
            provider: suite.factory().name().to_owned(),
            index: i,
            names: names.to_vec(),
            start_ns,
            run_for_ms: u64::try_from(run_for.as_millis()).unwrap_or(u64::MAX),
            at_most_ms: u64::try_from(t.at_most.as_millis()).unwrap_or(300),
            hold_max_ms,
            leaders: LEADERS.to_vec(),
            lead_ms: hold_max_ms / 2,
            warm_up: suite.lock_name(&format!("c28r{k}w{i}")),
            out: out.clone(),
            seed: suite.seed() ^ ((k as u64) << 8) ^ i as u64,
            paused_holder: None,
            faults: false,
        };
        let spec_json =
            serde_json::to_string(&spec).map_err(|e| Verdict::fail(format!("node spec: {e}")))?;
        let stderr = std::fs::File::create(&err)
            .map_err(|e| Verdict::fail(format!("creating {}: {e}", err.display())))?;
        let mut cmd = skewed_process(exe, lib, faketime);
        cmd.env(NODE_ENV, spec_json)
            .envs(node_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let child = cmd.spawn().map_err(|e| {
            Verdict::fail(format!("cannot start node process {}: {e}", exe.display()))
        })?;
        children.push((i, *faketime, child, out, err));
    }
    let limit = Duration::from_millis(1500) + run_for + t.at_most * 10 + Duration::from_secs(30);
    let waited = Instant::now();
    let mut logs = Vec::new();
    let mut failure: Option<String> = None;
    for (i, faketime, mut child, out, err) in children {
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if waited.elapsed() < limit => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        let tail = tail(&err, 15);
        match status {
            Some(s) if s.success() => {}
            Some(s) => {
                failure.get_or_insert(format!(
                    "node {i} (FAKETIME={faketime:?}) exited with {s}; stderr:\n{tail}"
                ));
                continue;
            }
            None => {
                failure.get_or_insert(format!(
                    "node {i} (FAKETIME={faketime:?}) did not finish within {} ms (killed); stderr:\n{tail}",
                    ms(limit)
                ));
                continue;
            }
        }
        let log: NodeLog = std::fs::read(&out)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            .map_err(|e| Verdict::fail(format!("node {i}'s log {}: {e}", out.display())))?;
        logs.push((i, log));
    }
    if let Some(f) = failure {
        bail!("at rung {}: {f}", rung.label);
    }
    let at_most_ns = u64::try_from(t.at_most.as_nanos()).unwrap_or(u64::MAX);
    let origin = start_ns.saturating_sub(1_000_000_000);
    let mut intervals = Vec::new();
    // Per name: (node, the holder's call, the end of its certain interval).
    let mut holds: HashMap<&str, Vec<(usize, &NodeCall, u64)>> = HashMap::new();
    let mut holders = std::collections::BTreeSet::new();
    let mut errors = 0;
    let mut offsets_ms = Vec::new();
    for (i, log) in &logs {
        errors += log.errors;
        offsets_ms.push(log.wall_at_start_ms - host_wall_at_start);
        for a in &log.acquisitions {
            holders.insert(*i);
            let c = &a.call;
            let end = (c.call_start_ns + at_most_ns).min(a.released_ns);
            intervals.push(Interval {
                name: c.name.clone(),
                holder: format!("process {i} ({})", rung.faketime[*i]),
                start: Duration::from_nanos(c.call_end_ns.saturating_sub(origin)),
                end: Duration::from_nanos(end.saturating_sub(origin)),
            });
            holds.entry(c.name.as_str()).or_default().push((*i, c, end));
        }
    }
    // A lease ends, by its holder's clock, no later than the holder's wall clock when its
    // try_lock returned plus `lock_at_most_for` (plus the backend's rounding).
    let lease_us = i64::try_from((t.at_most + t.granularity).as_micros()).unwrap_or(i64::MAX);
    let (mut cross_refusals, mut probes) = (0, 0);
    for (i, log) in &logs {
        let calls = log
            .refusals
            .iter()
            .map(|c| (c, false))
            .chain(log.acquisitions.iter().map(|a| (&a.call, true)));
        for (c, granted) in calls {
            let inside: Vec<&(usize, &NodeCall, u64)> = holds
                .get(c.name.as_str())
                .into_iter()
                .flatten()
                .filter(|(j, h, e)| {
                    j != i && h.call_end_ns <= c.call_start_ns && c.call_end_ns <= *e
                })
                .collect();
            if !granted && !inside.is_empty() {
                cross_refusals += 1;
            }
            // A probe: the call began while another node held the name, with this node's
            // clock already past that holder's lease. A provider judging expiry by the
            // caller's clock takes the name here; only one that does not may refuse.
            if inside
                .iter()
                .any(|(_, h, _)| c.wall_start_us > h.wall_end_us.saturating_add(lease_us))
            {
                probes += 1;
            }
        }
    }
    Ok(RungRun {
        acquisitions: intervals.len(),
        intervals,
        cross_refusals,
        probes,
        holders: holders.len(),
        errors,
        offsets_ms,
    })
}

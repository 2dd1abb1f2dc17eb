//! The judge: the nodes' executions checked for overlaps, and the figures (acquisitions, gaps
//! without a holder, recovery after each heal) per kind of fault.

use std::collections::BTreeMap;

use super::{
    plan::{AT_MOST, FAULT_FOR, FaultKind, FaultPlan, HEAL_FOR},
    report::{FaultEvent, FaultOverlap, FaultReport, KindFigures},
};
use crate::node::{Execution, FaultLog};

fn to_ms(ns: u64, origin: u64) -> u64 {
    ns.saturating_sub(origin) / 1_000_000
}

/// Checks the history and computes the figures.
#[allow(clippy::too_many_arguments)]
pub(super) fn judge(
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
    use shedlock::BoxError;

    use super::*;
    use crate::faults::{FaultCluster, Member, RunningCluster};

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

//! A fault scenario's node: the contended workload, each acquisition worked under in slices
//! while its lease is valid, reported as a [`FaultLog`].

use std::{collections::BTreeMap, time::Duration};

use serde::{Deserialize, Serialize};
use shedlock::{BoxError, LockConfig};

use crate::factory::{InstanceOptions, ProviderFactory};

use super::{NodeSpec, monotonic_ns, on_monotonic, warm_up_then_wait};

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

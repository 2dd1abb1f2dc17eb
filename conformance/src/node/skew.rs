//! C28's node: the contended workload under a skewed clock, each call logged on the host's
//! monotonic clock and on the node's own wall clock.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use shedlock::{BoxError, LockConfig};

use crate::factory::{InstanceOptions, ProviderFactory};

use super::{NodeSpec, monotonic_ns, unix_us, warm_up_then_wait};

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

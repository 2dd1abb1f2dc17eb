//! A contended workload on a few names, recorded in a [`History`] (C16, C18).

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use shedlock::{LockConfig, LockProvider};

use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::{calls::ms, history::History},
};

/// Parameters of the random history workload shared by C16 and C18.
#[derive(Debug, Clone)]
pub(crate) struct Workload {
    pub names: Vec<String>,
    pub ops_per_instance: usize,
    pub at_most: Duration,
    pub extend: bool,
    pub owner_checked: bool,
    /// Soak under injected faults: a retryable error is counted and the workload goes on.
    pub tolerate_faults: bool,
}

/// Runs the random workload on `instances`, recording every acquisition in `history`.
/// Returns the number of acquisitions, or a description of a call failure.
pub(crate) async fn run_workload(
    suite: &Suite,
    instances: &[Arc<dyn LockProvider>],
    w: &Workload,
    history: &Arc<History>,
) -> Result<usize, Verdict> {
    let mut set = tokio::task::JoinSet::new();
    for (i, inst) in instances.iter().enumerate() {
        let inst = inst.clone();
        let w = w.clone();
        let history = history.clone();
        let mut rng = suite.rng();
        set.spawn(async move {
            let mut acquired = 0usize;
            let want = (w.ops_per_instance / 4).max(2);
            // Time cap: a coarse-granularity backend's long locks would otherwise make the
            // workload last minutes.
            let cap = (w.at_most * 4).max(Duration::from_secs(3));
            let began = Instant::now();
            for op in 0..w.ops_per_instance * 4 {
                if acquired >= want || began.elapsed() > cap {
                    break;
                }
                let name = &w.names[rng.usize(0..w.names.len())];
                let at_most = if rng.bool() { w.at_most } else { w.at_most * 2 };
                let at_least = if rng.u8(0..4) == 0 { at_most / 3 } else { Duration::ZERO };
                let cfg =
                    LockConfig::new(name.clone(), at_most, at_least).map_err(|e| e.to_string())?;
                let s = Instant::now();
                let r = match inst.try_lock(&cfg).await {
                    Ok(r) => r,
                    Err(e) if w.tolerate_faults && e.is_retryable() => {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    }
                    Err(e) => return Err(format!("try_lock: {e}")),
                };
                let e = Instant::now();
                if let Some(mut lock) = r {
                    acquired += 1;
                    let id = history.acquired(format!("instance {i} op {op}"), &cfg, s, e);
                    let most_us = w.at_most.as_micros() as u64;
                    let hold = match rng.u8(0..10) {
                        0..=6 => Duration::from_micros(rng.u64(0..=most_us / 20)),
                        7 | 8 => Duration::from_micros(rng.u64(0..=most_us / 3)),
                        // Outlive lock_at_most_for (then a stale unlock), only where unlock is
                        // owner-checked: elsewhere a stale unlock is documented as unsafe.
                        _ if w.owner_checked => {
                            Duration::from_micros(rng.u64(most_us..=most_us * 13 / 10))
                        }
                        _ => Duration::from_micros(rng.u64(0..=most_us / 3)),
                    };
                    tokio::time::sleep(hold).await;
                    if w.extend && rng.u8(0..4) == 0 {
                        let s = Instant::now();
                        if lock.extend(at_most, Duration::ZERO).await.is_ok()
                            && let Ok(c) = cfg.with_durations(at_most, Duration::ZERO)
                        {
                            history.extended(id, &c, s);
                        }
                        tokio::time::sleep(hold / 2).await;
                    }
                    if rng.u8(0..6) == 0 {
                        drop(lock); // left to expire
                    } else {
                        let s = Instant::now();
                        history.released(id, s);
                        let _ = lock.unlock().await;
                    }
                } else {
                    tokio::time::sleep(Duration::from_micros(
                        rng.u64(0..=(w.at_most.as_micros() as u64 / 30)),
                    ))
                    .await;
                }
            }
            Ok::<usize, String>(acquired)
        });
    }
    let bound = suite.options().fault_bound * 6;
    let joined = tokio::time::timeout(bound, async {
        let mut v = Vec::new();
        while let Some(r) = set.join_next().await {
            v.push(r);
        }
        v
    })
    .await
    .map_err(|_| Verdict::fail(format!("the workload did not finish within {} ms", ms(bound))))?;
    let mut total = 0;
    for r in joined {
        match r {
            Ok(Ok(n)) => total += n,
            Ok(Err(e)) => bail!("a call failed during the workload: {e}"),
            Err(e) => bail!("a workload task panicked: {e}"),
        }
    }
    Ok(total)
}

//! C15–C17: contention, history and the model-based test.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use shedlock::{LockConfig, LockProvider};

use super::{
    basic::LONG,
    util::{R, bounded, finish, instances, ms},
};
use crate::{report::Verdict, suite::Suite, tools::history::History};

/// C15: rounds of N instances racing for one fresh name: exactly one winner per round.
///
/// In a soak run the rounds race for one reused name instead (each winner releases it before
/// the next round), and every win is recorded in a [`History`] that the history checker
/// examines at the end: the soak figure `acquisitions_checked` then counts only acquisitions the
/// checker really saw, and a release that did not free the name shows as an overlap or a round
/// without a winner.
pub async fn c15_race_one_winner(suite: &Suite) -> Verdict {
    finish(c15(suite).await)
}

async fn c15(suite: &Suite) -> R {
    let o = suite.options();
    let n = o.instances.max(2);
    let p = instances(suite, n).await?;
    let started = Instant::now();
    let soak = suite.soaking();
    let reused = suite.lock_name("c15-soak");
    let history = History::new();
    let mut zero = 0;
    for round in 0..o.race_rounds {
        let name = if soak { reused.clone() } else { suite.lock_name("c15") };
        let cfg = suite.config(&name, LONG, Duration::ZERO)?;
        let barrier = Arc::new(tokio::sync::Barrier::new(n));
        let mut set = tokio::task::JoinSet::new();
        for (i, inst) in p.iter().enumerate() {
            let inst = inst.clone();
            let cfg = cfg.clone();
            let barrier = barrier.clone();
            set.spawn(async move {
                barrier.wait().await;
                let call_start = Instant::now();
                let r = inst.try_lock(&cfg).await;
                (i, r, call_start, Instant::now())
            });
        }
        let joined = bounded(suite, "a race round", async {
            let mut v = Vec::new();
            while let Some(r) = set.join_next().await {
                v.push(r);
            }
            v
        })
        .await?;
        let mut winners = Vec::new();
        for r in joined {
            match r {
                Ok((i, Ok(Some(l)), s, e)) => {
                    let id = history.acquired(format!("instance {i} round {round}"), &cfg, s, e);
                    winners.push((i, l, id));
                }
                Ok((_, Ok(None), _, _)) => {}
                Ok((i, Err(e), _, _)) => {
                    bail!("round {round}: try_lock on instance {i} failed: {e}")
                }
                Err(e) => bail!("round {round}: a racing task panicked: {e}"),
            }
        }
        let who: Vec<usize> = winners.iter().map(|(i, _, _)| *i).collect();
        if who.len() > 1 {
            suite.count_overlap();
        }
        for (_, l, id) in winners {
            let call_start = Instant::now();
            let _ = bounded(suite, "unlock", l.unlock()).await?;
            history.released(id, call_start);
        }
        if who.is_empty() {
            zero += 1;
        }
        ensure!(
            who.len() <= 1,
            "round {round}: {} winners (instances {who:?}) for one {} name",
            who.len(),
            if soak { "released" } else { "fresh" }
        );
    }
    ensure!(
        zero == 0,
        "{zero} of {} rounds had no winner although the name was {}",
        o.race_rounds,
        if soak { "released by the previous round's winner" } else { "fresh" }
    );
    if soak {
        let tol = suite.timing().early;
        history.check(tol).map_err(|o| {
            suite.count_overlap();
            Verdict::fail(format!("two holders of the reused name at once: {o}"))
        })?;
        suite.count_checked(history.len());
        return Ok(format!(
            "{} rounds of {n} instances on one reused name: exactly one winner each, {} \
             acquisitions history-checked with no overlap beyond {} ms ({} ms)",
            o.race_rounds,
            history.len(),
            ms(tol),
            started.elapsed().as_millis()
        ));
    }
    Ok(format!(
        "{} rounds of {n} instances: exactly one winner each ({} ms)",
        o.race_rounds,
        started.elapsed().as_millis()
    ))
}

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

/// C16: history check: every acquire/extend/release is recorded against one monotonic clock;
/// no two holders' certain intervals of one name overlap beyond the granularity.
pub async fn c16_history_no_overlap(suite: &Suite) -> Verdict {
    finish(c16(suite).await)
}

async fn c16(suite: &Suite) -> R {
    let t = suite.timing();
    let n = suite.options().instances.max(2);
    let p = instances(suite, n).await?;
    let w = Workload {
        names: vec![suite.lock_name("c16a"), suite.lock_name("c16b")],
        ops_per_instance: suite.options().history_ops,
        at_most: t.at_most,
        extend: suite.capabilities().extend,
        owner_checked: suite.capabilities().owner_checked,
        tolerate_faults: suite.soaking(),
    };
    let history = Arc::new(History::new());
    let started = Instant::now();
    let acquired = run_workload(suite, &p, &w, &history).await?;
    suite.count_checked(acquired);
    let tol = t.early;
    history.check(tol).map_err(|o| {
        suite.count_overlap();
        Verdict::fail(format!("two holders at once: {o}"))
    })?;
    ensure!(acquired > n, "only {acquired} acquisitions in the workload: too few to judge");
    Ok(format!(
        "{acquired} acquisitions by {n} instances on 2 names with expiries, at-least and extends: \
         no overlap beyond {} ms ({} ms)",
        ms(tol),
        started.elapsed().as_millis()
    ))
}

/// C17: model-based property test (proptest): random sequences of try_lock / unlock / extend /
/// wait across instances and names, checked step by step against the reference model
/// (`shedlock-memory`), shrinking to a minimal failing sequence.
pub async fn c17_model_based(suite: &Suite) -> Verdict {
    finish(crate::tools::model::run_model_check(suite).await)
}

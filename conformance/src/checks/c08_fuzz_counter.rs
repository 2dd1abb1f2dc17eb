//! C08 `fuzz_counter`: non-atomic counters under the executor stay exact.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use shedlock::{LockingExecutor, TaskResult};

use super::common::LONG;
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, bounded, finish, instances},
};

/// C08: fuzz (ShedLock's FuzzTester, improved): tasks spread over instances, two lock names,
/// each doing a non-atomic read–sleep–write of a counter under the executor; the final counts
/// are exact. One task runs few iterations (the fast task).
pub async fn c08_fuzz_counter(suite: &Suite) -> Verdict {
    finish(c08(suite).await)
}

async fn c08(suite: &Suite) -> R {
    let o = suite.options();
    let p = instances(suite, o.fuzz_instances.max(1)).await?;
    let names = [suite.lock_name("c08a"), suite.lock_name("c08b")];
    let cfgs: Vec<_> =
        names.iter().map(|n| suite.config(n, LONG, Duration::ZERO)).collect::<Result<_, _>>()?;
    let counters: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let executed: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let skipped = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..o.fuzz_tasks.max(2) {
        let exec = LockingExecutor::new(p[t % p.len()].clone());
        let iterations = if t == 0 { (o.fuzz_iterations / 5).max(1) } else { o.fuzz_iterations };
        let cfgs = cfgs.clone();
        let counters = counters.clone();
        let executed = executed.clone();
        let skipped = skipped.clone();
        let mut rng = suite.rng();
        tasks.spawn(async move {
            let mut done = 0;
            while done < iterations {
                let i = rng.usize(0..2);
                let pause = rng.u64(0..=1500);
                let c = counters.clone();
                let r = exec
                    .execute(&cfgs[i], move || async move {
                        let v = c[i].load(Ordering::SeqCst);
                        if pause < 300 {
                            tokio::task::yield_now().await;
                        } else {
                            tokio::time::sleep(Duration::from_micros(pause)).await;
                        }
                        c[i].store(v + 1, Ordering::SeqCst);
                    })
                    .await;
                match r {
                    Ok(TaskResult::Executed(())) => {
                        done += 1;
                        executed[i].fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(TaskResult::NotExecuted) => {
                        skipped.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_micros(rng.u64(100..2000))).await;
                    }
                    Err(e) => return Err(format!("executor failed: {e}")),
                }
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let joined = bounded(suite, "the fuzz run", async {
        let mut errors = Vec::new();
        while let Some(r) = tasks.join_next().await {
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(e),
                Err(e) => errors.push(format!("fuzz task panicked: {e}")),
            }
        }
        errors
    })
    .await?;
    ensure!(joined.is_empty(), "{}", joined.join("; "));
    let mut details = Vec::new();
    for i in 0..2 {
        let got = counters[i].load(Ordering::SeqCst);
        let want = executed[i].load(Ordering::SeqCst);
        ensure!(
            got == want,
            "counter {i}: {got} after {want} executed increments: two tasks ran the critical section at once"
        );
        details.push(format!("{got}"));
    }
    Ok(format!(
        "{} tasks on {} instances: counters exact ({}), {} skipped attempts, {} ms",
        o.fuzz_tasks.max(2),
        p.len(),
        details.join(" + "),
        skipped.load(Ordering::Relaxed),
        started.elapsed().as_millis()
    ))
}

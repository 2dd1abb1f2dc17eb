//! C01–C08: basic semantics, for every provider.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use shedlock::{LockingExecutor, TaskResult};

use super::util::{
    R, at, bounded, finish, instances, ms, must_lock, must_not_lock, poll_acquire, timed_try_lock,
    unlock,
};
use crate::{report::Verdict, suite::Suite};

/// A `lock_at_most_for` long enough never to expire during a check.
pub(crate) const LONG: Duration = Duration::from_secs(120);

/// C01: a lock is created and held: a second instance cannot take it; after unlock it can.
pub async fn c01_lock_is_held(suite: &Suite) -> Verdict {
    finish(c01(suite).await)
}

async fn c01(suite: &Suite) -> R {
    let p = instances(suite, 2).await?;
    let cfg = suite.config(&suite.lock_name("c01"), LONG, Duration::ZERO)?;
    let lock = must_lock(suite, &p[0], &cfg, "first lock").await?;
    must_not_lock(suite, &p[1], &cfg, "second instance while held").await?;
    let released = Instant::now();
    unlock(suite, lock).await?;
    let slack = suite.timing().slack;
    let (l2, _) =
        poll_acquire(suite, &p[1], &cfg, released, Duration::ZERO, slack, "after unlock").await?;
    unlock(suite, l2).await?;
    Ok("held lock excluded the second instance; it took the lock after unlock".into())
}

/// C02: the same name cannot be held twice, from the same instance or from another instance.
pub async fn c02_no_double_hold(suite: &Suite) -> Verdict {
    finish(c02(suite).await)
}

async fn c02(suite: &Suite) -> R {
    let p = instances(suite, 3).await?;
    let cfg = suite.config(&suite.lock_name("c02"), LONG, Duration::ZERO)?;
    let lock = must_lock(suite, &p[0], &cfg, "first lock").await?;
    must_not_lock(suite, &p[0], &cfg, "same instance again").await?;
    must_not_lock(suite, &p[1], &cfg, "second instance").await?;
    must_not_lock(suite, &p[2], &cfg, "third instance").await?;
    must_not_lock(suite, &p[0], &cfg, "same instance, third try").await?;
    unlock(suite, lock).await?;
    Ok("second hold refused from the same instance and from two others".into())
}

/// C03: two different names are independent.
pub async fn c03_names_independent(suite: &Suite) -> Verdict {
    finish(c03(suite).await)
}

async fn c03(suite: &Suite) -> R {
    let p = instances(suite, 2).await?;
    let a = suite.config(&suite.lock_name("c03a"), LONG, Duration::ZERO)?;
    let b = suite.config(&suite.lock_name("c03b"), LONG, Duration::ZERO)?;
    let la = must_lock(suite, &p[0], &a, "name A").await?;
    let lb = must_lock(suite, &p[1], &b, "name B while A is held").await?;
    must_not_lock(suite, &p[1], &a, "A while held").await?;
    must_not_lock(suite, &p[0], &b, "B while held").await?;
    unlock(suite, la).await?;
    must_not_lock(suite, &p[0], &b, "B after A was released").await?;
    let la2 = must_lock(suite, &p[1], &a, "A after release while B is held").await?;
    unlock(suite, lb).await?;
    unlock(suite, la2).await?;
    Ok("two names held at once by different instances; releasing one left the other held".into())
}

/// C04: lock, unlock, lock again in a row.
pub async fn c04_lock_unlock_lock(suite: &Suite) -> Verdict {
    finish(c04(suite).await)
}

async fn c04(suite: &Suite) -> R {
    let p = instances(suite, 1).await?;
    let cfg = suite.config(&suite.lock_name("c04"), LONG, Duration::ZERO)?;
    let l = must_lock(suite, &p[0], &cfg, "first lock").await?;
    unlock(suite, l).await?;
    let l = must_lock(suite, &p[0], &cfg, "lock right after unlock").await?;
    unlock(suite, l).await?;
    Ok("lock, unlock, lock succeeded in a row".into())
}

/// C05: a held lock expires after `lock_at_most_for` (no unlock); another instance can then take
/// it, and not earlier.
pub async fn c05_expires_after_at_most(suite: &Suite) -> Verdict {
    finish(c05(suite).await)
}

async fn c05(suite: &Suite) -> R {
    let t = suite.timing();
    let p = instances(suite, 2).await?;
    let cfg = suite.config(&suite.lock_name("c05"), t.at_most, Duration::ZERO)?;
    let (l, a0, a1) = timed_try_lock(suite, &p[0], &cfg).await?;
    let Some(l) = l else { return Err(Verdict::fail("first try_lock found a fresh name held")) };
    must_not_lock(suite, &p[1], &cfg, "other instance right after").await?;
    let deadline = t.at_most + a1.duration_since(a0) + t.slack;
    let (l2, got) = poll_acquire(suite, &p[1], &cfg, a0, t.at_most, deadline, "expiry").await?;
    drop(l);
    unlock(suite, l2).await?;
    Ok(format!(
        "lock_at_most_for {} ms: freed for another instance at +{} ms",
        ms(t.at_most),
        at(a0, got)
    ))
}

/// C06: lock right after unlock, 10 times in a row, alternating instances.
pub async fn c06_relock_after_unlock(suite: &Suite) -> Verdict {
    finish(c06(suite).await)
}

async fn c06(suite: &Suite) -> R {
    let p = instances(suite, 2).await?;
    let cfg = suite.config(&suite.lock_name("c06"), LONG, Duration::ZERO)?;
    for i in 0..10 {
        let l = must_lock(suite, &p[i % 2], &cfg, &format!("round {i}")).await?;
        must_not_lock(suite, &p[(i + 1) % 2], &cfg, &format!("round {i}, other instance")).await?;
        unlock(suite, l).await?;
    }
    Ok("10 lock-right-after-unlock rounds across two instances".into())
}

/// C07: `lock_at_least_for`: after an early unlock the lock stays held until at-least has
/// passed, then is free (well before `lock_at_most_for`).
pub async fn c07_at_least_honoured(suite: &Suite) -> Verdict {
    finish(c07(suite).await)
}

async fn c07(suite: &Suite) -> R {
    let t = suite.timing();
    let p = instances(suite, 2).await?;
    let at_least = t.at_most;
    let at_most = (at_least + t.slack) * 4;
    let cfg = suite.config(&suite.lock_name("c07"), at_most, at_least)?;
    let (l, a0, a1) = timed_try_lock(suite, &p[0], &cfg).await?;
    let Some(l) = l else { return Err(Verdict::fail("first try_lock found a fresh name held")) };
    unlock(suite, l).await?;
    let deadline = at_least + a1.duration_since(a0) + t.slack;
    let (l2, got) =
        poll_acquire(suite, &p[1], &cfg, a0, at_least, deadline, "after early unlock").await?;
    unlock(suite, l2).await?;
    ensure!(got < a0 + at_most, "freed only at lock_at_most_for");
    Ok(format!(
        "unlocked at once; held until lock_at_least_for {} ms, free at +{} ms (lock_at_most_for {} ms)",
        ms(at_least),
        at(a0, got),
        ms(at_most)
    ))
}

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

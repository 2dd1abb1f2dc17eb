//! C22 `keep_alive`: keep-alive holds long tasks, frees dead holders, signals loss.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use shedlock::{KeepAliveProvider, LockProvider};

use super::common::{LONG, need_extend};
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::{
        calls::{
            R, at, bounded, expect_held_until, finish, instances, ms, must_not_lock, poll_acquire,
            unlock,
        },
        stalling::Stalling,
    },
};

fn keep_alive(p: Arc<dyn LockProvider>) -> Result<KeepAliveProvider, Verdict> {
    KeepAliveProvider::new(p)
        .map_err(|e| Verdict::fail(format!("KeepAliveProvider refused the provider: {e}")))
}

/// C22: keep-alive: a task running for several `lock_at_most_for` periods keeps its lock; when
/// the holder dies (task aborted, no unlock) the lock frees within `lock_at_most_for`; when an
/// extension fails (the extend call stalls past the lock's expiry and another instance takes
/// over) the task is told its lock is lost.
pub async fn c22_keep_alive(suite: &Suite) -> Verdict {
    finish(c22(suite).await)
}

async fn c22(suite: &Suite) -> R {
    need_extend(suite)?;
    let t = suite.timing();
    let l = t.at_most;
    let p = instances(suite, 3).await?;
    let ka = keep_alive(p[0].clone())?;

    // 1. A long task keeps its lock for 3 periods.
    let cfg = suite.config(&suite.lock_name("c22a"), l, Duration::ZERO)?;
    let a0 = Instant::now();
    let lock = bounded(suite, "try_lock", ka.try_lock(&cfg))
        .await?
        .map_err(|e| Verdict::fail(format!("keep-alive try_lock failed: {e}")))?
        .ok_or_else(|| Verdict::fail("keep-alive try_lock found a fresh name held"))?;
    expect_held_until(suite, &p[1], &cfg, a0, l * 3, "keep-alive lock over 3 lock_at_most_for")
        .await?;
    if lock.is_lost() {
        bail!("the keep-alive lock signalled lost although every extension should have succeeded");
    }
    let released = Instant::now();
    unlock(suite, lock).await?;
    let (l2, _) = poll_acquire(
        suite,
        &p[1],
        &cfg,
        released,
        Duration::ZERO,
        t.slack,
        "after keep-alive unlock",
    )
    .await?;
    unlock(suite, l2).await?;

    // 2. The holder dies: the task is aborted without unlocking.
    let cfg = suite.config(&suite.lock_name("c22b"), l, Duration::ZERO)?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let ka2 = ka.clone();
    let cfg2 = cfg.clone();
    let task = tokio::spawn(async move {
        let r = ka2.try_lock(&cfg2).await;
        let ok = matches!(r, Ok(Some(_)));
        let _ = tx.send(ok);
        let _held = r;
        std::future::pending::<()>().await;
    });
    let got = bounded(suite, "keep-alive try_lock", rx).await?.unwrap_or(false);
    if !got {
        task.abort();
        bail!("keep-alive try_lock in the holder task did not acquire a fresh name");
    }
    tokio::time::sleep(l + l / 2).await;
    let died = Instant::now();
    task.abort();
    let _ = task.await;
    let (l3, freed) = poll_acquire(
        suite,
        &p[1],
        &cfg,
        died,
        Duration::ZERO,
        l + t.slack,
        "after the holder died",
    )
    .await?;
    unlock(suite, l3).await?;
    let freed_ms = at(died, freed);

    // 3. An extension fails: it stalls past expiry while another instance takes over.
    let pause = Arc::new(AtomicBool::new(false));
    let stall = l * 2 + t.slack;
    let stalling: Arc<dyn LockProvider> =
        Arc::new(Stalling { inner: p[2].clone(), pause: pause.clone(), stall, hold: None });
    let ka3 = keep_alive(stalling)?;
    let name = suite.lock_name("c22c");
    let cfg = suite.config(&name, l, Duration::ZERO)?;
    let lock = bounded(suite, "try_lock", ka3.try_lock(&cfg))
        .await?
        .map_err(|e| Verdict::fail(format!("keep-alive try_lock failed: {e}")))?
        .ok_or_else(|| Verdict::fail("keep-alive try_lock found a fresh name held"))?;
    let signal = lock.lost_signal();
    pause.store(true, Ordering::SeqCst);
    let paused = Instant::now();
    if suite.capabilities().owner_checked {
        let long = suite.config(&name, LONG, Duration::ZERO)?;
        let (other, _) = poll_acquire(
            suite,
            &p[1],
            &long,
            paused,
            Duration::ZERO,
            l * 2 + t.slack,
            "takeover during the stall",
        )
        .await?;
        let told = tokio::time::timeout(stall + t.slack * 2, signal.lost()).await.is_ok();
        must_not_lock(suite, &p[1], &long, "new holder after the stale keep-alive").await?;
        unlock(suite, other).await?;
        if !told {
            bail!(
                "the keep-alive's extension failed (lock taken over) but the task was not told its lock is lost"
            );
        }
    } else if tokio::time::timeout(stall + t.slack * 2, signal.lost()).await.is_err() {
        bail!(
            "the keep-alive's extension ran after expiry but the task was not told its lock is lost"
        );
    }
    let lost_ms = at(paused, Instant::now());
    let _ = bounded(suite, "unlock", lock.unlock()).await?;
    Ok(format!(
        "held 3 × {} ms; dead holder's lock freed {freed_ms} ms after abort; stalled extension signalled lost after {lost_ms} ms",
        ms(l)
    ))
}

//! C22–C23: keep-alive and executor.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use shedlock::{
    Capabilities, Error, KeepAliveProvider, Lock, LockConfig, LockHandle, LockProvider,
    LockingExecutor, Result as ShedResult, TaskResult, assert_locked,
};

use super::{
    basic::LONG,
    extend::need_extend,
    util::{
        R, at, bounded, expect_held_until, finish, instances, ms, must_lock, must_not_lock,
        poll_acquire, unlock,
    },
};
use crate::{report::Verdict, suite::Suite};

/// Wraps a provider so that, once `pause` is set, every extend first stalls for `stall` (as a
/// process paused by a GC or a stalled network would) and then reaches the real backend.
pub(crate) struct Stalling {
    pub(crate) inner: Arc<dyn LockProvider>,
    pub(crate) pause: Arc<AtomicBool>,
    pub(crate) stall: Duration,
}

struct StallingHandle {
    inner: Box<dyn LockHandle>,
    pause: Arc<AtomicBool>,
    stall: Duration,
}

#[async_trait]
impl LockProvider for Stalling {
    async fn try_lock(&self, config: &LockConfig) -> ShedResult<Option<Lock>> {
        let Some(lock) = self.inner.try_lock(config).await? else { return Ok(None) };
        Ok(Some(lock.map_handle(|inner| StallingHandle {
            inner,
            pause: self.pause.clone(),
            stall: self.stall,
        })))
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }
}

#[async_trait]
impl LockHandle for StallingHandle {
    async fn unlock(&mut self, config: &LockConfig) -> ShedResult<()> {
        self.inner.unlock(config).await
    }

    async fn extend(&mut self, config: &LockConfig) -> ShedResult<()> {
        if self.pause.load(Ordering::SeqCst) {
            tokio::time::sleep(self.stall).await;
        }
        self.inner.extend(config).await
    }

    fn fencing_token(&self) -> Option<u64> {
        self.inner.fencing_token()
    }
}

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
        Arc::new(Stalling { inner: p[2].clone(), pause: pause.clone(), stall });
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

/// C23: executor: the task is skipped when the lock is held elsewhere; the lock is released
/// when the task returns, errors, panics or is cancelled; reentrant use of the same name inside
/// a task does not deadlock; `assert_locked` holds inside and fails outside.
pub async fn c23_executor(suite: &Suite) -> Verdict {
    finish(c23(suite).await)
}

async fn c23(suite: &Suite) -> R {
    let t = suite.timing();
    let p = instances(suite, 2).await?;
    let exec = LockingExecutor::new(p[0].clone());
    let cfg = suite.config(&suite.lock_name("c23"), LONG, Duration::ZERO)?;

    // Skipped when held elsewhere.
    let other = must_lock(suite, &p[1], &cfg, "holder elsewhere").await?;
    let ran = Arc::new(AtomicBool::new(false));
    let r2 = ran.clone();
    let r = bounded(
        suite,
        "execute",
        exec.execute(&cfg, move || async move { r2.store(true, Ordering::SeqCst) }),
    )
    .await?
    .map_err(|e| Verdict::fail(format!("execute failed: {e}")))?;
    if r.was_executed() || ran.load(Ordering::SeqCst) {
        bail!("the task ran although the lock was held by another instance");
    }
    unlock(suite, other).await?;

    let freed = |what: &'static str| {
        let p1 = p[1].clone();
        let cfg = cfg.clone();
        async move {
            let now = Instant::now();
            let (l, _) = poll_acquire(suite, &p1, &cfg, now, Duration::ZERO, t.slack, what).await?;
            unlock(suite, l).await
        }
    };

    // Returns: released; assert_locked inside and outside; reentrancy.
    let exec2 = exec.clone();
    let cfg2 = cfg.clone();
    let inner = bounded(
        suite,
        "execute",
        exec.execute(&cfg, move || async move {
            let inside = assert_locked().is_ok();
            let nested =
                tokio::time::timeout(Duration::from_secs(5), exec2.execute(&cfg2, || async { 7 }))
                    .await;
            (inside, nested)
        }),
    )
    .await?
    .map_err(|e| Verdict::fail(format!("execute failed: {e}")))?;
    let TaskResult::Executed((inside, nested)) = inner else {
        bail!("the task did not run on a free name")
    };
    if !inside {
        bail!("assert_locked failed inside a locked task");
    }
    match nested {
        Err(_) => bail!("reentrant execute of the same name deadlocked"),
        Ok(Ok(TaskResult::Executed(7))) => {}
        Ok(other) => bail!("reentrant execute of the same name gave {other:?}"),
    }
    if !matches!(assert_locked(), Err(Error::NotLocked)) {
        bail!("assert_locked succeeded outside a locked task");
    }
    freed("after the task returned").await?;

    // Errors: released.
    let r =
        bounded(suite, "execute", exec.execute(&cfg, || async { Err::<(), &str>("task error") }))
            .await?
            .map_err(|e| Verdict::fail(format!("execute failed: {e}")))?;
    if r != TaskResult::Executed(Err("task error")) {
        bail!("the failing task's output was not returned: {r:?}");
    }
    freed("after the task returned an error").await?;

    // Panics: released, panic propagated.
    let exec_p = exec.clone();
    let cfg_p = cfg.clone();
    let h =
        tokio::spawn(async move { exec_p.execute(&cfg_p, || async { deliberate_panic() }).await });
    let joined = bounded(suite, "panicking execute", h).await?;
    match joined {
        Err(e) if e.is_panic() => {}
        other => bail!("a panicking task did not propagate its panic: {other:?}"),
    }
    freed("after the task panicked").await?;

    // Cancelled: the execute future is dropped while the task runs.
    let started = Arc::new(tokio::sync::Notify::new());
    let s2 = started.clone();
    let fut = exec.execute(&cfg, move || async move {
        s2.notify_one();
        std::future::pending::<()>().await;
    });
    let cancelled = tokio::select! {
        _ = fut => false,
        _ = async { started.notified().await; tokio::time::sleep(Duration::from_millis(20)).await } => true,
    };
    if !cancelled {
        bail!("a never-ending task finished");
    }
    freed("after the execution was cancelled").await?;
    Ok("skipped when held elsewhere; released after return, error, panic and cancellation; reentrant; \
        assert_locked inside only"
        .into())
}

/// The task of C23's panic case: unwinds like a panic, without the panic hook's message.
fn deliberate_panic() {
    std::panic::resume_unwind(Box::new("deliberate panic in a locked task (C23)"));
}

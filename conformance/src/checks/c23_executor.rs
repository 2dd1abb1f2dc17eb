//! C23 `executor`: executor skips, releases on return/error/panic/cancel, is reentrant.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use shedlock::{Error, LockingExecutor, TaskResult, assert_locked};

use super::common::LONG;
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, bounded, finish, instances, must_lock, poll_acquire, unlock},
};

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

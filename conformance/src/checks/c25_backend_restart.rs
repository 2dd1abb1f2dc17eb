//! C25 `backend_restart`: the provider recovers from a backend restart.

use std::time::{Duration, Instant};

use super::common::{Fence, recover};
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, at, bounded, finish, instances, must_lock, poll_acquire, unlock},
};

/// C25: backend restarted while the process runs: the provider recovers without a process
/// restart, and a lock held across the restart frees within `lock_at_most_for`. When the
/// provider declares `fencing`, tokens after the restart exceed every token before it. Needs
/// [`Hooks::with_restart`](crate::Hooks::with_restart).
pub async fn c25_backend_restart(suite: &Suite) -> Verdict {
    finish(c25(suite).await)
}

async fn c25(suite: &Suite) -> R {
    let Some(hook) = suite.hooks().restart().cloned() else {
        return Err(Verdict::not_applicable(
            "the factory offers no restart hook (Hooks::with_restart)",
        ));
    };
    let t = suite.timing();
    let p = instances(suite, 2).await?;
    let cfg = suite.config(&suite.lock_name("c25"), t.at_most, Duration::ZERO)?;
    let mut fence = Fence::new(suite);
    for (i, inst) in p.iter().enumerate() {
        let l = must_lock(suite, inst, &cfg, "warm-up before the restart").await?;
        fence.saw(&l, &format!("warm-up on instance {i} before the restart"))?;
        unlock(suite, l).await?;
    }
    let held = must_lock(suite, &p[0], &cfg, "lock before the restart").await?;
    fence.saw(&held, "the lock held across the restart")?;
    fence.settle(suite).await;
    let restart_started = Instant::now();
    tokio::time::timeout(suite.options().recovery_bound, hook.restart())
        .await
        .map_err(|_| Verdict::fail("the restart hook did not finish within the recovery bound"))?
        .map_err(|e| Verdict::fail(format!("the restart hook failed: {e}")))?;
    let restarted = Instant::now();
    let r0 = recover(suite, &p[0]).await?;
    let r1 = recover(suite, &p[1]).await?;
    // The pre-restart lock: its unlock returns (whatever it says) and the name frees in time.
    let _ = bounded(suite, "unlock of a lock taken before the restart", held.unlock()).await?;
    let (l, _) = poll_acquire(
        suite,
        &p[1],
        &cfg,
        restarted,
        Duration::ZERO,
        t.at_most + t.slack + r0.max(r1),
        "the lock held across the restart",
    )
    .await?;
    fence.saw(&l, "the first lock after the restart")?;
    unlock(suite, l).await?;
    let l = must_lock(suite, &p[0], &cfg, "relock after the restart").await?;
    fence.saw(&l, "a relock after the restart")?;
    unlock(suite, l).await?;
    Ok(format!(
        "restart took {} ms; instances recovered after {} and {} ms{}",
        at(restart_started, restarted),
        r0.as_millis(),
        r1.as_millis(),
        fence.summary("across the restart")
    ))
}

//! C09 `extend_keeps_lock`: extend keeps the lock past lock_at_most_for; extends chain.

use std::time::Duration;

use super::common::{extend, need_extend};
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{
        R, at, expect_held_until, finish, instances, ms, poll_acquire, timed_try_lock, unlock,
    },
};

/// C09: extend keeps the lock past the original `lock_at_most_for`; multiple extends chain. An
/// extend to a shorter `lock_at_most_for` ends the lock sooner: no later than the shorter lease
/// counted from the extend (within the slack and the declared clock step), and not before it.
pub async fn c09_extend_keeps_lock(suite: &Suite) -> Verdict {
    finish(c09(suite).await)
}

async fn c09(suite: &Suite) -> R {
    need_extend(suite)?;
    let t = suite.timing();
    let l = t.at_most;
    let p = instances(suite, 2).await?;
    let cfg = suite.config(&suite.lock_name("c09"), l, Duration::ZERO)?;
    let (lock, a0, _a1) = timed_try_lock(suite, &p[0], &cfg).await?;
    let Some(mut lock) = lock else {
        return Err(Verdict::fail("try_lock found a fresh name held"));
    };
    tokio::time::sleep_until((a0 + l / 2).into()).await;
    let (e0, _) = extend(suite, &mut lock, l, Duration::ZERO).await?;
    // Held past the original expiry (a0 + l): poll until e0 + 3/4 l (≥ a0 + 5/4 l). An extend
    // slower than that window leaves no time to probe, which fails rather than passes unseen.
    expect_held_until(suite, &p[1], &cfg, e0, l * 3 / 4, "after the first extend").await?;
    let (f0, f1) = extend(suite, &mut lock, l, Duration::ZERO).await?;
    let deadline = l + f1.duration_since(f0) + t.slack;
    let (l2, got) =
        poll_acquire(suite, &p[1], &cfg, f0, l, deadline, "after the second extend").await?;
    drop(lock);
    unlock(suite, l2).await?;
    let shorter = shorter(suite, &p).await?;
    Ok(format!(
        "lock_at_most_for {} ms, extended at +{} and +{} ms: held past +{} ms, freed at +{} ms; \
         {shorter}",
        ms(l),
        at(a0, e0),
        at(a0, f0),
        ms(l),
        at(a0, got)
    ))
}

/// An extend to a shorter `lock_at_most_for` ends the lock sooner: taken for four times the
/// short lease, then extended to the short lease, the lock is free for another instance when
/// the short lease from the extend has passed (within the usual slack and the declared clock
/// step), long before the first lease would have ended, and not before.
async fn shorter(suite: &Suite, p: &[std::sync::Arc<dyn shedlock::LockProvider>]) -> R {
    let t = suite.timing();
    let (short, long) = (t.at_most, t.at_most * 4);
    let cfg = suite.config(&suite.lock_name("c09-shorter"), long, Duration::ZERO)?;
    let (lock, a0, _) = timed_try_lock(suite, &p[0], &cfg).await?;
    let Some(mut lock) = lock else {
        return Err(Verdict::fail("try_lock found a fresh name held"));
    };
    let (e0, e1) = extend(suite, &mut lock, short, Duration::ZERO).await?;
    let deadline = short + e1.duration_since(e0) + t.slack + suite.capabilities().clock_step;
    let (next, got) = poll_acquire(
        suite,
        &p[1],
        &cfg,
        e0,
        short,
        deadline,
        "after an extend to a shorter lock_at_most_for",
    )
    .await?;
    drop(lock);
    unlock(suite, next).await?;
    Ok(format!(
        "taken for {} ms and extended at +{} ms to {} ms: freed at +{} ms",
        ms(long),
        at(a0, e0),
        ms(short),
        at(a0, got)
    ))
}

//! C09–C11: extend (capability `extend`).

use std::{
    sync::{Arc, atomic::AtomicBool},
    time::{Duration, Instant},
};

use shedlock::{Error, Lock, LockProvider};

use super::executor::Stalling;
use super::util::{
    R, at, bounded, expect_held_until, finish, instances, ms, must_lock, poll_acquire,
    timed_try_lock, unlock,
};
use crate::{report::Verdict, suite::Suite};

pub(crate) fn need_extend(suite: &Suite) -> Result<(), Verdict> {
    if suite.capabilities().extend {
        Ok(())
    } else {
        Err(Verdict::unsupported("capability `extend` not declared"))
    }
}

/// Extends `lock`, timing the call; an error fails the check.
pub(crate) async fn extend(
    suite: &Suite,
    lock: &mut Lock,
    at_most: Duration,
    at_least: Duration,
) -> Result<(Instant, Instant), Verdict> {
    let e0 = Instant::now();
    let name = lock.name().to_owned();
    bounded(suite, "extend", lock.extend(at_most, at_least))
        .await?
        .map_err(|e| Verdict::fail(format!("extend({name:?}) of a held lock failed: {e}")))?;
    Ok((e0, Instant::now()))
}

/// C09: extend keeps the lock past the original `lock_at_most_for`; multiple extends chain.
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
    Ok(format!(
        "lock_at_most_for {} ms, extended at +{} and +{} ms: held past +{} ms, freed at +{} ms",
        ms(l),
        at(a0, e0),
        at(a0, f0),
        ms(l),
        at(a0, got)
    ))
}

/// C10: extending an expired lock fails (with [`Error::LockLost`]) and does not make the lock
/// held: both an extend called after the lock expired (refused by the lock's lease, whatever the
/// backend would say) and an extend sent in time that reaches the backend only after the lock
/// expired there (a stalled process or link: the backend itself must refuse it, or the stale
/// holder would hold the lock again).
pub async fn c10_extend_expired_fails(suite: &Suite) -> Verdict {
    finish(c10(suite).await)
}

async fn c10(suite: &Suite) -> R {
    need_extend(suite)?;
    let t = suite.timing();
    let p = instances(suite, 2).await?;
    let cfg = suite.config(&suite.lock_name("c10"), t.at_most, Duration::ZERO)?;
    let (lock, _a0, a1) = timed_try_lock(suite, &p[0], &cfg).await?;
    let Some(mut lock) = lock else {
        return Err(Verdict::fail("try_lock found a fresh name held"));
    };
    tokio::time::sleep_until((a1 + t.at_most + t.slack).into()).await;
    let r = bounded(suite, "extend", lock.extend(t.at_most * 10, Duration::ZERO)).await?;
    match r {
        Err(Error::LockLost { .. }) => {}
        Ok(()) => {
            return Err(Verdict::fail(format!(
                "extend succeeded {} ms after the lock expired",
                ms(t.slack)
            )));
        }
        Err(e) => {
            return Err(Verdict::fail(format!(
                "extend of an expired lock gave {e:?}, expected LockLost"
            )));
        }
    }
    let l2 = must_lock(suite, &p[1], &cfg, "after the failed extend").await?;
    unlock(suite, l2).await?;
    drop(lock);

    // The extend leaves in time but reaches the backend after the lock expired there.
    let stall = t.at_most + t.slack;
    let stalling: Arc<dyn LockProvider> =
        Arc::new(Stalling { inner: p[0].clone(), pause: Arc::new(AtomicBool::new(true)), stall });
    let cfg = suite.config(&suite.lock_name("c10b"), t.at_most, Duration::ZERO)?;
    let mut lock = must_lock(suite, &stalling, &cfg, "lock to extend late").await?;
    // The kit's own stall comes on top of the provider's time: bound the call by both.
    let bound = suite.options().fault_bound + stall;
    let late = tokio::time::timeout(bound, lock.extend(t.at_most * 10, Duration::ZERO))
        .await
        .map_err(|_| {
            Verdict::fail(format!(
                "late extend did not return within {} ms (the {} ms stall plus the fault bound)",
                bound.as_millis(),
                stall.as_millis()
            ))
        })?;
    match late {
        Err(Error::LockLost { .. }) => {}
        Ok(()) => bail!("an extend answered after the lock's lease ended reported success"),
        Err(e) => {
            bail!("an extend that reached the backend after expiry gave {e:?}, expected LockLost")
        }
    }
    let l3 = must_lock(
        suite,
        &p[1],
        &cfg,
        "after an extend that reached the backend after the lock expired (it revived the lock)",
    )
    .await?;
    unlock(suite, l3).await?;
    drop(lock);
    Ok(format!(
        "extend of an expired lock gave LockLost and left the name free; an extend reaching the \
         backend {} ms after the lock expired there was refused too",
        ms(t.slack)
    ))
}

/// C11: `lock_at_least_for` given to extend is honoured on unlock, counted from the extension.
/// The lock is taken for `2 l` (`l` = the short `lock_at_most_for`) and extended late, `l` in,
/// with `lock_at_least_for = l`, then unlocked at once: it must stay held until `l` after the
/// extension. A provider that counts at-least from the acquisition frees it at once (extending
/// right after acquiring could not tell the two apart).
pub async fn c11_extend_at_least(suite: &Suite) -> Verdict {
    finish(c11(suite).await)
}

async fn c11(suite: &Suite) -> R {
    need_extend(suite)?;
    let t = suite.timing();
    let l = t.at_most;
    let p = instances(suite, 2).await?;
    let big = (l + t.slack) * 4;
    let cfg = suite.config(&suite.lock_name("c11"), l * 2, Duration::ZERO)?;
    let (lock, a0, _a1) = timed_try_lock(suite, &p[0], &cfg).await?;
    let Some(mut lock) = lock else {
        return Err(Verdict::fail("try_lock found a fresh name held"));
    };
    tokio::time::sleep_until((a0 + l).into()).await;
    let at_least = l;
    let (e0, _) = extend(suite, &mut lock, big, at_least).await?;
    unlock(suite, lock).await?;
    let u1 = Instant::now();
    let deadline = at_least + u1.duration_since(e0) + t.slack;
    let (l2, got) = poll_acquire(
        suite,
        &p[1],
        &cfg,
        e0,
        at_least,
        deadline,
        "after an extend with lock_at_least_for made late in the lock, then unlock (at-least \
         counts from the extension, not from the acquisition)",
    )
    .await?;
    unlock(suite, l2).await?;
    Ok(format!(
        "locked for {} ms, extended +{} ms in with lock_at_least_for {} ms (lock_at_most_for {} ms) \
         then unlocked: free at +{} ms after the extend (+{} ms after the acquisition)",
        ms(l * 2),
        at(a0, e0),
        ms(at_least),
        ms(big),
        at(e0, got),
        at(a0, got)
    ))
}

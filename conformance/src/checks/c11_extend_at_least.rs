//! C11 `extend_at_least`: lock_at_least_for given to extend is honoured on unlock.

use std::time::{Duration, Instant};

use super::common::{extend, need_extend};
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, at, finish, instances, ms, poll_acquire, timed_try_lock, unlock},
};

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

//! C05 `expires_after_at_most`: a held lock expires after lock_at_most_for.

use std::time::Duration;

use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{
        R, at, finish, instances, ms, must_not_lock, poll_acquire, timed_try_lock, unlock,
    },
};

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

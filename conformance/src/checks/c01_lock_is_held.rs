//! C01 `lock_is_held`: a held lock excludes another instance; after unlock it can be taken.

use std::time::{Duration, Instant};

use super::common::LONG;
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, finish, instances, must_lock, must_not_lock, poll_acquire, unlock},
};

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

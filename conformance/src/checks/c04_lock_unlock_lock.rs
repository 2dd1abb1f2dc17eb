//! C04 `lock_unlock_lock`: lock, unlock, lock again in a row.

use std::time::Duration;

use super::common::LONG;
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, finish, instances, must_lock, unlock},
};

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

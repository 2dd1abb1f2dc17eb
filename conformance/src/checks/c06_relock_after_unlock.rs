//! C06 `relock_after_unlock`: lock right after unlock, 10 times in a row.

use std::time::Duration;

use super::common::LONG;
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, finish, instances, must_lock, must_not_lock, unlock},
};

/// C06: lock right after unlock, 10 times in a row, alternating instances.
pub async fn c06_relock_after_unlock(suite: &Suite) -> Verdict {
    finish(c06(suite).await)
}

async fn c06(suite: &Suite) -> R {
    let p = instances(suite, 2).await?;
    let cfg = suite.config(&suite.lock_name("c06"), LONG, Duration::ZERO)?;
    for i in 0..10 {
        let l = must_lock(suite, &p[i % 2], &cfg, &format!("round {i}")).await?;
        must_not_lock(suite, &p[(i + 1) % 2], &cfg, &format!("round {i}, other instance")).await?;
        unlock(suite, l).await?;
    }
    Ok("10 lock-right-after-unlock rounds across two instances".into())
}

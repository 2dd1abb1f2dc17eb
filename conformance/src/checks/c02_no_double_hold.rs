//! C02 `no_double_hold`: one name cannot be held twice, from the same or another instance.

use std::time::Duration;

use super::common::LONG;
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, finish, instances, must_lock, must_not_lock, unlock},
};

/// C02: the same name cannot be held twice, from the same instance or from another instance.
pub async fn c02_no_double_hold(suite: &Suite) -> Verdict {
    finish(c02(suite).await)
}

async fn c02(suite: &Suite) -> R {
    let p = instances(suite, 3).await?;
    let cfg = suite.config(&suite.lock_name("c02"), LONG, Duration::ZERO)?;
    let lock = must_lock(suite, &p[0], &cfg, "first lock").await?;
    must_not_lock(suite, &p[0], &cfg, "same instance again").await?;
    must_not_lock(suite, &p[1], &cfg, "second instance").await?;
    must_not_lock(suite, &p[2], &cfg, "third instance").await?;
    must_not_lock(suite, &p[0], &cfg, "same instance, third try").await?;
    unlock(suite, lock).await?;
    Ok("second hold refused from the same instance and from two others".into())
}

//! C03 `names_independent`: two different names are independent.

use std::time::Duration;

use super::common::LONG;
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, finish, instances, must_lock, must_not_lock, unlock},
};

/// C03: two different names are independent.
pub async fn c03_names_independent(suite: &Suite) -> Verdict {
    finish(c03(suite).await)
}

async fn c03(suite: &Suite) -> R {
    let p = instances(suite, 2).await?;
    let a = suite.config(&suite.lock_name("c03a"), LONG, Duration::ZERO)?;
    let b = suite.config(&suite.lock_name("c03b"), LONG, Duration::ZERO)?;
    let la = must_lock(suite, &p[0], &a, "name A").await?;
    let lb = must_lock(suite, &p[1], &b, "name B while A is held").await?;
    must_not_lock(suite, &p[1], &a, "A while held").await?;
    must_not_lock(suite, &p[0], &b, "B while held").await?;
    unlock(suite, la).await?;
    must_not_lock(suite, &p[0], &b, "B after A was released").await?;
    let la2 = must_lock(suite, &p[1], &a, "A after release while B is held").await?;
    unlock(suite, lb).await?;
    unlock(suite, la2).await?;
    Ok("two names held at once by different instances; releasing one left the other held".into())
}

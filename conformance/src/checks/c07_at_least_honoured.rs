//! C07 `at_least_honoured`: after an early unlock the lock stays held until lock_at_least_for.

use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, at, finish, instances, ms, poll_acquire, timed_try_lock, unlock},
};

/// C07: `lock_at_least_for`: after an early unlock the lock stays held until at-least has
/// passed, then is free (well before `lock_at_most_for`).
pub async fn c07_at_least_honoured(suite: &Suite) -> Verdict {
    finish(c07(suite).await)
}

async fn c07(suite: &Suite) -> R {
    let t = suite.timing();
    let p = instances(suite, 2).await?;
    let at_least = t.at_most;
    let at_most = (at_least + t.slack) * 4;
    let cfg = suite.config(&suite.lock_name("c07"), at_most, at_least)?;
    let (l, a0, a1) = timed_try_lock(suite, &p[0], &cfg).await?;
    let Some(l) = l else { return Err(Verdict::fail("first try_lock found a fresh name held")) };
    unlock(suite, l).await?;
    let deadline = at_least + a1.duration_since(a0) + t.slack;
    let (l2, got) =
        poll_acquire(suite, &p[1], &cfg, a0, at_least, deadline, "after early unlock").await?;
    unlock(suite, l2).await?;
    ensure!(got < a0 + at_most, "freed only at lock_at_most_for");
    Ok(format!(
        "unlocked at once; held until lock_at_least_for {} ms, free at +{} ms (lock_at_most_for {} ms)",
        ms(at_least),
        at(a0, got),
        ms(at_most)
    ))
}

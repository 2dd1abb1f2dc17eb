//! C07 `at_least_honoured`: after an early unlock the lock stays held until lock_at_least_for,
//! counted from the acquisition (a takeover's own, not the record's previous one), and a lock
//! unlocked after its at-least frees at once.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use shedlock::LockProvider;

use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, at, finish, instances, ms, poll_acquire, timed_try_lock, unlock},
};

/// C07: `lock_at_least_for`: after an early unlock the lock stays held until at-least has
/// passed, then is free (well before `lock_at_most_for`).
///
/// Two sub-cases make the instants a wrong provider would count from differ by more than the
/// tolerances, on purpose, so that they fail every run rather than when a timing lines up:
/// - a **takeover** of an expired record with a large at-least, unlocked at once, stays held
///   for that at-least from the *takeover* (a provider that keeps the expired record's
///   `locked_at` frees it a whole `lock_at_most_for` early);
/// - a lock **unlocked after its at-least** has passed is free within the slack (a provider
///   that counts at-least from the unlock keeps it held for another at-least).
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
    let takeover = takeover(suite, &p).await?;
    let late = unlocked_late(suite, &p).await?;
    Ok(format!(
        "unlocked at once; held until lock_at_least_for {} ms, free at +{} ms (lock_at_most_for {} ms); {takeover}; {late}",
        ms(at_least),
        at(a0, got),
        ms(at_most)
    ))
}

/// A takes the name for the short `lock_at_most_for` and lets it expire; B takes it over with
/// at-least `2 × at_most` and unlocks at once: held until B's at-least from the takeover.
async fn takeover(suite: &Suite, p: &[Arc<dyn LockProvider>]) -> R {
    let t = suite.timing();
    let name = suite.lock_name("c07-takeover");
    let first = suite.config(&name, t.at_most, Duration::ZERO)?;
    let at_least = t.at_most * 2;
    let second = suite.config(&name, (at_least + t.slack) * 4, at_least)?;
    let (stale, a0, a1) = timed_try_lock(suite, &p[0], &first).await?;
    let Some(stale) = stale else { bail!("takeover: try_lock found a fresh name held") };
    let deadline = t.at_most + a1.duration_since(a0) + t.slack;
    let (taken, b0) =
        poll_acquire(suite, &p[1], &second, a0, t.at_most, deadline, "takeover after expiry")
            .await?;
    let gap = b0.duration_since(a0);
    unlock(suite, taken).await?;
    // The probe holds nothing for long: it only looks.
    let probe = suite.config(&name, t.at_most, Duration::ZERO)?;
    let what = "a takeover with lock_at_least_for, unlocked at once (counted from the takeover, \
                not the expired record's acquisition)";
    let (l, got) =
        poll_acquire(suite, &p[0], &probe, b0, at_least, at_least + t.slack * 2, what).await?;
    unlock(suite, l).await?;
    drop(stale);
    Ok(format!(
        "a takeover {} ms after the expired acquisition with lock_at_least_for {} ms, unlocked \
         at once: free at +{} ms after the takeover",
        ms(gap),
        ms(at_least),
        at(b0, got)
    ))
}

/// A lock unlocked after its at-least has passed frees at once, not an at-least later.
async fn unlocked_late(suite: &Suite, p: &[Arc<dyn LockProvider>]) -> R {
    let t = suite.timing();
    let name = suite.lock_name("c07-late");
    // Twice the slack: a lock wrongly held for another at-least is still held a whole slack
    // after the deadline below.
    let at_least = (t.slack * 2).max(t.at_most);
    let cfg = suite.config(&name, (at_least + t.slack) * 4, at_least)?;
    let (l, a0, _) = timed_try_lock(suite, &p[0], &cfg).await?;
    let Some(l) = l else { bail!("late unlock: try_lock found a fresh name held") };
    // Past the at-least by the slack, so the backend's clock has passed it too.
    tokio::time::sleep_until((a0 + at_least + t.slack).into()).await;
    let u0 = Instant::now();
    unlock(suite, l).await?;
    let u = Instant::now().duration_since(u0);
    let what = "unlocked after its lock_at_least_for had passed";
    let (l2, got) = poll_acquire(suite, &p[1], &cfg, u0, Duration::ZERO, u + t.slack, what).await?;
    unlock(suite, l2).await?;
    Ok(format!(
        "unlocked {} ms after a lock_at_least_for of {} ms: free +{} ms after the unlock began",
        at(a0, u0),
        ms(at_least),
        at(u0, got)
    ))
}

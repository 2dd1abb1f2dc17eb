//! C12–C14: ownership.

use std::time::{Duration, Instant};

use shedlock::Error;

use super::{
    basic::LONG,
    util::{
        R, at, bounded, finish, instances, ms, must_lock, must_not_lock, poll_acquire,
        timed_try_lock, unlock,
    },
};
use crate::{report::Verdict, suite::Suite};

fn need_owner_checked(suite: &Suite) -> Result<(), Verdict> {
    if suite.capabilities().owner_checked {
        Ok(())
    } else {
        Err(Verdict::unsupported("capability `owner_checked` not declared"))
    }
}

/// C12: a stale holder (its lock expired and another instance took it) unlocking is a no-op:
/// the new holder keeps the lock.
pub async fn c12_stale_unlock_noop(suite: &Suite) -> Verdict {
    finish(c12(suite).await)
}

async fn c12(suite: &Suite) -> R {
    need_owner_checked(suite)?;
    let t = suite.timing();
    let p = instances(suite, 3).await?;
    let name = suite.lock_name("c12");
    let short = suite.config(&name, t.at_most, Duration::ZERO)?;
    let long = suite.config(&name, LONG, Duration::ZERO)?;
    let (stale, a0, a1) = timed_try_lock(suite, &p[0], &short).await?;
    let Some(stale) = stale else { return Err(Verdict::fail("try_lock found a fresh name held")) };
    let deadline = t.at_most + a1.duration_since(a0) + t.slack;
    let (fresh, _) =
        poll_acquire(suite, &p[1], &long, a0, t.at_most, deadline, "takeover after expiry").await?;
    bounded(suite, "stale unlock", stale.unlock()).await?.map_err(|e| {
        Verdict::fail(format!("a stale holder's unlock returned {e}, expected Ok (no-op)"))
    })?;
    must_not_lock(suite, &p[2], &long, "after the stale holder's unlock").await?;
    tokio::time::sleep(t.poll * 2).await;
    must_not_lock(suite, &p[0], &long, "stale instance, after its unlock").await?;
    let released = Instant::now();
    unlock(suite, fresh).await?;
    let (l3, _) = poll_acquire(
        suite,
        &p[2],
        &long,
        released,
        Duration::ZERO,
        t.slack,
        "after the new holder's unlock",
    )
    .await?;
    unlock(suite, l3).await?;
    Ok("the stale holder's unlock changed nothing; the new holder kept the lock".into())
}

/// C13: a stale holder's extend fails and does not extend the new holder's lock.
pub async fn c13_stale_extend_fails(suite: &Suite) -> Verdict {
    finish(c13(suite).await)
}

async fn c13(suite: &Suite) -> R {
    need_owner_checked(suite)?;
    super::extend::need_extend(suite)?;
    let t = suite.timing();
    let p = instances(suite, 3).await?;
    let name = suite.lock_name("c13");
    let short = suite.config(&name, t.at_most, Duration::ZERO)?;
    let second = suite.config(&name, t.at_most * 2, Duration::ZERO)?;
    let (stale, a0, a1) = timed_try_lock(suite, &p[0], &short).await?;
    let Some(mut stale) = stale else {
        return Err(Verdict::fail("try_lock found a fresh name held"));
    };
    let deadline = t.at_most + a1.duration_since(a0) + t.slack;
    let (fresh, b0) =
        poll_acquire(suite, &p[1], &second, a0, t.at_most, deadline, "takeover after expiry")
            .await?;
    let b1 = Instant::now();
    let r = bounded(suite, "stale extend", stale.extend(LONG, Duration::ZERO)).await?;
    match r {
        Err(Error::LockLost { .. }) => {}
        Ok(()) => return Err(Verdict::fail("a stale holder's extend succeeded")),
        Err(e) => {
            return Err(Verdict::fail(format!(
                "a stale holder's extend gave {e:?}, expected LockLost"
            )));
        }
    }
    // The new holder's lock must still expire on its own schedule, not LONG later.
    let held = second.lock_at_most_for();
    let deadline = held + b1.duration_since(b0) + t.slack;
    let (l3, got) = poll_acquire(
        suite,
        &p[2],
        &second,
        b0,
        held,
        deadline,
        "the new holder's lock after a stale extend",
    )
    .await?;
    drop(fresh);
    drop(stale);
    unlock(suite, l3).await?;
    Ok(format!(
        "stale extend gave LockLost; the new holder's {} ms lock freed at +{} ms as scheduled",
        ms(held),
        at(b0, got)
    ))
}

/// C14: records left behind — a pre-existing expired record, or a record deleted externally
/// while the process runs — never block locking for longer than `lock_at_most_for`.
/// Needs [`RecordHooks`](crate::RecordHooks).
pub async fn c14_leftover_records(suite: &Suite) -> Verdict {
    finish(c14(suite).await)
}

async fn c14(suite: &Suite) -> R {
    let Some(hooks) = suite.hooks().records().cloned() else {
        return Err(Verdict::not_applicable(
            "the factory offers no RecordHooks (Hooks::with_records)",
        ));
    };
    let t = suite.timing();
    let p = instances(suite, 3).await?;
    let hook =
        |what: &'static str| move |e| Verdict::fail(format!("record hook {what} failed: {e}"));

    // 1. A planted expired record.
    let n1 = suite.lock_name("c14a");
    let cfg1 = suite.config(&n1, t.at_most, Duration::ZERO)?;
    bounded(suite, "plant_expired_record", hooks.plant_expired_record(&n1))
        .await?
        .map_err(hook("plant_expired_record"))?;
    let planted = Instant::now();
    let (l, got) = poll_acquire(
        suite,
        &p[0],
        &cfg1,
        planted,
        Duration::ZERO,
        t.at_most + t.slack,
        "over a planted expired record",
    )
    .await?;
    let exists = bounded(suite, "record_exists", hooks.record_exists(&n1))
        .await?
        .map_err(hook("record_exists"))?;
    if !exists {
        return Err(Verdict::fail(format!(
            "record_exists({n1:?}) is false while the lock is held: the hook does not address the provider's record"
        )));
    }
    unlock(suite, l).await?;
    let planted_ms = at(planted, got);

    // 2. A record deleted while its lock is held, after both instances have used the name.
    let n2 = suite.lock_name("c14b");
    let short = suite.config(&n2, t.at_most, Duration::ZERO)?;
    let long = suite.config(&n2, LONG, Duration::ZERO)?;
    let l = must_lock(suite, &p[0], &short, "warm-up A").await?;
    unlock(suite, l).await?;
    let l = must_lock(suite, &p[1], &short, "warm-up B").await?;
    unlock(suite, l).await?;
    let held = must_lock(suite, &p[0], &short, "lock before deletion").await?;
    bounded(suite, "delete_record", hooks.delete_record(&n2))
        .await?
        .map_err(hook("delete_record"))?;
    let deleted = Instant::now();
    let exists = bounded(suite, "record_exists", hooks.record_exists(&n2))
        .await?
        .map_err(hook("record_exists"))?;
    if exists {
        return Err(Verdict::fail(format!(
            "record_exists({n2:?}) is still true after delete_record"
        )));
    }
    let (fresh, got) = poll_acquire(
        suite,
        &p[1],
        &long,
        deleted,
        Duration::ZERO,
        t.at_most + t.slack,
        "after external deletion",
    )
    .await?;
    let deleted_ms = at(deleted, got);
    let _ = bounded(suite, "stale unlock", held.unlock()).await?;
    if suite.capabilities().owner_checked {
        must_not_lock(suite, &p[2], &long, "after the deleted record's old holder unlocked")
            .await?;
    }
    unlock(suite, fresh).await?;

    // 3. Deleted again while free: the instance that created the record can still lock.
    bounded(suite, "delete_record", hooks.delete_record(&n2))
        .await?
        .map_err(hook("delete_record"))?;
    let deleted = Instant::now();
    let (l, _) = poll_acquire(
        suite,
        &p[0],
        &short,
        deleted,
        Duration::ZERO,
        t.at_most + t.slack,
        "after deleting a free record",
    )
    .await?;
    unlock(suite, l).await?;
    Ok(format!(
        "planted expired record: locked at +{planted_ms} ms; record deleted while held: relocked at +{deleted_ms} ms; \
         deleted while free: relocked by its creator (lock_at_most_for {} ms)",
        ms(t.at_most)
    ))
}

//! C14 `leftover_records`: expired or externally deleted records never block locking.

use std::time::{Duration, Instant};

use super::common::{Fence, LONG};
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{
        R, at, bounded, finish, instances, ms, must_lock, must_not_lock, poll_acquire,
        timed_try_lock, unlock,
    },
};

/// C14: records left behind — a pre-existing expired record, or a record deleted externally
/// while the process runs — never block locking for longer than `lock_at_most_for`.
/// When the provider declares `fencing`, the tokens of the locks taken after a deletion exceed
/// every token taken before it (a counter kept in the record itself starts over).
/// Needs [`RecordHooks`](crate::RecordHooks), and sees them act: the planted record must be
/// there, unless the hooks declare that the backend drops expired records itself
/// ([`RecordHooks::expired_records_vanish`](crate::RecordHooks::expired_records_vanish)), which
/// the check then proves with a lock left to expire.
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
    // A plant that did nothing would make this a fresh name, and the check prove nothing:
    // unless the backend drops expired records itself (declared, and proven in step 4), the
    // planted record must be there.
    let vanish = hooks.expired_records_vanish();
    let exists = bounded(suite, "record_exists", hooks.record_exists(&n1))
        .await?
        .map_err(hook("record_exists"))?;
    ensure!(
        exists || vanish,
        "plant_expired_record({n1:?}) returned, but record_exists says there is no record: the \
         hook planted nothing the provider could meet (if the backend drops expired records \
         itself, declare it with RecordHooks::expired_records_vanish)"
    );
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
    let mut fence = Fence::new(suite);
    let l = must_lock(suite, &p[0], &short, "warm-up A").await?;
    fence.saw(&l, "warm-up A")?;
    unlock(suite, l).await?;
    let l = must_lock(suite, &p[1], &short, "warm-up B").await?;
    fence.saw(&l, "warm-up B")?;
    unlock(suite, l).await?;
    let held = must_lock(suite, &p[0], &short, "lock before deletion").await?;
    fence.saw(&held, "the lock before deletion")?;
    fence.settle(suite).await;
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
    fence.saw(&fresh, "the lock taken after the held record was deleted")?;
    let _ = bounded(suite, "stale unlock", held.unlock()).await?;
    if suite.capabilities().owner_checked {
        must_not_lock(suite, &p[2], &long, "after the deleted record's old holder unlocked")
            .await?;
    }
    unlock(suite, fresh).await?;

    // 3. Deleted again while free: the instance that created the record can still lock.
    fence.settle(suite).await;
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
    fence.saw(&l, "the lock taken after the free record was deleted")?;
    unlock(suite, l).await?;

    // 4. Declared: the backend drops expired records itself. An expired lock's record must go.
    let planted_what = if vanish {
        let n4 = suite.lock_name("c14d");
        let cfg = suite.config(&n4, t.at_most, Duration::ZERO)?;
        let (l, a0, a1) = timed_try_lock(suite, &p[0], &cfg).await?;
        let Some(l) = l else { bail!("try_lock found a fresh name held") };
        // A TTL is enforced by the backend's own sweep, so the record may outlive the lease a
        // little: it is polled until three slacks past the expiry.
        tokio::time::sleep_until((a1 + t.at_most).into()).await;
        let give_up = a1 + t.at_most + t.slack * 3;
        let exists = loop {
            let exists = bounded(suite, "record_exists", hooks.record_exists(&n4))
                .await?
                .map_err(hook("record_exists"))?;
            if !exists || Instant::now() > give_up {
                break exists;
            }
            tokio::time::sleep(t.poll).await;
        };
        drop(l);
        ensure!(
            !exists,
            "RecordHooks::expired_records_vanish is declared, but the record of a lock that \
             expired {} ms ago is still there: the backend keeps expired records, so \
             plant_expired_record must leave one that record_exists sees",
            at(a0 + t.at_most, Instant::now())
        );
        "planted expired record (gone at once: the backend drops expired records, shown by an \
         expired lock's record vanishing)"
    } else {
        "planted expired record (seen by record_exists)"
    };
    Ok(format!(
        "{planted_what}: locked at +{planted_ms} ms; record deleted while held: relocked at +{deleted_ms} ms; \
         deleted while free: relocked by its creator (lock_at_most_for {} ms){}",
        ms(t.at_most),
        fence.summary("across both deletions")
    ))
}

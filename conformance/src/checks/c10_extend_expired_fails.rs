//! C10 `extend_expired_fails`: extending an expired lock fails and does not take it.

use std::{
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use shedlock::{Error, LockProvider};

use super::common::need_extend;
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::{
        calls::{R, bounded, finish, instances, ms, must_lock, timed_try_lock, unlock},
        stalling::Stalling,
    },
};

/// C10: extending an expired lock fails (with [`Error::LockLost`]) and does not make the lock
/// held: both an extend called after the lock expired (refused by the lock's lease, whatever the
/// backend would say) and an extend sent in time that reaches the backend only after the lock
/// expired there (a stalled process or link: the backend itself must refuse it, or the stale
/// holder would hold the lock again).
pub async fn c10_extend_expired_fails(suite: &Suite) -> Verdict {
    finish(c10(suite).await)
}

async fn c10(suite: &Suite) -> R {
    need_extend(suite)?;
    let t = suite.timing();
    let p = instances(suite, 2).await?;
    let cfg = suite.config(&suite.lock_name("c10"), t.at_most, Duration::ZERO)?;
    let (lock, _a0, a1) = timed_try_lock(suite, &p[0], &cfg).await?;
    let Some(mut lock) = lock else {
        return Err(Verdict::fail("try_lock found a fresh name held"));
    };
    tokio::time::sleep_until((a1 + t.at_most + t.slack).into()).await;
    let r = bounded(suite, "extend", lock.extend(t.at_most * 10, Duration::ZERO)).await?;
    match r {
        Err(Error::LockLost { .. }) => {}
        Ok(()) => {
            return Err(Verdict::fail(format!(
                "extend succeeded {} ms after the lock expired",
                ms(t.slack)
            )));
        }
        Err(e) => {
            return Err(Verdict::fail(format!(
                "extend of an expired lock gave {e:?}, expected LockLost"
            )));
        }
    }
    let l2 = must_lock(suite, &p[1], &cfg, "after the failed extend").await?;
    unlock(suite, l2).await?;
    drop(lock);

    // The extend leaves in time but reaches the backend after the lock expired there.
    let stall = t.at_most + t.slack;
    let stalling: Arc<dyn LockProvider> = Arc::new(Stalling {
        inner: p[0].clone(),
        pause: Arc::new(AtomicBool::new(true)),
        stall,
        hold: None,
    });
    let cfg = suite.config(&suite.lock_name("c10b"), t.at_most, Duration::ZERO)?;
    let mut lock = must_lock(suite, &stalling, &cfg, "lock to extend late").await?;
    // The kit's own stall comes on top of the provider's time: bound the call by both.
    let bound = suite.options().fault_bound + stall;
    let late = tokio::time::timeout(bound, lock.extend(t.at_most * 10, Duration::ZERO))
        .await
        .map_err(|_| {
            Verdict::fail(format!(
                "late extend did not return within {} ms (the {} ms stall plus the fault bound)",
                bound.as_millis(),
                stall.as_millis()
            ))
        })?;
    match late {
        Err(Error::LockLost { .. }) => {}
        Ok(()) => bail!("an extend answered after the lock's lease ended reported success"),
        Err(e) => {
            bail!("an extend that reached the backend after expiry gave {e:?}, expected LockLost")
        }
    }
    let l3 = must_lock(
        suite,
        &p[1],
        &cfg,
        "after an extend that reached the backend after the lock expired (it revived the lock)",
    )
    .await?;
    unlock(suite, l3).await?;
    drop(lock);
    Ok(format!(
        "extend of an expired lock gave LockLost and left the name free; an extend reaching the \
         backend {} ms after the lock expired there was refused too",
        ms(t.slack)
    ))
}

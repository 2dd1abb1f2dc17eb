//! C31 `force_release`: an administrative release frees exactly the acquisition an operator
//! saw, and never a lock taken again since.

use std::{sync::Arc, time::Duration};

use shedlock::{ForceRelease, LockInfo, LockProvider};

use super::common::LONG;
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, bounded, finish, inspect_held, instances, must_lock, must_not_lock, unlock},
};

/// C31: `force_release` of a seen, held lock releases it (answering the record it released):
/// another instance takes it at once, the old holder's extend fails with `LockLost` and its
/// unlock leaves the new holder's lock as it is. A release of a record seen before the lock was
/// released and taken again changes nothing (`Changed`): the new holder keeps it.
pub async fn c31_force_release(suite: &Suite) -> Verdict {
    finish(c31(suite).await)
}

async fn force(
    suite: &Suite,
    p: &Arc<dyn LockProvider>,
    seen: &LockInfo,
) -> Result<ForceRelease, Verdict> {
    bounded(suite, "force_release", p.force_release(seen))
        .await?
        .map_err(|e| Verdict::fail(format!("force_release({:?}) failed: {e}", seen.name)))
}

async fn c31(suite: &Suite) -> R {
    let caps = suite.capabilities().clone();
    if !caps.force_release || !caps.inspect {
        return Err(Verdict::unsupported(
            "capabilities `force_release` and `inspect` not both declared",
        ));
    }
    let p = instances(suite, 3).await?;
    let name = suite.lock_name("c31");
    let cfg = suite.config(&name, LONG, Duration::ZERO)?;

    // A stuck holder, released by an operator.
    let mut stuck = must_lock(suite, &p[0], &cfg, "the stuck holder").await?;
    let seen = inspect_held(suite, &p[2], &name, "the stuck holder's lock").await?;
    match force(suite, &p[2], &seen).await? {
        ForceRelease::Released(r) if r.acquisition == seen.acquisition => {}
        other => {
            return Err(Verdict::fail(format!(
                "force_release of the seen, held lock gave {other:?}"
            )));
        }
    }
    let next = must_lock(suite, &p[1], &cfg, "right after the forced release").await?;
    if caps.extend {
        match bounded(suite, "extend", stuck.extend(LONG, Duration::ZERO)).await? {
            Err(shedlock::Error::LockLost { .. }) => {}
            other => {
                return Err(Verdict::fail(format!(
                    "the released holder's extend gave {other:?}, not LockLost"
                )));
            }
        }
    }
    let _ = bounded(suite, "unlock", stuck.unlock()).await?;
    must_not_lock(suite, &p[2], &cfg, "after the released holder's unlock").await?;
    let now = inspect_held(suite, &p[2], &name, "the new holder's lock").await?;
    if now.acquisition == seen.acquisition {
        return Err(Verdict::fail(
            "the new holder's lock was inspected as the released acquisition",
        ));
    }

    // A record seen, then released and taken again: a release of what was seen changes nothing.
    unlock(suite, next).await?;
    let again = must_lock(suite, &p[0], &cfg, "taken again").await?;
    match force(suite, &p[2], &now).await? {
        ForceRelease::Changed(_) => {}
        other => {
            return Err(Verdict::fail(format!(
                "force_release of an acquisition that ended, while another holds the lock, gave {other:?}"
            )));
        }
    }
    must_not_lock(suite, &p[1], &cfg, "after a stale forced release").await?;
    let held = inspect_held(suite, &p[2], &name, "the lock taken again").await?;
    if held.acquisition == now.acquisition {
        return Err(Verdict::fail("the lock taken again was inspected as the ended acquisition"));
    }
    unlock(suite, again).await?;
    Ok("a seen lock was released and its holder lost it; a stale release left a lock taken again"
        .to_owned())
}

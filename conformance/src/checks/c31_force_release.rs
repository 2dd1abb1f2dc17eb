//! C31 `force_release`: an administrative release frees exactly the acquisition an operator
//! saw, and never a lock taken again since.

use std::{sync::Arc, time::Duration};

use shedlock::{ForceRelease, LockInfo, LockProvider};

use super::common::LONG;
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, bounded, finish, inspect_held, instances, must_lock, must_not_lock, unlock},
    tools::fenced::FencedRegister,
};

/// C31: `force_release` of a seen, held lock releases it (answering the record it released):
/// another instance takes it at once, the old holder's extend fails with `LockLost` and its
/// unlock leaves the new holder's lock as it is. A release of a record seen before the lock was
/// released and taken again changes nothing (`Changed`): the new holder keeps it.
///
/// With fencing declared: every token handed out after the forced release (to the next holder,
/// and to the holder after a stale release) is greater than every token handed out for that
/// name before it, and a resource fenced by those tokens refuses the released holder's late
/// write after accepting the new holder's.
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

    // Tokens handed out for this name before the forced release: two earlier holders, then
    // the stuck one.
    let mut before = Vec::new();
    for _ in 0..2 {
        let l = must_lock(suite, &p[0], &cfg, "an earlier holder").await?;
        before.extend(l.fencing_token());
        unlock(suite, l).await?;
    }

    // A stuck holder, released by an operator.
    let mut stuck = must_lock(suite, &p[0], &cfg, "the stuck holder").await?;
    before.extend(stuck.fencing_token());
    let register = FencedRegister::new();
    if let Some(t) = stuck.fencing_token() {
        let _ = register.write(t, "the stuck holder's first write");
    }
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
    let fencing = if caps.fencing {
        fenced_after_release(&before, &next, &stuck, &register)?
    } else {
        String::new()
    };
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
    let next_token = next.fencing_token();
    unlock(suite, next).await?;
    let again = must_lock(suite, &p[0], &cfg, "taken again").await?;
    if caps.fencing {
        let all: Vec<u64> = before.iter().copied().chain(next_token).collect();
        increasing(&all, again.fencing_token(), "the holder after a stale forced release")?;
    }
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
    Ok(format!(
        "a seen lock was released and its holder lost it; a stale release left a lock taken \
         again{fencing}"
    ))
}

/// The first holder after a forced release: its token is greater than every token handed out
/// for the name before (the sequence is not reset with the record), so a resource fenced by the
/// released holder refuses that holder's late write and accepts the new holder's.
fn fenced_after_release(
    before: &[u64],
    next: &shedlock::Lock,
    stuck: &shedlock::Lock,
    register: &FencedRegister,
) -> R {
    let Some(new) = next.fencing_token() else {
        return Err(Verdict::fail("fencing is declared, but the new holder has no token"));
    };
    increasing(before, Some(new), "the first holder after the forced release")?;
    register.write(new, "the new holder's write").map_err(|e| {
        Verdict::fail(format!("the fenced resource refused the new holder's write: {e}"))
    })?;
    if let Some(old) = stuck.fencing_token()
        && register.write(old, "the released holder's late write").is_ok()
    {
        return Err(Verdict::fail(format!(
            "the fenced resource accepted the released holder's late write (token {old}) after \
             the new holder's (token {new})"
        )));
    }
    Ok(format!(
        "; the token after the release ({new}) is above every earlier one ({before:?}), and the \
         fenced resource refused the released holder's late write"
    ))
}

/// `token` is greater than every token of `before`.
fn increasing(before: &[u64], token: Option<u64>, who: &str) -> Result<(), Verdict> {
    let Some(token) = token else {
        return Err(Verdict::fail(format!("fencing is declared, but {who} has no token")));
    };
    if let Some(max) = before.iter().max()
        && token <= *max
    {
        return Err(Verdict::fail(format!(
            "{who} got fencing token {token}, not above {max} handed out before for the same \
             name ({before:?}): a forced release must not reset the fencing sequence"
        )));
    }
    Ok(())
}

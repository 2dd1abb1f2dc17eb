//! C21 `fenced_resource`: a fenced resource refuses a paused stale holder's writes.

use std::{sync::Arc, time::Duration};

use shedlock::LockProvider;

use super::common::{LONG, fencing_skew, need_fencing, token};
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::{
        calls::{R, finish, instances, poll_acquire, timed_try_lock, unlock},
        fenced::FencedRegister,
    },
};

/// C21: a fenced resource that rejects tokens lower than the highest seen refuses every write
/// from a stale holder in a pause-then-resume scenario (Kleppmann's GC-pause case), also when
/// the stale holder's clock is ahead of the new holder's (an hour each way; a quarter of
/// `lock_at_most_for` for client-time providers).
pub async fn c21_fenced_resource(suite: &Suite) -> Verdict {
    finish(c21(suite).await)
}

async fn c21(suite: &Suite) -> R {
    need_fencing(suite)?;
    let p = instances(suite, 2).await?;
    let same = pause(suite, &p, Duration::ZERO, "").await?;
    // Again with the stale holder's clock ahead and the new holder's behind: a token drawn from
    // the client's clock is then smaller for the new holder, and the resource would take the
    // stale holder's writes.
    let (skewed, skew, extra) = fencing_skew(suite).await?;
    let tag = format!("skew ±{} ms: ", skew.as_millis());
    let skewed = pause(suite, &skewed, extra, &tag).await?;
    Ok(format!("{same}; with the stale holder ahead and the new one behind, {skewed}"))
}

/// A (`p[0]`) takes the name for the short `lock_at_most_for` and writes; it pauses, B (`p[1]`)
/// takes over after expiry (allowing `extra` for B's clock) and writes; A resumes and writes.
async fn pause(suite: &Suite, p: &[Arc<dyn LockProvider>], extra: Duration, tag: &str) -> R {
    let t = suite.timing();
    let name = suite.lock_name("c21");
    let short = suite.config(&name, t.at_most, Duration::ZERO)?;
    let long = suite.config(&name, LONG, Duration::ZERO)?;
    let register = FencedRegister::new();
    let (a, a0, a1) = timed_try_lock(suite, &p[0], &short).await?;
    let Some(a) = a else { bail!("{tag}try_lock found a free name held") };
    let ta = token(&a, "holder A")?;
    register.write(ta, "A before the pause").map_err(|e| {
        Verdict::fail(format!("{tag}the first holder's first write was refused: {e}"))
    })?;
    // A pauses (GC pause); its lease expires; B takes over and writes.
    let deadline = t.at_most + a1.duration_since(a0) + t.slack + extra;
    let what = format!("{tag}takeover during the pause");
    let (b, _) = poll_acquire(suite, &p[1], &long, a0, t.at_most, deadline, &what).await?;
    let tb = token(&b, "holder B")?;
    register.write(tb, "B").map_err(|e| {
        Verdict::fail(format!(
            "{tag}the new holder's write was refused: {e} (token {tb} <= stale {ta})"
        ))
    })?;
    // A resumes, believing it still holds the lock, and writes twice.
    let mut refused = 0;
    for i in 0..2 {
        match register.write(ta, format!("A after the pause {i}")) {
            Err(_) => refused += 1,
            Ok(()) => bail!(
                "{tag}the stale holder's write with token {ta} was accepted after the new holder \
                 wrote with token {tb}"
            ),
        }
    }
    let b2 = register.write(tb, "B again");
    drop(a);
    unlock(suite, b).await?;
    b2.map_err(|e| Verdict::fail(format!("{tag}the new holder's second write was refused: {e}")))?;
    if register.value().as_deref() != Some("B again") {
        bail!("{tag}the register holds {:?}, expected B's write", register.value());
    }
    Ok(format!(
        "stale token {ta} refused {refused} times after new token {tb}; the resource holds B's writes"
    ))
}

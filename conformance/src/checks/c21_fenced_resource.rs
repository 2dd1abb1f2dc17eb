//! C21 `fenced_resource`: a fenced resource refuses a paused stale holder's writes.

use std::time::Duration;

use super::common::{LONG, need_fencing, token};
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::{
        calls::{R, finish, instances, poll_acquire, timed_try_lock, unlock},
        fenced::FencedRegister,
    },
};

/// C21: a fenced resource that rejects tokens lower than the highest seen refuses every write
/// from a stale holder in a pause-then-resume scenario (Kleppmann's GC-pause case).
pub async fn c21_fenced_resource(suite: &Suite) -> Verdict {
    finish(c21(suite).await)
}

async fn c21(suite: &Suite) -> R {
    need_fencing(suite)?;
    let t = suite.timing();
    let p = instances(suite, 2).await?;
    let name = suite.lock_name("c21");
    let short = suite.config(&name, t.at_most, Duration::ZERO)?;
    let long = suite.config(&name, LONG, Duration::ZERO)?;
    let register = FencedRegister::new();
    let (a, a0, a1) = timed_try_lock(suite, &p[0], &short).await?;
    let Some(a) = a else { return Err(Verdict::fail("try_lock found a free name held")) };
    let ta = token(&a, "holder A")?;
    register
        .write(ta, "A before the pause")
        .map_err(|e| Verdict::fail(format!("the first holder's first write was refused: {e}")))?;
    // A pauses (GC pause); its lease expires; B takes over and writes.
    let deadline = t.at_most + a1.duration_since(a0) + t.slack;
    let (b, _) =
        poll_acquire(suite, &p[1], &long, a0, t.at_most, deadline, "takeover during the pause")
            .await?;
    let tb = token(&b, "holder B")?;
    register.write(tb, "B").map_err(|e| {
        Verdict::fail(format!("the new holder's write was refused: {e} (token {tb} <= stale {ta})"))
    })?;
    // A resumes, believing it still holds the lock, and writes twice.
    let mut refused = 0;
    for i in 0..2 {
        match register.write(ta, format!("A after the pause {i}")) {
            Err(_) => refused += 1,
            Ok(()) => {
                return Err(Verdict::fail(format!(
                    "the stale holder's write with token {ta} was accepted after the new holder wrote with token {tb}"
                )));
            }
        }
    }
    let b2 = register.write(tb, "B again");
    drop(a);
    unlock(suite, b).await?;
    b2.map_err(|e| Verdict::fail(format!("the new holder's second write was refused: {e}")))?;
    if register.value().as_deref() != Some("B again") {
        return Err(Verdict::fail(format!(
            "the register holds {:?}, expected B's write",
            register.value()
        )));
    }
    Ok(format!(
        "stale token {ta} refused {refused} times after new token {tb}; the resource holds B's writes"
    ))
}

//! C13 `stale_extend_fails`: a stale holder's extend fails and does not extend the new lock.

use std::time::{Duration, Instant};

use shedlock::Error;

use super::common::{
    LONG, StaleCall, need_extend, need_owner_checked, stale_in_flight, stale_in_transit,
};
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, at, bounded, finish, instances, ms, poll_acquire, timed_try_lock, unlock},
};

/// C13: a stale holder's extend fails and does not extend the new holder's lock. With a backend
/// address also in flight, as in [`c12_stale_unlock_noop`](crate::checks::c12_stale_unlock_noop): an extend whose answers the proxy
/// holds while another instance takes over must not extend the new holder's lock (an extend
/// that reads the owner, then writes the new expiry without checking it again, does).
/// In transit: a stale extend to a short `lock_at_most_for`, sent while the lease was valid (so
/// the core's client-side refusal of an expired lease does not stop it) but delivered only after
/// the takeover, must not rewrite the new holder's expiry: a backend that extends without
/// checking the owner frees the new holder's lock early.
pub async fn c13_stale_extend_fails(suite: &Suite) -> Verdict {
    finish(c13(suite).await)
}

async fn c13(suite: &Suite) -> R {
    need_owner_checked(suite)?;
    need_extend(suite)?;
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
    let in_flight = stale_in_flight(suite, StaleCall::Extend, &p).await?;
    let in_transit = stale_in_transit(suite, StaleCall::Extend, &p).await?;
    Ok(format!(
        "stale extend gave LockLost; the new holder's {} ms lock freed at +{} ms as scheduled; \
         {in_flight}; {in_transit}",
        ms(held),
        at(b0, got)
    ))
}

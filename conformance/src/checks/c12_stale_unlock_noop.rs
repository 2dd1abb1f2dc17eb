//! C12 `stale_unlock_noop`: a stale holder's unlock leaves the new holder's lock.

use std::time::{Duration, Instant};

use super::common::{LONG, StaleCall, need_owner_checked, stale_in_flight, stale_in_transit};
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{
        R, bounded, finish, instances, must_not_lock, poll_acquire, timed_try_lock, unlock,
    },
};

/// C12: a stale holder (its lock expired and another instance took it) unlocking is a no-op:
/// the new holder keeps the lock. With a backend address
/// ([`Hooks::with_backend_address`](crate::Hooks::with_backend_address)) also in flight: the
/// stale holder's unlock leaves before the takeover, the kit's fault proxy holds the backend's
/// answers while another instance takes over, then releases them; the new holder must keep the
/// lock (an unlock that reads the owner, then writes without checking it again, frees it).
/// In transit: a stale unlock sent while the lease was valid but delivered only after the
/// takeover (held in the proxy, or past the core's checks by the kit's wrapper where there is no
/// address) leaves the new holder's lock held.
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
    let in_flight = stale_in_flight(suite, StaleCall::Unlock, &p).await?;
    let in_transit = stale_in_transit(suite, StaleCall::Unlock, &p).await?;
    Ok(format!(
        "the stale holder's unlock changed nothing; the new holder kept the lock; {in_flight}; {in_transit}"
    ))
}

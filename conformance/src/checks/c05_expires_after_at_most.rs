//! C05 `expires_after_at_most`: a held lock expires after lock_at_most_for, and never before
//! the holder's lease ends.

use std::time::{Duration, Instant};

use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{
        R, at, bounded, finish, instances, ms, must_not_lock, not_early, poll_acquire,
        timed_try_lock, unlock,
    },
};

/// How long before the holder's `Lock::valid_until` another instance probes without pausing:
/// a record that ends a little early (a time truncated to the millisecond, a lease counted from
/// the answer instead of the request) is taken inside this window.
const DENSE: Duration = Duration::from_millis(5);

/// C05: a held lock expires after `lock_at_most_for` (no unlock); another instance can then take
/// it, and not earlier: not before `lock_at_most_for` (within the timing tolerance) and, exactly,
/// not before the holder's own [`Lock::valid_until`](shedlock::Lock::valid_until) (probed
/// without pauses just before it, so a lease that outlives the record by a millisecond is found).
/// The lock's lease must also end at least the declared
/// [`clock_step`](shedlock::Capabilities::clock_step) early.
pub async fn c05_expires_after_at_most(suite: &Suite) -> Verdict {
    finish(c05(suite).await)
}

async fn c05(suite: &Suite) -> R {
    let t = suite.timing();
    let p = instances(suite, 2).await?;
    let cfg = suite.config(&suite.lock_name("c05"), t.at_most, Duration::ZERO)?;
    let (l, a0, a1) = timed_try_lock(suite, &p[0], &cfg).await?;
    let Some(l) = l else { return Err(Verdict::fail("first try_lock found a fresh name held")) };
    let (declared, used) = (suite.capabilities().clock_step, l.lease().clock_step());
    if used < declared {
        let _ = bounded(suite, "unlock", l.unlock()).await;
        bail!(
            "the lock's lease ends {} µs early (Lease::clock_step), less than the {} µs clock step \
             the provider declares (Capabilities::clock_step): build the Acquisition with \
             with_clock_step(the declared step)",
            used.as_micros(),
            declared.as_micros()
        );
    }
    must_not_lock(suite, &p[1], &cfg, "other instance right after").await?;
    let valid_until = l.valid_until().into_std();
    tokio::time::sleep_until(valid_until.checked_sub(DENSE).unwrap_or(valid_until).into()).await;
    let mut probes = 0u32;
    let mut early = None;
    while Instant::now() < valid_until {
        let (r, b0, b1) = timed_try_lock(suite, &p[1], &cfg).await?;
        probes += 1;
        if let Some(taken) = r {
            if b1 < valid_until {
                let _ = bounded(suite, "unlock", taken.unlock()).await;
                bail!(
                    "another instance took the name at +{} µs, before the holder's \
                     Lock::valid_until at +{} µs: the holder's lease outlived its record on the \
                     backend (is a time truncated, or the lease counted from the answer instead of \
                     the request? see Capabilities::clock_step)",
                    b1.duration_since(a0).as_micros(),
                    valid_until.duration_since(a0).as_micros()
                );
            }
            early = Some((taken, b0, b1));
            break;
        }
    }
    let (l2, got) = match early {
        Some((l2, b0, b1)) => (not_early(suite, l2, a0, t.at_most, b1, "expiry").await?, b0),
        None => {
            let deadline = t.at_most + a1.duration_since(a0) + t.slack;
            poll_acquire(suite, &p[1], &cfg, a0, t.at_most, deadline, "expiry").await?
        }
    };
    drop(l);
    unlock(suite, l2).await?;
    Ok(format!(
        "lock_at_most_for {} ms: freed for another instance at +{} ms, not before the holder's \
         lease ended ({probes} probes in its last {} ms)",
        ms(t.at_most),
        at(a0, got),
        ms(DENSE)
    ))
}

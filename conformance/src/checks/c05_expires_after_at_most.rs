//! C05 `expires_after_at_most`: a held lock expires after lock_at_most_for, and never before
//! the holder's lease ends.

use std::time::{Duration, Instant};

use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{
        R, at, bounded, finish, instances, ms, must_not_lock, not_early, poll_acquire,
        timed_try_lock, try_lock, unlock,
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
/// Then the ends of up to 16 more leases, at spread sub-millisecond offsets, are probed the same
/// way, so that a record ending up to a millisecond early is found in every run.
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
    let ends = lease_ends(suite, &p).await?;
    Ok(format!(
        "lock_at_most_for {} ms: freed for another instance at +{} ms, not before the holder's \
         lease ended ({probes} probes in its last {} ms); {ends}",
        ms(t.at_most),
        at(a0, got),
        ms(DENSE)
    ))
}

/// The most further leases whose ends C05 probes. A lease that ends up to a millisecond early
/// (a time floored to the millisecond) is taken inside the early part only when a probe lands
/// there: one lease catches it about half the time over a loopback round trip, sixteen at spread
/// sub-millisecond offsets nearly always.
const LEASE_ENDS: u32 = 16;

/// More lease ends, each probed without pauses in its last [`DENSE`]: leases taken one after
/// another, `2 × DENSE` plus a fraction of a millisecond apart (so their ends fall at spread
/// offsets within the millisecond, and their probe windows do not overlap), all within the first
/// half of `lock_at_most_for`. None may be taken by another instance before its holder's
/// `Lock::valid_until`.
async fn lease_ends(suite: &Suite, p: &[std::sync::Arc<dyn shedlock::LockProvider>]) -> R {
    let t = suite.timing();
    let gap = DENSE * 2 + Duration::from_micros(1000 / u64::from(LEASE_ENDS) + 1);
    let fit = t.at_most.as_micros() / 2 / gap.as_micros();
    let count = u32::try_from(fit).unwrap_or(u32::MAX).clamp(1, LEASE_ENDS);
    let base = Instant::now();
    let mut held = Vec::new();
    for i in 0..count {
        tokio::time::sleep_until((base + gap * i).into()).await;
        let cfg =
            suite.config(&suite.lock_name(&format!("c05-end{i}")), t.at_most, Duration::ZERO)?;
        match try_lock(suite, &p[0], &cfg).await? {
            Some(l) => held.push((cfg, l)),
            None => bail!("a fresh name ({:?}) was found held", cfg.name()),
        }
    }
    let (mut probes, mut probed) = (0u32, 0u32);
    for (i, (cfg, l)) in held.iter().enumerate() {
        let valid_until = l.valid_until().into_std();
        tokio::time::sleep_until(valid_until.checked_sub(DENSE).unwrap_or(valid_until).into())
            .await;
        let mut any = false;
        while Instant::now() < valid_until {
            let (r, _, b1) = timed_try_lock(suite, &p[1], cfg).await?;
            probes += 1;
            any = true;
            if let Some(taken) = r {
                let _ = bounded(suite, "unlock", taken.unlock()).await;
                if b1 < valid_until {
                    bail!(
                        "lease end {} of {count}: another instance took the name {} µs before \
                         the holder's Lock::valid_until: the holder's lease outlived its record \
                         on the backend (a time truncated to the millisecond? see \
                         Capabilities::clock_step)",
                        i + 1,
                        valid_until.duration_since(b1).as_micros()
                    );
                }
                break;
            }
        }
        probed += u32::from(any);
    }
    drop(held);
    Ok(format!(
        "{probed} of {count} more lease ends probed in their last {} ms ({probes} probes), none \
         taken before its holder's lease ended",
        ms(DENSE)
    ))
}

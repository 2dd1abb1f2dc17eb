//! C26 `cancellation`: dropped futures never leave a name locked past at_most or poison the provider.

use std::{
    future::Future,
    time::{Duration, Instant},
};

use shedlock::{Error, Lock, LockConfig, LockProvider};

use super::common::LONG;
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, finish, instances, must_lock, poll_acquire, unlock},
};

/// C26: cancellation: dropping try_lock / unlock / extend futures at random await points never
/// leaves a name locked past `lock_at_most_for` and never poisons the provider for later calls.
///
/// Only a future that was polled and was still pending when dropped counts as cancelled
/// mid-flight (one dropped before its first poll, or that completed, proves nothing). The check
/// draws operations until [`Options::cancel_rounds`](crate::Options::cancel_rounds) of them were
/// cancelled mid-flight (at most eight times as many operations); cancellation points adapt to
/// the provider's speed (a number of polls up to what a completed call took, or a timeout below
/// its typical duration). A provider whose calls all complete at their first poll cannot be
/// cancelled mid-flight: the detail says so.
pub async fn c26_cancellation(suite: &Suite) -> Verdict {
    finish(c26(suite).await)
}

/// How a cancellable call ended.
enum Cancelled<T> {
    /// It completed, after this many polls.
    Completed(T, u32),
    /// It was polled, still pending, and dropped: a real cancellation.
    MidFlight,
    /// It was dropped before being polled (not a cancellation of anything).
    Unpolled,
}

/// Polls `fut` until it completes or until `polls` yields of the canceller (or `micros` of time)
/// have passed, then drops it.
async fn cancel_at<T>(
    fut: impl Future<Output = T>,
    polls: u32,
    micros: u64,
    by_time: bool,
) -> Cancelled<T> {
    let count = std::sync::atomic::AtomicU32::new(0);
    let mut fut = std::pin::pin!(fut);
    let tracked = std::future::poll_fn(|cx| {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        fut.as_mut().poll(cx)
    });
    let r = if by_time {
        tokio::time::timeout(Duration::from_micros(micros), tracked).await.ok()
    } else {
        tokio::select! {
            biased;
            _ = async { for _ in 0..polls { tokio::task::yield_now().await; } } => None,
            r = tracked => Some(r),
        }
    };
    let n = count.load(std::sync::atomic::Ordering::Relaxed);
    match r {
        Some(v) => Cancelled::Completed(v, n),
        None if n > 0 => Cancelled::MidFlight,
        None => Cancelled::Unpolled,
    }
}

async fn c26(suite: &Suite) -> R {
    let t = suite.timing();
    let p = instances(suite, 2).await?;
    // Half the acquisitions go for a fresh name, so that locks get held (and their unlock and
    // extend cancelled) although cancelled acquisitions keep names taken until they expire.
    let mut names: Vec<String> = vec![suite.lock_name("c26")];
    let mut rng = suite.rng();
    let mut held: Vec<Lock> = Vec::new();
    let target = suite.options().cancel_rounds;
    let max_ops = target * 8;
    let (mut ops, mut completed, mut mid_flight, mut unpolled) = (0usize, 0usize, 0usize, 0usize);
    // What completed calls took: the most polls, and a running mean of their duration.
    let (mut most_polls, mut typical_us) = (1u32, 1000.0f64);
    // Mid-flight cancellations of try_lock, extend and unlock.
    let mut per_kind = [0usize; 3];
    let started = Instant::now();
    while mid_flight < target && ops < max_ops {
        // A provider that never left a call pending in `target` operations cannot be cancelled
        // mid-flight: drawing more proves nothing.
        if ops >= target && mid_flight == 0 {
            break;
        }
        ops += 1;
        let polls = rng.u32(1..=most_polls.clamp(1, 12));
        // Up to twice a typical call: about half of the timed cancellations land mid-flight.
        let micros = rng.u64(0..=((typical_us * 2.0) as u64).max(20));
        let by_time = rng.bool();
        if !held.is_empty() && rng.u8(0..8) == 0 {
            let l = held.swap_remove(rng.usize(0..held.len()));
            drop(l); // left to expire
        }
        // 0 | 1: try_lock, 2: unlock, 3: extend (a third each while a lock is held).
        let kind = if held.is_empty() { 0 } else { rng.u8(1..4) };
        let kind = if kind == 3 && !suite.capabilities().extend { 2 } else { kind };
        let call_started = Instant::now();
        let done = match kind {
            0 | 1 => {
                if rng.bool() {
                    names.push(suite.lock_name("c26"));
                }
                let cfg = LockConfig::new(
                    names[rng.usize(0..names.len())].clone(),
                    t.at_most,
                    Duration::ZERO,
                )
                .map_err(|e| Verdict::fail(format!("kit config: {e}")))?;
                let inst = &p[rng.usize(0..p.len())];
                match cancel_at(inst.try_lock(&cfg), polls, micros, by_time).await {
                    Cancelled::Completed(Ok(Some(l)), n) => {
                        held.push(l);
                        Some(n)
                    }
                    Cancelled::Completed(Ok(None), n) => Some(n),
                    Cancelled::Completed(Err(e), _) => {
                        bail!("try_lock failed after earlier cancellations: {e}")
                    }
                    Cancelled::MidFlight => None,
                    Cancelled::Unpolled => {
                        unpolled += 1;
                        continue;
                    }
                }
            }
            3 => {
                let i = rng.usize(0..held.len());
                let at_most = t.at_most;
                let r = cancel_at(held[i].extend(at_most, Duration::ZERO), polls, micros, by_time)
                    .await;
                match r {
                    Cancelled::Completed(Ok(()) | Err(Error::LockLost { .. }), n) => Some(n),
                    Cancelled::Completed(Err(e), _) => {
                        bail!("extend failed after earlier cancellations: {e}")
                    }
                    Cancelled::MidFlight => None,
                    Cancelled::Unpolled => {
                        unpolled += 1;
                        continue;
                    }
                }
            }
            _ => {
                let l = held.swap_remove(rng.usize(0..held.len()));
                match cancel_at(l.unlock(), polls, micros, by_time).await {
                    Cancelled::Completed(Ok(()), n) => Some(n),
                    Cancelled::Completed(Err(e), _) => {
                        bail!("unlock failed after earlier cancellations: {e}")
                    }
                    Cancelled::MidFlight => None,
                    Cancelled::Unpolled => {
                        unpolled += 1;
                        continue;
                    }
                }
            }
        };
        match done {
            Some(n) => {
                completed += 1;
                most_polls = most_polls.max(n);
                let us = call_started.elapsed().as_secs_f64() * 1e6;
                typical_us = typical_us * 0.8 + us * 0.2;
            }
            None => {
                mid_flight += 1;
                per_kind[match kind {
                    0 | 1 => 0,
                    3 => 1,
                    _ => 2,
                }] += 1;
                if by_time {
                    // It takes longer than that: aim later next time.
                    typical_us = typical_us.max(micros as f64 * 1.25);
                }
            }
        }
    }
    drop(held);
    let last_op = Instant::now();
    // Every name frees within lock_at_most_for of the last operation.
    for n in &names {
        let cfg = suite.config(n, LONG, Duration::ZERO)?;
        let (l, _) = poll_acquire(
            suite,
            &p[0],
            &cfg,
            last_op,
            Duration::ZERO,
            t.at_most + t.slack,
            "after cancellations",
        )
        .await?;
        unlock(suite, l).await?;
    }
    // Later calls work on both instances.
    for (i, inst) in p.iter().enumerate() {
        let cfg = suite.config(&suite.lock_name("c26-after"), LONG, Duration::ZERO)?;
        let l = must_lock(suite, inst, &cfg, &format!("instance {i} after cancellations")).await?;
        unlock(suite, l).await?;
        let l = must_lock(suite, inst, &cfg, &format!("instance {i} relock after cancellations"))
            .await?;
        unlock(suite, l).await?;
    }
    let note = if mid_flight == 0 {
        " (every call completed at its first poll: nothing could be cancelled mid-flight)"
            .to_owned()
    } else if mid_flight < target {
        format!(" (fewer than the {target} sought within {max_ops} operations)")
    } else {
        String::new()
    };
    Ok(format!(
        "{ops} operations: {mid_flight} cancelled mid-flight{note} (try_lock {}, extend {}, \
         unlock {}), {completed} completed, {unpolled} dropped unpolled, in {} ms; every name \
         freed within lock_at_most_for; both instances work afterwards",
        per_kind[0],
        per_kind[1],
        per_kind[2],
        started.elapsed().as_millis()
    ))
}

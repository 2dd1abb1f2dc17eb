//! Helpers shared by several checks (no check module is imported here): capability guards, the
//! fencing-token [`Fence`]
//! of C14/C25, recovery after a fault, instances on skewed clocks.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use shedlock::{Lock, LockProvider, SharedClock};

pub(crate) use crate::tools::{
    calls::LONG,
    stale::{StaleCall, stale_in_flight, stale_in_transit},
};
use crate::{
    factory::InstanceOptions,
    outcome::Verdict,
    suite::Suite,
    tools::{
        calls::{bounded, ms},
        clocks,
    },
};

pub(crate) fn need_extend(suite: &Suite) -> Result<(), Verdict> {
    if suite.capabilities().extend {
        Ok(())
    } else {
        Err(Verdict::unsupported("capability `extend` not declared"))
    }
}

/// Extends `lock`, timing the call; an error fails the check.
pub(crate) async fn extend(
    suite: &Suite,
    lock: &mut Lock,
    at_most: Duration,
    at_least: Duration,
) -> Result<(Instant, Instant), Verdict> {
    let e0 = Instant::now();
    let name = lock.name().to_owned();
    bounded(suite, "extend", lock.extend(at_most, at_least))
        .await?
        .map_err(|e| Verdict::fail(format!("extend({name:?}) of a held lock failed: {e}")))?;
    Ok((e0, Instant::now()))
}

pub(crate) fn need_owner_checked(suite: &Suite) -> Result<(), Verdict> {
    if suite.capabilities().owner_checked {
        Ok(())
    } else {
        Err(Verdict::unsupported("capability `owner_checked` not declared"))
    }
}

/// The fencing tokens of one name, when the provider declares `fencing`: each new acquisition's
/// token must exceed every token seen before (C14 across deleted records, C25 across a backend
/// restart: a counter kept in the lock's own record starts over when the record goes).
pub(crate) struct Fence {
    on: bool,
    seen: Vec<(String, u64)>,
}

impl Fence {
    pub(crate) fn new(suite: &Suite) -> Self {
        Self { on: suite.capabilities().fencing, seen: Vec::new() }
    }

    /// Records `lock`'s token, failing if it does not exceed every earlier one.
    pub(crate) fn saw(&mut self, lock: &shedlock::Lock, step: &str) -> Result<(), Verdict> {
        if !self.on {
            return Ok(());
        }
        let Some(tok) = lock.fencing_token() else {
            bail!("{step}: the lock carries no fencing token although `fencing` is declared");
        };
        if let Some((prev_step, prev)) = self.seen.iter().max_by_key(|(_, t)| *t)
            && tok <= *prev
        {
            bail!(
                "fencing token {tok} of {step} is not greater than token {prev} of {prev_step} \
                     (tokens must keep increasing when the record is deleted or the backend \
                     restarts: a counter kept in the record itself starts over)"
            );
        }
        self.seen.push((step.to_owned(), tok));
        Ok(())
    }

    /// With fencing, waits one declared granularity (plus 1 ms) so that a backend clock the
    /// tokens may be derived from (e.g. `max(previous + 1, server time)`) has moved on since the
    /// last token: the kit asks for increase across a deletion or restart, not within one tick.
    pub(crate) async fn settle(&self, suite: &Suite) {
        if self.on {
            tokio::time::sleep(suite.timing().granularity + Duration::from_millis(1)).await;
        }
    }

    /// `"; fencing tokens ... increasing <what>"`, or nothing without fencing.
    pub(crate) fn summary(&self, what: &str) -> String {
        if !self.on {
            return String::new();
        }
        let list: Vec<String> = self.seen.iter().map(|(_, t)| t.to_string()).collect();
        format!("; fencing tokens increasing {what}: {}", list.join(" < "))
    }
}

/// Retries `try_lock` + `unlock` of fresh names on `p` until both succeed, within the recovery
/// bound; each attempt bounded. Returns how long it took.
pub(crate) async fn recover(suite: &Suite, p: &Arc<dyn LockProvider>) -> Result<Duration, Verdict> {
    let started = Instant::now();
    let bound = suite.options().recovery_bound;
    let mut last = String::new();
    while started.elapsed() < bound {
        let cfg = suite.config(&suite.lock_name("recover"), LONG, Duration::ZERO)?;
        match bounded(suite, "try_lock while recovering", p.try_lock(&cfg)).await? {
            Ok(Some(l)) => match bounded(suite, "unlock while recovering", l.unlock()).await? {
                Ok(()) => return Ok(started.elapsed()),
                Err(e) => last = format!("unlock: {e}"),
            },
            Ok(None) => bail!("a fresh name was reported held while recovering"),
            Err(e) => last = format!("try_lock: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the instance did not recover within {} ms (last error: {last})", ms(bound))
}

pub(crate) fn need_fencing(suite: &Suite) -> Result<(), Verdict> {
    if suite.capabilities().fencing {
        Ok(())
    } else {
        Err(Verdict::unsupported("capability `fencing` not declared"))
    }
}

pub(crate) fn token(lock: &Lock, step: &str) -> Result<u64, Verdict> {
    lock.fencing_token().ok_or_else(|| {
        Verdict::fail(format!(
            "{step}: the lock carries no fencing token although `fencing` is declared"
        ))
    })
}

/// Builds instances whose clocks are skewed by `offsets_ms` (one instance per offset).
pub(crate) async fn skewed_instances(
    suite: &Suite,
    offsets_ms: &[i64],
) -> Result<Vec<(Arc<dyn LockProvider>, SharedClock)>, Verdict> {
    let mut v = Vec::new();
    for (i, off) in offsets_ms.iter().enumerate() {
        let clock = clocks::skewed_system_clock(*off);
        let opts = InstanceOptions::new(i).with_clock(clock.clone());
        let p = bounded(suite, "the factory", suite.instance_with(opts)).await?.map_err(|e| {
            Verdict::fail(format!("the factory could not build a skewed instance: {e}"))
        })?;
        v.push((p, clock));
    }
    Ok(v)
}

pub(crate) fn skew_ms(s: Duration) -> i64 {
    i64::try_from(s.as_millis()).unwrap_or(i64::MAX / 4)
}

/// Two instances for the fencing checks whose clocks disagree: `[ahead, behind]`, skewed by
/// `+S` and `-S`, and the extra time the behind instance may need to see the ahead one's lease
/// end. Server time: `S` is an hour and the lease ignores the clocks (no extra time). Client
/// time: `S` is a quarter of the short `lock_at_most_for` (capped by the documented skew
/// bound), so exclusion holds and the behind instance sees the lease end `2S` late.
pub(crate) async fn fencing_skew(
    suite: &Suite,
) -> Result<(Vec<Arc<dyn LockProvider>>, Duration, Duration), Verdict> {
    let (skew, extra) = if suite.capabilities().server_time {
        (Duration::from_secs(3600), Duration::ZERO)
    } else {
        let mut s = suite.timing().at_most / 4;
        if let Some(bound) = suite.options().documented_skew_bound {
            s = s.min(bound);
        }
        (s, s * 2)
    };
    let s = skew_ms(skew);
    let p = skewed_instances(suite, &[s, -s]).await?.into_iter().map(|(p, _)| p).collect();
    Ok((p, skew, extra))
}

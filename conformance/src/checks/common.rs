//! Helpers shared by several checks (no check module is imported here): the long lease
//! [`LONG`], capability guards, the stale-holder races of C12/C13 (answers held, requests held),
//! the fencing-token [`Fence`]
//! of C14/C25, recovery after a fault, instances on skewed clocks.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize},
    },
    time::{Duration, Instant},
};

use shedlock::{Lock, LockProvider, SharedClock};
use tokio::sync::watch;

use crate::{
    factory::InstanceOptions,
    outcome::Verdict,
    suite::Suite,
    tools::{
        calls::{R, at, bounded, ms, must_not_lock, poll_acquire, timed_try_lock, unlock},
        clocks,
        proxy::FaultProxy,
        stalling::{Hold, Stalling},
    },
};

/// A `lock_at_most_for` long enough never to expire during a check.
pub(crate) const LONG: Duration = Duration::from_secs(120);

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

/// Aborts a spawned task when dropped.
pub(crate) struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The stale holder's call made in flight by [`stale_in_flight`] and in transit by
/// [`stale_in_transit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StaleCall {
    Unlock,
    Extend,
}

impl StaleCall {
    fn label(self) -> &'static str {
        match self {
            StaleCall::Unlock => "unlock",
            StaleCall::Extend => "extend",
        }
    }
}

/// A fault proxy to `upstream` and an instance built to reach the backend through it.
async fn instance_via_proxy(
    suite: &Suite,
    upstream: std::net::SocketAddr,
) -> Result<(Arc<dyn LockProvider>, FaultProxy), Verdict> {
    let proxy = FaultProxy::start(upstream)
        .await
        .map_err(|e| Verdict::fail(format!("could not start the fault proxy: {e}")))?;
    let opts = InstanceOptions::new(0).with_address(proxy.addr());
    let a = bounded(suite, "the factory", suite.instance_with(opts)).await?.map_err(|e| {
        Verdict::fail(format!("the factory could not build an instance via the proxy: {e}"))
    })?;
    Ok((a, proxy))
}

/// The in-flight part of C12 (unlock) and C13 (extend). Instance A, built through a fault proxy
/// of its own, takes a lock for `l = lock_at_most_for`; the proxy then holds the backend's
/// answers to A while A's unlock (or extend to `4 l`) leaves, so whatever A's call does on the
/// backend, A only learns of it later. Instance `p[1]` polls for the lock meanwhile. Once it has
/// taken over (or `l + slack` after A's lock was taken), the answers are released and A's call
/// completes. If the takeover happened while A's call was in flight, the new holder must keep
/// its lock on its own schedule: not freed by A's unlock, not extended by A's extend. A provider
/// whose backend applied A's call first (an atomic unlock freed the lock, or an atomic extend
/// kept it from being taken) is fine either way; the detail says which happened.
pub(crate) async fn stale_in_flight(
    suite: &Suite,
    call: StaleCall,
    p: &[Arc<dyn LockProvider>],
) -> R {
    let Some(upstream) = suite.hooks().backend_address() else {
        return Ok("in-flight variant not run: the factory offers no backend address".into());
    };
    let what = call.label();
    let t = suite.timing();
    let l = t.at_most;
    let (a, proxy) = instance_via_proxy(suite, upstream).await?;
    let name = suite.lock_name(&format!("stale-{what}-in-flight"));
    let short = suite.config(&name, l, Duration::ZERO)?;
    // The new holder takes a long lock after a stale unlock (it must stay held), and a short one
    // after a stale extend (it must free on its own schedule, not after A's `4 l`).
    let (taker_cfg, extend_to) = match call {
        StaleCall::Unlock => (suite.config(&name, LONG, Duration::ZERO)?, Duration::ZERO),
        StaleCall::Extend => (short.clone(), l * 4),
    };
    let (stale, _a0, a1) = timed_try_lock(suite, &a, &short).await?;
    let Some(mut stale) = stale else {
        return Err(Verdict::fail("try_lock found a fresh name held"));
    };
    proxy.set_holding_answers(true);
    let stale_call = tokio::spawn(async move {
        match call {
            StaleCall::Unlock => (stale.unlock().await, None),
            StaleCall::Extend => {
                let r = stale.extend(extend_to, Duration::ZERO).await;
                (r, Some(stale))
            }
        }
    });
    let hold_until = a1 + l + t.slack;
    let give_up = hold_until + extend_to + t.slack * 2;
    let (bp, bc, poll) = (p[1].clone(), taker_cfg.clone(), t.poll);
    let mut taker = tokio::spawn(async move {
        // A retryable error (a loaded machine's "no response in time") is polled through like
        // "held": what this check proves is that the name frees, and a name that never does
        // still fails at `give_up`, with the last error said.
        let mut last_error = None;
        loop {
            let b0 = Instant::now();
            match bp.try_lock(&bc).await {
                Ok(Some(lock)) => return Ok((lock, b0, Instant::now())),
                Ok(None) => {}
                Err(e) if e.is_retryable() => last_error = Some(e),
                Err(e) => return Err(format!("the new holder's try_lock failed: {e}")),
            }
            if Instant::now() > give_up {
                let last = last_error.map(|e| format!("; its last error: {e}")).unwrap_or_default();
                return Err(format!(
                    "the name was still held {} ms after the stale holder's lock was taken \
                     (lock_at_most_for {} ms){last}",
                    at(a1, Instant::now()),
                    ms(l)
                ));
            }
            tokio::time::sleep(poll).await;
        }
    });
    // Neither task outlives the check, whichever way it ends.
    let _abort = (AbortOnDrop(stale_call.abort_handle()), AbortOnDrop(taker.abort_handle()));
    let early = tokio::select! {
        r = &mut taker => Some(r),
        () = tokio::time::sleep_until(hold_until.into()) => None,
    };
    proxy.set_holding_answers(false);
    let released = Instant::now();
    let (r, stale) = bounded(suite, &format!("the stale holder's in-flight {what}"), stale_call)
        .await?
        .map_err(|e| Verdict::fail(format!("the stale holder's {what} panicked: {e}")))?;
    let stale_result = match (call, r) {
        (StaleCall::Extend, Ok(())) => bail!(
            "a stale holder's extend, answered after its lock had expired and been taken over, \
             reported success"
        ),
        (_, Ok(())) => "Ok".to_owned(),
        (_, Err(e)) => format!("{e}"),
    };
    if let Some(stale) = stale {
        // A's extend may have landed before the takeover (atomic: the lock is A's for `4 l`):
        // release it so the new holder gets it now. An owner-checked no-op otherwise.
        let _ = bounded(suite, "unlock", stale.unlock()).await?;
    }
    let taken = match early {
        Some(r) => r,
        None => {
            let wait =
                give_up.saturating_duration_since(Instant::now()) + suite.options().fault_bound;
            tokio::time::timeout(wait, &mut taker).await.map_err(|_| {
                Verdict::fail(format!("the new holder's try_lock hung for {} ms", ms(wait)))
            })?
        }
    };
    let (fresh, b0, b1) = taken
        .map_err(|e| Verdict::fail(format!("the new holder's task panicked: {e}")))?
        .map_err(Verdict::fail)?;
    if b1 >= released {
        unlock(suite, fresh).await?;
        return Ok(format!(
            "in flight: the backend applied the stale {what} before another instance could take \
             over (answered {stale_result})"
        ));
    }
    let step = format!("after a stale {what} that was in flight during the takeover");
    match call {
        StaleCall::Unlock => {
            must_not_lock(suite, &p[2], &taker_cfg, &step).await?;
            tokio::time::sleep(t.poll * 2).await;
            must_not_lock(suite, &p[2], &taker_cfg, &step).await?;
            unlock(suite, fresh).await?;
        }
        StaleCall::Extend => {
            let deadline = l + b1.duration_since(b0) + t.slack;
            let (l3, _) = poll_acquire(
                suite,
                &p[2],
                &taker_cfg,
                b0,
                l,
                deadline,
                &format!("the new holder's {} ms lock {step}", ms(l)),
            )
            .await?;
            drop(fresh);
            unlock(suite, l3).await?;
        }
    }
    Ok(format!(
        "in flight: another instance took over {} ms before the stale {what}'s answers were \
         released (answered {stale_result}) and kept its lock as scheduled",
        released.saturating_duration_since(b1).as_millis()
    ))
}

/// The in-transit part of C12 (unlock) and C13 (extend): the stale holder's call *leaves* while
/// its lease is valid, so the core's own checks let it through, but is held on its way and
/// reaches the backend only after another instance has taken the name — as a slow link, a
/// retransmission or a paused sender delivers it in production. With a backend address the
/// fault proxy holds A's requests (client→server data); without one the kit's wrapper holds the
/// call past the core's checks, right before the provider's handle. The new holder's lock must
/// be unchanged: an unlock must not free it, and an extend to the short `lock_at_most_for` must
/// not rewrite its expiry (the name is still held a slack after that extend would have ended).
pub(crate) async fn stale_in_transit(
    suite: &Suite,
    call: StaleCall,
    p: &[Arc<dyn LockProvider>],
) -> R {
    let what = call.label();
    let t = suite.timing();
    let l = t.at_most;
    let (gate, _) = watch::channel(false);
    let waiting = Arc::new(AtomicUsize::new(0));
    let (a, proxy, via) = match suite.hooks().backend_address() {
        Some(upstream) => {
            let (a, proxy) = instance_via_proxy(suite, upstream).await?;
            (a, Some(proxy), "the fault proxy")
        }
        None => {
            let hold = Hold { gate: gate.subscribe(), waiting: waiting.clone() };
            let a: Arc<dyn LockProvider> = Arc::new(Stalling {
                inner: p[0].clone(),
                pause: Arc::new(AtomicBool::new(false)),
                stall: Duration::ZERO,
                hold: Some(hold),
            });
            (a, None, "the kit's wrapper, past the core's checks")
        }
    };
    let hold = |on: bool| match &proxy {
        Some(proxy) => proxy.set_holding_requests(on),
        None => {
            gate.send_replace(on);
        }
    };
    let in_transit = || match &proxy {
        Some(proxy) => proxy.held_chunks() > 0,
        None => waiting.load(std::sync::atomic::Ordering::SeqCst) > 0,
    };
    let name = suite.lock_name(&format!("stale-{what}-in-transit"));
    let short = suite.config(&name, l, Duration::ZERO)?;
    let long = suite.config(&name, LONG, Duration::ZERO)?;
    let (stale, a0, a1) = timed_try_lock(suite, &a, &short).await?;
    let Some(mut stale) = stale else { bail!("in transit: try_lock found a fresh name held") };
    hold(true);
    let mut stale_call = tokio::spawn(async move {
        match call {
            StaleCall::Unlock => stale.unlock().await,
            StaleCall::Extend => stale.extend(l, Duration::ZERO).await,
        }
    });
    let _abort = AbortOnDrop(stale_call.abort_handle());
    // The call must have left A (its lease still valid) before the takeover.
    let left_by = a1 + l;
    loop {
        if in_transit() {
            break;
        }
        if stale_call.is_finished() || Instant::now() > left_by {
            hold(false);
            let r = bounded(suite, "the stale call", &mut stale_call).await?;
            return Ok(format!(
                "in transit: not run, the {what} never left the client while its lease was valid \
                 (it returned {r:?})"
            ));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let deadline = l + a1.duration_since(a0) + t.slack;
    let step = format!("takeover while the stale {what} was in transit");
    let (fresh, _) = poll_acquire(suite, &p[1], &long, a0, l, deadline, &step).await?;
    hold(false);
    let released = Instant::now();
    let answered = bounded(suite, &format!("the stale holder's {what} in transit"), stale_call)
        .await?
        .map_err(|e| Verdict::fail(format!("the stale holder's {what} panicked: {e}")))?;
    let answered = match answered {
        Ok(()) => "Ok".to_owned(),
        Err(e) => e.to_string(),
    };
    let step = format!("after a stale {what} that reached the backend after the takeover");
    must_not_lock(suite, &p[2], &long, &step).await?;
    if call == StaleCall::Extend {
        // Had the stale extend rewritten the record, the name would free `l` after it arrived.
        tokio::time::sleep_until((released + l + t.slack).into()).await;
        let step = format!("{} ms {step}", at(released, Instant::now()));
        must_not_lock(suite, &p[2], &long, &step).await?;
    } else {
        tokio::time::sleep(t.poll * 2).await;
        must_not_lock(suite, &p[2], &long, &step).await?;
    }
    unlock(suite, fresh).await?;
    Ok(format!(
        "in transit: the stale {what}, sent while its lease was valid and held in {via} until \
         another instance had taken over, left the new holder's lock unchanged (answered \
         {answered})"
    ))
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

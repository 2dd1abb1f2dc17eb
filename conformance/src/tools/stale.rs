//! The stale holder's calls of C12 (unlock) and C13 (extend), made after another instance has
//! taken over: in flight (the backend's answers held by a fault proxy) and in transit (the
//! requests held on their way, by the proxy or by the kit's wrapper).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize},
    },
    time::{Duration, Instant},
};

use shedlock::LockProvider;
use tokio::sync::watch;

use crate::{
    factory::InstanceOptions,
    outcome::Verdict,
    suite::Suite,
    tools::{
        calls::{
            AbortOnDrop, LONG, R, at, bounded, ms, must_not_lock, poll_acquire, timed_try_lock,
            unlock,
        },
        proxy::FaultProxy,
        stalling::{Hold, Stalling},
    },
};

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

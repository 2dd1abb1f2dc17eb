//! C24 `backend_unreachable`: refused or cut connections give typed errors in bounded time.

use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use shedlock::{Error, LockProvider};

use super::common::{LONG, recover};
use crate::{
    factory::InstanceOptions,
    outcome::Verdict,
    suite::Suite,
    tools::{
        calls::{
            R, bounded, finish, instances, ms, must_lock, must_not_lock, poll_acquire, unlock,
        },
        proxy::FaultProxy,
    },
};

/// Runs `fut` on its own task so a panic is caught, bounded by the fault bound. Returns the
/// output and how long it took.
async fn guarded<T: Send + 'static>(
    suite: &Suite,
    what: &str,
    fut: impl Future<Output = T> + Send + 'static,
) -> Result<(T, Duration), Verdict> {
    guarded_for(suite.options().fault_bound, what, fut).await
}

/// [`guarded`] with its own bound.
async fn guarded_for<T: Send + 'static>(
    bound: Duration,
    what: &str,
    fut: impl Future<Output = T> + Send + 'static,
) -> Result<(T, Duration), Verdict> {
    let started = Instant::now();
    let h = tokio::spawn(fut);
    match tokio::time::timeout(bound, h).await {
        Err(_) => Err(Verdict::fail(format!("{what} hung: no answer within {} ms", ms(bound)))),
        Ok(Err(e)) if e.is_panic() => Err(Verdict::fail(format!("{what} panicked"))),
        Ok(Err(e)) => Err(Verdict::fail(format!("{what} was cancelled: {e}"))),
        Ok(Ok(v)) => Ok((v, started.elapsed())),
    }
}

/// C24: backend unreachable (connections cut by the kit's fault proxy, new ones refused, a
/// call cut mid-operation, or a stalled backend that accepts connections and never answers):
/// every call returns a typed error within a bounded time (`check` too, where the provider
/// declares it, and it answers `Ok` while the backend is reachable); no panic,
/// no hang, no lock reported held that is not; the provider recovers when the backend is
/// reachable again. Needs [`Hooks::with_backend_address`](crate::Hooks::with_backend_address).
pub async fn c24_backend_unreachable(suite: &Suite) -> Verdict {
    finish(c24(suite).await)
}

async fn c24(suite: &Suite) -> R {
    let Some(upstream) = suite.hooks().backend_address() else {
        return Err(Verdict::not_applicable(
            "the factory offers no backend address (Hooks::with_backend_address) for the fault proxy",
        ));
    };
    let t = suite.timing();
    let proxy = FaultProxy::start(upstream)
        .await
        .map_err(|e| Verdict::fail(format!("could not start the fault proxy: {e}")))?;
    let via_proxy = InstanceOptions::new(0).with_address(proxy.addr());
    let x = bounded(suite, "the factory", suite.instance_with(via_proxy.clone())).await?.map_err(
        |e| Verdict::fail(format!("the factory could not build an instance via the proxy: {e}")),
    )?;
    let direct = instances(suite, 1).await?.remove(0);

    // Warm up through the proxy, and make sure the instance really uses it.
    let warm = suite.config(&suite.lock_name("c24w"), LONG, Duration::ZERO)?;
    let l = must_lock(suite, &x, &warm, "through the proxy").await?;
    must_not_lock(suite, &direct, &warm, "direct instance while held through the proxy").await?;
    unlock(suite, l).await?;
    if proxy.connections() == 0 {
        bail!("the instance built with InstanceOptions::address did not connect through the proxy");
    }

    let mut worst = Duration::ZERO;
    let mut notes = Vec::new();
    let checks = suite.capabilities().check;
    if checks {
        let x2 = x.clone();
        let (r, _) = guarded(suite, "check", async move { x2.check().await }).await?;
        if let Err(e) = r {
            bail!("check failed while the backend was reachable: {e}");
        }
    }

    // 1. A held lock, then every connection cut and new ones refused.
    let n1 = suite.lock_name("c24a");
    let short = suite.config(&n1, t.at_most, Duration::ZERO)?;
    let held = must_lock(suite, &x, &short, "lock before the outage").await?;
    let held_at = Instant::now();
    proxy.set_refusing(true).await.map_err(|e| Verdict::fail(format!("proxy: {e}")))?;
    proxy.cut_all();
    let fresh = suite.config(&suite.lock_name("c24b"), LONG, Duration::ZERO)?;
    {
        let (x2, cfg) = (x.clone(), fresh.clone());
        let (r, took) =
            guarded(suite, "try_lock during the outage", async move { x2.try_lock(&cfg).await })
                .await?;
        worst = worst.max(took);
        match r {
            Err(e) => notes.push(format!("try_lock: {} ({} ms)", kind(&e), took.as_millis())),
            Ok(Some(_)) => {
                bail!("try_lock reported a lock acquired while the backend was unreachable")
            }
            Ok(None) => {
                bail!("try_lock reported a free name as held while the backend was unreachable")
            }
        }
    }
    let mut held = held;
    if suite.capabilities().extend {
        let (r, took, back) = {
            let started = Instant::now();
            let fut = async move {
                let r = held.extend(LONG, Duration::ZERO).await;
                (r, held)
            };
            let ((r, back), _) = guarded(suite, "extend during the outage", fut).await?;
            (r, started.elapsed(), back)
        };
        held = back;
        worst = worst.max(took);
        match r {
            Err(e) => notes.push(format!("extend: {} ({} ms)", kind(&e), took.as_millis())),
            Ok(()) => bail!("extend reported success while the backend was unreachable"),
        }
    }
    {
        let (r, took) = guarded(suite, "unlock during the outage", held.unlock()).await?;
        worst = worst.max(took);
        match r {
            Err(e) => notes.push(format!("unlock: {} ({} ms)", kind(&e), took.as_millis())),
            Ok(()) => bail!("unlock reported success while the backend was unreachable"),
        }
    }
    if checks {
        let x2 = x.clone();
        let (r, took) =
            guarded(suite, "check during the outage", async move { x2.check().await }).await?;
        worst = worst.max(took);
        match r {
            Err(e) => notes.push(format!("check: {} ({} ms)", kind(&e), took.as_millis())),
            Ok(()) => bail!(
                "check answered Ok while the backend was unreachable (the provider declares \
                 `check`: it must ask the backend)"
            ),
        }
    } else {
        notes.push("check: not declared".to_owned());
    }
    // A new instance while refused: building may fail; if it builds, its calls must fail.
    {
        let opts = via_proxy.clone();
        let f = suite.factory().clone();
        let (built, took) = guarded(suite, "building an instance during the outage", async move {
            f.create(opts).await
        })
        .await?;
        worst = worst.max(took);
        if let Ok(y) = built {
            let cfg = fresh.clone();
            let (r, took) =
                guarded(suite, "a new instance's try_lock during the outage", async move {
                    y.try_lock(&cfg).await
                })
                .await?;
            worst = worst.max(took);
            if r.is_ok() {
                bail!(
                    "a new instance's try_lock during the outage returned {:?}",
                    r.map(|o| o.is_some())
                );
            }
        }
    }
    // The lock whose unlock failed frees by itself within lock_at_most_for.
    let (l, _) = poll_acquire(
        suite,
        &direct,
        &short,
        held_at,
        Duration::ZERO,
        t.at_most + t.slack + worst,
        "the lock whose unlock failed",
    )
    .await?;
    unlock(suite, l).await?;

    // 2. Cut mid-operation: requests delayed in the proxy, connections cut while in flight.
    proxy.set_refusing(false).await.map_err(|e| Verdict::fail(format!("proxy: {e}")))?;
    let recovered = recover(suite, &x).await?;
    notes.push(format!("recovered after {} ms", recovered.as_millis()));
    let n3 = suite.config(&suite.lock_name("c24c"), t.at_most, Duration::ZERO)?;
    proxy.set_delay(Duration::from_millis(300));
    let (x3, cfg3) = (x.clone(), n3.clone());
    let call = tokio::spawn(async move { x3.try_lock(&cfg3).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.cut_all();
    let started = Instant::now();
    let bound = suite.options().fault_bound;
    let r = match tokio::time::timeout(bound, call).await {
        Err(_) => bail!("try_lock cut mid-operation hung for {} ms", ms(bound)),
        Ok(Err(e)) if e.is_panic() => bail!("try_lock cut mid-operation panicked"),
        Ok(Err(e)) => bail!("try_lock cut mid-operation was cancelled: {e}"),
        Ok(Ok(r)) => r,
    };
    worst = worst.max(started.elapsed());
    proxy.set_delay(Duration::ZERO);
    let cut_at = Instant::now();
    match r {
        Err(e) => notes.push(format!("cut mid-try_lock: {}", kind(&e))),
        Ok(reported) => {
            // A retried call may legitimately answer; it must tell the truth.
            let truth = bounded(suite, "try_lock", direct.try_lock(&n3)).await?;
            let truly_held = match truth {
                Ok(Some(l)) => {
                    let _ = bounded(suite, "unlock", l.unlock()).await?;
                    false
                }
                Ok(None) => true,
                Err(e) => bail!("the direct instance failed: {e}"),
            };
            if !truly_held {
                bail!(
                    "try_lock cut mid-operation answered {} but the name is free",
                    if reported.is_some() { "acquired" } else { "held elsewhere" }
                );
            }
            notes.push(
                "cut mid-try_lock: answered after a retry, consistent with the backend".into(),
            );
            drop(reported);
        }
    }
    // Whatever happened on the backend, the name frees within lock_at_most_for.
    let (l, _) = poll_acquire(
        suite,
        &direct,
        &n3,
        cut_at,
        Duration::ZERO,
        t.at_most + t.slack + worst,
        "after the cut",
    )
    .await?;
    unlock(suite, l).await?;

    // 3. A slow link: answers delayed in both directions.
    let recovered = recover(suite, &x).await?;
    notes.push(slow_link(suite, &proxy, &x, &direct, &mut worst).await?);

    // 4. A stalled backend: connections accepted, nothing ever answered.
    notes.push(stalled(suite, &proxy, &x, &via_proxy, &direct, &mut worst).await?);

    // 5. Later calls on the same instance work again.
    let recovered = recovered.max(recover(suite, &x).await?);
    Ok(format!(
        "{}; slowest failing call {} ms (bound {} ms); recovered again after {} ms",
        notes.join("; "),
        worst.as_millis(),
        ms(bound),
        recovered.as_millis()
    ))
}

/// C24 on a slow link (the proxy delays every chunk by `d`, both ways):
///
/// - `d` small against `lock_at_most_for`: the lock is granted, and its lease is measured from
///   before the request was sent, so it ends no later than the call's start plus
///   `lock_at_most_for` plus `d` (a provider that starts the lease when the answer arrives is at
///   least `2 d` late);
/// - `d` greater than `lock_at_most_for`: the answer arrives after the lease could have ended, when
///   the backend may already have expired the lock and handed it to another node: `try_lock` must
///   not report it acquired (a typed error, `LeaseExpiredInFlight` from `Acquisition::grant`), and
///   the name frees within `lock_at_most_for`.
async fn slow_link(
    suite: &Suite,
    proxy: &FaultProxy,
    x: &Arc<dyn LockProvider>,
    direct: &Arc<dyn LockProvider>,
    worst: &mut Duration,
) -> Result<String, Verdict> {
    let t = suite.timing();
    let lease = t.at_most * 2;

    let d = lease / 12;
    let cfg = suite.config(&suite.lock_name("c24d"), lease, Duration::ZERO)?;
    proxy.set_delay(d);
    let (x4, c4) = (x.clone(), cfg.clone());
    let call_started = tokio::time::Instant::now();
    let (r, took) =
        guarded(suite, "try_lock on a slow link", async move { x4.try_lock(&c4).await }).await?;
    proxy.set_delay(Duration::ZERO);
    let lock = match r {
        Ok(Some(l)) => l,
        Ok(None) => {
            bail!("try_lock on a slow link ({} ms each way) found a fresh name held", ms(d))
        }
        Err(e) => bail!(
            "try_lock on a slow link ({} ms each way, lock_at_most_for {} ms) failed after {} ms: {e}",
            ms(d),
            ms(lease),
            took.as_millis()
        ),
    };
    let late_by = lock.valid_until().saturating_duration_since(call_started + lease);
    let _ = bounded(suite, "unlock", lock.unlock()).await?;
    if late_by > d {
        bail!(
            "the lock's lease ends {} ms after the call's start plus lock_at_most_for, on a link \
             that delays each way by {} ms: it was measured from the answer, not from before the \
             request (begin the Acquisition before sending)",
            late_by.as_millis(),
            ms(d)
        );
    }

    // Any exchange is at least one chunk each way, so one round trip already takes longer than
    // the lease. The bound leaves room for two round trips (e.g. a pool's checkout ping).
    let d = (lease + t.slack) / 2;
    let cfg = suite.config(&suite.lock_name("c24e"), lease, Duration::ZERO)?;
    proxy.set_delay(d);
    let (x5, c5) = (x.clone(), cfg.clone());
    let bound = suite.options().fault_bound.max(d * 4 + t.slack);
    let (r, took) = guarded_for(bound, "try_lock on a link slower than the lease", async move {
        x5.try_lock(&c5).await
    })
    .await?;
    proxy.set_delay(Duration::ZERO);
    *worst = (*worst).max(took);
    let answered = Instant::now();
    let outcome = match r {
        Ok(Some(l)) => {
            drop(l);
            bail!(
                "try_lock answered acquired after {} ms, longer than lock_at_most_for ({} ms): the \
                 lease may have ended while the answer was in flight, and another node may hold \
                 the lock (build locks with Acquisition::begin before the request and grant after)",
                took.as_millis(),
                ms(lease)
            )
        }
        Ok(None) => bail!(
            "try_lock on a link slower than the lease found a fresh name held ({} ms)",
            took.as_millis()
        ),
        Err(e) => kind(&e),
    };
    // Whatever the backend did, the name frees within lock_at_most_for of the answer.
    let (l, _) = poll_acquire(
        suite,
        direct,
        &cfg,
        answered,
        Duration::ZERO,
        lease + t.slack,
        "after an answer slower than the lease",
    )
    .await?;
    unlock(suite, l).await?;
    Ok(format!(
        "slow link: lease within {} ms of the request; an answer after {} ms (lock_at_most_for {} ms) gave {outcome}",
        ms(lease / 12),
        took.as_millis(),
        ms(lease)
    ))
}

/// C24 on a stalled backend (the proxy accepts connections and keeps them open, but forwards
/// nothing either way): every call — `try_lock` on a fresh name, `extend` and `unlock` of held
/// locks, and a new instance's `try_lock` — must end with a typed error within the fault bound
/// (a client without timeouts waits forever), never a false answer; the held locks free within
/// `lock_at_most_for` (nothing reached the backend). The calls run at once, on instances of
/// their own, so the check costs one client timeout, not one per call.
async fn stalled(
    suite: &Suite,
    proxy: &FaultProxy,
    x: &Arc<dyn LockProvider>,
    via_proxy: &InstanceOptions,
    direct: &Arc<dyn LockProvider>,
    worst: &mut Duration,
) -> Result<String, Verdict> {
    let t = suite.timing();
    let build = |what: &'static str| {
        let f = suite.factory().clone();
        let opts = via_proxy.clone();
        async move {
            bounded(suite, "the factory", f.create(opts)).await?.map_err(|e| {
                Verdict::fail(format!("the factory could not build {what} via the proxy: {e}"))
            })
        }
    };
    let (xe, xu) = (build("an instance").await?, build("an instance").await?);
    let extend = suite.capabilities().extend;
    let ne = suite.config(&suite.lock_name("c24se"), t.at_most, Duration::ZERO)?;
    let nu = suite.config(&suite.lock_name("c24su"), t.at_most, Duration::ZERO)?;
    let le = if extend {
        Some(must_lock(suite, &xe, &ne, "lock before the stall").await?)
    } else {
        None
    };
    let lu = must_lock(suite, &xu, &nu, "lock before the stall").await?;
    let fresh = suite.config(&suite.lock_name("c24sf"), LONG, Duration::ZERO)?;
    proxy.set_stalled(true);
    let stalled_at = Instant::now();
    let (x1, c1) = (x.clone(), fresh.clone());
    let try_lock = guarded(suite, "try_lock on a stalled backend", async move {
        x1.try_lock(&c1).await.map(|o| o.is_some())
    });
    let at_most = t.at_most;
    let extend_call = guarded(suite, "extend on a stalled backend", async move {
        match le {
            Some(mut l) => Some(l.extend(at_most, Duration::ZERO).await),
            None => None,
        }
    });
    let unlock_call = guarded(suite, "unlock on a stalled backend", lu.unlock());
    let (f, opts, c2) = (suite.factory().clone(), via_proxy.clone(), fresh.clone());
    let new_instance =
        guarded(suite, "building and using an instance on a stalled backend", async move {
            match f.create(opts).await {
                Err(e) => Err(format!("building failed: {e}")),
                Ok(y) => match y.try_lock(&c2).await {
                    Err(e) => Err(kind(&e)),
                    Ok(o) => Ok(o.is_some()),
                },
            }
        });
    let (r1, r2, r3, r4) = tokio::join!(try_lock, extend_call, unlock_call, new_instance);
    proxy.cut_all();
    proxy.set_stalled(false);
    let mut notes = Vec::new();
    let (r, took) = r1?;
    *worst = (*worst).max(took);
    match r {
        Err(e) => notes.push(format!("try_lock {} ({} ms)", kind(&e), took.as_millis())),
        Ok(true) => bail!("try_lock reported a lock acquired on a stalled backend"),
        Ok(false) => bail!("try_lock reported a free name as held on a stalled backend"),
    }
    let (r, took) = r2?;
    match r {
        None => {}
        Some(Err(e)) => {
            *worst = (*worst).max(took);
            notes.push(format!("extend {} ({} ms)", kind(&e), took.as_millis()));
        }
        Some(Ok(())) => bail!("extend reported success on a stalled backend"),
    }
    let (r, took) = r3?;
    *worst = (*worst).max(took);
    match r {
        Err(e) => notes.push(format!("unlock {} ({} ms)", kind(&e), took.as_millis())),
        Ok(()) => bail!("unlock reported success on a stalled backend"),
    }
    let (r, took) = r4?;
    *worst = (*worst).max(took);
    match r {
        Err(e) => notes.push(format!("new instance: {e} ({} ms)", took.as_millis())),
        Ok(acquired) => bail!(
            "a new instance's try_lock on a stalled backend answered {}",
            if acquired { "acquired" } else { "held" }
        ),
    }
    // Nothing reached the backend: the held locks expire on their own schedule.
    let mut names = vec![&nu];
    if extend {
        names.push(&ne);
    }
    for cfg in names {
        let (l, _) = poll_acquire(
            suite,
            direct,
            cfg,
            stalled_at,
            Duration::ZERO,
            t.at_most + t.slack + *worst,
            "a lock whose call stalled",
        )
        .await?;
        unlock(suite, l).await?;
    }
    Ok(format!("stalled backend: {}", notes.join(", ")))
}

fn kind(e: &Error) -> String {
    let k = match e {
        Error::Unavailable { .. } => "Unavailable",
        Error::Backend { .. } => "Backend",
        Error::Timeout { .. } => "Timeout",
        Error::LockLost { .. } => "LockLost",
        Error::LeaseExpiredInFlight { .. } => "LeaseExpiredInFlight",
        _ => "other",
    };
    format!("typed error {k}")
}

//! C12–C14: ownership.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use shedlock::{Error, LockProvider};

use super::{
    basic::LONG,
    util::{
        R, at, bounded, finish, instances, ms, must_lock, must_not_lock, poll_acquire,
        timed_try_lock, unlock,
    },
};
use crate::{factory::InstanceOptions, report::Verdict, suite::Suite, tools::proxy::FaultProxy};

fn need_owner_checked(suite: &Suite) -> Result<(), Verdict> {
    if suite.capabilities().owner_checked {
        Ok(())
    } else {
        Err(Verdict::unsupported("capability `owner_checked` not declared"))
    }
}

/// C12: a stale holder (its lock expired and another instance took it) unlocking is a no-op:
/// the new holder keeps the lock. With a backend address
/// ([`Hooks::with_backend_address`](crate::Hooks::with_backend_address)) also in flight: the
/// stale holder's unlock leaves before the takeover, the kit's fault proxy holds the backend's
/// answers while another instance takes over, then releases them; the new holder must keep the
/// lock (an unlock that reads the owner, then writes without checking it again, frees it).
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
    Ok(format!(
        "the stale holder's unlock changed nothing; the new holder kept the lock; {in_flight}"
    ))
}

/// C13: a stale holder's extend fails and does not extend the new holder's lock. With a backend
/// address also in flight, as in [`c12_stale_unlock_noop`]: an extend whose answers the proxy
/// holds while another instance takes over must not extend the new holder's lock (an extend
/// that reads the owner, then writes the new expiry without checking it again, does).
pub async fn c13_stale_extend_fails(suite: &Suite) -> Verdict {
    finish(c13(suite).await)
}

async fn c13(suite: &Suite) -> R {
    need_owner_checked(suite)?;
    super::extend::need_extend(suite)?;
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
    Ok(format!(
        "stale extend gave LockLost; the new holder's {} ms lock freed at +{} ms as scheduled; \
         {in_flight}",
        ms(held),
        at(b0, got)
    ))
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The stale holder's call made in flight by [`stale_in_flight`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StaleCall {
    Unlock,
    Extend,
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
async fn stale_in_flight(suite: &Suite, call: StaleCall, p: &[Arc<dyn LockProvider>]) -> R {
    let Some(upstream) = suite.hooks().backend_address() else {
        return Ok("in-flight variant not run: the factory offers no backend address".into());
    };
    let what = match call {
        StaleCall::Unlock => "unlock",
        StaleCall::Extend => "extend",
    };
    let t = suite.timing();
    let l = t.at_most;
    let proxy = FaultProxy::start(upstream)
        .await
        .map_err(|e| Verdict::fail(format!("could not start the fault proxy: {e}")))?;
    let via_proxy = InstanceOptions::new(0).with_address(proxy.addr());
    let a = bounded(suite, "the factory", suite.instance_with(via_proxy)).await?.map_err(|e| {
        Verdict::fail(format!("the factory could not build an instance via the proxy: {e}"))
    })?;
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
        loop {
            let b0 = Instant::now();
            match bp.try_lock(&bc).await {
                Ok(Some(lock)) => return Ok((lock, b0, Instant::now())),
                Ok(None) => {}
                Err(e) => return Err(format!("the new holder's try_lock failed: {e}")),
            }
            if Instant::now() > give_up {
                return Err(format!(
                    "the name was still held {} ms after the stale holder's lock was taken \
                     (lock_at_most_for {} ms)",
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

/// C14: records left behind — a pre-existing expired record, or a record deleted externally
/// while the process runs — never block locking for longer than `lock_at_most_for`.
/// When the provider declares `fencing`, the tokens of the locks taken after a deletion exceed
/// every token taken before it (a counter kept in the record itself starts over).
/// Needs [`RecordHooks`](crate::RecordHooks).
pub async fn c14_leftover_records(suite: &Suite) -> Verdict {
    finish(c14(suite).await)
}

async fn c14(suite: &Suite) -> R {
    let Some(hooks) = suite.hooks().records().cloned() else {
        return Err(Verdict::not_applicable(
            "the factory offers no RecordHooks (Hooks::with_records)",
        ));
    };
    let t = suite.timing();
    let p = instances(suite, 3).await?;
    let hook =
        |what: &'static str| move |e| Verdict::fail(format!("record hook {what} failed: {e}"));

    // 1. A planted expired record.
    let n1 = suite.lock_name("c14a");
    let cfg1 = suite.config(&n1, t.at_most, Duration::ZERO)?;
    bounded(suite, "plant_expired_record", hooks.plant_expired_record(&n1))
        .await?
        .map_err(hook("plant_expired_record"))?;
    let planted = Instant::now();
    let (l, got) = poll_acquire(
        suite,
        &p[0],
        &cfg1,
        planted,
        Duration::ZERO,
        t.at_most + t.slack,
        "over a planted expired record",
    )
    .await?;
    let exists = bounded(suite, "record_exists", hooks.record_exists(&n1))
        .await?
        .map_err(hook("record_exists"))?;
    if !exists {
        return Err(Verdict::fail(format!(
            "record_exists({n1:?}) is false while the lock is held: the hook does not address the provider's record"
        )));
    }
    unlock(suite, l).await?;
    let planted_ms = at(planted, got);

    // 2. A record deleted while its lock is held, after both instances have used the name.
    let n2 = suite.lock_name("c14b");
    let short = suite.config(&n2, t.at_most, Duration::ZERO)?;
    let long = suite.config(&n2, LONG, Duration::ZERO)?;
    let mut fence = Fence::new(suite);
    let l = must_lock(suite, &p[0], &short, "warm-up A").await?;
    fence.saw(&l, "warm-up A")?;
    unlock(suite, l).await?;
    let l = must_lock(suite, &p[1], &short, "warm-up B").await?;
    fence.saw(&l, "warm-up B")?;
    unlock(suite, l).await?;
    let held = must_lock(suite, &p[0], &short, "lock before deletion").await?;
    fence.saw(&held, "the lock before deletion")?;
    fence.settle(suite).await;
    bounded(suite, "delete_record", hooks.delete_record(&n2))
        .await?
        .map_err(hook("delete_record"))?;
    let deleted = Instant::now();
    let exists = bounded(suite, "record_exists", hooks.record_exists(&n2))
        .await?
        .map_err(hook("record_exists"))?;
    if exists {
        return Err(Verdict::fail(format!(
            "record_exists({n2:?}) is still true after delete_record"
        )));
    }
    let (fresh, got) = poll_acquire(
        suite,
        &p[1],
        &long,
        deleted,
        Duration::ZERO,
        t.at_most + t.slack,
        "after external deletion",
    )
    .await?;
    let deleted_ms = at(deleted, got);
    fence.saw(&fresh, "the lock taken after the held record was deleted")?;
    let _ = bounded(suite, "stale unlock", held.unlock()).await?;
    if suite.capabilities().owner_checked {
        must_not_lock(suite, &p[2], &long, "after the deleted record's old holder unlocked")
            .await?;
    }
    unlock(suite, fresh).await?;

    // 3. Deleted again while free: the instance that created the record can still lock.
    fence.settle(suite).await;
    bounded(suite, "delete_record", hooks.delete_record(&n2))
        .await?
        .map_err(hook("delete_record"))?;
    let deleted = Instant::now();
    let (l, _) = poll_acquire(
        suite,
        &p[0],
        &short,
        deleted,
        Duration::ZERO,
        t.at_most + t.slack,
        "after deleting a free record",
    )
    .await?;
    fence.saw(&l, "the lock taken after the free record was deleted")?;
    unlock(suite, l).await?;
    Ok(format!(
        "planted expired record: locked at +{planted_ms} ms; record deleted while held: relocked at +{deleted_ms} ms; \
         deleted while free: relocked by its creator (lock_at_most_for {} ms){}",
        ms(t.at_most),
        fence.summary("across both deletions")
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

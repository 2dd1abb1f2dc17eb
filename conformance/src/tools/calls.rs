//! Calls on a [`Suite`] that a check can judge: bounded calls (a hang fails the check), polling
//! with interval reasoning, and a check body's [`R`] with the `ensure!` / `bail!` macros.

use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use shedlock::{Lock, LockConfig, LockInfo, LockProvider};

use crate::{outcome::Verdict, suite::Suite};

/// A check's body: `Ok(detail)` passes, `Err(verdict)` ends the check with that verdict.
pub(crate) type R = Result<String, Verdict>;

/// Turns a body result into a verdict.
pub(crate) fn finish(r: R) -> Verdict {
    match r {
        Ok(detail) => Verdict::pass(detail),
        Err(v) => v,
    }
}

macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            return Err($crate::outcome::Verdict::fail(format!($($arg)*)));
        }
    };
}

macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::outcome::Verdict::fail(format!($($arg)*)))
    };
}

/// Milliseconds of `d`, for messages.
pub(crate) fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// Milliseconds from `origin` to `t` (saturating), for messages.
pub(crate) fn at(origin: Instant, t: Instant) -> u128 {
    t.saturating_duration_since(origin).as_millis()
}

/// Runs `fut` with the kit's bound on any single call ([`Options::fault_bound`]); a call that
/// takes longer fails the check.
///
/// [`Options::fault_bound`]: crate::Options::fault_bound
pub(crate) async fn bounded<T>(
    suite: &Suite,
    what: &str,
    fut: impl Future<Output = T>,
) -> Result<T, Verdict> {
    let bound = suite.options().fault_bound;
    tokio::time::timeout(bound, fut)
        .await
        .map_err(|_| Verdict::fail(format!("{what} did not return within {} ms (hang)", ms(bound))))
}

/// Builds `n` instances, failing the check if the factory fails.
pub(crate) async fn instances(
    suite: &Suite,
    n: usize,
) -> Result<Vec<Arc<dyn LockProvider>>, Verdict> {
    bounded(suite, "the factory", suite.instances(n))
        .await?
        .map_err(|e| Verdict::fail(format!("the factory could not build an instance: {e}")))
}

/// `try_lock`, where an error or a hang fails the check.
pub(crate) async fn try_lock(
    suite: &Suite,
    p: &Arc<dyn LockProvider>,
    cfg: &LockConfig,
) -> Result<Option<Lock>, Verdict> {
    bounded(suite, "try_lock", p.try_lock(cfg))
        .await?
        .map_err(|e| Verdict::fail(format!("try_lock({:?}) failed: {e}", cfg.name())))
}

/// `try_lock` that records when the call started and ended.
pub(crate) async fn timed_try_lock(
    suite: &Suite,
    p: &Arc<dyn LockProvider>,
    cfg: &LockConfig,
) -> Result<(Option<Lock>, Instant, Instant), Verdict> {
    let start = Instant::now();
    let r = try_lock(suite, p, cfg).await?;
    Ok((r, start, Instant::now()))
}

/// `try_lock` that must succeed at once.
pub(crate) async fn must_lock(
    suite: &Suite,
    p: &Arc<dyn LockProvider>,
    cfg: &LockConfig,
    what: &str,
) -> Result<Lock, Verdict> {
    match try_lock(suite, p, cfg).await? {
        Some(l) => Ok(l),
        None => Err(Verdict::fail(format!(
            "{what}: try_lock({:?}) found the lock held, but it is free",
            cfg.name()
        ))),
    }
}

/// `try_lock` that must find the lock held.
pub(crate) async fn must_not_lock(
    suite: &Suite,
    p: &Arc<dyn LockProvider>,
    cfg: &LockConfig,
    what: &str,
) -> Result<(), Verdict> {
    match try_lock(suite, p, cfg).await? {
        None => Ok(()),
        Some(l) => {
            let _ = bounded(suite, "unlock", l.unlock()).await;
            Err(Verdict::fail(format!(
                "{what}: try_lock({:?}) succeeded while the lock is held",
                cfg.name()
            )))
        }
    }
}

/// Inspects `name`, failing the check on an error or a hang.
pub(crate) async fn inspect(
    suite: &Suite,
    p: &Arc<dyn LockProvider>,
    name: &str,
    step: &str,
) -> Result<Option<LockInfo>, Verdict> {
    bounded(suite, "inspect", p.inspect(name))
        .await?
        .map_err(|e| Verdict::fail(format!("{step}: inspect({name:?}) failed: {e}")))
}

/// Inspects `name`, which must be held.
pub(crate) async fn inspect_held(
    suite: &Suite,
    p: &Arc<dyn LockProvider>,
    name: &str,
    step: &str,
) -> Result<LockInfo, Verdict> {
    match inspect(suite, p, name, step).await? {
        Some(info) if info.held => Ok(info),
        other => {
            Err(Verdict::fail(format!("{step}: inspect({name:?}) of a held lock gave {other:?}")))
        }
    }
}

/// `unlock`, where an error or a hang fails the check.
pub(crate) async fn unlock(suite: &Suite, lock: Lock) -> Result<(), Verdict> {
    let name = lock.name().to_owned();
    bounded(suite, "unlock", lock.unlock())
        .await?
        .map_err(|e| Verdict::fail(format!("unlock({name:?}) failed: {e}")))
}

/// Polls `try_lock` on `p` until it succeeds.
///
/// - A success whose call *ended* more than [`Timing::early`](crate::Timing::early) before
///   `origin + not_before` fails: the lock freed too early.
/// - Still held when a call *starts* after `origin + deadline` fails: it freed too late.
/// - A grant that came back after its lease could have ended (`LeaseExpiredInFlight`: a slow
///   answer, which the provider released) is polled again until the deadline; any other error
///   fails.
///
/// Returns the lock and when the successful call started.
pub(crate) async fn poll_acquire(
    suite: &Suite,
    p: &Arc<dyn LockProvider>,
    cfg: &LockConfig,
    origin: Instant,
    not_before: Duration,
    deadline: Duration,
    what: &str,
) -> Result<(Lock, Instant), Verdict> {
    let t = suite.timing();
    loop {
        let b0 = Instant::now();
        let r = match bounded(suite, "try_lock", p.try_lock(cfg)).await? {
            Ok(r) => r,
            // The grant came back after its lease could have ended (a slow answer on a busy
            // machine): the provider released it, and the name says nothing yet. Poll again,
            // within the same deadline.
            Err(shedlock::Error::LeaseExpiredInFlight { .. }) if b0 <= origin + deadline => {
                tokio::time::sleep(t.poll).await;
                continue;
            }
            Err(e) => bail!("try_lock({:?}) failed: {e}", cfg.name()),
        };
        let b1 = Instant::now();
        match r {
            Some(lock) => {
                return not_early(suite, lock, origin, not_before, b1, what).await.map(|l| (l, b0));
            }
            None => {
                if b0 > origin + deadline {
                    bail!(
                        "{what}: still held at +{} ms, but it must be free by +{} ms",
                        at(origin, b0),
                        ms(deadline)
                    );
                }
            }
        }
        tokio::time::sleep(t.poll).await;
    }
}

/// A lock taken by a call that ended at `ended`: refused (released, and the check failed) when
/// that is earlier than `origin + not_before` by more than the timing tolerance.
pub(crate) async fn not_early(
    suite: &Suite,
    lock: Lock,
    origin: Instant,
    not_before: Duration,
    ended: Instant,
    what: &str,
) -> Result<Lock, Verdict> {
    let t = suite.timing();
    if ended + t.early < origin + not_before {
        let _ = bounded(suite, "unlock", lock.unlock()).await;
        bail!(
            "{what}: acquired at +{} ms, but the lock must stay held until +{} ms (tolerance {} ms)",
            at(origin, ended),
            ms(not_before),
            ms(t.early)
        );
    }
    Ok(lock)
}

/// Polls `try_lock` on `p` until `origin + until`; any success whose call ended before
/// `origin + until - early` fails the check (the lock should be held). A success after that is
/// released and ignored.
///
/// At least one probe must be made: if `origin + until` is already (nearly) past when this is
/// called — the caller was slow, e.g. an `extend` that took longer than the window, or the
/// machine stalled — no `try_lock` would run and "held until" would pass without a single
/// observation. That is reported as a failure (the check proved nothing), never as a pass.
pub(crate) async fn expect_held_until(
    suite: &Suite,
    p: &Arc<dyn LockProvider>,
    cfg: &LockConfig,
    origin: Instant,
    until: Duration,
    what: &str,
) -> Result<(), Verdict> {
    let t = suite.timing();
    let deadline = origin + until;
    let mut probes = 0u32;
    loop {
        let now = Instant::now();
        // The first probe is made whenever any time is left; later ones while a poll fits.
        if now >= deadline || (probes > 0 && now + t.poll >= deadline) {
            if probes == 0 {
                bail!(
                    "{what}: no try_lock probe could be made before +{} ms (it was already \
                     +{} ms): that the lock stays held was never observed",
                    ms(until),
                    at(origin, now)
                );
            }
            return Ok(());
        }
        let (r, _b0, b1) = timed_try_lock(suite, p, cfg).await?;
        probes += 1;
        if let Some(lock) = r {
            let _ = bounded(suite, "unlock", lock.unlock()).await;
            if b1 + t.early < deadline {
                bail!(
                    "{what}: acquired at +{} ms, but the lock must stay held until +{} ms",
                    at(origin, b1),
                    ms(until)
                );
            }
            return Ok(());
        }
        tokio::time::sleep(t.poll).await;
    }
}

/// A `lock_at_most_for` long enough never to expire during a check.
pub(crate) const LONG: Duration = Duration::from_secs(120);

/// Aborts a spawned task when dropped.
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{options::Options, outcome::Outcome, test_support::memory_suite};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn held_until_observes_a_held_lock() {
        let suite = memory_suite(Options::new()).await;
        let p = suite.instances(2).await.unwrap();
        let cfg = suite.config("held", Duration::from_secs(60), Duration::ZERO).unwrap();
        let lock = p[0].try_lock(&cfg).await.unwrap().unwrap();
        let origin = Instant::now();
        expect_held_until(&suite, &p[1], &cfg, origin, Duration::from_millis(100), "held")
            .await
            .unwrap();
        assert!(origin.elapsed() >= Duration::from_millis(100) - suite.timing().poll);
        lock.unlock().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn held_until_fails_on_a_free_lock() {
        let suite = memory_suite(Options::new()).await;
        let p = suite.instances(1).await.unwrap();
        let cfg = suite.config("free", Duration::from_secs(60), Duration::ZERO).unwrap();
        let v = expect_held_until(&suite, &p[0], &cfg, Instant::now(), Duration::from_secs(1), "x")
            .await
            .unwrap_err();
        assert_eq!(v.outcome, Outcome::Fail);
        assert!(v.detail.contains("acquired at +"), "{}", v.detail);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn held_until_with_no_time_left_fails_instead_of_passing_unobserved() {
        let suite = memory_suite(Options::new()).await;
        let p = suite.instances(1).await.unwrap();
        // The lock is free: any probe would fail the check. Before the fix, a window that had
        // already closed made no probe at all and passed.
        let cfg = suite.config("late", Duration::from_secs(60), Duration::ZERO).unwrap();
        let origin = Instant::now() - Duration::from_secs(1);
        let v = expect_held_until(&suite, &p[0], &cfg, origin, Duration::from_millis(300), "late")
            .await
            .unwrap_err();
        assert_eq!(v.outcome, Outcome::Fail);
        assert!(
            v.detail.contains("late: no try_lock probe could be made before +300 ms"),
            "{}",
            v.detail
        );
        assert!(v.detail.contains("never observed"), "{}", v.detail);
    }
}

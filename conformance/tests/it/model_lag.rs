//! C17's timing tolerance: a step whose backend answers after a half-unit expiry passed is
//! inconclusive, not a disagreement; the same wrong answer given on time is still caught.
//!
//! The provider is the memory reference provider on the real clock, wrapped so that one chosen
//! `try_lock` waits before it reaches the backend (a loaded backend deciding late), or so that
//! its unlock ignores `lock_at_least_for` (a real bug, answered at once).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use shedlock::{BoxError, Capabilities, Lock, LockConfig, LockProvider, Result};
use shedlock_conformance::{
    InstanceOptions, Options, ProviderFactory, Suite,
    tools::model::{CaseOutcome, Op, run_case, unit_for},
};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

/// What the wrapper does.
#[derive(Clone, Copy)]
enum Twist {
    /// The `n`-th `try_lock` (counted across instances, from 0) waits this long first.
    LateTryLock(usize, Duration),
    /// Unlock releases at once, ignoring `lock_at_least_for`.
    UnlockIgnoresAtLeast,
}

struct Wrapped {
    inner: MemoryLockProvider,
    calls: Arc<AtomicUsize>,
    twist: Twist,
}

#[async_trait]
impl LockProvider for Wrapped {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        match self.twist {
            Twist::LateTryLock(at, delay) if at == n => tokio::time::sleep(delay).await,
            Twist::UnlockIgnoresAtLeast => {
                // Take the lock without lock_at_least_for: its unlock then frees it at once.
                let bare = LockConfig::new(
                    config.name().to_owned(),
                    config.lock_at_most_for(),
                    Duration::ZERO,
                )?;
                return self.inner.try_lock(&bare).await;
            }
            Twist::LateTryLock(..) => {}
        }
        self.inner.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

struct Factory {
    server: MemoryServer,
    calls: Arc<AtomicUsize>,
    twist: Twist,
}

#[async_trait]
impl ProviderFactory for Factory {
    fn name(&self) -> &str {
        "memory-wrapped"
    }

    async fn create(&self, _options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        Ok(Arc::new(Wrapped {
            inner: MemoryLockProvider::new(&self.server),
            calls: self.calls.clone(),
            twist: self.twist,
        }))
    }
}

/// The suite, its three instances and the shared call counter (reset to 0).
async fn setup(twist: Twist) -> (Suite, Vec<Arc<dyn LockProvider>>, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let factory = Factory { server: MemoryServer::new(), calls: calls.clone(), twist };
    let suite = Suite::new(factory, Options::new().with_seed(5)).await.unwrap();
    let mut real = Vec::new();
    for _ in 0..3 {
        real.push(suite.instance().await.unwrap());
    }
    calls.store(0, Ordering::SeqCst);
    (suite, real, calls)
}

/// Lock n0 with at-least ½ U, unlock it, and try it again at once from another instance: the
/// lock is still held for the rest of that half unit.
fn relock_inside_at_least() -> Vec<Op> {
    vec![
        Op::TryLock { inst: 0, name: 0, most: 1, least: Some(0) },
        Op::Unlock { slot: 0 },
        Op::TryLock { inst: 1, name: 0, most: 1, least: None },
    ]
}

/// C17's unit for the memory provider's granularity.
fn memory_unit() -> Duration {
    unit_for(MemoryLockProvider::new(&MemoryServer::new()).capabilities().granularity)
}

fn names(suite: &Suite, tag: &str) -> Vec<String> {
    (0..2).map(|n| suite.lock_name(&format!("{tag}-{n}"))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_lock_answered_after_the_at_least_ended_is_inconclusive_not_a_disagreement() {
    let unit = memory_unit();
    // The second try_lock (call 1) reaches the backend 0.6 U late: the ½ U at-least has ended
    // there, so the backend grants what the model (which has not moved) still holds.
    let (suite, real, _) = setup(Twist::LateTryLock(1, unit * 6 / 10)).await;
    let outcome =
        run_case(&suite, &real, &names(&suite, "late"), unit, &relock_inside_at_least()).await;
    match outcome {
        CaseOutcome::Inconclusive(why) => {
            assert!(why.contains("too late to judge"), "{why}");
            assert!(why.contains("granted a lock the model holds"), "{why}");
        }
        other => panic!("a late answer was judged: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_sequence_answered_on_time_agrees_with_the_model() {
    let (suite, real, calls) = setup(Twist::LateTryLock(usize::MAX, Duration::ZERO)).await;
    let unit = unit_for(suite.capabilities().granularity);
    let outcome =
        run_case(&suite, &real, &names(&suite, "on-time"), unit, &relock_inside_at_least()).await;
    // On a badly loaded machine the whole case may be inconclusive; it must never disagree.
    assert!(!matches!(outcome, CaseOutcome::Disagreed(_)), "{outcome:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 2, "both try_locks reached the provider");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_that_ignores_at_least_is_still_caught_when_answered_on_time() {
    let (suite, real, _) = setup(Twist::UnlockIgnoresAtLeast).await;
    let unit = unit_for(suite.capabilities().granularity);
    // Retry a few times only if the machine lagged (inconclusive); a disagreement ends it.
    let mut last = None;
    for round in 0..5 {
        let outcome = run_case(
            &suite,
            &real,
            &names(&suite, &format!("bug-{round}")),
            unit,
            &relock_inside_at_least(),
        )
        .await;
        match outcome {
            CaseOutcome::Disagreed(why) => {
                assert!(why.contains("step 2"), "{why}");
                assert!(why.contains("granted a lock the model holds"), "{why}");
                return;
            }
            other => last = Some(other),
        }
    }
    panic!("the bug was never caught in 5 rounds; last outcome {last:?}");
}

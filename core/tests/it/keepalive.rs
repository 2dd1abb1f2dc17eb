//! Keep-alive under tokio's paused clock: the memory server and the keep-alive judge time by
//! `TokioClock`, so every instant below is exact.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use shedlock::{
    Capabilities, Error, KeepAliveProvider, Lock, LockConfig, LockHandle, LockProvider,
    LockingExecutor, Result, SharedClock, TokioClock, active_lock_lost_signal,
};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

const AT_MOST: Duration = Duration::from_secs(10);

/// Counts the extensions that reach the underlying provider.
/// Counts the extensions that reach the underlying provider; each one first stalls for
/// `stall_ms` (a process pause or a slow link), then reaches the backend, unless `timeouts` is
/// positive: then it is used up by one and the extension fails with a (retryable) timeout.
struct Counting {
    inner: MemoryLockProvider,
    extends: Arc<AtomicUsize>,
    stall_ms: Arc<AtomicU64>,
    timeouts: Arc<AtomicUsize>,
    extend_capable: bool,
}

struct CountingHandle {
    lock: Option<Lock>,
    extends: Arc<AtomicUsize>,
    stall_ms: Arc<AtomicU64>,
    timeouts: Arc<AtomicUsize>,
}

#[async_trait]
impl LockProvider for Counting {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        Ok(self.inner.try_lock(config).await?.map(|lock| {
            lock.wrap(|inner| CountingHandle {
                lock: Some(inner),
                extends: self.extends.clone(),
                stall_ms: self.stall_ms.clone(),
                timeouts: self.timeouts.clone(),
            })
        }))
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().with_extend(self.extend_capable)
    }
}

#[async_trait]
impl LockHandle for CountingHandle {
    async fn unlock(&mut self, _config: &LockConfig) -> Result<()> {
        match self.lock.take() {
            Some(l) => l.unlock().await,
            None => Ok(()),
        }
    }
    async fn extend(&mut self, config: &LockConfig) -> Result<()> {
        self.extends.fetch_add(1, Ordering::SeqCst);
        let stall = self.stall_ms.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(stall)).await;
        if self
            .timeouts
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(Error::Timeout {
                operation: "extend",
                after: Duration::from_millis(stall),
            });
        }
        match self.lock.as_mut() {
            Some(l) => l.extend(config.lock_at_most_for(), config.lock_at_least_for()).await,
            None => Err(Error::LockLost { name: config.name().into() }),
        }
    }
    fn fencing_token(&self) -> Option<u64> {
        self.lock.as_ref().and_then(Lock::fencing_token)
    }
}

struct Fixture {
    server: MemoryServer,
    keep_alive: KeepAliveProvider,
    extends: Arc<AtomicUsize>,
    stall_ms: Arc<AtomicU64>,
    timeouts: Arc<AtomicUsize>,
    other: MemoryLockProvider,
}

fn fixture() -> Fixture {
    let clock: SharedClock = Arc::new(TokioClock::new());
    let server = MemoryServer::with_clock(clock.clone());
    let extends = Arc::new(AtomicUsize::new(0));
    let stall_ms = Arc::new(AtomicU64::new(0));
    let timeouts = Arc::new(AtomicUsize::new(0));
    let counting = Counting {
        inner: MemoryLockProvider::new(&server),
        extends: extends.clone(),
        stall_ms: stall_ms.clone(),
        timeouts: timeouts.clone(),
        extend_capable: true,
    };
    let keep_alive = KeepAliveProvider::new(Arc::new(counting)).unwrap();
    let other = MemoryLockProvider::new(&server);
    Fixture { server, keep_alive, extends, stall_ms, timeouts, other }
}

fn cfg(name: &str) -> LockConfig {
    LockConfig::new(name, AT_MOST, Duration::ZERO).unwrap()
}

async fn held_elsewhere(other: &MemoryLockProvider, name: &str) -> bool {
    match other.try_lock(&cfg(name)).await.unwrap() {
        Some(l) => {
            l.unlock().await.unwrap();
            false
        }
        None => true,
    }
}

#[tokio::test(start_paused = true)]
async fn extends_every_half_period_while_the_task_runs() {
    let f = fixture();
    let lock = f.keep_alive.try_lock(&cfg("long")).await.unwrap().unwrap();
    // 32 s is 3.2 times lock_at_most_for: extensions at 5, 10, ..., 30 s.
    tokio::time::sleep(Duration::from_secs(32)).await;
    assert_eq!(f.extends.load(Ordering::SeqCst), 6);
    assert!(held_elsewhere(&f.other, "long").await, "kept alive past lock_at_most_for");
    let signal = lock.lost_signal();
    lock.unlock().await.unwrap();
    assert!(!held_elsewhere(&f.other, "long").await, "released on unlock");
    // No more extensions after unlock, and the lock was not reported lost.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(f.extends.load(Ordering::SeqCst), 6);
    assert!(!signal.is_lost());
}

#[tokio::test(start_paused = true)]
async fn signals_lost_when_an_extension_fails() {
    let f = fixture();
    let lock = f.keep_alive.try_lock(&cfg("stolen")).await.unwrap().unwrap();
    let signal = lock.lost_signal();
    // An operator deletes the record and another node takes the lock.
    assert!(f.server.delete_record("stolen"));
    let thief = f.other.try_lock(&cfg("stolen")).await.unwrap().unwrap();
    let started = tokio::time::Instant::now();
    signal.lost().await;
    assert_eq!(started.elapsed(), AT_MOST / 2, "detected at the first extension");
    assert!(signal.is_lost());
    assert_eq!(f.extends.load(Ordering::SeqCst), 1);
    // The stale holder's unlock leaves the new holder's lock alone.
    lock.unlock().await.unwrap();
    assert!(held_elsewhere(&MemoryLockProvider::new(&f.server), "stolen").await);
    thief.unlock().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn signals_lost_at_the_lease_deadline_when_an_extension_stalls_past_it() {
    // The first extension (at 5 s) stalls for 7 s, as a paused process or a slow link would: its
    // answer comes at 12 s, after the lease ended at 10 s, when another node may hold the lock.
    let f = fixture();
    f.stall_ms.store(7_000, Ordering::SeqCst);
    let start = tokio::time::Instant::now();
    let lock = f.keep_alive.try_lock(&cfg("paused")).await.unwrap().unwrap();
    assert_eq!(lock.valid_until(), start + AT_MOST);
    let signal = lock.lost_signal();
    signal.lost().await;
    assert_eq!(start.elapsed(), AT_MOST, "fired at the lease deadline, not at the late answer");
    // The late answer (a success on the backend) does not revive the lock, and the keep-alive
    // stops: no second extension.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(lock.is_lost() && signal.is_lost());
    assert_eq!(lock.remaining(), Duration::ZERO);
    assert_eq!(f.extends.load(Ordering::SeqCst), 1);
    lock.unlock().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn retries_timed_out_extensions_while_the_lease_lasts() {
    // Two extensions time out (after 1 s each); the third succeeds before the lease ends at 10 s.
    let f = fixture();
    f.stall_ms.store(1_000, Ordering::SeqCst);
    f.timeouts.store(2, Ordering::SeqCst);
    let start = tokio::time::Instant::now();
    let lock = f.keep_alive.try_lock(&cfg("flaky")).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert!(f.extends.load(Ordering::SeqCst) >= 3);
    assert!(!lock.is_lost(), "a timed-out extension that is retried in time loses nothing");
    assert!(lock.valid_until() > start + AT_MOST, "the successful retry moved the deadline");
    assert!(held_elsewhere(&f.other, "flaky").await);
    lock.unlock().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn signals_lost_at_the_deadline_when_every_extension_times_out() {
    let f = fixture();
    f.stall_ms.store(1_000, Ordering::SeqCst);
    f.timeouts.store(usize::MAX, Ordering::SeqCst);
    let start = tokio::time::Instant::now();
    let lock = f.keep_alive.try_lock(&cfg("down")).await.unwrap().unwrap();
    lock.lost_signal().lost().await;
    assert_eq!(start.elapsed(), AT_MOST);
    // Attempts at 5 s (fails at 6), then after a quarter of what remains, at least 10 ms:
    // 7 s (fails at 8), 8.5 s (fails at 9.5), 9.625 s (answer at 10.625, after the deadline).
    let tried = f.extends.load(Ordering::SeqCst);
    assert_eq!(tried, 4, "retries paced by the time left");
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(f.extends.load(Ordering::SeqCst), tried, "no extension after the lease ended");
    lock.unlock().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_dead_holder_frees_the_lock_within_at_most() {
    let f = fixture();
    let lock = f.keep_alive.try_lock(&cfg("dead")).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let extended = f.extends.load(Ordering::SeqCst);
    assert_eq!(extended, 2);
    drop(lock); // the holder dies without unlocking
    // Last extension was at 10 s, so the lock runs until 20 s at the latest.
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(held_elsewhere(&f.other, "dead").await);
    tokio::time::sleep(Duration::from_millis(1001)).await;
    assert!(!held_elsewhere(&f.other, "dead").await, "freed by lock_at_most_for");
    assert_eq!(f.extends.load(Ordering::SeqCst), extended, "no extension after the holder died");
}

#[tokio::test(start_paused = true)]
async fn the_task_sees_the_lost_signal_through_the_executor() {
    let f = fixture();
    let server = f.server.clone();
    let executor = LockingExecutor::new(Arc::new(f.keep_alive.clone()));
    let out = executor
        .execute(&cfg("exec"), || async move {
            let signal = active_lock_lost_signal().unwrap();
            server.delete_record("exec");
            signal.lost().await;
            "told"
        })
        .await
        .unwrap();
    assert_eq!(out.into_option(), Some("told"));
}

#[tokio::test(start_paused = true)]
async fn keeps_lock_at_least_for_of_the_original_acquisition() {
    let f = fixture();
    let c = LockConfig::new("least", AT_MOST, Duration::from_secs(8)).unwrap();
    let lock = f.keep_alive.try_lock(&c).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await; // one extension at 5 s
    lock.unlock().await.unwrap();
    assert!(held_elsewhere(&f.other, "least").await);
    tokio::time::sleep(Duration::from_millis(1999)).await;
    assert!(held_elsewhere(&f.other, "least").await, "held until 8 s after acquisition");
    tokio::time::sleep(Duration::from_millis(2)).await;
    assert!(!held_elsewhere(&f.other, "least").await);
}

#[test]
fn rejects_providers_that_cannot_extend() {
    let server = MemoryServer::new();
    let p = Counting {
        inner: MemoryLockProvider::new(&server),
        extends: Arc::default(),
        stall_ms: Arc::default(),
        timeouts: Arc::default(),
        extend_capable: false,
    };
    assert!(matches!(KeepAliveProvider::new(Arc::new(p)), Err(Error::Unsupported { .. })));
}

#[tokio::test(start_paused = true)]
async fn a_keep_alive_lock_keeps_the_inner_token_capabilities_and_extends_on_request() {
    let f = fixture();
    assert_eq!(f.keep_alive.capabilities(), f.other.capabilities().with_extend(true));
    let first = f.other.try_lock(&cfg("token")).await.unwrap().unwrap();
    let first_token = first.fencing_token().unwrap();
    first.unlock().await.unwrap();
    let start = tokio::time::Instant::now();
    let mut lock = f.keep_alive.try_lock(&cfg("token")).await.unwrap().unwrap();
    assert_eq!(lock.fencing_token(), Some(first_token + 1), "the inner lock's token");
    // An explicit extension by the task reaches the backend and moves the lease.
    tokio::time::sleep(Duration::from_secs(1)).await;
    lock.extend(AT_MOST * 3, Duration::ZERO).await.unwrap();
    assert_eq!(f.extends.load(Ordering::SeqCst), 1);
    assert_eq!(lock.valid_until(), start + Duration::from_secs(1) + AT_MOST * 3);
    let rec = f.server.record("token").unwrap();
    assert_eq!(rec.lock_until.duration_since(rec.locked_at).unwrap(), AT_MOST * 3);
    lock.unlock().await.unwrap();
}

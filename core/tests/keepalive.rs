//! Keep-alive under tokio's paused clock: the memory server and the keep-alive judge time by
//! `TokioClock`, so every instant below is exact.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, SystemTime},
};

use async_trait::async_trait;
use shedlock::{
    Capabilities, Error, KeepAliveProvider, Lock, LockConfig, LockHandle, LockProvider,
    LockingExecutor, ManualClock, Result, SharedClock, TokioClock, active_lock_lost_signal,
};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

const AT_MOST: Duration = Duration::from_secs(10);

/// Counts the extensions that reach the underlying provider.
struct Counting {
    inner: MemoryLockProvider,
    extends: Arc<AtomicUsize>,
    extend_capable: bool,
}

struct CountingHandle {
    lock: Option<Lock>,
    extends: Arc<AtomicUsize>,
}

#[async_trait]
impl LockProvider for Counting {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        Ok(self.inner.try_lock(config).await?.map(|lock| {
            Lock::new(
                config.clone(),
                CountingHandle { lock: Some(lock), extends: self.extends.clone() },
            )
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
        match self.lock.as_mut() {
            Some(l) => l.extend(config.lock_at_most_for(), config.lock_at_least_for()).await,
            None => Err(Error::LockLost { name: config.name().into() }),
        }
    }
}

struct Fixture {
    server: MemoryServer,
    keep_alive: KeepAliveProvider,
    extends: Arc<AtomicUsize>,
    other: MemoryLockProvider,
}

fn fixture(keep_alive_clock: Option<SharedClock>) -> Fixture {
    let clock: SharedClock = Arc::new(TokioClock::new());
    let server = MemoryServer::with_clock(clock.clone());
    let extends = Arc::new(AtomicUsize::new(0));
    let counting = Counting {
        inner: MemoryLockProvider::new(&server),
        extends: extends.clone(),
        extend_capable: true,
    };
    let keep_alive = KeepAliveProvider::new(Arc::new(counting))
        .unwrap()
        .with_clock(keep_alive_clock.unwrap_or(clock));
    let other = MemoryLockProvider::new(&server);
    Fixture { server, keep_alive, extends, other }
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
    let f = fixture(None);
    let lock = f.keep_alive.try_lock(&cfg("long")).await.unwrap().unwrap();
    // 32 s is 3.2 times lock_at_most_for: extensions at 5, 10, ..., 30 s.
    tokio::time::sleep(Duration::from_secs(32)).await;
    assert_eq!(f.extends.load(Ordering::SeqCst), 6);
    assert!(held_elsewhere(&f.other, "long").await, "kept alive past lock_at_most_for");
    let signal = lock.lost_signal().unwrap();
    lock.unlock().await.unwrap();
    assert!(!held_elsewhere(&f.other, "long").await, "released on unlock");
    // No more extensions after unlock, and the lock was not reported lost.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(f.extends.load(Ordering::SeqCst), 6);
    assert!(!signal.is_lost());
}

#[tokio::test(start_paused = true)]
async fn signals_lost_when_an_extension_fails() {
    let f = fixture(None);
    let lock = f.keep_alive.try_lock(&cfg("stolen")).await.unwrap().unwrap();
    let signal = lock.lost_signal().unwrap();
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
async fn signals_lost_without_extending_when_past_the_deadline() {
    // The keep-alive's own clock jumps past the deadline, as after a long process pause.
    let pause = ManualClock::new(SystemTime::now());
    let f = fixture(Some(Arc::new(pause.clone())));
    let lock = f.keep_alive.try_lock(&cfg("paused")).await.unwrap().unwrap();
    pause.advance(AT_MOST + Duration::from_millis(1));
    let signal = lock.lost_signal().unwrap();
    signal.lost().await;
    assert_eq!(f.extends.load(Ordering::SeqCst), 0, "no extension once the deadline passed");
    lock.unlock().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_dead_holder_frees_the_lock_within_at_most() {
    let f = fixture(None);
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
    let f = fixture(None);
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
    let f = fixture(None);
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
        extend_capable: false,
    };
    assert!(matches!(KeepAliveProvider::new(Arc::new(p)), Err(Error::Unsupported { .. })));
}

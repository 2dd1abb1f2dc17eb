//! The reference provider's own semantics, on manual clocks (no sleeping).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use shedlock::{Clock, Error, LockConfig, LockProvider, ManualClock, SharedClock, SkewedClock};
use shedlock_memory::{MemoryLockProvider, MemoryServer, TimeSource};

pub(crate) const S: Duration = Duration::from_secs(1);

pub(crate) fn cfg(name: &str, at_most: Duration, at_least: Duration) -> LockConfig {
    LockConfig::new(name, at_most, at_least).unwrap()
}

/// A server on a manual clock and two providers on it.
pub(crate) fn setup() -> (ManualClock, MemoryServer, MemoryLockProvider, MemoryLockProvider) {
    let clock = ManualClock::new(SystemTime::now());
    let server = MemoryServer::with_clock(Arc::new(clock.clone()));
    let a = MemoryLockProvider::new(&server);
    let b = MemoryLockProvider::new(&server);
    (clock, server, a, b)
}

#[tokio::test]
async fn expiry_at_least_and_release() {
    let (clock, _server, a, b) = setup();
    let c = cfg("x", 10 * S, 3 * S);
    let lock = a.try_lock(&c).await.unwrap().unwrap();
    assert!(a.try_lock(&c).await.unwrap().is_none(), "not reentrant at the provider level");
    clock.advance(S);
    lock.unlock().await.unwrap();
    assert!(b.try_lock(&c).await.unwrap().is_none(), "at_least holds until 3 s");
    clock.advance(2 * S - Duration::from_millis(1));
    assert!(b.try_lock(&c).await.unwrap().is_none());
    clock.advance(Duration::from_millis(1));
    let lock = b.try_lock(&c).await.unwrap().unwrap();
    clock.advance(10 * S - Duration::from_millis(1));
    assert!(a.try_lock(&c).await.unwrap().is_none());
    clock.advance(Duration::from_millis(1));
    assert!(a.try_lock(&c).await.unwrap().is_some(), "expired after at_most");
    drop(lock);
}

#[tokio::test]
async fn fencing_tokens_increase_across_expiry_takeover_and_deletion() {
    let (clock, server, a, b) = setup();
    let c = cfg("f", S, Duration::ZERO);
    let mut last = 0;
    for i in 0..6 {
        let node = if i % 2 == 0 { &a } else { &b };
        let lock = node.try_lock(&c).await.unwrap().unwrap();
        let t = lock.fencing_token().unwrap();
        assert!(t > last, "token {t} after {last}");
        last = t;
        match i % 3 {
            0 => lock.unlock().await.unwrap(),
            1 => clock.advance(S), // expires, taken over next round
            _ => {
                assert!(server.delete_record("f"));
                drop(lock);
            }
        }
    }
}

#[tokio::test]
async fn stale_holder_cannot_unlock_or_extend() {
    let (clock, _server, a, b) = setup();
    let c = cfg("own", S, Duration::ZERO);
    let mut stale = a.try_lock(&c).await.unwrap().unwrap();
    clock.advance(S);
    let fresh = b.try_lock(&c).await.unwrap().unwrap();
    assert!(matches!(stale.extend(10 * S, Duration::ZERO).await, Err(Error::LockLost { .. })));
    stale.unlock().await.unwrap();
    assert!(a.try_lock(&c).await.unwrap().is_none(), "the new holder keeps the lock");
    drop(fresh);
}

#[tokio::test]
async fn extend_chains_and_expired_locks_cannot_be_extended() {
    let (clock, _server, a, b) = setup();
    let c = cfg("ext", 2 * S, Duration::ZERO);
    let mut lock = a.try_lock(&c).await.unwrap().unwrap();
    for _ in 0..3 {
        clock.advance(S);
        lock.extend(2 * S, S).await.unwrap();
    }
    clock.advance(S + Duration::from_millis(999));
    assert!(b.try_lock(&c).await.unwrap().is_none(), "chained extensions keep it");
    clock.advance(Duration::from_millis(1));
    assert!(matches!(lock.extend(2 * S, Duration::ZERO).await, Err(Error::LockLost { .. })));
    assert!(b.try_lock(&c).await.unwrap().is_some(), "a failed extend does not hold the lock");
}

#[tokio::test]
async fn client_time_mode_breaks_under_skew_and_server_time_does_not() {
    let clock = ManualClock::new(SystemTime::now());
    let base: SharedClock = Arc::new(clock.clone());
    let server = MemoryServer::with_clock(base.clone());
    let ahead: SharedClock = Arc::new(SkewedClock::ahead(base.clone(), 3600 * S));
    let c = cfg("skew", 60 * S, Duration::ZERO);

    // Server time: a node whose clock is an hour ahead still sees the lock held.
    let a = MemoryLockProvider::new(&server);
    let b = MemoryLockProvider::new(&server).with_clock(ahead.clone());
    assert!(b.capabilities().server_time);
    let held = a.try_lock(&c).await.unwrap().unwrap();
    assert!(b.try_lock(&c).await.unwrap().is_none());
    held.unlock().await.unwrap();

    // Client time: the same skew lets the second node take a held lock.
    let a = MemoryLockProvider::new(&server).with_clock(base).with_time_source(TimeSource::Client);
    let b = MemoryLockProvider::new(&server).with_clock(ahead).with_time_source(TimeSource::Client);
    assert!(!b.capabilities().server_time);
    let _held = a.try_lock(&cfg("skew2", 60 * S, Duration::ZERO)).await.unwrap().unwrap();
    assert!(b.try_lock(&cfg("skew2", 60 * S, Duration::ZERO)).await.unwrap().is_some());
}

#[tokio::test]
async fn names_are_exact_and_bounded_without_truncation() {
    let (_clock, _server, a, b) = setup();
    let a = a.with_max_name_len(Some(8));
    let names = ["a'b", "a\"b", "x;--", "%", "_", "名前", "a\0b", "a b\n"];
    let mut held = Vec::new();
    for n in names {
        held.push(a.try_lock(&cfg(n, 60 * S, Duration::ZERO)).await.unwrap().unwrap());
    }
    // Near misses are different locks.
    for n in ["ab", "a", "x;-", "__", "a\0", "a b"] {
        assert!(b.try_lock(&cfg(n, 60 * S, Duration::ZERO)).await.unwrap().is_some(), "{n:?}");
    }
    assert!(a.try_lock(&cfg("12345678", S, Duration::ZERO)).await.unwrap().is_some());
    let err = a.try_lock(&cfg("123456789", S, Duration::ZERO)).await.unwrap_err();
    assert!(matches!(err, Error::InvalidName { .. }), "{err:?}");
    assert_eq!(a.capabilities().max_name_len, Some(8));
}

#[tokio::test]
async fn raw_record_hooks() {
    let (clock, server, a, _b) = setup();
    let c = cfg("raw", 60 * S, Duration::ZERO);
    server.insert_record("raw", clock.now() + 5 * S);
    assert!(a.try_lock(&c).await.unwrap().is_none(), "a planted live record holds");
    clock.advance(5 * S);
    let lock = a.try_lock(&c).await.unwrap().unwrap();
    assert_eq!(server.record("raw").unwrap().token, lock.fencing_token().unwrap());
    server.restart();
    assert!(server.record("raw").is_none());
}

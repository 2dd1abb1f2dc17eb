//! Lease validity, under tokio's paused clock so that every instant is exact: a lock is surely held
//! until an instant taken before its acquire was sent plus `lock_at_most_for`, less the backend's
//! clock step; `grant` refuses an
//! answer that arrives later; extensions move the deadline; the lost signal fires at it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use async_trait::async_trait;
use shedlock::{
    Acquisition, Capabilities, Error, ExecutionEvent, Lock, LockConfig, LockHandle, LockProvider,
    LockingExecutor, ManualClock, Result, SharedClock, TokioClock, active_lock_lost_signal,
};
use shedlock_memory::{MemoryLockProvider, MemoryServer};
use tokio::time::Instant;

const AT_MOST: Duration = Duration::from_secs(10);
/// The clock step of the hand-made providers here (they declare none): a lease ends this much
/// before `sent + lock_at_most_for`.
const STEP: Duration = shedlock::DEFAULT_CLOCK_STEP;

fn cfg(name: &str) -> LockConfig {
    LockConfig::new(name, AT_MOST, Duration::from_secs(5)).unwrap()
}

/// A backend with one lock slot behind a link that takes `delay` each way.
#[derive(Clone)]
struct SlowLink {
    owner: Arc<Mutex<Option<u64>>>,
    next: Arc<Mutex<u64>>,
    delay: Duration,
}

struct SlowHandle {
    link: SlowLink,
    owner: u64,
}

#[async_trait]
impl LockProvider for SlowLink {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        let acquisition = Acquisition::begin(config);
        tokio::time::sleep(self.delay).await; // the request travels
        let owner = {
            let mut next = self.next.lock().unwrap();
            *next += 1;
            let mut slot = self.owner.lock().unwrap();
            if slot.is_some() {
                return Ok(None);
            }
            *slot = Some(*next);
            *next
        };
        tokio::time::sleep(self.delay).await; // the answer travels
        acquisition.grant(SlowHandle { link: self.clone(), owner }).await.map(Some)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_owner_checked(true)
    }
}

#[async_trait]
impl LockHandle for SlowHandle {
    async fn unlock(&mut self, _config: &LockConfig) -> Result<()> {
        let mut slot = self.link.owner.lock().unwrap();
        if *slot == Some(self.owner) {
            *slot = None;
        }
        Ok(())
    }
}

fn slow(delay: Duration) -> SlowLink {
    SlowLink { owner: Arc::default(), next: Arc::default(), delay }
}

#[tokio::test(start_paused = true)]
async fn a_lock_is_valid_until_the_start_of_its_acquire_plus_at_most() {
    let link = slow(Duration::from_secs(2));
    let start = Instant::now();
    let lock = link.try_lock(&cfg("quick")).await.unwrap().unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(4));
    assert_eq!(
        lock.valid_until(),
        start + AT_MOST - STEP,
        "measured from before the request was sent, less one clock step"
    );
    assert_eq!(lock.remaining(), AT_MOST - STEP - Duration::from_secs(4));
    assert!(!lock.is_lost());
}

#[tokio::test(start_paused = true)]
async fn an_answer_after_the_lease_ended_is_an_error_and_the_lock_is_released() {
    // 5 s each way: the backend granted the lock at 5 s, its answer arrives at 10 s = the
    // deadline, when the backend may already have handed it to someone else.
    let link = slow(Duration::from_secs(5));
    match link.try_lock(&cfg("late")).await {
        Err(Error::LeaseExpiredInFlight { name, elapsed, lock_at_most_for }) => {
            assert_eq!(name, "late");
            assert_eq!(elapsed, Duration::from_secs(10));
            assert_eq!(lock_at_most_for, AT_MOST);
        }
        other => panic!("expected LeaseExpiredInFlight, got {other:?}"),
    }
    assert_eq!(*link.owner.lock().unwrap(), None, "the late grant was released");
    assert!(
        Error::LeaseExpiredInFlight {
            name: "x".into(),
            elapsed: AT_MOST,
            lock_at_most_for: AT_MOST
        }
        .is_retryable()
    );
}

#[tokio::test(start_paused = true)]
async fn the_late_release_is_owner_checked() {
    // The late holder's release must not free a lock that another holder took meanwhile.
    let link = slow(Duration::from_secs(6));
    let late = tokio::spawn({
        let link = link.clone();
        async move { link.try_lock(&cfg("shared")).await }
    });
    // The slot is written at 6 s; at 7 s an operator frees it and holder 99 takes it.
    tokio::time::sleep(Duration::from_secs(7)).await;
    *link.owner.lock().unwrap() = Some(99);
    assert!(matches!(late.await.unwrap(), Err(Error::LeaseExpiredInFlight { .. })));
    assert_eq!(*link.owner.lock().unwrap(), Some(99));
}

fn memory() -> (MemoryServer, MemoryLockProvider) {
    let clock: SharedClock = Arc::new(TokioClock::new());
    let server = MemoryServer::with_clock(clock);
    let p = MemoryLockProvider::new(&server);
    (server, p)
}

#[tokio::test(start_paused = true)]
async fn extend_moves_the_deadline_from_the_start_of_the_extend() {
    let (_server, p) = memory();
    let start = Instant::now();
    let mut lock = p.try_lock(&cfg("ext")).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_secs(7)).await;
    lock.extend(Duration::from_secs(20), Duration::ZERO).await.unwrap();
    assert_eq!(lock.valid_until(), start + Duration::from_secs(27));
    // A shorter extension shortens it.
    lock.extend(Duration::from_secs(1), Duration::ZERO).await.unwrap();
    assert_eq!(lock.valid_until(), start + Duration::from_secs(8));
    lock.unlock().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_lost_signal_fires_at_the_deadline_of_a_lock_never_extended() {
    let (_server, p) = memory();
    let start = Instant::now();
    let lock = p.try_lock(&cfg("plain")).await.unwrap().unwrap();
    let signal = lock.lost_signal();
    assert!(!signal.is_lost());
    signal.lost().await;
    assert_eq!(start.elapsed(), AT_MOST);
    assert!(lock.is_lost() && signal.is_lost());
    assert_eq!(lock.remaining(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn an_extension_moves_the_signal_and_a_release_silences_it() {
    let (_server, p) = memory();
    let start = Instant::now();
    let mut lock = p.try_lock(&cfg("moved")).await.unwrap().unwrap();
    let signal = lock.lost_signal();
    let waiter = tokio::spawn({
        let signal = signal.clone();
        async move {
            signal.lost().await;
            Instant::now()
        }
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    lock.extend(AT_MOST, Duration::ZERO).await.unwrap();
    let fired = waiter.await.unwrap();
    assert_eq!(fired - start, Duration::from_secs(15), "fired at the extended deadline");

    let lock = p.try_lock(&cfg("released")).await.unwrap().unwrap();
    let signal = lock.lost_signal();
    lock.unlock().await.unwrap();
    let never = tokio::time::timeout(AT_MOST * 3, signal.lost()).await;
    assert!(never.is_err(), "a released lock is not lost");
    assert!(!signal.is_lost());
}

#[tokio::test(start_paused = true)]
async fn extend_after_the_deadline_is_lock_lost_without_reaching_the_backend() {
    // The backend's clock stands still, so it still holds the lock and would accept the
    // extension: only the lease check can refuse it.
    let frozen: SharedClock = Arc::new(ManualClock::new(SystemTime::now()));
    let server = MemoryServer::with_clock(frozen);
    let p = MemoryLockProvider::new(&server);
    let mut lock = p.try_lock(&cfg("gone")).await.unwrap().unwrap();
    tokio::time::sleep(AT_MOST).await;
    match lock.extend(AT_MOST, Duration::ZERO).await {
        Err(Error::LockLost { name }) => assert_eq!(name, "gone"),
        other => panic!("expected LockLost, got {other:?}"),
    }
    assert!(lock.is_lost());
    assert!(server.record("gone").is_some_and(|r| r.lock_until > server.now()));
}

#[tokio::test(start_paused = true)]
async fn the_executor_reports_a_lock_lost_while_its_task_ran() {
    let (_server, p) = memory();
    let lost_events = Arc::new(Mutex::new(Vec::new()));
    let events = lost_events.clone();
    let executor =
        LockingExecutor::new(Arc::new(p)).with_listener(move |e: &ExecutionEvent<'_>| {
            if let ExecutionEvent::Lost { name } = e {
                events.lock().unwrap().push(name.to_string());
            }
        });
    let out = executor
        .execute(&cfg("overrun"), || async {
            let signal = active_lock_lost_signal().unwrap();
            let start = Instant::now();
            signal.lost().await; // the task overruns lock_at_most_for without extending
            start.elapsed()
        })
        .await
        .unwrap();
    assert_eq!(out.into_option(), Some(AT_MOST));
    assert_eq!(*lost_events.lock().unwrap(), ["overrun"]);
}

#[tokio::test(start_paused = true)]
async fn an_extension_that_finds_the_lock_taken_fires_the_signal_at_once() {
    let (server, p) = memory();
    let start = Instant::now();
    let mut lock = p.try_lock(&cfg("taken")).await.unwrap().unwrap();
    let waiter = tokio::spawn({
        let signal = lock.lost_signal();
        async move {
            signal.lost().await;
            Instant::now()
        }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(server.delete_record("taken"));
    let thief = p.try_lock(&cfg("taken")).await.unwrap().unwrap();
    assert!(matches!(lock.extend(AT_MOST, Duration::ZERO).await, Err(Error::LockLost { .. })));
    assert_eq!(waiter.await.unwrap() - start, Duration::from_secs(3), "told at once, not at 10 s");
    thief.unlock().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_absurd_lock_at_most_for_saturates_instead_of_overflowing() {
    let (_server, p) = memory();
    let forever = LockConfig::new("forever", Duration::MAX, Duration::ZERO).unwrap();
    let lock = p.try_lock(&forever).await.unwrap().expect("granted, not refused as late");
    let century = Duration::from_secs(99 * 365 * 24 * 3600);
    assert!(lock.remaining() > century, "{:?}", lock.remaining());
    assert!(!lock.is_lost());
    lock.unlock().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_loss_reported_by_the_provider_fires_the_signal_before_the_deadline() {
    let link = slow(Duration::ZERO);
    let lock = link.try_lock(&cfg("session")).await.unwrap().unwrap();
    let lease = lock.lease().clone();
    let signal = lock.lost_signal();
    assert!(!signal.is_lost());
    // e.g. the backend's session expired: the provider reports it, long before valid_until.
    lease.report_lost();
    assert!(lock.is_lost() && signal.is_lost());
    assert_eq!(lock.remaining(), Duration::ZERO);
    tokio::time::timeout(Duration::from_millis(1), signal.lost()).await.expect("the signal fired");
    lock.unlock().await.unwrap();

    // A released lease stays released: a late report changes nothing.
    let lock = link.try_lock(&cfg("released")).await.unwrap().expect("the slot is free again");
    let lease = lock.lease().clone();
    let signal = lock.lost_signal();
    lock.unlock().await.unwrap();
    lease.report_lost();
    assert!(!signal.is_lost(), "a released lock is not lost");
}

/// A backend whose extend requests are sent (and may be applied) but never answered.
struct Unanswered;

struct UnansweredHandle;

#[async_trait]
impl LockProvider for Unanswered {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        Acquisition::begin(config).grant(UnansweredHandle).await.map(Some)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_owner_checked(true).with_extend(true)
    }
}

#[async_trait]
impl LockHandle for UnansweredHandle {
    async fn unlock(&mut self, _config: &LockConfig) -> Result<()> {
        Ok(())
    }

    async fn extend(&mut self, _config: &LockConfig) -> Result<()> {
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_shortening_extend_left_unanswered_ends_the_lease_at_the_shorter_deadline() {
    let start = Instant::now();
    let mut lock = Unanswered.try_lock(&cfg("short")).await.unwrap().unwrap();
    assert_eq!(lock.valid_until(), start + AT_MOST - STEP);
    let lost = lock.lost_signal();
    // The backend may have applied the 2 s lease; the answer never comes (the caller's time
    // limit drops the future).
    let r = tokio::time::timeout(
        Duration::from_secs(1),
        lock.extend(Duration::from_secs(2), Duration::ZERO),
    )
    .await;
    assert!(r.is_err(), "the extend cannot have answered");
    assert_eq!(lock.valid_until(), start + Duration::from_secs(2) - STEP);
    tokio::time::timeout(Duration::from_millis(1001), lost.lost())
        .await
        .expect("the lost signal fires at the shorter deadline, not the original one");
}

#[tokio::test(start_paused = true)]
async fn a_lengthening_extend_left_unanswered_keeps_the_old_deadline() {
    let start = Instant::now();
    let mut lock = Unanswered.try_lock(&cfg("long")).await.unwrap().unwrap();
    let r = tokio::time::timeout(
        Duration::from_secs(1),
        lock.extend(Duration::from_secs(60), Duration::ZERO),
    )
    .await;
    assert!(r.is_err());
    assert_eq!(lock.valid_until(), start + AT_MOST - STEP, "a lease grows only once confirmed");
}

/// A provider that grants at once, with the clock step it is given.
struct Stepped(Duration);

#[async_trait]
impl LockProvider for Stepped {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        let acquisition = Acquisition::begin(config).with_clock_step(self.0);
        tokio::time::sleep(Duration::from_secs(1)).await; // the round trip
        acquisition.grant(UnansweredHandle).await.map(Some)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_owner_checked(true).with_clock_step(self.0)
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_ends_one_clock_step_before_sent_plus_at_most() {
    // A backend that truncates the time it read to the millisecond can write a record ending up
    // to 1 ms before sent + lock_at_most_for: the lease must end there, not later.
    for step in [Duration::ZERO, Duration::from_micros(1), STEP, Duration::from_secs(2)] {
        let start = Instant::now();
        let lock = Stepped(step).try_lock(&cfg("stepped")).await.unwrap().unwrap();
        assert_eq!(lock.valid_until(), start + AT_MOST - step, "step {step:?}");
        assert_eq!(lock.lease().clock_step(), step);
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_shorter_than_its_clock_step_is_never_granted() {
    // 10 s of lease on a backend that truncates to 20 s could already be over when granted.
    let r = Stepped(Duration::from_secs(20)).try_lock(&cfg("coarse")).await;
    assert!(matches!(r, Err(Error::LeaseExpiredInFlight { .. })), "{r:?}");
}

//! `LockingExecutor::execute_waiting` under tokio's paused clock: the in-memory provider on
//! `TokioClock`, so leases, pauses and the deadline move together, exactly.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use shedlock::{
    ExecutionEvent, LockConfig, LockProvider, LockingExecutor, SharedClock, TaskResult, TokioClock,
    Wait,
};
use shedlock_memory::{MemoryLockProvider, MemoryServer};
use tokio::time::Instant;

fn cfg(name: &str) -> LockConfig {
    LockConfig::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

/// An executor on `server` whose listener records the pauses it announces.
fn waiter(server: &MemoryServer) -> (LockingExecutor, Arc<Mutex<Vec<Duration>>>) {
    let pauses: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let seen = pauses.clone();
    let executor = LockingExecutor::new(Arc::new(MemoryLockProvider::new(server))).with_listener(
        move |e: &ExecutionEvent<'_>| {
            if let ExecutionEvent::Waiting { retry_in, .. } = e {
                seen.lock().unwrap().push(*retry_in);
            }
        },
    );
    (executor, pauses)
}

fn server() -> MemoryServer {
    let clock: SharedClock = Arc::new(TokioClock::new());
    MemoryServer::with_clock(clock)
}

#[tokio::test(start_paused = true)]
async fn a_waiter_runs_the_task_within_one_pause_of_the_holders_release() {
    let server = server();
    let holder = MemoryLockProvider::new(&server);
    let lock = holder.try_lock(&cfg("w")).await.unwrap().unwrap();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        lock.unlock().await.unwrap();
    });
    let (executor, pauses) = waiter(&server);
    let start = Instant::now();
    let ran = executor
        .execute_waiting(&cfg("w"), Wait::at_most(Duration::from_secs(10)), || async {
            start.elapsed()
        })
        .await
        .unwrap();
    let TaskResult::Executed(at) = ran else { panic!("the lock was free after 2 s: {ran:?}") };
    // Released at 2 s; the next attempt comes at most one (full) pause later, and pauses are
    // capped at 1 s.
    assert!(at >= Duration::from_millis(2_000), "ran at {at:?}, while held");
    assert!(at <= Duration::from_millis(3_000), "ran only at {at:?}");
    let pauses = pauses.lock().unwrap().clone();
    // 50 ms doubling (each jittered into [d/2, d]) up to 1 s.
    assert!(pauses[0] >= Duration::from_millis(25) && pauses[0] <= Duration::from_millis(50));
    assert!(pauses.iter().all(|p| *p <= Duration::from_secs(1)), "{pauses:?}");
    assert!((4..=12).contains(&pauses.len()), "{} attempts in 2 s: {pauses:?}", pauses.len());
}

#[tokio::test(start_paused = true)]
async fn a_lock_held_past_the_deadline_is_not_executed_and_the_last_attempt_is_at_the_deadline() {
    let server = server();
    let holder = MemoryLockProvider::new(&server);
    let _held = holder.try_lock(&cfg("busy")).await.unwrap().unwrap();
    let (executor, pauses) = waiter(&server);
    let start = Instant::now();
    let wait = Wait::at_most(Duration::from_millis(3_300))
        .backoff(Duration::from_millis(100), Duration::from_millis(400));
    let ran = executor.execute_waiting(&cfg("busy"), wait, || async {}).await.unwrap();
    assert_eq!(ran, TaskResult::NotExecuted);
    assert_eq!(start.elapsed(), Duration::from_millis(3_300), "gave up exactly at the deadline");
    let pauses = pauses.lock().unwrap().clone();
    let total: Duration = pauses.iter().sum();
    // The attempts themselves take a little of the time; the last pause ends at the deadline.
    assert!(total <= Duration::from_millis(3_300), "{pauses:?}");
    assert!(total >= Duration::from_millis(3_000), "{pauses:?}");
    assert!(pauses.iter().all(|p| *p <= Duration::from_millis(400)), "{pauses:?}");
}

#[tokio::test(start_paused = true)]
async fn a_waiter_dropped_mid_wait_holds_nothing_and_never_runs_its_task() {
    let server = server();
    let holder = MemoryLockProvider::new(&server);
    let lock = holder.try_lock(&cfg("dropped")).await.unwrap().unwrap();
    let (executor, _) = waiter(&server);
    let ran = Arc::new(Mutex::new(false));
    let flag = ran.clone();
    let config = cfg("dropped");
    let waiting =
        executor.execute_waiting(&config, Wait::at_most(Duration::from_secs(60)), || async move {
            *flag.lock().unwrap() = true;
        });
    assert!(tokio::time::timeout(Duration::from_millis(700), waiting).await.is_err());
    lock.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!*ran.lock().unwrap(), "a dropped waiter ran its task");
    let other = MemoryLockProvider::new(&server);
    assert!(
        other.try_lock(&cfg("dropped")).await.unwrap().is_some(),
        "the dropped waiter holds it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_free_lock_runs_at_once_and_an_error_ends_the_wait() {
    let server = server();
    let (executor, pauses) = waiter(&server);
    let start = Instant::now();
    let ran = executor
        .execute_waiting(&cfg("free"), Wait::at_most(Duration::from_secs(5)), || async { 7 })
        .await
        .unwrap();
    assert_eq!(ran, TaskResult::Executed(7));
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert!(pauses.lock().unwrap().is_empty());
    // A name the provider refuses is an error at once, not a wait.
    let limited =
        LockingExecutor::new(Arc::new(MemoryLockProvider::new(&server).with_max_name_len(Some(4))));
    let err = limited
        .execute_waiting(&cfg("too-long"), Wait::at_most(Duration::from_secs(5)), || async {})
        .await
        .unwrap_err();
    assert!(matches!(err, shedlock::Error::InvalidName { .. }), "{err:?}");
    assert_eq!(start.elapsed(), Duration::ZERO);
}

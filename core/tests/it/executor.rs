//! The locking executor against the in-memory reference provider.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, SystemTime},
};

use shedlock::{
    Error, ExecutionEvent, LockConfig, LockProvider, LockingExecutor, TaskResult, active_lock_name,
    assert_locked, extend_active_lock,
};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

const HOUR: Duration = Duration::from_secs(3600);

fn cfg(name: &str, at_most: Duration, at_least: Duration) -> LockConfig {
    LockConfig::new(name, at_most, at_least).unwrap()
}

struct Fixture {
    server: MemoryServer,
    executor: LockingExecutor,
    other: MemoryLockProvider,
}

fn fixture() -> Fixture {
    let server = MemoryServer::new();
    let executor = LockingExecutor::new(Arc::new(MemoryLockProvider::new(&server)));
    let other = MemoryLockProvider::new(&server);
    Fixture { server, executor, other }
}

/// Whether another node can take the lock right now (and releases it again if so).
async fn free(other: &MemoryLockProvider, name: &str) -> bool {
    match other.try_lock(&cfg(name, HOUR, Duration::ZERO)).await.unwrap() {
        Some(l) => {
            l.unlock().await.unwrap();
            true
        }
        None => false,
    }
}

/// Waits (bounded) until the lock becomes free; the locks used here are held for an hour, so
/// becoming free within seconds can only come from a release.
async fn becomes_free(other: &MemoryLockProvider, name: &str) -> bool {
    for _ in 0..500 {
        if free(other, name).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test]
async fn runs_task_and_releases_on_return() {
    let f = fixture();
    let c = cfg("ret", HOUR, Duration::ZERO);
    let other = f.other.clone();
    let out = f
        .executor
        .execute(&c, || async move {
            assert!(!free(&other, "ret").await, "lock must be held while the task runs");
            7
        })
        .await
        .unwrap();
    assert_eq!(out, TaskResult::Executed(7));
    assert!(free(&f.other, "ret").await);
}

#[tokio::test]
async fn releases_when_task_returns_an_error() {
    let f = fixture();
    let c = cfg("err", HOUR, Duration::ZERO);
    let out = f.executor.execute(&c, || async { Err::<(), _>("boom") }).await.unwrap();
    assert_eq!(out, TaskResult::Executed(Err("boom")));
    assert!(free(&f.other, "err").await);
}

#[tokio::test]
async fn skips_when_held_elsewhere() {
    let f = fixture();
    let c = cfg("held", HOUR, Duration::ZERO);
    let held = f.other.try_lock(&c).await.unwrap().unwrap();
    let runs = AtomicUsize::new(0);
    let out = f
        .executor
        .execute(&c, || async {
            runs.fetch_add(1, Ordering::SeqCst);
        })
        .await
        .unwrap();
    assert_eq!(out, TaskResult::NotExecuted);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    held.unlock().await.unwrap();
    assert!(f.executor.execute(&c, || async {}).await.unwrap().was_executed());
}

#[tokio::test]
async fn honours_lock_at_least_for() {
    let f = fixture();
    let c = cfg("least", HOUR, HOUR);
    assert!(f.executor.execute(&c, || async {}).await.unwrap().was_executed());
    assert!(!free(&f.other, "least").await, "at_least keeps the lock after a fast task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_before_a_panic_propagates() {
    let f = fixture();
    let executor = f.executor.clone();
    let joined = tokio::spawn(async move {
        let c = cfg("panic", HOUR, Duration::ZERO);
        executor.execute(&c, || async { panic!("task failed") }).await
    })
    .await;
    let err = joined.unwrap_err();
    assert!(err.is_panic(), "the panic must propagate");
    // The release completed before the panic resumed: free at once, no waiting.
    assert!(free(&f.other, "panic").await);
}

#[tokio::test]
async fn releases_when_the_execution_is_cancelled() {
    let f = fixture();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let executor = f.executor.clone();
    let handle = tokio::spawn(async move {
        let c = cfg("cancel", HOUR, Duration::ZERO);
        executor
            .execute(&c, || async move {
                let _ = started_tx.send(());
                std::future::pending::<()>().await
            })
            .await
    });
    started_rx.await.unwrap();
    assert!(!free(&f.other, "cancel").await);
    handle.abort();
    assert!(handle.await.unwrap_err().is_cancelled());
    assert!(becomes_free(&f.other, "cancel").await, "a cancelled execution must release its lock");
}

#[tokio::test]
async fn cancelled_execution_still_honours_at_least() {
    let f = fixture();
    let executor = f.executor.clone();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let handle = tokio::spawn(async move {
        let c = cfg("cancel-least", HOUR, HOUR);
        executor
            .execute(&c, || async move {
                let _ = started_tx.send(());
                std::future::pending::<()>().await
            })
            .await
    });
    started_rx.await.unwrap();
    handle.abort();
    let _ = handle.await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let rec = f.server.record("cancel-least").unwrap();
    let left = rec.lock_until.duration_since(SystemTime::now()).unwrap();
    assert!(left > Duration::from_secs(3500), "released lock keeps at_least, left {left:?}");
}

#[tokio::test]
async fn reentrant_use_of_the_same_name_does_not_deadlock() {
    let f = fixture();
    let executor = f.executor.clone();
    let c = cfg("re", HOUR, Duration::ZERO);
    let inner_c = c.clone();
    let other = f.other.clone();
    let out = f
        .executor
        .execute(&c, || async move {
            let inner =
                executor.execute(&inner_c, || async { assert_locked().is_ok() }).await.unwrap();
            // A different name nested inside is really locked.
            let nested = executor
                .execute(&cfg("re-b", HOUR, Duration::ZERO), || async {
                    (active_lock_name(), free(&other, "re-b").await)
                })
                .await
                .unwrap();
            // Back in the outer task: still held.
            (inner, nested, free(&other, "re").await, active_lock_name())
        })
        .await
        .unwrap();
    assert_eq!(
        out,
        TaskResult::Executed((
            TaskResult::Executed(true),
            TaskResult::Executed((Some("re-b".to_owned()), false)),
            false,
            Some("re".to_owned())
        ))
    );
    assert!(free(&f.other, "re").await);
    assert!(free(&f.other, "re-b").await);
}

#[tokio::test]
async fn assert_locked_inside_and_outside() {
    let f = fixture();
    assert!(matches!(assert_locked(), Err(Error::NotLocked)));
    let inside = f
        .executor
        .execute(&cfg("assert", HOUR, Duration::ZERO), || async {
            let here = assert_locked().is_ok();
            // Task-locals do not follow tokio::spawn.
            let spawned = tokio::spawn(async { assert_locked().is_ok() }).await.unwrap();
            (here, spawned)
        })
        .await
        .unwrap();
    assert_eq!(inside, TaskResult::Executed((true, false)));
    assert!(matches!(assert_locked(), Err(Error::NotLocked)));
}

#[tokio::test]
async fn extend_active_lock_from_inside_the_task() {
    let f = fixture();
    assert!(matches!(extend_active_lock(HOUR, Duration::ZERO).await, Err(Error::NotLocked)));
    let server = f.server.clone();
    let out = f
        .executor
        .execute(&cfg("ext", Duration::from_secs(10), Duration::ZERO), || async move {
            extend_active_lock(HOUR, Duration::from_secs(1800)).await.unwrap();
            let invalid = extend_active_lock(Duration::from_secs(1), Duration::from_secs(2)).await;
            let rec = server.record("ext").unwrap();
            (rec.lock_until.duration_since(SystemTime::now()).unwrap(), invalid.is_err())
        })
        .await
        .unwrap()
        .into_option()
        .unwrap();
    assert!(out.0 > Duration::from_secs(3500), "extended to an hour, left {:?}", out.0);
    assert!(out.1, "invalid durations are rejected");
    // The extension's at_least (30 min) is honoured on release.
    assert!(!free(&f.other, "ext").await);
}

#[tokio::test]
async fn listener_sees_the_life_of_an_execution() {
    let f = fixture();
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let executor = f.executor.clone().with_listener(move |e: &ExecutionEvent<'_>| {
        let s = match e {
            ExecutionEvent::Attempt { name } => format!("attempt {name}"),
            ExecutionEvent::Acquired { name, fencing_token } => {
                format!("acquired {name} {}", fencing_token.is_some())
            }
            ExecutionEvent::NotAcquired { name } => format!("not-acquired {name}"),
            ExecutionEvent::Started { name } => format!("started {name}"),
            ExecutionEvent::Finished { name, panicked, .. } => {
                format!("finished {name} {panicked}")
            }
            ExecutionEvent::Failed { name, .. } => format!("failed {name}"),
            _ => "other".to_owned(),
        };
        seen.lock().unwrap().push(s);
    });
    let c = cfg("ev", HOUR, Duration::ZERO);
    let _ = executor.execute(&c, || async {}).await.unwrap();
    let held = f.other.try_lock(&c).await.unwrap().unwrap();
    let _ = executor.execute(&c, || async {}).await.unwrap();
    held.unlock().await.unwrap();
    assert_eq!(
        *events.lock().unwrap(),
        [
            "attempt ev",
            "acquired ev true",
            "started ev",
            "finished ev false",
            "attempt ev",
            "not-acquired ev"
        ]
    );
}

#[tokio::test]
async fn provider_errors_are_returned_and_the_task_does_not_run() {
    let server = MemoryServer::new();
    let limited = MemoryLockProvider::new(&server).with_max_name_len(Some(3));
    let executor = LockingExecutor::new(Arc::new(limited));
    let ran = AtomicUsize::new(0);
    let res = executor
        .execute(&cfg("too-long", HOUR, Duration::ZERO), || async {
            ran.fetch_add(1, Ordering::SeqCst);
        })
        .await;
    assert!(matches!(res, Err(Error::InvalidName { .. })), "{res:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[test]
fn provider_is_object_safe() {
    let server = MemoryServer::new();
    let p: Arc<dyn LockProvider> = Arc::new(MemoryLockProvider::new(&server));
    assert!(p.capabilities().extend);
}

//! The locks a process holds (`LockingExecutor::held`) and draining (`LockingExecutor::drain`,
//! `Scheduler::drain`), under tokio's paused clock: the in-memory provider on `TokioClock`, so
//! leases, task durations and deadlines move together, exactly.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use shedlock::{
    Capabilities, Error, Lock, LockConfig, LockHandle, LockProvider, LockingExecutor, Schedule,
    Scheduler, SharedClock, TaskResult, TokioClock,
};
use shedlock_memory::{MemoryLockProvider, MemoryServer};
use tokio::{sync::Notify, time::Instant};

fn cfg(name: &str) -> LockConfig {
    LockConfig::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

fn server() -> MemoryServer {
    let clock: SharedClock = Arc::new(TokioClock::new());
    MemoryServer::with_clock(clock)
}

fn executor(server: &MemoryServer) -> LockingExecutor {
    LockingExecutor::new(Arc::new(MemoryLockProvider::new(server)))
}

/// Whether another node (its own provider on `server`) can take `name` now.
async fn free(server: &MemoryServer, name: &str) -> bool {
    match MemoryLockProvider::new(server).try_lock(&cfg(name)).await.unwrap() {
        Some(lock) => {
            lock.unlock().await.unwrap();
            true
        }
        None => false,
    }
}

/// Runs `task` under `name` on a spawned tokio task: `execute`'s result.
fn spawn_task(
    executor: &LockingExecutor,
    name: &str,
    runs_for: Duration,
) -> tokio::task::JoinHandle<shedlock::Result<TaskResult<()>>> {
    let executor = executor.clone();
    let config = cfg(name);
    tokio::spawn(async move {
        executor.execute(&config, || async move { tokio::time::sleep(runs_for).await }).await
    })
}

#[tokio::test(start_paused = true)]
async fn held_lists_the_locks_in_flight_with_validity_and_token_and_forgets_them_when_released() {
    let server = server();
    let executor = executor(&server);
    assert!(executor.held().is_empty());
    let started = Instant::now();
    let a = spawn_task(&executor, "a", Duration::from_secs(2));
    let b = spawn_task(&executor, "b", Duration::from_secs(4));
    tokio::time::sleep(Duration::from_secs(1)).await;

    let held = executor.held();
    let names: Vec<&str> = held.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["a", "b"], "in name order");
    for h in &held {
        assert_eq!(h.held_for, Duration::from_secs(1), "{h:?}");
        // Won at the start with a 60 s lease.
        assert_eq!(h.valid_until, started + Duration::from_secs(60), "{h:?}");
        assert!(h.fencing_token.is_some(), "the memory provider fences: {h:?}");
    }
    assert_ne!(held[0].fencing_token, held[1].fencing_token);
    // A clone sees the same executions.
    assert_eq!(executor.clone().held(), held);

    assert!(a.await.unwrap().unwrap().was_executed());
    assert_eq!(executor.held().iter().map(|h| h.name.clone()).collect::<Vec<_>>(), ["b"]);
    assert!(b.await.unwrap().unwrap().was_executed());
    assert!(executor.held().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_drain_waits_for_the_tasks_in_flight_then_refuses_new_locks() {
    let server = server();
    let executor = executor(&server);
    let short = spawn_task(&executor, "short", Duration::from_secs(2));
    let long = spawn_task(&executor, "long", Duration::from_secs(5));
    tokio::time::sleep(Duration::from_secs(1)).await;

    let report = executor.drain(Duration::from_secs(30)).await;
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.took, Duration::from_secs(4), "until the longer task ended");
    let waited: Vec<(&str, Option<Duration>)> =
        report.waited_for.iter().map(|d| (d.lock.name.as_str(), d.released_after)).collect();
    assert_eq!(
        waited,
        [("long", Some(Duration::from_secs(4))), ("short", Some(Duration::from_secs(1)))]
    );
    assert_eq!(report.unfinished().count(), 0);
    assert!(report.waited_for.iter().all(|d| !d.release_failed), "{report:?}");
    assert!(matches!(short.await.unwrap(), Ok(TaskResult::Executed(()))));
    assert!(matches!(long.await.unwrap(), Ok(TaskResult::Executed(()))));
    // Released: another node takes the names at once.
    assert!(free(&server, "short").await && free(&server, "long").await);

    // Drained for good: no new lock, and the task does not run.
    assert!(executor.is_draining() && executor.clone().is_draining());
    let ran = AtomicUsize::new(0);
    let r = executor.execute(&cfg("later"), || async { ran.fetch_add(1, Ordering::SeqCst) }).await;
    assert!(matches!(r, Err(Error::Draining)), "{r:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert!(free(&server, "later").await, "nothing was taken for it");
}

#[tokio::test(start_paused = true)]
async fn an_executor_drain_past_its_deadline_reports_the_task_still_running_and_leaves_it() {
    let server = server();
    let executor = executor(&server);
    let slow = spawn_task(&executor, "slow", Duration::from_secs(10));
    tokio::time::sleep(Duration::from_secs(1)).await;

    let report = executor.drain(Duration::from_secs(2)).await;
    assert!(!report.is_complete(), "{report:?}");
    assert_eq!(report.took, Duration::from_secs(2));
    assert_eq!(report.unfinished().collect::<Vec<_>>(), ["slow"]);
    // The executor's drain does not cancel: the task goes on, holding its lock, and releases it.
    assert!(!free(&server, "slow").await);
    assert!(matches!(slow.await.unwrap(), Ok(TaskResult::Executed(()))));
    assert!(free(&server, "slow").await);
}

/// A provider whose `try_lock` waits at a gate before asking the in-memory backend: a lock is
/// won exactly when the test opens the gate.
#[derive(Debug)]
struct Gated {
    inner: MemoryLockProvider,
    gate: Arc<Notify>,
    arrived: Arc<Notify>,
}

#[async_trait]
impl LockProvider for Gated {
    async fn try_lock(&self, config: &LockConfig) -> shedlock::Result<Option<Lock>> {
        self.arrived.notify_one();
        self.gate.notified().await;
        self.inner.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn backend_name(&self) -> &'static str {
        "gated-memory"
    }
}

#[tokio::test(start_paused = true)]
async fn a_lock_won_while_a_drain_began_is_released_unused() {
    let server = server();
    let gate = Arc::new(Notify::new());
    let arrived = Arc::new(Notify::new());
    let provider = Gated {
        inner: MemoryLockProvider::new(&server),
        gate: gate.clone(),
        arrived: arrived.clone(),
    };
    let executor = LockingExecutor::new(Arc::new(provider));
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = ran.clone();
    let racing = executor.clone();
    let attempt = tokio::spawn(async move {
        racing
            .execute(&cfg("raced"), || async move { counted.fetch_add(1, Ordering::SeqCst) })
            .await
    });
    arrived.notified().await; // the attempt is past the draining check, inside try_lock
    let report = executor.drain(Duration::from_secs(5)).await;
    assert!(report.waited_for.is_empty() && report.is_complete(), "{report:?}");
    gate.notify_one(); // the backend grants the lock now, after the drain began

    let r = attempt.await.unwrap();
    assert!(matches!(r, Err(Error::Draining)), "{r:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the task must not run");
    assert!(free(&server, "raced").await, "the lock won during the drain is released");
}

#[tokio::test(start_paused = true)]
async fn a_scheduler_drain_lets_the_fire_in_flight_finish_and_fires_no_more() {
    let server = server();
    let scheduler = Scheduler::new(executor(&server));
    let (started, finished) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (s, f) = (started.clone(), finished.clone());
    // A fire every second, each running 3 s: the first is in flight at 1.5 s.
    scheduler
        .schedule(Schedule::fixed_rate(Duration::from_secs(1)), cfg("digest"), move || {
            let (s, f) = (s.clone(), f.clone());
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(3)).await;
                f.fetch_add(1, Ordering::SeqCst);
            }
        })
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!((started.load(Ordering::SeqCst), finished.load(Ordering::SeqCst)), (1, 0));

    let report = scheduler.drain(Duration::from_secs(30)).await;
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.waited_for.len(), 1);
    assert_eq!(report.waited_for[0].lock.name, "digest");
    assert_eq!(report.waited_for[0].released_after, Some(Duration::from_millis(1500)));
    assert_eq!(finished.load(Ordering::SeqCst), 1, "the fire in flight finished");
    assert!(free(&server, "digest").await, "and released its lock");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(started.load(Ordering::SeqCst), 1, "no fire after the drain");
}

/// The in-memory provider with an unlock that takes a second (as a round trip to a slow
/// backend would): what a drain must wait for before the process may exit.
#[derive(Debug)]
struct SlowUnlock(MemoryLockProvider);

struct SlowHandle(Box<dyn LockHandle>);

#[async_trait]
impl LockHandle for SlowHandle {
    async fn unlock(&mut self, config: &LockConfig) -> shedlock::Result<()> {
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.0.unlock(config).await
    }

    fn fencing_token(&self) -> Option<u64> {
        self.0.fencing_token()
    }
}

#[async_trait]
impl LockProvider for SlowUnlock {
    async fn try_lock(&self, config: &LockConfig) -> shedlock::Result<Option<Lock>> {
        Ok(self.0.try_lock(config).await?.map(|l| l.map_handle(SlowHandle)))
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
}

/// The in-memory provider with an unlock that fails (the backend went away at the end).
#[derive(Debug)]
struct FailingUnlock(MemoryLockProvider);

struct FailingHandle;

#[async_trait]
impl LockHandle for FailingHandle {
    async fn unlock(&mut self, _: &LockConfig) -> shedlock::Result<()> {
        Err(Error::unavailable("failing-unlock", "the backend went away"))
    }
}

#[async_trait]
impl LockProvider for FailingUnlock {
    async fn try_lock(&self, config: &LockConfig) -> shedlock::Result<Option<Lock>> {
        // The real lock stays held (its handle is dropped, not unlocked): as on a backend that
        // could not be told.
        Ok(self.0.try_lock(config).await?.map(|l| l.map_handle(|_| FailingHandle)))
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
}

#[tokio::test(start_paused = true)]
async fn a_drain_reports_a_release_that_failed_and_is_not_complete() {
    let server = server();
    let executor = LockingExecutor::new(Arc::new(FailingUnlock(MemoryLockProvider::new(&server))));
    let task = spawn_task(&executor, "unreleased", Duration::from_secs(2));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let report = executor.drain(Duration::from_secs(30)).await;
    assert!(task.await.unwrap().unwrap().was_executed());
    assert!(!report.deadline_passed, "the task finished in time: {report:?}");
    assert_eq!(report.waited_for.len(), 1);
    assert!(report.waited_for[0].release_failed, "{report:?}");
    assert!(!report.is_complete(), "a lock left held is not a complete drain");
    assert!(!free(&server, "unreleased").await, "held until lock_at_most_for");
}

#[tokio::test(start_paused = true)]
async fn a_scheduler_drain_past_its_deadline_cancels_the_fire_and_releases_its_lock() {
    let server = server();
    let executor = LockingExecutor::new(Arc::new(SlowUnlock(MemoryLockProvider::new(&server))));
    let scheduler = Scheduler::new(executor.clone());
    let finished = Arc::new(AtomicUsize::new(0));
    let f = finished.clone();
    scheduler
        .schedule(Schedule::fixed_rate(Duration::from_secs(1)), cfg("stuck"), move || {
            let f = f.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                f.fetch_add(1, Ordering::SeqCst);
            }
        })
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let report = scheduler.drain(Duration::from_secs(2)).await;
    assert!(!report.is_complete(), "{report:?}");
    assert_eq!(report.unfinished().collect::<Vec<_>>(), ["stuck"]);
    assert_eq!(finished.load(Ordering::SeqCst), 0, "cancelled, not finished");
    // The drain returned after the cancelled fire's release completed: nothing is held, and
    // the name is free at once (a process exiting now loses nothing), long before its 60 s
    // lease would end.
    assert!(executor.held().is_empty(), "drain returned before the release: {:?}", executor.held());
    assert!(free(&server, "stuck").await, "the cancelled fire's lock is released");
}

#[tokio::test(start_paused = true)]
async fn a_task_in_flight_may_still_take_nested_locks_while_draining() {
    let server = server();
    let executor = executor(&server);
    let inner = executor.clone();
    let draining = Arc::new(Notify::new());
    let began = draining.clone();
    let outer = tokio::spawn({
        let executor = executor.clone();
        async move {
            executor
                .execute(&cfg("outer"), || async move {
                    began.notified().await; // the drain has begun
                    // Finishing its work needs another lock: allowed, the drain waits for it.
                    inner.execute(&cfg("inner"), || async { 7 }).await
                })
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let drain = tokio::spawn({
        let executor = executor.clone();
        async move { executor.drain(Duration::from_secs(30)).await }
    });
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(executor.is_draining());
    draining.notify_one();
    let nested = outer.await.unwrap().unwrap();
    assert!(matches!(nested, TaskResult::Executed(Ok(TaskResult::Executed(7)))), "{nested:?}");
    let report = drain.await.unwrap();
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.waited_for.len(), 1, "only the outer lock was held when it began");
    assert!(free(&server, "outer").await && free(&server, "inner").await);
}

//! Three tokio-cron-schedulers (three "instances", each with its own SQLite pool on one file) run
//! the same locked job; every fire time runs exactly once.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use shedlock::{LockSpec, LockingExecutor};
use shedlock_sqlite::SqliteLockProvider;
use shedlock_tokio_cron_scheduler::{Error, locked_job};
use tokio_cron_scheduler::JobScheduler;

async fn executor(file: &std::path::Path) -> LockingExecutor {
    let pool = shedlock_sqlite::recommended_pool_options()
        .connect_with(shedlock_sqlite::recommended_connect_options(file))
        .await
        .unwrap();
    let provider = SqliteLockProvider::builder(pool).build().unwrap();
    provider.create_table().await.unwrap();
    LockingExecutor::new(Arc::new(provider))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fire_time_runs_exactly_once_across_three_schedulers() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("locks.db");
    // A fire every 2 s. The instances start a fire up to ~0.5 s apart (the scheduler polls every
    // 500 ms), so at-least 1 s covers the spread with 0.5 s to spare, and leaves the lock free
    // ≥ 0.5 s before the next fire time is due anywhere.
    let spec = LockSpec::new("cron-report")
        .lock_at_most_for(Duration::from_secs(30))
        .lock_at_least_for(Duration::from_secs(1));
    // Runs by fire time: the start time's 2-second slot. A run starts at most ~0.5 s (plus load)
    // after its fire time, far from the next slot.
    let runs: Arc<Mutex<BTreeMap<u64, Vec<usize>>>> = Arc::default();
    let mut schedulers = Vec::new();
    for node in 0..3 {
        let executor = executor(&file).await;
        let scheduler = JobScheduler::new().await.unwrap();
        let runs = runs.clone();
        let job = locked_job("*/2 * * * * *", &executor, spec.clone(), move || {
            let runs = runs.clone();
            async move {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
                let slot = now.as_secs() / 2;
                runs.lock().unwrap().entry(slot).or_default().push(node);
            }
        })
        .unwrap();
        scheduler.add(job).await.unwrap();
        schedulers.push(scheduler);
    }
    for s in &schedulers {
        s.start().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(9_500)).await;
    for mut s in schedulers {
        s.shutdown().await.unwrap();
    }
    let runs = runs.lock().unwrap().clone();
    let slots: Vec<u64> = runs.keys().copied().collect();
    assert!(slots.len() >= 3, "at least 3 fire times in 9.5 s: {runs:?}");
    assert!(
        slots.windows(2).all(|w| w[1] == w[0] + 1),
        "no fire time was skipped everywhere: {runs:?}"
    );
    for (slot, nodes) in &runs {
        assert_eq!(nodes.len(), 1, "fire time {} ran on {nodes:?}", slot * 2);
    }
}

#[tokio::test]
async fn a_lock_that_cannot_be_resolved_fails_when_the_job_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let executor = executor(&dir.path().join("locks.db")).await;
    // No lock_at_most_for, and the executor has no default.
    let Err(err) = locked_job("*/2 * * * * *", &executor, "report", || async {}) else {
        panic!("a lock without lock_at_most_for must fail the build");
    };
    assert!(matches!(err, Error::Lock(shedlock::Error::InvalidConfig(_))), "{err:?}");
    let spec = LockSpec::new("r").lock_at_most_for(Duration::from_secs(1));
    let Err(err) = locked_job("not a cron", &executor, spec, || async {}) else {
        panic!("an invalid cron expression must fail the build");
    };
    assert!(matches!(err, Error::Scheduler(_)), "{err:?}");
}

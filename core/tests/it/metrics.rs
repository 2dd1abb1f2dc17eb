//! The executor's metrics (feature `metrics`), read back through `metrics-util`'s debugging
//! recorder: counters for acquired, skipped, errors by kind, lost and extended, histograms for
//! acquire latency and hold time, each labelled by lock and provider.

#![cfg(feature = "metrics")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use metrics_util::{
    CompositeKey,
    debugging::{DebugValue, DebuggingRecorder},
};
use shedlock::{
    Capabilities, Error, Lock, LockConfig, LockProvider, LockingExecutor, extend_active_lock,
    metrics::names,
};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

/// A provider whose backend always times out.
struct TimingOut;

#[async_trait]
impl LockProvider for TimingOut {
    async fn try_lock(&self, _: &LockConfig) -> shedlock::Result<Option<Lock>> {
        Err(Error::Timeout { operation: "try_lock", after: Duration::from_millis(5) })
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
    }
    fn backend_name(&self) -> &'static str {
        "timing-out"
    }
}

type Snapshot = Vec<(CompositeKey, DebugValue)>;

fn counter(snap: &Snapshot, name: &str, labels: &[(&str, &str)]) -> u64 {
    find(snap, name, labels)
        .map(|v| match v {
            DebugValue::Counter(c) => *c,
            other => panic!("{name} is not a counter: {other:?}"),
        })
        .unwrap_or(0)
}

fn histogram_len(snap: &Snapshot, name: &str, labels: &[(&str, &str)]) -> usize {
    find(snap, name, labels)
        .map(|v| match v {
            DebugValue::Histogram(h) => h.len(),
            other => panic!("{name} is not a histogram: {other:?}"),
        })
        .unwrap_or(0)
}

fn find<'a>(snap: &'a Snapshot, name: &str, labels: &[(&str, &str)]) -> Option<&'a DebugValue> {
    snap.iter().find_map(|(key, value)| {
        let key = key.key();
        let matches = key.name() == name
            && labels.iter().all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v));
        matches.then_some(value)
    })
}

#[test]
fn executor_counts_acquired_skipped_errors_lost_and_extended_per_lock_and_provider() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        rt.block_on(async {
            let server = MemoryServer::new();
            let executor = LockingExecutor::new(Arc::new(MemoryLockProvider::new(&server)));
            let hour =
                LockConfig::new("report", Duration::from_secs(3600), Duration::ZERO).unwrap();
            // Acquired, extended once inside the task.
            let _ = executor
                .execute(&hour, || async {
                    extend_active_lock(Duration::from_secs(3600), Duration::ZERO).await.unwrap();
                })
                .await
                .unwrap();
            // Skipped: held by another instance.
            let other = MemoryLockProvider::new(&server);
            let held = other.try_lock(&hour).await.unwrap().unwrap();
            assert!(!executor.execute(&hour, || async {}).await.unwrap().was_executed());
            held.unlock().await.unwrap();
            // Lost: the task outlives lock_at_most_for (tokio time is paused, so it is exact).
            let short = LockConfig::new("short", Duration::from_secs(1), Duration::ZERO).unwrap();
            let _ = executor
                .execute(&short, || tokio::time::sleep(Duration::from_secs(2)))
                .await
                .unwrap();
            // An error, by kind and operation.
            let failing = LockingExecutor::new(Arc::new(TimingOut));
            assert!(failing.execute(&hour, || async {}).await.is_err());
        });
    });

    // One snapshot: taking one drains the recorder.
    let snap: Snapshot =
        snapshotter.snapshot().into_vec().into_iter().map(|(k, _, _, v)| (k, v)).collect();
    let report = [("lock", "report"), ("provider", "memory")];
    assert_eq!(counter(&snap, names::ACQUIRED, &report), 1);
    assert_eq!(counter(&snap, names::EXTENDED, &report), 1);
    assert_eq!(counter(&snap, names::SKIPPED, &report), 1);
    assert_eq!(counter(&snap, names::LOST, &report), 0);
    assert_eq!(counter(&snap, names::LOST, &[("lock", "short"), ("provider", "memory")]), 1);
    assert_eq!(
        counter(
            &snap,
            names::ERRORS,
            &[
                ("lock", "report"),
                ("provider", "timing-out"),
                ("operation", "try_lock"),
                ("kind", "timeout")
            ]
        ),
        1
    );
    // Every attempt is timed, whatever its outcome; every task that ran has a hold time.
    assert_eq!(histogram_len(&snap, names::ACQUIRE_DURATION, &report), 2);
    let failed = [("lock", "report"), ("provider", "timing-out")];
    assert_eq!(histogram_len(&snap, names::ACQUIRE_DURATION, &failed), 1);
    assert_eq!(histogram_len(&snap, names::HOLD_DURATION, &report), 1);
    assert_eq!(histogram_len(&snap, names::HOLD_DURATION, &[("lock", "short")]), 1);
}

#[test]
fn a_wait_counts_each_attempt_that_found_the_lock_held_and_records_the_wait_once() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        rt.block_on(async {
            let server = MemoryServer::new();
            let cfg =
                LockConfig::new("nightly", Duration::from_secs(3600), Duration::ZERO).unwrap();
            let held = MemoryLockProvider::new(&server).try_lock(&cfg).await.unwrap().unwrap();
            let executor = LockingExecutor::new(Arc::new(MemoryLockProvider::new(&server)));
            let wait = shedlock::Wait::at_most(Duration::from_millis(400))
                .backoff(Duration::from_millis(100), Duration::from_millis(100));
            let r = executor.execute_waiting(&cfg, wait, || async {}).await.unwrap();
            assert!(!r.was_executed());
            drop(held);
        });
    });
    let snap: Snapshot =
        snapshotter.snapshot().into_vec().into_iter().map(|(k, _, _, v)| (k, v)).collect();
    let labels = [("lock", "nightly"), ("provider", "memory")];
    // Pauses of 50 to 100 ms over 400 ms: at least 5 attempts, each found the lock held.
    let skipped = counter(&snap, names::SKIPPED, &labels);
    assert!((5..=10).contains(&skipped), "{skipped} attempts");
    assert_eq!(histogram_len(&snap, names::WAIT_DURATION, &labels), 1);
}

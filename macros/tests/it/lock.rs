//! `#[shedlock::lock]` and `shedlock::lock_spec!` against the in-memory reference provider: the
//! wrapped fn runs only under its lock, keeps its body's semantics (`?`, `return`, `self`), and the
//! compile-time durations equal what `shedlock::parse_duration` gives at run time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{sync::Arc, time::Duration};

use shedlock::{LockConfig, LockProvider, LockingExecutor, TaskResult, assert_locked};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

#[shedlock::lock(name = "report", at_most = "10m", at_least = "PT0.5S")]
async fn report(rows: &[u32]) -> Result<u32, std::num::TryFromIntError> {
    assert_locked().expect("the body runs under the lock");
    if rows.is_empty() {
        return Ok(0);
    }
    let total: u64 = rows.iter().map(|r| u64::from(*r)).sum();
    Ok(u32::try_from(total)?)
}

#[shedlock::lock(name = "no-output", at_most = "1m")]
async fn no_output() {}

/// Durations left out come from the executor's defaults.
#[shedlock::lock(name = "defaults")]
async fn with_defaults() -> Duration {
    shedlock::active_lock_name().map(|_| Duration::ZERO).unwrap_or(Duration::MAX)
}

struct Service {
    factor: u32,
}

impl Service {
    #[shedlock::lock(name = "method", at_most = "1m")]
    async fn scaled(&self, x: u32) -> u32 {
        x * self.factor
    }
}

fn executor(server: &MemoryServer) -> LockingExecutor {
    LockingExecutor::builder(Arc::new(MemoryLockProvider::new(server)))
        .default_lock_at_most_for(Duration::from_secs(60))
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_wrapped_fn_runs_under_its_lock_and_keeps_return_and_question_mark() {
    let server = MemoryServer::new();
    let ex = executor(&server);
    assert_eq!(report(&ex, &[1, 2, 3]).await.unwrap(), TaskResult::Executed(Ok(6)));
    // at_least = 0.5 s keeps the lock after the fast run.
    assert_eq!(report(&ex, &[]).await.unwrap(), TaskResult::NotExecuted);
    let err = report(&executor(&MemoryServer::new()), &[u32::MAX, 1]).await.unwrap();
    assert!(matches!(err, TaskResult::Executed(Err(_))), "`?` inside the body: {err:?}");
    assert_eq!(no_output(&ex).await.unwrap(), TaskResult::Executed(()));
    assert_eq!(Service { factor: 3 }.scaled(&ex, 2).await.unwrap(), TaskResult::Executed(6));
}

#[tokio::test]
async fn the_wrapped_fn_does_not_run_while_another_instance_holds_the_lock() {
    let server = MemoryServer::new();
    let other = MemoryLockProvider::new(&server);
    let cfg = LockConfig::new("report", Duration::from_secs(60), Duration::ZERO).unwrap();
    let held = other.try_lock(&cfg).await.unwrap().unwrap();
    assert_eq!(report(&executor(&server), &[1]).await.unwrap(), TaskResult::NotExecuted);
    held.unlock().await.unwrap();
    assert_eq!(report(&executor(&server), &[1]).await.unwrap(), TaskResult::Executed(Ok(1)));
}

#[tokio::test]
async fn missing_durations_come_from_the_executor_and_fail_without_defaults() {
    let server = MemoryServer::new();
    assert_eq!(
        with_defaults(&executor(&server)).await.unwrap(),
        TaskResult::Executed(Duration::ZERO)
    );
    let bare = LockingExecutor::new(Arc::new(MemoryLockProvider::new(&server)));
    assert!(matches!(
        with_defaults(&bare).await,
        Err(shedlock::Error::InvalidConfig(shedlock::ConfigError::MissingAtMost { .. }))
    ));
}

#[test]
fn compile_time_durations_equal_the_runtime_parser() {
    let cases = [
        (shedlock::lock_spec!(name = "a", at_most = "1500"), "1500"),
        (shedlock::lock_spec!(name = "a", at_most = "500ms"), "500ms"),
        (shedlock::lock_spec!(name = "a", at_most = "10s"), "10s"),
        (shedlock::lock_spec!(name = "a", at_most = "5m"), "5m"),
        (shedlock::lock_spec!(name = "a", at_most = "1h"), "1h"),
        (shedlock::lock_spec!(name = "a", at_most = "1d"), "1d"),
        (shedlock::lock_spec!(name = "a", at_most = "P1DT2H"), "P1DT2H"),
        (shedlock::lock_spec!(name = "a", at_most = "pt1m0.001s"), "pt1m0.001s"),
        (shedlock::lock_spec!(name = "a", at_most = "PT0.000000001S"), "PT0.000000001S"),
    ];
    for (spec, text) in cases {
        assert_eq!(spec.get_lock_at_most_for(), Some(shedlock::parse_duration(text).unwrap()));
    }
    let spec = shedlock::lock_spec!(name = "x", at_least = "30s");
    assert_eq!((spec.name(), spec.get_lock_at_most_for()), ("x", None));
    assert_eq!(spec.get_lock_at_least_for(), Some(Duration::from_secs(30)));
}

#[test]
fn bad_declarations_are_compile_errors_pointing_at_the_culprit() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}

//! Executor defaults: locks named by a `LockSpec` or a bare name take the executor's default
//! durations and its name template; a `LockConfig` is used as given; every bad combination is a
//! typed error at build or registration time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{sync::Arc, time::Duration};

use shedlock::{
    ConfigError, Error, LockConfig, LockDefaults, LockProvider, LockSpec, LockingExecutor,
    Schedule, Scheduler,
};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

const TEN_MIN: Duration = Duration::from_secs(600);
const HOUR: Duration = Duration::from_secs(3600);

fn provider(server: &MemoryServer) -> Arc<dyn LockProvider> {
    Arc::new(MemoryLockProvider::new(server))
}

#[tokio::test]
async fn a_bare_name_is_locked_under_the_template_with_the_default_durations() {
    let server = MemoryServer::new();
    let executor = LockingExecutor::builder(provider(&server))
        .default_lock_at_most_for(HOUR)
        .default_lock_at_least_for(TEN_MIN)
        .name_template("billing-{name}@eu")
        .build()
        .unwrap();
    let cfg = executor.resolve("report").unwrap();
    assert_eq!(
        (cfg.name(), cfg.lock_at_most_for(), cfg.lock_at_least_for()),
        ("billing-report@eu", HOUR, TEN_MIN)
    );

    let other = MemoryLockProvider::new(&server);
    let ran = executor
        .execute("report", || async {
            // Inside the task the backend holds the templated name, not the bare one.
            let templated = LockConfig::new("billing-report@eu", HOUR, Duration::ZERO).unwrap();
            let bare = LockConfig::new("report", HOUR, Duration::ZERO).unwrap();
            assert!(other.try_lock(&templated).await.unwrap().is_none(), "templated name held");
            let bare_lock = other.try_lock(&bare).await.unwrap();
            assert!(bare_lock.is_some(), "the bare name must stay free");
            bare_lock.unwrap().unlock().await.unwrap();
        })
        .await
        .unwrap();
    assert!(ran.was_executed());
    // The default lock_at_least_for (10 min) keeps the lock after the fast task.
    let again = LockConfig::new("billing-report@eu", HOUR, Duration::ZERO).unwrap();
    assert!(other.try_lock(&again).await.unwrap().is_none(), "held for the default at-least");
}

#[tokio::test]
async fn a_spec_overrides_the_defaults_it_sets_and_takes_the_rest() {
    let executor = LockingExecutor::builder(provider(&MemoryServer::new()))
        .default_lock_at_most_for_str("1h")
        .default_lock_at_least_for_str("10m")
        .build()
        .unwrap();
    let cfg = executor.resolve(LockSpec::new("a").lock_at_most_for(TEN_MIN * 2)).unwrap();
    assert_eq!((cfg.lock_at_most_for(), cfg.lock_at_least_for()), (TEN_MIN * 2, TEN_MIN));
    let cfg = executor.resolve(LockSpec::new("b").lock_at_least_for(Duration::ZERO)).unwrap();
    assert_eq!((cfg.lock_at_most_for(), cfg.lock_at_least_for()), (HOUR, Duration::ZERO));
}

#[tokio::test]
async fn a_lock_config_is_used_as_given_by_an_executor_with_defaults() {
    let executor = LockingExecutor::builder(provider(&MemoryServer::new()))
        .default_lock_at_most_for(HOUR)
        .default_lock_at_least_for(TEN_MIN)
        .name_prefix("prod:")
        .build()
        .unwrap();
    let given = LockConfig::new("exact", Duration::from_secs(5), Duration::ZERO).unwrap();
    assert_eq!(executor.resolve(&given).unwrap(), given);
}

#[tokio::test]
async fn a_spec_without_at_most_and_no_default_is_a_typed_error_and_the_task_does_not_run() {
    let executor = LockingExecutor::new(provider(&MemoryServer::new()));
    let mut ran = false;
    let err = executor.execute("orphan", || async { ran = true }).await.unwrap_err();
    assert!(
        matches!(&err, Error::InvalidConfig(ConfigError::MissingAtMost { name }) if name == "orphan"),
        "{err:?}"
    );
    assert!(err.to_string().contains("default_lock_at_most_for"), "says how to fix: {err}");
    assert!(!ran);
}

#[tokio::test]
async fn a_spec_whose_at_most_is_below_the_default_at_least_is_rejected() {
    let executor = LockingExecutor::builder(provider(&MemoryServer::new()))
        .default_lock_at_most_for(HOUR)
        .default_lock_at_least_for(TEN_MIN)
        .build()
        .unwrap();
    let err = executor.resolve(LockSpec::new("short").lock_at_most_for(Duration::from_secs(60)));
    assert!(
        matches!(err, Err(Error::InvalidConfig(ConfigError::AtLeastExceedsAtMost { .. }))),
        "{err:?}"
    );
}

#[test]
fn malformed_name_templates_are_rejected_with_the_reason() {
    for template in ["", "billing-", "{name}-{name}", "{env}-{name}", "a}{name}", "{nam}"] {
        let err = LockDefaults::new().name_template(template).unwrap_err();
        assert!(
            matches!(&err, ConfigError::NameTemplate { template: t, .. } if t == template),
            "{template:?}: {err:?}"
        );
    }
    assert!(LockDefaults::new().name_prefix("ok-{").is_err(), "a brace in a prefix");
    assert_eq!(LockDefaults::new().name_prefix("p:").unwrap().lock_name("x"), "p:x");
}

#[test]
fn invalid_defaults_fail_the_executor_build() {
    let p = provider(&MemoryServer::new());
    let cases: Vec<(&str, shedlock::LockingExecutorBuilder)> = vec![
        (
            "bad text",
            LockingExecutor::builder(p.clone()).default_lock_at_most_for_str("10 minutes"),
        ),
        (
            "zero at-most",
            LockingExecutor::builder(p.clone()).default_lock_at_most_for(Duration::ZERO),
        ),
        (
            "at-least above at-most",
            LockingExecutor::builder(p.clone())
                .default_lock_at_most_for(TEN_MIN)
                .default_lock_at_least_for(HOUR),
        ),
        ("bad template", LockingExecutor::builder(p.clone()).name_template("no placeholder")),
    ];
    for (what, builder) in cases {
        assert!(builder.build().is_err(), "{what} must fail the build");
    }
}

#[tokio::test]
async fn a_template_that_makes_a_name_too_long_for_the_provider_fails_at_registration() {
    let server = MemoryServer::new();
    let limited: Arc<dyn LockProvider> =
        Arc::new(MemoryLockProvider::new(&server).with_max_name_len(Some(16)));
    let executor = LockingExecutor::builder(limited)
        .default_lock_at_most_for(HOUR)
        .name_template("a-long-application-prefix-{name}")
        .build()
        .unwrap();
    let scheduler = Scheduler::new(executor);
    let err = scheduler
        .schedule(Schedule::fixed_rate(Duration::from_secs(1)), "job", || async {})
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidName { name, .. } if name == "a-long-application-prefix-job"),
        "{err:?}"
    );
    scheduler.shutdown().await;
}

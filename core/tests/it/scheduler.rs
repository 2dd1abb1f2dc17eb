//! The scheduler under tokio's paused clock: wall time (`TokioClock`) and timers move together,
//! exactly and instantly.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, UNIX_EPOCH},
};

use shedlock::{
    ConfigError, Error, LockConfig, LockProvider, LockingExecutor, Schedule, Scheduler,
    SharedClock, TokioClock,
};
use shedlock_memory::{MemoryLockProvider, MemoryServer};
use tokio::time::Instant;

fn cfg(name: &str, at_least_ms: u64) -> LockConfig {
    LockConfig::new(name, Duration::from_secs(30), Duration::from_millis(at_least_ms)).unwrap()
}

fn scheduler(server: &MemoryServer, clock: &SharedClock) -> Scheduler {
    let provider = MemoryLockProvider::new(server);
    Scheduler::new(LockingExecutor::new(Arc::new(provider))).with_clock(clock.clone())
}

type Log = Arc<Mutex<Vec<(usize, Duration)>>>;

#[tokio::test(start_paused = true)]
async fn every_cron_fire_time_runs_exactly_once_across_nodes() {
    let clock: SharedClock = Arc::new(TokioClock::new());
    let server = MemoryServer::with_clock(clock.clone());
    let log: Log = Arc::default();
    let mut nodes = Vec::new();
    for node in 0..3 {
        let s = scheduler(&server, &clock);
        let (log, clock) = (log.clone(), clock.clone());
        s.schedule(Schedule::cron("* * * * * *").unwrap(), cfg("tick", 900), move || {
            let (log, clock) = (log.clone(), clock.clone());
            async move {
                let wall = clock.now().duration_since(UNIX_EPOCH).unwrap();
                log.lock().unwrap().push((node, wall));
            }
        })
        .unwrap();
        nodes.push(s);
    }
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    for s in nodes {
        s.shutdown().await;
    }
    let log = log.lock().unwrap();
    let mut per_second: BTreeMap<u64, usize> = BTreeMap::new();
    for (_, wall) in log.iter() {
        // tokio's timer has 1 ms resolution: a fire lands within 1 ms after its second.
        assert!(wall.subsec_nanos() < 1_000_000, "fires on the second: {wall:?}");
        *per_second.entry(wall.as_secs()).or_default() += 1;
    }
    assert!(per_second.len() >= 10, "one run per second over 10.5 s: {per_second:?}");
    assert!(per_second.values().all(|&n| n == 1), "no double run: {per_second:?}");
    let secs: Vec<u64> = per_second.keys().copied().collect();
    assert!(secs.windows(2).all(|w| w[1] == w[0] + 1), "no gap: {secs:?}");
}

async fn starts_of(schedule: Schedule, task_ms: u64, run_for_ms: u64) -> Vec<Duration> {
    let clock: SharedClock = Arc::new(TokioClock::new());
    let server = MemoryServer::with_clock(clock.clone());
    let s = scheduler(&server, &clock);
    let t0 = Instant::now();
    let starts: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let seen = starts.clone();
    s.schedule(schedule, cfg("busy", 0), move || {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(t0.elapsed());
            tokio::time::sleep(Duration::from_millis(task_ms)).await;
        }
    })
    .unwrap();
    tokio::time::sleep(Duration::from_millis(run_for_ms)).await;
    s.shutdown().await;
    starts.lock().unwrap().clone()
}

fn gaps(starts: &[Duration]) -> Vec<u128> {
    starts.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect()
}

#[tokio::test(start_paused = true)]
async fn cron_fire_times_missed_while_busy_are_skipped() {
    // Every second, but each run takes 2.5 s: the two fire times passed during a run are
    // skipped, so runs start 3 s apart (never right after the previous one ends).
    let starts = starts_of(Schedule::cron("* * * * * *").unwrap(), 2500, 12_000).await;
    assert!(starts.len() >= 3, "{starts:?}");
    assert!(gaps(&starts).iter().all(|&g| g == 3000), "{starts:?}");
}

#[tokio::test(start_paused = true)]
async fn fixed_rate_skips_missed_ticks() {
    let starts = starts_of(Schedule::fixed_rate(Duration::from_secs(1)), 2500, 10_000).await;
    assert_eq!(starts.first(), Some(&Duration::ZERO), "fires at once");
    assert!(starts.len() >= 3);
    assert!(gaps(&starts).iter().all(|&g| g == 3000), "{starts:?}");
}

#[tokio::test(start_paused = true)]
async fn fixed_rate_keeps_its_period_when_runs_are_short() {
    let starts = starts_of(
        Schedule::fixed_rate(Duration::from_secs(2)).with_initial_delay(Duration::from_millis(500)),
        100,
        9_000,
    )
    .await;
    assert_eq!(starts.first(), Some(&Duration::from_millis(500)));
    assert_eq!(starts.len(), 5, "{starts:?}");
    assert!(gaps(&starts).iter().all(|&g| g == 2000), "{starts:?}");
}

#[tokio::test(start_paused = true)]
async fn fixed_delay_waits_after_each_run() {
    let starts = starts_of(Schedule::fixed_delay(Duration::from_secs(1)), 500, 5_000).await;
    assert_eq!(starts.first(), Some(&Duration::ZERO));
    assert!(starts.len() >= 3);
    assert!(gaps(&starts).iter().all(|&g| g == 1500), "{starts:?}");
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_the_running_fire_and_stops_firing() {
    let clock: SharedClock = Arc::new(TokioClock::new());
    let server = MemoryServer::with_clock(clock.clone());
    let s = scheduler(&server, &clock);
    let finished: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let seen = finished.clone();
    let t0 = Instant::now();
    s.schedule(Schedule::fixed_rate(Duration::from_secs(1)), cfg("graceful", 0), move || {
        let seen = seen.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            seen.lock().unwrap().push(t0.elapsed());
        }
    })
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    s.shutdown().await;
    assert_eq!(*finished.lock().unwrap(), [Duration::from_secs(5)], "the running fire completed");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(finished.lock().unwrap().len(), 1, "nothing fires after shutdown");
    // The lock was released when the fire finished.
    let other = MemoryLockProvider::new(&server);
    assert!(shedlock::LockProvider::try_lock(&other, &cfg("graceful", 0)).await.unwrap().is_some());
}

#[tokio::test(start_paused = true)]
async fn a_panicking_fire_does_not_stop_the_schedule() {
    let clock: SharedClock = Arc::new(TokioClock::new());
    let server = MemoryServer::with_clock(clock.clone());
    let s = scheduler(&server, &clock);
    let count = Arc::new(Mutex::new(0u32));
    let seen = count.clone();
    s.schedule(Schedule::fixed_rate(Duration::from_secs(1)), cfg("flaky", 0), move || {
        let seen = seen.clone();
        async move {
            let n = {
                let mut c = seen.lock().unwrap();
                *c += 1;
                *c
            };
            if n == 1 {
                panic!("first run fails");
            }
        }
    })
    .unwrap();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    s.shutdown().await;
    assert_eq!(*count.lock().unwrap(), 4, "fires at 0, 1, 2, 3 s despite the first panic");
}

#[test]
fn invalid_cron_is_a_typed_error() {
    let e = Schedule::cron("every tuesday").unwrap_err();
    assert_eq!(e.expression, "every tuesday");
    assert!(e.to_string().contains("every tuesday"));
    assert!(Schedule::cron("*/5 * * * * *").is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_lock_name_scheduled_twice_is_refused_naming_both_schedules_unless_allowed() {
    let clock: SharedClock = Arc::new(TokioClock::new());
    let server = MemoryServer::with_clock(clock.clone());
    let every_ten = || Schedule::cron("*/10 * * * * *").unwrap();
    let every_five = || Schedule::fixed_rate(Duration::from_secs(5));

    let s = scheduler(&server, &clock);
    s.schedule(every_ten(), cfg("report", 0), || async {}).unwrap();
    let err = s.schedule(every_five(), cfg("report", 0), || async {}).unwrap_err();
    match &err {
        Error::InvalidConfig(ConfigError::AlreadyScheduled { name, scheduled, requested }) => {
            assert_eq!(name, "report");
            assert_eq!(scheduled, "cron \"*/10 * * * * *\"");
            assert_eq!(requested, "every 5s (fixed rate)");
        }
        other => panic!("expected AlreadyScheduled, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("allow_shared_lock_names"), "{message}");
    // Another name is another lock; the refusal registered nothing.
    s.schedule(every_five(), cfg("cleanup", 0), || async {}).unwrap();
    s.shutdown().await;

    // Asked for explicitly, two tasks share the name; another scheduler never conflicts.
    let shared = scheduler(&server, &clock).allow_shared_lock_names(true);
    shared.schedule(every_ten(), cfg("report", 0), || async {}).unwrap();
    shared.schedule(every_five(), cfg("report", 0), || async {}).unwrap();
    let other = scheduler(&server, &clock);
    other.schedule(every_ten(), cfg("report", 0), || async {}).unwrap();
    shared.shutdown().await;
    other.shutdown().await;
}

/// A provider that fails its first fires with the errors given (in order), then answers as the
/// in-memory provider does.
struct Failing {
    errors: Mutex<Vec<&'static str>>,
    inner: MemoryLockProvider,
}

#[async_trait::async_trait]
impl LockProvider for Failing {
    async fn try_lock(&self, config: &LockConfig) -> shedlock::Result<Option<shedlock::Lock>> {
        let next = {
            let mut errors = self.errors.lock().unwrap();
            (!errors.is_empty()).then(|| errors.remove(0))
        };
        match next {
            Some(message) => Err(Error::Unavailable { backend: "test", source: message.into() }),
            None => self.inner.try_lock(config).await,
        }
    }

    fn capabilities(&self) -> shedlock::Capabilities {
        self.inner.capabilities().with_check(true)
    }

    async fn check(&self) -> shedlock::Result<()> {
        match self.errors.lock().unwrap().first() {
            Some(message) => Err(Error::Unavailable { backend: "test", source: (*message).into() }),
            None => Ok(()),
        }
    }
}

#[tokio::test]
async fn check_at_start_gives_the_providers_error_and_ok_once_it_can_hold_locks() {
    let server = MemoryServer::new();
    let provider = Arc::new(Failing {
        errors: Mutex::new(vec!["connection refused"]),
        inner: MemoryLockProvider::new(&server),
    });
    let s = Scheduler::new(LockingExecutor::new(provider.clone()));
    match s.check().await {
        Err(Error::Unavailable { backend: "test", source }) => {
            assert_eq!(source.to_string(), "connection refused");
        }
        other => panic!("{other:?}"),
    }
    provider.errors.lock().unwrap().clear();
    s.check().await.unwrap();
    // Checking took no lock: the name is free for another instance.
    let other = MemoryLockProvider::new(&server);
    assert!(other.try_lock(&cfg("flaky-backend", 0)).await.unwrap().is_some());
}

#[tokio::test(start_paused = true)]
async fn a_failing_fire_is_reported_once_per_distinct_error_and_the_task_runs_once_it_recovers() {
    let clock: SharedClock = Arc::new(TokioClock::new());
    let server = MemoryServer::with_clock(clock.clone());
    let provider = Failing {
        errors: Mutex::new(vec!["refused", "refused", "refused", "no route", "no route"]),
        inner: MemoryLockProvider::new(&server),
    };
    let reported: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let runs = Arc::new(Mutex::new(0));
    let s = Scheduler::new(LockingExecutor::new(Arc::new(provider)))
        .with_clock(clock.clone())
        .on_error({
            let reported = reported.clone();
            move |lock, error| reported.lock().unwrap().push((lock.to_owned(), error.to_string()))
        });
    let r = runs.clone();
    s.schedule(Schedule::fixed_rate(Duration::from_secs(1)), cfg("flaky-backend", 0), move || {
        let r = r.clone();
        async move { *r.lock().unwrap() += 1 }
    })
    .unwrap();
    // Fires at 0..=7 s: five fail (three alike, then two alike), three run.
    tokio::time::sleep(Duration::from_millis(7_500)).await;
    s.shutdown().await;
    let reported = reported.lock().unwrap().clone();
    assert_eq!(
        reported,
        vec![
            ("flaky-backend".to_owned(), "test unavailable: refused".to_owned()),
            ("flaky-backend".to_owned(), "test unavailable: no route".to_owned()),
        ]
    );
    assert_eq!(*runs.lock().unwrap(), 3, "the fires after the failures ran");
}

/// The in-memory provider, `delay` slower on every `try_lock`.
struct Slow {
    inner: MemoryLockProvider,
    delay: Duration,
}

#[async_trait::async_trait]
impl LockProvider for Slow {
    async fn try_lock(&self, config: &LockConfig) -> shedlock::Result<Option<shedlock::Lock>> {
        tokio::time::sleep(self.delay).await;
        self.inner.try_lock(config).await
    }

    fn capabilities(&self) -> shedlock::Capabilities {
        self.inner.capabilities()
    }
}

#[tokio::test(start_paused = true)]
async fn a_run_that_starts_late_knows_the_fire_time_it_belongs_to() {
    assert_eq!(shedlock::scheduled_fire_time(), None, "outside a scheduled task");
    let clock: SharedClock = Arc::new(TokioClock::new());
    let server = MemoryServer::with_clock(clock.clone());
    let slow = Slow { inner: MemoryLockProvider::new(&server), delay: Duration::from_millis(700) };
    let s = Scheduler::new(LockingExecutor::new(Arc::new(slow))).with_clock(clock.clone());
    let seen: Arc<Mutex<Vec<(Duration, Duration)>>> = Arc::default();
    let (log, c) = (seen.clone(), clock.clone());
    s.schedule(Schedule::cron("*/2 * * * * *").unwrap(), cfg("late", 0), move || {
        let (log, c) = (log.clone(), c.clone());
        async move {
            let due = shedlock::scheduled_fire_time().expect("inside a scheduled task");
            let since = |t: std::time::SystemTime| t.duration_since(UNIX_EPOCH).unwrap();
            log.lock().unwrap().push((since(due), since(c.now())));
        }
    })
    .unwrap();
    tokio::time::sleep(Duration::from_millis(6_500)).await;
    s.shutdown().await;
    let seen = seen.lock().unwrap().clone();
    assert!(seen.len() >= 3, "{seen:?}");
    for (due, started) in &seen {
        assert_eq!(due.subsec_nanos(), 0, "a cron instant: {due:?}");
        assert_eq!(due.as_secs() % 2, 0, "every two seconds: {due:?}");
        // The run started after the 700 ms try_lock, still labelled with its own fire time.
        assert!(*started >= *due + Duration::from_millis(700), "{due:?} started {started:?}");
        assert!(*started < *due + Duration::from_secs(1), "{due:?} started {started:?}");
    }
}

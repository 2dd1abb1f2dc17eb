//! The scheduler's coalesced fires and capacity, under tokio's paused clock: fires due together
//! go to the provider as one batch, and an instance with a capacity claims no more than it can
//! start, leaving the rest of a tick to the other instances.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, UNIX_EPOCH},
};

use async_trait::async_trait;
use shedlock::{
    BatchOptions, BatchOutcome, Capabilities, Lock, LockConfig, LockProvider, LockingExecutor,
    Result, Schedule, Scheduler, SharedClock, TokioClock,
};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

/// The memory provider, counting the requests it is sent: single `try_lock`s and batches (with
/// their sizes).
struct Counting {
    inner: MemoryLockProvider,
    singles: AtomicUsize,
    batches: Mutex<Vec<usize>>,
}

impl Counting {
    fn new(server: &MemoryServer) -> Arc<Self> {
        Arc::new(Self {
            inner: MemoryLockProvider::new(server),
            singles: AtomicUsize::new(0),
            batches: Mutex::default(),
        })
    }
}

#[async_trait]
impl LockProvider for Counting {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        self.singles.fetch_add(1, Ordering::SeqCst);
        self.inner.try_lock(config).await
    }

    async fn try_lock_many(
        &self,
        configs: &[LockConfig],
        options: BatchOptions,
    ) -> Result<BatchOutcome> {
        self.batches.lock().unwrap().push(configs.len());
        self.inner.try_lock_many(configs, options).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

fn cfg(name: &str) -> LockConfig {
    // At-least 900 ms: a job's lock outlives its fire second, so a second instance firing a
    // little later in the same second cannot run it again.
    LockConfig::new(name, Duration::from_secs(30), Duration::from_millis(900)).unwrap()
}

/// (instance, job, fire second) of every run.
type Runs = Arc<Mutex<Vec<(usize, usize, u64)>>>;

/// `instances` schedulers over one server, each with `jobs` jobs due every second that run for
/// `task`; returns the runs, each instance's provider and its peak of tasks running at once.
async fn fleet(
    instances: usize,
    jobs: usize,
    task: Duration,
    make: impl Fn(Scheduler) -> Scheduler,
    run_for: Duration,
) -> (Vec<(usize, usize, u64)>, Vec<Arc<Counting>>, Vec<usize>) {
    let clock: SharedClock = Arc::new(TokioClock::new());
    let server = MemoryServer::with_clock(clock.clone());
    let runs: Runs = Arc::default();
    let mut schedulers = Vec::new();
    let mut providers = Vec::new();
    let mut peaks = Vec::new();
    for instance in 0..instances {
        let provider = Counting::new(&server);
        providers.push(provider.clone());
        let scheduler =
            make(Scheduler::new(LockingExecutor::new(provider)).with_clock(clock.clone()));
        let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        peaks.push(peak.clone());
        for job in 0..jobs {
            let (runs, clock, now, peak) = (runs.clone(), clock.clone(), now.clone(), peak.clone());
            let name = format!("job-{job}");
            scheduler
                .schedule(Schedule::cron("* * * * * *").unwrap(), cfg(&name), move || {
                    let (runs, clock, now, peak) =
                        (runs.clone(), clock.clone(), now.clone(), peak.clone());
                    async move {
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(n, Ordering::SeqCst);
                        let second = clock.now().duration_since(UNIX_EPOCH).unwrap().as_secs();
                        runs.lock().unwrap().push((instance, job, second));
                        tokio::time::sleep(task).await;
                        now.fetch_sub(1, Ordering::SeqCst);
                    }
                })
                .unwrap();
        }
        schedulers.push(scheduler);
    }
    tokio::time::sleep(run_for).await;
    for s in schedulers {
        s.shutdown().await;
    }
    let runs = runs.lock().unwrap().clone();
    (runs, providers, peaks.iter().map(|p| p.load(Ordering::SeqCst)).collect())
}

/// How many runs each (job, second) had.
fn per_fire(runs: &[(usize, usize, u64)]) -> BTreeMap<(usize, u64), usize> {
    let mut m = BTreeMap::new();
    for (_, job, second) in runs {
        *m.entry((*job, *second)).or_default() += 1;
    }
    m
}

#[tokio::test(start_paused = true)]
async fn fires_due_together_ask_for_their_locks_in_one_batch() {
    let (runs, providers, _) =
        fleet(1, 20, Duration::from_millis(10), |s| s, Duration::from_millis(3_500)).await;
    let p = &providers[0];
    let batches = p.batches.lock().unwrap().clone();
    assert_eq!(p.singles.load(Ordering::SeqCst), 0, "no fire asked for its own lock");
    assert!(batches.len() >= 3, "{batches:?}");
    assert!(batches.iter().all(|&n| n == 20), "one batch of all 20 jobs per second: {batches:?}");
    assert_eq!(runs.len(), 20 * batches.len(), "every job ran at every fire");
}

#[tokio::test(start_paused = true)]
async fn without_coalescing_each_fire_asks_for_its_own_lock() {
    let (runs, providers, _) = fleet(
        1,
        5,
        Duration::from_millis(10),
        |s| s.with_coalescing(false),
        Duration::from_millis(2_500),
    )
    .await;
    let p = &providers[0];
    assert!(p.batches.lock().unwrap().is_empty());
    assert_eq!(p.singles.load(Ordering::SeqCst), runs.len());
    assert!(runs.len() >= 10, "{runs:?}");
}

#[tokio::test(start_paused = true)]
async fn with_capacity_every_fire_runs_exactly_once_and_no_instance_runs_more_than_it_can() {
    // 3 instances × capacity 4 = 12 slots for 10 jobs a second, each task 50 ms.
    let (runs, providers, peaks) = fleet(
        3,
        10,
        Duration::from_millis(50),
        |s| s.with_capacity(4),
        Duration::from_millis(5_500),
    )
    .await;
    let fires = per_fire(&runs);
    let seconds: std::collections::BTreeSet<u64> = fires.keys().map(|(_, s)| *s).collect();
    assert!(seconds.len() >= 5, "{seconds:?}");
    for second in &seconds {
        for job in 0..10 {
            assert_eq!(
                fires.get(&(job, *second)),
                Some(&1),
                "job {job} at second {second}: {fires:?}"
            );
        }
    }
    assert!(peaks.iter().all(|&p| p <= 4), "an instance ran more than its capacity: {peaks:?}");
    for p in &providers {
        let batches = p.batches.lock().unwrap().clone();
        assert!(batches.iter().all(|&n| n <= 4), "claimed more than its free slots: {batches:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn beyond_the_fleets_capacity_jobs_are_left_unrun_never_run_twice() {
    // 2 instances × capacity 2 = 4 slots for 10 jobs a second, each task 300 ms.
    let (runs, _, peaks) = fleet(
        2,
        10,
        Duration::from_millis(300),
        |s| s.with_capacity(2),
        Duration::from_millis(4_500),
    )
    .await;
    let fires = per_fire(&runs);
    assert!(fires.values().all(|&n| n == 1), "a fire ran twice: {fires:?}");
    let mut per_second: BTreeMap<u64, usize> = BTreeMap::new();
    for ((_, second), n) in &fires {
        *per_second.entry(*second).or_default() += n;
    }
    assert!(per_second.len() >= 4, "{per_second:?}");
    assert!(
        per_second.values().all(|&n| n == 4),
        "the fleet's 4 slots filled each second: {per_second:?}"
    );
    assert!(peaks.iter().all(|&p| p <= 2), "{peaks:?}");
}

#[tokio::test(start_paused = true)]
async fn with_capacity_the_work_of_a_tick_spreads_over_the_instances() {
    // 8 instances × capacity 4 for 20 jobs: the busiest instance wins at most twice its share.
    let (runs, _, _) = fleet(
        8,
        20,
        Duration::from_millis(50),
        |s| s.with_capacity(4),
        Duration::from_millis(5_500),
    )
    .await;
    let mut wins = [0usize; 8];
    for (instance, _, _) in &runs {
        wins[*instance] += 1;
    }
    let fair = runs.len() as f64 / 8.0;
    let busiest = *wins.iter().max().unwrap() as f64;
    assert!(busiest / fair <= 2.0, "max share {:.2}: {wins:?}", busiest / fair);
}

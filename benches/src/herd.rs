//! B4, the cron-tick herd, by both paths a fleet can take:
//!
//! - **per job**: every instance sends one `try_lock` per due job, each its own task (what a
//!   scheduler without batching does, and ShedLock does);
//! - **batch**: every instance sends one [`LockProvider::try_lock_many`] of all the due jobs
//!   (what a coalescing [`Scheduler`] does), with [`BatchOptions`]'s defaults, and releases its
//!   wins at most [`BatchOptions::concurrency`] at a time.
//!
//! Each (instances, jobs) size is timed by each path on instances of its own (a pool that grew
//! in one path's ticks would be counted in the other's sockets). Where the server is reached
//! over TCP, one more tick per path runs on instances that each connect through a
//! [`FaultProxy`] of their own: the census, untimed, which counts each instance's open
//! connections at their peak during the tick and its requests (client→server turnarounds).
//! Last, the share: instances running a real [`Scheduler`] with a capacity, each job a 50 ms
//! task on one cron schedule, show how evenly a tick's work spreads and that every fire time
//! ran each job exactly once.

use std::{
    collections::HashMap,
    future::Future,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde_json::{Value, json};
use shedlock::{
    BatchOptions, Lock, LockConfig, LockProvider, LockingExecutor, Schedule, Scheduler,
    scheduled_fire_time,
};
use shedlock_conformance::tools::proxy::FaultProxy;
use tokio::task::JoinSet;

use crate::zoo::{AT_MOST, HERD_AT_LEAST, HERD_TICK_BUDGET};

/// A provider instance being built.
pub type Building<'a> = Pin<Box<dyn Future<Output = Arc<dyn LockProvider>> + 'a>>;

/// Builds an instance that reaches the server at the given address (a census proxy's).
pub type MakeVia<'a> = dyn Fn(SocketAddr) -> Building<'a> + 'a;

/// Builds an instance from a server URL.
pub type MakeNode<'a> = dyn Fn(String) -> Building<'a> + 'a;

/// Builds an instance of a path that reaches the server at the given address.
pub type CensusVia<'a> = Box<dyn Fn(Path, SocketAddr) -> Building<'a> + 'a>;

/// How a fleet asks for a tick's locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// One `try_lock` per job, each its own task.
    PerJob,
    /// One `try_lock_many` of every due job per instance.
    Batch,
}

impl Path {
    /// Both, in the order measured.
    pub const ALL: [Path; 2] = [Path::PerJob, Path::Batch];

    /// The row's `path`.
    pub fn label(self) -> &'static str {
        match self {
            Path::PerJob => "per_job",
            Path::Batch => "batch",
        }
    }

    /// Whether `row` was measured by this path (rows without `path` predate the batch path).
    pub fn of(self, row: &Value) -> bool {
        row.get("path").and_then(Value::as_str).unwrap_or("per_job") == self.label()
    }
}

/// Per job of a tick, its winners, each as (when its call began, when it answered), from the
/// tick; and the time from the tick to the last decision.
pub type Tick = (Duration, Vec<Vec<(Duration, Duration)>>);

/// One tick of `path` on `nodes`: every instance asks for every job of `configs` at once.
pub async fn tick(
    path: Path,
    nodes: &[Arc<dyn LockProvider>],
    configs: &Arc<Vec<LockConfig>>,
) -> Result<Tick, String> {
    match path {
        Path::PerJob => per_job_tick(nodes, configs).await,
        Path::Batch => batch_tick(nodes, configs).await,
    }
}

/// The per-job tick: each `try_lock` its own task, a winner unlocking at once.
async fn per_job_tick(
    nodes: &[Arc<dyn LockProvider>],
    configs: &Arc<Vec<LockConfig>>,
) -> Result<Tick, String> {
    let tick = Instant::now();
    let mut tasks = JoinSet::new();
    for node in nodes {
        for (i, config) in configs.iter().enumerate() {
            let (node, config) = (node.clone(), config.clone());
            tasks.spawn(async move {
                let began = tick.elapsed();
                let got = node.try_lock(&config).await.map_err(|e| e.to_string())?;
                let decided = tick.elapsed();
                let won = match got {
                    Some(lock) => {
                        // The job runs (nothing to do) and releases; the record stays until
                        // lock_at_least_for.
                        lock.unlock().await.map_err(|e| e.to_string())?;
                        vec![i]
                    }
                    None => Vec::new(),
                };
                Ok::<_, String>((won, began, decided))
            });
        }
    }
    collect(tasks, configs.len()).await
}

/// The batch tick: each instance one `try_lock_many` of every job, its wins released at most
/// [`BatchOptions::concurrency`] at a time.
async fn batch_tick(
    nodes: &[Arc<dyn LockProvider>],
    configs: &Arc<Vec<LockConfig>>,
) -> Result<Tick, String> {
    let tick = Instant::now();
    let mut tasks = JoinSet::new();
    for node in nodes {
        let (node, configs) = (node.clone(), configs.clone());
        tasks.spawn(async move {
            let options = BatchOptions::new();
            let began = tick.elapsed();
            let answers = node.try_lock_many(&configs, options).await.map_err(|e| e.to_string())?;
            let decided = tick.elapsed();
            let (mut won, mut locks) = (Vec::new(), Vec::new());
            for (i, answer) in answers.into_iter().enumerate() {
                if let Some(lock) = answer.map_err(|e| e.to_string())? {
                    won.push(i);
                    locks.push(lock);
                }
            }
            release(locks, options.concurrency.get()).await?;
            Ok::<_, String>((won, began, decided))
        });
    }
    collect(tasks, configs.len()).await
}

/// Unlocks `locks`, at most `at_once` in flight.
async fn release(locks: Vec<Lock>, at_once: usize) -> Result<(), String> {
    let mut left = locks.into_iter();
    let mut running = JoinSet::new();
    loop {
        while running.len() < at_once {
            let Some(lock) = left.next() else { break };
            running.spawn(async move { lock.unlock().await.map_err(|e| e.to_string()) });
        }
        match running.join_next().await {
            Some(done) => done.map_err(|e| e.to_string())??,
            None => return Ok(()),
        }
    }
}

/// What one task of a tick answers: the jobs it won, when it began and when it answered.
type Decided = Result<(Vec<usize>, Duration, Duration), String>;

/// Joins a tick's tasks.
async fn collect(mut tasks: JoinSet<Decided>, jobs: usize) -> Result<Tick, String> {
    let mut last = Duration::ZERO;
    let mut winners = vec![Vec::new(); jobs];
    let mut error = None;
    while let Some(joined) = tasks.join_next().await {
        match joined.map_err(|e| e.to_string()).and_then(|r| r) {
            Ok((won, began, decided)) => {
                last = last.max(decided);
                for i in won {
                    winners[i].push((began, decided));
                }
            }
            Err(e) => {
                error.get_or_insert(e);
            }
        }
    }
    match error {
        Some(e) => Err(e),
        None => Ok((last, winners)),
    }
}

/// What the census tick counted: the most connections any instance had open at once during
/// the tick, and the requests per instance (mean and most).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Census {
    /// The most connections one instance had open at once during the tick.
    pub connections_peak: u64,
    /// Requests (client→server turnarounds) per instance, the mean.
    pub requests_mean: f64,
    /// Requests per instance, the most.
    pub requests_max: u64,
}

/// Instances that each reach the server through a proxy of their own, built on first use.
pub struct CensusFleet {
    nodes: Vec<(FaultProxy, Arc<dyn LockProvider>)>,
}

impl CensusFleet {
    /// `count` instances, each built by `make` on its own proxy to `upstream`, each having
    /// run one lock cycle (so that lazily connecting clients have connected).
    pub async fn start(
        upstream: SocketAddr,
        make: &MakeVia<'_>,
        count: usize,
    ) -> Result<Self, String> {
        let mut nodes = Vec::with_capacity(count);
        let warm = crate::zoo::cfg(&crate::zoo::unique("b4-census-warm"));
        for _ in 0..count {
            let proxy = FaultProxy::start(upstream).await.map_err(|e| format!("a proxy: {e}"))?;
            let node = make(proxy.addr()).await;
            if let Some(lock) = node.try_lock(&warm).await.map_err(|e| e.to_string())? {
                lock.unlock().await.map_err(|e| e.to_string())?;
            }
            nodes.push((proxy, node));
        }
        Ok(Self { nodes })
    }

    /// One census tick of `path` on the first `n` instances.
    pub async fn count(
        &self,
        path: Path,
        n: usize,
        configs: &Arc<Vec<LockConfig>>,
    ) -> Result<Census, String> {
        let fleet = &self.nodes[..n.min(self.nodes.len())];
        let before: Vec<u64> = fleet
            .iter()
            .map(|(proxy, _)| {
                proxy.reset_peak_open();
                proxy.round_trips()
            })
            .collect();
        let nodes: Vec<Arc<dyn LockProvider>> = fleet.iter().map(|(_, p)| p.clone()).collect();
        tick(path, &nodes, configs).await?;
        let requests: Vec<u64> = fleet
            .iter()
            .zip(&before)
            .map(|((proxy, _), b)| proxy.round_trips().saturating_sub(*b))
            .collect();
        Ok(Census {
            connections_peak: fleet.iter().map(|(p, _)| p.peak_open()).max().unwrap_or(0),
            requests_mean: requests.iter().sum::<u64>() as f64 / requests.len().max(1) as f64,
            requests_max: requests.iter().copied().max().unwrap_or(0),
        })
    }
}

/// Checks one job's winners in a tick: exactly one is the expected answer (`Ok(None)`). Each
/// winner took the lock somewhere between its call's start and its answer; a lock may be
/// taken again once the last taker's record has ended (`lock_at_least_for` after it took it).
/// Two winners that must have taken it less than `lock_at_least_for` apart (less the backend's
/// `granularity`) are two holders at once (`Err`). Two that may have taken it further apart
/// (the tick outlasted `lock_at_least_for`, or calls took that long, so it cannot be told) make
/// the size reported with why instead of its figures (`Ok(Some(why))`).
pub fn winners(
    job: usize,
    winners: &[(Duration, Duration)],
    at_least: Duration,
    granularity: Duration,
) -> Result<Option<String>, String> {
    if winners.len() == 1 {
        return Ok(None);
    }
    if winners.is_empty() {
        return Err(format!("job {job} had no winner"));
    }
    let mut slowest = Duration::ZERO;
    for (i, &(a_began, a_decided)) in winners.iter().enumerate() {
        slowest = slowest.max(a_decided.saturating_sub(a_began));
        for &(b_began, b_decided) in &winners[i + 1..] {
            // The longest the two takes can be apart.
            let widest = b_decided.saturating_sub(a_began).max(a_decided.saturating_sub(b_began));
            if widest + granularity < at_least {
                return Err(format!(
                    "job {job} had {} winners, taken at most {widest:?} apart, inside \
                     lock_at_least_for ({at_least:?})",
                    winners.len()
                ));
            }
        }
    }
    Ok(Some(format!(
        "the tick outlasted lock_at_least_for ({:.0} s; calls took up to {:.1} s): job {job} was \
         taken again, by an instance whose call may have reached the backend after the first \
         winner's record ended, as the lock allows (a fleet this size needs a longer \
         lock_at_least_for)",
        at_least.as_secs_f64(),
        slowest.as_secs_f64()
    )))
}

/// The backend's rate by `path` in the largest B4 size measured so far: (attempts per tick,
/// attempts per second). An attempt is one job asked for by one instance.
pub fn rate(rows: &[Value], path: Path) -> Option<(f64, f64)> {
    let (done, us) = rows
        .iter()
        .filter(|r| path.of(r))
        .filter_map(|r| {
            let n = r.get("instances")?.as_f64()?;
            let j = r.get("jobs")?.as_f64()?;
            Some((n * j, r.get("decide_p50_us")?.as_f64()?))
        })
        .filter(|&(_, us)| us > 0.0)
        .max_by(|a, b| a.0.total_cmp(&b.0))?;
    Some((done, done / (us / 1e6)))
}

/// B4's `lock_at_least_for` for a size of `attempts` per tick by `path`: [`HERD_AT_LEAST`], or
/// 1.5 times the tick the measured rate predicts plus 1 s when that is longer, as a
/// scheduler's fleet must set it (ShedLock's advice: longer than the tick takes), so that an
/// instance deciding late finds the job done.
pub fn at_least(rows: &[Value], path: Path, attempts: usize) -> Duration {
    let predicted = rate(rows, path).map_or(0.0, |(_, per_s)| attempts as f64 / per_s);
    HERD_AT_LEAST.max(Duration::from_secs_f64(predicted * 1.5 + 1.0).min(Duration::from_secs(120)))
}

/// Why B4 skips a size of `attempts` per tick by `path`, if it does: when the backend's rate
/// in the largest size measured so far puts one tick of this size above [`HERD_TICK_BUDGET`]
/// (a slow backend's 128 000 attempts per tick would take the run's whole hour).
pub fn over_budget(rows: &[Value], path: Path, attempts: usize) -> Option<String> {
    let (done, per_s) = rate(rows, path)?;
    let estimate = attempts as f64 / per_s;
    (estimate > HERD_TICK_BUDGET.as_secs_f64()).then(|| {
        format!(
            "about {estimate:.0} s per tick at the {per_s:.0} attempts/s of the largest size \
             measured ({done:.0} per tick), above the {} s budget per tick",
            HERD_TICK_BUDGET.as_secs()
        )
    })
}

/// One run of the share: (instance, job, fire time, when it started).
type Run = (usize, usize, SystemTime, Instant);

/// How long each task of the share runs.
pub const SHARE_TASK: Duration = Duration::from_millis(50);

/// The capacity each instance of the share gets: 1.5 times its fair share of the jobs, rounded
/// up, so the fleet can run every job even with a third of its instances gone.
pub fn share_capacity(instances: usize, jobs: usize) -> usize {
    (jobs * 3).div_ceil(instances.max(1) * 2).max(1)
}

/// The cron step of the share, in whole seconds dividing a minute: the shortest that outlasts
/// `at_least` plus the backend's `granularity` plus a second, so each fire finds the last one's
/// records gone. `None` when that is over 30 s.
pub fn share_period(at_least: Duration, granularity: Duration) -> Option<u64> {
    let need = (at_least + granularity + Duration::from_secs(1)).as_secs_f64();
    [1u64, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30].into_iter().find(|&s| s as f64 >= need)
}

/// The share: each of `nodes` runs a [`Scheduler`] with [`share_capacity`], `jobs` jobs on one
/// cron schedule (a [`SHARE_TASK`] each, `at_least` held), for `ticks` fire times. Answers the
/// row: the capacity, each instance's runs, the most tasks one instance ran at once, and
/// `max_share` (the busiest instance's runs over the fair share); or why it failed: a job that did not run, or ran twice, at a fire time.
#[allow(clippy::too_many_lines)]
pub async fn share(
    nodes: &[Arc<dyn LockProvider>],
    jobs: usize,
    at_least: Duration,
    granularity: Duration,
    ticks: usize,
) -> Result<Value, String> {
    let n = nodes.len();
    let capacity = share_capacity(n, jobs);
    let period = share_period(at_least, granularity)
        .ok_or_else(|| format!("lock_at_least_for {at_least:?} needs a cron step over 30 s"))?;
    let cron = Schedule::cron(&format!("*/{period} * * * * *")).map_err(|e| e.to_string())?;
    let base = crate::zoo::unique(&format!("b4s-{n}x{jobs}"));
    let runs: Arc<Mutex<Vec<Run>>> = Arc::default();
    // Per instance: its tasks running now, and the most at once.
    let running: Arc<Vec<(AtomicUsize, AtomicUsize)>> =
        Arc::new((0..n).map(|_| (AtomicUsize::new(0), AtomicUsize::new(0))).collect());
    let mut schedulers = Vec::with_capacity(n);
    for (i, node) in nodes.iter().enumerate() {
        let scheduler = Scheduler::new(LockingExecutor::new(node.clone())).with_capacity(capacity);
        for k in 0..jobs {
            let config = LockConfig::new(format!("{base}-{k}"), AT_MOST, at_least)
                .map_err(|e| e.to_string())?;
            let (runs, running) = (runs.clone(), running.clone());
            scheduler
                .schedule(cron.clone(), config, move || {
                    let (runs, running) = (runs.clone(), running.clone());
                    async move {
                        let (now, most) = &running[i];
                        most.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                        if let Some(fire) = scheduled_fire_time() {
                            let run = (i, k, fire, Instant::now());
                            runs.lock().unwrap_or_else(PoisonError::into_inner).push(run);
                        }
                        tokio::time::sleep(SHARE_TASK).await;
                        now.fetch_sub(1, Ordering::SeqCst);
                    }
                })
                .map_err(|e| e.to_string())?;
        }
        schedulers.push(scheduler);
    }
    // The fire times measured: the first one at least half a second from now (every schedule
    // is registered), and the next `ticks - 1`.
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let first = (now + Duration::from_millis(500)).as_secs() / period * period + period;
    let fires: Vec<SystemTime> =
        (0..ticks as u64).map(|t| UNIX_EPOCH + Duration::from_secs(first + t * period)).collect();
    // Stop half a second before the next fire: the last measured one's tasks have ended.
    let stop = UNIX_EPOCH + Duration::from_secs(first + ticks as u64 * period)
        - Duration::from_millis(500);
    tokio::time::sleep(stop.duration_since(SystemTime::now()).unwrap_or_default()).await;
    for s in schedulers {
        s.shutdown().await;
    }
    let runs = std::mem::take(&mut *runs.lock().unwrap_or_else(PoisonError::into_inner));
    let mut per_fire: HashMap<(SystemTime, usize), Vec<Instant>> = HashMap::new();
    let mut per_instance = vec![0usize; n];
    for &(i, k, fire, started) in &runs {
        if fires.contains(&fire) {
            per_fire.entry((fire, k)).or_default().push(started);
            per_instance[i] += 1;
        }
    }
    for (t, &fire) in fires.iter().enumerate() {
        for k in 0..jobs {
            let starts = per_fire.get(&(fire, k)).map_or(&[][..], Vec::as_slice);
            match starts.len() {
                1 => {}
                0 => {
                    return Err(format!(
                        "job {k} did not run at fire time {t} though the fleet's capacity \
                         ({} × {capacity}) covers the {jobs} jobs",
                        n
                    ));
                }
                more => {
                    // Runs that started further apart than lock_at_least_for (plus the
                    // backend's granularity) are the lock working as it says: the fleet decided
                    // more slowly than lock_at_least_for. Closer ones were two holders at once.
                    let first = starts.iter().min().copied();
                    let last = starts.iter().max().copied();
                    let apart = first.zip(last).map_or(Duration::ZERO, |(a, b)| b - a);
                    let why = if apart + granularity < at_least {
                        format!("within lock_at_least_for ({at_least:?}): two holders at once")
                    } else {
                        format!(
                            "the last {:.1} s after the first, after lock_at_least_for ({:.1} s) \
                             had ended: the fleet decided more slowly than lock_at_least_for on \
                             this backend",
                            apart.as_secs_f64(),
                            at_least.as_secs_f64()
                        )
                    };
                    return Err(format!("job {k} ran {more} times at fire time {t}, {why}"));
                }
            }
        }
    }
    let fair = (ticks * jobs) as f64 / n as f64;
    let busiest = per_instance.iter().copied().max().unwrap_or(0);
    Ok(json!({
        "instances": n,
        "jobs": jobs,
        "capacity": capacity,
        "ticks": ticks,
        "task_ms": SHARE_TASK.as_millis() as u64,
        "cron_step_s": period,
        "lock_at_least_for_s": (at_least.as_secs_f64() * 10.0).round() / 10.0,
        "runs_per_instance": per_instance,
        "most_running_at_once": running.iter().map(|(_, most)| most.load(Ordering::SeqCst)).max(),
        "max_share": (busiest as f64 / fair * 100.0).round() / 100.0,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_herd_size_is_skipped_only_when_the_measured_rate_puts_its_tick_over_budget() {
        // Nothing measured yet: nothing to estimate from.
        assert_eq!(over_budget(&[], Path::PerJob, 128_000), None);
        // 100 attempts decided in 1 s: 100 try_lock/s.
        let rows = [
            json!({"instances": 1, "jobs": 1, "decide_p50_us": 10_000.0}),
            json!({"instances": 1, "jobs": 100, "decide_p50_us": 1_000_000.0}),
            json!({"instances": 8, "jobs": 1, "skipped": "no"}),
            // The batch path's rate is its own.
            json!({"path": "batch", "instances": 8, "jobs": 1000, "decide_p50_us": 1_000_000.0}),
        ];
        assert_eq!(over_budget(&rows, Path::PerJob, 1_000), None, "10 s is within the budget");
        let why = over_budget(&rows, Path::PerJob, 128_000).expect("1 280 s is over the budget");
        assert!(why.contains("about 1280 s per tick at the 100 attempts/s"), "{why}");
        assert_eq!(over_budget(&rows, Path::Batch, 128_000), None, "16 s at 8 000/s");
    }

    #[test]
    fn a_second_herd_winner_is_a_failure_only_inside_the_first_ones_at_least() {
        let ms = Duration::from_millis;
        let (at_least, granularity) = (Duration::from_secs(3), ms(1));
        assert_eq!(winners(0, &[(ms(0), ms(5))], at_least, granularity), Ok(None));
        assert!(winners(0, &[], at_least, granularity).is_err(), "no winner");
        // Both took it within 2.01 s of each other: two holders at once.
        let both = [(ms(0), ms(5)), (ms(2005), ms(2010))];
        assert!(winners(7, &both, at_least, granularity).is_err());
        // The second began after the first one's record ended: the lock allows it.
        let late = [(ms(3100), ms(3110)), (ms(0), ms(5))];
        let why = winners(7, &late, at_least, granularity).unwrap().unwrap();
        assert!(why.contains("job 7 was taken again"), "{why}");
        // A call that took 6 s may have reached the backend after the first one's record ended:
        // not proof of two holders.
        let slow = [(ms(0), ms(6040)), (ms(8), ms(6100))];
        assert!(winners(0, &slow, at_least, granularity).unwrap().is_some());
    }

    #[test]
    fn the_herd_at_least_outlasts_the_predicted_tick() {
        assert_eq!(at_least(&[], Path::PerJob, 128_000), HERD_AT_LEAST);
        // 1 000 attempts in 1 s measured: 9 000 attempts predict 9 s, so 14.5 s.
        let rows = [json!({"instances": 1, "jobs": 1000, "decide_p50_us": 1_000_000.0})];
        assert_eq!(at_least(&rows, Path::PerJob, 9_000), Duration::from_millis(14_500));
        assert_eq!(at_least(&rows, Path::PerJob, 100), HERD_AT_LEAST);
        assert_eq!(at_least(&rows, Path::Batch, 9_000), HERD_AT_LEAST, "no batch rate yet");
    }

    #[test]
    fn the_share_capacity_is_one_and_a_half_fair_shares_and_its_step_outlasts_the_record() {
        assert_eq!(share_capacity(8, 100), 19);
        assert_eq!(share_capacity(32, 1000), 47);
        assert_eq!(share_capacity(4, 1), 1);
        let s = Duration::from_secs;
        assert_eq!(share_period(s(3), Duration::from_millis(1)), Some(5));
        assert_eq!(share_period(s(3), s(2)), Some(6));
        assert_eq!(share_period(s(40), s(1)), None);
    }

    /// The share on the reference model: four instances with capacity 3 (1.5 × 2) share eight
    /// jobs, each run exactly once per fire time, and none runs more than its capacity at once.
    #[test]
    fn the_share_runs_each_job_once_per_fire_time_and_no_instance_more_than_its_capacity_at_once() {
        let rt = crate::runtime();
        let row = rt.block_on(async {
            let server = shedlock_memory::MemoryServer::new();
            let nodes: Vec<Arc<dyn LockProvider>> = (0..4)
                .map(|_| {
                    Arc::new(shedlock_memory::MemoryLockProvider::new(&server))
                        as Arc<dyn LockProvider>
                })
                .collect();
            share(&nodes, 8, Duration::from_millis(300), Duration::from_millis(1), 1).await
        });
        let row = row.expect("every job ran once");
        let runs: Vec<u64> = serde_json::from_value(row["runs_per_instance"].clone()).unwrap();
        assert_eq!(runs.iter().sum::<u64>(), 8);
        assert_eq!(row["capacity"], 3);
        let most = row["most_running_at_once"].as_u64().unwrap();
        assert!((1..=3).contains(&most), "{row}");
        // The busiest instance ran at least the fair share (2 of 8).
        assert!(row["max_share"].as_f64().unwrap() >= 1.0, "{row}");
    }
}

//! A scheduler that fires tasks on cron, fixed-rate and fixed-delay schedules through a
//! [`LockingExecutor`], so each fire time runs on at most one node.

use std::{
    collections::HashMap,
    fmt,
    future::Future,
    pin::Pin,
    str::FromStr,
    sync::Arc,
    time::{Duration, SystemTime},
};

use chrono::{DateTime, Utc};
use tokio::{
    sync::{Semaphore, mpsc, oneshot, watch},
    task::JoinHandle,
};

mod coalesce;

use coalesce::{Claim, Claimed, Coalescing};

use crate::{
    batch::BatchOptions,
    clock::{SharedClock, system_clock},
    config::{LockConfig, LockRequest},
    error::{ConfigError, Error},
    executor::{CatchUnwind, LockingExecutor, TaskResult},
    held::DrainReport,
};

/// How long [`Scheduler::drain`] waits for the releases of the fires its deadline cancelled.
const CANCELLED_RELEASE_GRACE: Duration = Duration::from_secs(5);

/// How long a due fire waits for the others due with it before their locks are asked for in one
/// batch, unless set ([`Scheduler::with_coalescing_window`]): 5 ms.
pub const DEFAULT_COALESCING_WINDOW: Duration = Duration::from_millis(5);

/// A cron expression could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cron expression {expression:?}: {reason}")]
pub struct ScheduleError {
    /// The expression as given.
    pub expression: String,
    /// The parser's explanation.
    pub reason: String,
}

/// When a task fires.
#[derive(Clone)]
pub enum Schedule {
    /// On a cron expression with a seconds field (`sec min hour day-of-month month day-of-week
    /// [year]`), evaluated in UTC.
    Cron(Box<cron::Schedule>),
    /// Every `period`, measured from start to start; a fire time missed while the previous run is
    /// still going is skipped.
    FixedRate {
        /// The period.
        period: Duration,
        /// Delay before the first fire.
        initial_delay: Duration,
    },
    /// `delay` after the previous run finished.
    FixedDelay {
        /// The pause between runs.
        delay: Duration,
        /// Delay before the first fire.
        initial_delay: Duration,
    },
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Cron(c) => f.debug_tuple("Cron").field(&c.to_string()).finish(),
            Schedule::FixedRate { period, initial_delay } => f
                .debug_struct("FixedRate")
                .field("period", period)
                .field("initial_delay", initial_delay)
                .finish(),
            Schedule::FixedDelay { delay, initial_delay } => f
                .debug_struct("FixedDelay")
                .field("delay", delay)
                .field("initial_delay", initial_delay)
                .finish(),
        }
    }
}

/// The schedule in words, as errors show it: `cron "*/10 * * * * *"`, `every 5s (fixed rate)`,
/// `5s after each run (fixed delay)`.
impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Cron(c) => write!(f, "cron {:?}", c.source()),
            Schedule::FixedRate { period, .. } => write!(f, "every {period:?} (fixed rate)"),
            Schedule::FixedDelay { delay, .. } => {
                write!(f, "{delay:?} after each run (fixed delay)")
            }
        }
    }
}

impl Schedule {
    /// A cron schedule, e.g. `"*/5 * * * * *"` (every five seconds) or `"0 0 3 * * *"` (daily at
    /// 03:00 UTC).
    pub fn cron(expression: &str) -> Result<Self, ScheduleError> {
        cron::Schedule::from_str(expression)
            .map(|s| Schedule::Cron(Box::new(s)))
            .map_err(|e| ScheduleError { expression: expression.to_owned(), reason: e.to_string() })
    }

    /// Fires at once, then every `period`. A zero period is treated as 1 ms.
    pub fn fixed_rate(period: Duration) -> Self {
        Schedule::FixedRate {
            period: period.max(Duration::from_millis(1)),
            initial_delay: Duration::ZERO,
        }
    }

    /// Fires at once, then `delay` after each run finishes.
    pub fn fixed_delay(delay: Duration) -> Self {
        Schedule::FixedDelay { delay, initial_delay: Duration::ZERO }
    }

    /// Sets the delay before the first fire (ignored for cron).
    #[must_use]
    pub fn with_initial_delay(mut self, d: Duration) -> Self {
        match &mut self {
            Schedule::Cron(_) => {}
            Schedule::FixedRate { initial_delay, .. }
            | Schedule::FixedDelay { initial_delay, .. } => *initial_delay = d,
        }
        self
    }
}

tokio::task_local! {
    static FIRE_TIME: SystemTime;
}

/// When the scheduled run now executing was due: inside a task that a [`Scheduler`] fired, the
/// fire time of this run on the scheduler's clock (a cron schedule's own instant; for a fixed
/// rate, the start plus a whole number of periods; for a fixed delay, the instant it fired),
/// however late the run started. `None` outside a scheduled task (and in tasks it spawns).
///
/// A run can start late (a busy runtime, a slow `try_lock`): this is the fire time it belongs
/// to, e.g. to process the data of that interval, or to tell runs of one fire time apart.
pub fn scheduled_fire_time() -> Option<SystemTime> {
    FIRE_TIME.try_with(|t| *t).ok()
}

type BoxTask = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// What a [`Scheduler`] calls when a fire fails: the lock name and the error.
type ErrorHandler = Arc<dyn Fn(&str, &Error) + Send + Sync>;

/// The default [`ErrorHandler`]: an ERROR event through `tracing` where a global subscriber is
/// set, else a line on standard error, so that a failing job is never silent.
fn report_error(lock: &str, error: &Error) {
    if tracing::dispatcher::has_been_set() {
        tracing::error!(lock, %error, "scheduled task cannot run: it is reported again only when the error changes");
    } else {
        eprintln!(
            "shedlock: scheduled task under lock {lock:?} cannot run: {error} (reported again only \
             when the error changes; set a tracing subscriber or Scheduler::on_error to route this)"
        );
    }
}

/// Fires tasks on schedules through a [`LockingExecutor`].
///
/// Each scheduled task runs on its own tokio task, one fire at a time: a fire time that passes
/// while the previous run is still going is skipped, never replayed. [`Scheduler::shutdown`] stops
/// firing and waits for running tasks to finish.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::{sync::Arc, time::Duration};
/// use shedlock::{LockConfig, LockingExecutor, Schedule, Scheduler};
/// use shedlock_memory::{MemoryLockProvider, MemoryServer};
///
/// let executor = LockingExecutor::new(Arc::new(MemoryLockProvider::new(&MemoryServer::new())));
/// let scheduler = Scheduler::new(executor);
/// let cfg = LockConfig::builder("cleanup").lock_at_most_for_str("5m").lock_at_least_for_str("1s").build()?;
/// scheduler.schedule(Schedule::cron("*/10 * * * * *")?, cfg, || async { /* work */ })?;
/// scheduler.shutdown().await;
/// # Ok(()) }
/// ```
pub struct Scheduler {
    executor: LockingExecutor,
    clock: SharedClock,
    shutdown: watch::Sender<bool>,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
    /// Each scheduled lock name and the schedule it was registered with.
    names: std::sync::Mutex<HashMap<String, String>>,
    shared_names: bool,
    on_error: ErrorHandler,
    /// Whether fires due together ask for their locks in one batch.
    coalesce: bool,
    /// How the coalescer batches (window, capacity, connections).
    coalescing: Coalescing,
    /// The coalescer, started with the first scheduled task: its claim channel and its task.
    coalescer: std::sync::Mutex<Option<(mpsc::UnboundedSender<Claim>, JoinHandle<()>)>>,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler").field("clock", &self.clock).finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A scheduler firing through `executor`, on the system clock.
    pub fn new(executor: LockingExecutor) -> Self {
        let (shutdown, _) = watch::channel(false);
        Self {
            executor,
            clock: system_clock(),
            shutdown,
            tasks: std::sync::Mutex::new(Vec::new()),
            names: std::sync::Mutex::new(HashMap::new()),
            shared_names: false,
            on_error: Arc::new(report_error),
            coalesce: true,
            coalescing: Coalescing {
                window: DEFAULT_COALESCING_WINDOW,
                capacity: None,
                options: BatchOptions::new(),
                tasks: Arc::default(),
            },
            coalescer: std::sync::Mutex::new(None),
        }
    }

    /// Whether the fires of this scheduler's tasks that fall due together ask for their locks
    /// in one batch ([`LockProvider::try_lock_many`](crate::LockProvider::try_lock_many): one
    /// request per chunk on a provider with a native batch, at most
    /// [`with_lock_concurrency`](Self::with_lock_concurrency) requests at once on the others)
    /// instead of one `try_lock` each. Default `true`. A fire waits at most the
    /// [coalescing window](Self::with_coalescing_window) for the others due with it.
    #[must_use]
    pub fn with_coalescing(mut self, coalesce: bool) -> Self {
        self.coalesce = coalesce;
        self
    }

    /// How long a due fire waits for the others due with it (default
    /// [`DEFAULT_COALESCING_WINDOW`], 5 ms): the fires of one cron instant wake within
    /// microseconds of each other, so a few milliseconds gather them all. A scheduler with a
    /// single task never waits.
    #[must_use]
    pub fn with_coalescing_window(mut self, window: Duration) -> Self {
        self.coalescing.window = window;
        self
    }

    /// The most tasks of this scheduler that run at once on this instance (default: no limit).
    /// When jobs fall due together, this instance claims at most as many of their locks as it
    /// has free slots, picked at random, and tries more while slots are left; the jobs beyond
    /// its capacity are left for the other instances (the fire is
    /// [not executed](crate::TaskResult::NotExecuted) here). So an instance never claims more
    /// than it can start, the work of a tick spreads over the fleet, and each fire time still
    /// runs exactly once when the fleet's total capacity allows. A capacity of 0 is taken as 1.
    /// Fires are claimed through the coalescer even if [coalescing](Self::with_coalescing) is
    /// off (then without waiting for a window).
    #[must_use]
    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.coalescing.capacity = Some(Arc::new(Semaphore::new(capacity.max(1))));
        self
    }

    /// The most requests for locks in flight at once during a tick (default
    /// [`DEFAULT_BATCH_CONCURRENCY`](crate::batch::DEFAULT_BATCH_CONCURRENCY), 2): a provider
    /// with a connection pool then uses at most this many connections for a tick's locks,
    /// whatever the number of jobs. 0 is taken as 1.
    #[must_use]
    pub fn with_lock_concurrency(mut self, concurrency: usize) -> Self {
        self.coalescing.options = self.coalescing.options.with_concurrency(concurrency);
        self
    }

    /// The claim channel of the coalescer, started at the first call, when fires are claimed
    /// through it; `None` when each fire asks for its own lock.
    fn claims(&self) -> Option<mpsc::UnboundedSender<Claim>> {
        if !self.coalesce && self.coalescing.capacity.is_none() {
            return None;
        }
        let mut slot = self.coalescer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (tx, _) = slot.get_or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let mut coalescing = self.coalescing.clone();
            if !self.coalesce {
                coalescing.window = Duration::ZERO;
            }
            let task = tokio::spawn(coalesce::run(self.executor.clone(), coalescing, rx));
            (tx, task)
        });
        Some(tx.clone())
    }

    /// Stops the coalescer once the runners are gone: it answers what it was asked, then ends
    /// (`abort`: at once).
    async fn stop_coalescer(&self, abort: bool) {
        let taken = self.coalescer.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some((tx, task)) = taken {
            drop(tx);
            if abort {
                task.abort();
            }
            let _ = task.await;
        }
    }

    /// Sets what is called when a fire fails (the lock could not be tried: backend unreachable,
    /// table missing, time limit hit, ...). It is called once per distinct failure of a task:
    /// the same error again on later fires is only a `debug` event, and a fire that gets through
    /// again logs at `info` that the task recovered. The default reports through `tracing` at
    /// ERROR level where a global subscriber is set, else on standard error. Every failure also
    /// counts in the `shedlock_errors_total` metric (feature `metrics`).
    #[must_use]
    pub fn on_error(mut self, handler: impl Fn(&str, &Error) + Send + Sync + 'static) -> Self {
        self.on_error = Arc::new(handler);
        self
    }

    /// Whether two tasks may be scheduled under the same lock name (default `false`: the second
    /// [`schedule`](Self::schedule) fails with [`ConfigError::AlreadyScheduled`]). Tasks sharing a
    /// name exclude each other: one fire skips while the other holds the lock, which is rarely
    /// what was meant, so it has to be asked for.
    #[must_use]
    pub fn allow_shared_lock_names(mut self, allow: bool) -> Self {
        self.shared_names = allow;
        self
    }

    /// Sets the wall clock that cron schedules are evaluated against (default: system). Intervals
    /// and sleeps use tokio's clock.
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Schedules `task` under `lock` (a [`LockConfig`], a [`LockSpec`](crate::LockSpec) or a
    /// bare name, completed by the executor's defaults). Must be called within a tokio runtime.
    /// Each fire calls `task()` through the executor; a fire whose lock is held elsewhere is
    /// skipped; a panicking or failing fire is logged and the schedule goes on.
    ///
    /// The lock is resolved here, once: a lock without `lock_at_most_for` (and no default), a
    /// name template that yields a name the provider cannot hold, is an error now, never at
    /// fire time. So is a lock name that a task of this scheduler already runs under
    /// ([`ConfigError::AlreadyScheduled`], unless [`allow_shared_lock_names`](Self::allow_shared_lock_names)).
    pub fn schedule<F, Fut>(
        &self,
        schedule: Schedule,
        lock: impl LockRequest,
        task: F,
    ) -> crate::Result<()>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let config = self.executor.resolve(lock)?;
        if !self.shared_names {
            let mut names = self.names.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(scheduled) = names.get(config.name()) {
                return Err(ConfigError::AlreadyScheduled {
                    name: config.name().to_owned(),
                    scheduled: scheduled.clone(),
                    requested: schedule.to_string(),
                }
                .into());
            }
            names.insert(config.name().to_owned(), schedule.to_string());
        }
        let task: BoxTask = Arc::new(move || Box::pin(task()));
        self.coalescing.tasks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let runner = Runner {
            claims: self.claims(),
            executor: self.executor.clone(),
            clock: self.clock.clone(),
            config,
            task,
            shutdown: self.shutdown.subscribe(),
            on_error: self.on_error.clone(),
            failing: None,
        };
        let handle = tokio::spawn(runner.run(schedule));
        self.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(handle);
        Ok(())
    }

    /// Asks the provider once whether it can hold locks ([`LockProvider::check`]: backend
    /// reachable, table or bucket in place), so a service fails at start-up with the typed error
    /// instead of reporting it at every fire. Takes no lock.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> shedlock::Result<()> {
    /// # use std::sync::Arc;
    /// # use shedlock::{LockingExecutor, Scheduler};
    /// # let provider = Arc::new(shedlock_memory::MemoryLockProvider::new(&shedlock_memory::MemoryServer::new()));
    /// let scheduler = Scheduler::new(LockingExecutor::new(provider));
    /// scheduler.check().await?; // e.g. Error::Setup naming the missing table and its DDL
    /// # Ok(()) }
    /// ```
    ///
    /// [`LockProvider::check`]: crate::LockProvider::check
    pub async fn check(&self) -> crate::Result<()> {
        self.executor.provider().check().await
    }

    /// The executor the fires run through.
    pub fn executor(&self) -> &LockingExecutor {
        &self.executor
    }

    /// Stops firing and drains the executor ([`LockingExecutor::drain`]): the fires in flight
    /// may finish and release their locks until `deadline`; fires still running then are
    /// cancelled, and their locks released as for any cancelled execution: `drain` waits up to
    /// 5 s more for those releases (a lock whose release does not complete expires after
    /// `lock_at_most_for`). The report says what was waited
    /// for and how long each took; log it, so that an operator sees what a stopping node was
    /// still doing. Another instance takes the next fire times.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::{sync::Arc, time::Duration};
    /// use shedlock::{LockConfig, LockingExecutor, Schedule, Scheduler};
    /// use shedlock_memory::{MemoryLockProvider, MemoryServer};
    ///
    /// let executor = LockingExecutor::new(Arc::new(MemoryLockProvider::new(&MemoryServer::new())));
    /// let scheduler = Scheduler::new(executor);
    /// let cfg = LockConfig::new("digest", Duration::from_secs(60), Duration::ZERO)?;
    /// scheduler.schedule(Schedule::fixed_rate(Duration::from_secs(1)), cfg, || async {
    ///     tokio::time::sleep(Duration::from_millis(200)).await;
    /// })?;
    /// tokio::time::sleep(Duration::from_millis(50)).await; // the first fire is under way
    /// let report = scheduler.drain(Duration::from_secs(5)).await; // e.g. on SIGTERM
    /// assert!(report.is_complete());
    /// for lock in &report.waited_for {
    ///     println!("waited {:?} for {}", lock.released_after, lock.lock.name);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// [`LockingExecutor::drain`]: crate::LockingExecutor::drain
    pub async fn drain(self, deadline: Duration) -> DrainReport {
        self.shutdown.send_replace(true);
        let report = self.executor.drain(deadline).await;
        let tasks = std::mem::take(
            &mut *self.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for t in &tasks {
            if report.deadline_passed {
                t.abort();
            }
        }
        for t in tasks {
            let _ = t.await;
        }
        self.stop_coalescer(report.deadline_passed).await;
        if report.deadline_passed {
            // The cancelled fires' releases run as tokio tasks: wait for them (each is bounded
            // by the provider's time limit), so that a process exiting next does not cut them.
            let all = self.executor.wait_released(CANCELLED_RELEASE_GRACE).await;
            if !all {
                tracing::warn!(
                    "drain: some cancelled fires' locks were not released in time; they expire after lock_at_most_for"
                );
            }
        }
        report
    }

    /// Stops firing and waits until every running fire has finished.
    pub async fn shutdown(self) {
        self.shutdown.send_replace(true);
        let tasks = std::mem::take(
            &mut *self.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for t in tasks {
            let _ = t.await;
        }
        self.stop_coalescer(false).await;
    }
}

struct Runner {
    /// The coalescer's claim channel, when fires are claimed through it.
    claims: Option<mpsc::UnboundedSender<Claim>>,
    executor: LockingExecutor,
    clock: SharedClock,
    config: LockConfig,
    task: BoxTask,
    shutdown: watch::Receiver<bool>,
    on_error: ErrorHandler,
    /// The failure last reported and how many fires in a row have failed since.
    failing: Option<(String, u64)>,
}

impl Runner {
    /// Sleeps `d`, or returns false if shutdown was requested first.
    async fn wait(&mut self, d: Duration) -> bool {
        self.wait_until(later(tokio::time::Instant::now(), d)).await
    }

    /// Sleeps until `deadline`, or returns false if shutdown was requested first.
    async fn wait_until(&mut self, deadline: tokio::time::Instant) -> bool {
        if *self.shutdown.borrow() {
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => !*self.shutdown.borrow(),
            _ = self.shutdown.changed() => false,
        }
    }

    /// One run of the task, due at `due`.
    async fn fire(&mut self, due: SystemTime) {
        if let Some(claims) = self.claims.clone() {
            return self.fire_claimed(&claims, due).await;
        }
        let task = self.task.clone();
        let run = self.executor.execute(&self.config, move || task());
        match FIRE_TIME.scope(due, CatchUnwind::new(run)).await {
            Ok(Ok(TaskResult::Executed(()) | TaskResult::NotExecuted)) => self.recovered(),
            // A draining executor runs nothing more: the scheduler is stopping, not failing.
            Ok(Err(Error::Draining)) => {}
            Ok(Err(error)) => self.failed(&error),
            Err(_) => tracing::error!(lock = self.config.name(), "scheduled task panicked"),
        }
    }

    /// One run of the task, due at `due`, its lock claimed through the coalescer.
    async fn fire_claimed(&mut self, claims: &mpsc::UnboundedSender<Claim>, due: SystemTime) {
        let (reply, answer) = oneshot::channel();
        if claims.send(Claim { config: self.config.clone(), reply }).is_err() {
            return; // the scheduler is stopping
        }
        let Ok(claimed) = answer.await else { return };
        let (lock, slot) = match claimed {
            Claimed::Won(lock, slot) => (lock, slot),
            Claimed::NotWon | Claimed::LeftForOthers => {
                self.executor.not_won(&self.config);
                return self.recovered();
            }
            Claimed::Failed(Error::Draining) => return,
            Claimed::Failed(error) => return self.failed(&error),
        };
        let task = self.task.clone();
        let run = self.executor.run_won(&self.config, lock, move || task());
        let outcome = FIRE_TIME.scope(due, CatchUnwind::new(run)).await;
        // The capacity slot is given back once the task ran and its lock was released.
        drop(slot);
        match outcome {
            Ok(Ok(TaskResult::Executed(()) | TaskResult::NotExecuted)) => self.recovered(),
            Ok(Err(Error::Draining)) => {}
            Ok(Err(error)) => self.failed(&error),
            Err(_) => tracing::error!(lock = self.config.name(), "scheduled task panicked"),
        }
    }

    /// Reports `error` unless it is the one reported last.
    fn failed(&mut self, error: &Error) {
        let lock = self.config.name();
        let message = error.to_string();
        match &mut self.failing {
            Some((last, count)) if *last == message => {
                *count += 1;
                tracing::debug!(lock, %error, fires = *count, "scheduled task still cannot run");
            }
            _ => {
                (self.on_error)(lock, error);
                self.failing = Some((message, 1));
            }
        }
    }

    fn recovered(&mut self) {
        if let Some((_, fires)) = self.failing.take() {
            tracing::info!(
                lock = self.config.name(),
                fires,
                "scheduled task runs again after failed fires"
            );
        }
    }

    async fn run(mut self, schedule: Schedule) {
        match schedule {
            Schedule::Cron(cron) => {
                let mut last_fire: Option<SystemTime> = None;
                loop {
                    let now = self.clock.now();
                    let from = match last_fire {
                        Some(last) if last > now => last,
                        _ => now,
                    };
                    let Some(next) = cron.after(&DateTime::<Utc>::from(from)).next() else {
                        return;
                    };
                    let next = SystemTime::from(next);
                    let wait = next.duration_since(now).unwrap_or(Duration::ZERO);
                    if !self.wait(wait).await {
                        return;
                    }
                    last_fire = Some(next);
                    self.fire(next).await;
                }
            }
            Schedule::FixedRate { period, initial_delay } => {
                // Fire times are start + k * period. After a run, the next fire is the first one
                // strictly in the future: fire times that passed during the run are skipped.
                let start = later(tokio::time::Instant::now(), initial_delay);
                let wall_start = self.clock.now().checked_add(initial_delay);
                let mut next = start;
                loop {
                    if !self.wait_until(next).await {
                        return;
                    }
                    let due = wall_start
                        .and_then(|w| w.checked_add(next.saturating_duration_since(start)))
                        .unwrap_or_else(|| self.clock.now());
                    self.fire(due).await;
                    let elapsed = tokio::time::Instant::now().saturating_duration_since(start);
                    let periods = elapsed.as_nanos() / period.as_nanos().max(1) + 1;
                    let offset = u32::try_from(periods)
                        .ok()
                        .and_then(|k| period.checked_mul(k))
                        .unwrap_or(Duration::from_secs(u64::from(u32::MAX)));
                    next = later(start, offset);
                }
            }
            Schedule::FixedDelay { delay, initial_delay } => {
                if !self.wait(initial_delay).await {
                    return;
                }
                loop {
                    let due = self.clock.now();
                    self.fire(due).await;
                    if !self.wait(delay).await {
                        return;
                    }
                }
            }
        }
    }
}

/// `t + d`, capped at about 30 years ahead instead of panicking on overflow.
fn later(t: tokio::time::Instant, d: Duration) -> tokio::time::Instant {
    const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);
    t.checked_add(d.min(FAR)).unwrap_or(t)
}

//! The locking executor: run a task only if its lock is won, always release it.

use std::{
    any::Any,
    fmt,
    future::Future,
    panic::{AssertUnwindSafe, catch_unwind, resume_unwind},
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use tracing::Instrument;

use crate::{
    config::{LockConfig, LockDefaults, LockRequest},
    duration::parse_duration,
    error::{ConfigError, Error, Result},
    held::{DrainReport, HeldLock, Registration, Registry},
    lease::LostSignal,
    metrics,
    provider::{Lock, LockProvider},
};

/// What [`LockingExecutor::execute`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum TaskResult<T> {
    /// The lock was won and the task ran; its output.
    Executed(T),
    /// The lock is held elsewhere; the task did not run.
    NotExecuted,
}

impl<T> TaskResult<T> {
    /// Whether the task ran.
    pub fn was_executed(&self) -> bool {
        matches!(self, TaskResult::Executed(_))
    }

    /// The task's output, if it ran.
    pub fn into_option(self) -> Option<T> {
        match self {
            TaskResult::Executed(v) => Some(v),
            TaskResult::NotExecuted => None,
        }
    }
}

/// An event in the life of one execution, reported to [`ExecutionListener`]s.
#[derive(Debug)]
#[non_exhaustive]
pub enum ExecutionEvent<'a> {
    /// About to try the lock.
    Attempt {
        /// The lock name.
        name: &'a str,
    },
    /// The lock was won.
    Acquired {
        /// The lock name.
        name: &'a str,
        /// The acquisition's fencing token, if the provider has them.
        fencing_token: Option<u64>,
    },
    /// The lock is held elsewhere; the task is skipped.
    NotAcquired {
        /// The lock name.
        name: &'a str,
    },
    /// The lock is held elsewhere and [`LockingExecutor::execute_waiting`] tries again after
    /// `retry_in`.
    Waiting {
        /// The lock name.
        name: &'a str,
        /// How many attempts found it held so far.
        attempts: u32,
        /// The pause before the next attempt.
        retry_in: Duration,
    },
    /// The task started.
    Started {
        /// The lock name.
        name: &'a str,
    },
    /// The task finished (returned or panicked) and the lock was released.
    Finished {
        /// The lock name.
        name: &'a str,
        /// How long the task ran.
        duration: Duration,
        /// Whether it panicked.
        panicked: bool,
    },
    /// The lock was lost while the task ran: its lease ended without a successful extension, or
    /// an extension found it taken. Another instance may have run the task meanwhile.
    Lost {
        /// The lock name.
        name: &'a str,
    },
    /// Trying the lock or releasing it failed.
    Failed {
        /// The lock name.
        name: &'a str,
        /// The error.
        error: &'a Error,
    },
}

/// Receives [`ExecutionEvent`]s. Implemented for every `Fn(&ExecutionEvent<'_>)`.
pub trait ExecutionListener: Send + Sync + 'static {
    /// Called synchronously for each event; keep it quick.
    fn on_event(&self, event: &ExecutionEvent<'_>);
}

impl<F> ExecutionListener for F
where
    F: Fn(&ExecutionEvent<'_>) + Send + Sync + 'static,
{
    fn on_event(&self, event: &ExecutionEvent<'_>) {
        self(event)
    }
}

tokio::task_local! {
    static ACTIVE: Arc<ActiveLock>;
}

/// The locks held by the current task, innermost first.
struct ActiveLock {
    name: Arc<str>,
    provider: &'static str,
    parent: Option<Arc<ActiveLock>>,
    lock: tokio::sync::Mutex<Option<Lock>>,
    lost: LostSignal,
    /// The execution's entry in the executor's registry: dropped once the release completed.
    registration: std::sync::Mutex<Option<Registration>>,
}

impl ActiveLock {
    fn take_registration(&self) -> Option<Registration> {
        self.registration.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }

    fn holds(&self, name: &str) -> bool {
        let mut cur = Some(self);
        while let Some(a) = cur {
            if &*a.name == name {
                return true;
            }
            cur = a.parent.as_deref();
        }
        false
    }
}

/// Runs tasks under locks from one provider.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> shedlock::Result<()> {
/// use std::{sync::Arc, time::Duration};
/// use shedlock::{LockConfig, LockingExecutor, TaskResult};
/// use shedlock_memory::{MemoryLockProvider, MemoryServer};
///
/// let executor = LockingExecutor::new(Arc::new(MemoryLockProvider::new(&MemoryServer::new())));
/// let cfg = LockConfig::new("nightly-report", Duration::from_secs(60), Duration::ZERO)?;
/// let outcome = executor.execute(&cfg, || async { 42 }).await?;
/// assert_eq!(outcome, TaskResult::Executed(42));
/// # Ok(()) }
/// ```
///
/// With application-wide defaults, a lock is just a name (or a [`LockSpec`](crate::LockSpec)):
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::{sync::Arc, time::Duration};
/// use shedlock::{LockingExecutor, TaskResult};
/// use shedlock_memory::{MemoryLockProvider, MemoryServer};
///
/// let executor = LockingExecutor::builder(Arc::new(MemoryLockProvider::new(&MemoryServer::new())))
///     .default_lock_at_most_for_str("10m")
///     .default_lock_at_least_for(Duration::from_secs(1))
///     .name_template("billing-{name}")
///     .build()?;
/// assert_eq!(executor.resolve("report")?.name(), "billing-report");
/// assert!(executor.execute("report", || async {}).await?.was_executed());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockingExecutor {
    provider: Arc<dyn LockProvider>,
    listeners: Vec<Arc<dyn ExecutionListener>>,
    defaults: Arc<LockDefaults>,
    max_name_len: Option<usize>,
    backend: &'static str,
    /// The executions in flight, shared by the clones.
    registry: Arc<Registry>,
}

impl fmt::Debug for LockingExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockingExecutor")
            .field("provider", &self.backend)
            .field("defaults", &self.defaults)
            .field("listeners", &self.listeners.len())
            .finish_non_exhaustive()
    }
}

/// Builder for a [`LockingExecutor`] with application-wide defaults (see
/// [`LockingExecutor::builder`]). Errors are reported by [`build`](Self::build).
#[must_use]
pub struct LockingExecutorBuilder {
    provider: Arc<dyn LockProvider>,
    listeners: Vec<Arc<dyn ExecutionListener>>,
    defaults: LockDefaults,
    error: Option<ConfigError>,
}

impl fmt::Debug for LockingExecutorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockingExecutorBuilder")
            .field("defaults", &self.defaults)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl LockingExecutorBuilder {
    /// The `lock_at_most_for` of locks that do not set one (a [`LockSpec`](crate::LockSpec) or a
    /// bare name). A [`LockConfig`] always keeps its own.
    pub fn default_lock_at_most_for(mut self, d: Duration) -> Self {
        self.defaults = self.defaults.lock_at_most_for(d);
        self
    }

    /// The `lock_at_least_for` of locks that do not set one (zero if never set).
    pub fn default_lock_at_least_for(mut self, d: Duration) -> Self {
        self.defaults = self.defaults.lock_at_least_for(d);
        self
    }

    /// [`default_lock_at_most_for`](Self::default_lock_at_most_for) from text such as `10m`.
    pub fn default_lock_at_most_for_str(mut self, s: &str) -> Self {
        match parse_duration(s) {
            Ok(d) => self.defaults = self.defaults.lock_at_most_for(d),
            Err(source) => self.fail("default_lock_at_most_for", source),
        }
        self
    }

    /// [`default_lock_at_least_for`](Self::default_lock_at_least_for) from text such as `30s`.
    pub fn default_lock_at_least_for_str(mut self, s: &str) -> Self {
        match parse_duration(s) {
            Ok(d) => self.defaults = self.defaults.lock_at_least_for(d),
            Err(source) => self.fail("default_lock_at_least_for", source),
        }
        self
    }

    fn fail(&mut self, field: &'static str, source: crate::DurationError) {
        if self.error.is_none() {
            self.error = Some(ConfigError::Duration { name: "<default>".into(), field, source });
        }
    }

    /// A name template with one `{name}` placeholder, e.g. `"billing-{name}"` or
    /// `"{name}@staging"`: every [`LockSpec`](crate::LockSpec) or bare name is locked under the
    /// name it produces (a [`LockConfig`] keeps its name).
    pub fn name_template(mut self, template: &str) -> Self {
        match self.defaults.clone().name_template(template) {
            Ok(d) => self.defaults = d,
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self
    }

    /// A name prefix: the template `"<prefix>{name}"`.
    pub fn name_prefix(mut self, prefix: &str) -> Self {
        match self.defaults.clone().name_prefix(prefix) {
            Ok(d) => self.defaults = d,
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self
    }

    /// Replaces all defaults at once.
    pub fn defaults(mut self, defaults: LockDefaults) -> Self {
        self.defaults = defaults;
        self
    }

    /// Adds a listener for execution events.
    pub fn listener(mut self, listener: impl ExecutionListener) -> Self {
        self.listeners.push(Arc::new(listener));
        self
    }

    /// Checks the defaults and builds the executor.
    pub fn build(self) -> std::result::Result<LockingExecutor, ConfigError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        self.defaults.validate()?;
        let caps = self.provider.capabilities();
        Ok(LockingExecutor {
            backend: self.provider.backend_name(),
            provider: self.provider,
            listeners: self.listeners,
            defaults: Arc::new(self.defaults),
            max_name_len: caps.max_name_len,
            registry: Arc::default(),
        })
    }
}

impl LockingExecutor {
    /// An executor taking locks from `provider`, without defaults: every lock must be a complete
    /// [`LockConfig`] or a [`LockSpec`](crate::LockSpec) with `lock_at_most_for`.
    pub fn new(provider: Arc<dyn LockProvider>) -> Self {
        let caps = provider.capabilities();
        Self {
            backend: provider.backend_name(),
            provider,
            listeners: Vec::new(),
            defaults: Arc::new(LockDefaults::new()),
            max_name_len: caps.max_name_len,
            registry: Arc::default(),
        }
    }

    /// A builder for an executor with application-wide defaults: durations for locks that do
    /// not set them, and a name template (the habits of ShedLock's `@EnableSchedulerLock`).
    pub fn builder(provider: Arc<dyn LockProvider>) -> LockingExecutorBuilder {
        LockingExecutorBuilder {
            provider,
            listeners: Vec::new(),
            defaults: LockDefaults::new(),
            error: None,
        }
    }

    /// Adds a listener for execution events.
    #[must_use]
    pub fn with_listener(mut self, listener: impl ExecutionListener) -> Self {
        self.listeners.push(Arc::new(listener));
        self
    }

    /// The provider.
    pub fn provider(&self) -> &Arc<dyn LockProvider> {
        &self.provider
    }

    /// The executor's defaults.
    pub fn defaults(&self) -> &LockDefaults {
        &self.defaults
    }

    /// The locks this process holds right now through this executor and its clones (tasks in
    /// flight, nested ones included, until their release has completed), in name order: name,
    /// since when, until when this process may rely on it, fencing token. Never waits.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> shedlock::Result<()> {
    /// use std::{sync::Arc, time::Duration};
    /// use shedlock::{LockConfig, LockingExecutor};
    /// use shedlock_memory::{MemoryLockProvider, MemoryServer};
    ///
    /// let executor = LockingExecutor::new(Arc::new(MemoryLockProvider::new(&MemoryServer::new())));
    /// let config = LockConfig::new("report", Duration::from_secs(60), Duration::ZERO)?;
    /// let inside = executor.clone();
    /// executor
    ///     .execute(&config, || async move {
    ///         let held = inside.held();
    ///         assert_eq!(held[0].name, "report");
    ///     })
    ///     .await?;
    /// assert!(executor.held().is_empty());
    /// # Ok(()) }
    /// ```
    pub fn held(&self) -> Vec<HeldLock> {
        let mut held: Vec<HeldLock> = self.registry.snapshot().into_values().collect();
        held.sort_by(|a, b| a.name.cmp(&b.name));
        held
    }

    /// Drains this executor (and its clones): from now on it takes no new lock
    /// ([`execute`](Self::execute) and [`execute_waiting`](Self::execute_waiting) fail with
    /// [`Error::Draining`]; a waiter notices at its next attempt; a lock won while the drain
    /// began is released unused), except the nested locks a task in flight takes to finish
    /// its work, and it waits until the tasks in flight have finished and released their
    /// locks, or `deadline` has passed. Tasks still running then are left running (a [`Scheduler`](crate::Scheduler)'s
    /// drain cancels them). The report lists each lock waited for and when it was released.
    /// There is no way back: a drained executor stays drained.
    pub async fn drain(&self, deadline: Duration) -> DrainReport {
        let report = self.registry.drain(deadline).await;
        tracing::info!(
            waited_for = report.waited_for.len(),
            took = ?report.took,
            complete = report.is_complete(),
            "executor drained"
        );
        report
    }

    /// Waits up to `grace` until every execution's release has completed (after a drain's
    /// deadline cancelled some). Whether all have.
    pub(crate) async fn wait_released(&self, grace: Duration) -> bool {
        self.registry.wait_empty(tokio::time::Instant::now() + grace).await
    }

    /// Whether [`drain`](Self::drain) was called on this executor or a clone.
    pub fn is_draining(&self) -> bool {
        self.registry.is_draining()
    }

    /// The [`LockConfig`] that `lock` stands for on this executor: its name through the name
    /// template and its missing durations from the defaults, checked against the provider's
    /// longest name. Registration code (e.g. [`Scheduler::schedule`](crate::Scheduler::schedule))
    /// calls this up front so that a bad name is an error there, not at fire time.
    pub fn resolve(&self, lock: impl LockRequest) -> Result<LockConfig> {
        let config = lock.resolve_with(&self.defaults)?;
        if let Some(max) = self.max_name_len.filter(|max| config.name().len() > *max) {
            return Err(Error::InvalidName {
                backend: self.backend,
                name: config.name().to_owned(),
                reason: format!(
                    "{} bytes long; this backend holds at most {max} bytes",
                    config.name().len()
                ),
            });
        }
        Ok(config)
    }

    fn emit(&self, event: ExecutionEvent<'_>) {
        for l in &self.listeners {
            l.on_event(&event);
        }
    }

    /// Runs `task` if the lock of `config` is won, and releases the lock afterwards.
    ///
    /// - Lock held elsewhere: `Ok(TaskResult::NotExecuted)`; the task is not run.
    /// - The provider fails: `Err(_)`; the task is not run.
    /// - The lock is released when the task returns (whatever it returns), when it panics (the
    ///   lock is released first, then the panic resumes) and when the future returned by
    ///   `execute` is dropped (the release is spawned on the current tokio runtime).
    /// - Inside the task, `execute` with a name this task already holds runs the inner task
    ///   at once without locking again; [`assert_locked`] succeeds and [`extend_active_lock`]
    ///   extends the innermost lock.
    ///
    /// A failed release is reported to listeners and logged; the task's output is still
    /// returned, and the lock expires after `lock_at_most_for`.
    ///
    /// `lock` is a [`LockConfig`], a [`LockSpec`](crate::LockSpec) or a bare name (see
    /// [`resolve`](Self::resolve)); one that cannot be resolved is an error and the task does
    /// not run.
    pub async fn execute<F, Fut, T>(&self, lock: impl LockRequest, task: F) -> Result<TaskResult<T>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        let config = &self.resolve(lock)?;
        let name = config.name();
        let parent = ACTIVE.try_with(Arc::clone).ok();
        if parent.as_ref().is_some_and(|p| p.holds(name)) {
            tracing::debug!(lock = name, "lock already held by this task, running without locking");
            return Ok(TaskResult::Executed(task().await));
        }
        let span = tracing::info_span!("shedlock.execute", lock = name);
        self.run_locked(config, parent, task).instrument(span).await
    }

    async fn run_locked<F, Fut, T>(
        &self,
        config: &LockConfig,
        parent: Option<Arc<ActiveLock>>,
        task: F,
    ) -> Result<TaskResult<T>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        match self.try_acquire(config, parent.is_some()).await? {
            Some(lock) => self.run_holding(config, parent, lock, task).await,
            None => {
                tracing::debug!(lock = config.name(), "lock held elsewhere, task not executed");
                self.emit(ExecutionEvent::NotAcquired { name: config.name() });
                Ok(TaskResult::NotExecuted)
            }
        }
    }

    /// Like [`execute`](Self::execute), but a lock held elsewhere is tried again, with jittered
    /// exponential backoff, until `wait`'s deadline: the task runs as soon as an attempt wins, or
    /// not at all (`Ok(TaskResult::NotExecuted)`) if none has by then. This is polling, not a
    /// queue: waiters are not served in order, and each attempt is one `try_lock` on the
    /// backend. An error from the provider ends the wait at once and is returned.
    ///
    /// Cancel-safe: dropped while it waits, it holds nothing; dropped while its task runs, the
    /// lock is released as by [`execute`](Self::execute). Every attempt counts in the metrics as
    /// with `execute` (`shedlock_skipped_total` for each one that found the lock held), and the
    /// whole wait in `shedlock_wait_duration_seconds`; listeners see
    /// [`ExecutionEvent::Waiting`] before each pause.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> shedlock::Result<()> {
    /// use std::{sync::Arc, time::Duration};
    /// use shedlock::{LockConfig, LockingExecutor, TaskResult, Wait};
    /// use shedlock_memory::{MemoryLockProvider, MemoryServer};
    ///
    /// let executor = LockingExecutor::new(Arc::new(MemoryLockProvider::new(&MemoryServer::new())));
    /// let config = LockConfig::new("migration", Duration::from_secs(60), Duration::ZERO)?;
    /// let wait = Wait::at_most(Duration::from_secs(30));
    /// match executor.execute_waiting(&config, wait, || async { /* migrate */ }).await? {
    ///     TaskResult::Executed(()) => println!("migrated here"),
    ///     TaskResult::NotExecuted => println!("still held elsewhere after 30 s"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn execute_waiting<F, Fut, T>(
        &self,
        lock: impl LockRequest,
        wait: Wait,
        task: F,
    ) -> Result<TaskResult<T>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        let config = &self.resolve(lock)?;
        let name = config.name();
        let parent = ACTIVE.try_with(Arc::clone).ok();
        if parent.as_ref().is_some_and(|p| p.holds(name)) {
            tracing::debug!(lock = name, "lock already held by this task, running without locking");
            return Ok(TaskResult::Executed(task().await));
        }
        let span = tracing::info_span!("shedlock.execute", lock = name, wait = ?wait.at_most);
        async {
            let started = tokio::time::Instant::now();
            let deadline = started.checked_add(wait.at_most);
            let mut backoff = Backoff::new(wait);
            let mut attempts = 0u32;
            loop {
                match self.try_acquire(config, parent.is_some()).await {
                    Ok(Some(lock)) => {
                        metrics::waited(name, self.backend, started.elapsed());
                        return self.run_holding(config, parent, lock, task).await;
                    }
                    Err(error) => {
                        metrics::waited(name, self.backend, started.elapsed());
                        return Err(error);
                    }
                    Ok(None) => {}
                }
                attempts = attempts.saturating_add(1);
                // The last attempt is made at the deadline itself; a deadline too far to
                // represent is no deadline.
                let left =
                    deadline.map(|d| d.saturating_duration_since(tokio::time::Instant::now()));
                if left == Some(Duration::ZERO) {
                    metrics::waited(name, self.backend, started.elapsed());
                    tracing::debug!(
                        lock = name,
                        attempts,
                        "lock still held elsewhere at the deadline"
                    );
                    self.emit(ExecutionEvent::NotAcquired { name });
                    return Ok(TaskResult::NotExecuted);
                }
                let next = backoff.next();
                let pause = left.map_or(next, |left| next.min(left));
                self.emit(ExecutionEvent::Waiting { name, attempts, retry_in: pause });
                tokio::time::sleep(pause).await;
            }
        }
        .instrument(span)
        .await
    }

    /// One attempt at the lock of `config`, with its event, metrics and (on error) log.
    /// One attempt. Refused while draining, unless `nested` (a task in flight takes another
    /// lock to finish its work).
    async fn try_acquire(&self, config: &LockConfig, nested: bool) -> Result<Option<Lock>> {
        if !nested && self.registry.is_draining() {
            return Err(Error::Draining);
        }
        let name = config.name();
        let backend = self.backend;
        self.emit(ExecutionEvent::Attempt { name });
        let attempt = tokio::time::Instant::now();
        match self.provider.try_lock(config).await {
            Ok(Some(lock)) => {
                metrics::acquired(name, backend, attempt.elapsed());
                Ok(Some(lock))
            }
            Ok(None) => {
                metrics::skipped(name, backend, attempt.elapsed());
                Ok(None)
            }
            Err(error) => {
                self.attempt_failed(name, attempt.elapsed(), &error);
                Err(error)
            }
        }
    }

    /// One attempt at many locks at once ([`LockProvider::try_lock_many`]), for the scheduler's
    /// coalesced fires: each name gets the events and metrics of an attempt, as with
    /// [`execute`](Self::execute). Refused while draining.
    pub(crate) async fn try_acquire_many(
        &self,
        configs: &[LockConfig],
        options: crate::batch::BatchOptions,
    ) -> Result<crate::batch::BatchOutcome> {
        if self.registry.is_draining() {
            return Err(Error::Draining);
        }
        let backend = self.backend;
        for c in configs {
            self.emit(ExecutionEvent::Attempt { name: c.name() });
        }
        let attempt = tokio::time::Instant::now();
        let span = tracing::debug_span!("shedlock.execute_many", locks = configs.len());
        let outcome = self.provider.try_lock_many(configs, options).instrument(span).await;
        let took = attempt.elapsed();
        match &outcome {
            Ok(answers) => {
                for (c, answer) in configs.iter().zip(answers) {
                    let name = c.name();
                    match answer {
                        Ok(Some(_)) => metrics::acquired(name, backend, took),
                        Ok(None) => metrics::skipped(name, backend, took),
                        Err(error) => self.attempt_failed(name, took, error),
                    }
                }
            }
            Err(error) => {
                for c in configs {
                    self.attempt_failed(c.name(), took, error);
                }
            }
        }
        outcome
    }

    /// The metrics, event and log of an attempt at `name` that failed with `error`. The caller
    /// gets the error (a Scheduler reports it once per distinct failure): a warning here too
    /// said it twice on every fire.
    fn attempt_failed(&self, name: &str, took: Duration, error: &Error) {
        tracing::debug!(lock = name, %error, "could not try the lock");
        metrics::acquire_failed(name, self.backend, took);
        metrics::error(name, self.backend, "try_lock", error);
        self.emit(ExecutionEvent::Failed { name, error });
    }

    /// Runs `task` under `lock`, won by [`try_acquire_many`](Self::try_acquire_many), as
    /// [`execute`](Self::execute) runs a task whose lock it won, and releases it afterwards.
    pub(crate) async fn run_won<F, Fut, T>(
        &self,
        config: &LockConfig,
        lock: Lock,
        task: F,
    ) -> Result<TaskResult<T>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        let span = tracing::info_span!("shedlock.execute", lock = config.name());
        self.run_holding(config, None, lock, task).instrument(span).await
    }

    /// Reports that the lock of `config` was not won (held elsewhere, or left for other
    /// instances), as [`execute`](Self::execute) does.
    pub(crate) fn not_won(&self, config: &LockConfig) {
        tracing::debug!(lock = config.name(), "lock held elsewhere, task not executed");
        self.emit(ExecutionEvent::NotAcquired { name: config.name() });
    }

    /// Runs `task` under `lock`, just won, and releases it afterwards. A drain that began
    /// while the lock was being won gets it released unused ([`Error::Draining`]).
    async fn run_holding<F, Fut, T>(
        &self,
        config: &LockConfig,
        parent: Option<Arc<ActiveLock>>,
        lock: Lock,
        task: F,
    ) -> Result<TaskResult<T>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        let name = config.name();
        let backend = self.backend;
        let fencing_token = lock.fencing_token();
        tracing::debug!(lock = name, ?fencing_token, "lock acquired");
        self.emit(ExecutionEvent::Acquired { name, fencing_token });
        let lost = lock.lost_signal();
        let lost_signal = lost.clone();
        let nested = parent.is_some();
        let name_arc: Arc<str> = Arc::from(name);
        // Registered before the draining flag is read: a drain either sees this execution and
        // waits for it, or this execution sees the flag and runs nothing.
        let registration =
            self.registry.register(name_arc.clone(), fencing_token, lock.lease().clone());
        let active = Arc::new(ActiveLock {
            name: name_arc,
            provider: backend,
            parent,
            lock: tokio::sync::Mutex::new(Some(lock)),
            lost,
            registration: std::sync::Mutex::new(Some(registration)),
        });
        let mut guard = ReleaseOnDrop { active: Some(active.clone()) };
        if !nested && self.registry.is_draining() {
            if let Some(active) = guard.active.take()
                && let Err(error) = release(active).await
            {
                tracing::warn!(lock = name, %error, "releasing a lock won during a drain failed");
                metrics::error(name, backend, "unlock", &error);
                self.emit(ExecutionEvent::Failed { name, error: &error });
            }
            return Err(Error::Draining);
        }

        self.emit(ExecutionEvent::Started { name });
        let started = tokio::time::Instant::now();
        let outcome = ACTIVE.scope(active, CatchUnwind::new(task())).await;
        let duration = started.elapsed();
        metrics::held(name, backend, duration);
        if lost_signal.is_lost() {
            tracing::warn!(lock = name, ?duration, "the lock was lost while the task ran");
            metrics::lost(name, backend);
            self.emit(ExecutionEvent::Lost { name });
        }

        let release = match guard.active.take() {
            Some(active) => release(active).await,
            None => Ok(()),
        };
        if let Err(error) = &release {
            tracing::warn!(lock = name, %error, "releasing the lock failed; it expires after lock_at_most_for");
            metrics::error(name, backend, "unlock", error);
            self.emit(ExecutionEvent::Failed { name, error });
        }
        tracing::debug!(lock = name, ?duration, panicked = outcome.is_err(), "task finished");
        self.emit(ExecutionEvent::Finished { name, duration, panicked: outcome.is_err() });
        match outcome {
            Ok(value) => Ok(TaskResult::Executed(value)),
            Err(panic) => resume_unwind(panic),
        }
    }
}

/// How long [`LockingExecutor::execute_waiting`] waits for a lock held elsewhere, and how it
/// paces its attempts: the first pause is `first_retry` (default 50 ms), each next one twice the
/// last up to `max_retry` (default 1 s), each drawn at random between half and all of that
/// (jitter, so that waiters on many nodes do not try in step).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    at_most: Duration,
    first_retry: Duration,
    max_retry: Duration,
}

impl Wait {
    /// Waits up to `at_most` in all.
    pub fn at_most(at_most: Duration) -> Self {
        Self { at_most, first_retry: Duration::from_millis(50), max_retry: Duration::from_secs(1) }
    }

    /// Sets the first pause and the longest one (a `max_retry` below `first_retry` is raised to
    /// it; a zero `first_retry` is taken as 1 ms).
    #[must_use]
    pub fn backoff(mut self, first_retry: Duration, max_retry: Duration) -> Self {
        self.first_retry = first_retry.max(Duration::from_millis(1));
        self.max_retry = max_retry.max(self.first_retry);
        self
    }

    /// The longest wait.
    pub fn deadline(&self) -> Duration {
        self.at_most
    }
}

/// Jittered exponential backoff: `next()` is a random pause in `[d/2, d]`, `d` doubling from the
/// first pause up to the longest. A small xorshift generator seeded from the clock and a
/// process-wide counter: waiters need only to drift apart, not unpredictability.
struct Backoff {
    current: Duration,
    max: Duration,
    state: u64,
}

impl Backoff {
    fn new(wait: Wait) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::from(d.subsec_nanos()) ^ d.as_secs());
        static WAITERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WAITERS.fetch_add(0x9E37_79B9_7F4A_7C15, std::sync::atomic::Ordering::Relaxed);
        Self { current: wait.first_retry, max: wait.max_retry, state: (nanos ^ n) | 1 }
    }

    fn next(&mut self) -> Duration {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        let d = self.current;
        self.current = (self.current * 2).min(self.max);
        // A fraction in [0.5, 1] of `d`.
        let fraction = 0.5 + (self.state >> 11) as f64 / (1u64 << 53) as f64 / 2.0;
        d.mul_f64(fraction)
    }
}

/// Releases the lock held by `active`. The unlock runs as its own tokio task when a runtime is
/// present, so that dropping the caller mid-release still completes it.
/// The execution's registry entry goes only once the unlock has completed, so a drain waits
/// for the release itself.
async fn release(active: Arc<ActiveLock>) -> Result<()> {
    let lock = active.lock.lock().await.take();
    let registration = active.take_registration();
    let Some(lock) = lock else {
        // Released already, by whoever took it: not a failed release.
        if let Some(r) = registration {
            r.finish(true);
        }
        return Ok(());
    };
    let unlock = unlock_then_finish(lock, registration);
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => match rt.spawn(unlock).await {
            Ok(r) => r,
            Err(join) => Err(Error::backend("executor", join)),
        },
        Err(_) => unlock.await,
    }
}

/// Unlocks `lock`, then ends its registration with the outcome: the registry entry goes only
/// once the release has completed.
async fn unlock_then_finish(lock: Lock, registration: Option<Registration>) -> Result<()> {
    let result = lock.unlock().await;
    if let Some(r) = registration {
        r.finish(result.is_ok());
    }
    result
}

/// Releases the lock when the executing future is dropped before it could release normally.
struct ReleaseOnDrop {
    active: Option<Arc<ActiveLock>>,
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        let Some(active) = self.active.take() else { return };
        let Ok(mut slot) = active.lock.try_lock() else {
            tracing::warn!(lock = %active.name, "lock busy at drop; it expires after lock_at_most_for");
            return;
        };
        let Some(lock) = slot.take() else { return };
        let registration = active.take_registration();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let name = active.name.clone();
                rt.spawn(async move {
                    if let Err(error) = unlock_then_finish(lock, registration).await {
                        tracing::warn!(lock = %name, %error, "release after cancellation failed");
                    }
                });
            }
            Err(_) => tracing::warn!(
                lock = %active.name,
                "execution dropped outside a tokio runtime; the lock expires after lock_at_most_for"
            ),
        }
    }
}

/// Catches a panic of the inner future so the lock can be released before it resumes.
pub(crate) struct CatchUnwind<F> {
    inner: Pin<Box<F>>,
}

impl<F> CatchUnwind<F> {
    pub(crate) fn new(f: F) -> Self {
        Self { inner: Box::pin(f) }
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = std::result::Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.inner.as_mut();
        match catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

/// Succeeds inside a task run by [`LockingExecutor::execute`] (on the same tokio task), fails
/// with [`Error::NotLocked`] elsewhere. Use it in code that must only ever run under a lock.
///
/// Like any tokio task-local, the lock context does not follow `tokio::spawn`.
pub fn assert_locked() -> Result<()> {
    ACTIVE.try_with(|_| ()).map_err(|_| Error::NotLocked)
}

/// The name of the innermost lock held by the current task, if any.
pub fn active_lock_name() -> Option<String> {
    ACTIVE.try_with(|a| a.name.to_string()).ok()
}

/// The lost-lock signal of the innermost lock held by the current task (`None` outside a locked
/// task). It fires when the lock's lease ends without a successful extension (extend it with
/// [`extend_active_lock`], or use a [`KeepAliveProvider`](crate::KeepAliveProvider)) or when an
/// extension finds the lock taken.
pub fn active_lock_lost_signal() -> Option<LostSignal> {
    ACTIVE.try_with(|a| a.lost.clone()).ok()
}

/// Extends the innermost lock held by the current task (see [`Lock::extend`]). Fails with
/// [`Error::NotLocked`] outside a locked task.
pub async fn extend_active_lock(
    lock_at_most_for: Duration,
    lock_at_least_for: Duration,
) -> Result<()> {
    let active = ACTIVE.try_with(Arc::clone).map_err(|_| Error::NotLocked)?;
    let mut slot = active.lock.lock().await;
    let Some(lock) = slot.as_mut() else { return Err(Error::NotLocked) };
    let result = lock.extend(lock_at_most_for, lock_at_least_for).await;
    match &result {
        Ok(()) => metrics::extended(&active.name, active.provider),
        Err(error) => metrics::error(&active.name, active.provider, "extend", error),
    }
    result
}

//! # shedlock-tokio-cron-scheduler
//!
//! Locked jobs for [`tokio-cron-scheduler`](https://docs.rs/tokio-cron-scheduler): every instance
//! of a service runs the same `JobScheduler`, and each fire time runs on one of them — the one
//! that wins the job's [shedlock](https://docs.rs/shedlock) lock. The others skip that fire.
//!
//! ```no_run
//! # async fn demo(executor: shedlock::LockingExecutor) -> Result<(), Box<dyn std::error::Error>> {
//! use tokio_cron_scheduler::JobScheduler;
//! use shedlock::LockSpec;
//! use shedlock_tokio_cron_scheduler::locked_job;
//!
//! let scheduler = JobScheduler::new().await?;
//! let report = LockSpec::new("report")
//!     .lock_at_most_for(std::time::Duration::from_secs(600))
//!     .lock_at_least_for(std::time::Duration::from_secs(30));
//! scheduler.add(locked_job("0 */5 * * * *", &executor, report, || async { /* work */ })?).await?;
//! scheduler.start().await?;
//! # Ok(()) }
//! ```
//!
//! ## Choosing `lock_at_least_for`
//!
//! tokio-cron-scheduler looks for due jobs every 500 ms, so the instances start the same fire
//! time up to about 0.5 s apart, plus their clock skew. `lock_at_least_for` must cover that
//! spread (or a late instance runs the fire again) and stay below the gap to the next fire time
//! minus that spread (or the next fire is skipped everywhere): with a fire every 2 s, anything
//! between 1 s and 1.5 s; with a fire every 5 minutes, e.g. 30 s.

use std::{future::Future, sync::Arc};

use shedlock::{LockConfig, LockRequest, LockingExecutor, TaskResult};
use tokio_cron_scheduler::{Job, JobSchedulerError};

/// Why a locked job could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock could not be resolved on the executor (no `lock_at_most_for` and no default, a
    /// bad name template, a name the provider cannot hold).
    #[error("lock of the job: {0}")]
    Lock(#[from] shedlock::Error),
    /// tokio-cron-scheduler rejected the job (e.g. an invalid cron expression).
    #[error("tokio-cron-scheduler: {0}")]
    Scheduler(#[from] JobSchedulerError),
}

/// A tokio-cron-scheduler [`Job`] (UTC cron `schedule`, with seconds) whose every fire runs `task`
/// through `executor` under `lock` (a [`LockConfig`], a [`LockSpec`](shedlock::LockSpec) or a
/// bare name completed by the executor's defaults).
///
/// The lock is resolved now: a bad lock is an [`Error::Lock`] here, never a failure at fire time.
/// A fire whose lock is held elsewhere is skipped; a failing fire (backend error) is logged with
/// `tracing` and the schedule goes on.
pub fn locked_job<F, Fut>(
    schedule: &str,
    executor: &LockingExecutor,
    lock: impl LockRequest,
    task: F,
) -> Result<Job, Error>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let config = Arc::new(executor.resolve(lock)?);
    let executor = executor.clone();
    let task = Arc::new(task);
    let job = Job::new_async(schedule, move |_id, _scheduler| {
        let (executor, config, task) = (executor.clone(), config.clone(), task.clone());
        Box::pin(async move { fire(&executor, &config, move || task()).await })
    })?;
    Ok(job)
}

async fn fire<F, Fut>(executor: &LockingExecutor, config: &LockConfig, task: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    match executor.execute(config, task).await {
        Ok(TaskResult::Executed(())) => {}
        Ok(TaskResult::NotExecuted) => {
            tracing::debug!(lock = config.name(), "cron fire skipped: lock held elsewhere");
        }
        Err(error) => tracing::warn!(lock = config.name(), %error, "cron fire failed"),
    }
}

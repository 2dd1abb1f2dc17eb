//! Three "instances" on one SQLite file, each with its own pool: first three tokio-cron-schedulers
//! with a `locked_job`, then three of shedlock's own `Scheduler`s, firing every 2 s. Each fire
//! time is printed with the instance that ran it: one per fire time.
//!
//! ```text
//! cargo run -p shedlock-tokio-cron-scheduler --example three_schedulers [seconds]
//! ```

use std::{
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use shedlock::{LockSpec, LockingExecutor, Schedule, Scheduler};
use shedlock_sqlite::SqliteLockProvider;
use shedlock_tokio_cron_scheduler::locked_job;
use tokio_cron_scheduler::JobScheduler;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn executor(file: &std::path::Path) -> Result<LockingExecutor, BoxError> {
    let pool = shedlock_sqlite::recommended_pool_options()
        .connect_with(shedlock_sqlite::recommended_connect_options(file))
        .await?;
    let provider = SqliteLockProvider::builder(pool).build()?;
    provider.create_table().await?;
    Ok(LockingExecutor::new(Arc::new(provider)))
}

fn ran(scheduler: &'static str, node: usize) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let s = now.as_secs();
    println!(
        "{:02}:{:02}:{:02}  {scheduler}: instance {node} ran `report`",
        s / 3600 % 24,
        s / 60 % 60,
        s % 60
    );
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let seconds: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(7);
    let file =
        std::env::temp_dir().join(format!("shedlock-cron-example-{}.db", std::process::id()));
    // Fires every 2 s; tokio-cron-scheduler starts a fire up to 0.5 s apart on each instance,
    // so lock_at_least_for is 1 s (see the crate docs on choosing it).
    let spec = LockSpec::new("report")
        .lock_at_most_for(Duration::from_secs(60))
        .lock_at_least_for(Duration::from_secs(1));

    println!("tokio-cron-scheduler, three instances, {seconds} s:");
    let mut crons = Vec::new();
    for node in 0..3 {
        let sched = JobScheduler::new().await?;
        sched
            .add(locked_job(
                "*/2 * * * * *",
                &executor(&file).await?,
                spec.clone(),
                move || async move { ran("tokio-cron-scheduler", node) },
            )?)
            .await?;
        sched.start().await?;
        crons.push(sched);
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    for mut s in crons {
        s.shutdown().await?;
    }

    println!("shedlock::Scheduler, three instances, {seconds} s:");
    let mut ours = Vec::new();
    for node in 0..3 {
        let sched = Scheduler::new(executor(&file).await?);
        sched.schedule(Schedule::cron("1/2 * * * * *")?, spec.clone(), move || async move {
            ran("shedlock::Scheduler", node)
        })?;
        ours.push(sched);
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    for s in ours {
        s.shutdown().await;
    }
    let _ = std::fs::remove_file(&file);
    Ok(())
}

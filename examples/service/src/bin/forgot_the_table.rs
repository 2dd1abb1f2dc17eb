//! The README's Usage example as a new user might first write it: SQLite, a job every second,
//! but no `create_table`, no `Scheduler::check`, no `on_error` and no tracing subscriber. What
//! the user sees is the scheduler's default report on standard error: once, naming the lock and
//! how to create the table, although the job fails at every fire.
//!
//! Argument: how many seconds to keep the scheduler running (default 3). Prints
//! `fire times passed: N` on standard output when it stops.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use shedlock::{LockConfig, LockingExecutor, Schedule, Scheduler};
use shedlock_sqlite::SqliteLockProvider;

fn whole_seconds_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: u64 = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(3);
    let dir =
        std::env::temp_dir().join(format!("shedlock-forgot-the-table-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("locks.db");
    let pool = shedlock_sqlite::recommended_pool_options()
        .connect_with(shedlock_sqlite::recommended_connect_options(&file))
        .await?;
    let provider = SqliteLockProvider::builder(pool).build()?; // and no create_table()
    let scheduler = Scheduler::new(LockingExecutor::new(Arc::new(provider)));
    let config = LockConfig::builder("nightly-report")
        .lock_at_most_for_str("10m")
        .lock_at_least_for_str("30s")
        .build()?;
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let started = whole_seconds_now();
    scheduler.schedule(Schedule::cron("* * * * * *")?, config, move || {
        let counted = Arc::clone(&counted);
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    })?;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    scheduler.shutdown().await;
    // Fire times strictly after the start second and up to now, each at a whole second.
    println!("fire times passed: {}", whole_seconds_now().saturating_sub(started));
    println!("task runs: {}", runs.load(Ordering::SeqCst));
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

//! A fleet's tick: four instances each schedule the same twelve jobs every second. Fires due
//! together ask for their locks in one batch per instance (`try_lock_many`), and each instance
//! runs at most four jobs at once (`Scheduler::with_capacity`): every job still runs once per
//! second, and the work spreads over the instances instead of going to whoever asked first.
//!
//! ```text
//! cargo run -p shedlock --example fleet_tick
//! ```

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use shedlock::{LockConfig, LockingExecutor, Schedule, Scheduler};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

const INSTANCES: usize = 4;
const JOBS: usize = 12;
const CAPACITY: usize = 4;

/// (second, instance) → the jobs that instance ran in that second.
type Runs = Arc<Mutex<BTreeMap<(u64, usize), Vec<usize>>>>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(4);
    let server = MemoryServer::new();
    let runs: Runs = Arc::default();
    let mut fleet = Vec::new();
    for instance in 0..INSTANCES {
        let executor = LockingExecutor::new(Arc::new(MemoryLockProvider::new(&server)));
        let scheduler = Scheduler::new(executor).with_capacity(CAPACITY);
        for job in 0..JOBS {
            // Held at least 900 ms, so an instance firing a little later in the same second
            // finds the job taken.
            let config = LockConfig::builder(format!("job-{job:02}"))
                .lock_at_most_for_str("30s")
                .lock_at_least_for_str("900ms")
                .build()?;
            let runs = runs.clone();
            scheduler.schedule(Schedule::cron("* * * * * *")?, config, move || {
                let runs = runs.clone();
                async move {
                    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
                    runs.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry((now.as_secs(), instance))
                        .or_default()
                        .push(job);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })?;
        }
        fleet.push(scheduler);
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    for scheduler in fleet {
        scheduler.shutdown().await;
    }
    let runs = runs.lock().unwrap_or_else(|e| e.into_inner());
    let mut per_second: BTreeMap<u64, usize> = BTreeMap::new();
    for ((second, instance), jobs) in runs.iter() {
        println!("second {second}: instance {instance} ran {jobs:?}");
        *per_second.entry(*second).or_default() += jobs.len();
    }
    for (second, n) in per_second {
        println!("second {second}: {n} runs for {JOBS} jobs");
    }
    Ok(())
}

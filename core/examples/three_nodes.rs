//! Three simulated nodes schedule the same cron task every second; the lock makes each fire time
//! run on exactly one of them.
//!
//! ```text
//! cargo run -p shedlock --example three_nodes
//! ```

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use shedlock::{LockConfig, LockingExecutor, Schedule, Scheduler};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(6);
    // One shared "backend", three application nodes, each with its own client.
    let server = MemoryServer::new();
    // Held for at least 900 ms so a node whose timer fires a little late cannot run the same
    // second again; released at once by a dead node only after 30 s.
    let config = LockConfig::builder("report")
        .lock_at_most_for_str("30s")
        .lock_at_least_for_str("900ms")
        .build()?;
    let runs: Arc<Mutex<BTreeMap<u64, Vec<String>>>> = Arc::default();

    let mut nodes = Vec::new();
    for n in 1..=3 {
        let node = format!("node-{n}");
        let executor = LockingExecutor::new(Arc::new(MemoryLockProvider::new(&server)));
        let scheduler = Scheduler::new(executor);
        let runs = runs.clone();
        scheduler.schedule(Schedule::cron("* * * * * *")?, config.clone(), move || {
            let (runs, node) = (runs.clone(), node.clone());
            async move {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
                let second = now.as_secs();
                println!(
                    "{:02}:{:02}:{:02}  {node} ran `report`",
                    second / 3600 % 24,
                    second / 60 % 60,
                    second % 60
                );
                runs.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .entry(second)
                    .or_default()
                    .push(node);
            }
        })?;
        nodes.push(scheduler);
    }

    tokio::time::sleep(Duration::from_secs(seconds)).await;
    for s in nodes {
        s.shutdown().await;
    }

    let runs = runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let doubled: Vec<_> = runs.iter().filter(|(_, nodes)| nodes.len() != 1).collect();
    println!("{} fire times, {} ran more than once", runs.len(), doubled.len());
    if !doubled.is_empty() || runs.is_empty() {
        return Err(format!("expected each fire time exactly once, got {doubled:?}").into());
    }
    Ok(())
}

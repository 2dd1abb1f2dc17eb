//! A worked example service: three scheduled jobs locked on PostgreSQL, run as any number of
//! identical processes; each fire time runs in exactly one of them.
//!
//! - `report`, every 2 s (cron), a quick task;
//! - `cleanup`, every 3 s (cron), with its own `lock_at_least_for`;
//! - `digest`, every 5 s (cron), a slow task (1.5 s) that shows draining: on SIGTERM the
//!   scheduler stops firing and takes no new lock, the digest in flight finishes and releases
//!   its lock, the process reports what it waited for, and only then exits; another process
//!   takes the next fire time.
//!
//! At start-up one process (whichever wins) also runs `warm_cache`, a one-off declared with
//! `#[shedlock::lock]`. At exit the process prints what its drain waited for
//! (`drained <lock> released_after_ms=<ms>`, then `drain complete=<bool> took_ms=<ms>`) and its
//! metrics (`metric <name> <labels> <value>`).
//!
//! Environment: `DATABASE_URL` (required), `NODE` (a name for logs; default `node`), `RUN_LOG`
//! (optional: a file each run appends `start|end <job> <fire second> <node>` lines to), and
//! `RUST_LOG` (default `info`).
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo run -p shedlock-example-service
//! ```

use std::{
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use shedlock::{LockingExecutor, Schedule, Scheduler, TaskResult};
use shedlock_postgres::PostgresLockProvider;
use tokio::{io::AsyncWriteExt, signal::unix::SignalKind};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where runs are recorded (for the multi-process test), and by whom.
#[derive(Clone)]
struct RunLog {
    node: Arc<str>,
    file: Option<Arc<std::path::Path>>,
}

impl RunLog {
    /// The fire time a run belongs to: the scheduler fires when the clock reaches the cron instant
    /// (bar a ms of timer slack) and the run starts after the lock is won, well within a second;
    /// so the second of (now + 50 ms) is the fire second.
    fn fire_second() -> u64 {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        (now + Duration::from_millis(50)).as_secs()
    }

    async fn record(&self, what: &str, job: &str, second: u64) {
        tracing::info!(job, second, "{what}");
        let Some(file) = &self.file else { return };
        let line = format!("{what} {job} {second} {}\n", self.node);
        let written = async {
            let mut f =
                tokio::fs::OpenOptions::new().create(true).append(true).open(&**file).await?;
            f.write_all(line.as_bytes()).await
        };
        if let Err(error) = written.await {
            tracing::error!(%error, "could not write the run log");
        }
    }

    /// A scheduled job body: records its start, works for `work`, records its end.
    async fn run(&self, job: &'static str, work: Duration) {
        shedlock::assert_locked().unwrap_or_else(|e| tracing::error!(%e, "not locked"));
        let second = Self::fire_second();
        self.record("start", job, second).await;
        tokio::time::sleep(work).await;
        self.record("end", job, second).await;
    }
}

/// A one-off at start-up: one process warms the cache, the others skip it.
#[shedlock::lock(name = "warm-cache", at_most = "30s", at_least = "10s")]
async fn warm_cache(node: &str) -> usize {
    tracing::info!(node, "warming the cache");
    42
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(false)
        .init();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder)?;

    let url = std::env::var("DATABASE_URL").map_err(|_| "DATABASE_URL is not set")?;
    let node: Arc<str> = std::env::var("NODE").unwrap_or_else(|_| "node".into()).into();
    let log = RunLog {
        node: node.clone(),
        file: std::env::var_os("RUN_LOG").map(|p| Arc::from(std::path::Path::new(&p))),
    };

    let pool = shedlock_postgres::recommended_pool_options().connect(&url).await?;
    let provider = PostgresLockProvider::builder(pool).build()?;
    provider.create_table().await?; // idempotent; or run the DDL from the provider's README
    let executor = LockingExecutor::builder(Arc::new(provider))
        .default_lock_at_most_for_str("1m")
        .default_lock_at_least_for_str("1s")
        .name_prefix("example-service:")
        .build()?;

    match warm_cache(&executor, &node).await? {
        TaskResult::Executed(n) => tracing::info!(entries = n, "cache warmed here"),
        TaskResult::NotExecuted => tracing::info!("another node warms the cache"),
    }

    let scheduler = Scheduler::new(executor);
    let l = log.clone();
    scheduler.schedule(
        Schedule::cron("*/2 * * * * *")?,
        shedlock::lock_spec!(name = "report"),
        move || {
            let l = l.clone();
            async move { l.run("report", Duration::from_millis(100)).await }
        },
    )?;
    let l = log.clone();
    scheduler.schedule(
        Schedule::cron("*/3 * * * * *")?,
        shedlock::lock_spec!(name = "cleanup", at_least = "1500ms"),
        move || {
            let l = l.clone();
            async move { l.run("cleanup", Duration::from_millis(50)).await }
        },
    )?;
    let l = log.clone();
    scheduler.schedule(
        Schedule::cron("*/5 * * * * *")?,
        shedlock::lock_spec!(name = "digest", at_most = "30s", at_least = "2s"),
        move || {
            let l = l.clone();
            async move { l.run("digest", Duration::from_millis(1500)).await }
        },
    )?;
    tracing::info!(%node, "scheduler started; SIGTERM or Ctrl-C stops it gracefully");

    let mut term = tokio::signal::unix::signal(SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: draining"),
        _ = tokio::signal::ctrl_c() => tracing::info!("Ctrl-C: draining"),
    }
    let held = scheduler.executor().held();
    tracing::info!(
        locks = ?held.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
        "holding these locks at the stop"
    );
    // No new fire, no new lock; the fires in flight finish and release their locks (within
    // 10 s, else they are cancelled); the other nodes take the next fire times.
    let report = scheduler.drain(Duration::from_secs(10)).await;
    for d in &report.waited_for {
        match d.released_after {
            Some(after) if d.release_failed => {
                tracing::warn!(lock = %d.lock.name, ?after, "drain: its release failed; it expires after lock_at_most_for");
                println!("drained {} release_failed after_ms={}", d.lock.name, after.as_millis());
            }
            Some(after) => {
                tracing::info!(lock = %d.lock.name, ?after, "drain: waited for it to finish");
                println!("drained {} released_after_ms={}", d.lock.name, after.as_millis());
            }
            None => {
                tracing::warn!(lock = %d.lock.name, "drain: still running at the deadline");
                println!("drained {} unfinished", d.lock.name);
            }
        }
    }
    println!("drain complete={} took_ms={}", report.is_complete(), report.took.as_millis());

    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let labels: Vec<String> =
            key.labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
        let value = match value {
            DebugValue::Counter(c) => c.to_string(),
            DebugValue::Gauge(g) => g.to_string(),
            DebugValue::Histogram(h) => format!("count={}", h.len()),
        };
        println!("metric {} {} {value}", key.name(), labels.join(","));
    }
    tracing::info!("stopped");
    Ok(())
}

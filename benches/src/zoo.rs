//! The zoo's measurements, shared by every provider's benchmark: B1 (an uncontended cycle beside
//! the raw backend operations and a peer crate, interleaved), B2 (contention on one name from 1,
//! 4, 16 and 64 instances, in tight loops and paced), B3 (1 000 distinct names), B4 (the
//! cron-tick herd), the footprint (connections per instance, idle and after a herd tick;
//! resident memory per held lock) and the round trips per operation, counted through the
//! conformance kit's fault proxy. Each run writes one row,
//! `<out>/<provider>.json`, which `cargo xtask bench` merges into the summary.
//!
//! Three sizes:
//! - **test** (the binary runs without `--bench`, as `cargo test --all-targets` does): a few
//!   operations of each kind, every check made, nothing written;
//! - **quick** (`SHEDLOCK_BENCH_QUICK=1`, `cargo xtask bench --quick`): short runs, the whole
//!   zoo in a few minutes;
//! - **full** (the default under `cargo bench`).
//!
//! The output directory is `$SHEDLOCK_BENCH_OUT`, else `target/bench/` of the workspace.
//!
//! B1 also reads the CPU each cycle costs: the bench process's (client) and the server
//! processes' given by [`Zoo::server`]. To profile one B1 row, `SHEDLOCK_BENCH_PROFILE=<part of
//! its label>` runs that row alone for `SHEDLOCK_BENCH_PROFILE_SECS` (default 20) and exits, e.g.
//! `SHEDLOCK_BENCH_PROFILE=provider perf record -F 10000 target/release/deps/redis-<hash> --bench
//! none` (the filter `none` skips criterion's own runs).
//!
//! Every measured acquire is checked: a cycle whose `try_lock` finds its name held panics, and in
//! B2 a shared flag proves that no two contenders ever held the name at once. A benchmark that
//! fails writes no row, so no number is reported for a run that did not happen.

use std::{
    future::Future,
    net::SocketAddr,
    path::PathBuf,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use serde_json::{Value, json};
use shedlock::{LockConfig, LockProvider};
use shedlock_conformance::tools::proxy::{FaultProxy, round_trips_per_cycle};
use tokio::runtime::Runtime;

use crate::herd::{self, CensusFleet, CensusVia, Path};

/// One measured operation (a whole acquire + release cycle), borrowing what it needs.
pub type Op<'a> = Box<dyn FnMut() -> Pin<Box<dyn Future<Output = ()> + 'a>> + 'a>;

/// The B1 subject to profile alone (`SHEDLOCK_BENCH_PROFILE`), if any.
fn profile_subject() -> Option<String> {
    std::env::var("SHEDLOCK_BENCH_PROFILE").ok().filter(|v| !v.is_empty())
}

/// CPU time used so far by every thread of this process.
fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(u64::try_from(t.tv_sec).unwrap_or(0), u32::try_from(t.tv_nsec).unwrap_or(0))
}

/// CPU time used so far by the processes `pids` and all their descendants, every thread
/// (`/proc/<pid>/task/<tid>/schedstat`, nanoseconds): zero without pids or off Linux.
fn server_cpu(pids: &[u32]) -> Duration {
    fn tree(pid: u32, total: &mut u64, depth: u32) {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return };
        for task in tasks.flatten() {
            let path = task.path();
            if let Ok(stat) = std::fs::read_to_string(path.join("schedstat"))
                && let Some(ns) = stat.split_whitespace().next().and_then(|v| v.parse::<u64>().ok())
            {
                *total += ns;
            }
            if depth < 4
                && let Ok(children) = std::fs::read_to_string(path.join("children"))
            {
                for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                    tree(child, total, depth + 1);
                }
            }
        }
    }
    let mut total = 0;
    for &pid in pids {
        tree(pid, &mut total, 0);
    }
    Duration::from_nanos(total)
}

/// Wraps an async closure as an [`Op`].
pub fn op<'a, F, Fut>(mut f: F) -> Op<'a>
where
    F: FnMut() -> Fut + 'a,
    Fut: Future<Output = ()> + 'a,
{
    Box::new(move || Box::pin(f()))
}

/// How much to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// A smoke run under `cargo test`: every path once or twice, nothing written.
    Test,
    /// `SHEDLOCK_BENCH_QUICK=1`.
    Quick,
    /// The default under `cargo bench`.
    Full,
}

impl Size {
    /// From the process: `--bench` on the command line (cargo bench) and `SHEDLOCK_BENCH_QUICK`.
    pub fn from_env() -> Self {
        if !std::env::args().any(|a| a == "--bench") {
            Size::Test
        } else if std::env::var("SHEDLOCK_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0") {
            Size::Quick
        } else {
            Size::Full
        }
    }

    fn name(self) -> &'static str {
        match self {
            Size::Test => "test",
            Size::Quick => "quick",
            Size::Full => "full",
        }
    }

    /// B1: interleaved rounds, and the time one batch of a subject should take.
    fn b1(self) -> (usize, Duration) {
        match self {
            Size::Test => (2, Duration::from_millis(1)),
            Size::Quick => (10, Duration::from_millis(25)),
            Size::Full => (40, Duration::from_millis(50)),
        }
    }

    /// B2: contender counts and the time each count runs.
    fn b2(self) -> (&'static [usize], Duration) {
        match self {
            Size::Test => (&[1, 4], Duration::from_millis(100)),
            Size::Quick => (CONTENDERS, Duration::from_millis(700)),
            Size::Full => (CONTENDERS, Duration::from_secs(3)),
        }
    }

    /// B3: names and rounds.
    fn b3(self) -> (usize, usize) {
        match self {
            Size::Test => (20, 1),
            Size::Quick => (B3_NAMES, 1),
            Size::Full => (B3_NAMES, 3),
        }
    }

    /// B4's share: the (instances, jobs) sizes it runs at.
    fn b4_share(self) -> &'static [(usize, usize)] {
        match self {
            Size::Test => &[(4, 10)],
            Size::Quick => &[(8, 100)],
            Size::Full => &[(8, 100), (32, 1000)],
        }
    }

    /// B4: instance counts, job counts and ticks per (instances, jobs).
    fn b4(self) -> (&'static [usize], &'static [usize], usize) {
        match self {
            Size::Test => (&[1, 4], &[1, 10], 1),
            Size::Quick => (&[1, 8, 32], &[1, 100], 2),
            Size::Full => (HERD_INSTANCES, HERD_JOBS, 3),
        }
    }

    fn round_trip_samples(self) -> usize {
        match self {
            Size::Test => 2,
            Size::Quick => 5,
            Size::Full => 20,
        }
    }
}

/// B2's contender counts.
pub const CONTENDERS: &[usize] = &[1, 4, 16, 64];
/// B3's names.
pub const B3_NAMES: usize = 1000;
/// B2's paced variant: each contender tries once per this period.
pub const PACE: Duration = Duration::from_millis(10);
/// B4's fleet sizes: instances of one service, each its own client or pool.
pub const HERD_INSTANCES: &[usize] = &[1, 8, 32, 128];
/// B4's longest expected tick: a size whose tick the backend's measured rate puts above this
/// is skipped, and the summary says so and why.
pub const HERD_TICK_BUDGET: Duration = Duration::from_secs(30);
/// B4's job counts: names due at the same tick.
pub const HERD_JOBS: &[usize] = &[1, 100, 1000];
/// B4's shortest `lock_at_least_for`: what keeps an instance that decides late from running a
/// job the winner already ran at this tick (ShedLock's advice for a herd). A size whose tick the
/// backend's measured rate predicts longer gets more (see `herd_at_least`), so every tick has
/// exactly one winner per job.
pub const HERD_AT_LEAST: Duration = Duration::from_secs(3);
/// B3's acquires in flight at once (one instance).
pub const B3_IN_FLIGHT: usize = 16;
/// `lock_at_most_for` of every measured lock: far longer than any run, so that nothing expires
/// while measured.
pub const AT_MOST: Duration = Duration::from_secs(120);

/// A lock config on `name`, held at most [`AT_MOST`], at least nothing.
///
/// # Panics
/// On an invalid name (benchmark code).
#[allow(clippy::expect_used)]
pub fn cfg(name: &str) -> LockConfig {
    LockConfig::new(name, AT_MOST, Duration::ZERO).expect("a valid lock config")
}

/// `base` made unique to this run (process id and start time), so that a lock left behind by an
/// aborted run cannot make this one's names look held.
pub fn unique(base: &str) -> String {
    let t = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    format!("{base}-{}-{}", std::process::id(), t.as_millis() % 1_000_000_000)
}

/// Latency percentiles of one subject, in microseconds.
#[derive(Clone, Copy, Debug)]
struct Latency {
    p50: f64,
    p99: f64,
    n: usize,
}

fn percentile_us(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    // Nearest rank.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e6
}

fn latency(mut v: Vec<Duration>) -> Latency {
    v.sort_unstable();
    Latency { p50: percentile_us(&v, 50.0), p99: percentile_us(&v, 99.0), n: v.len() }
}

fn round(x: f64, digits: i32) -> Value {
    if x.is_finite() {
        let m = 10f64.powi(digits);
        json!((x * m).round() / m)
    } else {
        Value::Null
    }
}

/// One provider's run.
pub struct Zoo<'rt> {
    provider: String,
    rt: &'rt Runtime,
    size: Size,
    row: serde_json::Map<String, Value>,
    notes: Vec<String>,
    /// The server processes whose CPU B1 reads (see [`Zoo::server`]).
    server_pids: Vec<u32>,
}

impl<'rt> Zoo<'rt> {
    /// Starts the row of `provider` (its name in the summary: `postgres`, `redis`, ...).
    pub fn new(provider: &str, rt: &'rt Runtime) -> Self {
        let size = Size::from_env();
        let mut row = serde_json::Map::new();
        row.insert("provider".into(), json!(provider));
        row.insert("size".into(), json!(size.name()));
        row.insert(
            "measured_at".into(),
            json!(shedlock::support::iso8601_millis(SystemTime::now())),
        );
        println!("zoo: {provider} ({} size)", size.name());
        Self {
            provider: provider.to_owned(),
            rt,
            size,
            row,
            notes: Vec::new(),
            server_pids: Vec::new(),
        }
    }

    /// Adds a server B1 charges server CPU to: the launcher's native processes of `service`
    /// and their child processes (PostgreSQL's backends). A server given by URL, in Docker or
    /// embedded has none; without any, B1 reports no server CPU.
    pub fn server(&mut self, service: &shedlock_launcher::Service) {
        self.server_pids.extend(service.pids().into_iter().flatten());
    }

    /// How much this run measures.
    pub fn size(&self) -> Size {
        self.size
    }

    /// Adds a note to the row (a caveat the summary prints under the table).
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// **B1**, interleaved: the provider's cycle (`try_lock` + `unlock` on a free name), the raw
    /// backend operations it sends (`raw`: what they are, and the operation), a peer crate's
    /// cycle where one exists, and any further variants (`extras`), measured in turn, batch by
    /// batch (the order rotates every round), so that a drifting machine or server weighs on
    /// all of them alike. Reports p50 and p99 of single cycles.
    pub fn b1<'a>(
        &mut self,
        provider: Op<'a>,
        raw: (&str, Op<'a>),
        peer: Option<(&str, Op<'a>)>,
        extras: Vec<(&str, Op<'a>)>,
    ) {
        let mut subjects: Vec<(String, Op<'a>)> = vec![("provider".into(), provider)];
        subjects.push((raw.0.to_owned(), raw.1));
        let has_peer = peer.is_some();
        if let Some((name, op)) = peer {
            subjects.push((name.to_owned(), op));
        }
        for (name, op) in extras {
            subjects.push((name.to_owned(), op));
        }
        if let Some(which) = profile_subject() {
            self.profile(subjects, &which);
            return;
        }
        let (rounds, batch_time) = self.size.b1();
        // Warm-up, which also sizes each subject's batch.
        let mut batch = Vec::with_capacity(subjects.len());
        for (_, op) in &mut subjects {
            let started = Instant::now();
            self.rt.block_on(async {
                for _ in 0..5 {
                    op().await;
                }
            });
            let per_op = started.elapsed() / 5;
            let k = (batch_time.as_secs_f64() / per_op.as_secs_f64().max(1e-9)) as usize;
            batch.push(k.clamp(2, 2000));
        }
        let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); subjects.len()];
        let mut cpu = vec![Duration::ZERO; subjects.len()];
        let mut server = vec![Duration::ZERO; subjects.len()];
        for r in 0..rounds {
            for j in 0..subjects.len() {
                let i = (j + r) % subjects.len();
                let (k, out) = (batch[i], &mut samples[i]);
                let op = &mut subjects[i].1;
                let server_before = server_cpu(&self.server_pids);
                let cpu_before = process_cpu();
                self.rt.block_on(async {
                    for _ in 0..k {
                        let started = Instant::now();
                        op().await;
                        out.push(started.elapsed());
                    }
                });
                cpu[i] += process_cpu().saturating_sub(cpu_before);
                server[i] += server_cpu(&self.server_pids).saturating_sub(server_before);
            }
        }
        // Client CPU per cycle: every thread of this process (the caller, the runtime's workers,
        // a client's own threads; for an embedded database also the database's work).
        let cpu_us: Vec<f64> = cpu
            .iter()
            .zip(&samples)
            .map(|(c, s)| c.as_secs_f64() * 1e6 / s.len().max(1) as f64)
            .collect();
        // Server CPU per cycle: the server's processes (every thread, and their children), from
        // the scheduler's exact run times; `None` without a native server.
        let server_us: Vec<Option<f64>> = server
            .iter()
            .zip(&samples)
            .map(|(c, s)| {
                (!self.server_pids.is_empty())
                    .then(|| c.as_secs_f64() * 1e6 / s.len().max(1) as f64)
            })
            .collect();
        let lat: Vec<Latency> = samples.into_iter().map(latency).collect();
        for ((((name, _), l), c), sv) in subjects.iter().zip(&lat).zip(&cpu_us).zip(&server_us) {
            let sv = sv.map_or_else(|| "–".to_owned(), |v| format!("{v:.1}"));
            println!(
                "  B1 {name:<44} p50 {:>10.1} µs  p99 {:>10.1} µs  CPU client {c:>8.1} µs, \
                 server {sv:>8} µs  (n={})",
                l.p50, l.p99, l.n
            );
        }
        let server_cell = |i: usize| server_us[i].map_or(Value::Null, |v| round(v, 1));
        let row = &mut self.row;
        row.insert("b1_p50_us".into(), round(lat[0].p50, 1));
        row.insert("b1_p99_us".into(), round(lat[0].p99, 1));
        row.insert("b1_samples".into(), json!(lat[0].n));
        row.insert("b1_cpu_us".into(), round(cpu_us[0], 1));
        row.insert("b1_server_cpu_us".into(), server_cell(0));
        row.insert("raw".into(), json!(subjects[1].0));
        row.insert("raw_p50_us".into(), round(lat[1].p50, 1));
        row.insert("raw_p99_us".into(), round(lat[1].p99, 1));
        row.insert("raw_cpu_us".into(), round(cpu_us[1], 1));
        row.insert("raw_server_cpu_us".into(), server_cell(1));
        row.insert("b1_ratio".into(), round(lat[0].p50 / lat[1].p50, 3));
        let mut next = 2;
        if has_peer {
            row.insert("peer".into(), json!(subjects[2].0));
            row.insert("peer_p50_us".into(), round(lat[2].p50, 1));
            row.insert("peer_p99_us".into(), round(lat[2].p99, 1));
            row.insert("peer_cpu_us".into(), round(cpu_us[2], 1));
            row.insert("peer_server_cpu_us".into(), server_cell(2));
            next = 3;
        }
        let extras: Vec<Value> = (next..subjects.len())
            .map(|i| {
                json!({"label": subjects[i].0, "p50_us": round(lat[i].p50, 1),
                       "p99_us": round(lat[i].p99, 1), "cpu_us": round(cpu_us[i], 1),
                       "server_cpu_us": server_cell(i)})
            })
            .collect();
        row.insert("b1_extras".into(), Value::Array(extras));
    }

    /// The profiling mode of B1 (`SHEDLOCK_BENCH_PROFILE=<subject>`): runs only the subject
    /// whose label contains `which` (`provider`, or part of the floor's, the peer's or a
    /// variant's label) for `SHEDLOCK_BENCH_PROFILE_SECS` (default 20) and prints its cycles and
    /// client CPU per cycle, so that `perf record` / `perf stat` on the bench process sees that
    /// subject alone; the rest of the zoo is skipped and nothing is recorded.
    ///
    /// # Panics
    /// If no subject's label contains `which`.
    #[allow(clippy::panic)]
    fn profile(&mut self, mut subjects: Vec<(String, Op<'_>)>, which: &str) {
        let labels: Vec<String> = subjects.iter().map(|(n, _)| n.clone()).collect();
        let Some((name, op)) = subjects.iter_mut().find(|(n, _)| n.contains(which)) else {
            panic!("SHEDLOCK_BENCH_PROFILE={which:?} names no B1 subject of {labels:?}");
        };
        let secs = std::env::var("SHEDLOCK_BENCH_PROFILE_SECS")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(20.0);
        let run_for = Duration::from_secs_f64(secs.max(0.1));
        self.rt.block_on(async {
            for _ in 0..100 {
                op().await;
            }
        });
        let (started, cpu_before) = (Instant::now(), process_cpu());
        let mut n = 0u64;
        self.rt.block_on(async {
            while started.elapsed() < run_for {
                op().await;
                n += 1;
            }
        });
        let (wall, cpu) = (started.elapsed(), process_cpu().saturating_sub(cpu_before));
        println!(
            "  B1 profile {name}: {n} cycles, {:.1} µs each, client CPU {:.1} µs each",
            wall.as_secs_f64() * 1e6 / n.max(1) as f64,
            cpu.as_secs_f64() * 1e6 / n.max(1) as f64
        );
        // Nothing else of the zoo runs, and nothing is recorded. Servers are the launcher's
        // shared ones, which end with this process as after any bench run.
        std::process::exit(0);
    }

    /// **B2, a stress test (not a workload)**: 1, 4, 16 and 64 contenders, each its own instance
    /// from `make` (its own client or pool), race for one name for a fixed time in tight loops;
    /// a winner releases at once and tries again. No scheduler does this: it finds where the
    /// backend's contention handling breaks down. Reports successful acquisitions per second,
    /// attempts per second and the p99 attempt latency per contender count; and beside it the
    /// **paced** variant, in which each contender tries once every [`PACE`] (each at its own
    /// phase), as schedulers firing often would.
    ///
    /// # Panics
    /// If a call fails, or two contenders hold the name at once.
    #[allow(clippy::expect_used, clippy::panic)]
    pub fn b2<F, Fut>(&mut self, mut make: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Arc<dyn LockProvider>>,
    {
        let (counts, run_for) = self.size.b2();
        let max = counts.iter().copied().max().unwrap_or(1);
        let nodes: Vec<Arc<dyn LockProvider>> = self.rt.block_on(async {
            let mut v = Vec::with_capacity(max);
            for _ in 0..max {
                v.push(make().await);
            }
            v
        });
        let mut rows = Vec::new();
        for &n in counts {
            let config = cfg(&unique(&format!("b2-{n}")));
            let held = Arc::new(AtomicBool::new(false));
            // A count with no win yet (a slow server under load) runs on, up to 10 s more,
            // rather than report a number for a run in which nothing was acquired.
            let any_win = Arc::new(AtomicBool::new(false));
            let (started, results) = self.rt.block_on(async {
                // Warm every instance's connection on this name first (uncounted).
                for p in &nodes[..n] {
                    if let Some(l) = p.try_lock(&config).await.expect("try_lock") {
                        l.unlock().await.expect("unlock");
                    }
                }
                let started = Instant::now();
                let deadline = started + run_for;
                let mut tasks = Vec::with_capacity(n);
                for p in &nodes[..n] {
                    let (p, config, held, any_win) =
                        (p.clone(), config.clone(), held.clone(), any_win.clone());
                    tasks.push(tokio::spawn(async move {
                        let (mut attempts, mut wins, mut lat) = (0u64, 0u64, Vec::new());
                        let overtime = deadline + Duration::from_secs(10);
                        loop {
                            let now = Instant::now();
                            if now >= overtime
                                || (now >= deadline && any_win.load(Ordering::SeqCst))
                            {
                                break;
                            }
                            let s = Instant::now();
                            let got = p.try_lock(&config).await.expect("try_lock");
                            lat.push(s.elapsed());
                            attempts += 1;
                            if let Some(lock) = got {
                                assert!(
                                    !held.swap(true, Ordering::SeqCst),
                                    "two contenders held the name at once"
                                );
                                wins += 1;
                                any_win.store(true, Ordering::SeqCst);
                                held.store(false, Ordering::SeqCst);
                                lock.unlock().await.expect("unlock");
                            }
                            // Instances whose calls never wait (memory) still take turns.
                            tokio::task::yield_now().await;
                        }
                        (attempts, wins, lat)
                    }));
                }
                let mut results = Vec::with_capacity(n);
                for t in tasks {
                    results.push(t.await.expect("a contender task"));
                }
                (started, results)
            });
            let secs = started.elapsed().as_secs_f64();
            let attempts: u64 = results.iter().map(|r| r.0).sum();
            let wins: u64 = results.iter().map(|r| r.1).sum();
            assert!(wins > 0, "no contender ever acquired the name in {run_for:?}");
            let lat = latency(results.into_iter().flat_map(|r| r.2).collect());
            let (acq, att) = (wins as f64 / secs, attempts as f64 / secs);
            println!(
                "  B2 {n:>2} contenders: {acq:>9.0} acquisitions/s  {att:>9.0} attempts/s  \
                 attempt p99 {:>9.1} µs",
                lat.p99
            );
            self.row.insert(format!("b2_acq_per_s_{n}"), round(acq, 0));
            let paced = self.rt.block_on(paced(&nodes[..n], run_for));
            println!(
                "  B2 {n:>2} contenders, paced every {} ms: {:>9.0} acquisitions/s  attempt p99 \
                 {:>9.1} µs",
                PACE.as_millis(),
                paced.0,
                paced.1
            );
            rows.push(json!({
                "contenders": n,
                "acq_per_s": round(acq, 0),
                "attempts_per_s": round(att, 0),
                "attempt_p99_us": round(lat.p99, 1),
                "paced_acq_per_s": round(paced.0, 0),
                "paced_attempt_p99_us": round(paced.1, 1),
            }));
        }
        self.row.insert("b2".into(), Value::Array(rows));
    }

    /// **B3**: a fleet of 1 000 jobs on one instance: every name acquired (16 in flight at
    /// once), then every lock released; cycles per second over the whole round (the median
    /// round).
    ///
    /// # Panics
    /// If a call fails or a name is held.
    #[allow(clippy::expect_used)]
    pub fn b3(&mut self, provider: Arc<dyn LockProvider>) {
        let (names, rounds) = self.size.b3();
        let base = unique("b3");
        let configs: Arc<Vec<LockConfig>> =
            Arc::new((0..names).map(|i| cfg(&format!("{base}-{i}"))).collect());
        let mut rates = Vec::with_capacity(rounds);
        // Footprint: resident memory before the first round's acquisitions and once all its
        // names are held (the client side only: the backend's memory is its own).
        let mut rss_held: Option<(u64, u64)> = None;
        for round_no in 0..rounds {
            let elapsed = self.rt.block_on(async {
                let rss_before = resident_bytes();
                let started = Instant::now();
                let mut tasks = Vec::with_capacity(B3_IN_FLIGHT);
                for t in 0..B3_IN_FLIGHT {
                    let (p, configs) = (provider.clone(), configs.clone());
                    tasks.push(tokio::spawn(async move {
                        let mut held = Vec::new();
                        for c in configs.iter().skip(t).step_by(B3_IN_FLIGHT) {
                            held.push(p.try_lock(c).await.expect("try_lock").expect("a free name"));
                        }
                        held
                    }));
                }
                let mut all = Vec::with_capacity(names);
                for t in tasks {
                    all.push(t.await.expect("an acquiring task"));
                }
                if round_no == 0
                    && let (Some(before), Some(after)) = (rss_before, resident_bytes())
                {
                    rss_held = Some((before, after));
                }
                let mut tasks = Vec::with_capacity(all.len());
                for held in all {
                    tasks.push(tokio::spawn(async move {
                        for l in held {
                            l.unlock().await.expect("unlock");
                        }
                    }));
                }
                for t in tasks {
                    t.await.expect("a releasing task");
                }
                started.elapsed()
            });
            rates.push(names as f64 / elapsed.as_secs_f64());
        }
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        println!("  B3 {names} names: {median:.0} cycles/s (median of {rounds})");
        self.row.insert("b3_cycles_per_s".into(), round(median, 0));
        self.row.insert("b3_names".into(), json!(names));
        if let Some((before, after)) = rss_held {
            let grew = after.saturating_sub(before);
            println!(
                "  footprint: {} KiB more resident while holding {names} names ({:.0} bytes per \
                 held lock)",
                grew / 1024,
                grew as f64 / names as f64
            );
            self.row.insert("rss_held_names".into(), json!(names));
            self.row.insert("rss_growth_held_bytes".into(), json!(grew));
            self.row.insert("rss_per_held_lock_bytes".into(), round(grew as f64 / names as f64, 0));
        }
    }

    /// Round trips per acquire and per release, counted by the conformance kit's fault proxy
    /// in front of `upstream` (the conformance report's figure): `make` builds an instance that
    /// connects to the given address instead. Without an address (a server URL whose host is a
    /// name) the row says so instead of a figure.
    ///
    /// # Panics
    /// If the proxy cannot start or the measurement fails.
    #[allow(clippy::expect_used, clippy::panic)]
    pub fn round_trips<F, Fut>(&mut self, upstream: Option<SocketAddr>, make: F)
    where
        F: FnOnce(SocketAddr) -> Fut,
        Fut: Future<Output = Arc<dyn LockProvider>>,
    {
        let Some(upstream) = upstream else {
            self.no_round_trips("not counted: the server's URL names no IP address for the proxy");
            return;
        };
        let samples = self.size.round_trip_samples();
        let base = unique("rt");
        let r = self.rt.block_on(async {
            let proxy = FaultProxy::start(upstream).await.expect("the fault proxy");
            let p = make(proxy.addr()).await;
            let mut i = 0;
            round_trips_per_cycle(&proxy, p.as_ref(), samples, || {
                i += 1;
                LockConfig::new(format!("{base}-{i}"), AT_MOST, Duration::ZERO)
                    .map_err(|_| "an invalid lock name")
            })
            .await
            .unwrap_or_else(|e| panic!("round trips: {e}"))
        });
        println!(
            "  round trips: {:.2} per acquire, {:.2} per release ({:.2} in the background)",
            r.acquire, r.release, r.background
        );
        self.row.insert("round_trips_acquire".into(), round(r.acquire, 2));
        self.row.insert("round_trips_release".into(), round(r.release, 2));
        self.row.insert("round_trips_background".into(), round(r.background, 2));
    }

    /// **B4, the herd**: a fleet of `N` instances of one service (each its own instance from
    /// `make`: its own client or pool), every one of them asking for every one of `J` jobs at
    /// the same cron tick, for a few ticks, by both paths of [`crate::herd`]: one `try_lock`
    /// per job, each its own task, and one `try_lock_many` per instance. A winner runs its
    /// (empty) task and unlocks at once, its record kept for `lock_at_least_for`
    /// ([`HERD_AT_LEAST`], or 1.5 times the tick the path's rate measured on the smaller sizes
    /// predicts, plus 1 s) so that late deciders find the job done; each tick asks for names of
    /// its own (how late a backend expires the last tick's records is not B4's measure). Per
    /// (N, J) and path: the time from the tick to the last decision (p50
    /// and p99 over ticks), the winners' task start latency (p50 and p99 over every winner),
    /// provider calls per tick, and exactly J winners per tick, checked. A combination whose
    /// calls fail (a server out of connections, say), or whose tick outlasted its
    /// `lock_at_least_for` so that a late instance took a job again as the lock allows, is
    /// reported with why instead of figures. With `census` (the server's address, and how to
    /// build an instance reaching it at another address), each measured size and path also
    /// gets a census tick ([`crate::herd::CensusFleet`]): connections per instance at their
    /// peak during the tick, and requests per instance. Last, the share
    /// ([`crate::herd::share`]) at 8 × 100 and 32 × 1 000. The summary (`cargo xtask bench`)
    /// fits the growth from these rows.
    ///
    /// # Panics
    /// If a job has no winner in a tick, or a second one whose call began inside the first
    /// winner's `lock_at_least_for` (two instances ran it).
    #[allow(clippy::expect_used, clippy::panic, clippy::too_many_lines)]
    pub fn b4<F, Fut>(&mut self, mut make: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Arc<dyn LockProvider>>,
    {
        self.b4_with(|_| make(), None);
    }

    /// [`b4`](Self::b4) with the instances of each path from `make`, and a census of each size
    /// (see there): the server's address, and how to build an instance of a path that reaches
    /// it at another address.
    #[allow(clippy::expect_used, clippy::panic, clippy::too_many_lines)]
    pub fn b4_with<F, Fut>(&mut self, mut make: F, census: Option<(SocketAddr, CensusVia<'_>)>)
    where
        F: FnMut(Path) -> Fut,
        Fut: Future<Output = Arc<dyn LockProvider>>,
    {
        let (counts, jobs, ticks) = self.size.b4();
        let max = counts.iter().copied().max().unwrap_or(1);
        let sockets_before = open_sockets();
        let warm = cfg(&unique("b4-warm"));
        let mut build = |rt: &Runtime, path: Path| -> Vec<Arc<dyn LockProvider>> {
            rt.block_on(async {
                let mut v = Vec::with_capacity(max);
                for _ in 0..max {
                    v.push(make(path).await);
                }
                // One lock cycle each, so that lazily connecting clients have connected.
                for p in &v {
                    if let Some(l) = p.try_lock(&warm).await.expect("try_lock") {
                        l.unlock().await.expect("unlock");
                    }
                }
                v
            })
        };
        let mut sockets_idle = None;
        let mut sockets_busy: Option<usize> = None;
        let mut rows: Vec<Value> = Vec::new();
        let mut shares = Vec::new();
        // One path at a time, each on a fleet of its own, dropped before the next: the server
        // sees one fleet's connections at a time, as it would in production.
        for path in Path::ALL {
            let nodes = build(self.rt, path);
            let granularity = nodes[0].capabilities().granularity;
            if path == Path::PerJob {
                sockets_idle = open_sockets();
            }
            let label = path.label();
            let first_row = rows.len();
            for &n in counts {
                for &j in jobs {
                    let what = format!("B4 {label:>7} {n:>3} instances × {j:>4} jobs");
                    if let Some(why) = herd::over_budget(&rows, path, n * j) {
                        println!("  {what}: skipped: {why}");
                        rows.push(
                            json!({"path": label, "instances": n, "jobs": j, "skipped": why}),
                        );
                        continue;
                    }
                    let base = unique(&format!("b4-{label}-{n}x{j}"));
                    let at_least = herd::at_least(&rows, path, n * j);
                    let mut decide = Vec::with_capacity(ticks);
                    let mut starts = Vec::new();
                    let mut failure: Option<String> = None;
                    for tick in 0..ticks {
                        // Each tick on names of its own: a scheduler's next tick finds the
                        // last one's records expired, but how late a backend expires a record
                        // (etcd revokes at most 1 000 leases a second) is not what B4 measures.
                        let configs = herd_configs(&format!("{base}-t{tick}"), j, at_least);
                        let out = self.rt.block_on(herd::tick(path, &nodes[..n], &configs));
                        if path == Path::PerJob
                            && n == max
                            && j == jobs.last().copied().unwrap_or(0)
                            && tick == 0
                        {
                            sockets_busy = open_sockets();
                        }
                        match out {
                            Ok((last, winners)) => {
                                let mut late = None;
                                for (i, w) in winners.iter().enumerate() {
                                    match herd::winners(i, w, at_least, granularity) {
                                        Ok(None) => {}
                                        Ok(Some(why)) => late = late.or(Some(why)),
                                        Err(e) => panic!("{what}, tick {tick}: {e}"),
                                    }
                                }
                                if let Some(why) = late {
                                    failure = Some(why);
                                    break;
                                }
                                decide.push(last);
                                starts.extend(winners.iter().flatten().map(|&(_, d)| d));
                            }
                            Err(e) => {
                                failure = Some(e);
                                break;
                            }
                        }
                    }
                    let calls = match path {
                        Path::PerJob => n * j + j,
                        Path::Batch => n + j,
                    };
                    if let Some(e) = failure {
                        println!("  {what}: FAILED: {e}");
                        rows.push(json!({"path": label, "instances": n, "jobs": j, "error": e}));
                        continue;
                    }
                    let d = latency(decide);
                    let w = latency(starts);
                    println!(
                        "  {what}: decided in p50 {:>10.1} µs  p99 {:>10.1} µs; winner starts \
                         p50 {:>10.1} µs  p99 {:>10.1} µs; {calls} calls/tick",
                        d.p50, d.p99, w.p50, w.p99
                    );
                    rows.push(json!({
                        "path": label,
                        "instances": n,
                        "jobs": j,
                        "ticks": ticks,
                        "decide_p50_us": round(d.p50, 1),
                        "decide_p99_us": round(d.p99, 1),
                        "winner_start_p50_us": round(w.p50, 1),
                        "winner_start_p99_us": round(w.p99, 1),
                        "calls_per_tick": calls,
                        "lock_at_least_for_s": round(at_least.as_secs_f64(), 1),
                    }));
                }
            }
            if path == Path::Batch {
                for &(n, j) in self.size.b4_share() {
                    let at_least = herd::at_least(&rows, Path::Batch, n * j);
                    let fleet = &nodes[..n.min(nodes.len())];
                    let share_ticks = if self.size == Size::Test { 1 } else { ticks };
                    let out =
                        self.rt.block_on(herd::share(fleet, j, at_least, granularity, share_ticks));
                    match out {
                        Ok(row) => {
                            println!(
                                "  B4 share {n:>3} instances × {j:>4} jobs, capacity {}: max \
                                 share {}, most running at once {}",
                                row["capacity"], row["max_share"], row["most_running_at_once"]
                            );
                            shares.push(row);
                        }
                        Err(e) => {
                            println!("  B4 share {n:>3} instances × {j:>4} jobs: FAILED: {e}");
                            shares.push(json!({"instances": n, "jobs": j, "error": e}));
                        }
                    }
                }
            }
            drop(nodes);
            // The census: each size this path measured, once more on a fresh fleet whose
            // instances each reach the server through a proxy of their own.
            if let Some((upstream, via)) = &census {
                for row in &mut rows[first_row..] {
                    if row.get("decide_p50_us").is_none() {
                        continue;
                    }
                    let n = row["instances"].as_u64().unwrap_or(1) as usize;
                    let j = row["jobs"].as_u64().unwrap_or(1) as usize;
                    let at_least =
                        Duration::from_secs_f64(row["lock_at_least_for_s"].as_f64().unwrap_or(3.0));
                    let configs =
                        herd_configs(&unique(&format!("b4c-{label}-{n}x{j}")), j, at_least);
                    let counted = self.rt.block_on(async {
                        let make = |a: SocketAddr| via(path, a);
                        let fleet = CensusFleet::start(*upstream, &make, n).await?;
                        fleet.count(path, n, &configs).await
                    });
                    let what = format!("B4 {label:>7} {n:>3} instances × {j:>4} jobs: census");
                    match counted {
                        Ok(c) => {
                            println!(
                                "  {what}: {} connections per instance at most, {:.1} requests \
                                 per instance (at most {})",
                                c.connections_peak, c.requests_mean, c.requests_max
                            );
                            row["connections_per_instance_peak"] = json!(c.connections_peak);
                            row["requests_per_instance_per_tick"] = round(c.requests_mean, 1);
                            row["requests_per_instance_per_tick_max"] = json!(c.requests_max);
                        }
                        Err(e) => {
                            println!("  {what} failed: {e}");
                            row["census_error"] = json!(e);
                        }
                    }
                }
            }
        }
        if let (Some(before), Some(idle)) = (sockets_before, sockets_idle) {
            let per = |after: usize| after.saturating_sub(before) as f64 / max as f64;
            let busy = sockets_busy.map(per);
            println!(
                "  footprint: {:.2} connections per idle instance, {} after a tick of {max} \
                 instances × {} jobs",
                per(idle),
                busy.map_or("n/a".into(), |b| format!("{b:.2}")),
                jobs.last().copied().unwrap_or(0)
            );
            self.row.insert("connections_per_idle_instance".into(), round(per(idle), 2));
            self.row.insert(
                "connections_per_instance_after_herd".into(),
                busy.map_or(Value::Null, |b| round(b, 2)),
            );
        }
        self.row.insert("b4".into(), Value::Array(rows));
        self.row.insert("b4_share".into(), Value::Array(shares));
    }

    /// B2, B3 and the round trips of a networked provider: `node` builds an instance (its own
    /// client or pool) from a server URL, given `url` for B2's contenders and `url` with its
    /// address swapped for the proxy's for the round trips; B3 runs on `provider`.
    pub fn contention<F, Fut>(
        &mut self,
        url: &str,
        provider: Arc<dyn LockProvider>,
        upstream: Option<SocketAddr>,
        node: F,
    ) where
        F: Fn(String) -> Fut,
        Fut: Future<Output = Arc<dyn LockProvider>>,
    {
        self.contention_fleet(url, provider, upstream, &node, &node);
    }

    /// [`contention`](Self::contention), B4's batch path on instances from `fleet` (the same
    /// client configured as a fleet's instance would be, e.g. a pool of one connection beside
    /// the provider's own), the rest on instances from `node`.
    pub fn contention_fleet<F, Fut, G, GFut>(
        &mut self,
        url: &str,
        provider: Arc<dyn LockProvider>,
        upstream: Option<SocketAddr>,
        node: &F,
        fleet: &G,
    ) where
        F: Fn(String) -> Fut,
        Fut: Future<Output = Arc<dyn LockProvider>>,
        G: Fn(String) -> GFut,
        GFut: Future<Output = Arc<dyn LockProvider>>,
    {
        self.b2(|| node(url.to_owned()));
        self.b3(provider);
        let per_job = |u: String| Box::pin(node(u)) as herd::Building<'_>;
        let batch = |u: String| Box::pin(fleet(u)) as herd::Building<'_>;
        let (per_job, batch): (&herd::MakeNode<'_>, &herd::MakeNode<'_>) = (&per_job, &batch);
        let of = move |path: Path| match path {
            Path::PerJob => per_job,
            Path::Batch => batch,
        };
        let via: Option<(SocketAddr, CensusVia<'_>)> = upstream.map(|addr| {
            let via: CensusVia<'_> = Box::new(move |path: Path, a: SocketAddr| {
                Box::pin(of(path)(shedlock_test_support::url_via(url, a))) as herd::Building<'_>
            });
            (addr, via)
        });
        self.b4_with(|path| of(path)(url.to_owned()), via);
        self.round_trips(upstream, |a| node(shedlock_test_support::url_via(url, a)));
    }

    /// No round trips to count: an embedded backend (`why` says so in the summary).
    pub fn no_round_trips(&mut self, why: &str) {
        self.row.insert("round_trips_note".into(), json!(why));
    }

    /// Ends the run: prints the row and, unless in the test size, writes it to
    /// `<out>/<provider>.json`.
    ///
    /// # Panics
    /// If the row cannot be written.
    #[allow(clippy::expect_used)]
    pub fn finish(mut self) {
        self.row.insert("notes".into(), json!(self.notes));
        let row = Value::Object(self.row);
        if self.size == Size::Test {
            return;
        }
        let dir = out_dir();
        std::fs::create_dir_all(&dir).expect("the bench output directory");
        let path = dir.join(format!("{}.json", self.provider));
        let text = serde_json::to_string_pretty(&row).expect("a JSON row");
        std::fs::write(&path, text + "\n").expect("the bench row");
        println!("zoo: wrote {}", path.display());
    }
}

/// B2's paced variant on `nodes` for `run_for`: each contender tries once every [`PACE`], at
/// its own phase, a winner unlocking at once. Successful acquisitions per second and the p99
/// attempt latency (µs).
#[allow(clippy::expect_used, clippy::panic)]
async fn paced(nodes: &[Arc<dyn LockProvider>], run_for: Duration) -> (f64, f64) {
    let config = cfg(&unique(&format!("b2p-{}", nodes.len())));
    let held = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let deadline = started + run_for;
    let mut tasks = Vec::with_capacity(nodes.len());
    for (k, p) in nodes.iter().enumerate() {
        let (p, config, held) = (p.clone(), config.clone(), held.clone());
        let phase = PACE * u32::try_from(k).unwrap_or(0) / u32::try_from(nodes.len()).unwrap_or(1);
        tasks.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at((started + phase).into(), PACE);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let (mut wins, mut lat) = (0u64, Vec::new());
            loop {
                ticks.tick().await;
                if Instant::now() >= deadline {
                    break;
                }
                let s = Instant::now();
                let got = p.try_lock(&config).await.expect("try_lock");
                lat.push(s.elapsed());
                if let Some(lock) = got {
                    assert!(!held.swap(true, Ordering::SeqCst), "two contenders held the name");
                    wins += 1;
                    held.store(false, Ordering::SeqCst);
                    lock.unlock().await.expect("unlock");
                }
            }
            (wins, lat)
        }));
    }
    let (mut wins, mut lat) = (0u64, Vec::new());
    for t in tasks {
        let (w, l) = t.await.expect("a paced contender");
        wins += w;
        lat.extend(l);
    }
    (wins as f64 / started.elapsed().as_secs_f64(), latency(lat).p99)
}

/// The sockets this process has open (`/proc/self/fd` entries that are sockets): a provider
/// instance's connections, counted from the client's side. `None` off Linux.
fn open_sockets() -> Option<usize> {
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
    Some(
        dir.flatten()
            .filter(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"))
            })
            .count(),
    )
}

/// This process's resident memory in bytes (`/proc/self/statm`, 4 KiB pages). `None` off
/// Linux.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// B4's lock configs of one size: `jobs` names from `base`, held at most [`AT_MOST`], at least
/// `at_least`.
#[allow(clippy::expect_used)]
fn herd_configs(base: &str, jobs: usize, at_least: Duration) -> Arc<Vec<LockConfig>> {
    Arc::new(
        (0..jobs)
            .map(|i| {
                LockConfig::new(format!("{base}-{i}"), AT_MOST, at_least)
                    .expect("a valid lock config")
            })
            .collect(),
    )
}

/// `$SHEDLOCK_BENCH_OUT`, else `target/bench` of the workspace.
pub fn out_dir() -> PathBuf {
    match std::env::var_os("SHEDLOCK_BENCH_OUT") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles_of_a_hundred_samples_are_the_50th_and_99th() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile_us(&v, 50.0), 50.0);
        assert_eq!(percentile_us(&v, 99.0), 99.0);
        assert_eq!(percentile_us(&v[..1], 99.0), 1.0);
        assert!(percentile_us(&[], 50.0).is_nan());
    }
}

//! `cargo xtask bench`: runs the zoo's benchmarks (`benches/`, one bench target per provider,
//! with the peer crates), then merges the rows they wrote into a summary under
//! `<target dir>/bench/`: `summary.md`, `summary.json`, `summary.svg` (B1 p50/p99 per
//! provider; B2 acquisitions per second against contenders) and `herd.svg` (B4: the decision
//! time of a cron tick against the fleet size). `--record` copies the four into `benches/`:
//! after the whole zoo (`--all`), or after some providers when every other one has a full-size
//! row from an earlier run (the summary's "measured" line then spans both).
//!
//! Each bench target starts its backend itself (`shedlock-launcher`) and fails with the
//! launcher's install hint when it cannot. A provider's old row is deleted before its run, so a
//! run that failed leaves no number behind: the summary lists it as not measured, and the command
//! fails.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
};

use serde_json::{Value, json};

use crate::util::{cargo, code_of, root, take_flag, take_value, target_dir};

/// B2's contender counts, as the bench crate measures them.
const CONTENDERS: [u64; 4] = [1, 4, 16, 64];
/// The target for B1's provider / raw ratio.
const B1_RATIO_TARGET: f64 = 1.10;

/// The bench targets of `benches/Cargo.toml`, in file order (one per provider).
fn bench_targets(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_bench = false;
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_bench = t == "[[bench]]";
        } else if in_bench
            && let Some((k, v)) = t.split_once('=')
            && k.trim() == "name"
        {
            out.push(v.trim().trim_matches('"').to_owned());
        }
    }
    out
}

/// `cargo xtask bench [--provider <a,b,..> | --all] [--quick] [--record] [-- <criterion args>]`.
pub fn run(args: &[String]) -> Result<u8, String> {
    let (mut args, extra): (Vec<String>, Vec<String>) = match args.iter().position(|a| a == "--") {
        Some(i) => (args[..i].to_vec(), args[i + 1..].to_vec()),
        None => (args.to_vec(), Vec::new()),
    };
    let quick = take_flag(&mut args, "--quick");
    let record = take_flag(&mut args, "--record");
    let all = take_flag(&mut args, "--all");
    let wanted = take_value(&mut args, "--provider")?;
    if let Some(a) = args.first() {
        return Err(format!("bench: unexpected argument {a:?}"));
    }
    let manifest_path = root().join("benches/Cargo.toml");
    let manifest = std::fs::read_to_string(&manifest_path)
        .map_err(|e| format!("{}: {e}", manifest_path.display()))?;
    let known = bench_targets(&manifest);
    let selected: Vec<String> = match (&wanted, all) {
        (Some(_), true) => return Err("bench: --provider and --all exclude each other".into()),
        (Some(list), false) => {
            let mut v = Vec::new();
            for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let name = if name == "mysql" { "mariadb" } else { name };
                if !known.iter().any(|k| k == name) {
                    return Err(format!(
                        "bench: no benchmark for provider {name:?}; known: {}",
                        known.join(" ")
                    ));
                }
                v.push(name.to_owned());
            }
            v
        }
        (None, _) => known.clone(),
    };
    let out = target_dir().join("bench");
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    if record && selected.len() != known.len() {
        // A part of the zoo may be recorded only when every other provider already has a
        // full-size row from an earlier run (the summary then spans both runs, and says when).
        let earlier = read_rows(&out, &known)?;
        let lacking: Vec<&str> = known
            .iter()
            .filter(|k| !selected.contains(k))
            .filter(|k| earlier.get(*k).and_then(|v| text(v, "size")) != Some("full"))
            .map(String::as_str)
            .collect();
        if !lacking.is_empty() || quick {
            return Err(format!(
                "bench: --record with --provider needs a full-size row of every other provider \
                 from an earlier run (missing: {}); or run the whole zoo (--all)",
                if quick { "a full-size run (not --quick)".to_owned() } else { lacking.join(" ") }
            ));
        }
    }
    for p in &selected {
        let row = out.join(format!("{p}.json"));
        if row.exists() {
            std::fs::remove_file(&row).map_err(|e| format!("{}: {e}", row.display()))?;
        }
    }

    let mut cmd = cargo();
    cmd.args(["bench", "-p", "shedlock-benches", "--features", "peers", "--no-fail-fast"]);
    for p in &selected {
        cmd.args(["--bench", p]);
    }
    cmd.arg("--");
    if quick {
        cmd.args(["--warm-up-time", "0.5", "--measurement-time", "1", "--sample-size", "10"]);
        cmd.env("SHEDLOCK_BENCH_QUICK", "1");
    }
    cmd.args(&extra);
    cmd.env("SHEDLOCK_BENCH_OUT", &out);
    eprintln!(
        "xtask: cargo bench -p shedlock-benches --features peers ({}; {})",
        selected.join(" "),
        if quick { "quick" } else { "full" }
    );
    let started = std::time::Instant::now();
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    eprintln!("xtask: benchmarks finished in {:.0} s", started.elapsed().as_secs_f64());

    let rows = read_rows(&out, &known)?;
    let missing: Vec<&String> = selected.iter().filter(|p| !rows.contains_key(*p)).collect();
    let summary = Summary::new(&rows, &known);
    for (name, text) in [
        ("summary.md", summary.markdown()),
        ("summary.json", summary.json()),
        ("summary.svg", summary.svg()),
        ("herd.svg", summary.herd_svg()),
    ] {
        let path = out.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    println!("{}", summary.markdown());
    eprintln!("xtask: summary in {}", out.join("summary.md").display());
    if !missing.is_empty() || code_of(status) != 0 {
        eprintln!(
            "xtask: bench failed; not measured: {}",
            missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ")
        );
        return Ok(1);
    }
    if record {
        for name in ["summary.md", "summary.json", "summary.svg", "herd.svg"] {
            let to = root().join("benches").join(name);
            std::fs::copy(out.join(name), &to).map_err(|e| format!("{}: {e}", to.display()))?;
            eprintln!("xtask: recorded {}", to.display());
        }
    }
    Ok(0)
}

/// The rows `<out>/<provider>.json` of the known providers.
fn read_rows(out: &Path, known: &[String]) -> Result<BTreeMap<String, Value>, String> {
    let mut rows = BTreeMap::new();
    for p in known {
        let path: PathBuf = out.join(format!("{p}.json"));
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        rows.insert(p.clone(), v);
    }
    Ok(rows)
}

/// The merged rows, in the bench crate's provider order.
struct Summary<'a> {
    rows: Vec<(&'a str, &'a Value)>,
    missing: Vec<&'a str>,
}

fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

fn text<'v>(v: &'v Value, key: &str) -> Option<&'v str> {
    v.get(key).and_then(Value::as_str)
}

/// A number for a table cell: three significant digits at most, `–` when absent.
fn cell(x: Option<f64>) -> String {
    match x {
        None => "–".into(),
        Some(x) if x >= 100.0 => format!("{x:.0}"),
        Some(x) if x >= 10.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.2}"),
    }
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cpus} cores ({model})")
}

impl<'a> Summary<'a> {
    fn new(rows: &'a BTreeMap<String, Value>, known: &'a [String]) -> Self {
        let mut present = Vec::new();
        let mut missing = Vec::new();
        for p in known {
            match rows.get(p) {
                Some(v) => present.push((p.as_str(), v)),
                None => missing.push(p.as_str()),
            }
        }
        Self { rows: present, missing }
    }

    fn markdown(&self) -> String {
        let mut s = String::new();
        s.push_str("# Benchmark summary\n\n");
        s.push_str(
            "Generated by `cargo xtask bench` from the rows the benchmarks wrote (never by hand). \
             Every backend runs natively on 127.0.0.1; latencies are single cycles measured \
             interleaved with the raw floor and the peer (see `benches/src/zoo.rs`). Three \
             servers are stand-ins, not the service: MongoDB is SecantusDB (a pure-Python server \
             on WiredTiger), DynamoDB is dynalite (Node.js), S3 is moto (Python). Their B1 ratios \
             compare the provider with the same requests by hand on the same stand-in, but their \
             B2 to B4 figures (and the herd sizes they time out or are skipped at) are the \
             stand-in's throughput, not the cloud service's or mongod's. The herd runs every \
             instance in this one process, under one open-file limit (`ulimit -n`): a size with \
             more connections in flight than that fails on \"Too many open files\", which \
             separate processes would not.\n\n",
        );
        let sizes: Vec<&str> = self.rows.iter().filter_map(|(_, v)| text(v, "size")).collect();
        let _ = writeln!(s, "- machine: {}", machine());
        let _ = writeln!(
            s,
            "- size: {}",
            if sizes.iter().all(|z| *z == "full") { "full" } else { "quick (short runs)" }
        );
        if let (Some(first), Some(last)) = (
            self.rows.iter().filter_map(|(_, v)| text(v, "measured_at")).min(),
            self.rows.iter().filter_map(|(_, v)| text(v, "measured_at")).max(),
        ) {
            let _ = writeln!(s, "- measured: {first} to {last}");
        }
        if !self.missing.is_empty() {
            let _ =
                writeln!(s, "- **not measured** (failed or not run): {}", self.missing.join(", "));
        }
        s.push_str("\n## B1: one uncontended try_lock + unlock cycle\n\n");
        s.push_str(
            "| provider | B1 p50 µs | B1 p99 µs | raw p50 µs | B1 / raw | client CPU µs B1 / raw \
             | server CPU µs B1 / raw | round trips acquire / release | peer | peer p50 µs | B1 / \
             peer |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for (p, v) in &self.rows {
            let rt = match (num(v, "round_trips_acquire"), num(v, "round_trips_release")) {
                (Some(a), Some(r)) => format!("{a:.2} / {r:.2}"),
                _ => text(v, "round_trips_note").unwrap_or("–").to_owned(),
            };
            let peer_ratio = match (num(v, "b1_p50_us"), num(v, "peer_p50_us")) {
                (Some(b), Some(q)) => cell(Some(b / q)),
                _ => "–".into(),
            };
            let pair = |b: &str, r: &str| match (num(v, b), num(v, r)) {
                (Some(b), Some(r)) => format!("{} / {}", cell(Some(b)), cell(Some(r))),
                _ => "–".into(),
            };
            let cpu = pair("b1_cpu_us", "raw_cpu_us");
            let server = pair("b1_server_cpu_us", "raw_server_cpu_us");
            let _ = writeln!(
                s,
                "| {p} | {} | {} | {} | {} | {cpu} | {server} | {rt} | {} | {} | {peer_ratio} |",
                cell(num(v, "b1_p50_us")),
                cell(num(v, "b1_p99_us")),
                cell(num(v, "raw_p50_us")),
                cell(num(v, "b1_ratio")),
                text(v, "peer").unwrap_or("–"),
                cell(num(v, "peer_p50_us")),
            );
        }
        s.push_str(
            "\nCPU per cycle, read around the same interleaved batches: **client** is the whole \
             bench process (every thread: the caller, the runtime's workers, a client's own \
             threads; for SQLite also the database, which runs in-process; \
             `CLOCK_PROCESS_CPUTIME_ID`), **server** the server's processes and their children, \
             every thread (the scheduler's run times in `/proc`; background work during the \
             batch included, so a slower row carries a little more of it; – where the server \
             is not a native process of the launcher). Where the two cores are the limit, a row \
             that costs more CPU is slower by about that much.\n",
        );
        s.push_str(
            "\nRaw floors (what the provider sends, issued by hand on the same client):\n\n",
        );
        for (p, v) in &self.rows {
            let _ = writeln!(s, "- {p}: {}", text(v, "raw").unwrap_or("–"));
        }
        let extras: Vec<(&str, &Value)> = self
            .rows
            .iter()
            .flat_map(|(p, v)| {
                v.get("b1_extras")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(move |e| (*p, e))
            })
            .collect();
        if !extras.is_empty() {
            s.push_str("\nFurther variants, measured in the same interleaved pass:\n\n");
            s.push_str(
                "| provider | variant | p50 µs | p99 µs | client CPU µs | server CPU µs |\n\
                 |---|---|---|---|---|---|\n",
            );
            for (p, e) in extras {
                let _ = writeln!(
                    s,
                    "| {p} | {} | {} | {} | {} | {} |",
                    text(e, "label").unwrap_or("?"),
                    cell(num(e, "p50_us")),
                    cell(num(e, "p99_us")),
                    cell(num(e, "cpu_us")),
                    cell(num(e, "server_cpu_us"))
                );
            }
        }
        s.push_str(
            "\n## B2: contention on one name (a stress test), B3: 1 000 names\n\nB2 is a stress \
             test, not a workload: N contenders, each its own instance (client or pool), race \
             for one name in tight loops, the winner releasing at once; no scheduler does this, \
             and the curve shows where a backend's contention handling gives out. Beside it, \
             **paced**: each contender tries once every 10 ms at its own phase, as frequent \
             schedulers would. B3: one instance acquires 1 000 names (16 in flight), then \
             releases them all; cycles per second. The workload fleets run is B4.\n\n",
        );
        s.push_str("| provider |");
        for n in CONTENDERS {
            let _ = write!(s, " B2 acq/s ×{n} |");
        }
        s.push_str(
            " B2 attempts/s ×64 | B2 attempt p99 µs ×64 | backend calls/s ×1 → ×64 | paced \
             acq/s ×64 | paced attempt p99 µs ×64 | B3 cycles/s |\n|---|",
        );
        for _ in CONTENDERS {
            s.push_str("---|");
        }
        s.push_str("---|---|---|---|---|---|\n");
        for (p, v) in &self.rows {
            let _ = write!(s, "| {p} |");
            for n in CONTENDERS {
                let _ = write!(s, " {} |", cell(num(v, &format!("b2_acq_per_s_{n}"))));
            }
            let at64 = b2_at(v, 64);
            let calls = match (calls_per_s(v, 1), calls_per_s(v, 64)) {
                (Some(a), Some(b)) => format!("{} → {}", cell(Some(a)), cell(Some(b))),
                _ => "–".into(),
            };
            let _ = writeln!(
                s,
                " {} | {} | {calls} | {} | {} | {} |",
                cell(at64.and_then(|r| num(r, "attempts_per_s"))),
                cell(at64.and_then(|r| num(r, "attempt_p99_us"))),
                cell(at64.and_then(|r| num(r, "paced_acq_per_s"))),
                cell(at64.and_then(|r| num(r, "paced_attempt_p99_us"))),
                cell(num(v, "b3_cycles_per_s")),
            );
        }
        s.push_str(&self.herd());
        s.push_str("\n## Targets\n\n");
        for line in self.targets() {
            let _ = writeln!(s, "- {line}");
        }
        s.push_str("\n## Notes\n\n");
        for (p, v) in &self.rows {
            for n in v.get("notes").and_then(Value::as_array).into_iter().flatten() {
                if let Some(n) = n.as_str() {
                    let _ = writeln!(s, "- {p}: {n}");
                }
            }
        }
        s
    }

    /// B4's section: per provider, (instances, jobs) and path, the decision time, the winners'
    /// start latency, the calls per tick, the census (connections and requests per instance),
    /// the fitted growth per path, and the share.
    fn herd(&self) -> String {
        let mut s = String::from(
            "\n## B4: the cron-tick herd\n\nAt each tick every instance of a service (each its \
             own client or pool) asks for every job due at that tick, at the same instant, by \
             one of two paths, each on instances of its own: **per job**, one `try_lock` per job, \
             each its own task (a scheduler without batching, as ShedLock does), and **batch**, \
             one `try_lock_many` of every due job per instance (a coalescing `Scheduler`), its \
             wins released at most two at a time. The winner runs its task and unlocks, its \
             record kept for `lock_at_least_for` (3 s, or 1.5 times the tick the path's rate on \
             the smaller sizes predicts, plus 1 s) so that late deciders find the job done; a \
             few ticks per size, each on names of its own, exactly one winner per job and tick \
             checked. *Decided* is the \
             time from the tick to the last instance's answer; *winner starts* is from the tick \
             to each winning answer. Calls per tick are provider calls (per job: N × J \
             `try_lock` and J `unlock`; batch: N `try_lock_many` and J `unlock`). Where the \
             server is reached over TCP, one more tick per size and path runs on instances that \
             each connect through a proxy of their own (the census, untimed): *connections* is \
             the most connections any one instance had open at once during that tick, \
             *requests* the mean client→server turnarounds per instance in it (lock requests, \
             releases, and whatever the client sends besides, such as a pool's pings). A size \
             whose calls failed shows the error; a size that the path's rate in the sizes before \
             puts above 30 s per tick is skipped, and says so. Growth: the least-squares slope \
             of the median decision time per 100 instances (at the largest job count measured \
             at two fleet sizes or more) and per 100 jobs (at the largest fleet measured at two \
             job counts or more), each with the size it was fitted at.\n\n| provider | path | \
             instances × jobs | decided p50 ms | decided p99 ms | winner starts p50 ms | winner \
             starts p99 ms | calls/tick | connections per instance, peak | requests per \
             instance |\n|---|---|---|---|---|---|---|---|---|---|\n",
        );
        let ms = |v: Option<f64>| v.map(|us| us / 1000.0);
        let mut growth = Vec::new();
        for (p, v) in &self.rows {
            let Some(rows) = v.get("b4").and_then(Value::as_array) else { continue };
            for r in rows {
                let path = path_label(r);
                let size = herd_size(r);
                if let Some(e) = text(r, "error") {
                    let _ = writeln!(s, "| {p} | {path} | {size} | failed: {e} | | | | | | |");
                    continue;
                }
                if let Some(why) = text(r, "skipped") {
                    let _ = writeln!(s, "| {p} | {path} | {size} | skipped: {why} | | | | | | |");
                    continue;
                }
                let census = match text(r, "census_error") {
                    Some(e) => format!("census failed: {e} | |"),
                    None => format!(
                        "{} | {}",
                        cell(num(r, "connections_per_instance_peak")),
                        cell(num(r, "requests_per_instance_per_tick"))
                    ),
                };
                let _ = writeln!(
                    s,
                    "| {p} | {path} | {size} | {} | {} | {} | {} | {} | {census} |",
                    cell(ms(num(r, "decide_p50_us"))),
                    cell(ms(num(r, "decide_p99_us"))),
                    cell(ms(num(r, "winner_start_p50_us"))),
                    cell(ms(num(r, "winner_start_p99_us"))),
                    cell(num(r, "calls_per_tick")),
                );
            }
            for path in PATHS {
                let of: Vec<Value> =
                    rows.iter().filter(|r| path_label(r) == path).cloned().collect();
                if of.is_empty() {
                    continue;
                }
                let g = herd_growth(&of);
                let at = |fixed: Option<f64>, what: &str| {
                    fixed.map_or(String::new(), |f| format!(" (at {f} {what})"))
                };
                growth.push(format!(
                    "- {p}, {path}: {} ms per 100 instances{}, {} ms per 100 jobs{}",
                    cell(ms(g.per_100_instances.map(|(v, _)| v))),
                    at(g.per_100_instances.map(|(_, j)| j), "jobs"),
                    cell(ms(g.per_100_jobs.map(|(v, _)| v))),
                    at(g.per_100_jobs.map(|(_, n)| n), "instances"),
                ));
            }
        }
        if growth.is_empty() {
            s.push_str("| (not measured in this run) | | | | | | | | | |\n");
        } else {
            s.push_str("\nGrowth of the median decision time:\n\n");
            s.push_str(&growth.join("\n"));
            s.push('\n');
        }
        s.push_str(&self.share());
        s.push_str(&self.footprint());
        s
    }

    /// B4's share: instances running a `Scheduler` with a capacity, each job a 50 ms task.
    fn share(&self) -> String {
        let mut s = String::from(
            "\n### B4's share: the work of a tick spread over the fleet\n\nEach instance runs a \
             `Scheduler` with a capacity of 1.5 times its fair share of the jobs \
             (`with_capacity`), every job a 50 ms task on one cron schedule, for a few fire \
             times; every job ran exactly once per fire time, checked. *Max share* is the \
             busiest instance's runs divided by the fair share (1.00 is a perfect spread); *most \
             at once* the most tasks one instance ran at the same time (never above its \
             capacity).\n\n| provider | instances × jobs | capacity | fire times | max share | \
             most at once | runs per instance, least–most |\n|---|---|---|---|---|---|---|\n",
        );
        let mut any = false;
        for (p, v) in &self.rows {
            let Some(rows) = v.get("b4_share").and_then(Value::as_array) else { continue };
            for r in rows {
                any = true;
                let size = herd_size(r);
                if let Some(e) = text(r, "error") {
                    let _ = writeln!(s, "| {p} | {size} | failed: {e} | | | | |");
                    continue;
                }
                let runs: Vec<f64> = r
                    .get("runs_per_instance")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_f64).collect())
                    .unwrap_or_default();
                let least = runs.iter().copied().fold(f64::INFINITY, f64::min);
                let most = runs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let _ = writeln!(
                    s,
                    "| {p} | {size} | {} | {} | {} | {} | {}–{} |",
                    cell(num(r, "capacity")),
                    cell(num(r, "ticks")),
                    num(r, "max_share").map_or("–".into(), |m| format!("{m:.2}")),
                    cell(num(r, "most_running_at_once")),
                    cell(least.is_finite().then_some(least)),
                    cell(most.is_finite().then_some(most)),
                );
            }
        }
        if !any {
            s.push_str("| (not measured in this run) | | | | | | |\n");
        }
        s
    }

    /// The footprint section: connections per instance and the resident memory of held locks.
    fn footprint(&self) -> String {
        let mut s = String::from(
            "\n## Footprint\n\nConnections a provider instance keeps open, counted as this \
             process's sockets (`/proc/self/fd`): after one lock cycle (idle), and after a B4 \
             tick of the largest fleet and job count. Resident memory this process gains while \
             one instance holds B3's 1 000 names (the client's side; the backend's memory is its \
             own), and per held lock.\n\n| provider | connections per idle instance | \
             connections per instance after a herd tick | resident KiB holding 1 000 names | \
             resident bytes per held lock |\n|---|---|---|---|---|\n",
        );
        let mut any = false;
        for (p, v) in &self.rows {
            let cells = [
                num(v, "connections_per_idle_instance"),
                num(v, "connections_per_instance_after_herd"),
                num(v, "rss_growth_held_bytes").map(|b| b / 1024.0),
                num(v, "rss_per_held_lock_bytes"),
            ];
            if cells.iter().all(Option::is_none) {
                continue;
            }
            any = true;
            let _ = writeln!(
                s,
                "| {p} | {} | {} | {} | {} |",
                cell(cells[0]),
                cell(cells[1]),
                cell(cells[2]),
                cell(cells[3])
            );
        }
        if !any {
            s.push_str("| (not measured in this run) | | | | |\n");
        }
        s
    }

    /// The targets, checked against the rows: one line per miss, or one saying all met.
    fn targets(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (p, v) in &self.rows {
            if *p != "memory"
                && let Some(r) = num(v, "b1_ratio")
                && r > B1_RATIO_TARGET
            {
                out.push(format!("{p}: B1 / raw = {r:.2}, above the {B1_RATIO_TARGET:.2} target"));
            }
            if let (Some(b), Some(q)) = (num(v, "b1_p50_us"), num(v, "peer_p50_us"))
                && q < b
            {
                out.push(format!(
                    "{p}: the peer ({}) is faster, {:.2} × the provider's p50 (see its note)",
                    text(v, "peer").unwrap_or("?"),
                    q / b
                ));
            }
            if let (Some(one), Some(many)) = (num(v, "b2_acq_per_s_1"), num(v, "b2_acq_per_s_64"))
                && many < one
            {
                let why = match (calls_per_s(v, 1), calls_per_s(v, 64)) {
                    (Some(a), Some(b)) if b >= a * 0.8 => format!(
                        ": the backend still answers {b:.0} calls/s (against {a:.0} with one \
                         contender), but 63 losers' attempts queue ahead of each release"
                    ),
                    (Some(a), Some(b)) => {
                        format!(": backend calls/s fell too, {a:.0} → {b:.0}")
                    }
                    _ => String::new(),
                };
                out.push(format!(
                    "{p}: B2 with 64 contenders ({many:.0}/s) is below one contender \
                     ({one:.0}/s){why}"
                ));
            }
        }
        out.extend(self.fleet_targets());
        if out.is_empty() {
            out.push(format!(
                "all met: B1 / raw ≤ {B1_RATIO_TARGET:.2} (memory, the reference model, \
                 excepted), no peer faster, no B2 collapse at 64 contenders; B4's batch path: \
                 no size failed, 128 × 1000 decided within its target, at most \
                 {FLEET_CONNECTIONS} connections per instance, max share ≤ {FLEET_MAX_SHARE:.1}"
            ));
        }
        out
    }

    /// B4's targets for the batch path (issue 40), one line per miss: no size fails or is
    /// skipped on the providers named in [`FLEET_DECIDE_TARGETS`], each decides 128 × 1 000
    /// within its target, no instance of any provider opens more than [`FLEET_CONNECTIONS`]
    /// connections in a tick, and the share stays within [`FLEET_MAX_SHARE`].
    fn fleet_targets(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (p, v) in &self.rows {
            let target = FLEET_DECIDE_TARGETS.iter().find(|(q, _)| q == p).map(|&(_, t)| t);
            let rows = v.get("b4").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
            for r in rows.iter().filter(|r| path_label(r) == "batch") {
                let (n, j) = (num(r, "instances").unwrap_or(0.0), num(r, "jobs").unwrap_or(0.0));
                if target.is_some()
                    && let Some(e) = text(r, "error").or_else(|| text(r, "skipped"))
                {
                    out.push(format!("{p}: B4 batch {n} × {j} did not run: {e}"));
                }
                if let (Some(t), Some(us)) = (target, num(r, "decide_p50_us"))
                    && n >= 128.0
                    && j >= 1000.0
                    && us > t * 1e6
                {
                    out.push(format!(
                        "{p}: B4 batch {n} × {j} decided in p50 {:.2} s, above its {t} s target",
                        us / 1e6
                    ));
                }
                if let Some(c) = num(r, "connections_per_instance_peak")
                    && c > FLEET_CONNECTIONS
                {
                    out.push(format!(
                        "{p}: B4 batch {n} × {j}: an instance had {c} connections open at once, \
                         above {FLEET_CONNECTIONS}"
                    ));
                }
            }
            let shares = v.get("b4_share").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
            for r in shares {
                let (n, j) = (num(r, "instances").unwrap_or(0.0), num(r, "jobs").unwrap_or(0.0));
                if let Some(e) = text(r, "error") {
                    out.push(format!("{p}: B4 share {n} × {j} failed: {e}"));
                } else if let Some(m) = num(r, "max_share")
                    && m > FLEET_MAX_SHARE
                {
                    out.push(format!(
                        "{p}: B4 share {n} × {j}: max share {m:.2}, above {FLEET_MAX_SHARE:.1}"
                    ));
                }
            }
        }
        out
    }

    fn json(&self) -> String {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|(_, v)| {
                let mut v = (*v).clone();
                if let Some(b4) = v.get("b4").and_then(Value::as_array) {
                    let side = |f: Option<(f64, f64)>, at: &str| {
                        f.map(|(us, fixed)| json!({"decide_us_per_100": us.round(), at: fixed}))
                    };
                    let mut growth = serde_json::Map::new();
                    for path in PATHS {
                        let of: Vec<Value> =
                            b4.iter().filter(|r| path_label(r) == path).cloned().collect();
                        let g = herd_growth(&of);
                        growth.insert(
                            path.into(),
                            json!({
                                "per_100_instances": side(g.per_100_instances, "at_jobs"),
                                "per_100_jobs": side(g.per_100_jobs, "at_instances"),
                            }),
                        );
                    }
                    v["b4_growth"] = Value::Object(growth);
                }
                v
            })
            .collect();
        let v = json!({
            "generated_by": "cargo xtask bench",
            "machine": machine(),
            "not_measured": self.missing,
            "targets": self.targets(),
            "rows": rows,
        });
        serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
    }

    /// Two panels: B1 p50 and p99 per provider (bars, log scale), and B2 acquisitions per second
    /// against contenders (one line per provider, log scale).
    fn svg(&self) -> String {
        const W: f64 = 1100.0;
        const H: f64 = 480.0;
        const COLORS: [&str; 12] = [
            "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
            "#bcbd22", "#17becf", "#393b79", "#637939",
        ];
        let mut s = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
             viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"11\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
        );
        // Panel 1: B1, log10 µs on x, one row per provider.
        let (x0, x1, y0) = (110.0, 520.0, 50.0);
        let row_h = ((H - 90.0) / self.rows.len().max(1) as f64).min(34.0);
        let b1: Vec<(f64, f64)> = self
            .rows
            .iter()
            .map(|(_, v)| (num(v, "b1_p50_us").unwrap_or(0.0), num(v, "b1_p99_us").unwrap_or(0.0)))
            .collect();
        let hi = b1.iter().map(|b| b.1).fold(10.0, f64::max).log10().ceil();
        let lo = b1.iter().map(|b| b.0).filter(|x| *x > 0.0).fold(1e9, f64::min).log10().floor();
        let lo = lo.min(hi - 1.0);
        let xs = |us: f64| x0 + (us.max(1e-3).log10() - lo) / (hi - lo) * (x1 - x0);
        let _ = writeln!(
            s,
            "<text x=\"{x0}\" y=\"24\" font-size=\"14\" font-weight=\"bold\">B1: try_lock + \
             unlock, µs (log scale): p50 bar, p99 whisker</text>"
        );
        let bottom = y0 + row_h * self.rows.len() as f64;
        let mut d = lo;
        while d <= hi {
            let x = xs(10f64.powf(d));
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{y0}\" x2=\"{x:.1}\" y2=\"{bottom:.1}\" stroke=\"#ddd\"/>\
                 <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                bottom + 14.0,
                cell(Some(10f64.powf(d)))
            );
            d += 1.0;
        }
        for (i, ((p, _), (p50, p99))) in self.rows.iter().zip(&b1).enumerate() {
            let y = y0 + row_h * i as f64;
            let c = COLORS[i % COLORS.len()];
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{p}</text>\
                 <rect x=\"{x0}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{c}\"/>\
                 <line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\">{} / {}</text>",
                x0 - 6.0,
                y + row_h * 0.6,
                y + row_h * 0.2,
                (xs(*p50) - x0).max(0.0),
                row_h * 0.6,
                xs(*p50),
                y + row_h * 0.5,
                xs(*p99),
                y + row_h * 0.5,
                xs(*p99) + 4.0,
                y + row_h * 0.6,
                cell(Some(*p50)),
                cell(Some(*p99)),
            );
        }
        // Panel 2: B2, contenders (log2) on x, acquisitions/s (log10) on y.
        let (px0, px1, py0, py1) = (640.0, 1000.0, 50.0, H - 60.0);
        let series: Vec<(&str, Vec<(u64, f64)>)> = self
            .rows
            .iter()
            .map(|(p, v)| {
                let pts = CONTENDERS
                    .iter()
                    .filter_map(|n| num(v, &format!("b2_acq_per_s_{n}")).map(|a| (*n, a)))
                    .filter(|(_, a)| *a > 0.0)
                    .collect();
                (*p, pts)
            })
            .collect();
        let all: Vec<f64> = series.iter().flat_map(|(_, v)| v.iter().map(|p| p.1)).collect();
        let yhi = all.iter().copied().fold(10.0, f64::max).log10().ceil();
        let ylo = all.iter().copied().fold(1e12, f64::min).log10().floor().min(yhi - 1.0);
        let x_of = |n: u64| px0 + (n as f64).log2() / 6.0 * (px1 - px0);
        let y_of = |a: f64| py1 - (a.log10() - ylo) / (yhi - ylo) * (py1 - py0);
        let _ = writeln!(
            s,
            "<text x=\"{px0}\" y=\"24\" font-size=\"14\" font-weight=\"bold\">B2: acquisitions/s \
             (log) against contenders on one name</text>"
        );
        let mut d = ylo;
        while d <= yhi {
            let y = y_of(10f64.powf(d));
            let _ = writeln!(
                s,
                "<line x1=\"{px0}\" y1=\"{y:.1}\" x2=\"{px1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                px0 - 4.0,
                y + 4.0,
                cell(Some(10f64.powf(d)))
            );
            d += 1.0;
        }
        for n in CONTENDERS {
            let x = x_of(n);
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{py0}\" x2=\"{x:.1}\" y2=\"{py1}\" stroke=\"#eee\"/>\
                 <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{n}</text>",
                py1 + 14.0
            );
        }
        for (i, (p, pts)) in series.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let path: Vec<String> =
                pts.iter().map(|(n, a)| format!("{:.1},{:.1}", x_of(*n), y_of(*a))).collect();
            let _ = writeln!(
                s,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"2\"/>",
                path.join(" ")
            );
            if let Some((n, a)) = pts.last() {
                let _ = writeln!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{c}\">{p}</text>",
                    x_of(*n) + 6.0,
                    y_of(*a) + 4.0
                );
            }
        }
        s.push_str("</svg>\n");
        s
    }
}

impl Summary<'_> {
    /// B4: the median time from a tick to its last decision (ms, log scale) against the number
    /// of instances (log scale), per provider at its largest job count: a solid line for the
    /// batch path, a dashed one for per job.
    fn herd_svg(&self) -> String {
        const W: f64 = 760.0;
        const H: f64 = 500.0;
        let (x0, x1, y0, y1) = (80.0, 560.0, 50.0, H - 60.0);
        // (provider, path, its largest job count, (instances, median decision ms) points).
        type Series<'s> = (&'s str, &'static str, f64, Vec<(f64, f64)>);
        let mut series: Vec<Series<'_>> = Vec::new();
        for (p, v) in &self.rows {
            let Some(rows) = v.get("b4").and_then(Value::as_array) else { continue };
            for path in PATHS {
                let ok: Vec<&Value> = rows
                    .iter()
                    .filter(|r| path_label(r) == path && r.get("decide_p50_us").is_some())
                    .collect();
                let jobs = ok.iter().filter_map(|r| num(r, "jobs")).fold(f64::NAN, f64::max);
                let mut pts: Vec<(f64, f64)> = ok
                    .iter()
                    .filter(|r| num(r, "jobs") == Some(jobs))
                    .filter_map(|r| Some((num(r, "instances")?, num(r, "decide_p50_us")? / 1000.0)))
                    .filter(|(_, d)| *d > 0.0)
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                if !pts.is_empty() {
                    series.push((p, path, jobs, pts));
                }
            }
        }
        let all: Vec<f64> = series.iter().flat_map(|s| s.3.iter().map(|p| p.1)).collect();
        let yhi = all.iter().copied().fold(1.0, f64::max).log10().ceil();
        let ylo = all.iter().copied().fold(1e9, f64::min).log10().floor().min(yhi - 1.0);
        let xhi = series.iter().flat_map(|s| s.3.iter().map(|p| p.0)).fold(2.0, f64::max).log2();
        let x_of = |n: f64| x0 + n.log2() / xhi * (x1 - x0);
        let y_of = |d: f64| y1 - (d.log10() - ylo) / (yhi - ylo) * (y1 - y0);
        let mut s = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
             viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"11\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{x0}\" y=\"24\" font-size=\"14\" font-weight=\"bold\">B4: a cron tick's \
             median decision time, ms (log), against instances (log), at each provider's \
             largest job count</text>\n\
             <text x=\"{x0}\" y=\"40\">solid: one try_lock_many per instance (batch); dashed: \
             one try_lock per job</text>\n"
        );
        let mut d = ylo;
        while d <= yhi {
            let y = y_of(10f64.powf(d));
            let _ = writeln!(
                s,
                "<line x1=\"{x0}\" y1=\"{y:.1}\" x2=\"{x1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                x0 - 4.0,
                y + 4.0,
                cell(Some(10f64.powf(d)))
            );
            d += 1.0;
        }
        let mut n: f64 = 1.0;
        while n.log2() <= xhi + 1e-9 {
            let x = x_of(n);
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{y0}\" x2=\"{x:.1}\" y2=\"{y1}\" stroke=\"#eee\"/>\
                 <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{n}</text>",
                y1 + 14.0
            );
            n *= 2.0;
        }
        const COLORS: [&str; 12] = [
            "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
            "#bcbd22", "#17becf", "#393b79", "#637939",
        ];
        let providers: Vec<&str> = {
            let mut v: Vec<&str> = series.iter().map(|s| s.0).collect();
            v.dedup();
            v
        };
        for (p, path, jobs, pts) in &series {
            let i = providers.iter().position(|q| q == p).unwrap_or(0);
            let c = COLORS[i % COLORS.len()];
            let (dash, what) = if *path == "batch" {
                ("", "batch")
            } else {
                (" stroke-dasharray=\"5,4\"", "per job")
            };
            let line: Vec<String> =
                pts.iter().map(|(n, d)| format!("{:.1},{:.1}", x_of(*n), y_of(*d))).collect();
            let _ = writeln!(
                s,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"2\"{dash}/>",
                line.join(" ")
            );
            if let Some((n, d)) = pts.last() {
                let _ = writeln!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{c}\">{p} {what} ({jobs} jobs)</text>",
                    x_of(*n) + 6.0,
                    y_of(*d) + 4.0
                );
            }
        }
        if series.is_empty() {
            let _ =
                writeln!(s, "<text x=\"{x0}\" y=\"{:.1}\">not measured</text>", (y0 + y1) / 2.0);
        }
        s.push_str("</svg>\n");
        s
    }
}

/// Calls the backend answered per second in B2 at `n` contenders: every attempt, plus the
/// release of every win.
/// B4's batch path at 128 × 1 000: the most seconds its median decision may take, per provider
/// (issue 40; the stand-ins report what they reach).
const FLEET_DECIDE_TARGETS: [(&str, f64); 8] = [
    ("postgres", 1.0),
    ("mariadb", 1.0),
    ("redis", 1.0),
    ("memcached", 1.0),
    ("sqlite", 3.0),
    ("nats", 3.0),
    ("etcd", 3.0),
    ("zookeeper", 3.0),
];
/// The most connections one instance may open during a batch tick.
const FLEET_CONNECTIONS: f64 = 2.0;
/// The most the busiest instance of the share may run, in fair shares.
const FLEET_MAX_SHARE: f64 = 2.0;

/// A B4 row's size, `N × J`.
fn herd_size(row: &Value) -> String {
    format!(
        "{} × {}",
        num(row, "instances").unwrap_or(f64::NAN),
        num(row, "jobs").unwrap_or(f64::NAN)
    )
}

/// B4's paths, as the rows name them.
const PATHS: [&str; 2] = ["per_job", "batch"];

/// A B4 row's path (rows without one predate the batch path: per job).
fn path_label(row: &Value) -> &str {
    text(row, "path").unwrap_or("per_job")
}

/// B4's growth: the least-squares slope of the median decision time (µs) per 100 instances, at
/// the largest job count with two or more measured fleet sizes, and per 100 jobs, at the largest
/// fleet with two or more measured job counts; each with the size it was fitted at. A size that
/// failed or was skipped has no point.
struct Growth {
    per_100_instances: Option<(f64, f64)>,
    per_100_jobs: Option<(f64, f64)>,
}

fn herd_growth(rows: &[Value]) -> Growth {
    let ok: Vec<&Value> = rows.iter().filter(|r| num(r, "decide_p50_us").is_some()).collect();
    let fit = |fixed: &str, x: &str| -> Option<(f64, f64)> {
        let mut levels: Vec<f64> = ok.iter().filter_map(|r| num(r, fixed)).collect();
        levels.sort_by(|a, b| b.total_cmp(a));
        levels.dedup();
        levels.into_iter().find_map(|at| {
            let points: Vec<(f64, f64)> = ok
                .iter()
                .filter(|r| num(r, fixed) == Some(at))
                .filter_map(|r| Some((num(r, x)?, num(r, "decide_p50_us")?)))
                .collect();
            slope(&points).map(|s| (s * 100.0, at))
        })
    };
    Growth { per_100_instances: fit("jobs", "instances"), per_100_jobs: fit("instances", "jobs") }
}

/// The least-squares slope of `points`; `None` with fewer than two distinct x.
fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    let (mx, my) =
        (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (points.len() >= 2 && sxx > 0.0).then(|| sxy / sxx)
}

fn calls_per_s(v: &Value, n: u64) -> Option<f64> {
    let r = b2_at(v, n)?;
    Some(num(r, "attempts_per_s")? + num(r, "acq_per_s")?)
}

fn b2_at(v: &Value, n: u64) -> Option<&Value> {
    v.get("b2")?.as_array()?.iter().find(|r| r.get("contenders").and_then(Value::as_u64) == Some(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_targets_are_read_from_the_bench_sections_only() {
        let m = "[package]\nname = \"shedlock-benches\"\n\n[[bench]]\nname = \"memory\"\n\
                 harness = false\n\n[dependencies]\nname = \"x\"\n\n[[bench]]\nname = \"redis\"\n";
        assert_eq!(bench_targets(m), ["memory", "redis"]);
    }

    fn row(p: &str, ratio: f64, peer: Option<f64>, b2: (f64, f64)) -> Value {
        let mut v = json!({
            "provider": p, "size": "full", "b1_p50_us": 100.0, "b1_p99_us": 150.0,
            "raw_p50_us": 100.0 / ratio, "b1_ratio": ratio,
            "b2_acq_per_s_1": b2.0, "b2_acq_per_s_64": b2.1,
        });
        if let Some(q) = peer {
            v["peer"] = json!("peer-crate");
            v["peer_p50_us"] = json!(q);
        }
        v
    }

    #[test]
    fn targets_flag_a_slow_ratio_a_faster_peer_and_a_b2_collapse_and_nothing_else() {
        let known: Vec<String> = ["memory", "redis", "postgres", "nats"].map(String::from).into();
        let mut rows = BTreeMap::new();
        rows.insert("memory".into(), row("memory", 3.0, None, (10.0, 20.0)));
        rows.insert("redis".into(), row("redis", 1.05, Some(120.0), (10.0, 20.0)));
        rows.insert("postgres".into(), row("postgres", 1.2, Some(60.0), (10.0, 5.0)));
        let s = Summary::new(&rows, &known);
        let t = s.targets();
        assert_eq!(t.len(), 3, "{t:?}");
        assert!(t[0].starts_with("postgres: B1 / raw = 1.20"), "{t:?}");
        assert!(t[1].starts_with("postgres: the peer (peer-crate) is faster, 0.60"), "{t:?}");
        assert!(t[2].starts_with("postgres: B2 with 64 contenders (5/s)"), "{t:?}");
        assert_eq!(s.missing, ["nats"]);
        let md = s.markdown();
        assert!(md.contains("**not measured** (failed or not run): nats"), "{md}");
        assert!(md.contains("| redis | 100 | 150 | 95.2 | 1.05 |"), "{md}");
        assert!(s.svg().starts_with("<svg") && s.svg().contains(">postgres<"));
        assert!(md.contains("| (not measured in this run) |"), "{md}");
    }

    #[test]
    fn the_herd_growth_is_fitted_at_the_largest_size_with_two_measured_points() {
        assert_eq!(slope(&[(1.0, 10.0), (2.0, 12.0), (3.0, 14.0)]), Some(2.0));
        assert_eq!(slope(&[(5.0, 1.0)]), None);
        assert_eq!(slope(&[(5.0, 1.0), (5.0, 2.0)]), None);
        let row = |n: u64, j: u64, d: f64| json!({"instances": n, "jobs": j, "decide_p50_us": d});
        let rows = [
            row(1, 1, 100.0),
            row(1, 100, 300.0),
            row(8, 1, 170.0),
            row(8, 100, 1000.0),
            row(1, 1000, 5000.0),
            json!({"instances": 8, "jobs": 1000, "error": "too many requests"}),
            json!({"instances": 32, "jobs": 100, "skipped": "over budget"}),
        ];
        let g = herd_growth(&rows);
        // 1 000 jobs has one measured fleet size; at 100 jobs: 300 µs at 1 instance, 1 000 µs
        // at 8: 100 µs per instance.
        assert_eq!(g.per_100_instances, Some((10_000.0, 100.0)));
        // At 8 instances: 170 µs at 1 job, 1 000 µs at 100: 830 / 99 µs per job.
        let (per_job, at) = g.per_100_jobs.unwrap();
        assert!((per_job - 83_000.0 / 99.0).abs() < 1e-6 && at == 8.0);
    }

    #[test]
    fn the_herd_section_shows_each_size_and_path_its_failures_the_growth_and_the_share() {
        let known: Vec<String> = ["postgres"].map(String::from).into();
        let mut v = row("postgres", 1.2, None, (10.0, 20.0));
        v["b4"] = json!([
            {"instances": 1, "jobs": 100, "decide_p50_us": 2000.0, "decide_p99_us": 2500.0,
             "winner_start_p50_us": 900.0, "winner_start_p99_us": 1500.0, "calls_per_tick": 200},
            {"path": "batch", "instances": 1, "jobs": 100, "decide_p50_us": 1000.0,
             "decide_p99_us": 1200.0, "winner_start_p50_us": 900.0, "winner_start_p99_us": 1100.0,
             "calls_per_tick": 101, "connections_per_instance_peak": 1,
             "requests_per_instance_per_tick": 101.0},
            {"path": "per_job", "instances": 8, "jobs": 100, "decide_p50_us": 9000.0,
             "decide_p99_us": 9500.0, "winner_start_p50_us": 1000.0,
             "winner_start_p99_us": 2000.0, "calls_per_tick": 900,
             "connections_per_instance_peak": 5, "requests_per_instance_per_tick": 190.5},
            {"path": "batch", "instances": 128, "jobs": 1000, "decide_p50_us": 1_500_000.0,
             "decide_p99_us": 1_600_000.0, "winner_start_p50_us": 1000.0,
             "winner_start_p99_us": 2000.0, "calls_per_tick": 1128,
             "connections_per_instance_peak": 3, "requests_per_instance_per_tick": 9.8},
            {"instances": 128, "jobs": 100, "error": "too many connections"},
        ]);
        v["b4_share"] = json!([
            {"instances": 8, "jobs": 100, "capacity": 19, "ticks": 3, "max_share": 1.41,
             "most_running_at_once": 19, "runs_per_instance": [30, 35, 40, 42, 38, 40, 37, 38]},
            {"instances": 32, "jobs": 1000, "error": "job 3 ran 2 times at fire time 0"},
        ]);
        v["connections_per_idle_instance"] = json!(1.0);
        v["connections_per_instance_after_herd"] = json!(10.0);
        v["rss_growth_held_bytes"] = json!(2_048_000.0);
        v["rss_per_held_lock_bytes"] = json!(2048.0);
        let mut rows = BTreeMap::new();
        rows.insert("postgres".into(), v);
        let s = Summary::new(&rows, &known);
        let md = s.markdown();
        assert!(
            md.contains(
                "| postgres | per_job | 8 × 100 | 9.00 | 9.50 | 1.00 | 2.00 | 900 | 5.00 | 190 |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| postgres | batch | 1 × 100 | 1.00 | 1.20 | 0.90 | 1.10 | 101 | 1.00 |"),
            "{md}"
        );
        assert!(
            md.contains("| postgres | per_job | 128 × 100 | failed: too many connections |"),
            "{md}"
        );
        // Per job at 100 jobs: 2 ms at 1 instance, 9 ms at 8 (128 failed): 1 ms per instance.
        assert!(
            md.contains(
                "- postgres, per_job: 100 ms per 100 instances (at 100 jobs), – ms per 100 jobs\n"
            ),
            "{md}"
        );
        assert!(
            md.contains("| postgres | 8 × 100 | 19.0 | 3.00 | 1.41 | 19.0 | 30.0–42.0 |"),
            "{md}"
        );
        assert!(
            md.contains("| postgres | 32 × 1000 | failed: job 3 ran 2 times at fire time 0 |"),
            "{md}"
        );
        assert!(md.contains("| postgres | 1.00 | 10.0 | 2000 | 2048 |"), "{md}");
        let targets = s.targets().join("\n");
        assert!(
            targets.contains(
                "postgres: B4 batch 128 × 1000 decided in p50 1.50 s, above its 1 s target"
            ),
            "{targets}"
        );
        assert!(
            targets.contains("an instance had 3 connections open at once, above 2"),
            "{targets}"
        );
        assert!(targets.contains("postgres: B4 share 32 × 1000 failed"), "{targets}");
        assert!(
            !targets.contains("8 × 100: an instance had"),
            "per job is not held to it: {targets}"
        );
        let svg = s.herd_svg();
        assert!(svg.starts_with("<svg") && svg.contains(">postgres per job (100 jobs)<"), "{svg}");
        assert!(svg.contains(">postgres batch (1000 jobs)<"), "{svg}");
    }
}

//! Runs the workspace's test binaries, several at once.
//!
//! `cargo test` runs one test binary after another. Most of this workspace's test time is spent
//! waiting (a lease running out, a server restarting, a C28 node process sleeping), not
//! computing, so `cargo xtask test` builds every test binary with one `cargo test --no-run` and
//! then runs them itself, [`jobs`] at a time, as cargo would run each one: the same binaries
//! (libs, bins, integration tests, benches in test mode; examples are only built), from the
//! package's directory, with the package's `CARGO_*` variables and the caller's arguments.
//! Each binary's output is kept apart and printed in one block when it ends. The providers'
//! conformance suites run first, only beside each other (they mostly wait; the kit's CPU-heavy
//! self-tests beside them slowed a suite's timing enough to fail C19 once), then the rest; in
//! each phase the slowest start first, by the times remembered in
//! `target/xtask-test/durations.json`.
//!
//! The *coarse* suites (a provider whose recorded report declares a granularity of a second or
//! more: memcached, NATS, etcd) are nearly half of all test time, yet their margins are whole
//! seconds, so a busy machine does not disturb them; they run in lanes of their own
//! ([`coarse_jobs`]) beside both phases instead of taking turns with the others.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    fs,
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::util::{cargo, code_of, target_dir};

/// One test binary, as cargo built it.
#[derive(Debug, Clone)]
pub struct TestBinary {
    /// `shedlock-postgres`.
    pub package: String,
    /// The package's version.
    pub version: String,
    /// The package's directory (cargo runs tests from there).
    pub manifest_dir: PathBuf,
    /// `lib`, `bin`, `test` or `bench`.
    pub kind: String,
    /// The target name: `conformance`, `it`, the crate name for a lib.
    pub target: String,
    /// The executable.
    pub executable: PathBuf,
    /// One suite of a conformance binary of several (see [`by_suite`]): the harness arguments
    /// that select it. `None`: the whole binary.
    pub suite: Option<SuiteSelection>,
}

/// The arguments that select one suite of a conformance binary: its name as a filter
/// (`memcached::`), and a `--skip` for every other suite whose tests the filter would also match
/// (`redis-valkey::` contains `valkey::`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuiteSelection {
    /// The suite's name.
    pub name: String,
    /// The other suites' `<name>::` prefixes that contain this one's.
    pub skip: Vec<String>,
}

impl SuiteSelection {
    /// The harness arguments.
    fn args(&self) -> Vec<String> {
        let mut args = vec![format!("{}::", self.name)];
        for s in &self.skip {
            args.extend(["--skip".to_owned(), s.clone()]);
        }
        args
    }
}

impl TestBinary {
    /// `shedlock-postgres/test/conformance` (and `::postgres-secure` for one suite of it):
    /// unique in the workspace, and the key of its remembered duration.
    pub fn id(&self) -> String {
        let id = format!("{}/{}/{}", self.package, self.kind, self.target);
        match &self.suite {
            Some(s) => format!("{id}::{}", s.name),
            None => id,
        }
    }
}

/// How many timing suites run at once: `SHEDLOCK_TEST_JOBS`, else 2 (they wait on leases far
/// more than they compute; 1 runs them one after another, as `cargo test` does). The other
/// binaries run at most two at a time. Three at once on this 2-core machine made a ZooKeeper
/// `try_lock` take 720 ms against C07's 300 ms lease (the core then refuses the late grant, and
/// the check fails): the suites' timing margins are reasoned for two.
pub fn jobs() -> usize {
    std::env::var("SHEDLOCK_TEST_JOBS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(2)
}

/// How many coarse suites ([`coarse_suites`]) run at once, beside the others:
/// `SHEDLOCK_TEST_COARSE_JOBS`, else 2 (their 2 215 s on this machine then end before the
/// others' ~2 500 s at two at a time; 0 runs them with the other suites instead).
pub fn coarse_jobs() -> usize {
    std::env::var("SHEDLOCK_TEST_COARSE_JOBS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(2)
}

/// The least granularity, in ms, that makes a suite coarse.
const COARSE_GRANULARITY_MS: u64 = 1000;

/// The suites whose committed report (`conformance/reports/<suite>.json`, written by the kit
/// from a real run) declares a granularity of [`COARSE_GRANULARITY_MS`] or more: their checks'
/// margins are scaled from it, so they tolerate a loaded machine far better than the rest.
pub fn coarse_suites(reports: &Path) -> BTreeSet<String> {
    let Ok(entries) = fs::read_dir(reports) else { return BTreeSet::new() };
    entries
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            if path.extension().and_then(|x| x.to_str()) != Some("json") {
                return None;
            }
            let report: Value = serde_json::from_str(&fs::read_to_string(&path).ok()?).ok()?;
            let g = report.pointer("/capabilities/granularity_ms")?.as_u64()?;
            let name = report.get("provider")?.as_str()?;
            (g >= COARSE_GRANULARITY_MS).then(|| name.to_owned())
        })
        .collect()
}

/// Splits the timing suites into the coarse ones (a suite job named in `coarse`) and the rest,
/// keeping each part's order.
pub fn split_coarse(
    suites: Vec<TestBinary>,
    coarse: &BTreeSet<String>,
) -> (Vec<TestBinary>, Vec<TestBinary>) {
    suites.into_iter().partition(|b| b.suite.as_ref().is_some_and(|s| coarse.contains(&s.name)))
}

/// Whether `cargo test` runs the artifact of a `compiler-artifact` message: every executable
/// built as a test (libs, bins, harness tests and benches), and every `test` or `bench` target
/// built without the test harness; examples are only built.
fn is_run_by_cargo_test(msg: &Value) -> bool {
    let has_exe = msg.get("executable").is_some_and(|e| !e.is_null());
    let as_test = msg.pointer("/profile/test").and_then(Value::as_bool) == Some(true);
    let kinds: Vec<&str> = msg
        .pointer("/target/kind")
        .and_then(Value::as_array)
        .map(|k| k.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    has_exe && (as_test || kinds.iter().any(|k| *k == "test" || *k == "bench"))
}

/// Parses cargo's JSON messages into the binaries `cargo test` would run.
pub fn binaries_from_messages(stdout: &str) -> Vec<TestBinary> {
    let mut out = Vec::new();
    for line in stdout.lines() {
        let Ok(msg) = serde_json::from_str::<Value>(line) else { continue };
        if msg.get("reason").and_then(Value::as_str) != Some("compiler-artifact")
            || !is_run_by_cargo_test(&msg)
        {
            continue;
        }
        let s = |p: &str| msg.pointer(p).and_then(Value::as_str).unwrap_or_default().to_owned();
        let manifest = PathBuf::from(s("/manifest_path"));
        // A package id is `path+file:///dir#name@version` (or `…#version` when the directory
        // is the name).
        let id = s("/package_id");
        let tail = id.rsplit('#').next().unwrap_or_default();
        let version = tail.rsplit('@').next().unwrap_or_default().to_owned();
        let kind =
            msg.pointer("/target/kind/0").and_then(Value::as_str).unwrap_or_default().to_owned();
        let package = package_name(&manifest).unwrap_or_else(|| s("/target/name"));
        out.push(TestBinary {
            package,
            version,
            manifest_dir: manifest.parent().map(Path::to_path_buf).unwrap_or_default(),
            kind,
            target: s("/target/name"),
            executable: PathBuf::from(s("/executable")),
            suite: None,
        });
    }
    out
}

/// The `name` of `[package]` in a manifest (read as text: one line `name = "…"`).
fn package_name(manifest: &Path) -> Option<String> {
    let text = fs::read_to_string(manifest).ok()?;
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(rest) = line.strip_prefix("name") {
            let value = rest.trim_start().strip_prefix('=')?.trim().trim_matches('"');
            return Some(value.to_owned());
        }
    }
    None
}

/// Builds every test binary of `cargo_args` (e.g. `test --workspace --all-targets`) without
/// running it. Compiler messages go to the terminal as usual.
pub fn build(cargo_args: &[&str]) -> Result<Vec<TestBinary>, String> {
    let out = cargo()
        .args(cargo_args)
        .args(["--no-run", "--message-format", "json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Rendered diagnostics arrive as JSON too; show them.
    for line in stdout.lines() {
        if let Ok(msg) = serde_json::from_str::<Value>(line)
            && msg.get("reason").and_then(Value::as_str) == Some("compiler-message")
            && let Some(r) = msg.pointer("/message/rendered").and_then(Value::as_str)
        {
            eprint!("{r}");
        }
    }
    if !out.status.success() {
        return Err(format!("building the tests failed ({})", out.status));
    }
    Ok(binaries_from_messages(&stdout))
}

fn durations_file() -> PathBuf {
    target_dir().join("xtask-test").join("durations.json")
}

/// The committed duration table: what a full `cargo xtask test` on the project's 2-core
/// machine measured, so that a fresh clone starts the longest binaries first too. Refreshed by
/// `cargo xtask durations` after a full run.
pub fn committed_file() -> PathBuf {
    crate::util::root().join("xtask").join("durations.json")
}

fn read_times(path: &Path) -> BTreeMap<String, f64> {
    fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<BTreeMap<String, f64>>(&t).ok())
        .unwrap_or_default()
}

/// The run times, in seconds, by [`TestBinary::id`]: the committed table, overridden by what
/// this checkout's earlier runs measured (`<target>/xtask-test/durations.json`).
pub fn remembered() -> BTreeMap<String, f64> {
    let mut times = read_times(&committed_file());
    times.extend(read_times(&durations_file()));
    times
}

/// `cargo xtask durations`: writes this checkout's measured times (of binaries that still
/// exist in the committed table or were measured here) to the committed table, rounded to the
/// second.
pub fn record_durations() -> Result<u8, String> {
    let measured = read_times(&durations_file());
    if measured.is_empty() {
        return Err(format!(
            "no measured times in {}: run `cargo xtask test` first",
            durations_file().display()
        ));
    }
    let mut table = read_times(&committed_file());
    for (id, secs) in measured {
        table.insert(id, secs.round());
    }
    let text = serde_json::to_string_pretty(&table).map_err(|e| e.to_string())?;
    fs::write(committed_file(), text + "\n")
        .map_err(|e| format!("writing {}: {e}", committed_file().display()))?;
    eprintln!("xtask: {} times written to {}", table.len(), committed_file().display());
    Ok(0)
}

/// The suites of a conformance binary (`<suite>::<check>: test` lines of `--list`), in order.
fn suites_listed(listing: &str) -> Vec<String> {
    let mut suites: Vec<String> = Vec::new();
    for line in listing.lines() {
        if let Some((suite, _)) = line.strip_suffix(": test").and_then(|t| t.split_once("::"))
            && !suites.iter().any(|s| s == suite)
        {
            suites.push(suite.to_owned());
        }
    }
    suites
}

/// One [`TestBinary`] per suite of `bin`, when its listing names two or more; else `bin`.
fn split_by_suite(bin: TestBinary, listing: &str) -> Vec<TestBinary> {
    let suites = suites_listed(listing);
    if suites.len() < 2 {
        return vec![bin];
    }
    suites
        .iter()
        .map(|name| {
            let prefix = format!("{name}::");
            let skip = suites
                .iter()
                .filter(|o| *o != name)
                .map(|o| format!("{o}::"))
                .filter(|o| o.contains(&prefix))
                .collect();
            TestBinary { suite: Some(SuiteSelection { name: name.clone(), skip }), ..bin.clone() }
        })
        .collect()
}

/// The binaries to run, with every provider conformance binary of several suites run as one
/// job per suite: its suites then run beside each other (each sets up only its own), and the
/// longest binary (memcached: two suites of 1 s granularity) no longer sets the run's length.
/// A binary whose listing fails is run whole.
pub fn by_suite(bins: Vec<TestBinary>) -> Vec<TestBinary> {
    let mut out = Vec::new();
    for bin in bins {
        if !(is_suite(&bin) && bin.package != "shedlock-conformance") {
            out.push(bin);
            continue;
        }
        let listing = Command::new(&bin.executable)
            .arg("--list")
            .current_dir(&bin.manifest_dir)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output();
        match listing {
            Ok(o) if o.status.success() => {
                out.extend(split_by_suite(bin, &String::from_utf8_lossy(&o.stdout)));
            }
            _ => out.push(bin),
        }
    }
    out
}

/// The kit's own timing suites: the whole catalogue against the memory provider and the toy
/// TCP server, and C28/C29 across node processes. They wait on leases as the providers' suites
/// do, and must not share the machine with the CPU-heavy self-tests either.
const KIT_TIMING_SUITES: &[&str] = &["memory", "toy", "process_skew"];

/// Whether `bin` is a suite of timing checks that mostly waits: a provider's conformance
/// harness (`tests/conformance*.rs`, no libtest harness), or one of the kit's
/// [`KIT_TIMING_SUITES`].
fn is_suite(bin: &TestBinary) -> bool {
    bin.kind == "test"
        && (bin.target.starts_with("conformance")
            || (bin.package == "shedlock-conformance"
                && KIT_TIMING_SUITES.contains(&bin.target.as_str())))
}

/// The order to start `bins` in, as two phases: first the providers' conformance suites, which
/// mostly wait and so share the machine well with each other, then everything else (the kit's
/// own tests include CPU-heavy model and fuzz runs, which would slow a suite's timing checks).
/// Within a phase the slowest start first, by the remembered times; a binary never seen before
/// counts as slow when it is a suite and as quick otherwise.
pub fn schedule(
    bins: Vec<TestBinary>,
    times: &BTreeMap<String, f64>,
) -> (Vec<TestBinary>, Vec<TestBinary>) {
    let estimate = |b: &TestBinary| {
        times.get(&b.id()).copied().unwrap_or(if is_suite(b) { 120.0 } else { 10.0 })
    };
    let (mut suites, mut rest): (Vec<_>, Vec<_>) = bins.into_iter().partition(is_suite);
    for phase in [&mut suites, &mut rest] {
        phase.sort_by(|a, b| estimate(b).total_cmp(&estimate(a)).then_with(|| a.id().cmp(&b.id())));
    }
    (suites, rest)
}

/// What one binary did.
#[derive(Debug)]
pub struct Finished {
    /// The binary.
    pub bin: TestBinary,
    /// Its exit code (128 + signal when killed).
    pub code: u8,
    /// How long it ran.
    pub took: Duration,
}

/// Runs `bins`, `jobs` at a time, each with `args` and the extra environment `env`; stops
/// starting new ones once `stop` is set. Returns what every started binary did; `total` is the
/// number of binaries of the whole run (for the progress lines), `before` how many ran earlier.
pub fn run_all(
    bins: Vec<TestBinary>,
    (before, total): (usize, usize),
    jobs: usize,
    args: &[String],
    env: &[(String, String)],
    stop: &AtomicBool,
) -> Vec<Finished> {
    let logs = target_dir().join("xtask-test").join("logs");
    let _ = fs::create_dir_all(&logs);
    let queue = Mutex::new(bins.into_iter().collect::<VecDeque<_>>());
    let done = Mutex::new(Vec::<Finished>::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            s.spawn(|| {
                loop {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let next = queue.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
                    let Some(bin) = next else { break };
                    let finished = run_one(bin, args, env, &logs);
                    let mut done = done.lock().unwrap_or_else(PoisonError::into_inner);
                    done.push(finished);
                    let f = done.last().map(|f| (f.bin.id(), f.code, f.took));
                    if let Some((id, code, took)) = f {
                        let verdict = if code == 0 { "ok" } else { "FAILED" };
                        eprintln!(
                            "xtask: [{}/{total}] {id}: {verdict} in {:.1} s",
                            before + done.len(),
                            took.as_secs_f64()
                        );
                    }
                }
            });
        }
    });
    done.into_inner().unwrap_or_else(PoisonError::into_inner)
}

/// Adds this run's times to the remembered ones (called once, after every lane ended).
pub fn remember(done: &[Finished]) {
    let mut times = remembered();
    for f in done {
        times.insert(f.bin.id(), f.took.as_secs_f64());
    }
    if let Ok(text) = serde_json::to_string_pretty(&times) {
        let path = durations_file();
        if let Some(dir) = path.parent() {
            let _ = fs::create_dir_all(dir);
        }
        let _ = fs::write(path, text);
    }
}

/// Runs one binary as cargo would, its output (stdout and stderr, interleaved as written) into a
/// log file that is printed in one block when it ends.
fn run_one(bin: TestBinary, args: &[String], env: &[(String, String)], logs: &Path) -> Finished {
    let log_path = logs.join(format!("{}.log", bin.id().replace('/', "__")));
    let began = Instant::now();
    let code = match fs::File::create(&log_path).and_then(|f| Ok((f.try_clone()?, f))) {
        Err(e) => {
            eprintln!("xtask: cannot create {}: {e}", log_path.display());
            1
        }
        Ok((out, err)) => {
            let mut cmd = Command::new(&bin.executable);
            if let Some(suite) = &bin.suite {
                cmd.args(suite.args());
            }
            cmd.args(args)
                .current_dir(&bin.manifest_dir)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .env("CARGO_MANIFEST_DIR", &bin.manifest_dir)
                .env("CARGO_MANIFEST_PATH", bin.manifest_dir.join("Cargo.toml"))
                .env("CARGO_PKG_NAME", &bin.package)
                .env("CARGO_PKG_VERSION", &bin.version)
                .env("CARGO_CRATE_NAME", bin.target.replace('-', "_"))
                .env("CARGO_TARGET_DIR", target_dir())
                .envs(env.iter().map(|(k, v)| (k, v)));
            match cmd.status() {
                Ok(status) => code_of(status),
                Err(e) => {
                    eprintln!("xtask: cannot run {}: {e}", bin.executable.display());
                    1
                }
            }
        }
    };
    let took = began.elapsed();
    let mut text = String::new();
    if let Ok(mut f) = fs::File::open(&log_path) {
        let _ = f.read_to_string(&mut text);
    }
    let rule = "-".repeat(78);
    eprintln!(
        "\n{rule}\n{} ({}, {:.1} s, exit {code}):\n{rule}\n{text}",
        bin.id(),
        bin.executable.display(),
        took.as_secs_f64()
    );
    Finished { bin, code, took }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact(kind: &str, name: &str, test: bool, exe: Option<&str>) -> String {
        serde_json::json!({
            "reason": "compiler-artifact",
            "package_id": "path+file:///w/providers/postgres#shedlock-postgres@0.1.0",
            "manifest_path": "/nonexistent/providers/postgres/Cargo.toml",
            "target": {"kind": [kind], "name": name},
            "profile": {"test": test},
            "executable": exe,
        })
        .to_string()
    }

    #[test]
    fn cargo_test_runs_tests_benches_and_test_profiles_but_not_examples_or_libraries() {
        let lines = [
            artifact("lib", "shedlock_postgres", true, Some("/t/lib-test")),
            artifact("lib", "shedlock_postgres", false, None),
            artifact("test", "conformance", false, Some("/t/conformance")),
            artifact("test", "it", true, Some("/t/it")),
            artifact("bench", "zoo", false, Some("/t/zoo")),
            artifact("example", "demo", false, Some("/t/demo")),
            r#"{"reason":"build-finished","success":true}"#.to_owned(),
            "not json".to_owned(),
        ]
        .join("\n");
        let bins = binaries_from_messages(&lines);
        let ids: Vec<String> = bins.iter().map(TestBinary::id).collect();
        // The manifest cannot be read here: the package falls back to the target name; the
        // version comes from the package id.
        assert_eq!(
            ids,
            [
                "shedlock_postgres/lib/shedlock_postgres",
                "conformance/test/conformance",
                "it/test/it",
                "zoo/bench/zoo"
            ]
        );
        assert!(bins.iter().all(|b| b.version == "0.1.0"));
        assert_eq!(bins[1].manifest_dir, Path::new("/nonexistent/providers/postgres"));
    }

    #[test]
    fn suites_run_first_and_within_a_phase_the_slowest_start_first() {
        let bin = |package: &str, kind: &str, target: &str| TestBinary {
            package: package.into(),
            version: "0.1.0".into(),
            manifest_dir: PathBuf::new(),
            kind: kind.into(),
            target: target.into(),
            executable: PathBuf::new(),
            suite: None,
        };
        let bins = vec![
            bin("a", "lib", "a"),
            bin("b", "test", "it"),
            bin("c", "test", "conformance"),
            bin("d", "test", "conformance"),
            bin("e", "test", "conformance"),
        ];
        let times = BTreeMap::from([
            ("b/test/it".to_owned(), 300.0),
            ("d/test/conformance".to_owned(), 5.0),
            ("e/test/conformance".to_owned(), 400.0),
        ]);
        let (suites, rest) = schedule(bins, &times);
        let ids = |v: &[TestBinary]| v.iter().map(TestBinary::id).collect::<Vec<_>>();
        // c was never timed: a suite counts as slow (120 s).
        assert_eq!(
            ids(&suites),
            ["e/test/conformance", "c/test/conformance", "d/test/conformance"]
        );
        assert_eq!(ids(&rest), ["b/test/it", "a/lib/a"]);
    }

    #[test]
    fn coarse_suites_are_read_from_the_reports_granularity_and_split_off_in_order() {
        let dir = std::env::temp_dir().join(format!("xtask-coarse-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let report = |name: &str, g: u64| {
            serde_json::json!({"provider": name, "capabilities": {"granularity_ms": g}}).to_string()
        };
        fs::write(dir.join("memcached.json"), report("memcached", 2000)).unwrap();
        fs::write(dir.join("etcd-secure.json"), report("etcd-secure", 1000)).unwrap();
        fs::write(dir.join("postgres.json"), report("postgres", 1)).unwrap();
        fs::write(dir.join("memcached.md"), "not json").unwrap();
        fs::write(dir.join("broken.json"), "{").unwrap();
        let coarse = coarse_suites(&dir);
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(
            coarse.iter().map(String::as_str).collect::<Vec<_>>(),
            ["etcd-secure", "memcached"]
        );

        let job = |suite: Option<&str>| TestBinary {
            package: "p".into(),
            version: "0.1.0".into(),
            manifest_dir: PathBuf::new(),
            kind: "test".into(),
            target: "conformance".into(),
            executable: PathBuf::new(),
            suite: suite.map(|n| SuiteSelection { name: n.into(), skip: Vec::new() }),
        };
        let suites = vec![
            job(Some("memcached")),
            job(Some("postgres")),
            job(None),
            job(Some("etcd-secure")),
        ];
        let (c, f) = split_coarse(suites, &coarse);
        let ids = |v: &[TestBinary]| v.iter().map(TestBinary::id).collect::<Vec<_>>();
        assert_eq!(ids(&c), ["p/test/conformance::memcached", "p/test/conformance::etcd-secure"]);
        assert_eq!(ids(&f), ["p/test/conformance::postgres", "p/test/conformance"]);
    }

    #[test]
    fn the_committed_reports_make_memcached_nats_and_etcd_coarse_and_postgres_not() {
        let coarse = coarse_suites(&crate::util::root().join("conformance").join("reports"));
        for name in ["memcached", "memcached-secure", "nats", "nats-secure", "etcd", "etcd-secure"]
        {
            assert!(coarse.contains(name), "{name} not coarse: {coarse:?}");
        }
        for name in ["postgres", "zookeeper", "redis", "sqlite"] {
            assert!(!coarse.contains(name), "{name} coarse");
        }
    }

    #[test]
    fn the_kits_timing_suites_run_in_the_first_phase() {
        let bin = |target: &str| TestBinary {
            package: "shedlock-conformance".into(),
            version: "0.1.0".into(),
            manifest_dir: PathBuf::new(),
            kind: "test".into(),
            target: target.into(),
            executable: PathBuf::new(),
            suite: None,
        };
        let (suites, rest) = schedule(
            ["memory", "toy", "process_skew", "it"].into_iter().map(bin).collect(),
            &BTreeMap::new(),
        );
        let targets = |v: &[TestBinary]| v.iter().map(|b| b.target.clone()).collect::<Vec<_>>();
        assert_eq!(targets(&suites), ["memory", "process_skew", "toy"]);
        assert_eq!(targets(&rest), ["it"]);
    }

    #[test]
    fn a_binary_of_several_suites_runs_as_one_job_per_suite_each_selecting_only_its_own() {
        let bin = TestBinary {
            package: "shedlock-redis".into(),
            version: "0.1.0".into(),
            manifest_dir: PathBuf::new(),
            kind: "test".into(),
            target: "conformance".into(),
            executable: PathBuf::new(),
            suite: None,
        };
        let listing = "redis::C01_lock_is_held: test\nredis::figures: test\n\
                       valkey::C01_lock_is_held: test\nredis-valkey::C01_lock_is_held: test\n\
                       redis-valkey::faults::partition: test\n\n5 tests, 0 benchmarks\n";
        let jobs = split_by_suite(bin.clone(), listing);
        let ids: Vec<String> = jobs.iter().map(TestBinary::id).collect();
        assert_eq!(
            ids,
            [
                "shedlock-redis/test/conformance::redis",
                "shedlock-redis/test/conformance::valkey",
                "shedlock-redis/test/conformance::redis-valkey"
            ]
        );
        // `valkey::` would also select redis-valkey's tests: skipped.
        assert_eq!(
            jobs[1].suite.as_ref().unwrap().args(),
            ["valkey::", "--skip", "redis-valkey::"]
        );
        assert_eq!(jobs[0].suite.as_ref().unwrap().args(), ["redis::"]);
        // One suite: the binary as it is.
        let one = split_by_suite(bin, "sqlite::C01_lock_is_held: test\n");
        assert_eq!(one.len(), 1);
        assert!(one[0].suite.is_none());
    }

    #[test]
    fn package_name_is_read_from_the_package_table() {
        let dir = std::env::temp_dir().join(format!("xtask-runner-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let m = dir.join("Cargo.toml");
        fs::write(
            &m,
            "[workspace]\nname = \"no\"\n[package]\nname = \"shedlock-x\"\nversion = \"1\"\n",
        )
        .unwrap();
        assert_eq!(package_name(&m).as_deref(), Some("shedlock-x"));
        let _ = fs::remove_dir_all(&dir);
    }
}

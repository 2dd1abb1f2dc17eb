//! The libtest harness: each check is one test of the provider crate's `cargo test`.

use std::{
    fmt,
    future::Future,
    process::ExitCode,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use libtest_mimic::{Arguments, Failed, Trial};
use shedlock::BoxError;

use crate::{
    checks,
    factory::ProviderFactory,
    location::report_dir,
    options::Options,
    outcome::{CheckResult, Outcome, Report},
    runner::setup_failed_report,
    soak::SOAK_CHECKS,
    suite::Suite,
};

type Setup = Box<
    dyn FnOnce() -> std::pin::Pin<
            Box<dyn Future<Output = Result<Arc<dyn ProviderFactory>, BoxError>>>,
        > + Send,
>;

/// A setup as C28's node processes call it (each node sets up its own factory).
type NodeMain = Box<dyn FnOnce() -> Option<ExitCode>>;

/// One suite of a test binary that proves several variants of a provider (client time,
/// ShedLock-compatible mode, a cluster, …): see [`harness_suites`].
pub struct SuiteSpec {
    name: String,
    options: Options,
    plan: Plan,
    faults: Vec<crate::faults::FaultPlan>,
}

enum Plan {
    Run { setup: Setup, node: NodeMain },
    Skip(String),
}

impl fmt::Debug for SuiteSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let skipped = match &self.plan {
            Plan::Run { .. } => None,
            Plan::Skip(why) => Some(why),
        };
        f.debug_struct("SuiteSpec")
            .field("name", &self.name)
            .field("skipped", &skipped)
            .finish_non_exhaustive()
    }
}

impl SuiteSpec {
    /// The suite `name` — the provider name its factory reports, its report's file name and
    /// the prefix of its tests (`redis-valkey::C05_expires_after_at_most`) — with `options`
    /// and a `setup` as [`harness`] takes it. A factory whose [`ProviderFactory::name`] is not
    /// `name` fails the suite's setup.
    pub fn new<P, F, Fut>(name: impl Into<String>, options: Options, setup: F) -> Self
    where
        P: ProviderFactory,
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<P, BoxError>> + 'static,
    {
        let name = name.into();
        let setup = Arc::new(setup);
        let for_node = setup.clone();
        let expected = name.clone();
        let setup: Setup = Box::new(move || {
            Box::pin(async move {
                let p = setup().await?;
                if p.name() != expected {
                    return Err(format!(
                        "the suite {expected:?} set up a factory named {:?}",
                        p.name()
                    )
                    .into());
                }
                Ok(Arc::new(p) as Arc<dyn ProviderFactory>)
            })
        });
        let node: NodeMain = Box::new(move || checks::node_main_if_requested(move || for_node()));
        Self { name, options, plan: Plan::Run { setup, node }, faults: Vec::new() }
    }

    /// Adds a fault scenario ([`faults`](crate::faults)) whose node processes build this
    /// suite's factory: one more test, `<suite>::faults::<scenario>`, which runs the scenario
    /// for [`FAULTS_SECS_ENV`](crate::faults::FAULTS_SECS_ENV) seconds (default
    /// [`SHORT_SECS`](crate::faults::SHORT_SECS)) and fails on an overlap the plan does not
    /// expect. It is reported ignored, with the reason, where network namespaces cannot be made
    /// (not Linux, not root).
    #[must_use]
    pub fn with_faults(mut self, plan: crate::faults::FaultPlan) -> Self {
        self.faults.push(plan);
        self
    }

    /// A suite that cannot run here (its backend is absent, or skipped on request), and says
    /// why: each of its tests is reported *ignored* with the reason, no report file is
    /// written, and the binary's summary counts them as ignored — never as passed.
    pub fn skipped(name: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            options: Options::new(),
            plan: Plan::Skip(reason.into()),
            faults: Vec::new(),
        }
    }

    /// The suite's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

enum State {
    NotStarted(Option<Setup>),
    Ready(Arc<Suite>),
    Failed(String),
}

struct Shared {
    state: Mutex<State>,
    results: Mutex<Vec<CheckResult>>,
    /// The suite's tests that ran (its report is written only when all of them did).
    ran: AtomicUsize,
    options: Options,
}

impl Shared {
    fn suite(&self, rt: &tokio::runtime::Runtime) -> Result<Arc<Suite>, String> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let State::NotStarted(setup) = &mut *st {
            let Some(setup) = setup.take() else { return Err("setup already consumed".into()) };
            let options = self.options.clone();
            let r = rt.block_on(async move {
                let factory = setup().await?;
                Suite::from_arc(factory, options).await
            });
            *st = match r {
                Ok(s) => State::Ready(Arc::new(s)),
                Err(e) => State::Failed(format!("provider setup failed: {e}")),
            };
        }
        match &*st {
            State::Ready(s) => Ok(s.clone()),
            State::Failed(e) => Err(e.clone()),
            State::NotStarted(_) => Err("provider setup did not run".into()),
        }
    }
}

/// Runs the suite as a libtest-compatible test binary: each check is one test named like
/// `C05_expires_after_at_most`, plus a `figures` test that measures latency and round trips.
/// Use it from a test target with `harness = false`:
///
/// ```toml
/// [[test]]
/// name = "conformance"
/// harness = false
/// ```
///
/// ```no_run
/// // tests/conformance.rs
/// # struct MyFactory;
/// # #[async_trait::async_trait]
/// # impl shedlock_conformance::ProviderFactory for MyFactory {
/// #     fn name(&self) -> &str { "mine" }
/// #     async fn create(&self, _: shedlock_conformance::InstanceOptions)
/// #         -> Result<std::sync::Arc<dyn shedlock::LockProvider>, shedlock::BoxError> { unimplemented!() }
/// # }
/// fn main() -> std::process::ExitCode {
///     shedlock_conformance::harness(shedlock_conformance::Options::from_env(), || async {
///         // start or connect to the backend here; runs inside the kit's tokio runtime
///         Ok(MyFactory)
///     })
/// }
/// ```
///
/// - `setup` runs once, lazily (so `--list` starts nothing), on a multi-threaded tokio runtime
///   that lives until the end; the factory's `teardown` runs after the last test.
/// - Checks run one at a time (`--test-threads 1` unless given), since they measure time.
/// - A check's test passes only when its outcome is the **expected** one: "pass", or the "not
///   applicable" / "unsupported" declared for it in `options`
///   ([`Options::expect_not_applicable`], [`Options::expect_unsupported`]), which the test then
///   prints with the declared reason. A failure, an undeclared "not applicable" or
///   "unsupported", and a pass where something else was declared (a stale declaration) fail the
///   test. So a factory that stops offering a hook, or a provider that stops declaring a
///   capability, turns a test red instead of silently into `ok`. Invalid declarations (an id not
///   in the catalogue, an empty reason) make the harness exit with an error before running
///   anything.
/// - The report printed at the end (and written to [`report_dir`]`/<provider>.{md,json}`) has
///   each check's outcome, its declaration and whether it was as expected.
/// - The report files are written only by an unfiltered run, so a filtered run never replaces
///   a complete report with a partial one.
/// - Standard libtest arguments work: a name filter, `--exact`, `--skip`, `--list`, `-q`.
pub fn harness<P, F, Fut>(options: Options, setup: F) -> ExitCode
where
    P: ProviderFactory,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<P, BoxError>> + 'static,
{
    // A node process of C28 (this binary, re-executed by the check): run the node, nothing else.
    if std::env::var_os(checks::NODE_ENV).is_some() {
        return checks::node_main_if_requested(setup).unwrap_or(ExitCode::FAILURE);
    }
    let setup: Setup = Box::new(move || {
        Box::pin(async move {
            let p = setup().await?;
            Ok(Arc::new(p) as Arc<dyn ProviderFactory>)
        })
    });
    let node: NodeMain = Box::new(|| None);
    let suite = SuiteSpec {
        name: String::new(),
        options,
        plan: Plan::Run { setup, node },
        faults: Vec::new(),
    };
    exit_code(run_trials(Arguments::from_args(), vec![suite], false))
}

/// [`harness`] for a binary that proves several variants of one provider, one [`SuiteSpec`]
/// each, so that a provider crate has one conformance test binary:
///
/// ```no_run
/// # use shedlock_conformance::{Options, SuiteSpec};
/// # #[derive(Debug)] struct MyFactory(&'static str);
/// # #[async_trait::async_trait]
/// # impl shedlock_conformance::ProviderFactory for MyFactory {
/// #     fn name(&self) -> &str { self.0 }
/// #     async fn create(&self, _: shedlock_conformance::InstanceOptions)
/// #         -> Result<std::sync::Arc<dyn shedlock::LockProvider>, shedlock::BoxError> { unimplemented!() }
/// # }
/// // tests/conformance.rs, with `harness = false`
/// fn main() -> std::process::ExitCode {
///     shedlock_conformance::harness_suites(vec![
///         SuiteSpec::new("mine", Options::from_env(), || async { Ok(MyFactory("mine")) }),
///         SuiteSpec::new("mine-client-time", Options::from_env(), || async {
///             Ok(MyFactory("mine-client-time"))
///         }),
///         SuiteSpec::skipped("mine-cluster", "no cluster on this machine"),
///     ])
/// }
/// ```
///
/// Each check is one test per suite, named `<suite>::<check>`
/// (`mine-client-time::C05_expires_after_at_most`), so `cargo test --test conformance --
/// mine-client-time::` runs one suite. Suites run one after another, each set up when its
/// first test runs; a suite's report is written when all of its tests ran. Everything else is
/// as in [`harness`], per suite.
pub fn harness_suites(suites: Vec<SuiteSpec>) -> ExitCode {
    // A node process of C28 runs the node of the suite that started it.
    if std::env::var_os(checks::NODE_ENV).is_some() {
        let provider = crate::node_provider().unwrap_or_default();
        for suite in suites {
            if let Plan::Run { node, .. } = suite.plan
                && suite.name == provider
            {
                return node().unwrap_or(ExitCode::FAILURE);
            }
        }
        eprintln!("shedlock-conformance node: no suite named {provider:?} in this binary");
        return ExitCode::FAILURE;
    }
    exit_code(run_trials(Arguments::from_args(), suites, true))
}

fn exit_code(run: Result<HarnessRun, String>) -> ExitCode {
    match run {
        Ok(run) if run.write_error.is_none() => run.conclusion.exit_code(),
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("shedlock-conformance: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What [`run_trials`] did.
struct HarnessRun {
    /// libtest's tally: a check whose outcome is not the expected one is a failed test.
    conclusion: libtest_mimic::Conclusion,
    /// The reports of the suites that ran (none for `--list`, or a suite whose setup failed).
    #[cfg_attr(not(test), allow(dead_code))]
    reports: Vec<Report>,
    /// Why a report file could not be written (a suite all of whose tests ran writes one).
    write_error: Option<String>,
}

/// The harness with explicit libtest arguments, over `suites`; `prefixed`: tests are named
/// `<suite>::<check>`. `Err` when nothing could run (invalid declarations, no tokio runtime).
fn run_trials(
    mut args: Arguments,
    suites: Vec<SuiteSpec>,
    prefixed: bool,
) -> Result<HarnessRun, String> {
    for suite in &suites {
        suite
            .options
            .validate_expectations()
            .map_err(|e| if prefixed { format!("suite {}: {e}", suite.name) } else { e })?;
    }
    if args.test_threads.is_none() {
        args.test_threads = Some(1);
    }
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a tokio runtime: {e}"))?,
    );

    let mut trials = Vec::new();
    let mut runs: Vec<(String, Arc<Shared>, usize)> = Vec::new();
    for suite in suites {
        let SuiteSpec { name, options, plan, faults } = suite;
        let test_name = |base: String| if prefixed { format!("{name}::{base}") } else { base };
        let skip_faults = match &plan {
            Plan::Skip(why) => Some(why.clone()),
            Plan::Run { .. } if faults.is_empty() => None,
            Plan::Run { .. } => crate::faults::net::unavailable(),
        };
        for plan in faults {
            let test = test_name(format!("faults::{}", plan.name()));
            if let Some(why) = &skip_faults {
                let why = why.clone();
                trials.push(
                    Trial::test(test, move || Err(Failed::from(why))).with_ignored_flag(true),
                );
                continue;
            }
            let suite_name = name.clone();
            trials.push(Trial::test(test, move || {
                let exe = std::env::current_exe().map_err(|e| Failed::from(e.to_string()))?;
                let secs = std::env::var(crate::faults::FAULTS_SECS_ENV)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(crate::faults::SHORT_SECS);
                let report = crate::faults::run_scenario(&plan, &suite_name, &exe, secs)
                    .map_err(Failed::from)?;
                println!("\n{}", report.to_markdown());
                if report.passed() { Ok(()) } else { Err(Failed::from(report.verdict)) }
            }));
        }
        let mut names: Vec<String> = checks::catalogue()
            .iter()
            // A soak run ([`Options::soak_for`]) is only its checks.
            .filter(|c| options.soak_for.is_none() || SOAK_CHECKS.contains(&c.id))
            .map(|c| test_name(c.test_name()))
            .collect();
        if options.figures {
            names.push(test_name("figures".to_owned()));
        }
        let setup = match plan {
            Plan::Skip(why) => {
                println!("suite {name} SKIPPED: {why}");
                for n in names {
                    let why = why.clone();
                    trials.push(
                        Trial::test(n, move || Err(Failed::from(why))).with_ignored_flag(true),
                    );
                }
                continue;
            }
            Plan::Run { setup, .. } => setup,
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State::NotStarted(Some(setup))),
            results: Mutex::new(Vec::new()),
            ran: AtomicUsize::new(0),
            options: options.clone(),
        });
        let total = names.len();
        let mut names = names.into_iter();
        for check in checks::catalogue() {
            if options.soak_for.is_some() && !SOAK_CHECKS.contains(&check.id) {
                continue;
            }
            let Some(test) = names.next() else { break };
            let (shared, rt) = (shared.clone(), rt.clone());
            trials.push(Trial::test(test, move || {
                shared.ran.fetch_add(1, Ordering::SeqCst);
                let suite = shared.suite(&rt).map_err(Failed::from)?;
                let result = rt.block_on(suite.run_check(check));
                if let Some(line) = expected_line(&result) {
                    println!("{line}");
                }
                let unexpected = result.unexpected();
                shared.results.lock().unwrap_or_else(PoisonError::into_inner).push(result);
                match unexpected {
                    Some(why) => Err(Failed::from(why)),
                    None => Ok(()),
                }
            }));
        }
        if let Some(test) = names.next() {
            let (shared, rt) = (shared.clone(), rt.clone());
            trials.push(Trial::test(test, move || {
                shared.ran.fetch_add(1, Ordering::SeqCst);
                let suite = shared.suite(&rt).map_err(Failed::from)?;
                rt.block_on(suite.measure_figures());
                Ok(())
            }));
        }
        runs.push((name, shared, total));
    }

    let listing = args.list;
    let conclusion = libtest_mimic::run(&args, trials);

    let mut run = HarnessRun { conclusion, reports: Vec::new(), write_error: None };
    if !listing {
        for (name, shared, total) in &runs {
            let results =
                std::mem::take(&mut *shared.results.lock().unwrap_or_else(PoisonError::into_inner));
            let state = std::mem::replace(
                &mut *shared.state.lock().unwrap_or_else(PoisonError::into_inner),
                State::NotStarted(None),
            );
            let report = match &state {
                State::Ready(suite) => Some(suite.report(results)),
                State::Failed(e) => {
                    // The provider's name may be unknown: print, but write no file (an old
                    // report must not be mistaken for this run's; the test run itself fails).
                    let provider = if name.is_empty() { "provider" } else { name };
                    println!("\n{}", setup_failed_report(provider, e).to_text());
                    None
                }
                State::NotStarted(_) => None,
            };
            if let Some(report) = report {
                let leaked = report.security.as_ref().is_some_and(|s| {
                    s.leaked_in(&report.to_text())
                        || s.leaked_in(&report.to_markdown())
                        || s.leaked_in(&report.to_json())
                });
                if leaked {
                    // Neither printed nor written: the run fails instead.
                    let e = format!(
                        "the report of {name} contains one of the secrets its factory declared \
                         (Security::secret): a check's detail quotes a password, token or key; \
                         no report was printed or written"
                    );
                    eprintln!("shedlock-conformance: {e}");
                    run.write_error = Some(e);
                } else if shared.ran.load(Ordering::SeqCst) == *total {
                    println!("\n{}", report.to_text());
                    match report.write_to(&report_dir()) {
                        Ok((md, json)) => {
                            println!("report written to {} and {}", md.display(), json.display())
                        }
                        Err(e) => {
                            let e = format!(
                                "cannot write the report to {}: {e}",
                                report_dir().display()
                            );
                            eprintln!("shedlock-conformance: {e}");
                            run.write_error = Some(e);
                        }
                    }
                } else {
                    println!("\n{}", report.to_text());
                    println!("filtered run: report files not written");
                }
                if !leaked {
                    run.reports.push(report);
                }
            }
            if let State::Ready(suite) = state {
                rt.block_on(suite.factory().teardown());
            }
        }
    }
    drop(runs);
    if let Ok(rt) = Arc::try_unwrap(rt) {
        rt.shutdown_timeout(Duration::from_secs(2));
    }
    Ok(run)
}

/// The line printed under a check's test for an expected "not applicable" or "unsupported"
/// (libtest shows the test `ok`; this says why it is allowed).
fn expected_line(result: &CheckResult) -> Option<String> {
    match (&result.expected, result.outcome) {
        (Some(e), o) if e.outcome == o && o != Outcome::Pass => Some(format!(
            "    {} {} as declared ({}): {}",
            result.id,
            o.label(),
            e.reason,
            result.detail
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::atomic::{AtomicBool, Ordering},
        time::Duration,
    };

    use super::*;
    use crate::{outcome::Expectation, test_support::MemoryFactory};

    /// What `cargo test --test conformance` prints for a provider that passes everything: one
    /// test per check of the catalogue (libtest pads the names to the longest), then `figures`.
    fn sample_output() -> String {
        let names: Vec<String> = checks::catalogue()
            .iter()
            .map(checks::Check::test_name)
            .chain(["figures".to_owned()])
            .collect();
        let width = names.iter().map(String::len).max().unwrap_or(0);
        let mut out = format!("$ cargo test --test conformance\n\nrunning {} tests\n", names.len());
        for n in &names {
            out.push_str(&format!("test {n:<width$} ... ok\n"));
        }
        out.push_str(&format!(
            "\ntest result: ok. {} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; \
             finished in …\n",
            names.len()
        ));
        out
    }

    /// The kit README's sample output is generated from the catalogue: this test fails when it
    /// is not, and `SHEDLOCK_BLESS=1` writes it.
    #[test]
    fn the_readmes_sample_output_is_generated_from_the_catalogue() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
        let readme = std::fs::read_to_string(&path).unwrap();
        let (begin, end) =
            ("<!-- sample-output: generated -->\n```text\n", "```\n<!-- /sample-output -->");
        let start = readme.find(begin).expect("the README's sample-output markers") + begin.len();
        let stop = start + readme[start..].find(end).expect("the sample output's end marker");
        let want = sample_output();
        if readme[start..stop] == want {
            return;
        }
        if std::env::var_os("SHEDLOCK_BLESS").is_some() {
            let updated = format!("{}{want}{}", &readme[..start], &readme[stop..]);
            std::fs::write(&path, updated).unwrap();
            return;
        }
        panic!(
            "the README's sample output is not the catalogue's: run SHEDLOCK_BLESS=1 cargo test \
             -p shedlock-conformance --lib the_readmes_sample_output"
        );
    }

    /// Runs the harness on the checks whose test name is exactly `test`. libtest's own output
    /// (with its "FAILED" lines for the cases meant to fail) goes to a temp file, not among
    /// this test run's lines.
    fn run_one(test: &str, options: Options) -> HarnessRun {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let log = std::env::temp_dir().join(format!(
            "shedlock-harness-unit-{}-{}.log",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let args = Arguments {
            filter: Some(test.to_owned()),
            exact: true,
            quiet: true,
            logfile: Some(log.to_string_lossy().into_owned()),
            ..Arguments::default()
        };
        let run = run_trials(args, vec![memory_suite(options)], false).unwrap();
        let _ = std::fs::remove_file(&log);
        assert_eq!(run.conclusion.num_passed + run.conclusion.num_failed, 1, "{test} ran");
        assert!(run.write_error.is_none(), "a filtered run writes no report");
        run
    }

    fn memory_suite(options: Options) -> SuiteSpec {
        SuiteSpec::new("kit-unit-test", options, || async { Ok(MemoryFactory::new()) })
    }

    fn only_result(run: &HarnessRun) -> &CheckResult {
        let report = &run.reports[0];
        assert_eq!(report.results.len(), 1);
        &report.results[0]
    }

    #[test]
    fn an_undeclared_not_applicable_fails_its_test() {
        let run = run_one("C24_backend_unreachable", Options::new());
        assert_eq!(run.conclusion.num_failed, 1, "an n/a nobody declared is a regression");
        let r = only_result(&run);
        assert_eq!(r.outcome, Outcome::NotApplicable);
        assert!(!r.as_expected());
        assert!(!run.reports[0].as_expected());
    }

    #[test]
    fn a_declared_not_applicable_passes_its_test_and_is_marked_expected() {
        let options = Options::new().expect_not_applicable("C24", "in-process: no address");
        let run = run_one("C24_backend_unreachable", options);
        assert_eq!(run.conclusion.num_failed, 0);
        assert_eq!(run.conclusion.num_passed, 1);
        let r = only_result(&run);
        assert_eq!(r.outcome, Outcome::NotApplicable);
        assert!(r.as_expected());
        let json: serde_json::Value = serde_json::from_str(&run.reports[0].to_json()).unwrap();
        assert_eq!(json["results"][0]["as_expected"], true);
        assert_eq!(json["results"][0]["expected"]["reason"], "in-process: no address");
    }

    #[test]
    fn a_declaration_of_the_other_kind_fails_the_test() {
        let options = Options::new().expect_unsupported("C24", "wrong kind");
        let run = run_one("C24_backend_unreachable", options);
        assert_eq!(run.conclusion.num_failed, 1);
        assert!(!only_result(&run).as_expected());
    }

    #[test]
    fn a_stale_declaration_fails_the_test_of_a_check_that_passes() {
        let options = Options::new().expect_not_applicable("C01", "stale");
        let run = run_one("C01_lock_is_held", options);
        assert_eq!(run.conclusion.num_failed, 1, "the check passed: the declaration is stale");
        let r = only_result(&run);
        assert_eq!(r.outcome, Outcome::Pass);
        assert!(r.unexpected().unwrap().contains("stale"));
    }

    #[test]
    fn a_pass_with_nothing_declared_passes() {
        let run = run_one("C01_lock_is_held", Options::new());
        assert_eq!(run.conclusion.num_passed, 1);
        assert!(only_result(&run).as_expected());
    }

    #[test]
    fn invalid_declarations_run_nothing() {
        let started = Arc::new(AtomicBool::new(false));
        let s = started.clone();
        let suite = SuiteSpec::new(
            "kit-unit-test",
            Options::new().expect_not_applicable("C99", "no such check"),
            move || {
                let s = s.clone();
                async move {
                    s.store(true, Ordering::SeqCst);
                    Ok(MemoryFactory::new())
                }
            },
        );
        let err = run_trials(Arguments { list: true, ..Arguments::default() }, vec![suite], false)
            .err()
            .unwrap();
        assert!(err.contains("\"C99\" is not a check id of the catalogue (C01–C32)"), "{err}");
        assert!(!started.load(Ordering::SeqCst));
    }

    fn quiet_args(filter: &str) -> (Arguments, std::path::PathBuf) {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let log = std::env::temp_dir().join(format!(
            "shedlock-harness-suites-{}-{}.log",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let args = Arguments {
            filter: Some(filter.to_owned()),
            exact: true,
            quiet: true,
            logfile: Some(log.to_string_lossy().into_owned()),
            ..Arguments::default()
        };
        (args, log)
    }

    #[test]
    fn suites_are_named_by_prefix_and_a_skipped_one_is_ignored_never_passed() {
        let suites = || {
            vec![
                memory_suite(Options::new()),
                SuiteSpec::skipped("kit-unit-test-cluster", "no cluster here"),
            ]
        };
        let (args, log) = quiet_args("kit-unit-test::C01_lock_is_held");
        let run = run_trials(args, suites(), true).unwrap();
        assert_eq!((run.conclusion.num_passed, run.conclusion.num_failed), (1, 0));
        assert_eq!(run.reports.len(), 1, "one suite ran");
        let (args, log2) = quiet_args("kit-unit-test-cluster::C01_lock_is_held");
        let run = run_trials(Arguments { ignored: false, ..args }, suites(), true).unwrap();
        assert_eq!(run.conclusion.num_passed, 0, "a skipped suite passes nothing");
        assert_eq!(run.conclusion.num_ignored, 1, "it is shown as ignored");
        assert!(run.reports.is_empty(), "and writes no report");
        let _ = (std::fs::remove_file(log), std::fs::remove_file(log2));
    }

    #[test]
    fn a_suite_whose_factory_has_another_name_fails() {
        let suite = SuiteSpec::new("redis", Options::new(), || async { Ok(MemoryFactory::new()) });
        let (args, log) = quiet_args("redis::C01_lock_is_held");
        let run = run_trials(args, vec![suite], true).unwrap();
        let _ = std::fs::remove_file(log);
        assert_eq!(run.conclusion.num_failed, 1, "the report would carry the wrong name");
    }

    #[test]
    fn an_expected_outcome_is_printed_with_its_reason() {
        let options = Options::new().expect_not_applicable("C24", "embedded: no address");
        let mut r = CheckResult {
            id: "C24",
            name: "backend_unreachable",
            outcome: Outcome::NotApplicable,
            detail: "no backend address".into(),
            duration: Duration::ZERO,
            expected: options.expectation("C24").cloned(),
        };
        assert_eq!(
            expected_line(&r).unwrap(),
            "    C24 not applicable as declared (embedded: no address): no backend address"
        );
        r.outcome = Outcome::Pass;
        assert_eq!(expected_line(&r), None);
        r.outcome = Outcome::Unsupported;
        assert_eq!(expected_line(&r), None, "not the declared outcome: the test fails instead");
        r.expected = Some(Expectation {
            id: "C24".into(),
            outcome: Outcome::Unsupported,
            reason: "r".into(),
        });
        assert!(expected_line(&r).is_some());
    }
}

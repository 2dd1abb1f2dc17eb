//! The libtest harness: each check is one test of the provider crate's `cargo test`.

use std::{
    future::Future,
    process::ExitCode,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use libtest_mimic::{Arguments, Failed, Trial};
use shedlock::BoxError;

use crate::{
    checks,
    factory::ProviderFactory,
    options::Options,
    report::{CheckResult, Outcome, Report, report_dir},
    suite::{Suite, setup_failed_report},
};

type Setup = Box<
    dyn FnOnce() -> std::pin::Pin<
            Box<dyn Future<Output = Result<Arc<dyn ProviderFactory>, BoxError>>>,
        > + Send,
>;

enum State {
    NotStarted(Option<Setup>),
    Ready(Arc<Suite>),
    Failed(String),
}

struct Shared {
    state: Mutex<State>,
    results: Mutex<Vec<CheckResult>>,
    rt: tokio::runtime::Runtime,
}

impl Shared {
    fn suite(&self, options: &Options) -> Result<Arc<Suite>, String> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let State::NotStarted(setup) = &mut *st {
            let Some(setup) = setup.take() else { return Err("setup already consumed".into()) };
            let options = options.clone();
            let r = self.rt.block_on(async move {
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
    let run = run_trials(Arguments::from_args(), options, setup);
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
    /// The report of the checks that ran (`None` for `--list` or when the setup failed).
    #[cfg_attr(not(test), allow(dead_code))]
    report: Option<Report>,
    /// Why the report files could not be written (an unfiltered run writes them).
    write_error: Option<String>,
}

/// The harness with explicit libtest arguments. `Err` when nothing could run (invalid
/// declarations in `options`, no tokio runtime).
fn run_trials<P, F, Fut>(
    mut args: Arguments,
    options: Options,
    setup: F,
) -> Result<HarnessRun, String>
where
    P: ProviderFactory,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<P, BoxError>> + 'static,
{
    options.validate_expectations()?;
    if args.test_threads.is_none() {
        args.test_threads = Some(1);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
    let setup: Setup = Box::new(move || {
        Box::pin(async move {
            let p = setup().await?;
            Ok(Arc::new(p) as Arc<dyn ProviderFactory>)
        })
    });
    let shared = Arc::new(Shared {
        state: Mutex::new(State::NotStarted(Some(setup))),
        results: Mutex::new(Vec::new()),
        rt,
    });

    let mut trials = Vec::new();
    for check in checks::catalogue() {
        // A soak run ([`Options::soak_for`]) is only its checks.
        if options.soak_for.is_some() && !checks::SOAK_CHECKS.contains(&check.id) {
            continue;
        }
        let shared = shared.clone();
        let options = options.clone();
        trials.push(Trial::test(check.test_name(), move || {
            let suite = shared.suite(&options).map_err(Failed::from)?;
            let result = shared.rt.block_on(suite.run_check(check));
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
    if options.figures {
        let shared = shared.clone();
        let options = options.clone();
        trials.push(Trial::test("figures", move || {
            let suite = shared.suite(&options).map_err(Failed::from)?;
            shared.rt.block_on(suite.measure_figures());
            Ok(())
        }));
    }

    let listing = args.list;
    let unfiltered = args.filter.is_none() && args.skip.is_empty() && !args.ignored;
    let conclusion = libtest_mimic::run(&args, trials);

    let mut run = HarnessRun { conclusion, report: None, write_error: None };
    if !listing {
        let results =
            std::mem::take(&mut *shared.results.lock().unwrap_or_else(PoisonError::into_inner));
        let state = std::mem::replace(
            &mut *shared.state.lock().unwrap_or_else(PoisonError::into_inner),
            State::NotStarted(None),
        );
        let report = match &state {
            State::Ready(suite) => Some(suite.report(results)),
            State::Failed(e) => {
                // The provider's name is unknown: print, but write no file (an old report must
                // not be mistaken for this run's; the test run itself fails).
                println!("\n{}", setup_failed_report("provider", e).to_text());
                None
            }
            State::NotStarted(_) => None,
        };
        if let Some(report) = &report {
            println!("\n{}", report.to_text());
            if unfiltered {
                match report.write_to(&report_dir()) {
                    Ok((md, json)) => {
                        println!("report written to {} and {}", md.display(), json.display())
                    }
                    Err(e) => {
                        let e =
                            format!("cannot write the report to {}: {e}", report_dir().display());
                        eprintln!("shedlock-conformance: {e}");
                        run.write_error = Some(e);
                    }
                }
            } else {
                println!("filtered run: report files not written");
            }
        }
        run.report = report;
        if let State::Ready(suite) = state {
            shared.rt.block_on(suite.factory().teardown());
        }
    }
    if let Ok(shared) = Arc::try_unwrap(shared) {
        shared.rt.shutdown_timeout(Duration::from_secs(2));
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
    use crate::{options::Expectation, test_support::MemoryFactory};

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
        let run = run_trials(args, options, || async { Ok(MemoryFactory::new()) }).unwrap();
        let _ = std::fs::remove_file(&log);
        assert_eq!(run.conclusion.num_passed + run.conclusion.num_failed, 1, "{test} ran");
        assert!(run.write_error.is_none(), "a filtered run writes no report");
        run
    }

    fn only_result(run: &HarnessRun) -> &CheckResult {
        let report = run.report.as_ref().unwrap();
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
        assert!(!run.report.as_ref().unwrap().as_expected());
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
        let json: serde_json::Value =
            serde_json::from_str(&run.report.as_ref().unwrap().to_json()).unwrap();
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
        let err = run_trials(
            Arguments { list: true, ..Arguments::default() },
            Options::new().expect_not_applicable("C99", "no such check"),
            move || async move {
                s.store(true, Ordering::SeqCst);
                Ok(MemoryFactory::new())
            },
        )
        .err()
        .unwrap();
        assert!(err.contains("\"C99\" is not a check id"), "{err}");
        assert!(!started.load(Ordering::SeqCst));
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

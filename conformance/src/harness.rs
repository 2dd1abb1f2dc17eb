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
    report::{CheckResult, Outcome, report_dir},
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
/// - "unsupported" and "not applicable" checks are reported `ok` by libtest; the report printed
///   at the end (and written to [`report_dir`]`/<provider>.{md,json}`) tells them apart.
/// - The report files are written only by an unfiltered run, so a filtered run never replaces
///   a complete report with a partial one.
/// - Standard libtest arguments work: a name filter, `--exact`, `--skip`, `--list`, `-q`.
pub fn harness<P, F, Fut>(options: Options, setup: F) -> ExitCode
where
    P: ProviderFactory,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<P, BoxError>> + 'static,
{
    let mut args = Arguments::from_args();
    if args.test_threads.is_none() {
        args.test_threads = Some(1);
    }
    let rt =
        match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("shedlock-conformance: cannot start a tokio runtime: {e}");
                return ExitCode::FAILURE;
            }
        };
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
        let shared = shared.clone();
        let options = options.clone();
        trials.push(Trial::test(check.test_name(), move || {
            let suite = shared.suite(&options).map_err(Failed::from)?;
            let result = shared.rt.block_on(suite.run_check(check));
            let failed = (result.outcome == Outcome::Fail).then(|| result.detail.clone());
            if result.outcome != Outcome::Pass && result.outcome != Outcome::Fail {
                println!("    {} {}: {}", result.id, result.outcome.label(), result.detail);
            }
            shared.results.lock().unwrap_or_else(PoisonError::into_inner).push(result);
            match failed {
                Some(detail) => Err(Failed::from(detail)),
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
        if let Some(report) = report {
            println!("\n{}", report.to_text());
            if unfiltered {
                match report.write_to(&report_dir()) {
                    Ok((md, json)) => {
                        println!("report written to {} and {}", md.display(), json.display())
                    }
                    Err(e) => {
                        eprintln!(
                            "shedlock-conformance: cannot write the report to {}: {e}",
                            report_dir().display()
                        );
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                println!("filtered run: report files not written");
            }
        }
        if let State::Ready(suite) = state {
            shared.rt.block_on(suite.factory().teardown());
        }
    }
    if let Ok(shared) = Arc::try_unwrap(shared) {
        shared.rt.shutdown_timeout(Duration::from_secs(2));
    }
    conclusion.exit_code()
}

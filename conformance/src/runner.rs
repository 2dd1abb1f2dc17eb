//! Running checks: [`Suite::run_check`] (a soak run repeats the soak checks),
//! [`Suite::run_all`] over the catalogue, [`Suite::measure_figures`], [`Suite::report`],
//! [`run`], and [`Options::validate_expectations`] (which needs the catalogue's ids). Above the
//! checks and their catalogue; below the report's rendering and the harness.

use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use shedlock::Capabilities;

use crate::{
    checks::{self, Check},
    factory::ProviderFactory,
    figures,
    options::Options,
    outcome::{CheckResult, Figures, Outcome, Report, Verdict},
    soak,
    suite::Suite,
};

impl Suite {
    /// Runs one check, timing it. A check that panics is a failure. The result carries the
    /// declaration of [`Options::expected`] for this check, if any.
    pub async fn run_check(&self, check: &Check) -> CheckResult {
        if let Some(total) = self.options().soak_for
            && soak::SOAK_CHECKS.contains(&check.id)
        {
            return soak::soak_check(self, check, total).await;
        }
        let started = Instant::now();
        let _ = self.take_disagreement();
        let verdict = CatchPanic(Box::pin((check.run)(self))).await;
        let verdict = match verdict {
            Ok(v) => v,
            Err(msg) => Verdict::fail(format!("the check panicked: {msg}")),
        };
        // An instance disagreed with what the provider declares: the check fails saying so.
        let verdict = match self.take_disagreement() {
            Some(what) if verdict.outcome != crate::Outcome::Fail => Verdict::fail(what),
            _ => verdict,
        };
        CheckResult {
            id: check.id,
            name: check.name,
            outcome: verdict.outcome,
            detail: verdict.detail,
            duration: started.elapsed(),
            expected: self.options().expectation(check.id).cloned(),
        }
    }

    /// Runs every check selected by [`Options::only`], then measures the figures (when
    /// [`Options::figures`] is set), and builds the report.
    pub async fn run_all(&self) -> Report {
        let mut results = Vec::new();
        for check in checks::catalogue() {
            if !self.selected(check) {
                continue;
            }
            let r = self.run_check(check).await;
            tracing::info!(id = r.id, outcome = r.outcome.as_str(), detail = %r.detail, "check done");
            results.push(r);
        }
        if self.options().figures {
            self.measure_figures().await;
        }
        self.report(results)
    }

    fn selected(&self, check: &Check) -> bool {
        self.options().only.is_empty()
            || self.options().only.iter().any(|f| {
                check.id.eq_ignore_ascii_case(f)
                    || format!("{}_{}", check.id, check.name).contains(f.as_str())
            })
    }

    /// Measures acquire latency and (through the fault proxy, when the factory offers a backend
    /// address) round trips per acquire and release, storing them in the figures.
    pub async fn measure_figures(&self) {
        self.set_measured_figures(figures::measure(self).await);
    }

    /// A report from `results` and the figures measured so far.
    pub fn report(&self, mut results: Vec<CheckResult>) -> Report {
        let order =
            |id: &str| checks::catalogue().iter().position(|c| c.id == id).unwrap_or(usize::MAX);
        results.sort_by_key(|r| order(r.id));
        // A soak report is its own: `<provider>-soak`, beside the provider's full report.
        let provider = if self.soaking() {
            format!("{}-soak", self.provider_name())
        } else {
            self.provider_name().to_owned()
        };
        Report {
            provider,
            server: self.factory().server(),
            security: self.factory().security(),
            capabilities: self.capabilities().clone(),
            results,
            figures: self.figures(),
        }
    }
}

impl Options {
    /// Checks the declarations: every id names a check of the catalogue, every reason says
    /// something, every outcome is "not applicable" or "unsupported", at most one per check.
    /// The harness runs nothing when this fails.
    pub fn validate_expectations(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        for (i, e) in self.expected.iter().enumerate() {
            if checks::by_id(&e.id).is_none() {
                let ids = checks::catalogue();
                let range = match (ids.first(), ids.last()) {
                    (Some(a), Some(b)) => format!("{}–{}", a.id, b.id),
                    _ => "empty".to_owned(),
                };
                problems.push(format!("{:?} is not a check id of the catalogue ({range})", e.id));
            }
            if e.reason.trim().is_empty() {
                problems.push(format!(
                    "{}: the expected {} has no reason",
                    e.id,
                    e.outcome.label()
                ));
            }
            if matches!(e.outcome, Outcome::Pass | Outcome::Fail) {
                problems.push(format!(
                    "{}: only \"not applicable\" or \"unsupported\" can be expected, not {}",
                    e.id,
                    e.outcome.label()
                ));
            }
            if self.expected[..i].iter().any(|o| o.id.eq_ignore_ascii_case(&e.id)) {
                problems.push(format!("{}: declared more than once", e.id));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("invalid expected outcomes in Options: {}", problems.join("; ")))
        }
    }
}

/// Runs the whole suite against `factory` and returns the report (also calls the factory's
/// `teardown`). Does not print or write anything: see [`Report::write`] and
/// [`Report::to_text`].
///
/// When the factory cannot build an instance, every check is reported failed with the reason.
pub async fn run(factory: impl ProviderFactory, options: Options) -> Report {
    let factory: Arc<dyn ProviderFactory> = Arc::new(factory);
    let report = match Suite::from_arc(factory.clone(), options).await {
        Ok(suite) => suite.run_all().await,
        Err(e) => setup_failed_report(factory.name(), &e.to_string()),
    };
    factory.teardown().await;
    report
}

pub(crate) fn setup_failed_report(provider: &str, error: &str) -> Report {
    Report {
        provider: provider.to_owned(),
        server: None,
        security: None,
        capabilities: Capabilities::new(),
        results: checks::catalogue()
            .iter()
            .map(|c| CheckResult {
                id: c.id,
                name: c.name,
                outcome: Outcome::Fail,
                detail: format!("the factory could not build an instance: {error}"),
                duration: Duration::ZERO,
                expected: None,
            })
            .collect(),
        figures: Figures::default(),
    }
}

/// Catches a panic of a check so the run goes on.
struct CatchPanic<F>(std::pin::Pin<Box<F>>);

impl<F: Future> Future for CatchPanic<F> {
    type Output = Result<F::Output, String>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Err(p) => std::task::Poll::Ready(Err(panic_message(&p))),
        }
    }
}

pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Expectation;

    #[test]
    fn expectations_are_declared_with_their_reason_and_the_last_one_wins() {
        let o = Options::new()
            .expect_not_applicable("c24", " no address ")
            .expect_unsupported("C20", "no fencing")
            .expect_unsupported("C24", "changed my mind");
        assert_eq!(o.expected.len(), 2);
        let e = o.expectation("C24").unwrap();
        assert_eq!(
            (e.id.as_str(), e.outcome, e.reason.as_str()),
            ("C24", Outcome::Unsupported, "changed my mind")
        );
        assert_eq!(o.expectation("c20").unwrap().outcome, Outcome::Unsupported);
        assert!(o.expectation("C01").is_none());
        assert_eq!(
            o.expectation("C20").unwrap().to_string(),
            "C20 expected unsupported: no fencing"
        );
        assert_eq!(o.validate_expectations(), Ok(()));
        assert_eq!(Options::new().validate_expectations(), Ok(()));
    }

    #[test]
    fn unknown_ids_and_empty_reasons_are_refused() {
        let err = Options::new()
            .expect_not_applicable("C52", "typo")
            .expect_not_applicable("C25", "  ")
            .validate_expectations()
            .unwrap_err();
        assert!(err.contains("\"C52\" is not a check id"), "{err}");
        assert!(err.contains("C25: the expected not applicable has no reason"), "{err}");
        let mut o = Options::new().expect_not_applicable("C24", "x");
        o.expected.push(Expectation {
            id: "C24".into(),
            outcome: Outcome::Fail,
            reason: "y".into(),
        });
        let err = o.validate_expectations().unwrap_err();
        assert!(err.contains("not FAIL"), "{err}");
        assert!(err.contains("C24: declared more than once"), "{err}");
    }
}

//! The outcome types, at the bottom of the kit: what a check concludes ([`Outcome`],
//! [`Verdict`]), what a provider's test declares it expects ([`Expectation`]), a check's result
//! in a run ([`CheckResult`]), the measured [`Figures`], and a run's [`Report`] with the queries
//! on it. Pure data and the verdict logic (is an outcome the expected one?); rendering is in
//! `report.rs`. Imports nothing from the crate.

use std::{fmt, time::Duration};

use serde::{Deserialize, Serialize};
use shedlock::Capabilities;

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The provider behaved as required.
    Pass,
    /// The provider broke the requirement (the detail says how).
    Fail,
    /// The check needs a capability the provider does not declare.
    Unsupported,
    /// The check needs a hook the factory does not offer (the detail says which).
    NotApplicable,
}

impl Outcome {
    /// The JSON spelling: `pass`, `fail`, `unsupported`, `not_applicable`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Unsupported => "unsupported",
            Outcome::NotApplicable => "not_applicable",
        }
    }

    /// The spelling for people: `pass`, `FAIL`, `unsupported`, `not applicable`.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "FAIL",
            Outcome::Unsupported => "unsupported",
            Outcome::NotApplicable => "not applicable",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// What a check concluded, with a human explanation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The outcome.
    pub outcome: Outcome,
    /// Why (for a failure: what was expected and what happened; for a pass: what was measured).
    pub detail: String,
}

impl Verdict {
    /// A pass.
    pub fn pass(detail: impl Into<String>) -> Self {
        Self { outcome: Outcome::Pass, detail: detail.into() }
    }

    /// A failure.
    pub fn fail(detail: impl Into<String>) -> Self {
        Self { outcome: Outcome::Fail, detail: detail.into() }
    }

    /// Capability not declared.
    pub fn unsupported(detail: impl Into<String>) -> Self {
        Self { outcome: Outcome::Unsupported, detail: detail.into() }
    }

    /// Hook not offered.
    pub fn not_applicable(detail: impl Into<String>) -> Self {
        Self { outcome: Outcome::NotApplicable, detail: detail.into() }
    }
}

/// A provider's declaration that one check is expected to end "not applicable" or
/// "unsupported", and why. Built by [`Options::expect_not_applicable`] and
/// [`Options::expect_unsupported`].
///
/// [`Options::expect_not_applicable`]: crate::Options::expect_not_applicable
/// [`Options::expect_unsupported`]: crate::Options::expect_unsupported
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Expectation {
    /// The check's id, e.g. `C24`.
    pub id: String,
    /// The expected outcome: [`Outcome::NotApplicable`] or [`Outcome::Unsupported`].
    pub outcome: Outcome,
    /// Why the provider cannot do better, e.g. "SQLite is embedded: no network address to cut".
    pub reason: String,
}

impl fmt::Display for Expectation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} expected {}: {}", self.id, self.outcome.label(), self.reason)
    }
}

/// The result of one check in a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// The catalogue id, e.g. `C05`.
    pub id: &'static str,
    /// The check's name, e.g. `expires_after_at_most`.
    pub name: &'static str,
    /// The outcome.
    pub outcome: Outcome,
    /// Why.
    pub detail: String,
    /// How long the check took.
    pub duration: Duration,
    /// What the provider's test declared for this check ([`Options::expect_not_applicable`],
    /// [`Options::expect_unsupported`]); `None`: it must pass.
    ///
    /// [`Options::expect_not_applicable`]: crate::Options::expect_not_applicable
    /// [`Options::expect_unsupported`]: crate::Options::expect_unsupported
    pub expected: Option<Expectation>,
}

impl CheckResult {
    /// The test name the harness uses: `C05_expires_after_at_most`.
    pub fn test_name(&self) -> String {
        format!("{}_{}", self.id, self.name)
    }

    /// Whether the outcome is the one the provider's test expects: a pass with nothing
    /// declared, or exactly the declared "not applicable" / "unsupported".
    pub fn as_expected(&self) -> bool {
        self.unexpected().is_none()
    }

    /// Why the outcome is not the expected one (`None` when it is): a failure (its detail); a
    /// "not applicable" or "unsupported" that was not declared, or declared as the other one;
    /// a pass where something else was declared (the declaration is stale).
    pub fn unexpected(&self) -> Option<String> {
        let (id, outcome, detail) = (self.id, self.outcome, &self.detail);
        match (outcome, &self.expected) {
            (Outcome::Pass, None) => None,
            (Outcome::Fail, _) => Some(detail.clone()),
            (Outcome::Pass, Some(e)) => Some(format!(
                "{id} passed, but the test declares it {} ({}): the declaration is stale, \
                 remove it",
                e.outcome.label(),
                e.reason
            )),
            (o, Some(e)) if e.outcome == o => None,
            (o, Some(e)) => Some(format!(
                "{id} is {} ({detail}), but the test declares it {} ({})",
                o.label(),
                e.outcome.label(),
                e.reason
            )),
            (o, None) => Some(format!(
                "{id} is {} ({detail}), which the test does not expect: fix the factory, or \
                 declare it with Options::{}(\"{id}\", <reason>)",
                o.label(),
                if o == Outcome::Unsupported {
                    "expect_unsupported"
                } else {
                    "expect_not_applicable"
                }
            )),
        }
    }

    /// The outcome for people, with `(expected)` after a declared "not applicable" or
    /// "unsupported" and `(UNEXPECTED)` after any other outcome that is not as expected.
    pub fn outcome_label(&self) -> String {
        match (self.outcome, self.as_expected()) {
            (Outcome::Pass | Outcome::Fail, true) | (Outcome::Fail, false) => {
                self.outcome.label().to_owned()
            }
            (o, true) => format!("{} (expected)", o.label()),
            (o, false) => format!("{} (UNEXPECTED)", o.label()),
        }
    }
}

/// Measured figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// Median latency of a successful `try_lock` on a free name, in microseconds.
    pub acquire_p50_us: Option<f64>,
    /// 99th percentile of the same.
    pub acquire_p99_us: Option<f64>,
    /// Client-to-server round trips per successful acquire, measured by the fault proxy; `None`
    /// when the factory offers no backend address.
    pub round_trips_acquire: Option<f64>,
    /// Round trips per release.
    pub round_trips_release: Option<f64>,
    /// Round trips per [`try_lock_many`](shedlock::LockProvider::try_lock_many) of
    /// [`BATCH_FIGURE_NAMES`](crate::tools::proxy::BATCH_FIGURE_NAMES) free names, with
    /// [`BatchOptions`](shedlock::BatchOptions)'s defaults, measured by the fault proxy.
    pub round_trips_batch: Option<f64>,
    /// Round trips the client started after its calls had returned (e.g. a connection pool
    /// checking a connection it got back), per acquire+release cycle. Shown in the Markdown
    /// report; not part of the JSON schema.
    pub round_trips_background: Option<f64>,
    /// For client-time providers: the largest injected skew at which no exclusion violation was
    /// seen (C18), in milliseconds. `None` for server-time providers or when C18 did not run.
    pub skew_bound_ms: Option<f64>,
    /// Soak runs only: the acquisitions the history checks examined (C15's winners, C16's and
    /// C28's histories).
    pub acquisitions_checked: Option<u64>,
    /// Soak runs only: how many times two holders held one name at once.
    pub overlaps: Option<u64>,
}

/// A run's report: one result per check, the declared capabilities and the figures.
#[derive(Debug, Clone)]
pub struct Report {
    /// The provider's name.
    pub provider: String,
    /// What the provider ran against, as its factory says ([`ProviderFactory::server`](crate::ProviderFactory::server)):
    /// the product and its version, and whether it is a stand-in. `None` when it did not say.
    pub server: Option<String>,
    /// The posture the instances ran in, as the factory says
    /// ([`ProviderFactory::security`](crate::ProviderFactory::security)); `None` when it did not
    /// say.
    pub security: Option<crate::Security>,
    /// The declared capabilities (from an instance).
    pub capabilities: Capabilities,
    /// One result per check that ran, in catalogue order.
    pub results: Vec<CheckResult>,
    /// The figures.
    pub figures: Figures,
}

impl Report {
    /// Whether no check failed. (A run can pass and still not be as expected: see
    /// [`as_expected`](Self::as_expected).)
    pub fn passed(&self) -> bool {
        self.results.iter().all(|r| r.outcome != Outcome::Fail)
    }

    /// Whether every check's outcome is the expected one ([`CheckResult::as_expected`]): what
    /// the harness and `cargo xtask conformance` require.
    pub fn as_expected(&self) -> bool {
        self.results.iter().all(CheckResult::as_expected)
    }

    /// The checks whose outcome is not the expected one.
    pub fn unexpected(&self) -> Vec<&CheckResult> {
        self.results.iter().filter(|r| !r.as_expected()).collect()
    }

    /// The result of check `id` (e.g. `"C05"`), if it ran.
    pub fn result(&self, id: &str) -> Option<&CheckResult> {
        self.results.iter().find(|r| r.id == id)
    }

    /// The failed checks.
    pub fn failures(&self) -> Vec<&CheckResult> {
        self.results.iter().filter(|r| r.outcome == Outcome::Fail).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(outcome: Outcome, expected: Option<Outcome>) -> CheckResult {
        CheckResult {
            id: "C24",
            name: "backend_unreachable",
            outcome,
            detail: "the detail".into(),
            duration: Duration::ZERO,
            expected: expected.map(|outcome| Expectation {
                id: "C24".into(),
                outcome,
                reason: "the reason".into(),
            }),
        }
    }

    #[test]
    fn only_the_declared_non_pass_outcomes_are_as_expected() {
        use Outcome::*;
        for (outcome, expected, ok) in [
            (Pass, None, true),
            (Fail, None, false),
            (Unsupported, None, false),
            (NotApplicable, None, false),
            (NotApplicable, Some(NotApplicable), true),
            (Unsupported, Some(Unsupported), true),
            (NotApplicable, Some(Unsupported), false),
            (Unsupported, Some(NotApplicable), false),
            (Pass, Some(NotApplicable), false),
            (Pass, Some(Unsupported), false),
            (Fail, Some(NotApplicable), false),
        ] {
            let r = result(outcome, expected);
            assert_eq!(r.as_expected(), ok, "{outcome:?} with {expected:?} declared");
            assert_eq!(r.unexpected().is_none(), ok);
        }
        let stale = result(Pass, Some(NotApplicable)).unexpected().unwrap();
        assert!(stale.contains("C24 passed, but the test declares it not applicable"), "{stale}");
        assert!(stale.contains("stale"), "{stale}");
        let silent = result(NotApplicable, None).unexpected().unwrap();
        assert!(silent.contains("not applicable (the detail), which the test does not expect"));
        assert!(silent.contains("Options::expect_not_applicable(\"C24\""), "{silent}");
        let silent = result(Unsupported, None).unexpected().unwrap();
        assert!(silent.contains("Options::expect_unsupported(\"C24\""), "{silent}");
        let other = result(Unsupported, Some(NotApplicable)).unexpected().unwrap();
        assert!(other.contains("but the test declares it not applicable (the reason)"), "{other}");
        assert_eq!(result(Fail, None).unexpected().unwrap(), "the detail");
        assert_eq!(
            result(NotApplicable, Some(NotApplicable)).outcome_label(),
            "not applicable (expected)"
        );
        assert_eq!(result(NotApplicable, None).outcome_label(), "not applicable (UNEXPECTED)");
        assert_eq!(result(Pass, Some(NotApplicable)).outcome_label(), "pass (UNEXPECTED)");
        assert_eq!(result(Fail, None).outcome_label(), "FAIL");
    }
}

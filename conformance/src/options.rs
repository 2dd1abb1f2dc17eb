//! Sizes and limits of a conformance run, and the outcomes a provider's test expects.

use std::time::Duration;

use crate::outcome::{Expectation, Outcome};

/// Sizes, limits and filters of a run. The defaults keep one provider's suite within about three
/// minutes on a 2-core machine for a 1 ms-granularity backend; raise them (or use
/// [`Options::soak`]) for longer soak runs.
///
/// [`Options::from_env`] reads `SHEDLOCK_CONFORMANCE_SOAK` (a multiplier) and
/// `SHEDLOCK_CONFORMANCE_SEED`.
///
/// The options also carry the outcomes other than "pass" that the provider's test **expects**
/// ([`expect_not_applicable`](Self::expect_not_applicable),
/// [`expect_unsupported`](Self::expect_unsupported)), each with its reason. The results are a
/// regression guard: the [`harness`](crate::harness) fails every check whose outcome is not the
/// expected one — a failure, an undeclared "not applicable" or "unsupported", and a pass where
/// something else was declared (a stale declaration):
///
/// ```
/// use shedlock_conformance::Options;
/// let options = Options::from_env()
///     .expect_not_applicable("C24", "SQLite is embedded: no network address to cut")
///     .expect_not_applicable("C25", "SQLite is embedded: no server to restart");
/// assert_eq!(options.expectation("C24").map(|e| e.reason.as_str()),
///            Some("SQLite is embedded: no network address to cut"));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// Instances racing per round (C15, C16, C18).
    pub instances: usize,
    /// Race rounds (C15).
    pub race_rounds: usize,
    /// Fuzz tasks (C08), spread over [`fuzz_instances`](Self::fuzz_instances).
    pub fuzz_tasks: usize,
    /// Instances the fuzz tasks are spread over (C08).
    pub fuzz_instances: usize,
    /// Increments per fuzz task (C08); the fast task does a fifth of them.
    pub fuzz_iterations: usize,
    /// Size of the random history workload (C16): each instance makes a quarter of this many
    /// acquisitions (at most four times this many attempts).
    pub history_ops: usize,
    /// Cases of the model-based property test (C17). `None`: scaled from the granularity.
    pub model_cases: Option<u32>,
    /// Maximum steps per model case (C17).
    pub model_max_steps: usize,
    /// Skews to inject (C18). `None`: a ladder from a few ms to one hour, scaled to the
    /// granularity.
    pub skews: Option<Vec<Duration>>,
    /// For client-time providers: the clock skew below which the provider documents it is safe.
    /// C18 fails if a violation is seen below it. `None`: only measured.
    pub documented_skew_bound: Option<Duration>,
    /// A soak run: C15, C16 and C28 repeat for this long in total (a third each), C16 through
    /// the fault proxy with delays and cuts mixed in when the factory offers a backend address,
    /// and the report counts the acquisitions checked and the overlaps found. `None`: a normal
    /// run. From `SHEDLOCK_CONFORMANCE_SOAK_MINUTES` in [`Options::from_env`].
    pub soak_for: Option<Duration>,
    /// How long the node processes of each rung of C28 run their contended workload.
    pub process_skew_run_for: Duration,
    /// Instances running the scheduler (C19).
    pub scheduler_instances: usize,
    /// Fire periods observed per scheduler run (C19).
    pub scheduler_fires: u32,
    /// Operations C26 cancels mid-flight (polled, still pending when dropped); it draws at most
    /// eight times as many operations to get there.
    pub cancel_rounds: usize,
    /// The longest any call may take when the backend is unreachable (C24). A call that hangs
    /// longer fails the check.
    pub fault_bound: Duration,
    /// How long a provider may take to recover after a backend restart (C25).
    pub recovery_bound: Duration,
    /// Samples for the acquire latency figures.
    pub latency_samples: usize,
    /// Round trips sampled per operation through the fault proxy.
    pub round_trip_samples: usize,
    /// The start of every lock name (a random part is appended per run so repeated runs against
    /// a persistent backend never collide).
    pub name_prefix: String,
    /// Seed for the kit's randomness. `None`: random (printed in failures).
    pub seed: Option<u64>,
    /// Run only checks whose id or name contains one of these (for [`run`](crate::run); the
    /// harness uses libtest's own filter). Empty: all.
    pub only: Vec<String>,
    /// Whether to measure the figures (latency, round trips).
    pub figures: bool,
    /// The outcomes other than "pass" the provider's test expects, at most one per check (see
    /// [`expect_not_applicable`](Self::expect_not_applicable)). Empty: every check must pass.
    pub expected: Vec<Expectation>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            instances: 4,
            race_rounds: 40,
            fuzz_tasks: 6,
            fuzz_instances: 3,
            fuzz_iterations: 25,
            history_ops: 60,
            model_cases: None,
            model_max_steps: 14,
            skews: None,
            documented_skew_bound: None,
            process_skew_run_for: Duration::from_secs(2),
            soak_for: None,
            scheduler_instances: 3,
            scheduler_fires: 4,
            cancel_rounds: 150,
            fault_bound: Duration::from_secs(10),
            recovery_bound: Duration::from_secs(30),
            latency_samples: 200,
            round_trip_samples: 20,
            name_prefix: "slc-".to_owned(),
            seed: None,
            only: Vec::new(),
            figures: true,
            expected: Vec::new(),
        }
    }
}

impl Options {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The defaults, scaled by `SHEDLOCK_CONFORMANCE_SOAK` (an integer multiplier) and seeded by
    /// `SHEDLOCK_CONFORMANCE_SEED` when set.
    pub fn from_env() -> Self {
        let mut o = Self::default();
        if let Some(f) =
            std::env::var("SHEDLOCK_CONFORMANCE_SOAK").ok().and_then(|v| v.parse().ok())
        {
            o = o.soak(f);
        }
        if let Some(s) =
            std::env::var("SHEDLOCK_CONFORMANCE_SEED").ok().and_then(|v| v.parse().ok())
        {
            o.seed = Some(s);
        }
        if let Some(m) = std::env::var("SHEDLOCK_CONFORMANCE_SOAK_MINUTES")
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|m| m.is_finite() && *m > 0.0)
        {
            o = o.soak_for(Duration::from_secs_f64(m * 60.0));
        }
        o
    }

    /// Multiplies every size (rounds, iterations, cases, ...) by `factor` for a soak run.
    #[must_use]
    pub fn soak(mut self, factor: u32) -> Self {
        let f = factor.max(1) as usize;
        self.race_rounds *= f;
        self.fuzz_iterations *= f;
        self.history_ops *= f;
        self.model_cases = Some(self.model_cases.unwrap_or(24) * factor.max(1));
        self.scheduler_fires *= factor.max(1);
        self.cancel_rounds *= f;
        self.latency_samples *= f;
        self.process_skew_run_for *= factor.max(1);
        self
    }

    /// A soak run of `d` ([`soak_for`](Self::soak_for)): only C15, C16 and C28, no figures.
    #[must_use]
    pub fn soak_for(mut self, d: Duration) -> Self {
        self.soak_for = Some(d);
        self.only = vec!["C15".into(), "C16".into(), "C28".into()];
        self.figures = false;
        self
    }

    /// Sets [`process_skew_run_for`](Self::process_skew_run_for).
    #[must_use]
    pub fn with_process_skew_run_for(mut self, d: Duration) -> Self {
        self.process_skew_run_for = d;
        self
    }

    /// Sets [`instances`](Self::instances) (at least 2).
    #[must_use]
    pub fn with_instances(mut self, n: usize) -> Self {
        self.instances = n.max(2);
        self
    }

    /// Sets [`race_rounds`](Self::race_rounds).
    #[must_use]
    pub fn with_race_rounds(mut self, n: usize) -> Self {
        self.race_rounds = n;
        self
    }

    /// Sets [`model_cases`](Self::model_cases).
    #[must_use]
    pub fn with_model_cases(mut self, n: u32) -> Self {
        self.model_cases = Some(n);
        self
    }

    /// Sets [`skews`](Self::skews).
    #[must_use]
    pub fn with_skews(mut self, skews: Vec<Duration>) -> Self {
        self.skews = Some(skews);
        self
    }

    /// Sets [`documented_skew_bound`](Self::documented_skew_bound).
    #[must_use]
    pub fn with_documented_skew_bound(mut self, bound: Duration) -> Self {
        self.documented_skew_bound = Some(bound);
        self
    }

    /// Sets [`fault_bound`](Self::fault_bound).
    #[must_use]
    pub fn with_fault_bound(mut self, bound: Duration) -> Self {
        self.fault_bound = bound;
        self
    }

    /// Sets [`recovery_bound`](Self::recovery_bound).
    #[must_use]
    pub fn with_recovery_bound(mut self, bound: Duration) -> Self {
        self.recovery_bound = bound;
        self
    }

    /// Sets [`name_prefix`](Self::name_prefix).
    #[must_use]
    pub fn with_name_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.name_prefix = prefix.into();
        self
    }

    /// Sets [`seed`](Self::seed).
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Sets [`only`](Self::only): run only checks whose id or name contains one of `filters`.
    #[must_use]
    pub fn with_only<I, S>(mut self, filters: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.only = filters.into_iter().map(Into::into).collect();
        self
    }

    /// Sets [`figures`](Self::figures).
    #[must_use]
    pub fn with_figures(mut self, measure: bool) -> Self {
        self.figures = measure;
        self
    }

    /// Declares that check `id` (e.g. `"C24"`) is expected to be **not applicable** (a hook the
    /// factory cannot offer), because of `reason`. Any other outcome of that check — including a
    /// pass, which means the declaration is stale — then fails the harness, and so does a "not
    /// applicable" of a check without this declaration. A later declaration for the same check
    /// replaces an earlier one.
    ///
    /// The harness refuses an id that is not in the catalogue and an empty reason.
    #[must_use]
    pub fn expect_not_applicable(self, id: impl Into<String>, reason: impl Into<String>) -> Self {
        self.expect(id.into(), Outcome::NotApplicable, reason.into())
    }

    /// Declares that check `id` is expected to be **unsupported** (it needs a capability the
    /// provider does not declare), because of `reason`. Same rules as
    /// [`expect_not_applicable`](Self::expect_not_applicable).
    #[must_use]
    pub fn expect_unsupported(self, id: impl Into<String>, reason: impl Into<String>) -> Self {
        self.expect(id.into(), Outcome::Unsupported, reason.into())
    }

    fn expect(mut self, id: String, outcome: Outcome, reason: String) -> Self {
        let id = id.trim().to_ascii_uppercase();
        self.expected.retain(|e| e.id != id);
        self.expected.push(Expectation { id, outcome, reason: reason.trim().to_owned() });
        self
    }

    /// The declaration for check `id`, if any (ids compare case-insensitively).
    pub fn expectation(&self, id: &str) -> Option<&Expectation> {
        self.expected.iter().find(|e| e.id.eq_ignore_ascii_case(id.trim()))
    }
}

//! Sizes and limits of a conformance run.

use std::time::Duration;

/// Sizes, limits and filters of a run. The defaults keep one provider's suite within about three
/// minutes on a 2-core machine for a 1 ms-granularity backend; raise them (or use
/// [`Options::soak`]) for longer soak runs.
///
/// [`Options::from_env`] reads `SHEDLOCK_CONFORMANCE_SOAK` (a multiplier) and
/// `SHEDLOCK_CONFORMANCE_SEED`.
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
    /// Instances running the scheduler (C19).
    pub scheduler_instances: usize,
    /// Fire periods observed per scheduler run (C19).
    pub scheduler_fires: u32,
    /// Cancelled operations (C26).
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
}

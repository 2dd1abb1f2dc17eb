//! [`Suite`]: one provider under test, with everything a check needs, and the [`Timing`]
//! margins. Running checks on a suite (`run_check`, `run_all`, `report`) is in `runner.rs`,
//! above the checks.

use std::{
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use shedlock::{BoxError, Capabilities, LockConfig, LockProvider};

use crate::{
    factory::{Hooks, InstanceOptions, ProviderFactory},
    options::Options,
    outcome::{Figures, Verdict},
};

/// Timing margins derived from the declared granularity `g` (at least 1 ms):
///
/// - `at_most`: the short `lock_at_most_for` used by expiry checks, `max(300 ms, 3 g)`;
/// - `early`: how much earlier than `lock_at_most_for` a lock may free, `g + 10 ms` (rounding);
/// - `slack`: how much later it may free, `max(2 g, 250 ms)` (scheduling on a loaded machine);
/// - `poll`: the interval between polls, `max(g / 4, 10 ms)`.
///
/// Checks measure every call's start and end against one monotonic clock and only fail when the
/// observed behaviour is impossible for a correct provider even with these margins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timing {
    /// The declared granularity (at least 1 ms).
    pub granularity: Duration,
    /// The short `lock_at_most_for`.
    pub at_most: Duration,
    /// Tolerance for a lock freeing early.
    pub early: Duration,
    /// Tolerance for a lock freeing late.
    pub slack: Duration,
    /// Poll interval.
    pub poll: Duration,
}

impl Timing {
    /// The margins for granularity `g`.
    pub fn for_granularity(g: Duration) -> Self {
        let g = g.max(Duration::from_millis(1));
        Self {
            granularity: g,
            at_most: (g * 3).max(Duration::from_millis(300)),
            early: g + Duration::from_millis(10),
            slack: (g * 2).max(Duration::from_millis(250)),
            poll: (g / 4).max(Duration::from_millis(10)),
        }
    }
}

/// One provider under test: the factory, its declared capabilities, hooks, options and timing.
/// Checks are plain async functions taking `&Suite` (see [`checks`](crate::checks)).
pub struct Suite {
    factory: Arc<dyn ProviderFactory>,
    hooks: Hooks,
    caps: Capabilities,
    options: Options,
    timing: Timing,
    prefix: String,
    seed: u64,
    counter: AtomicU64,
    figures: Mutex<Figures>,
    /// Soak: acquisitions examined by the history checks, and overlaps found.
    checked: AtomicU64,
    overlaps: AtomicU64,
    /// Soak: the fault proxy new instances connect through (C16 under faults).
    soak_proxy: Mutex<Option<std::net::SocketAddr>>,
    /// What the instances did against the provider's declarations (see
    /// [`Declared`](crate::tools::declared::Declared)).
    disagreement: Arc<crate::tools::declared::Disagreement>,
}

impl std::fmt::Debug for Suite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Suite")
            .field("provider", &self.factory.name())
            .field("capabilities", &self.caps)
            .field("hooks", &self.hooks)
            .field("timing", &self.timing)
            .field("prefix", &self.prefix)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl Suite {
    /// Prepares a run: builds one instance to read the declared capabilities.
    pub async fn new(factory: impl ProviderFactory, options: Options) -> Result<Self, BoxError> {
        Self::from_arc(Arc::new(factory), options).await
    }

    /// Like [`Suite::new`] for a shared factory.
    pub async fn from_arc(
        factory: Arc<dyn ProviderFactory>,
        options: Options,
    ) -> Result<Self, BoxError> {
        let probe = factory.create(InstanceOptions::new(0)).await?;
        let caps = probe.capabilities();
        drop(probe);
        let hooks = factory.hooks();
        let seed = options.seed.unwrap_or_else(|| fastrand::u64(..));
        let prefix = format!("{}{:06x}-", options.name_prefix, fastrand::u32(..) & 0xff_ffff);
        Ok(Self {
            factory,
            hooks,
            timing: Timing::for_granularity(caps.granularity),
            caps,
            options,
            prefix,
            seed,
            counter: AtomicU64::new(0),
            figures: Mutex::new(Figures::default()),
            checked: AtomicU64::new(0),
            overlaps: AtomicU64::new(0),
            soak_proxy: Mutex::new(None),
            disagreement: Arc::default(),
        })
    }

    /// The provider's name.
    pub fn provider_name(&self) -> &str {
        self.factory.name()
    }

    /// The factory.
    pub fn factory(&self) -> &Arc<dyn ProviderFactory> {
        &self.factory
    }

    /// The declared capabilities.
    pub fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    /// The hooks the factory offers.
    pub fn hooks(&self) -> &Hooks {
        &self.hooks
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The timing margins.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// The seed of this run's randomness.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// A random generator, different on each call but reproducible from [`seed`](Self::seed).
    pub fn rng(&self) -> fastrand::Rng {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        fastrand::Rng::with_seed(self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// A lock name unique to this run: `<prefix><random>-<tag>-<n>`.
    pub fn lock_name(&self, tag: &str) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("{}{tag}-{n}", self.prefix)
    }

    /// The run's name prefix (every lock name starts with it).
    pub fn name_prefix(&self) -> &str {
        &self.prefix
    }

    /// Builds one instance with the system clock and the real address.
    pub async fn instance(&self) -> Result<Arc<dyn LockProvider>, BoxError> {
        self.instance_with(InstanceOptions::new(0)).await
    }

    /// Builds one instance with `options`.
    pub async fn instance_with(
        &self,
        options: InstanceOptions,
    ) -> Result<Arc<dyn LockProvider>, BoxError> {
        Ok(self.declared(self.factory.create(options).await?))
    }

    /// `instance` held to its declarations (see [`Declared`](crate::tools::declared::Declared)).
    fn declared(&self, instance: Arc<dyn LockProvider>) -> Arc<dyn LockProvider> {
        crate::tools::declared::Declared::wrap(
            instance,
            self.caps.clock_step,
            self.disagreement.clone(),
        )
    }

    /// The first disagreement with the provider's declarations since the last call.
    pub(crate) fn take_disagreement(&self) -> Option<String> {
        self.disagreement.take()
    }

    /// Builds `n` independent instances (in a soak run, through the fault proxy while one is
    /// active).
    pub async fn instances(&self, n: usize) -> Result<Vec<Arc<dyn LockProvider>>, BoxError> {
        let proxy = *self.soak_proxy.lock().unwrap_or_else(PoisonError::into_inner);
        let mut v = Vec::with_capacity(n);
        for i in 0..n {
            let mut o = InstanceOptions::new(i);
            if let Some(a) = proxy {
                o = o.with_address(a);
            }
            v.push(self.instance_with(o).await?);
        }
        Ok(v)
    }

    /// Whether this is a soak run ([`Options::soak_for`]): the workloads then tolerate
    /// retryable errors (the kit injects faults), and the figures count what was checked.
    pub fn soaking(&self) -> bool {
        self.options.soak_for.is_some()
    }

    /// Counts `n` acquisitions examined by a history check (soak figure).
    pub(crate) fn count_checked(&self, n: usize) {
        self.checked.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts one overlap of two holders (soak figure).
    pub(crate) fn count_overlap(&self) {
        self.overlaps.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_soak_proxy(&self, addr: Option<std::net::SocketAddr>) {
        *self.soak_proxy.lock().unwrap_or_else(PoisonError::into_inner) = addr;
    }

    /// A lock configuration (an invalid one is reported as an error string).
    pub fn config(
        &self,
        name: &str,
        at_most: Duration,
        at_least: Duration,
    ) -> Result<LockConfig, Verdict> {
        LockConfig::new(name, at_most, at_least)
            .map_err(|e| Verdict::fail(format!("kit built an invalid config: {e}")))
    }

    /// Records the measured skew bound (C18).
    pub(crate) fn set_skew_bound(&self, bound_ms: Option<f64>) {
        self.figures.lock().unwrap_or_else(PoisonError::into_inner).skew_bound_ms = bound_ms;
    }

    /// The figures measured so far.
    pub fn figures(&self) -> Figures {
        let mut f = self.figures.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if self.soaking() {
            f.acquisitions_checked = Some(self.checked.load(Ordering::Relaxed));
            f.overlaps = Some(self.overlaps.load(Ordering::Relaxed));
        }
        f
    }

    /// Stores the figures measured by [`measure_figures`](Self::measure_figures) (everything
    /// but the skew bound and the soak counts).
    pub(crate) fn set_measured_figures(&self, figures: Figures) {
        let mut f = self.figures.lock().unwrap_or_else(PoisonError::into_inner);
        f.acquire_p50_us = figures.acquire_p50_us;
        f.acquire_p99_us = figures.acquire_p99_us;
        f.round_trips_acquire = figures.round_trips_acquire;
        f.round_trips_release = figures.round_trips_release;
        f.round_trips_batch = figures.round_trips_batch;
        f.round_trips_background = figures.round_trips_background;
    }
}

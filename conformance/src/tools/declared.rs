//! [`Declared`]: the wrapper around every instance a suite builds. It holds the provider to
//! what it declares, once, for every call of every check:
//!
//! - each lock's lease ends by the [`Capabilities::clock_step`] the provider declares (the step
//!   of every [`Acquisition`](shedlock::Acquisition) it returns must be that one);
//! - `list` is asked for a page within `1..=`[`MAX_PAGE`](shedlock::inspect::MAX_PAGE), so an
//!   author never clamps a limit the kit chose.
//!
//! A disagreement is remembered, and the check that met it fails saying so (see
//! [`Suite::run_check`](crate::Suite::run_check)).

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use shedlock::{
    BatchOptions, BatchOutcome, Capabilities, ForceRelease, Lock, LockConfig, LockInfo, LockPage,
    LockProvider, Result as ShedResult, inspect::page_limit,
};

/// The first disagreement with a declaration seen during a check.
#[derive(Debug, Default)]
pub(crate) struct Disagreement(Mutex<Option<String>>);

impl Disagreement {
    fn record(&self, what: String) {
        let mut first = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if first.is_none() {
            *first = Some(what);
        }
    }

    /// The disagreement seen since the last call, if any (and forgets it).
    pub(crate) fn take(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// An instance as the suite hands it to the checks.
pub(crate) struct Declared {
    inner: Arc<dyn LockProvider>,
    clock_step: Duration,
    seen: Arc<Disagreement>,
}

impl Declared {
    /// Records a lease whose clock step is not the declared one.
    fn compare(&self, l: &Lock) {
        let used = l.lease().clock_step();
        if used != self.clock_step {
            self.seen.record(format!(
                "the lock {:?} was granted with a lease whose clock step is {} µs \
                 (Lease::clock_step), but the provider declares {} µs \
                 (Capabilities::clock_step): build every Acquisition with \
                 Acquisition::begin_declared(config, &capabilities), so the step is \
                 declared once",
                l.name(),
                used.as_micros(),
                self.clock_step.as_micros()
            ));
        }
    }

    /// Wraps `inner`, which declares `clock_step`; disagreements go to `seen`.
    pub(crate) fn wrap(
        inner: Arc<dyn LockProvider>,
        clock_step: Duration,
        seen: Arc<Disagreement>,
    ) -> Arc<dyn LockProvider> {
        Arc::new(Self { inner, clock_step, seen })
    }
}

#[async_trait]
impl LockProvider for Declared {
    async fn try_lock(&self, config: &LockConfig) -> ShedResult<Option<Lock>> {
        let lock = self.inner.try_lock(config).await?;
        if let Some(l) = &lock {
            self.compare(l);
        }
        Ok(lock)
    }

    async fn try_lock_many(
        &self,
        configs: &[LockConfig],
        options: BatchOptions,
    ) -> ShedResult<BatchOutcome> {
        let answers = self.inner.try_lock_many(configs, options).await?;
        for l in answers.iter().flatten().flatten() {
            self.compare(l);
        }
        Ok(answers)
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }

    async fn check(&self) -> ShedResult<()> {
        self.inner.check().await
    }

    async fn inspect(&self, name: &str) -> ShedResult<Option<LockInfo>> {
        self.inner.inspect(name).await
    }

    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> ShedResult<LockPage> {
        self.inner.list(prefix, cursor, page_limit(limit)).await
    }

    async fn force_release(&self, seen: &LockInfo) -> ShedResult<ForceRelease> {
        self.inner.force_release(seen).await
    }
}

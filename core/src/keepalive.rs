//! Keep-alive: extend a lock for as long as its task runs.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use tokio::{sync::Mutex, task::JoinHandle, time::Instant};

use crate::{
    config::LockConfig,
    error::{Error, Result},
    inspect::{ForceRelease, LockInfo, LockPage},
    lease::Lease,
    provider::{Capabilities, Lock, LockHandle, LockProvider},
};

/// Wraps an extend-capable provider so that every lock it hands out is extended by
/// `lock_at_most_for` every `lock_at_most_for / 2` until it is released.
///
/// A long task then keeps its lock, while a dead holder's lock still frees within
/// `lock_at_most_for`. The lock's [`LostSignal`](crate::LostSignal) fires, and the keep-alive
/// stops, when an extension finds the lock taken, or when the lock's lease ends without a
/// successful extension (extensions that fail for a transient reason are retried until then; a
/// process paused past the deadline finds its lease already ended and does not extend). The task
/// can await or poll the signal via [`Lock::lost_signal`] or
/// [`active_lock_lost_signal`](crate::active_lock_lost_signal).
#[derive(Clone)]
pub struct KeepAliveProvider {
    inner: Arc<dyn LockProvider>,
}

impl std::fmt::Debug for KeepAliveProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeepAliveProvider").finish_non_exhaustive()
    }
}

impl KeepAliveProvider {
    /// Wraps `inner`. Fails with [`Error::Unsupported`] if it cannot extend.
    pub fn new(inner: Arc<dyn LockProvider>) -> Result<Self> {
        if !inner.capabilities().extend {
            return Err(Error::Unsupported { backend: "keep-alive", operation: "extend" });
        }
        Ok(Self { inner })
    }

    /// `lock`, kept alive by a task of its own until it is released or lost.
    fn kept_alive(&self, lock: Lock, config: &LockConfig) -> Lock {
        let token = lock.fencing_token();
        let lease = lock.lease().clone();
        let config = config.clone();
        let backend = self.inner.backend_name();
        lock.wrap(move |inner| {
            let shared = Arc::new(Mutex::new(Some(inner)));
            let task = tokio::spawn(keep_alive(shared.clone(), config, lease, backend));
            KeepAliveHandle { shared, task: Some(task), token }
        })
    }
}

#[async_trait]
impl LockProvider for KeepAliveProvider {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        let Some(lock) = self.inner.try_lock(config).await? else { return Ok(None) };
        Ok(Some(self.kept_alive(lock, config)))
    }

    async fn try_lock_many(
        &self,
        configs: &[LockConfig],
        options: crate::batch::BatchOptions,
    ) -> Result<crate::batch::BatchOutcome> {
        let answers = self.inner.try_lock_many(configs, options).await?;
        Ok(answers
            .into_iter()
            .zip(configs)
            .map(|(answer, config)| answer.map(|l| l.map(|l| self.kept_alive(l, config))))
            .collect())
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }

    async fn check(&self) -> Result<()> {
        self.inner.check().await
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>> {
        self.inner.inspect(name).await
    }

    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<LockPage> {
        self.inner.list(prefix, cursor, limit).await
    }

    async fn force_release(&self, seen: &LockInfo) -> Result<ForceRelease> {
        self.inner.force_release(seen).await
    }
}

/// The smallest pause between two extension attempts after a transient failure.
const RETRY_PAUSE: Duration = Duration::from_millis(10);

async fn keep_alive(
    shared: Arc<Mutex<Option<Lock>>>,
    original: LockConfig,
    lease: Lease,
    backend: &'static str,
) {
    let at_most = original.lock_at_most_for();
    // The acquisition began lock_at_most_for (less the clock step) before its first deadline.
    let acquired = (lease.valid_until() + lease.clock_step())
        .checked_sub(at_most)
        .unwrap_or_else(Instant::now);
    let at_least_until = acquired.checked_add(original.lock_at_least_for()).unwrap_or(acquired);
    let period = (at_most / 2).max(Duration::from_millis(1));
    let mut next = Instant::now() + period;
    loop {
        tokio::time::sleep_until(next).await;
        let mut slot = shared.lock().await;
        let Some(lock) = slot.as_mut() else { return };
        if lock.is_lost() {
            tracing::warn!(
                lock = original.name(),
                "lock lease ended before keep-alive could extend it; lock lost"
            );
            return;
        }
        let now = Instant::now();
        let at_least = at_least_until.saturating_duration_since(now).min(at_most);
        match lock.extend(at_most, at_least).await {
            Ok(()) => {
                tracing::trace!(lock = original.name(), "keep-alive extended the lock");
                crate::metrics::extended(original.name(), backend);
                next = Instant::now() + period;
            }
            Err(error) if error.is_retryable() && !lock.is_lost() => {
                crate::metrics::error(original.name(), backend, "extend", &error);
                let pause = (lock.remaining() / 4).max(RETRY_PAUSE).min(period);
                tracing::warn!(lock = original.name(), %error, ?pause, "keep-alive extension failed; retrying");
                next = Instant::now() + pause;
            }
            Err(error) => {
                tracing::warn!(lock = original.name(), %error, "keep-alive extension failed; lock lost");
                crate::metrics::error(original.name(), backend, "extend", &error);
                return;
            }
        }
    }
}

struct KeepAliveHandle {
    shared: Arc<Mutex<Option<Lock>>>,
    task: Option<JoinHandle<()>>,
    token: Option<u64>,
}

impl KeepAliveHandle {
    async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for KeepAliveHandle {
    fn drop(&mut self) {
        // A holder that disappears without unlocking must not keep the lock alive.
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[async_trait]
impl LockHandle for KeepAliveHandle {
    async fn unlock(&mut self, _config: &LockConfig) -> Result<()> {
        self.stop().await;
        let lock = self.shared.lock().await.take();
        match lock {
            Some(lock) => lock.unlock().await,
            None => Ok(()),
        }
    }

    async fn extend(&mut self, config: &LockConfig) -> Result<()> {
        let mut slot = self.shared.lock().await;
        match slot.as_mut() {
            Some(lock) => lock.extend(config.lock_at_most_for(), config.lock_at_least_for()).await,
            None => Err(Error::LockLost { name: config.name().to_owned() }),
        }
    }

    fn fencing_token(&self) -> Option<u64> {
        self.token
    }
}

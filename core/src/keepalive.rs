//! Keep-alive: extend a lock for as long as its task runs.

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use async_trait::async_trait;
use tokio::{sync::Mutex, task::JoinHandle};

use crate::{
    clock::{SharedClock, system_clock},
    config::LockConfig,
    error::{Error, Result},
    provider::{Capabilities, Lock, LockHandle, LockProvider, LostNotifier, LostSignal},
};

/// Wraps an extend-capable provider so that every lock it hands out is extended by
/// `lock_at_most_for` every `lock_at_most_for / 2` until it is released.
///
/// A long task then keeps its lock, while a dead holder's lock still frees within
/// `lock_at_most_for`. When an extension fails, or this node's clock shows the lock was already
/// past its deadline before the extension could run (e.g. a paused process), the keep-alive stops
/// and the lock's [`LostSignal`] fires: the task can await or poll it via
/// [`Lock::lost_signal`] or [`active_lock_lost_signal`](crate::active_lock_lost_signal).
#[derive(Clone)]
pub struct KeepAliveProvider {
    inner: Arc<dyn LockProvider>,
    clock: SharedClock,
}

impl std::fmt::Debug for KeepAliveProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeepAliveProvider").field("clock", &self.clock).finish_non_exhaustive()
    }
}

impl KeepAliveProvider {
    /// Wraps `inner`. Fails with [`Error::Unsupported`] if it cannot extend.
    pub fn new(inner: Arc<dyn LockProvider>) -> Result<Self> {
        if !inner.capabilities().extend {
            return Err(Error::Unsupported { backend: "keep-alive", operation: "extend" });
        }
        Ok(Self { inner, clock: system_clock() })
    }

    /// Sets the clock used to judge whether the lock is past its deadline (default: system).
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }
}

#[async_trait]
impl LockProvider for KeepAliveProvider {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        let requested_at = self.clock.now();
        let Some(lock) = self.inner.try_lock(config).await? else { return Ok(None) };
        let token = lock.fencing_token();
        let shared = Arc::new(Mutex::new(Some(lock)));
        let (notifier, signal) = LostSignal::channel();
        let task = tokio::spawn(keep_alive(
            shared.clone(),
            config.clone(),
            self.clock.clone(),
            requested_at,
            notifier,
        ));
        Ok(Some(Lock::new(
            config.clone(),
            KeepAliveHandle { shared, task: Some(task), signal, token },
        )))
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

async fn keep_alive(
    shared: Arc<Mutex<Option<Lock>>>,
    original: LockConfig,
    clock: SharedClock,
    acquired_at: SystemTime,
    notifier: LostNotifier,
) {
    let at_most = original.lock_at_most_for();
    let at_least_until = add(acquired_at, original.lock_at_least_for());
    let period = (at_most / 2).max(Duration::from_millis(1));
    let mut deadline = add(acquired_at, at_most);
    loop {
        tokio::time::sleep(period).await;
        let mut slot = shared.lock().await;
        let Some(lock) = slot.as_mut() else { return };
        let now = clock.now();
        if now >= deadline {
            tracing::warn!(
                lock = original.name(),
                "lock passed its deadline before keep-alive could extend it"
            );
            notifier.notify_lost();
            return;
        }
        let at_least = at_least_until.duration_since(now).unwrap_or(Duration::ZERO).min(at_most);
        match lock.extend(at_most, at_least).await {
            Ok(()) => {
                deadline = add(now, at_most);
                tracing::trace!(lock = original.name(), "keep-alive extended the lock");
            }
            Err(error) => {
                tracing::warn!(lock = original.name(), %error, "keep-alive extension failed; lock lost");
                notifier.notify_lost();
                return;
            }
        }
    }
}

struct KeepAliveHandle {
    shared: Arc<Mutex<Option<Lock>>>,
    task: Option<JoinHandle<()>>,
    signal: LostSignal,
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

    fn lost_signal(&self) -> Option<LostSignal> {
        Some(self.signal.clone())
    }
}

/// `t + d`, saturating at `t` for absurd durations instead of panicking.
fn add(t: SystemTime, d: Duration) -> SystemTime {
    t.checked_add(d).unwrap_or(t)
}

//! The provider contract: [`LockProvider`], the [`Lock`] it hands out, and the [`Capabilities`]
//! each provider declares.

use std::{fmt, sync::Arc, time::Duration};

use async_trait::async_trait;

use crate::{config::LockConfig, error::Error, error::Result};

/// A lock backend. Implementations must be cheap to share (`Arc<dyn LockProvider>` works) and must
/// never block the async runtime.
///
/// `try_lock` does not wait for a held lock: it answers at once.
#[async_trait]
pub trait LockProvider: Send + Sync + 'static {
    /// Tries to take the lock named by `config`.
    ///
    /// - `Ok(Some(lock))`: this caller holds the lock until it calls [`Lock::unlock`] or until
    ///   `lock_at_most_for` has passed.
    /// - `Ok(None)`: the lock is held elsewhere (or, on this instance, by another caller).
    /// - `Err(_)`: the backend could not answer; the lock is not held by this caller.
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>>;

    /// What this provider guarantees. The conformance kit checks exactly these claims.
    fn capabilities(&self) -> Capabilities;
}

#[async_trait]
impl<P: LockProvider + ?Sized> LockProvider for Arc<P> {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        (**self).try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }
}

/// The backend side of a held lock. Providers implement this; users hold a [`Lock`].
#[async_trait]
pub trait LockHandle: Send + Sync + 'static {
    /// Releases the lock, honouring the current configuration's `lock_at_least_for` (measured
    /// from the acquisition or the last extension). Must be owner-checked when the provider
    /// declares `owner_checked`: if this holder no longer owns the lock, nothing changes and
    /// `Ok(())` is returned. Called at most once.
    async fn unlock(&mut self, config: &LockConfig) -> Result<()>;

    /// Extends the lock to `config.lock_at_most_for()` from now, with a new
    /// `lock_at_least_for` from now. Returns [`Error::LockLost`] if the lock is no longer held by
    /// this holder (expired or taken over): then nothing changes on the backend.
    async fn extend(&mut self, config: &LockConfig) -> Result<()> {
        let _ = config;
        Err(Error::Unsupported { backend: "this provider", operation: "extend" })
    }

    /// The fencing token of this acquisition, if the provider supports fencing: strictly
    /// greater than the token of every earlier acquisition of the same name.
    fn fencing_token(&self) -> Option<u64> {
        None
    }

    /// A signal that fires when the lock is known to be lost (e.g. a keep-alive extension failed).
    fn lost_signal(&self) -> Option<LostSignal> {
        None
    }
}

/// A held lock. Release it with [`unlock`](Lock::unlock), which consumes it so it cannot be
/// released twice. Dropping it without unlocking leaves the lock held until `lock_at_most_for`
/// has passed (the safe default); the [`LockingExecutor`](crate::LockingExecutor) always releases.
#[must_use = "a lock that is dropped stays held until lock_at_most_for has passed"]
pub struct Lock {
    config: LockConfig,
    handle: Box<dyn LockHandle>,
}

impl Lock {
    /// Wraps a provider's handle. Called by providers.
    pub fn new(config: LockConfig, handle: impl LockHandle) -> Self {
        Self { config, handle: Box::new(handle) }
    }

    /// Wraps a boxed provider handle. Called by providers that wrap other providers.
    pub fn from_boxed(config: LockConfig, handle: Box<dyn LockHandle>) -> Self {
        Self { config, handle }
    }

    /// The configuration currently in force (updated by successful extensions).
    pub fn config(&self) -> &LockConfig {
        &self.config
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.config.name()
    }

    /// Releases the lock (honouring `lock_at_least_for`).
    pub async fn unlock(mut self) -> Result<()> {
        self.handle.unlock(&self.config).await
    }

    /// Extends the lock: it is now held until `lock_at_most_for` from now, and an unlock keeps
    /// it until `lock_at_least_for` from now. Fails with [`Error::LockLost`] when the lock was
    /// lost, [`Error::Unsupported`] when the provider cannot extend, and
    /// [`Error::InvalidConfig`] for invalid durations.
    pub async fn extend(
        &mut self,
        lock_at_most_for: Duration,
        lock_at_least_for: Duration,
    ) -> Result<()> {
        let next = self.config.with_durations(lock_at_most_for, lock_at_least_for)?;
        self.handle.extend(&next).await?;
        self.config = next;
        Ok(())
    }

    /// The fencing token of this acquisition, when the provider supports fencing.
    pub fn fencing_token(&self) -> Option<u64> {
        self.handle.fencing_token()
    }

    /// A signal that fires when this lock is known to be lost (keep-alive locks).
    pub fn lost_signal(&self) -> Option<LostSignal> {
        self.handle.lost_signal()
    }

    /// Unwraps into the configuration and the provider handle.
    pub fn into_parts(self) -> (LockConfig, Box<dyn LockHandle>) {
        (self.config, self.handle)
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("config", &self.config)
            .field("fencing_token", &self.fencing_token())
            .finish_non_exhaustive()
    }
}

/// A signal that a lock was lost. Clone it freely; await [`LostSignal::lost`] or poll
/// [`LostSignal::is_lost`].
#[derive(Debug, Clone)]
pub struct LostSignal {
    rx: tokio::sync::watch::Receiver<bool>,
}

/// The sending side of a [`LostSignal`].
#[derive(Debug)]
pub struct LostNotifier {
    tx: tokio::sync::watch::Sender<bool>,
}

impl LostSignal {
    /// A connected notifier and signal.
    pub fn channel() -> (LostNotifier, LostSignal) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (LostNotifier { tx }, LostSignal { rx })
    }

    /// Whether the lock is known to be lost.
    pub fn is_lost(&self) -> bool {
        *self.rx.borrow()
    }

    /// Completes when the lock is lost. Never completes if the notifier is dropped without
    /// signalling (the lock was released normally).
    pub async fn lost(&self) {
        let mut rx = self.rx.clone();
        if rx.wait_for(|lost| *lost).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl LostNotifier {
    /// Signals that the lock is lost.
    pub fn notify_lost(&self) {
        self.tx.send_replace(true);
    }
}

/// What a provider guarantees. Declared by the provider, checked by the conformance kit.
///
/// Build one with [`Capabilities::new`] and the `with_*` methods.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// [`Lock::extend`] is supported.
    pub extend: bool,
    /// Locks carry monotonic fencing tokens.
    pub fencing: bool,
    /// Expiry is judged by the backend's clock, so client clock skew cannot break exclusion.
    pub server_time: bool,
    /// A stale holder's unlock or extend changes nothing.
    pub owner_checked: bool,
    /// The smallest time step the backend honours (e.g. 1 s for whole-second TTLs).
    pub granularity: Duration,
    /// The longest lock name accepted, in bytes; `None` when effectively unlimited.
    pub max_name_len: Option<usize>,
}

impl Capabilities {
    /// Nothing optional supported: no extend, no fencing, client time, not owner-checked,
    /// 1 ms granularity, unlimited names.
    pub fn new() -> Self {
        Self {
            extend: false,
            fencing: false,
            server_time: false,
            owner_checked: false,
            granularity: Duration::from_millis(1),
            max_name_len: None,
        }
    }

    /// Sets [`extend`](Self::extend).
    pub fn with_extend(mut self, v: bool) -> Self {
        self.extend = v;
        self
    }

    /// Sets [`fencing`](Self::fencing).
    pub fn with_fencing(mut self, v: bool) -> Self {
        self.fencing = v;
        self
    }

    /// Sets [`server_time`](Self::server_time).
    pub fn with_server_time(mut self, v: bool) -> Self {
        self.server_time = v;
        self
    }

    /// Sets [`owner_checked`](Self::owner_checked).
    pub fn with_owner_checked(mut self, v: bool) -> Self {
        self.owner_checked = v;
        self
    }

    /// Sets [`granularity`](Self::granularity).
    pub fn with_granularity(mut self, v: Duration) -> Self {
        self.granularity = v;
        self
    }

    /// Sets [`max_name_len`](Self::max_name_len).
    pub fn with_max_name_len(mut self, v: Option<usize>) -> Self {
        self.max_name_len = v;
        self
    }
}

impl Default for Capabilities {
    fn default() -> Self {
        Self::new()
    }
}

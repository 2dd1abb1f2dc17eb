//! The provider contract: [`LockProvider`], the [`Lock`] it hands out, and the [`Capabilities`]
//! each provider declares.

use std::{fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use tokio::time::Instant;

use crate::{
    batch::{BatchOptions, BatchOutcome},
    config::LockConfig,
    error::{Error, Result},
    inspect::{ForceRelease, LockInfo, LockPage},
    lease::{Lease, LostSignal},
};

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

    /// Tries to take many locks at once, answering per name, in the order asked, exactly what
    /// [`try_lock`](Self::try_lock) of that name would (see [`crate::batch`]): names are
    /// independent (free ones are granted, held ones refused), each name's lease is begun before
    /// the request that takes it, and fencing tokens are per name.
    ///
    /// `Err(_)` for the batch as a whole: it names a lock twice
    /// ([`ConfigError::DuplicateInBatch`](crate::ConfigError::DuplicateInBatch)), or the backend
    /// could not answer it; then no lock of it is held by this caller (a grant whose answer was
    /// lost expires after its `lock_at_most_for`).
    ///
    /// The default runs the names' `try_lock`s, at most `options.concurrency` at a time
    /// ([`try_lock_each`](crate::batch::try_lock_each)). A provider whose backend takes many
    /// conditional writes in one request overrides it and declares
    /// [`Capabilities::native_batch`].
    async fn try_lock_many(
        &self,
        configs: &[LockConfig],
        options: BatchOptions,
    ) -> Result<BatchOutcome> {
        crate::batch::try_lock_each(self, configs, options).await
    }

    /// What this provider guarantees. The conformance kit checks exactly these claims.
    fn capabilities(&self) -> Capabilities;

    /// A short name of the backend (`"postgres"`, `"redis"`), used in logs and as the `provider`
    /// label of the executor's metrics. Defaults to `"unknown"`.
    fn backend_name(&self) -> &'static str {
        "unknown"
    }

    /// Asks the backend, without taking or changing any lock, whether it can hold locks now:
    /// reachable, and its table, bucket or collection in place. Call it once at start-up to fail
    /// there rather than at the first fire (`Scheduler::check` does).
    ///
    /// The errors are those [`try_lock`](Self::try_lock) would give: [`Error::Unavailable`]
    /// with its cause, [`Error::Setup`] saying how to create what is missing,
    /// [`Error::Timeout`]. A provider that checks declares [`Capabilities::check`]; the
    /// default does no I/O and answers `Ok(())`.
    async fn check(&self) -> Result<()> {
        Ok(())
    }

    /// The record of the lock `name` as the backend holds it (`None`: no record), with the
    /// backend's judgement of whether it is held ([`LockInfo::held`]). Reads only: changes
    /// nothing, blocks no contender. Declared by [`Capabilities::inspect`]; the default answers
    /// [`Error::Unsupported`].
    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>> {
        let _ = name;
        Err(Error::Unsupported { backend: self.backend_name(), operation: "inspect" })
    }

    /// The records whose names start with `prefix` (`""`: all), one page of at most `limit`
    /// (within `1..=`[`MAX_PAGE`](crate::inspect::MAX_PAGE)) at a time: start with `cursor`
    /// `None`, then pass each page's [`next`](LockPage::next) until it is `None`. Every record
    /// stored for the whole listing is returned exactly once; one created or deleted meanwhile
    /// may or may not be. Reads only. Declared by [`Capabilities::list`]; the default answers
    /// [`Error::Unsupported`].
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<LockPage> {
        let _ = (prefix, cursor, limit);
        Err(Error::Unsupported { backend: self.backend_name(), operation: "list" })
    }

    /// Releases the lock of `seen` if its record still belongs to the acquisition seen
    /// ([`LockInfo::acquisition`]): a compare-and-delete, so a lock released and taken again
    /// since it was inspected is never touched ([`ForceRelease::Changed`]). The holder that lost
    /// it sees [`Error::LockLost`] on its next extend; its unlock changes nothing. For
    /// operators (a holder stuck beyond reason), never for application code. Declared by
    /// [`Capabilities::force_release`]; the default answers [`Error::Unsupported`].
    async fn force_release(&self, seen: &LockInfo) -> Result<ForceRelease> {
        let _ = seen;
        Err(Error::Unsupported { backend: self.backend_name(), operation: "force_release" })
    }
}

#[async_trait]
impl<P: LockProvider + ?Sized> LockProvider for Arc<P> {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        (**self).try_lock(config).await
    }

    async fn try_lock_many(
        &self,
        configs: &[LockConfig],
        options: BatchOptions,
    ) -> Result<BatchOutcome> {
        (**self).try_lock_many(configs, options).await
    }

    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }

    fn backend_name(&self) -> &'static str {
        (**self).backend_name()
    }

    async fn check(&self) -> Result<()> {
        (**self).check().await
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>> {
        (**self).inspect(name).await
    }

    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<LockPage> {
        (**self).list(prefix, cursor, limit).await
    }

    async fn force_release(&self, seen: &LockInfo) -> Result<ForceRelease> {
        (**self).force_release(seen).await
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
}

/// A held lock. Release it with [`unlock`](Lock::unlock), which consumes it so it cannot be
/// released twice. Dropping it without unlocking leaves the lock held until `lock_at_most_for`
/// has passed (the safe default); the [`LockingExecutor`](crate::LockingExecutor) always releases.
///
/// A `Lock` knows how long it is surely held: its [`Lease`] ends at an instant taken before the
/// acquire request was sent plus `lock_at_most_for`, less the backend's
/// [`clock_step`](Capabilities::clock_step) ([`valid_until`](Lock::valid_until)), and
/// successful extensions move it forward. Providers build locks only through
/// [`Acquisition::grant`](crate::Acquisition::grant), which never hands out a lock whose lease
/// has already ended: there is no `Lock::new`. A provider calls
/// [`Acquisition::begin`](crate::Acquisition::begin) before it sends the acquire request and
/// `grant`s its [`LockHandle`] when the backend said yes; or it implements
/// [`LeaseStore`](crate::store::LeaseStore) and lets [`StoreProvider`](crate::store::StoreProvider)
/// do both.
#[must_use = "a lock that is dropped stays held until lock_at_most_for has passed"]
pub struct Lock {
    config: LockConfig,
    handle: Box<dyn LockHandle>,
    lease: Lease,
}

impl Lock {
    pub(crate) fn from_lease(
        config: LockConfig,
        handle: Box<dyn LockHandle>,
        lease: Lease,
    ) -> Self {
        Self { config, handle, lease }
    }

    /// Wraps this lock into another one whose handle owns it (a provider that decorates another
    /// provider, such as [`KeepAliveProvider`](crate::KeepAliveProvider)). The new lock shares
    /// this lock's lease, so extensions through either move the same deadline.
    pub fn wrap<H: LockHandle>(self, wrapper: impl FnOnce(Lock) -> H) -> Lock {
        let config = self.config.clone();
        let lease = self.lease.clone();
        Lock { config, handle: Box::new(wrapper(self)), lease }
    }

    /// Replaces the handle by a wrapper around it, keeping the configuration and the lease.
    pub fn map_handle<H: LockHandle>(self, wrapper: impl FnOnce(Box<dyn LockHandle>) -> H) -> Lock {
        Lock { config: self.config, handle: Box::new(wrapper(self.handle)), lease: self.lease }
    }

    /// The configuration currently in force (updated by successful extensions).
    pub fn config(&self) -> &LockConfig {
        &self.config
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.config.name()
    }

    /// The instant (on tokio's monotonic clock) until which this lock is surely held: the start
    /// of the acquire (or of the last successful extension) plus its `lock_at_most_for`, less
    /// the backend's [`clock_step`](Capabilities::clock_step).
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until()
    }

    /// How long this lock is still surely held; zero once its lease has ended or it is known to
    /// be lost.
    pub fn remaining(&self) -> Duration {
        self.lease.remaining()
    }

    /// Whether this lock is known to be lost (see [`LostSignal`]).
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// The lease of this lock.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Releases the lock (honouring `lock_at_least_for`).
    pub async fn unlock(mut self) -> Result<()> {
        self.lease.mark_released();
        self.handle.unlock(&self.config).await
    }

    /// Extends the lock: it is now held until `lock_at_most_for` from now, and an unlock keeps
    /// it until `lock_at_least_for` from now. Fails with [`Error::LockLost`] when the lock was
    /// lost (also when its lease ended before the extension could be confirmed: the lock may have
    /// been free in between), [`Error::Unsupported`] when the provider cannot extend, and
    /// [`Error::InvalidConfig`] for invalid durations.
    pub async fn extend(
        &mut self,
        lock_at_most_for: Duration,
        lock_at_least_for: Duration,
    ) -> Result<()> {
        let next = self.config.with_durations(lock_at_most_for, lock_at_least_for)?;
        let lost = || Error::LockLost { name: self.config.name().to_owned() };
        if self.lease.is_lost() {
            return Err(lost());
        }
        let sent = Instant::now();
        // Shrink first, grow only once confirmed: a shortening extend whose answer never
        // arrives may still have been applied.
        self.lease.extending(sent, lock_at_most_for);
        match self.handle.extend(&next).await {
            Ok(()) => {}
            Err(e @ Error::LockLost { .. }) => {
                self.lease.mark_lost();
                return Err(e);
            }
            Err(e) => return Err(e),
        }
        if !self.lease.extended(sent, lock_at_most_for) {
            return Err(lost());
        }
        self.config = next;
        Ok(())
    }

    /// The fencing token of this acquisition, when the provider supports fencing.
    pub fn fencing_token(&self) -> Option<u64> {
        self.handle.fencing_token()
    }

    /// A signal that fires when this lock is lost: its lease ends without a successful extension,
    /// or an extension finds it taken.
    pub fn lost_signal(&self) -> LostSignal {
        self.lease.lost_signal()
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("config", &self.config)
            .field("fencing_token", &self.fencing_token())
            .field("lease", &self.lease)
            .finish_non_exhaustive()
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
    /// How finely the backend reads and stores the times that judge expiry (1 ms for
    /// millisecond timestamps, 1 µs for PostgreSQL's, zero where nothing is truncated). A
    /// time truncated to this step can lie up to one step before the moment it was read, so a
    /// record's end can lie one step before `sent + lock_at_most_for`: every lease ends this
    /// much earlier (see [`Acquisition::with_clock_step`](crate::Acquisition::with_clock_step)).
    /// Default [`DEFAULT_CLOCK_STEP`](crate::DEFAULT_CLOCK_STEP), 1 ms.
    pub clock_step: Duration,
    /// The longest lock name accepted, in bytes; `None` when effectively unlimited.
    pub max_name_len: Option<usize>,
    /// [`LockProvider::check`] asks the backend (an unreachable one is an error); `false`: it
    /// does no I/O and answers `Ok(())`.
    pub check: bool,
    /// [`LockProvider::inspect`] reads one record as the backend holds it.
    pub inspect: bool,
    /// [`LockProvider::list`] enumerates the records under a prefix, page by page (`false` on
    /// backends that cannot enumerate their keys, such as memcached).
    pub list: bool,
    /// [`LockProvider::force_release`] releases a seen acquisition, compare-and-delete.
    pub force_release: bool,
    /// [`LockProvider::try_lock_many`] sends a batch as one request per
    /// [`concurrency`](crate::BatchOptions::concurrency) chunk (one SQL statement, one script, a
    /// bulk write), not one `try_lock` per name.
    pub native_batch: bool,
}

impl Capabilities {
    /// Nothing optional supported: no extend, no fencing, client time, not owner-checked,
    /// 1 ms granularity and clock step, unlimited names, no backend check, no inspection, no
    /// native batch.
    pub fn new() -> Self {
        Self {
            extend: false,
            fencing: false,
            server_time: false,
            owner_checked: false,
            granularity: Duration::from_millis(1),
            clock_step: crate::DEFAULT_CLOCK_STEP,
            max_name_len: None,
            check: false,
            inspect: false,
            list: false,
            force_release: false,
            native_batch: false,
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

    /// Sets [`clock_step`](Self::clock_step).
    pub fn with_clock_step(mut self, v: Duration) -> Self {
        self.clock_step = v;
        self
    }

    /// Sets [`max_name_len`](Self::max_name_len).
    pub fn with_max_name_len(mut self, v: Option<usize>) -> Self {
        self.max_name_len = v;
        self
    }

    /// Sets [`check`](Self::check).
    pub fn with_check(mut self, v: bool) -> Self {
        self.check = v;
        self
    }

    /// Sets [`inspect`](Self::inspect): the provider reads a lock's record.
    pub fn with_inspect(mut self, v: bool) -> Self {
        self.inspect = v;
        self
    }

    /// Sets [`list`](Self::list): the provider lists records under a prefix, page by page.
    pub fn with_list(mut self, v: bool) -> Self {
        self.list = v;
        self
    }

    /// Sets [`force_release`](Self::force_release): the provider releases a seen acquisition
    /// for an operator.
    pub fn with_force_release(mut self, v: bool) -> Self {
        self.force_release = v;
        self
    }

    /// Sets [`native_batch`](Self::native_batch): [`LockProvider::try_lock_many`] sends a batch
    /// in one request per chunk.
    pub fn with_native_batch(mut self, v: bool) -> Self {
        self.native_batch = v;
        self
    }

    /// Sets [`inspect`](Self::inspect), [`list`](Self::list) and
    /// [`force_release`](Self::force_release) at once, in that order. The named setters
    /// ([`with_inspect`](Self::with_inspect), [`with_list`](Self::with_list),
    /// [`with_force_release`](Self::with_force_release)) say which is which.
    pub fn with_inspection(mut self, inspect: bool, list: bool, force_release: bool) -> Self {
        self.inspect = inspect;
        self.list = list;
        self.force_release = force_release;
        self
    }
}

impl Default for Capabilities {
    fn default() -> Self {
        Self::new()
    }
}

//! Lease validity: the conservative monotonic deadline of every held lock.
//!
//! A backend judges expiry by its own clock, from the moment it processed the acquire. The caller
//! cannot know that moment, but it knows an instant that came before it: the instant it sent the
//! request. So a lock is surely still held until `sent + lock_at_most_for`, measured on the
//! caller's monotonic clock (tokio's [`Instant`], which is [`std::time::Instant`] unless a test
//! pauses tokio's clock), less one clock step: a backend that keeps its times in milliseconds
//! truncates the moment it read to the millisecond, so the record it writes can end up to one
//! step before `sent + lock_at_most_for` (the step is the store's
//! [`Capabilities::clock_step`](crate::Capabilities::clock_step), 1 ms unless declared). Past that
//! deadline the backend may have expired the lock and handed it to another node.
//!
//! - A provider brackets its acquire with an [`Acquisition`]: [`Acquisition::begin`] before the
//!   request is sent, [`Acquisition::grant`] once the backend said yes. `grant` is the only way to
//!   build a [`Lock`], and it refuses (with [`Error::LeaseExpiredInFlight`], after a best-effort
//!   owner-checked release) when the answer arrived after the deadline: a slow link or a
//!   reconnecting pool must never hand out a lock that may already belong to someone else.
//! - [`Lock::extend`] moves the deadline to `sent + new lock_at_most_for - step`, measured the
//!   same way.
//! - The [`LostSignal`] of a lock fires when the deadline passes without a successful extension,
//!   or when an extension reports the lock lost.

use std::{fmt, sync::Arc, time::Duration};

use tokio::{sync::watch, time::Instant};

use crate::{
    config::LockConfig,
    error::{Error, Result},
    provider::{Lock, LockHandle},
};

/// The clock step a lease assumes unless told otherwise: the backend truncates the times it
/// reads to the millisecond (see [`Capabilities::clock_step`](crate::Capabilities::clock_step)).
pub const DEFAULT_CLOCK_STEP: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Copy)]
struct State {
    valid_until: Instant,
    lost: bool,
    released: bool,
}

/// The validity of one held lock: a monotonic deadline, moved by extensions, and whether the lock
/// is known to be lost. Shared by a [`Lock`], its [`LostSignal`]s and the locks that wrap it
/// ([`Lock::wrap`]); cheap to clone.
#[derive(Clone)]
pub struct Lease {
    state: Arc<watch::Sender<State>>,
    /// The backend's clock step: every deadline ends this much before `sent +
    /// lock_at_most_for`.
    step: Duration,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = *self.state.borrow();
        f.debug_struct("Lease")
            .field("remaining", &s.valid_until.saturating_duration_since(Instant::now()))
            .field("lost", &s.lost)
            .field("released", &s.released)
            .finish()
    }
}

impl Lease {
    fn new(valid_until: Instant, step: Duration) -> Self {
        let (tx, _) = watch::channel(State { valid_until, lost: false, released: false });
        Self { state: Arc::new(tx), step }
    }

    /// The backend's clock step this lease ends early by (see
    /// [`Acquisition::with_clock_step`]).
    pub fn clock_step(&self) -> Duration {
        self.step
    }

    /// The instant until which the lock is surely held (tokio's monotonic clock).
    pub fn valid_until(&self) -> Instant {
        self.state.borrow().valid_until
    }

    /// How long the lock is still surely held; zero once the deadline has passed or the lock is
    /// known to be lost.
    pub fn remaining(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Whether the lock is known to be lost: its deadline passed without a successful extension,
    /// or an extension reported it lost. Once lost, always lost. A released lock is not lost.
    pub fn is_lost(&self) -> bool {
        let s = *self.state.borrow();
        if s.released {
            return false;
        }
        if s.lost {
            return true;
        }
        if Instant::now() >= s.valid_until {
            self.mark_lost();
            return true;
        }
        false
    }

    /// A signal that fires when this lease is lost.
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal { lease: self.clone() }
    }

    /// For providers: the backend has said that this lock is gone before its deadline (a
    /// ZooKeeper session expired and took the ephemeral node with it, an etcd lease was revoked by
    /// an operator). The lease becomes lost at once: [`is_lost`](Self::is_lost) is true, every
    /// [`LostSignal`] fires and the executor reports the loss. A released lease stays released.
    /// Get the lease of a granted lock with [`Lock::lease`](crate::Lock::lease) and keep a clone
    /// where the backend's events arrive.
    pub fn report_lost(&self) {
        self.mark_lost();
    }

    /// Marks the lease lost (an extension found the lock taken, or it expired).
    pub(crate) fn mark_lost(&self) {
        self.state.send_if_modified(|s| {
            let changed = !s.lost && !s.released;
            s.lost |= !s.released;
            changed
        });
    }

    /// Marks the lease released: its signal will never fire.
    pub(crate) fn mark_released(&self) {
        self.state.send_if_modified(|s| {
            let changed = !s.released && !s.lost;
            s.released |= !s.lost;
            changed
        });
    }

    /// An extension with `lock_at_most_for` is about to be sent at `sent`: until it is
    /// confirmed, the lease ends at the earlier of its current deadline and `sent +
    /// lock_at_most_for - step`. A request that shortens the lock may be applied by the backend even
    /// when its answer is lost (a timeout, a cancelled future, a cut connection), so the lease
    /// must not go on trusting the longer deadline. It grows only with a confirmed extension
    /// ([`extended`](Self::extended)).
    pub(crate) fn extending(&self, sent: Instant, lock_at_most_for: Duration) {
        let until = deadline(sent, lock_at_most_for, self.step);
        self.state.send_if_modified(|s| {
            if s.lost || s.released || until >= s.valid_until {
                return false;
            }
            s.valid_until = until;
            true
        });
    }

    /// Records a successful extension sent at `sent`. Returns `false`, and leaves the lease lost,
    /// when the old deadline had already passed by the time the answer came: the lock may have
    /// been free in between, so it cannot be trusted again.
    pub(crate) fn extended(&self, sent: Instant, lock_at_most_for: Duration) -> bool {
        if self.is_lost() {
            return false;
        }
        let until = deadline(sent, lock_at_most_for, self.step);
        self.state.send_if_modified(|s| {
            if s.lost || s.released {
                return false;
            }
            s.valid_until = until;
            true
        });
        true
    }
}

/// `start + d - step`: the end of a lease whose request was sent at `start`, on a backend that
/// truncates the times it reads to `step`.
fn deadline(start: Instant, d: Duration, step: Duration) -> Instant {
    // An absurd duration saturates far in the future instead of panicking.
    let end =
        start.checked_add(d).unwrap_or_else(|| start + Duration::from_secs(100 * 365 * 24 * 3600));
    end.checked_sub(step).unwrap_or(start).max(start)
}

/// A signal that a lock was lost: its lease deadline passed without a successful extension, or an
/// extension found it taken. Clone it freely; await [`LostSignal::lost`] or poll
/// [`LostSignal::is_lost`]. It never fires for a lock that was released.
#[derive(Debug, Clone)]
pub struct LostSignal {
    lease: Lease,
}

impl LostSignal {
    /// Whether the lock is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Completes when the lock is lost: at its lease deadline at the latest, unless it is extended
    /// or released first. Never completes for a released lock.
    pub async fn lost(&self) {
        let mut rx = self.lease.state.subscribe();
        loop {
            let s = *rx.borrow_and_update();
            if s.released {
                std::future::pending::<()>().await;
            }
            if s.lost || self.lease.is_lost() {
                return;
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        // Cannot happen: this signal keeps the sender alive.
                        std::future::pending::<()>().await;
                    }
                }
                () = tokio::time::sleep_until(s.valid_until) => {}
            }
        }
    }

    /// The lease this signal watches.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }
}

/// One acquire in flight, for providers: [`begin`](Acquisition::begin) it before the acquire
/// request is sent, [`grant`](Acquisition::grant) it once the backend answered that this caller
/// won the lock.
///
/// ```
/// # use shedlock::{Acquisition, LockConfig, LockHandle, Lock, Result};
/// # struct MyHandle;
/// # #[async_trait::async_trait] impl LockHandle for MyHandle {
/// #     async fn unlock(&mut self, _: &LockConfig) -> Result<()> { Ok(()) }
/// # }
/// # async fn send_acquire_request(_: &LockConfig) -> Result<bool> { Ok(true) }
/// async fn try_lock(config: &LockConfig) -> Result<Option<Lock>> {
///     let acquisition = Acquisition::begin(config); // before anything is sent
///     if !send_acquire_request(config).await? {
///         return Ok(None); // held elsewhere
///     }
///     acquisition.grant(MyHandle).await.map(Some)
/// }
/// ```
#[derive(Debug)]
#[must_use = "an Acquisition does nothing until it is granted"]
pub struct Acquisition {
    config: LockConfig,
    started: Instant,
    step: Duration,
}

impl Acquisition {
    /// Starts an acquire of `config` now: the lease deadline will be this instant plus
    /// `lock_at_most_for`, less the [`DEFAULT_CLOCK_STEP`] (1 ms) unless
    /// [`with_clock_step`](Self::with_clock_step) says otherwise.
    pub fn begin(config: &LockConfig) -> Self {
        Self { config: config.clone(), started: Instant::now(), step: DEFAULT_CLOCK_STEP }
    }

    /// Starts an acquire of `config` now, with the clock step the provider declares in
    /// `capabilities` ([`Capabilities::clock_step`](crate::Capabilities::clock_step)): the step
    /// is written once, in the capabilities, and every lease agrees with it (the conformance kit
    /// checks that every lock's lease does).
    pub fn begin_declared(config: &LockConfig, capabilities: &crate::Capabilities) -> Self {
        Self::begin(config).with_clock_step(capabilities.clock_step)
    }

    /// The backend's [`clock_step`](crate::Capabilities::clock_step): how far before the moment
    /// it read its clock (or the client's) the times it stores may lie. The lease, and every
    /// extension of it, ends this much before `sent + lock_at_most_for`, so the holder never
    /// trusts a lock that another node could already take. Zero for a backend that truncates
    /// nothing (its record ends no earlier than `lock_at_most_for` after it read the clock).
    pub fn with_clock_step(mut self, step: Duration) -> Self {
        self.step = step;
        self
    }

    /// When the acquire began.
    pub fn started_at(&self) -> Instant {
        self.started
    }

    /// The deadline of the lease this acquisition would grant.
    pub fn valid_until(&self) -> Instant {
        deadline(self.started, self.config.lock_at_most_for(), self.step)
    }

    /// The backend answered that this caller won the lock, and `handle` now holds it. Returns
    /// the [`Lock`], unless the deadline has already passed: then the lock may already be held by
    /// another node, so it is released through `handle` (owner-checked, ignoring
    /// `lock_at_least_for`, since no task ran; best effort: a failed release only means the lock
    /// expires after `lock_at_most_for`) and [`Error::LeaseExpiredInFlight`] is returned.
    pub async fn grant(self, handle: impl LockHandle) -> Result<Lock> {
        self.grant_boxed(Box::new(handle)).await
    }

    /// [`grant`](Self::grant) for a boxed handle.
    pub async fn grant_boxed(self, mut handle: Box<dyn LockHandle>) -> Result<Lock> {
        let valid_until = self.valid_until();
        let now = Instant::now();
        if now < valid_until {
            return Ok(Lock::from_lease(self.config, handle, Lease::new(valid_until, self.step)));
        }
        let elapsed = now.saturating_duration_since(self.started);
        let name = self.config.name().to_owned();
        let at_most = self.config.lock_at_most_for();
        tracing::warn!(
            lock = %name,
            ?elapsed,
            lock_at_most_for = ?at_most,
            "the backend granted the lock, but its answer came after the lease could have ended; releasing it"
        );
        let release = self.config.with_durations(at_most, Duration::ZERO).map_err(Error::from);
        let released = match release {
            Ok(cfg) => handle.unlock(&cfg).await,
            Err(e) => Err(e),
        };
        if let Err(error) = released {
            tracing::warn!(lock = %name, %error, "releasing the late lock failed; it expires after lock_at_most_for");
        }
        Err(Error::LeaseExpiredInFlight { name, elapsed, lock_at_most_for: at_most })
    }
}

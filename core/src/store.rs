//! The provider seam: implement [`LeaseStore`] — the three storage calls on one backend record —
//! and [`StoreProvider`] turns it into a [`LockProvider`].
//!
//! Every provider needs the same plumbing around its storage calls: a validated `locked_by`, one
//! default time limit, whose clock judges expiry, the ShedLock-compatible flag, a lock-name check,
//! a fresh owner id per acquisition, [`Acquisition::begin`]/[`grant`](Acquisition::grant) around
//! the acquire, typed timeouts with one label per operation, one span name per operation and the
//! [`Error::LockLost`] of a failed extension. Written once here, they cannot drift between
//! providers:
//!
//! - [`ProviderSettings`] holds the settings every provider shares. A provider's builder embeds
//!   one, implements [`ProviderBuilder`] (and [`ClockBuilder`] where it offers client time) to
//!   get the shared setters, and validates it once with [`ProviderSettings::validate`] into
//!   [`Settings`].
//! - A store sees one [`Request`] per call: the lock's configuration, the acquisition's
//!   [`Owner`], the caller's clock reading in client-time mode, and the call's deadline.
//! - [`StoreProvider`] runs the calls: name check, owner, lease, time limit
//!   ([`Operation::label`]: `try_lock`, `unlock`, `extend`), span (`shedlock.try_lock`,
//!   `shedlock.unlock`, `shedlock.extend`, each with `provider` and `lock` fields).
//!
//! To write a provider for a new backend, implement [`LeaseStore`] and prove it with the
//! `shedlock-conformance` kit. Providers whose backend holds the lease itself (a session, a
//! lease object with its own keep-alive, a watch) may implement [`LockProvider`] directly, and
//! then still use [`Settings`], [`Owner`] and [`Operation`] so that labels, spans and the owner
//! encoding stay the same everywhere.
//!
//! ```
//! use std::{collections::HashMap, sync::Mutex, time::{Duration, SystemTime}};
//! use shedlock::{Capabilities, LockConfig, LockProvider, Result, TimeSource};
//! use shedlock::store::{
//!     Extension, Granted, LeaseStore, ProviderSettings, Request, Settings, StoreProvider,
//! };
//!
//! /// A one-process "backend": name -> (owner id, lock_until), judged by the caller's clock
//! /// (a real server-time store lets the backend's clock judge expiry).
//! #[derive(Debug, Default)]
//! struct MapStore(Mutex<HashMap<String, (u64, SystemTime)>>);
//!
//! #[async_trait::async_trait]
//! impl LeaseStore for MapStore {
//!     type Held = ();
//!
//!     fn capabilities(&self, settings: &Settings) -> Capabilities {
//!         Capabilities::new()
//!             .with_extend(true)
//!             .with_owner_checked(true)
//!             .with_server_time(settings.time_source().is_server())
//!     }
//!
//!     async fn acquire(&self, req: &Request<'_>) -> Result<Option<Granted<()>>> {
//!         let now = req.client_now().unwrap_or_else(SystemTime::now);
//!         let mut map = self.0.lock().unwrap();
//!         if map.get(req.name()).is_some_and(|(_, until)| *until > now) {
//!             return Ok(None);
//!         }
//!         map.insert(req.name().into(), (req.owner().id(), now + req.lock_at_most_for()));
//!         Ok(Some(Granted::new(())))
//!     }
//!
//!     async fn release(&self, req: &Request<'_>, _: &mut ()) -> Result<()> {
//!         let mut map = self.0.lock().unwrap();
//!         if map.get(req.name()).is_some_and(|(owner, _)| *owner == req.owner().id()) {
//!             map.remove(req.name()); // (a real store keeps it for lock_at_least_for)
//!         }
//!         Ok(())
//!     }
//!
//!     async fn extend(&self, req: &Request<'_>, _: &mut ()) -> Result<Extension> {
//!         let now = req.client_now().unwrap_or_else(SystemTime::now);
//!         let mut map = self.0.lock().unwrap();
//!         match map.get_mut(req.name()) {
//!             Some((owner, until)) if *owner == req.owner().id() && *until > now => {
//!                 *until = now + req.lock_at_most_for();
//!                 Ok(Extension::Extended)
//!             }
//!             _ => Ok(Extension::Lost),
//!         }
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<()> {
//! let mut settings = ProviderSettings::new();
//! settings.set_time_source(TimeSource::Client);
//! let settings = settings.validate("map")?;
//! let provider = StoreProvider::new(MapStore::default(), settings);
//! let cfg = LockConfig::new("job", Duration::from_secs(60), Duration::ZERO)?;
//! let lock = provider.try_lock(&cfg).await?.expect("free");
//! assert!(provider.try_lock(&cfg).await?.is_none());
//! lock.unlock().await?;
//! # Ok(()) }
//! ```

use std::{
    fmt,
    future::Future,
    sync::Arc,
    time::{Duration, SystemTime},
};

use async_trait::async_trait;
use tokio::time::Instant;
use tracing::Instrument;

use crate::{
    batch::{BatchOptions, BatchOutcome, check_distinct, try_lock_each},
    clock::{SharedClock, system_clock},
    config::LockConfig,
    error::{Error, Result},
    inspect::{ForceRelease, LockInfo, LockPage, page_limit},
    lease::Acquisition,
    provider::{Capabilities, Lock, LockHandle, LockProvider},
    support::{
        ACQUISITION_SUFFIX_LEN, MAX_LOCKED_BY_LEN, TimeSource, acquisition_id,
        acquisition_locked_by, check_lock_name, default_locked_by, truncate_at_char_boundary,
    },
};

/// The default time limit of each provider operation, connecting included: 10 s.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// What a provider does, by name: the lock operations of the [`LockProvider`] and
/// [`Lock`] API, and the administrative ones a provider makes besides them. Their
/// [`label`](Operation::label)s are the one vocabulary of [`Error::Timeout`]'s `operation` and
/// of the span names (`shedlock.<label>`), the same for every provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// [`LockProvider::try_lock`].
    TryLock,
    /// [`LockProvider::try_lock_many`]: one request of a native batch.
    TryLockMany,
    /// [`Lock::unlock`](crate::Lock::unlock).
    Unlock,
    /// [`Lock::extend`](crate::Lock::extend).
    Extend,
    /// [`LockProvider::check`].
    Check,
    /// [`LockProvider::inspect`].
    Inspect,
    /// [`LockProvider::list`].
    List,
    /// [`LockProvider::force_release`].
    ForceRelease,
    /// Opening a connection or session to the backend.
    Connect,
    /// Creating what the provider stores locks in (a table, a collection, a bucket).
    CreateTable,
    /// Giving back a backend lease (etcd's `LeaseRevoke`) once no lock needs it.
    RevokeLease,
    /// Reading one record as the backend holds it, for the test hooks and tools.
    ReadRecord,
    /// Writing one record as is, for the test hooks and tools.
    WriteRecord,
    /// Deleting one record whatever it holds, for the test hooks and tools.
    DeleteRecord,
}

impl Operation {
    /// Every operation, in the order of the enum.
    pub const ALL: [Operation; 14] = [
        Operation::TryLock,
        Operation::TryLockMany,
        Operation::Unlock,
        Operation::Extend,
        Operation::Check,
        Operation::Inspect,
        Operation::List,
        Operation::ForceRelease,
        Operation::Connect,
        Operation::CreateTable,
        Operation::RevokeLease,
        Operation::ReadRecord,
        Operation::WriteRecord,
        Operation::DeleteRecord,
    ];

    /// `try_lock`, `try_lock_many`, `unlock`, `extend`, `check`, `inspect`, `list`, `force_release`, `connect`,
    /// `create_table`, `revoke_lease`, `read_record`, `write_record` or `delete_record`.
    pub const fn label(self) -> &'static str {
        match self {
            Operation::TryLock => "try_lock",
            Operation::TryLockMany => "try_lock_many",
            Operation::Unlock => "unlock",
            Operation::Extend => "extend",
            Operation::Check => "check",
            Operation::Inspect => "inspect",
            Operation::List => "list",
            Operation::ForceRelease => "force_release",
            Operation::Connect => "connect",
            Operation::CreateTable => "create_table",
            Operation::RevokeLease => "revoke_lease",
            Operation::ReadRecord => "read_record",
            Operation::WriteRecord => "write_record",
            Operation::DeleteRecord => "delete_record",
        }
    }

    /// The span every provider opens around this operation: `shedlock.` and the
    /// [`label`](Self::label) (`shedlock.try_lock`, …) at debug level, with fields `provider`
    /// (the backend name) and `lock` (the lock name; empty for `check`, the prefix for `list`).
    pub fn span(self, provider: &'static str, lock: &str) -> tracing::Span {
        match self {
            Operation::TryLock => tracing::debug_span!("shedlock.try_lock", provider, lock),
            Operation::TryLockMany => {
                tracing::debug_span!("shedlock.try_lock_many", provider, lock)
            }
            Operation::Unlock => tracing::debug_span!("shedlock.unlock", provider, lock),
            Operation::Extend => tracing::debug_span!("shedlock.extend", provider, lock),
            Operation::Check => tracing::debug_span!("shedlock.check", provider, lock),
            Operation::Inspect => tracing::debug_span!("shedlock.inspect", provider, lock),
            Operation::List => tracing::debug_span!("shedlock.list", provider, lock),
            Operation::ForceRelease => {
                tracing::debug_span!("shedlock.force_release", provider, lock)
            }
            Operation::Connect => tracing::debug_span!("shedlock.connect", provider, lock),
            Operation::CreateTable => tracing::debug_span!("shedlock.create_table", provider, lock),
            Operation::RevokeLease => tracing::debug_span!("shedlock.revoke_lease", provider, lock),
            Operation::ReadRecord => tracing::debug_span!("shedlock.read_record", provider, lock),
            Operation::WriteRecord => {
                tracing::debug_span!("shedlock.write_record", provider, lock)
            }
            Operation::DeleteRecord => {
                tracing::debug_span!("shedlock.delete_record", provider, lock)
            }
        }
    }

    /// The [`Error::Timeout`] of this operation after `after`.
    pub fn timed_out(self, after: Duration) -> Error {
        Error::Timeout { operation: self.label(), after }
    }

    /// Runs `fut` as this operation of `provider` on `lock` (the lock name; empty for `check`,
    /// the prefix for `list`): inside its [`span`](Self::span), bounded by `timeout` (on expiry
    /// the future is dropped and the answer is this operation's [`Error::Timeout`]). What
    /// [`StoreProvider`] does around each store call, for a provider that implements
    /// [`LockProvider`] itself.
    pub async fn run<T>(
        self,
        provider: &'static str,
        lock: &str,
        timeout: Option<Duration>,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        crate::support::with_timeout(self, timeout, fut).instrument(self.span(provider, lock)).await
    }
}

/// Logs a successful forced release at info level (`lock force-released`, with `provider`,
/// `lock` and `acquisition`), as every provider does after
/// [`LockProvider::force_release`] released a lock; anything else logs nothing.
pub fn log_forced_release(provider: &'static str, seen: &LockInfo, outcome: &ForceRelease) {
    if let ForceRelease::Released(_) = outcome {
        let lock = seen.name.as_str();
        tracing::info!(provider, lock, acquisition = %seen.acquisition, "lock force-released");
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The settings every provider shares, as given to its builder: `locked_by`, the time limit of
/// each operation, whose clock judges expiry, the instance's clock and the ShedLock-compatible
/// mode. A builder embeds one, gets the shared setters through [`ProviderBuilder`] and
/// [`ClockBuilder`], forwards the others it offers, and calls
/// [`validate`](Self::validate) once in `build`.
#[derive(Clone)]
pub struct ProviderSettings {
    locked_by: Option<String>,
    timeout: Option<Duration>,
    time: TimeSource,
    clock: SharedClock,
    compat: bool,
}

impl fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderSettings")
            .field("locked_by", &self.locked_by)
            .field("timeout", &self.timeout)
            .field("time", &self.time)
            .field("shedlock_compatible", &self.compat)
            .finish_non_exhaustive()
    }
}

impl Default for ProviderSettings {
    fn default() -> Self {
        Self::new()
    }
}

impl ProviderSettings {
    /// The defaults: `locked_by` from [`default_locked_by`], a time limit of
    /// [`DEFAULT_OPERATION_TIMEOUT`], server time, the system clock, the provider's native mode.
    pub fn new() -> Self {
        Self {
            locked_by: None,
            timeout: Some(DEFAULT_OPERATION_TIMEOUT),
            time: TimeSource::Server,
            clock: system_clock(),
            compat: false,
        }
    }

    /// Who holds the lock, stored for operators (default `hostname/pid`): at most
    /// [`MAX_LOCKED_BY_LEN`] bytes (less [`ACQUISITION_SUFFIX_LEN`] in the ShedLock-compatible
    /// mode), no NUL. Informational only: ownership rests on the acquisition's [`Owner`] id.
    pub fn set_locked_by(&mut self, locked_by: impl Into<String>) -> &mut Self {
        self.locked_by = Some(locked_by.into());
        self
    }

    /// The time limit of each operation, waiting for and opening connections included
    /// (`None`: no limit). On expiry the call fails with [`Error::Timeout`]; whether it took
    /// effect on the backend is unknown.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) -> &mut Self {
        self.timeout = timeout;
        self
    }

    /// Whose clock judges expiry (default [`TimeSource::Server`]).
    pub fn set_time_source(&mut self, time: TimeSource) -> &mut Self {
        self.time = time;
        self
    }

    /// The instance's clock, consulted for expiry only with [`TimeSource::Client`] (default:
    /// the system clock).
    pub fn set_clock(&mut self, clock: SharedClock) -> &mut Self {
        self.clock = clock;
        self
    }

    /// The ShedLock-compatible mode: records in ShedLock's layout, the owner identified by a
    /// `locked_by` unique to each acquisition ([`Owner::locked_by`]).
    pub fn set_shedlock_compatible(&mut self, compat: bool) -> &mut Self {
        self.compat = compat;
        self
    }

    /// Whose clock will judge expiry.
    pub fn time_source(&self) -> TimeSource {
        self.time
    }

    /// Whether the ShedLock-compatible mode is set.
    pub fn is_shedlock_compatible(&self) -> bool {
        self.compat
    }

    /// Checks the settings for `backend` (its name in errors and logs). The default
    /// `locked_by` is cut at a character boundary to fit; a configured one that does not fit
    /// or holds a NUL is [`Error::Setup`], never cut. Does no I/O.
    pub fn validate(self, backend: &'static str) -> Result<Settings> {
        let max = max_locked_by_len(self.compat);
        let locked_by = match self.locked_by {
            Some(given) => {
                if given.len() > max || given.contains('\0') {
                    let mode = if self.compat {
                        " in the ShedLock-compatible mode, which appends \" #\" and the \
                         acquisition's 16 hex digits to it"
                    } else {
                        ""
                    };
                    return Err(Error::Setup {
                        backend,
                        message: format!(
                            "locked_by must be at most {max} bytes{mode} and contain no NUL \
                             character (got {} bytes)",
                            given.len()
                        ),
                    });
                }
                given
            }
            None => default_locked_by_within(max),
        };
        Ok(Settings {
            backend,
            locked_by: locked_by.into(),
            timeout: self.timeout,
            time: self.time,
            clock: self.clock,
            compat: self.compat,
        })
    }
}

/// The setters every provider's builder shares, written once: a builder says where its
/// [`ProviderSettings`] are and gets [`operation_timeout`](Self::operation_timeout) and
/// [`locked_by`](Self::locked_by) with the same meaning, defaults and checks everywhere.
/// What the time limit covers on a given backend (an SDK's retries, a driver's server
/// selection, a pooled connection's wait) is said in that provider's builder docs.
///
/// Bring it into scope to call them (`use shedlock::ProviderBuilder;`; every provider crate
/// re-exports it), as sqlx's `ConnectOptions` is for its shared connection settings.
///
/// ```
/// use std::time::Duration;
/// use shedlock::ProviderBuilder;
/// use shedlock::store::ProviderSettings;
///
/// /// A provider's builder: its own fields, and the shared settings.
/// #[derive(Debug, Default)]
/// struct MyBuilder {
///     table: String,
///     settings: ProviderSettings,
/// }
///
/// impl ProviderBuilder for MyBuilder {
///     fn settings_mut(&mut self) -> &mut ProviderSettings {
///         &mut self.settings
///     }
/// }
///
/// let builder = MyBuilder::default()
///     .operation_timeout(Some(Duration::from_secs(3)))
///     .locked_by("billing-7");
/// let settings = builder.settings.validate("my-backend").unwrap();
/// assert_eq!(settings.timeout(), Some(Duration::from_secs(3)));
/// assert_eq!(settings.locked_by(), "billing-7");
/// ```
pub trait ProviderBuilder: Sized {
    /// The shared settings this builder embeds, validated by its `build`: for the provided
    /// setters, not for application code (setting through it a mode the provider does not
    /// offer, such as a time source or the compatible mode, is not supported).
    #[doc(hidden)]
    fn settings_mut(&mut self) -> &mut ProviderSettings;

    /// The time limit of each lock operation, waiting for and opening connections included
    /// (default [`DEFAULT_OPERATION_TIMEOUT`]; `None`: no limit of ours, only the client's
    /// own). On expiry the call fails with [`Error::Timeout`], whose effect on the backend is
    /// unknown: a lock it may have taken expires after `lock_at_most_for`.
    fn operation_timeout(mut self, limit: Option<Duration>) -> Self {
        self.settings_mut().set_timeout(limit);
        self
    }

    /// Who holds the lock, stored with it for people reading the backend (default
    /// `hostname/pid`): at most [`MAX_LOCKED_BY_LEN`] bytes (less [`ACQUISITION_SUFFIX_LEN`] in
    /// the ShedLock-compatible mode), no NUL; `build` refuses one that is not with
    /// [`Error::Setup`], never cutting it. Informational only: ownership rests on the
    /// acquisition's own id ([`Owner`]).
    fn locked_by(mut self, locked_by: impl Into<String>) -> Self {
        self.settings_mut().set_locked_by(locked_by);
        self
    }
}

/// The setter of a builder whose provider can compute leases from this instance's clock (it
/// offers client time): [`clock`](Self::clock). Providers on server time only do not implement
/// it: their builders offer no clock that would never be read.
pub trait ClockBuilder: ProviderBuilder {
    /// This instance's wall clock (default: the system clock). It computes the lease only in
    /// client time ([`TimeSource::Client`], the only mode of a provider without server time);
    /// with server time it is never read, so a skewed clock changes nothing.
    fn clock(mut self, clock: SharedClock) -> Self {
        self.settings_mut().set_clock(clock);
        self
    }
}

/// The longest `locked_by` a provider accepts, in bytes: [`MAX_LOCKED_BY_LEN`], less room for
/// the acquisition's suffix in the ShedLock-compatible mode.
fn max_locked_by_len(compat: bool) -> usize {
    if compat { MAX_LOCKED_BY_LEN - ACQUISITION_SUFFIX_LEN } else { MAX_LOCKED_BY_LEN }
}

fn default_locked_by_within(max: usize) -> String {
    let mut s = default_locked_by();
    truncate_at_char_boundary(&mut s, max);
    s
}

/// Validated [`ProviderSettings`] of one provider instance. Cheap to clone.
#[derive(Clone)]
pub struct Settings {
    backend: &'static str,
    locked_by: Arc<str>,
    timeout: Option<Duration>,
    time: TimeSource,
    clock: SharedClock,
    compat: bool,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("backend", &self.backend)
            .field("locked_by", &self.locked_by)
            .field("timeout", &self.timeout)
            .field("time", &self.time)
            .field("shedlock_compatible", &self.compat)
            .finish_non_exhaustive()
    }
}

impl Settings {
    /// The default settings for `backend`, which need no validation: the same as
    /// `ProviderSettings::new().validate(backend)`.
    pub fn new(backend: &'static str) -> Self {
        Self {
            backend,
            locked_by: default_locked_by_within(MAX_LOCKED_BY_LEN).into(),
            timeout: Some(DEFAULT_OPERATION_TIMEOUT),
            time: TimeSource::Server,
            clock: system_clock(),
            compat: false,
        }
    }

    /// These settings with another time limit for each operation (`None`: no limit).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// These settings with another time source.
    #[must_use]
    pub fn with_time_source(mut self, time: TimeSource) -> Self {
        self.time = time;
        self
    }

    /// These settings with another instance clock.
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// The backend name, in errors, logs, spans and metrics labels.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The configured (or default) `locked_by`.
    pub fn locked_by(&self) -> &str {
        &self.locked_by
    }

    /// The time limit of each operation.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Whose clock judges expiry.
    pub fn time_source(&self) -> TimeSource {
        self.time
    }

    /// The instance's clock.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// Whether the ShedLock-compatible mode is on.
    pub fn is_shedlock_compatible(&self) -> bool {
        self.compat
    }

    /// The time by the instance's clock in client-time mode; `None` in server-time mode, where
    /// the clock must not be consulted.
    pub fn client_now(&self) -> Option<SystemTime> {
        self.time.client_now(&self.clock)
    }

    /// A fresh owner for one acquisition: a new [`acquisition_id`], and the `locked_by` it
    /// writes (unique to the acquisition in the ShedLock-compatible mode).
    pub fn new_owner(&self) -> Owner {
        let id = acquisition_id();
        let locked_by = if self.compat {
            OwnerLockedBy::Own(acquisition_locked_by(&self.locked_by, id))
        } else {
            OwnerLockedBy::Shared(Arc::clone(&self.locked_by))
        };
        Owner { id, locked_by }
    }

    /// The deadline of an operation starting now (`None`: no limit).
    pub fn deadline(&self) -> Option<Instant> {
        self.timeout.and_then(|t| Instant::now().checked_add(t))
    }
}

#[derive(Clone)]
enum OwnerLockedBy {
    Shared(Arc<str>),
    Own(String),
}

/// Who owns one acquisition: the id that owner-checked unlock and extend compare, and the
/// `locked_by` it writes. Made by [`Settings::new_owner`].
#[derive(Clone)]
pub struct Owner {
    id: u64,
    locked_by: OwnerLockedBy,
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Owner")
            .field("id", &self.hex())
            .field("locked_by", &self.locked_by())
            .finish()
    }
}

impl Owner {
    /// The acquisition id: a fresh, unpredictable 64-bit value ([`acquisition_id`]).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The id's bits as a signed integer, for a 64-bit integer column.
    pub fn id_i64(&self) -> i64 {
        i64::from_ne_bytes(self.id.to_ne_bytes())
    }

    /// The id as 16 lower-case hex digits, for a text field.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.id)
    }

    /// The `locked_by` this acquisition writes: the configured value, or in the
    /// ShedLock-compatible mode that value, ` #` and [`hex`](Self::hex) (ShedLock's formats
    /// identify a holder by `lockedBy` alone).
    pub fn locked_by(&self) -> &str {
        match &self.locked_by {
            OwnerLockedBy::Shared(s) => s,
            OwnerLockedBy::Own(s) => s,
        }
    }
}

/// What a store is asked to do on one call: the lock, its owner and the call's limits.
pub struct Request<'a> {
    config: &'a LockConfig,
    owner: &'a Owner,
    settings: &'a Settings,
    operation: Operation,
    client_now: Option<SystemTime>,
    deadline: Option<Instant>,
}

impl fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("operation", &self.operation)
            .field("config", self.config)
            .field("owner", self.owner)
            .field("client_now", &self.client_now)
            .finish_non_exhaustive()
    }
}

impl<'a> Request<'a> {
    /// The lock name.
    pub fn name(&self) -> &'a str {
        self.config.name()
    }

    /// The lock's configuration for this call (for unlock and extend: the one in force now).
    pub fn config(&self) -> &'a LockConfig {
        self.config
    }

    /// `lock_at_most_for` of this call.
    pub fn lock_at_most_for(&self) -> Duration {
        self.config.lock_at_most_for()
    }

    /// `lock_at_least_for` of this call.
    pub fn lock_at_least_for(&self) -> Duration {
        self.config.lock_at_least_for()
    }

    /// The acquisition's owner.
    pub fn owner(&self) -> &'a Owner {
        self.owner
    }

    /// The provider's settings.
    pub fn settings(&self) -> &'a Settings {
        self.settings
    }

    /// Which operation this is.
    pub fn operation(&self) -> Operation {
        self.operation
    }

    /// The caller's clock in client-time mode, read once when the call began; `None` in
    /// server-time mode, where expiry must be judged by the backend's clock.
    pub fn client_now(&self) -> Option<SystemTime> {
        self.client_now
    }

    /// When this call must be answered by (`None`: no limit). Enforced by [`StoreProvider`],
    /// unless the store says it enforces it itself ([`LeaseStore::enforces_deadline`]).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// The [`Error::Timeout`] of this call, for a store that enforces its deadline itself.
    pub fn timed_out(&self) -> Error {
        self.operation.timed_out(self.settings.timeout.unwrap_or_default())
    }
}

/// A store's yes to an acquire: the state the held lock keeps, and its fencing token if the
/// store hands out tokens.
#[derive(Debug)]
pub struct Granted<H> {
    held: H,
    token: Option<u64>,
}

impl<H> Granted<H> {
    /// The lock was won; `held` is what later calls need (a version, a CAS value, a record id).
    pub fn new(held: H) -> Self {
        Self { held, token: None }
    }

    /// With the acquisition's fencing token: greater than the token of every earlier
    /// acquisition of the same name (only if the store declares
    /// [`fencing`](Capabilities::fencing)).
    pub fn with_fencing_token(mut self, token: u64) -> Self {
        self.token = Some(token);
        self
    }
}

/// The answer of [`LeaseStore::extend`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extension {
    /// The record is still this acquisition's and now runs to `lock_at_most_for` from now.
    Extended,
    /// The record is gone, expired or another acquisition's: nothing was changed. The driver
    /// answers [`Error::LockLost`].
    Lost,
}

/// The storage calls of one backend: acquire, release and extend on the record of one name.
///
/// [`StoreProvider`] calls them; it has already checked the name, made the [`Owner`], begun the
/// lease and started the time limit, and it maps [`Extension::Lost`] to [`Error::LockLost`].
/// Each call must be cancel safe: it may be dropped at any await point (a timeout, a cancelled
/// task), and must then leave no connection in a bad state and nothing held beyond
/// `lock_at_most_for`.
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// What a held lock keeps between calls (a version or CAS value, the server that granted
    /// it, when at-least starts counting). `()` when the owner id is enough.
    type Held: Send + Sync + 'static;

    /// What this store guarantees, with these settings (e.g. no fencing in the
    /// ShedLock-compatible mode, `server_time` per the time source). Asked once, when the
    /// [`StoreProvider`] is made.
    /// [`max_name_len`](Capabilities::max_name_len) is enforced before any call.
    fn capabilities(&self, settings: &Settings) -> Capabilities;

    /// Whether lock names with a NUL character are refused before any call (default: no).
    fn rejects_nul(&self) -> bool {
        false
    }

    /// Whether the store enforces [`Request::deadline`] itself and answers
    /// [`Request::timed_out`] on expiry (default: no, [`StoreProvider`] wraps each call in a
    /// timer). For stores that re-arm one timer per connection instead of registering one per
    /// call.
    fn enforces_deadline(&self) -> bool {
        false
    }

    /// Takes the lock of [`Request::name`] for [`Request::owner`] until `lock_at_most_for` from
    /// now if it is free (no record, or an expired one): `Some` if this owner won it, `None` if
    /// it is held elsewhere. One round trip where the backend allows it.
    async fn acquire(&self, req: &Request<'_>) -> Result<Option<Granted<Self::Held>>>;

    /// Takes the locks of many requests (distinct names, at most
    /// [`batch_limit`](Self::batch_limit)) in one request to the backend, answering per
    /// request what [`acquire`](Self::acquire) would: `Some` won, `None` held elsewhere. Names
    /// are independent: never all-or-nothing. `Err`: the request as a whole failed. Called only
    /// by a store that declares [`Capabilities::native_batch`]; [`StoreProvider`] has begun
    /// every name's lease before calling. Default: each `acquire` in turn.
    async fn acquire_many(&self, reqs: &[Request<'_>]) -> Result<Vec<Option<Granted<Self::Held>>>> {
        let mut out = Vec::with_capacity(reqs.len());
        for req in reqs {
            out.push(self.acquire(req).await?);
        }
        Ok(out)
    }

    /// The most names [`acquire_many`](Self::acquire_many) takes in one request (a statement's
    /// parameter limit, a script's size); larger batches are split. Default 500.
    fn batch_limit(&self) -> usize {
        500
    }

    /// Releases this owner's lock, keeping it until `lock_at_least_for` after the acquisition
    /// (or last extension). Owner-checked: another owner's record is left as it is, and that is
    /// `Ok`.
    async fn release(&self, req: &Request<'_>, held: &mut Self::Held) -> Result<()>;

    /// Extends this owner's lock to `lock_at_most_for` from now if it still holds it.
    async fn extend(&self, req: &Request<'_>, held: &mut Self::Held) -> Result<Extension> {
        let _ = held;
        Err(Error::Unsupported { backend: req.settings().backend(), operation: "extend" })
    }

    /// Asks the backend whether it can hold locks now (reachable; table, bucket or collection
    /// present), changing nothing: [`LockProvider::check`]. The store that implements it
    /// declares [`Capabilities::check`]. [`StoreProvider`] bounds it by the operation timeout
    /// (always, even where the store [enforces deadlines](Self::enforces_deadline) itself).
    /// Default: no I/O, `Ok(())`.
    async fn check(&self, settings: &Settings) -> Result<()> {
        let _ = settings;
        Ok(())
    }

    /// The record of `name` as stored, judged held or free by the clock of `settings`' time
    /// source: [`LockProvider::inspect`]. Reads only. The store that implements it declares
    /// [`Capabilities::inspect`]; [`StoreProvider`] checks the name and bounds the call by the
    /// operation timeout. Default: [`Error::Unsupported`].
    async fn inspect(&self, name: &str, settings: &Settings) -> Result<Option<LockInfo>> {
        let _ = name;
        Err(Error::Unsupported { backend: settings.backend(), operation: "inspect" })
    }

    /// One page of the records under `prefix`, after `cursor`, at most `limit` (already within
    /// `1..=`[`MAX_PAGE`](crate::inspect::MAX_PAGE)): [`LockProvider::list`]. Reads only, and
    /// never loads more than a page into memory. Declared by [`Capabilities::list`]. Default:
    /// [`Error::Unsupported`].
    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
        settings: &Settings,
    ) -> Result<LockPage> {
        let _ = (prefix, cursor, limit);
        Err(Error::Unsupported { backend: settings.backend(), operation: "list" })
    }

    /// Releases `seen`'s lock if its record still belongs to `seen.acquisition`, in one
    /// conditional write: [`LockProvider::force_release`]. Declared by
    /// [`Capabilities::force_release`]. Default: [`Error::Unsupported`].
    async fn force_release(&self, seen: &LockInfo, settings: &Settings) -> Result<ForceRelease> {
        let _ = seen;
        Err(Error::Unsupported { backend: settings.backend(), operation: "force_release" })
    }
}

struct Inner<S> {
    store: S,
    settings: Settings,
    /// The store's capabilities with these settings, fixed for the provider's life: computed
    /// once, not on every call.
    capabilities: Capabilities,
}

impl<S: LeaseStore> Inner<S> {
    /// The name checks of every call that takes a name: not empty, not too long, no NUL where
    /// the store refuses them.
    fn check_name(&self, name: &str) -> Result<()> {
        let max_len = self.capabilities.max_name_len;
        check_lock_name(self.settings.backend, name, max_len, self.store.rejects_nul())
    }

    async fn call<T>(
        &self,
        operation: Operation,
        name: &str,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        // A store that enforces the deadline itself (on the server) is not also cut short here.
        let timeout = self.settings.timeout.filter(|_| !self.store.enforces_deadline());
        operation.run(self.settings.backend, name, timeout, fut).await
    }

    fn request<'a>(
        &'a self,
        operation: Operation,
        config: &'a LockConfig,
        owner: &'a Owner,
    ) -> Request<'a> {
        Request {
            config,
            owner,
            settings: &self.settings,
            operation,
            client_now: self.settings.client_now(),
            deadline: self.settings.deadline(),
        }
    }
}

/// A [`LockProvider`] made of a [`LeaseStore`] and its [`Settings`]. Cheap to clone.
pub struct StoreProvider<S> {
    inner: Arc<Inner<S>>,
}

impl<S> Clone for StoreProvider<S> {
    fn clone(&self) -> Self {
        Self { inner: Arc::clone(&self.inner) }
    }
}

impl<S: fmt::Debug> fmt::Debug for StoreProvider<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreProvider")
            .field("store", &self.inner.store)
            .field("settings", &self.inner.settings)
            .finish()
    }
}

impl<S: LeaseStore> StoreProvider<S> {
    /// A provider over `store` with `settings`.
    pub fn new(store: S, settings: Settings) -> Self {
        let capabilities = store.capabilities(&settings);
        Self { inner: Arc::new(Inner { store, settings, capabilities }) }
    }
}

impl<S> StoreProvider<S> {
    /// The store.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }
}

#[async_trait]
impl<S: LeaseStore> LockProvider for StoreProvider<S> {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        let inner = &self.inner;
        let backend = inner.settings.backend;
        let name = config.name();
        inner.check_name(name)?;
        let owner = inner.settings.new_owner();
        let acquisition = Acquisition::begin_declared(config, &inner.capabilities);
        let req = inner.request(Operation::TryLock, config, &owner);
        let granted = inner.call(Operation::TryLock, name, inner.store.acquire(&req)).await?;
        let Some(Granted { held, token }) = granted else {
            tracing::trace!(provider = backend, lock = name, "lock held elsewhere");
            return Ok(None);
        };
        tracing::debug!(provider = backend, lock = name, token, "lock acquired");
        let handle = StoreHandle { inner: Arc::clone(inner), owner, held, token };
        acquisition.grant(handle).await.map(Some)
    }

    async fn try_lock_many(
        &self,
        configs: &[LockConfig],
        options: BatchOptions,
    ) -> Result<BatchOutcome> {
        let inner = &self.inner;
        // One name is a `try_lock`: the store's single acquire (on PostgreSQL the provider's own
        // connection, where a batch takes one from the pool, which may have to connect first).
        if !inner.capabilities.native_batch || configs.len() == 1 {
            return try_lock_each(self, configs, options).await;
        }
        check_distinct(configs)?;
        // A name the store cannot hold answers its own error; the others go to the backend.
        let mut answers: Vec<Option<Result<Option<Lock>>>> =
            configs.iter().map(|c| inner.check_name(c.name()).err().map(Err)).collect();
        let asked: Vec<usize> = (0..configs.len()).filter(|i| answers[*i].is_none()).collect();
        let owners: Vec<Owner> = asked.iter().map(|_| inner.settings.new_owner()).collect();
        // Every lease is begun before its request is sent.
        let acquisitions: Vec<Acquisition> = asked
            .iter()
            .map(|i| Acquisition::begin_declared(&configs[*i], &inner.capabilities))
            .collect();
        let reqs: Vec<Request<'_>> = asked
            .iter()
            .zip(&owners)
            .map(|(i, owner)| inner.request(Operation::TryLockMany, &configs[*i], owner))
            .collect();
        let limit = inner.store.batch_limit().max(1);
        let mut calls = Vec::new();
        for chunk in reqs.chunks(limit) {
            let first = chunk.first().map_or("", Request::name);
            calls.push(inner.call(Operation::TryLockMany, first, inner.store.acquire_many(chunk)));
        }
        let chunked = crate::batch::in_order(calls, options.concurrency.get()).await;
        drop(reqs);
        let mut grants: Vec<Result<Option<Granted<S::Held>>>> = Vec::with_capacity(asked.len());
        for (answer, len) in chunked.into_iter().zip(asked.chunks(limit).map(<[usize]>::len)) {
            match answer {
                Ok(granted) if granted.len() == len => grants.extend(granted.into_iter().map(Ok)),
                Ok(granted) => {
                    // A store bug, never trusted: nothing of this chunk counts as won.
                    let e = Error::Backend {
                        backend: inner.settings.backend,
                        source: format!(
                            "a batch of {len} names was answered with {} answers",
                            granted.len()
                        )
                        .into(),
                    };
                    grants.extend(e.fan_out(len).into_iter().map(Err));
                }
                Err(e) => grants.extend(e.fan_out(len).into_iter().map(Err)),
            }
        }
        for (((i, owner), acquisition), granted) in
            asked.iter().zip(owners).zip(acquisitions).zip(grants)
        {
            let name = configs[*i].name();
            answers[*i] = Some(match granted {
                Ok(Some(Granted { held, token })) => {
                    tracing::debug!(
                        provider = inner.settings.backend,
                        lock = name,
                        token,
                        "lock acquired"
                    );
                    let handle = StoreHandle { inner: Arc::clone(inner), owner, held, token };
                    acquisition.grant(handle).await.map(Some)
                }
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            });
        }
        Ok(answers.into_iter().map(|a| a.unwrap_or(Ok(None))).collect())
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities.clone()
    }

    fn backend_name(&self) -> &'static str {
        self.inner.settings.backend
    }

    async fn check(&self) -> Result<()> {
        let inner = &self.inner;
        let check = inner.store.check(&inner.settings);
        Operation::Check.run(inner.settings.backend, "", inner.settings.timeout, check).await
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>> {
        let inner = &self.inner;
        inner.check_name(name)?;
        let fut = inner.store.inspect(name, &inner.settings);
        inner.call(Operation::Inspect, name, fut).await
    }

    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<LockPage> {
        let inner = &self.inner;
        if !prefix.is_empty() {
            inner.check_name(prefix)?;
        }
        let fut = inner.store.list(prefix, cursor, page_limit(limit), &inner.settings);
        inner.call(Operation::List, prefix, fut).await
    }

    async fn force_release(&self, seen: &LockInfo) -> Result<ForceRelease> {
        let inner = &self.inner;
        inner.check_name(&seen.name)?;
        let fut = inner.store.force_release(seen, &inner.settings);
        let released = inner.call(Operation::ForceRelease, &seen.name, fut).await?;
        log_forced_release(inner.settings.backend, seen, &released);
        Ok(released)
    }
}

/// A provider type of its own (with its own builder and inherent methods) that answers the
/// [`LockProvider`] calls through another provider inside it, usually a [`StoreProvider`]:
/// implementing this one method makes it a [`LockProvider`], so the forwarding is written once,
/// here, and the store type stays private.
///
/// ```
/// use shedlock::{LockProvider, store::DelegatingProvider};
/// use shedlock_memory::{MemoryLockProvider, MemoryServer};
///
/// /// A provider type with an API of its own, answering through the provider inside it (a
/// /// `StoreProvider<YourStore>` in a real provider crate).
/// struct MyLockProvider {
///     inner: MemoryLockProvider,
/// }
///
/// impl DelegatingProvider for MyLockProvider {
///     fn delegate(&self) -> &dyn LockProvider {
///         &self.inner
///     }
/// }
///
/// let p = MyLockProvider { inner: MemoryLockProvider::new(&MemoryServer::new()) };
/// assert_eq!(p.backend_name(), "memory");
/// ```
pub trait DelegatingProvider: Send + Sync + 'static {
    /// The provider that answers for this one.
    fn delegate(&self) -> &dyn LockProvider;
}

#[async_trait]
impl<T: DelegatingProvider> LockProvider for T {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        self.delegate().try_lock(config).await
    }

    async fn try_lock_many(
        &self,
        configs: &[LockConfig],
        options: BatchOptions,
    ) -> Result<BatchOutcome> {
        self.delegate().try_lock_many(configs, options).await
    }

    fn capabilities(&self) -> Capabilities {
        self.delegate().capabilities()
    }

    fn backend_name(&self) -> &'static str {
        self.delegate().backend_name()
    }

    async fn check(&self) -> Result<()> {
        self.delegate().check().await
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>> {
        self.delegate().inspect(name).await
    }

    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<LockPage> {
        self.delegate().list(prefix, cursor, limit).await
    }

    async fn force_release(&self, seen: &LockInfo) -> Result<ForceRelease> {
        self.delegate().force_release(seen).await
    }
}

/// One acquisition of a [`StoreProvider`]'s lock.
struct StoreHandle<S: LeaseStore> {
    inner: Arc<Inner<S>>,
    owner: Owner,
    held: S::Held,
    token: Option<u64>,
}

#[async_trait]
impl<S: LeaseStore> LockHandle for StoreHandle<S> {
    async fn unlock(&mut self, config: &LockConfig) -> Result<()> {
        let inner = &self.inner;
        let req = inner.request(Operation::Unlock, config, &self.owner);
        let release = inner.store.release(&req, &mut self.held);
        inner.call(Operation::Unlock, config.name(), release).await
    }

    async fn extend(&mut self, config: &LockConfig) -> Result<()> {
        let inner = &self.inner;
        let req = inner.request(Operation::Extend, config, &self.owner);
        let extend = inner.store.extend(&req, &mut self.held);
        match inner.call(Operation::Extend, config.name(), extend).await? {
            Extension::Extended => Ok(()),
            Extension::Lost => Err(Error::LockLost { name: config.name().to_owned() }),
        }
    }

    fn fencing_token(&self) -> Option<u64> {
        self.token
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use std::sync::Mutex;

    use super::*;

    /// The one vocabulary of timeouts and spans, pinned: a new operation is added here on
    /// purpose, and every span is `shedlock.<label>`.
    #[test]
    fn operation_labels_are_one_pinned_vocabulary_and_name_the_spans() {
        let labels: Vec<&str> = Operation::ALL.iter().map(|o| o.label()).collect();
        assert_eq!(
            labels,
            [
                "try_lock",
                "try_lock_many",
                "unlock",
                "extend",
                "check",
                "inspect",
                "list",
                "force_release",
                "connect",
                "create_table",
                "revoke_lease",
                "read_record",
                "write_record",
                "delete_record"
            ]
        );
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry());
        tracing::dispatcher::with_default(&dispatch, || {
            for op in Operation::ALL {
                let span = op.span("test", "n");
                let name = span.metadata().map(|m| m.name());
                assert_eq!(name, Some(format!("shedlock.{}", op.label()).as_str()), "{op:?}");
                match op.timed_out(Duration::from_secs(1)) {
                    Error::Timeout { operation, .. } => assert_eq!(operation, op.label()),
                    other => panic!("{other:?}"),
                }
            }
        });
    }

    /// What the driver sent on one call: operation, owner id, locked_by, client clock.
    type Seen = (Operation, u64, String, Option<SystemTime>);

    /// A store that answers from a scripted slot, to observe what the driver sends.
    #[derive(Default)]
    struct Probe {
        seen: Mutex<Vec<Seen>>,
        extend: Mutex<Option<Extension>>,
        delay: Option<Duration>,
    }

    impl Probe {
        fn record(&self, req: &Request<'_>) {
            let o = req.owner();
            let seen = (req.operation(), o.id(), o.locked_by().to_owned(), req.client_now());
            self.seen.lock().unwrap().push(seen);
        }
    }

    #[async_trait]
    impl LeaseStore for Probe {
        type Held = u32;

        fn capabilities(&self, _: &Settings) -> Capabilities {
            Capabilities::new().with_extend(true).with_fencing(true).with_max_name_len(Some(8))
        }

        fn rejects_nul(&self) -> bool {
            true
        }

        async fn acquire(&self, req: &Request<'_>) -> Result<Option<Granted<u32>>> {
            if let Some(d) = self.delay {
                tokio::time::sleep(d).await;
            }
            self.record(req);
            Ok(Some(Granted::new(7).with_fencing_token(42)))
        }

        async fn release(&self, req: &Request<'_>, held: &mut u32) -> Result<()> {
            assert_eq!(*held, 8, "extend's change of the held state reaches release");
            self.record(req);
            Ok(())
        }

        async fn extend(&self, req: &Request<'_>, held: &mut u32) -> Result<Extension> {
            *held += 1;
            self.record(req);
            Ok(self.extend.lock().unwrap().take().unwrap_or(Extension::Extended))
        }

        async fn check(&self, settings: &Settings) -> Result<()> {
            if let Some(d) = self.delay {
                tokio::time::sleep(d).await;
            }
            Err(Error::Setup { backend: settings.backend(), message: "no table".into() })
        }
    }

    fn cfg(name: &str) -> LockConfig {
        LockConfig::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
    }

    #[tokio::test]
    async fn one_owner_runs_through_acquire_extend_and_release() {
        let mut s = ProviderSettings::new();
        s.set_locked_by("me");
        let p = StoreProvider::new(Probe::default(), s.validate("probe").unwrap());
        let mut lock = p.try_lock(&cfg("job")).await.unwrap().unwrap();
        assert_eq!(lock.fencing_token(), Some(42));
        lock.extend(Duration::from_secs(60), Duration::ZERO).await.unwrap();
        lock.unlock().await.unwrap();
        let seen = p.store().seen.lock().unwrap().clone();
        let ops: Vec<_> = seen.iter().map(|s| s.0).collect();
        assert_eq!(ops, [Operation::TryLock, Operation::Extend, Operation::Unlock]);
        assert!(seen.iter().all(|s| s.1 == seen[0].1 && s.2 == "me"), "{seen:?}");
        assert!(seen.iter().all(|s| s.3.is_none()), "server time: no client clock reading");
    }

    #[tokio::test]
    async fn a_lost_extension_is_lock_lost_and_marks_the_lease() {
        let p =
            StoreProvider::new(Probe::default(), ProviderSettings::new().validate("p").unwrap());
        let mut lock = p.try_lock(&cfg("job")).await.unwrap().unwrap();
        *p.store().extend.lock().unwrap() = Some(Extension::Lost);
        let e = lock.extend(Duration::from_secs(60), Duration::ZERO).await.unwrap_err();
        assert!(matches!(e, Error::LockLost { ref name } if name == "job"), "{e:?}");
        assert!(lock.is_lost());
    }

    #[tokio::test]
    async fn names_are_checked_against_the_stores_limits_before_any_call() {
        let p =
            StoreProvider::new(Probe::default(), ProviderSettings::new().validate("p").unwrap());
        for bad in ["123456789", "a\0b"] {
            match p.try_lock(&cfg(bad)).await {
                Err(Error::InvalidName { backend: "p", name, .. }) => assert_eq!(name, bad),
                other => panic!("{other:?}"),
            }
        }
        assert!(p.store().seen.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn check_answers_from_the_store_within_the_operation_timeout_and_takes_no_lock() {
        let p =
            StoreProvider::new(Probe::default(), ProviderSettings::new().validate("p").unwrap());
        match p.check().await {
            Err(Error::Setup { backend: "p", message }) => assert_eq!(message, "no table"),
            other => panic!("{other:?}"),
        }
        let slow = Probe { delay: Some(Duration::from_secs(60)), ..Probe::default() };
        let mut s = ProviderSettings::new();
        s.set_timeout(Some(Duration::from_secs(1)));
        let p = StoreProvider::new(slow, s.validate("p").unwrap());
        match p.check().await {
            Err(Error::Timeout { operation, after }) => {
                assert_eq!((operation, after), ("check", Duration::from_secs(1)));
            }
            other => panic!("{other:?}"),
        }
        assert!(p.store().seen.lock().unwrap().is_empty(), "no lock operation ran");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_store_times_out_with_the_operation_label() {
        let store = Probe { delay: Some(Duration::from_secs(5)), ..Probe::default() };
        let mut s = ProviderSettings::new();
        s.set_timeout(Some(Duration::from_secs(1)));
        let p = StoreProvider::new(store, s.validate("p").unwrap());
        match p.try_lock(&cfg("job")).await {
            Err(Error::Timeout { operation, after }) => {
                assert_eq!((operation, after), ("try_lock", Duration::from_secs(1)));
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn compat_owners_write_a_locked_by_unique_to_the_acquisition() {
        let mut s = ProviderSettings::new();
        s.set_locked_by("node").set_shedlock_compatible(true).set_time_source(TimeSource::Client);
        let p = StoreProvider::new(Probe::default(), s.validate("p").unwrap());
        let a = p.try_lock(&cfg("a")).await.unwrap().unwrap();
        let b = p.try_lock(&cfg("b")).await.unwrap().unwrap();
        drop((a, b));
        let seen = p.store().seen.lock().unwrap().clone();
        for (_, id, locked_by, now) in &seen {
            assert_eq!(*locked_by, format!("node #{id:016x}"));
            assert!(now.is_some(), "client time: the clock is read");
        }
        assert_ne!(seen[0].1, seen[1].1);
    }

    #[test]
    fn locked_by_is_checked_or_cut_at_a_char_boundary() {
        let validate = |given: Option<String>, compat| {
            let mut s = ProviderSettings::new();
            if let Some(g) = given {
                s.set_locked_by(g);
            }
            s.set_shedlock_compatible(compat);
            s.validate("p")
        };
        assert!(validate(Some("a".repeat(255)), false).is_ok());
        assert!(matches!(validate(Some("a".repeat(256)), false), Err(Error::Setup { .. })));
        assert!(matches!(validate(Some("a".repeat(238)), true), Err(Error::Setup { .. })));
        assert!(validate(Some("a".repeat(237)), true).is_ok());
        assert!(matches!(validate(Some("a\0b".into()), false), Err(Error::Setup { .. })));
        assert_eq!(Settings::new("p").locked_by(), validate(None, false).unwrap().locked_by());
        let default = validate(None, true).unwrap();
        assert!(default.locked_by().len() <= 237);
        assert_eq!(
            default.new_owner().locked_by().len(),
            default.locked_by().len() + ACQUISITION_SUFFIX_LEN
        );
    }

    #[test]
    fn owner_ids_are_fresh_and_encoded_one_way() {
        let s = ProviderSettings::new().validate("p").unwrap();
        let (a, b) = (s.new_owner(), s.new_owner());
        assert_ne!(a.id(), b.id());
        assert_eq!(a.hex().len(), 16);
        assert_eq!(u64::from_str_radix(&a.hex(), 16).unwrap(), a.id());
        assert_eq!(a.id_i64().to_ne_bytes(), a.id().to_ne_bytes());
        assert_eq!(a.locked_by(), s.locked_by());
    }
}

//! What a provider supplies to the kit: a [`ProviderFactory`] that builds independent instances,
//! and optional [`Hooks`] into its backend.

use std::{fmt, net::SocketAddr, sync::Arc};

use async_trait::async_trait;
use shedlock::{BoxError, LockProvider, SharedClock};

/// Builds the provider under test.
///
/// Every call to [`create`](ProviderFactory::create) must return an *independent* instance: its
/// own client or connection pool, as a separate application node would have. Instances built by
/// one factory must share one backend (the same database, server, bucket...).
///
/// ```
/// use std::sync::Arc;
/// use shedlock::{BoxError, LockProvider};
/// use shedlock_conformance::{InstanceOptions, ProviderFactory};
/// use shedlock_memory::{MemoryLockProvider, MemoryServer};
///
/// struct MemoryFactory(MemoryServer);
///
/// #[async_trait::async_trait]
/// impl ProviderFactory for MemoryFactory {
///     fn name(&self) -> &str {
///         "memory"
///     }
///     async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
///         let mut p = MemoryLockProvider::new(&self.0);
///         if let Some(clock) = options.clock {
///             p = p.with_clock(clock);
///         }
///         Ok(Arc::new(p))
///     }
/// }
/// ```
#[async_trait]
pub trait ProviderFactory: Send + Sync + 'static {
    /// The provider's name, used for the report files (`<name>.md`, `<name>.json`): lowercase,
    /// e.g. `postgres`.
    fn name(&self) -> &str;

    /// Builds one independent instance (one "node").
    ///
    /// - [`InstanceOptions::clock`]: when set, a provider that judges expiry by client time
    ///   (capability `server_time == false`) **must** use this clock for every time it reads;
    ///   otherwise the clock-skew checks (C18, C19) cannot inject skew and C18 fails. Server-time
    ///   providers may ignore it.
    /// - [`InstanceOptions::address`]: when set, the instance must connect to this address
    ///   instead of the real backend address (the kit's fault proxy sits there; see
    ///   [`Hooks::with_backend_address`]). It should also use short client timeouts (a few
    ///   seconds) so that calls fail instead of hanging when the proxy cuts the connection.
    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError>;

    /// Optional access to the backend for the checks that need it (C14, C22, C24, C25, the
    /// in-flight parts of C12 and C13, and the round-trip figures). Called once per run. Default: none.
    fn hooks(&self) -> Hooks {
        Hooks::new()
    }

    /// Called once after the last check (e.g. to stop a backend process started by the test).
    async fn teardown(&self) {}

    /// What the instances run against, for the report: the product and its version, and
    /// whether it is a stand-in for the real service (`PostgreSQL 15.14, native processes on
    /// loopback`; `dynalite 4.0.1, a DynamoDB stand-in`). Asked once, after the last check.
    /// Never put credentials here. Default: not said.
    fn server(&self) -> Option<String> {
        None
    }

    /// How the instances reach the backend when the suite runs in production posture: the
    /// user, its exact grants and the TLS, stated in the report's header; its secrets are
    /// checked never to appear in the report. Asked once, after the last check. Default: none
    /// (the report says nothing of it).
    fn security(&self) -> Option<crate::Security> {
        None
    }
}

#[async_trait]
impl<F: ProviderFactory + ?Sized> ProviderFactory for Arc<F> {
    fn name(&self) -> &str {
        (**self).name()
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        (**self).create(options).await
    }

    fn hooks(&self) -> Hooks {
        (**self).hooks()
    }

    async fn teardown(&self) {
        (**self).teardown().await
    }

    fn server(&self) -> Option<String> {
        (**self).server()
    }

    fn security(&self) -> Option<crate::Security> {
        (**self).security()
    }
}

/// How the kit wants one instance built. Built by the kit; providers read it.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct InstanceOptions {
    /// The instance's number within the current check (0, 1, ...), for naming clients.
    pub index: usize,
    /// The wall clock this instance must use (skew injection). `None`: the system clock.
    pub clock: Option<SharedClock>,
    /// Connect here instead of the real backend address (the kit's fault proxy). `None`: the
    /// real address.
    pub address: Option<SocketAddr>,
}

impl InstanceOptions {
    /// Options for instance `index` with the system clock and the real address.
    pub fn new(index: usize) -> Self {
        Self { index, clock: None, address: None }
    }

    /// Sets the clock.
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Sets the address to connect to.
    #[must_use]
    pub fn with_address(mut self, address: SocketAddr) -> Self {
        self.address = Some(address);
        self
    }

    /// The clock to use: the given one, or the system clock.
    pub fn clock_or_system(&self) -> SharedClock {
        self.clock.clone().unwrap_or_else(shedlock::system_clock)
    }
}

impl fmt::Debug for InstanceOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InstanceOptions")
            .field("index", &self.index)
            .field("clock", &self.clock)
            .field("address", &self.address)
            .finish()
    }
}

/// Raw access to the lock records in the backend (C14, and C22's lost-lock case).
///
/// `name` is the lock name as given to `try_lock`; the hook maps it to the backend's key or row
/// exactly as the provider does.
#[async_trait]
pub trait RecordHooks: Send + Sync + 'static {
    /// Whether a record for `name` is present (held or not). Used to validate the other hooks:
    /// it must be `true` right after a successful `try_lock` and `false` right after
    /// [`delete_record`](RecordHooks::delete_record).
    async fn record_exists(&self, name: &str) -> Result<bool, BoxError>;

    /// Deletes the record of `name`, as an operator might while the process runs.
    async fn delete_record(&self, name: &str) -> Result<(), BoxError>;

    /// Stores a record for `name` that expired in the past (e.g. an hour ago), as a crashed
    /// earlier process would have left behind. It must be a record the provider itself could have
    /// written, owned by nobody alive.
    async fn plant_expired_record(&self, name: &str) -> Result<(), BoxError>;

    /// Whether the backend drops an expired record by itself (a TTL: Redis `PX`, an etcd
    /// lease, memcached's expiry), so that a planted expired record is gone by the time
    /// [`plant_expired_record`](RecordHooks::plant_expired_record) returns. Default `false`: C14
    /// then requires [`record_exists`](RecordHooks::record_exists) to see the planted record (a
    /// plant that did nothing would prove nothing). Declared `true`, C14 proves it instead: the
    /// record of a lock left to expire must vanish.
    fn expired_records_vanish(&self) -> bool {
        false
    }
}

/// Restarts the backend while the process runs (C25).
#[async_trait]
pub trait RestartHook: Send + Sync + 'static {
    /// Stops and starts the backend (same address), returning once it accepts connections again.
    async fn restart(&self) -> Result<(), BoxError>;

    /// Something about the running backend that every restart changes: a server run id, its
    /// start time, its process ids. C25 uses it to prove that [`restart`](Self::restart) restarted
    /// something. The default, `None`, says nothing: C25 then needs a backend address, and sees
    /// a connection it opened before the restart closed by it (a server that stops gracefully
    /// may wait for that connection first, which slows the restart).
    async fn identity(&self) -> Result<Option<String>, BoxError> {
        Ok(None)
    }
}

/// Optional hooks a [`ProviderFactory`] offers. Checks that need a hook that is not given are
/// reported "not applicable" with the reason.
#[derive(Clone, Default)]
#[must_use]
pub struct Hooks {
    records: Option<Arc<dyn RecordHooks>>,
    restart: Option<Arc<dyn RestartHook>>,
    backend_address: Option<SocketAddr>,
    node_env: Option<Vec<(String, String)>>,
}

impl Hooks {
    /// No hooks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Raw record access (enables C14; with `fencing`, C14 also compares tokens across
    /// deletions).
    pub fn with_records(mut self, hooks: impl RecordHooks) -> Self {
        self.records = Some(Arc::new(hooks));
        self
    }

    /// The environment that lets a separate node process of this test binary reach the same
    /// backend as this process — e.g. `SHEDLOCK_POSTGRES_URL` set to the server this process
    /// started — (enables C28). Node processes also inherit the run id
    /// ([`run_id`](crate::run_id)): a factory that namespaces its records per run (on a backend
    /// shared by several runs) uses it, so that nodes and parent meet on the same records. An
    /// empty list says the node processes need nothing extra.
    pub fn with_node_env<K: Into<String>, V: Into<String>>(
        mut self,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.node_env = Some(env.into_iter().map(|(k, v)| (k.into(), v.into())).collect());
        self
    }

    /// The node environment, if the factory offers one ([`with_node_env`](Self::with_node_env)).
    pub fn node_env(&self) -> Option<&[(String, String)]> {
        self.node_env.as_deref()
    }

    /// Backend restart (enables C25).
    pub fn with_restart(mut self, hook: impl RestartHook) -> Self {
        self.restart = Some(Arc::new(hook));
        self
    }

    /// The backend's TCP address. The kit then runs its fault proxy in front of it and builds
    /// instances with [`InstanceOptions::address`] set to the proxy (enables C24, the in-flight
    /// parts of C12 and C13, and the round-trip figures).
    pub fn with_backend_address(mut self, address: SocketAddr) -> Self {
        self.backend_address = Some(address);
        self
    }

    /// The record hooks, if given.
    pub fn records(&self) -> Option<&Arc<dyn RecordHooks>> {
        self.records.as_ref()
    }

    /// The restart hook, if given.
    pub fn restart(&self) -> Option<&Arc<dyn RestartHook>> {
        self.restart.as_ref()
    }

    /// The backend address, if given.
    pub fn backend_address(&self) -> Option<SocketAddr> {
        self.backend_address
    }
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("records", &self.records.is_some())
            .field("restart", &self.restart.is_some())
            .field("backend_address", &self.backend_address)
            // Only the names: a URL may carry a password.
            .field(
                "node_env",
                &self
                    .node_env
                    .as_ref()
                    .map(|e| e.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>()),
            )
            .finish()
    }
}

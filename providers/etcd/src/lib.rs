//! etcd lock provider for [`shedlock`], on an etcd-client [`Client`] (etcd v3 API; tested
//! against etcd 3.4: one node, a 3-node cluster, and a node serving only `https://` with
//! authentication enabled).
//!
//! A held lock is one key, `<prefix>/<name>` (the name with `%` and `/` escaped, so no two
//! prefixes share a key; see [`EtcdLockProviderBuilder::key_prefix`]), attached to an etcd
//! **lease** whose TTL is `lock_at_most_for` rounded up to whole seconds. The etcd leader deletes
//! the key when the lease expires, judged by its own clock: no client clock is read.
//!
//! - **Acquire**: a transaction `version(key) = 0 → put(key, locked_by, lease)`. The lease is a
//!   fresh grant (2 round trips), or, by default, a lease this instance granted earlier for the
//!   same TTL and no longer uses (a lock it released, an attempt that found the name held): then
//!   the transaction and a keep-alive of that lease are sent together, so the acquire costs **one
//!   round trip** and the key lives for the full TTL from the keep-alive (see
//!   [`EtcdLockProviderBuilder::reuse_leases`]).
//! - **Owner-checked** unlock and extend: every write compares the key's `create_revision` (this
//!   acquisition's revision) and its lease, so a stale holder changes nothing.
//! - **Unlock** deletes the key (owner-checked) and keeps the lease for the next acquire; inside
//!   `lock_at_least_for` it re-puts the key under a short lease of the remaining time instead.
//! - **Extend**: a keep-alive of the lock's lease beside an owner-checking read (one round trip)
//!   when `lock_at_most_for` keeps its TTL; else the key moves to a freshly granted lease.
//! - **Fencing tokens**: the revision of the acquiring put (the key's `create_revision`): etcd
//!   revisions only grow, across deletes, restarts, compaction and leader changes.
//!
//! **Production posture.** [`EtcdClientBuilder`] makes the client: `https://` endpoints with the
//! **`tls`** feature (rustls on ring; `tls_ca_pem`, client
//! certificates, the name to verify), a user whose password is refused over plaintext unless
//! allowed, an auth token renewed when it lapses. The user's role needs `readwrite` on the prefix
//! (`read` for `inspect` and `list` alone); a missing permission, a refused login or a
//! certificate not accepted is [`Error::Setup`] saying what to change. The README's "TLS and
//! logins" and "Permissions" give the details and the `etcdctl` commands.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_etcd::{EtcdClientBuilder, EtcdLockProvider};
//!
//! let client = EtcdClientBuilder::new(["http://127.0.0.1:2379"]).connect().await?;
//! let provider = EtcdLockProvider::builder(client).key_prefix("shedlock/").build()?;
//!
//! let cfg = LockConfig::new("nightly-report", Duration::from_secs(600), Duration::from_secs(30))?;
//! if let Some(lock) = provider.try_lock(&cfg).await? {
//!     // ... run the task ...
//!     lock.unlock().await?;
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod connect;
mod error;
mod keys;
#[cfg(feature = "tls")]
mod tls;
mod watch;

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, LeaseKeepAliveStream,
    LeaseKeeper, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use shedlock::{
    Acquisition, Capabilities, Error, ForceRelease, Lock, LockConfig, LockHandle, LockInfo,
    LockPage, LockProvider, Result, TimeSource,
    inspect::page_limit,
    store::{Operation, ProviderSettings, log_forced_release},
    support::{check_lock_name, duration_secs_ceil, with_timeout},
};
use tokio::time::Instant;

pub use connect::EtcdClientBuilder;
use error::{Access, Failure, Permission, classify, sent};
pub use keys::MAX_PREFIX_LEN;

const BACKEND: &str = "etcd";

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "shedlock/";

/// The builder setters every provider shares (`operation_timeout`, `locked_by`).
pub use shedlock::ProviderBuilder;
/// The default time limit of one operation (acquire, unlock, extend): 10 s, as for every
/// provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT;

/// The longest lock name accepted, in bytes (names are keys; etcd allows far more, but a name
/// this long is a bug, not a job).
pub const MAX_NAME_LEN: usize = 4096;

/// The longest lease TTL etcd grants (`MaxLeaseTTL`, 9 × 10⁹ s); longer locks are capped to it
/// (about 285 years).
const MAX_TTL: i64 = 9_000_000_000;

/// A kept lease is reused only while this instance's conservative count gives it at least this
/// long: the transaction that attaches the key must reach the server before the lease could
/// expire.
const REUSE_MARGIN: Duration = Duration::from_secs(1);

/// Leases kept per TTL for reuse; more are revoked.
const POOL_PER_TTL: usize = 8;

/// The lease TTL for a duration: whole seconds, rounded up, at least 1, at most etcd's maximum.
fn ttl_secs(d: Duration) -> i64 {
    i64::try_from(duration_secs_ceil(d)).unwrap_or(MAX_TTL).clamp(1, MAX_TTL)
}

/// One lease this instance granted, with its keep-alive stream once one is open.
#[derive(Debug)]
struct LeaseInfo {
    id: i64,
    /// The TTL asked for (the pool's key).
    requested: i64,
    /// The TTL the server granted (at least the server's minimum, so possibly more than asked).
    ttl: i64,
    /// When the last grant or keep-alive of this lease was sent: the server's expiry is at least
    /// this instant plus `ttl`.
    refreshed: Instant,
    /// The lease's keep-alive stream, opened by its first renewal and kept with the lease, so
    /// that a later renewal is one message on it (`None` until then, or after it broke).
    keeper: Option<Keeper>,
}

impl LeaseInfo {
    /// This lease moved out of `self` (for the pool), which keeps the figures but no stream.
    fn detach(&mut self) -> LeaseInfo {
        LeaseInfo { keeper: self.keeper.take(), ..*self }
    }

    /// The instant until which the lease surely lives (this instance's monotonic clock).
    fn alive_until(&self) -> Instant {
        let ttl = Duration::from_secs(self.ttl.unsigned_abs());
        self.refreshed.checked_add(ttl).unwrap_or(self.refreshed)
    }
}

struct Inner {
    client: Client,
    prefix: Vec<u8>,
    locked_by: String,
    timeout: Option<Duration>,
    reuse: bool,
    /// Unused leases by requested TTL (reuse mode).
    pool: Mutex<HashMap<i64, Vec<LeaseInfo>>>,
    /// Reports held locks lost when their keys go (`None`: turned off).
    loss: Option<watch::LossWatch>,
}

/// Locks in etcd. Cheap to clone; clones share the client and the kept leases.
#[derive(Clone)]
pub struct EtcdLockProvider {
    inner: Arc<Inner>,
}

impl fmt::Debug for EtcdLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client (which may carry a user and password) is deliberately left out.
        f.debug_struct("EtcdLockProvider")
            .field("prefix", &String::from_utf8_lossy(&self.inner.prefix))
            .field("locked_by", &self.inner.locked_by)
            .field("operation_timeout", &self.inner.timeout)
            .field("reuse_leases", &self.inner.reuse)
            .field("watch_for_loss", &self.inner.loss.is_some())
            .finish_non_exhaustive()
    }
}

/// Builds an [`EtcdLockProvider`]; see [`EtcdLockProvider::builder`].
///
/// The shared setters (`operation_timeout`, `locked_by`) come from [`ProviderBuilder`], in scope
/// with `use shedlock_etcd::ProviderBuilder;`. Here `locked_by` is stored as the key's value
/// (ownership rests on the acquisition's revision); when every endpoint is down, an operation
/// waits for one to come back until its time limit.
#[must_use]
pub struct EtcdLockProviderBuilder {
    client: Client,
    prefix: String,
    settings: ProviderSettings,
    reuse: bool,
    watch_for_loss: bool,
}

impl fmt::Debug for EtcdLockProviderBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLockProviderBuilder")
            .field("prefix", &self.prefix)
            .field("settings", &self.settings)
            .field("reuse_leases", &self.reuse)
            .field("watch_for_loss", &self.watch_for_loss)
            .finish_non_exhaustive()
    }
}

impl ProviderBuilder for EtcdLockProviderBuilder {
    fn settings_mut(&mut self) -> &mut ProviderSettings {
        &mut self.settings
    }
}

impl EtcdLockProviderBuilder {
    /// The key prefix (default [`DEFAULT_PREFIX`], `shedlock/`). Not empty, at most
    /// [`MAX_PREFIX_LEN`] bytes, no control characters; a `/` is added when it does not end with
    /// one (`billing` is `billing/`). Lock `N` is the key `<prefix>/<N>`, with `%` and `/` in `N`
    /// written `%25` and `%2F`: the last `/` of a key ends the prefix, so two prefixes never
    /// share a key (`app` + `2x` is `app/2x`, `app2` + `x` is `app2/x`). Give every application
    /// (or environment) sharing a cluster its own prefix, and grant its etcd role exactly that
    /// prefix (README, "Permissions").
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Whether to keep the leases of released locks (and of attempts that found the name held)
    /// for the next acquire with the same TTL (default `true`). A kept lease makes an acquire one
    /// round trip instead of two: the transaction goes out together with a keep-alive of the
    /// lease, which restarts its full TTL. The cost: each instance keeps up to 8 idle leases per
    /// distinct TTL on the server until they expire unused (after one TTL), and the leases are
    /// renewed (never a raft write) on each reuse. With `false`, every acquire grants a new lease
    /// and every unlock revokes it.
    pub fn reuse_leases(mut self, reuse: bool) -> Self {
        self.reuse = reuse;
        self
    }

    /// Whether held locks are watched (default `true`): the moment etcd deletes a held lock's key
    /// (an operator revoked its lease or deleted the key, or the lease expired while this
    /// process was stalled), the lock's lost signal fires ([`shedlock::Lock::lost_signal`]; the
    /// executor and [`shedlock::KeepAliveProvider`] report it), instead of at the next extend or
    /// at the lock's own deadline. The cost: one watch stream per provider, open while it is in
    /// use, and one watch created and cancelled on it per lock held longer than 200 ms, off the
    /// call's path (a loss in those first 200 ms is reported when the watch starts: etcd replays
    /// every event since the acquiring put). With
    /// `false` a revoked lease is noticed at the next extend (`LockLost`) or the deadline.
    pub fn watch_for_loss(mut self, watch: bool) -> Self {
        self.watch_for_loss = watch;
        self
    }

    /// Checks the settings and builds the provider. Does no I/O: an unreachable cluster shows at
    /// the first lock call ([`Error::Unavailable`] or [`Error::Timeout`]).
    pub fn build(self) -> Result<EtcdLockProvider> {
        let prefix = keys::normalize_prefix(&self.prefix)?;
        let settings = self.settings.validate(BACKEND)?;
        let loss = self.watch_for_loss.then(|| watch::LossWatch::new(self.client.clone()));
        Ok(EtcdLockProvider {
            inner: Arc::new(Inner {
                loss,
                client: self.client,
                prefix: prefix.into_bytes(),
                locked_by: settings.locked_by().to_owned(),
                timeout: settings.timeout(),
                reuse: self.reuse,
                pool: Mutex::new(HashMap::new()),
            }),
        })
    }
}

impl Inner {
    /// What `what` on `key` is, for the message of a refusal.
    fn on<'a>(&'a self, what: &'static str, key: &'a [u8], permission: Permission) -> Access<'a> {
        Access { what, from: key, to: None, permission, prefix: &self.prefix }
    }

    async fn txn(&self, txn: Txn, on: Access<'_>) -> std::result::Result<TxnResponse, Failure> {
        sent(|| {
            let mut kv = self.client.kv_client();
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await
        .map_err(|f| on.map(f))
    }

    /// One linearizable read of `on`'s key (or range, with `options`).
    async fn get(
        &self,
        on: Access<'_>,
        options: Option<GetOptions>,
    ) -> std::result::Result<etcd_client::GetResponse, Failure> {
        sent(|| {
            let mut kv = self.client.kv_client();
            let (key, options) = (on.from.to_vec(), options.clone());
            async move { kv.get(key, options).await }
        })
        .await
        .map_err(|f| on.map(f))
    }

    /// Revokes lease `id`, which deletes the keys attached to it: etcd asks write permission on
    /// them (`on`); none for a lease without keys.
    async fn revoke(&self, id: i64, on: Option<Access<'_>>) -> std::result::Result<(), Failure> {
        sent(|| {
            let mut lease = self.client.lease_client();
            async move { lease.revoke(id).await.map(drop) }
        })
        .await
        .map_err(|f| match &on {
            Some(on) => on.map(f),
            None => f,
        })
    }

    /// A refusal of a lease request (etcd 3.4 asks no permission for leases).
    fn lease_refused(&self, what: &'static str, f: Failure) -> Failure {
        self.on(what, &self.prefix, Permission::Lease).map(f)
    }

    /// Renews lease `id` on its open stream in `slot`, or on a stream opened now (and then kept
    /// in `slot`). Ok once the server answered with a live TTL.
    async fn keep_alive(
        &self,
        id: i64,
        slot: &mut Option<Keeper>,
    ) -> std::result::Result<(), Failure> {
        if let Some(mut open) = slot.take() {
            // Taken out while in use: a renewal cancelled halfway leaves its answer unread on
            // the stream, so only a stream that finished its exchange goes back into the slot
            // (a dropped one is closed by `Keeper`'s `Drop`).
            match open.renew().await {
                Ok(()) => {
                    *slot = Some(open);
                    return Ok(());
                }
                Err(Failure::LeaseGone) => return Err(Failure::LeaseGone),
                // A broken stream (its endpoint went away): renew on a new one below.
                Err(f) => {
                    tracing::debug!(lease = id, failure = ?f, "etcd: keep-alive stream broke; opening another")
                }
            }
        }
        // etcd-client opens the stream, sends the request, waits for the first answer and fails
        // with "lease not found" when the lease is gone.
        let (keeper, stream) = sent(|| {
            let mut lease = self.client.lease_client();
            async move { lease.keep_alive(id).await }
        })
        .await
        .map_err(|f| self.lease_refused("a lease keep-alive", f))?;
        *slot = Some(Keeper { open: Some((keeper, stream)) });
        Ok(())
    }

    async fn grant(
        &self,
        ttl: i64,
    ) -> std::result::Result<etcd_client::LeaseGrantResponse, Failure> {
        sent(|| {
            let mut lease = self.client.lease_client();
            async move { lease.grant(ttl, None).await }
        })
        .await
        .map_err(|f| self.lease_refused("a lease grant", f))
    }
}

/// Revokes a lease when dropped (unless disarmed): an acquire that failed or was cancelled after
/// its transaction may have attached the key to the lease releases it this way.
struct RevokeOnDrop {
    inner: Arc<Inner>,
    lease: Option<i64>,
}

impl RevokeOnDrop {
    fn disarm(&mut self) {
        self.lease = None;
    }
}

impl Drop for RevokeOnDrop {
    fn drop(&mut self) {
        if let Some(id) = self.lease.take() {
            revoke_in_background(&self.inner, id);
        }
    }
}

fn revoke_in_background(inner: &Arc<Inner>, id: i64) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
    let inner = inner.clone();
    rt.spawn(async move {
        let revoke = async {
            match inner.revoke(id, None).await {
                Ok(()) | Err(Failure::LeaseGone) => Ok(()),
                Err(f) => Err(f.into_error()),
            }
        };
        if let Err(error) = with_timeout("etcd revoke", inner.timeout, revoke).await {
            tracing::debug!(lease = id, %error, "etcd: revoking an unused lease failed; it expires by itself");
        }
    });
}

/// A transaction's answer, and what the keep-alive sent beside it said (when one was sent).
struct Sent {
    txn: std::result::Result<TxnResponse, Failure>,
    /// `None`: no keep-alive was needed (a fresh lease).
    keep_alive: Option<std::result::Result<(), Failure>>,
}

/// A lease's open keep-alive stream: its request side and its answers. Kept with the lease
/// ([`LeaseInfo::keeper`]), so a renewal is one message on an open stream instead of a stream
/// opened per renewal (what made a reused lease's acquire cost more than its transaction).
struct Keeper {
    /// `None` only once closed.
    open: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
}

impl fmt::Debug for Keeper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keeper").field("open", &self.open.is_some()).finish()
    }
}

impl Keeper {
    /// One renewal: a request on the stream, and its answer. A TTL of 0 or less in the answer
    /// means the lease is gone.
    async fn renew(&mut self) -> std::result::Result<(), Failure> {
        let Some((keeper, stream)) = self.open.as_mut() else {
            return Err(Failure::Other(Error::unavailable(BACKEND, "keep-alive stream closed")));
        };
        keeper.keep_alive().await.map_err(classify)?;
        match stream.message().await.map_err(classify)? {
            Some(r) if r.ttl() > 0 => Ok(()),
            Some(_) => Err(Failure::LeaseGone),
            None => Err(Failure::Other(Error::unavailable(
                BACKEND,
                "the server ended the keep-alive stream",
            ))),
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        let Some((keeper, mut stream)) = self.open.take() else { return };
        // Close the stream gracefully, off the caller's path: end the request side, then read
        // until the server ends its side. Dropping both at once resets the stream (RST_STREAM),
        // and after a few thousand resets the HTTP/2 layer closes the connection with GOAWAY
        // "too_many_internal_resets" (measured: after ~6 000 streams), failing the calls on it.
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        rt.spawn(async move {
            drop(keeper);
            let drain = async { while let Ok(Some(_)) = stream.message().await {} };
            let _ = tokio::time::timeout(Duration::from_secs(10), drain).await;
        });
    }
}

impl EtcdLockProvider {
    /// A builder over `client`; see [`EtcdLockProviderBuilder`].
    pub fn builder(client: Client) -> EtcdLockProviderBuilder {
        EtcdLockProviderBuilder {
            client,
            prefix: DEFAULT_PREFIX.to_owned(),
            settings: ProviderSettings::new(),
            reuse: true,
            watch_for_loss: true,
        }
    }

    /// The key that holds lock `name`: the prefix (which ends with `/`) followed by the name
    /// with `%` and `/` escaped (`%25`, `%2F`), so no two prefixes share a key.
    pub fn key(&self, name: &str) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.inner.prefix.len() + name.len());
        key.extend_from_slice(&self.inner.prefix);
        keys::escape(name, &mut key);
        key
    }

    /// The key prefix as keys use it: as given, with a `/` added when it did not end with one.
    pub fn key_prefix(&self) -> &str {
        // Built from a `String` (`normalize_prefix`): always UTF-8.
        std::str::from_utf8(&self.inner.prefix).unwrap_or_default()
    }

    /// The `locked_by` this provider writes.
    pub fn locked_by(&self) -> &str {
        &self.inner.locked_by
    }

    /// A clone of the client, for reading the keys (e.g. in tests or tools).
    pub fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// How many unused leases this instance keeps for reuse (for tests and metrics).
    pub fn kept_leases(&self) -> usize {
        self.pool().values().map(Vec::len).sum()
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Vec<LeaseInfo>>> {
        self.inner.pool.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A kept lease for `ttl` that surely lives long enough to attach a key to it (with its
    /// keep-alive stream, when one is open).
    fn take_kept(&self, ttl: i64) -> Option<LeaseInfo> {
        if !self.inner.reuse {
            return None;
        }
        let now = Instant::now();
        let mut pool = self.pool();
        let list = pool.get_mut(&ttl)?;
        // Leases too close to their expiry are forgotten: the server revokes them itself.
        list.retain(|l| l.alive_until() > now + REUSE_MARGIN);
        list.pop()
    }

    /// Keeps `lease` (which no key is attached to) for a later acquire, or revokes it.
    fn keep(&self, lease: LeaseInfo) {
        if self.inner.reuse {
            let mut pool = self.pool();
            let list = pool.entry(lease.requested).or_default();
            if list.len() < POOL_PER_TTL {
                list.push(lease);
                return;
            }
        }
        revoke_in_background(&self.inner, lease.id);
    }

    async fn grant(&self, ttl: i64) -> Result<LeaseInfo> {
        let refreshed = Instant::now();
        let r = self.inner.grant(ttl).await.map_err(Failure::into_error)?;
        if !r.error().is_empty() {
            return Err(Error::backend(BACKEND, format!("lease grant: {}", r.error())));
        }
        if r.ttl() < ttl {
            // Never expected: a lease shorter than asked would end locks early.
            return Err(Error::backend(
                BACKEND,
                format!("lease grant: asked for {ttl} s, the server granted {} s", r.ttl()),
            ));
        }
        Ok(LeaseInfo { id: r.id(), requested: ttl, ttl: r.ttl(), refreshed, keeper: None })
    }

    /// A lease for `ttl`: a kept one (`true`: it needs a keep-alive beside its transaction) or a
    /// fresh grant.
    async fn lease(&self, ttl: i64) -> Result<(LeaseInfo, bool)> {
        match self.take_kept(ttl) {
            Some(l) => Ok((l, true)),
            None => Ok((self.grant(ttl).await?, false)),
        }
    }

    /// Sends `txn`, and beside it a keep-alive of `lease` when `refresh` (a reused lease). A
    /// successful keep-alive moves `lease.refreshed` to when it was sent.
    async fn send(&self, txn: Txn, on: Access<'_>, lease: &mut LeaseInfo, refresh: bool) -> Sent {
        if !refresh {
            return Sent { txn: self.inner.txn(txn, on).await, keep_alive: None };
        }
        let sent = Instant::now();
        let id = lease.id;
        let (t, k) =
            tokio::join!(self.inner.txn(txn, on), self.inner.keep_alive(id, &mut lease.keeper));
        if k.is_ok() {
            lease.refreshed = sent;
        }
        Sent { txn: t, keep_alive: Some(k) }
    }

    /// The acquire: `Some((lease, revision))` when this caller now holds the key.
    async fn acquire(&self, key: &[u8], ttl: i64) -> Result<Option<(LeaseInfo, i64)>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (mut lease, reused) = self.lease(ttl).await?;
            // Until the answer is known, the key may be attached to this lease: a failure or a
            // cancellation revokes it, which releases the key if it was taken.
            let mut guard = RevokeOnDrop { inner: self.inner.clone(), lease: Some(lease.id) };
            let txn = Txn::new().when([Compare::version(key, CompareOp::Equal, 0)]).and_then([
                TxnOp::put(
                    key,
                    self.inner.locked_by.as_bytes(),
                    Some(PutOptions::new().with_lease(lease.id)),
                ),
            ]);
            let on = self.inner.on("the acquire transaction", key, Permission::ReadWrite);
            let sent = self.send(txn, on, &mut lease, reused).await;
            let resp = match sent.txn {
                Ok(resp) => resp,
                // The kept lease expired before the transaction reached the server (a paused
                // process, a slow link): nothing was written; try once more on a fresh lease.
                Err(Failure::LeaseGone) if reused && attempt < 2 => {
                    guard.disarm();
                    continue;
                }
                Err(Failure::LeaseGone) => {
                    guard.disarm();
                    return Err(Error::unavailable(
                        BACKEND,
                        "the lease granted for this acquire expired before the transaction arrived",
                    ));
                }
                Err(f) => return Err(f.into_error()),
            };
            if !resp.succeeded() {
                // Held elsewhere; nothing was written. The lease stays unused: kept if it was
                // renewed (or fresh), else forgotten.
                guard.disarm();
                match sent.keep_alive {
                    None | Some(Ok(())) => self.keep(lease),
                    Some(Err(Failure::LeaseGone)) => {}
                    Some(Err(_)) => revoke_in_background(&self.inner, lease.id),
                }
                return Ok(None);
            }
            match sent.keep_alive {
                None | Some(Ok(())) => {}
                // The lease expired around the transaction: if the put went through, the key
                // went with the lease. Nothing is held; try once more on a fresh lease.
                Some(Err(Failure::LeaseGone)) if attempt < 2 => {
                    guard.disarm();
                    continue;
                }
                Some(Err(Failure::LeaseGone)) => {
                    guard.disarm();
                    return Err(Error::unavailable(
                        BACKEND,
                        "the lease expired while the acquire was in flight",
                    ));
                }
                // Whether the lease was renewed is unknown, so the key may live shorter than
                // lock_at_most_for: the guard revokes the lease (and the key with it).
                Some(Err(f)) => return Err(f.into_error()),
            }
            guard.disarm();
            let revision = resp.header().map_or(0, |h| h.revision());
            if revision <= 0 {
                revoke_in_background(&self.inner, lease.id);
                return Err(Error::backend(BACKEND, "a transaction answer without a revision"));
            }
            return Ok(Some((lease, revision)));
        }
    }
}

#[async_trait]
impl LockProvider for EtcdLockProvider {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        check_lock_name(BACKEND, config.name(), Some(MAX_NAME_LEN), false)?;
        let key = self.key(config.name());
        let ttl = ttl_secs(config.lock_at_most_for());
        let acquisition = Acquisition::begin_declared(config, &self.capabilities());
        let acquired = Operation::TryLock
            .run(BACKEND, config.name(), self.inner.timeout, self.acquire(&key, ttl))
            .await?;
        let Some((lease, revision)) = acquired else {
            tracing::trace!(lock = %config.name(), "etcd: held elsewhere");
            return Ok(None);
        };
        tracing::debug!(lock = %config.name(), revision, lease = lease.id, "etcd: acquired");
        let watching = self.inner.loss.as_ref().and_then(watch::LossWatch::reserve);
        let start = watching.as_ref().map(|w| (w.starter(), key.clone()));
        let handle = EtcdHandle {
            provider: self.clone(),
            key,
            revision,
            lease,
            held_since: Instant::now(),
            _watching: watching,
        };
        let lock = acquisition.grant(handle).await?;
        if let Some((w, key)) = start {
            w.start(key, revision, lock.lease().clone());
        }
        Ok(Some(lock))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(true)
            .with_server_time(true)
            .with_owner_checked(true)
            .with_granularity(Duration::from_secs(1))
            .with_max_name_len(Some(MAX_NAME_LEN))
            .with_check(true)
            .with_inspect(true)
            .with_list(true)
            .with_force_release(true)
    }

    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    /// One transaction on the key prefix itself (a key no lock has) that proves the locking
    /// permission and writes nothing: `version(<prefix>) < 0 → put(<prefix>)`. No key's version
    /// is below 0, so the put never runs, but etcd checks the permissions of every request in a
    /// transaction before it runs: a user without read and write permission on the prefix gets
    /// `Error::Setup` here, as its first `try_lock` would. Goes through raft (a transaction with
    /// a put in it is no read), answered by a quorum.
    async fn check(&self) -> Result<()> {
        let key = self.key("");
        let probe = async {
            let txn = Txn::new()
                .when([Compare::version(key.clone(), CompareOp::Less, 0)])
                .and_then([TxnOp::put(key.clone(), "", None)]);
            let on = self.inner.on("check()'s transaction", &key, Permission::ReadWrite);
            self.inner.txn(txn, on).await.map(drop).map_err(Failure::into_error)
        };
        Operation::Check.run(BACKEND, "", self.inner.timeout, probe).await
    }

    /// One linearizable read of the lock's key. A key exists only while its lease lives (the
    /// leader deletes it when the lease expires), so a key found is held, by the server's
    /// judgement; the acquisition is its `create_revision`.
    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>> {
        check_lock_name(BACKEND, name, Some(MAX_NAME_LEN), false)?;
        let key = self.key(name);
        let read = async {
            let on = self.inner.on("inspect()'s read", &key, Permission::Read);
            let mut resp = self.inner.get(on, None).await.map_err(Failure::into_error)?;
            resp.take_kvs().first().map(|kv| record(name, kv)).transpose()
        };
        Operation::Inspect.run(BACKEND, name, self.inner.timeout, read).await
    }

    /// Linearizable range reads of the keys `<key prefix><escaped prefix>…` after the cursor's
    /// key, in key order, at most `limit`; the cursor is the last name of the page. One read,
    /// plus one for each longer key prefix (another application's, `<key prefix>sub/`) met under
    /// this one, whose keys are skipped as a whole.
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<LockPage> {
        if !prefix.is_empty() {
            check_lock_name(BACKEND, prefix, Some(MAX_NAME_LEN), false)?;
        }
        let limit = page_limit(limit);
        let from = self.key(prefix);
        let end = keys::prefix_end(&from);
        // After the cursor's key: the smallest key greater than it is the key with a 0 byte
        // appended.
        let mut start = match cursor {
            Some(after) => {
                let mut k = self.key(after);
                k.push(0);
                k.max(from.clone())
            }
            None => from.clone(),
        };
        let read = async {
            let mut records = Vec::with_capacity(limit);
            loop {
                if end != [0] && start >= end {
                    return Ok(LockPage::new(records, None));
                }
                let on = Access {
                    what: "list()'s range read",
                    from: &start,
                    to: Some(&end),
                    permission: Permission::Read,
                    prefix: &self.inner.prefix,
                };
                let want = i64::try_from(limit - records.len()).unwrap_or(i64::MAX);
                let options = GetOptions::new().with_range(end.clone()).with_limit(want);
                let mut resp =
                    self.inner.get(on, Some(options)).await.map_err(Failure::into_error)?;
                let more = resp.more();
                let kvs = resp.take_kvs();
                let mut next = None;
                for (i, kv) in kvs.iter().enumerate() {
                    if kv.key() < next.as_deref().unwrap_or_default() {
                        continue;
                    }
                    match keys::parse(&self.inner.prefix, kv.key())? {
                        keys::Found::Nested(after) => next = Some(after),
                        keys::Found::Lock(name) => {
                            records.push(record(&name, kv)?);
                            if records.len() == limit {
                                let rest = more || i + 1 < kvs.len();
                                return Ok(LockPage::new(records, rest.then_some(name)));
                            }
                        }
                    }
                }
                if !more {
                    return Ok(LockPage::new(records, None));
                }
                // The page was cut short by the skipped keys: read on after them.
                let last = kvs.last().map(|kv| {
                    let mut k = kv.key().to_vec();
                    k.push(0);
                    k
                });
                start = match (next, last) {
                    (Some(n), Some(l)) => n.max(l),
                    (n, l) => n.or(l).unwrap_or_else(|| end.clone()),
                };
            }
        };
        Operation::List.run(BACKEND, prefix, self.inner.timeout, read).await
    }

    /// One transaction: `create_revision(key) = seen → delete(key)` (answering the deleted key),
    /// else a read of the key as it is now. The old holder's lease lives on without its key:
    /// its extend then finds the key gone or another acquisition's (`LockLost`), and its
    /// owner-checked unlock changes nothing.
    async fn force_release(&self, seen: &LockInfo) -> Result<ForceRelease> {
        let name = seen.name.as_str();
        check_lock_name(BACKEND, name, Some(MAX_NAME_LEN), false)?;
        let key = self.key(name);
        // An acquisition that is not a revision was never this provider's: it matches no key
        // (create_revision is 0 for a missing key, positive otherwise).
        let revision = seen.acquisition.parse::<i64>().unwrap_or(-1);
        let release = async {
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, revision)])
                .and_then([TxnOp::delete(key.clone(), Some(DeleteOptions::new().with_prev_key()))])
                .or_else([TxnOp::get(key.clone(), None)]);
            let resp = self
                .inner
                .txn(
                    txn,
                    self.inner.on("force_release()'s transaction", &key, Permission::ReadWrite),
                )
                .await
                .map_err(Failure::into_error)?;
            let answer = resp.op_responses().into_iter().next();
            if resp.succeeded() {
                let Some(TxnOpResponse::Delete(d)) = answer else {
                    return Err(Error::backend(
                        BACKEND,
                        "a release transaction without its delete",
                    ));
                };
                let Some(kv) = d.prev_kvs().first() else {
                    return Err(Error::backend(BACKEND, "a delete without the deleted key"));
                };
                return Ok(ForceRelease::Released(record(name, kv)?));
            }
            let Some(TxnOpResponse::Get(g)) = answer else {
                return Err(Error::backend(BACKEND, "a release transaction without its read"));
            };
            g.kvs().first().map(|kv| record(name, kv)).transpose().map(ForceRelease::Changed)
        };
        let released =
            Operation::ForceRelease.run(BACKEND, name, self.inner.timeout, release).await?;
        log_forced_release(BACKEND, seen, &released);
        Ok(released)
    }
}

/// The record of lock `name` held in `kv`: held (a key lives only while its lease does), the
/// acquisition and fencing token its `create_revision`, `locked_by` its value. etcd keeps the
/// lease as a relative TTL, so no `locked_at` or `lock_until` is reported.
fn record(name: &str, kv: &KeyValue) -> Result<LockInfo> {
    let revision = kv.create_revision();
    if revision <= 0 {
        return Err(Error::backend(
            BACKEND,
            format!("the key of lock {name:?} has no create_revision ({revision})"),
        ));
    }
    let locked_by = std::str::from_utf8(kv.value()).map_err(|_| {
        Error::backend(BACKEND, format!("the value of lock {name:?}'s key is not UTF-8"))
    })?;
    Ok(LockInfo::new(name, revision.to_string(), true, TimeSource::Server)
        .with_locked_by(locked_by)
        .with_fencing_token(u64::try_from(revision).ok()))
}

/// The holder's side of one acquisition.
struct EtcdHandle {
    provider: EtcdLockProvider,
    key: Vec<u8>,
    /// The acquiring put's revision: the key's `create_revision` while this holder owns it, and
    /// the fencing token.
    revision: i64,
    /// The lease the key is attached to.
    lease: LeaseInfo,
    /// When the answer of the acquire (or of the last extension) arrived: `lock_at_least_for`
    /// counts from here, so the key is held at least that long.
    held_since: Instant,
    /// This lock's loss watch, cancelled when the handle goes.
    _watching: Option<watch::Watching>,
}

impl EtcdHandle {
    /// Compares: the key is still this acquisition's, on this holder's lease.
    fn owned(&self) -> [Compare; 2] {
        [
            Compare::create_revision(self.key.clone(), CompareOp::Equal, self.revision),
            Compare::lease(self.key.clone(), CompareOp::Equal, self.lease.id),
        ]
    }

    async fn release(&mut self, config: &LockConfig) -> Result<()> {
        let p = &self.provider;
        let until = self.held_since.checked_add(config.lock_at_least_for());
        let keep_for =
            until.map_or(Duration::ZERO, |u| u.saturating_duration_since(Instant::now()));
        if keep_for.is_zero() {
            if !p.inner.reuse {
                // Revoking the lease deletes the key with it: owner-checked, since only this
                // acquisition's key is attached to this lease.
                return match p
                    .inner
                    .revoke(
                        self.lease.id,
                        Some(p.inner.on("unlock's lease revoke", &self.key, Permission::ReadWrite)),
                    )
                    .await
                {
                    Ok(()) | Err(Failure::LeaseGone) => Ok(()),
                    Err(f) => Err(f.into_error()),
                };
            }
            let txn =
                Txn::new().when(self.owned()).and_then([TxnOp::delete(self.key.clone(), None)]);
            let r = p
                .inner
                .txn(txn, p.inner.on("unlock's transaction", &self.key, Permission::ReadWrite))
                .await
                .map_err(Failure::into_error)?;
            if !r.succeeded() {
                tracing::debug!(lock = %config.name(), "etcd unlock: no longer the holder; nothing changed");
            }
            // No key is attached to the lease any more (or it expired): keep it for reuse.
            p.keep(self.lease.detach());
            return Ok(());
        }
        // Within lock_at_least_for: the key moves to a fresh lease of the remaining time.
        let ttl = ttl_secs(keep_for);
        let short = p.grant(ttl).await?;
        let txn = Txn::new().when(self.owned()).and_then([TxnOp::put(
            self.key.clone(),
            p.inner.locked_by.as_bytes(),
            Some(PutOptions::new().with_lease(short.id)),
        )]);
        match p
            .inner
            .txn(txn, p.inner.on("unlock's transaction", &self.key, Permission::ReadWrite))
            .await
        {
            Ok(r) if r.succeeded() => {
                p.keep(self.lease.detach());
                Ok(())
            }
            Ok(_) => {
                tracing::debug!(lock = %config.name(), "etcd unlock: no longer the holder; nothing changed");
                revoke_in_background(&p.inner, short.id);
                Ok(())
            }
            // The key may be on the short lease or still on the lock's: both expire by themselves.
            Err(f) => Err(f.into_error()),
        }
    }

    async fn prolong(&mut self, config: &LockConfig) -> Result<()> {
        let p = self.provider.clone();
        let lost = || Error::LockLost { name: config.name().to_owned() };
        let ttl = ttl_secs(config.lock_at_most_for());
        if ttl == self.lease.requested {
            // Same TTL: renew the lock's lease, and check beside it that the key is still this
            // acquisition's on this lease (a read-only transaction). A renewed lease whose key is
            // gone (an operator deleted it) is no lock.
            let txn = Txn::new().when(self.owned());
            let sent = p
                .send(
                    txn,
                    p.inner.on("extend's owner check", &self.key, Permission::Read),
                    &mut self.lease,
                    true,
                )
                .await;
            match sent.keep_alive {
                Some(Err(Failure::LeaseGone)) => return Err(lost()),
                Some(Err(f)) => return Err(f.into_error()),
                _ => {}
            }
            match sent.txn {
                Ok(r) if r.succeeded() => {}
                Ok(_) | Err(Failure::LeaseGone) => return Err(lost()),
                Err(f) => return Err(f.into_error()),
            }
            self.held_since = Instant::now();
            return Ok(());
        }
        // Another TTL: move the key to a fresh lease of the new TTL (owner-checked).
        let fresh = p.grant(ttl).await?;
        let txn = Txn::new().when(self.owned()).and_then([TxnOp::put(
            self.key.clone(),
            p.inner.locked_by.as_bytes(),
            Some(PutOptions::new().with_lease(fresh.id)),
        )]);
        match p
            .inner
            .txn(txn, p.inner.on("extend's transaction", &self.key, Permission::ReadWrite))
            .await
        {
            Ok(r) if r.succeeded() => {
                p.keep(std::mem::replace(&mut self.lease, fresh));
                self.held_since = Instant::now();
                Ok(())
            }
            Ok(_) => {
                revoke_in_background(&p.inner, fresh.id);
                Err(lost())
            }
            Err(Failure::LeaseGone) => Err(lost()),
            Err(f) => Err(f.into_error()),
        }
    }
}

#[async_trait]
impl LockHandle for EtcdHandle {
    async fn unlock(&mut self, config: &LockConfig) -> Result<()> {
        let timeout = self.provider.inner.timeout;
        Operation::Unlock.run(BACKEND, config.name(), timeout, self.release(config)).await
    }

    async fn extend(&mut self, config: &LockConfig) -> Result<()> {
        let timeout = self.provider.inner.timeout;
        Operation::Extend.run(BACKEND, config.name(), timeout, self.prolong(config)).await
    }

    fn fencing_token(&self) -> Option<u64> {
        u64::try_from(self.revision).ok()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn ttls_round_up_to_whole_seconds_within_etcds_range() {
        assert_eq!(ttl_secs(Duration::from_millis(1)), 1);
        assert_eq!(ttl_secs(Duration::from_millis(1000)), 1);
        assert_eq!(ttl_secs(Duration::from_millis(1001)), 2);
        assert_eq!(ttl_secs(Duration::from_secs(600)), 600);
        assert_eq!(ttl_secs(Duration::MAX), MAX_TTL);
    }
}

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

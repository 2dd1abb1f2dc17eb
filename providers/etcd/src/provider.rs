//! The provider: [`EtcdLockProvider`], its state, its [`LockProvider`] implementation and its
//! accessors, and the key-value requests every operation sends.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp, TxnResponse};
use shedlock::{
    Acquisition, Capabilities, ForceRelease, Lock, LockConfig, LockInfo, LockPage, LockProvider,
    Result, store::Operation, support::check_lock_name,
};
use tokio::time::Instant;

use crate::{
    BACKEND, MAX_NAME_LEN,
    error::{Access, Failure, Permission, sent},
    handle::EtcdHandle,
    keys,
    lease::{LeaseInfo, ttl_secs},
    watch,
};

pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) prefix: Vec<u8>,
    pub(crate) locked_by: String,
    pub(crate) timeout: Option<Duration>,
    pub(crate) reuse: bool,
    /// Unused leases by requested TTL (reuse mode).
    pub(crate) pool: Mutex<HashMap<i64, Vec<LeaseInfo>>>,
    /// Reports held locks lost when their keys go (`None`: turned off).
    pub(crate) loss: Option<watch::LossWatch>,
}

/// Locks in etcd. Cheap to clone; clones share the client and the kept leases.
#[derive(Clone)]
pub struct EtcdLockProvider {
    pub(crate) inner: Arc<Inner>,
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

impl Inner {
    /// What `what` on `key` is, for the message of a refusal.
    pub(crate) fn on<'a>(
        &'a self,
        what: &'static str,
        key: &'a [u8],
        permission: Permission,
    ) -> Access<'a> {
        Access { what, from: key, to: None, permission, prefix: &self.prefix }
    }

    pub(crate) async fn txn(
        &self,
        txn: Txn,
        on: Access<'_>,
    ) -> std::result::Result<TxnResponse, Failure> {
        sent(|| {
            let mut kv = self.client.kv_client();
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await
        .map_err(|f| on.map(f))
    }

    /// One linearizable read of `on`'s key (or range, with `options`).
    pub(crate) async fn get(
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
}

impl EtcdLockProvider {
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

    /// Each name's `try_lock`, pipelined: up to
    /// [`PIPELINED_REQUESTS`](shedlock::batch::PIPELINED_REQUESTS) in flight at once on
    /// the client's one HTTP/2 channel ([`try_lock_pipelined`](shedlock::batch::try_lock_pipelined)).
    async fn try_lock_many(
        &self,
        configs: &[LockConfig],
        options: shedlock::BatchOptions,
    ) -> Result<shedlock::BatchOutcome> {
        shedlock::batch::try_lock_pipelined(self, configs, options).await
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
        self.inspect_record(name).await
    }

    /// Linearizable range reads of the keys `<key prefix><escaped prefix>…` after the cursor's
    /// key, in key order, at most `limit`; the cursor is the last name of the page. One read,
    /// plus one for each longer key prefix (another application's, `<key prefix>sub/`) met under
    /// this one, whose keys are skipped as a whole.
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<LockPage> {
        self.list_records(prefix, cursor, limit).await
    }

    /// One transaction: `create_revision(key) = seen → delete(key)` (answering the deleted key),
    /// else a read of the key as it is now. The old holder's lease lives on without its key:
    /// its extend then finds the key gone or another acquisition's (`LockLost`), and its
    /// owner-checked unlock changes nothing.
    async fn force_release(&self, seen: &LockInfo) -> Result<ForceRelease> {
        self.release_if_seen(seen).await
    }
}

//! The provider: [`ZooKeeperLockProvider`], its [`LockProvider`] implementation and its
//! accessors.

use std::{fmt, sync::Arc, time::Duration};

use shedlock::{
    Capabilities, ForceRelease, Lock, LockConfig, LockInfo, LockPage, LockProvider, Result,
    inspect::page_limit,
    store::{Operation, log_forced_release},
    support::{check_lock_name, with_timeout},
};

use crate::{BACKEND, MAX_NAME_LEN, NodeAcl, auth::Op, session::Inner};

#[cfg(doc)]
use shedlock::Error;

#[cfg(doc)]
use crate::ZooKeeperLockProviderBuilder;

/// A [`LockProvider`] on ZooKeeper ephemeral nodes. Cheap to clone; clones share one ZooKeeper
/// session.
#[derive(Clone)]
pub struct ZooKeeperLockProvider {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for ZooKeeperLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZooKeeperLockProvider")
            .field("root", &self.inner.root)
            .field("session_timeout", &self.inner.session_timeout)
            .field("operation_timeout", &self.inner.timeout)
            .field("locked_by", &self.inner.locked_by)
            .field("identity", &self.inner.identity)
            .field("node_acl", &self.inner.node_acl)
            .field("tls", &self.inner.tls)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl LockProvider for ZooKeeperLockProvider {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        self.inner.try_lock(config).await
    }

    /// Each name's `try_lock`, pipelined: up to
    /// [`PIPELINED_REQUESTS`](shedlock::batch::PIPELINED_REQUESTS) in flight at once on
    /// the session's one connection ([`try_lock_pipelined`](shedlock::batch::try_lock_pipelined)).
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
            // The leader stamps mtime in whole milliseconds.
            .with_granularity(Duration::from_millis(1))
            .with_max_name_len(Some(MAX_NAME_LEN))
            .with_check(true)
            .with_inspect(true)
            .with_list(true)
            .with_force_release(true)
    }

    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    /// Opens the session if there is none (or says it is reconnecting; credentials the server
    /// rejects are [`Error::Setup`]), then reads the clock node: the ensemble answers, and an
    /// identity the tree's ACL does not let read it is [`Error::Setup`] naming the missing
    /// right. A missing root or clock node is fine: the first lock creates them.
    async fn check(&self) -> Result<()> {
        let inner = &self.inner;
        let read = async {
            let client = inner.client().await?;
            match client.get_data(&inner.clock_path).await {
                Ok(_) | Err(zookeeper_client::Error::NoNode) => Ok(()),
                Err(e) => Err(inner.refused(Op::Read(&inner.clock_path), e)),
            }
        };
        Operation::Check.run(BACKEND, "", inner.timeout, read).await
    }

    /// The lock node, read together with a write of the clock node (its new `mtime` is the
    /// leader's now, which judges whether the lock is held), pipelined: one round trip. The
    /// acquisition is the lock node's `czxid`.
    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>> {
        check_lock_name(BACKEND, name, Some(MAX_NAME_LEN), false)?;
        let inner = &self.inner;
        Operation::Inspect.run(BACKEND, name, inner.timeout, inner.inspect(name)).await
    }

    /// `getChildren` of the root (ZooKeeper answers with all the children at once), filtered
    /// by the prefix as a value on the decoded names and sorted here; then the lock nodes of the
    /// page, each batch read together with a clock write. The cursor is the last name of the
    /// page.
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<LockPage> {
        if !prefix.is_empty() {
            check_lock_name(BACKEND, prefix, Some(MAX_NAME_LEN), false)?;
        }
        let inner = &self.inner;
        let list = inner.list(prefix, cursor, page_limit(limit));
        Operation::List.run(BACKEND, prefix, inner.timeout, list).await
    }

    /// A read of the name and lock nodes, then, if the lock node is still the acquisition seen,
    /// a transaction that checks the name node's version and deletes the lock node. The holder
    /// that lost it fails its next extend (`LockLost`); its unlock changes nothing.
    async fn force_release(&self, seen: &LockInfo) -> Result<ForceRelease> {
        let name = seen.name.as_str();
        check_lock_name(BACKEND, name, Some(MAX_NAME_LEN), false)?;
        let inner = &self.inner;
        let released = Operation::ForceRelease
            .run(BACKEND, name, inner.timeout, inner.force_release(seen))
            .await?;
        log_forced_release(BACKEND, seen, &released);
        Ok(released)
    }
}

impl ZooKeeperLockProvider {
    /// The root path.
    pub fn root(&self) -> &str {
        &self.inner.root
    }

    /// The ACL the provider creates nodes with: the builder's
    /// [`node_acl`](ZooKeeperLockProviderBuilder::node_acl), or the default it chose
    /// ([`NodeAcl::CreatorAll`] when authenticated, [`NodeAcl::Open`] when not).
    pub fn node_acl(&self) -> &NodeAcl {
        &self.inner.node_acl
    }

    /// The name node of a lock name: `<root>/<key_for(name)>`.
    pub fn name_path(&self, name: &str) -> String {
        self.inner.paths(name).name
    }

    /// The ephemeral lock node of a lock name: `<root>/<key_for(name)>/lock`.
    pub fn lock_path(&self, name: &str) -> String {
        self.inner.paths(name).lock
    }

    /// Opens the session now (instead of on the first lock call) and creates the root and the
    /// clock node if missing. Bounded by the operation timeout.
    pub async fn connect(&self) -> Result<()> {
        let inner = &self.inner;
        with_timeout(Operation::Connect, inner.timeout, async {
            let client = inner.client().await?;
            inner.ensure_node(&client, &inner.clock_path).await
        })
        .await
    }

    /// The id of the current session, if one is open.
    pub async fn session_id(&self) -> Option<i64> {
        self.inner.client.lock().await.as_ref().map(|c| c.session_id().0)
    }
}

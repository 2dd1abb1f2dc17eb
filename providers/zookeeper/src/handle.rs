//! A held lock's handle: owner-checked unlock and extend, on the session it was acquired with.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use shedlock::{Error, LockConfig, LockHandle, Result, store::Operation, support::with_timeout};
use tokio::{sync::oneshot, time::Instant};
use zookeeper_client::{Client, MultiWriteError, SessionState, Stat};

use crate::{
    BACKEND,
    auth::Op,
    keys::Paths,
    record::{encode, hold_ms},
    session::Inner,
};

#[cfg(doc)]
use crate::watch::watch_session;

/// One held lock: the name node's version its acquisition set (owner check) and the acquiring
/// zxid (fencing token).
pub(crate) struct ZkHandle {
    /// Dropped with the handle: stops the session watcher (see [`watch_session`]).
    pub(crate) _stop_watch: oneshot::Sender<()>,
    /// Set by the watcher once the session is surely gone (and the ephemeral lock node with it):
    /// unlock is then a no-op and extend reports the loss, even while still disconnected.
    pub(crate) session_gone: Arc<AtomicBool>,
    pub(crate) inner: Arc<Inner>,
    pub(crate) client: Client,
    pub(crate) paths: Paths,
    pub(crate) name_version: i32,
    pub(crate) token: i64,
    /// The lock node's mtime (the leader's time of its last write) and hold: the server deems
    /// it expired from `mtime + hold_ms`.
    pub(crate) mtime: i64,
    pub(crate) hold_ms: i64,
    /// When the answer of the acquire (or last extension) arrived: `lock_at_least_for` counts
    /// from here, which keeps the lock at least as long as asked.
    pub(crate) since: Instant,
}

impl ZkHandle {
    /// Whether this handle's session can still send: `Err` when disconnected (retryable), and
    /// `Ok(false)` when the session ended (its ephemeral lock node is gone with it).
    fn session_alive(&self) -> Result<bool> {
        if self.session_gone.load(Ordering::Acquire) {
            // The watcher saw the session end, or a whole session timeout of disconnection.
            return Ok(false);
        }
        match self.client.state() {
            SessionState::SyncConnected | SessionState::ConnectedReadOnly => Ok(true),
            SessionState::Disconnected => Err(Error::unavailable(
                BACKEND,
                "disconnected from ZooKeeper (the client is reconnecting)",
            )),
            _ => Ok(false),
        }
    }

    /// An owner-checked transaction: the name node still has this acquisition's version (no
    /// acquisition since ours, so the lock node, if any, is ours), then a write or delete of the
    /// lock node at any version. The lock node's own version is deliberately not checked: an
    /// extension whose future was dropped after it was sent may have changed it, and the
    /// release must still work. `Ok(None)`: not ours any more.
    async fn checked(&self, data: Option<&[u8]>) -> Result<Option<Option<Stat>>> {
        let inner = &self.inner;
        let mut w = self.client.new_multi_writer();
        let built = (|| {
            w.add_check_version(&self.paths.name, self.name_version)?;
            match data {
                Some(d) => w.add_set_data(&self.paths.lock, d, None),
                None => w.add_delete(&self.paths.lock, None),
            }
        })();
        built.map_err(|e| inner.map(e))?;
        use zookeeper_client::Error as Z;
        match w.commit().await {
            Ok(results) => Ok(Some(match results.into_iter().nth(1) {
                Some(zookeeper_client::MultiWriteResult::SetData { stat }) => Some(stat),
                _ => None,
            })),
            Err(MultiWriteError::OperationFailed { source: Z::NoNode | Z::BadVersion, .. }) => {
                Ok(None)
            }
            Err(
                MultiWriteError::RequestFailed { source: Z::SessionExpired }
                | MultiWriteError::OperationFailed { source: Z::SessionExpired, .. },
            ) => Ok(None),
            Err(e) => {
                let write = match data {
                    Some(_) => Op::SetData(&self.paths.lock),
                    None => Op::Delete(&self.paths.lock),
                };
                Err(inner.refused_multi(&[Op::Check(&self.paths.name), write], e))
            }
        }
    }
}

#[async_trait::async_trait]
impl LockHandle for ZkHandle {
    async fn unlock(&mut self, config: &LockConfig) -> Result<()> {
        if !self.session_alive()? {
            // The session ended: its ephemeral node went with it.
            return Ok(());
        }
        let timeout = self.inner.timeout;
        let unlock = async {
            let rest = config
                .lock_at_least_for()
                .checked_sub(self.since.elapsed())
                .filter(|d| !d.is_zero());
            let data = rest.map(|hold| encode(hold, &self.inner.locked_by));
            // Within lock_at_least_for: the node stays, holding the rest of it (from the
            // leader's now); after it: the node goes. A stale holder's transaction fails the
            // name node's version check and changes nothing.
            self.checked(data.as_deref()).await.map(|_| ())
        };
        Operation::Unlock.run(BACKEND, config.name(), timeout, unlock).await
    }

    async fn extend(&mut self, config: &LockConfig) -> Result<()> {
        let lost = || Error::LockLost { name: config.name().to_owned() };
        if !self.session_alive()? {
            return Err(lost());
        }
        let timeout = self.inner.timeout;
        let data = encode(config.lock_at_most_for(), &self.inner.locked_by);
        let done = Operation::Extend
            .run(BACKEND, config.name(), timeout, self.checked(Some(&data)))
            .await?;
        let Some(Some(stat)) = done else { return Err(lost()) };
        if stat.mtime >= self.mtime.saturating_add(self.hold_ms) {
            // The extension reached the leader after the lock had expired by its clock (nobody
            // had taken it yet): it must not revive the lock. Release it again (owner-checked)
            // and report the loss.
            tracing::debug!(lock = %self.paths.lock, "an extension arrived after expiry; releasing");
            if let Err(error) = with_timeout(Operation::Extend, timeout, self.checked(None)).await {
                tracing::warn!(%error, "releasing a lock revived by a late extension failed; it expires after lock_at_most_for");
            }
            return Err(lost());
        }
        self.mtime = stat.mtime;
        self.hold_ms = hold_ms(config.lock_at_most_for());
        self.since = Instant::now();
        Ok(())
    }

    fn fencing_token(&self) -> Option<u64> {
        u64::try_from(self.token).ok()
    }
}

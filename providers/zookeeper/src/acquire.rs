//! Acquiring: the acquire transactions, a held lock judged by the leader's clock (or by a
//! remembered look), an expired one taken over, and `try_lock`.

use std::{
    sync::{Arc, PoisonError, atomic::AtomicBool},
    time::Duration,
};

use shedlock::{
    Acquisition, Error, Lock, LockConfig, Result, store::Operation, support::check_lock_name,
};
use tokio::{sync::oneshot, time::Instant};
use zookeeper_client::{Client, MultiWriteError};

use crate::{
    BACKEND, MAX_NAME_LEN,
    auth::Op,
    handle::ZkHandle,
    keys::Paths,
    record::{encode, hold_ms},
    session::Inner,
    watch::{lost_after_disconnect, watch_session},
};

/// How many lock nodes [`Inner::live`] remembers before it starts over.
const LIVE_CAPACITY: usize = 4096;

/// What an acquire won: the name node's new version (owner check) and the transaction's zxid
/// (fencing token).
struct Granted {
    name_version: i32,
    zxid: i64,
    /// The leader's time of the transaction: the lock node's mtime.
    mtime: i64,
}

/// The kinds of acquire transaction.
#[derive(Clone, Copy)]
enum Txn {
    /// The name node exists.
    Existing,
    /// The name node does not exist yet.
    Fresh,
    /// The lock node was seen expired, with these versions.
    Takeover { name_version: i32, lock_version: i32 },
}

/// How an acquire transaction failed, when not with an I/O error.
enum Refused {
    /// The root is missing.
    NoRoot,
    /// The lock node exists: held (or expired, to be judged).
    Held,
    /// The name node (or the root) is missing.
    NoNameNode,
    /// The name node's or lock node's version changed (someone acquired, extended or released).
    Changed,
}

impl Inner {
    fn known_live(&self, lock: &str) -> Option<(i64, Instant)> {
        let live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.get(lock).copied()
    }

    fn remember_live(&self, lock: &str, mzxid: i64, until: Instant) {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        if live.len() >= LIVE_CAPACITY && !live.contains_key(lock) {
            live.clear();
        }
        live.insert(lock.to_owned(), (mzxid, until));
    }

    /// One acquire transaction. [`Txn::Existing`]: bump the name node's version and create our
    /// lock node. [`Txn::Fresh`]: create the name node too. [`Txn::Takeover`]: bump the name
    /// node's version only if it is still the one seen, delete the expired lock node at the
    /// version seen, and create ours.
    async fn acquire_txn(
        &self,
        client: &Client,
        p: &Paths,
        data: &[u8],
        txn: Txn,
    ) -> Result<std::result::Result<Granted, Refused>> {
        let mut w = client.new_multi_writer();
        let (persistent, ephemeral) = (self.persistent(), self.ephemeral());
        let built = (|| {
            match txn {
                Txn::Existing => w.add_set_data(&p.name, b"", None)?,
                Txn::Fresh => {
                    w.add_create(&p.name, b"", &persistent)?;
                    w.add_set_data(&p.name, b"", Some(0))?;
                }
                Txn::Takeover { name_version, lock_version } => {
                    w.add_set_data(&p.name, b"", Some(name_version))?;
                    w.add_delete(&p.lock, Some(lock_version))?;
                }
            }
            w.add_create(&p.lock, data, &ephemeral)
        })();
        let ops: &[Op<'_>] = match txn {
            Txn::Existing => &[Op::SetData(&p.name), Op::Create(&p.lock)],
            Txn::Fresh => &[Op::Create(&p.name), Op::SetData(&p.name), Op::Create(&p.lock)],
            Txn::Takeover { .. } => {
                &[Op::SetData(&p.name), Op::Delete(&p.lock), Op::Create(&p.lock)]
            }
        };
        built.map_err(|e| self.map(e))?;
        let set_index = usize::from(matches!(txn, Txn::Fresh));
        match w.commit().await {
            Ok(results) => match results.into_iter().nth(set_index) {
                Some(zookeeper_client::MultiWriteResult::SetData { stat }) => Ok(Ok(Granted {
                    name_version: stat.version,
                    zxid: stat.mzxid,
                    mtime: stat.mtime,
                })),
                other => Err(Error::backend(
                    BACKEND,
                    format!("unexpected answer to the acquire transaction: {other:?}"),
                )),
            },
            Err(MultiWriteError::OperationFailed { index, source }) => {
                use zookeeper_client::Error as Z;
                let create_index = match txn {
                    Txn::Existing => 1,
                    Txn::Fresh | Txn::Takeover { .. } => 2,
                };
                match (txn, index, source) {
                    (Txn::Existing, 0, Z::NoNode) => Ok(Err(Refused::NoNameNode)),
                    (Txn::Fresh, 0, Z::NoNode) => Ok(Err(Refused::NoRoot)),
                    (Txn::Fresh, 0, Z::NodeExists) => Ok(Err(Refused::Changed)),
                    (Txn::Takeover { .. }, 0 | 1, Z::NoNode | Z::BadVersion) => {
                        Ok(Err(Refused::Changed))
                    }
                    (_, i, Z::NodeExists) if i == create_index => Ok(Err(Refused::Held)),
                    (_, index, source) => {
                        Err(self
                            .refused_multi(ops, MultiWriteError::OperationFailed { index, source }))
                    }
                }
            }
            Err(e) => Err(self.refused_multi(ops, e)),
        }
    }

    async fn acquire(&self, p: &Paths, data: &[u8]) -> Result<Option<(Granted, Client)>> {
        let client = self.client().await?;
        let mut txn = Txn::Existing;
        // A few turns at most: each refusal other than "held" means the name changed under us
        // (created, released, taken over) and is looked at again.
        for _ in 0..4 {
            match self.acquire_txn(&client, p, data, txn).await? {
                Ok(g) => return Ok(Some((g, client))),
                // A name never locked before: its name node is created in the acquire itself.
                Err(Refused::NoNameNode) => {
                    txn = Txn::Fresh;
                    continue;
                }
                Err(Refused::NoRoot) => {
                    self.create_root(&client).await?;
                    continue;
                }
                Err(Refused::Changed) if matches!(txn, Txn::Takeover { .. }) => return Ok(None),
                Err(Refused::Held | Refused::Changed) => {}
            }
            // A lock this instance already judged live, unchanged since (same mzxid) and
            // surely not expired yet by the monotonic clock: held, by a read alone (no clock
            // write, which is a logged and fsynced transaction).
            let known = self.known_live(&p.lock).filter(|(_, until)| Instant::now() < *until);
            let mut look = self.look(&client, p, known.is_none()).await?;
            if let (Some((zxid, until)), Some((_, lock))) = (known, &look.lock)
                && lock.mzxid == zxid
                && Instant::now() < until
            {
                return Ok(None);
            }
            if look.now.is_none() {
                look = self.look(&client, p, true).await?;
            }
            let (Some(now), Some(name), Some((hold, lock))) = (look.now, look.name, look.lock)
            else {
                // Released (or never created) in between: try again from the start.
                txn = Txn::Existing;
                continue;
            };
            let expired = hold.is_some_and(|ms| lock.mtime.saturating_add(ms) <= now);
            if !expired {
                if let Some(ms) = hold {
                    // The leader stamped `now` after `sent`, so the lock lives at least
                    // `remaining` past `sent`; less a margin for clock rates (0.1 % + 2 ms).
                    let remaining = lock.mtime.saturating_add(ms).saturating_sub(now);
                    let remaining = Duration::from_millis(u64::try_from(remaining).unwrap_or(0));
                    let margin = remaining / 1000 + Duration::from_millis(2);
                    if let Some(d) = remaining.checked_sub(margin) {
                        self.remember_live(&p.lock, lock.mzxid, look.sent + d);
                    }
                }
                return Ok(None);
            }
            tracing::debug!(
                lock = %p.lock,
                expired_ms_ago = now - lock.mtime.saturating_add(hold.unwrap_or(0)),
                "taking over an expired lock"
            );
            txn = Txn::Takeover { name_version: name.version, lock_version: lock.version };
        }
        Ok(None)
    }

    pub(crate) async fn try_lock(self: &Arc<Self>, config: &LockConfig) -> Result<Option<Lock>> {
        check_lock_name(BACKEND, config.name(), Some(MAX_NAME_LEN), false)?;
        let paths = self.paths(config.name());
        let data = encode(config.lock_at_most_for(), &self.locked_by);
        let acquisition = Acquisition::begin(config); // the default clock step, as declared
        let won = Operation::TryLock
            .run(BACKEND, config.name(), self.timeout, self.acquire(&paths, &data))
            .await?;
        // The handle keeps the session it acquired with: after that session expired (its
        // ephemeral node is gone) every owner-checked call on it fails.
        let Some((g, client)) = won else { return Ok(None) };
        let watcher = client.state_watcher();
        let session_timeout = client.session_timeout();
        let (stop, stopped) = oneshot::channel();
        let session_gone = Arc::new(AtomicBool::new(false));
        let handle = ZkHandle {
            _stop_watch: stop,
            session_gone: session_gone.clone(),
            inner: self.clone(),
            client,
            paths,
            name_version: g.name_version,
            token: g.zxid,
            mtime: g.mtime,
            hold_ms: hold_ms(config.lock_at_most_for()),
            since: Instant::now(),
        };
        let lock = acquisition.grant(handle).await?;
        let lease = lock.lease().clone();
        let lost_after = lost_after_disconnect(session_timeout, self.connection_timeout);
        let watch =
            watch_session(watcher, lost_after, session_timeout, lease, session_gone, stopped);
        tokio::spawn(watch);
        Ok(Some(lock))
    }
}

//! Acquiring: the acquire transaction on a fresh or kept lease, sent beside the kept lease's
//! keep-alive, and the revocation of a lease the key may be attached to when it fails.

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnResponse};
use shedlock::{Error, Result};
use tokio::time::Instant;

use crate::{
    BACKEND, EtcdLockProvider,
    error::{Access, Failure, Permission},
    lease::{LeaseInfo, RevokeOnDrop, revoke_in_background},
};

/// A transaction's answer, and what the keep-alive sent beside it said (when one was sent).
pub(crate) struct Sent {
    pub(crate) txn: std::result::Result<TxnResponse, Failure>,
    /// `None`: no keep-alive was needed (a fresh lease).
    pub(crate) keep_alive: Option<std::result::Result<(), Failure>>,
}

impl EtcdLockProvider {
    /// Sends `txn`, and beside it a keep-alive of `lease` when `refresh` (a reused lease). A
    /// successful keep-alive moves `lease.refreshed` to when it was sent.
    pub(crate) async fn send(
        &self,
        txn: Txn,
        on: Access<'_>,
        lease: &mut LeaseInfo,
        refresh: bool,
    ) -> Sent {
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
    pub(crate) async fn acquire(&self, key: &[u8], ttl: i64) -> Result<Option<(LeaseInfo, i64)>> {
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

//! A held lock's handle: owner-checked unlock (kept until `lock_at_least_for` on a short lease)
//! and extend (a keep-alive, or a move to a lease of the new TTL).

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use shedlock::{Error, LockConfig, LockHandle, Result, store::Operation};
use tokio::time::Instant;

use crate::{
    BACKEND, EtcdLockProvider,
    error::{Failure, Permission},
    lease::{LeaseInfo, revoke_in_background, ttl_secs},
    watch,
};

/// The holder's side of one acquisition.
pub(crate) struct EtcdHandle {
    pub(crate) provider: EtcdLockProvider,
    pub(crate) key: Vec<u8>,
    /// The acquiring put's revision: the key's `create_revision` while this holder owns it, and
    /// the fencing token.
    pub(crate) revision: i64,
    /// The lease the key is attached to.
    pub(crate) lease: LeaseInfo,
    /// When the answer of the acquire (or of the last extension) arrived: `lock_at_least_for`
    /// counts from here, so the key is held at least that long.
    pub(crate) held_since: Instant,
    /// This lock's loss watch, cancelled when the handle goes.
    pub(crate) _watching: Option<watch::Watching>,
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

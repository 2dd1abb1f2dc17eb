//! Leases: their TTLs, the leases this instance keeps for reuse (and revokes), grants and
//! revocations.

use std::{
    collections::HashMap,
    sync::{Arc, PoisonError},
    time::Duration,
};

use shedlock::{
    Error, Result,
    store::Operation,
    support::{duration_secs_ceil, with_timeout},
};
use tokio::time::Instant;

use crate::{
    BACKEND, EtcdLockProvider,
    error::{Access, Failure, Permission, sent},
    keeper::Keeper,
    provider::Inner,
};

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
pub(crate) fn ttl_secs(d: Duration) -> i64 {
    i64::try_from(duration_secs_ceil(d)).unwrap_or(MAX_TTL).clamp(1, MAX_TTL)
}

/// One lease this instance granted, with its keep-alive stream once one is open.
#[derive(Debug)]
pub(crate) struct LeaseInfo {
    pub(crate) id: i64,
    /// The TTL asked for (the pool's key).
    pub(crate) requested: i64,
    /// The TTL the server granted (at least the server's minimum, so possibly more than asked).
    pub(crate) ttl: i64,
    /// When the last grant or keep-alive of this lease was sent: the server's expiry is at least
    /// this instant plus `ttl`.
    pub(crate) refreshed: Instant,
    /// The lease's keep-alive stream, opened by its first renewal and kept with the lease, so
    /// that a later renewal is one message on it (`None` until then, or after it broke).
    pub(crate) keeper: Option<Keeper>,
}

impl LeaseInfo {
    /// This lease moved out of `self` (for the pool), which keeps the figures but no stream.
    pub(crate) fn detach(&mut self) -> LeaseInfo {
        LeaseInfo { keeper: self.keeper.take(), ..*self }
    }

    /// The instant until which the lease surely lives (this instance's monotonic clock).
    fn alive_until(&self) -> Instant {
        let ttl = Duration::from_secs(self.ttl.unsigned_abs());
        self.refreshed.checked_add(ttl).unwrap_or(self.refreshed)
    }
}

/// Revokes a lease when dropped (unless disarmed): an acquire that failed or was cancelled after
/// its transaction may have attached the key to the lease releases it this way.
pub(crate) struct RevokeOnDrop {
    pub(crate) inner: Arc<Inner>,
    pub(crate) lease: Option<i64>,
}

impl RevokeOnDrop {
    pub(crate) fn disarm(&mut self) {
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

pub(crate) fn revoke_in_background(inner: &Arc<Inner>, id: i64) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
    let inner = inner.clone();
    rt.spawn(async move {
        let revoke = async {
            match inner.revoke(id, None).await {
                Ok(()) | Err(Failure::LeaseGone) => Ok(()),
                Err(f) => Err(f.into_error()),
            }
        };
        if let Err(error) = with_timeout(Operation::RevokeLease, inner.timeout, revoke).await {
            tracing::debug!(lease = id, %error, "etcd: revoking an unused lease failed; it expires by itself");
        }
    });
}

impl Inner {
    /// Revokes lease `id`, which deletes the keys attached to it: etcd asks write permission on
    /// them (`on`); none for a lease without keys.
    pub(crate) async fn revoke(
        &self,
        id: i64,
        on: Option<Access<'_>>,
    ) -> std::result::Result<(), Failure> {
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
    pub(crate) fn lease_refused(&self, what: &'static str, f: Failure) -> Failure {
        self.on(what, &self.prefix, Permission::Lease).map(f)
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

impl EtcdLockProvider {
    pub(crate) fn pool(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Vec<LeaseInfo>>> {
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
    pub(crate) fn keep(&self, lease: LeaseInfo) {
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

    pub(crate) async fn grant(&self, ttl: i64) -> Result<LeaseInfo> {
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
    pub(crate) async fn lease(&self, ttl: i64) -> Result<(LeaseInfo, bool)> {
        match self.take_kept(ttl) {
            Some(l) => Ok((l, true)),
            None => Ok((self.grant(ttl).await?, false)),
        }
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

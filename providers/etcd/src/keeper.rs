//! Lease keep-alives: one stream per lease, kept open with it, so that a renewal is one message.

use std::{fmt, time::Duration};

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};
use shedlock::Error;

use crate::{
    BACKEND,
    error::{Failure, classify, sent},
    provider::Inner,
};

#[cfg(doc)]
use crate::lease::LeaseInfo;

/// A lease's open keep-alive stream: its request side and its answers. Kept with the lease
/// ([`LeaseInfo::keeper`]), so a renewal is one message on an open stream instead of a stream
/// opened per renewal (what made a reused lease's acquire cost more than its transaction).
pub(crate) struct Keeper {
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

impl Inner {
    /// Renews lease `id` on its open stream in `slot`, or on a stream opened now (and then kept
    /// in `slot`). Ok once the server answered with a live TTL.
    pub(crate) async fn keep_alive(
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
}

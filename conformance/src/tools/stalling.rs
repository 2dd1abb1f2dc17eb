//! [`Stalling`]: a provider wrapper whose handles stall `extend` on demand (C10, C22), or hold
//! `unlock` and `extend` past the core's checks until released (C12, C13 in transit).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::sync::watch;

use async_trait::async_trait;
use shedlock::{
    Capabilities, ForceRelease, Lock, LockConfig, LockHandle, LockInfo, LockPage, LockProvider,
    Result as ShedResult,
};

/// Wraps a provider so that, once `pause` is set, every extend first stalls for `stall` (as a
/// process paused by a GC or a stalled network would) and then reaches the real backend.
pub(crate) struct Stalling {
    pub(crate) inner: Arc<dyn LockProvider>,
    pub(crate) pause: Arc<AtomicBool>,
    pub(crate) stall: Duration,
    /// Requests held in transit: see [`Hold`].
    pub(crate) hold: Option<Hold>,
}

/// While the gate reads `true`, a handle's `unlock` and `extend` wait before they reach the
/// provider's handle, that is after the core's own checks (an expired lease is refused on the
/// client before this point): a request that left the client and is delayed on its way.
#[derive(Clone)]
pub(crate) struct Hold {
    pub(crate) gate: watch::Receiver<bool>,
    /// Calls waiting at the gate right now.
    pub(crate) waiting: Arc<AtomicUsize>,
}

impl Hold {
    async fn pass(&mut self) {
        if *self.gate.borrow() {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            let _ = self.gate.wait_for(|held| !*held).await;
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

pub(crate) struct StallingHandle {
    inner: Box<dyn LockHandle>,
    pause: Arc<AtomicBool>,
    stall: Duration,
    hold: Option<Hold>,
}

#[async_trait]
impl LockProvider for Stalling {
    async fn try_lock(&self, config: &LockConfig) -> ShedResult<Option<Lock>> {
        let Some(lock) = self.inner.try_lock(config).await? else { return Ok(None) };
        Ok(Some(lock.map_handle(|inner| StallingHandle {
            inner,
            pause: self.pause.clone(),
            stall: self.stall,
            hold: self.hold.clone(),
        })))
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }

    async fn check(&self) -> ShedResult<()> {
        self.inner.check().await
    }

    async fn inspect(&self, name: &str) -> ShedResult<Option<LockInfo>> {
        self.inner.inspect(name).await
    }

    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> ShedResult<LockPage> {
        self.inner.list(prefix, cursor, limit).await
    }

    async fn force_release(&self, seen: &LockInfo) -> ShedResult<ForceRelease> {
        self.inner.force_release(seen).await
    }
}

#[async_trait]
impl LockHandle for StallingHandle {
    async fn unlock(&mut self, config: &LockConfig) -> ShedResult<()> {
        if let Some(hold) = &mut self.hold {
            hold.pass().await;
        }
        self.inner.unlock(config).await
    }

    async fn extend(&mut self, config: &LockConfig) -> ShedResult<()> {
        if let Some(hold) = &mut self.hold {
            hold.pass().await;
        }
        if self.pause.load(Ordering::SeqCst) {
            tokio::time::sleep(self.stall).await;
        }
        self.inner.extend(config).await
    }

    fn fencing_token(&self) -> Option<u64> {
        self.inner.fencing_token()
    }
}

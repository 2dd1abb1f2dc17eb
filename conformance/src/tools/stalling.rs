//! [`Stalling`]: a provider wrapper whose handles stall `extend` on demand (C10, C22).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use shedlock::{Capabilities, Lock, LockConfig, LockHandle, LockProvider, Result as ShedResult};

/// Wraps a provider so that, once `pause` is set, every extend first stalls for `stall` (as a
/// process paused by a GC or a stalled network would) and then reaches the real backend.
pub(crate) struct Stalling {
    pub(crate) inner: Arc<dyn LockProvider>,
    pub(crate) pause: Arc<AtomicBool>,
    pub(crate) stall: Duration,
}

pub(crate) struct StallingHandle {
    inner: Box<dyn LockHandle>,
    pause: Arc<AtomicBool>,
    stall: Duration,
}

#[async_trait]
impl LockProvider for Stalling {
    async fn try_lock(&self, config: &LockConfig) -> ShedResult<Option<Lock>> {
        let Some(lock) = self.inner.try_lock(config).await? else { return Ok(None) };
        Ok(Some(lock.map_handle(|inner| StallingHandle {
            inner,
            pause: self.pause.clone(),
            stall: self.stall,
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
}

#[async_trait]
impl LockHandle for StallingHandle {
    async fn unlock(&mut self, config: &LockConfig) -> ShedResult<()> {
        self.inner.unlock(config).await
    }

    async fn extend(&mut self, config: &LockConfig) -> ShedResult<()> {
        if self.pause.load(Ordering::SeqCst) {
            tokio::time::sleep(self.stall).await;
        }
        self.inner.extend(config).await
    }

    fn fencing_token(&self) -> Option<u64> {
        self.inner.fencing_token()
    }
}

//! The inspection contract around the providers: unsupported unless declared, forwarded by every
//! wrapper, bounded by the operation timeout under its own label.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use shedlock::{
    Capabilities, Error, ForceRelease, KeepAliveProvider, LockConfig, LockInfo, LockPage,
    LockProvider, Result, TimeSource,
    store::{Granted, LeaseStore, Request, Settings, StoreProvider},
};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

/// A store with the lock calls only: it declares no inspection and implements none.
struct LocksOnly;

#[async_trait]
impl LeaseStore for LocksOnly {
    type Held = ();

    fn capabilities(&self, _: &Settings) -> Capabilities {
        Capabilities::new()
    }

    async fn acquire(&self, _: &Request<'_>) -> Result<Option<Granted<()>>> {
        Ok(Some(Granted::new(())))
    }

    async fn release(&self, _: &Request<'_>, _: &mut ()) -> Result<()> {
        Ok(())
    }
}

/// A store whose inspection never answers, to see the time limit.
struct Silent;

#[async_trait]
impl LeaseStore for Silent {
    type Held = ();

    fn capabilities(&self, _: &Settings) -> Capabilities {
        Capabilities::new().with_inspect(true).with_list(true).with_force_release(true)
    }

    async fn acquire(&self, _: &Request<'_>) -> Result<Option<Granted<()>>> {
        Ok(None)
    }

    async fn release(&self, _: &Request<'_>, _: &mut ()) -> Result<()> {
        Ok(())
    }

    async fn inspect(&self, _: &str, _: &Settings) -> Result<Option<LockInfo>> {
        std::future::pending().await
    }

    async fn list(&self, _: &str, _: Option<&str>, _: usize, _: &Settings) -> Result<LockPage> {
        std::future::pending().await
    }

    async fn force_release(&self, _: &LockInfo, _: &Settings) -> Result<ForceRelease> {
        std::future::pending().await
    }
}

fn seen() -> LockInfo {
    LockInfo::new("job", "1", true, TimeSource::Server)
}

fn unsupported(e: Error) -> (&'static str, &'static str) {
    match e {
        Error::Unsupported { backend, operation } => (backend, operation),
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

#[tokio::test]
async fn a_store_that_declares_no_inspection_answers_unsupported_naming_backend_and_call() {
    let p = StoreProvider::new(LocksOnly, Settings::new("plain"));
    let caps = p.capabilities();
    assert!(!caps.inspect && !caps.list && !caps.force_release);
    assert_eq!(unsupported(p.inspect("job").await.unwrap_err()), ("plain", "inspect"));
    assert_eq!(unsupported(p.list("", None, 10).await.unwrap_err()), ("plain", "list"));
    let e = p.force_release(&seen()).await.unwrap_err();
    assert_eq!(unsupported(e), ("plain", "force_release"));
}

#[tokio::test]
async fn a_provider_with_only_try_lock_answers_unsupported() {
    struct Minimal;
    #[async_trait]
    impl LockProvider for Minimal {
        async fn try_lock(&self, _: &LockConfig) -> Result<Option<shedlock::Lock>> {
            Ok(None)
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::new()
        }
        fn backend_name(&self) -> &'static str {
            "minimal"
        }
    }
    assert_eq!(unsupported(Minimal.inspect("job").await.unwrap_err()), ("minimal", "inspect"));
    assert_eq!(unsupported(Minimal.list("", None, 1).await.unwrap_err()), ("minimal", "list"));
    let e = Minimal.force_release(&seen()).await.unwrap_err();
    assert_eq!(unsupported(e), ("minimal", "force_release"));
}

#[tokio::test(start_paused = true)]
async fn inspection_calls_are_bounded_by_the_operation_timeout_under_their_own_labels() {
    let limit = Duration::from_secs(2);
    let p = StoreProvider::new(Silent, Settings::new("silent").with_timeout(Some(limit)));
    let timed_out = |e: Error| match e {
        Error::Timeout { operation, after } => {
            assert_eq!(after, limit);
            operation
        }
        other => panic!("expected Timeout, got {other:?}"),
    };
    assert_eq!(timed_out(p.inspect("job").await.unwrap_err()), "inspect");
    assert_eq!(timed_out(p.list("", None, 1).await.unwrap_err()), "list");
    assert_eq!(timed_out(p.force_release(&seen()).await.unwrap_err()), "force_release");
}

#[tokio::test]
async fn keep_alive_and_arc_forward_inspection_to_the_provider_inside() {
    let server = MemoryServer::new();
    let inner: Arc<dyn LockProvider> = Arc::new(MemoryLockProvider::new(&server));
    let wrapped = KeepAliveProvider::new(inner.clone()).unwrap();
    let cfg = LockConfig::new("job", Duration::from_secs(60), Duration::ZERO).unwrap();
    let lock = inner.try_lock(&cfg).await.unwrap().unwrap();

    let via_wrapper = wrapped.inspect("job").await.unwrap().unwrap();
    assert_eq!(via_wrapper, inner.inspect("job").await.unwrap().unwrap());
    assert_eq!(via_wrapper.fencing_token, lock.fencing_token());
    assert_eq!(wrapped.list("", None, 10).await.unwrap().records, vec![via_wrapper.clone()]);
    let released = wrapped.force_release(&via_wrapper).await.unwrap();
    assert_eq!(released, ForceRelease::Released(via_wrapper));
    assert!(server.record("job").is_none());
    assert!(wrapped.capabilities().force_release);
    drop(lock);
}

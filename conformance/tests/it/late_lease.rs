//! Proof that C24 catches a provider that measures a lock's lease from the answer instead of from
//! before the request (it begins its `Acquisition` after the backend said yes): through the kit's
//! slow-link proxy such a provider hands out locks that may already have expired on the backend.
//! The same provider measuring from before the request (the control) passes C24.
//!
//! The backend is a tiny TCP lock server (one request line per connection) so that the kit's fault
//! proxy can sit between it and the provider.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use shedlock::{
    Acquisition, BoxError, Capabilities, Error, Lock, LockConfig, LockHandle, LockProvider, Result,
};
use shedlock_conformance::{
    Hooks, InstanceOptions, Options, Outcome, ProviderFactory, Suite, checks,
};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
};

const BACKEND: &str = "line-lock";
const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// The server: `LOCK <name> <at_most_ms>` → `OK <owner>` | `HELD`; `UNLOCK <name> <owner>` → `OK`.
/// Expiry is judged by the server's clock.
async fn serve() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let locks: Arc<Mutex<HashMap<String, (Instant, u64)>>> = Arc::default();
    let next = Arc::new(AtomicU64::new(1));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (locks, next) = (locks.clone(), next.clone());
            tokio::spawn(async move {
                let (r, mut w) = stream.into_split();
                let mut line = String::new();
                if BufReader::new(r).read_line(&mut line).await.is_err() {
                    return;
                }
                let parts: Vec<&str> = line.split_whitespace().collect();
                let reply = match parts.as_slice() {
                    ["LOCK", name, ms] => {
                        let at_most = Duration::from_millis(ms.parse().unwrap_or(0));
                        let now = Instant::now();
                        let mut map = locks.lock().unwrap();
                        if map.get(*name).is_some_and(|(until, _)| *until > now) {
                            "HELD".to_owned()
                        } else {
                            let owner = next.fetch_add(1, Ordering::SeqCst);
                            map.insert((*name).to_owned(), (now + at_most, owner));
                            format!("OK {owner}")
                        }
                    }
                    ["UNLOCK", name, owner] => {
                        let mut map = locks.lock().unwrap();
                        if map.get(*name).is_some_and(|(_, o)| o.to_string() == *owner) {
                            map.remove(*name);
                        }
                        "OK".to_owned()
                    }
                    _ => "ERR".to_owned(),
                };
                let _ = w.write_all(format!("{reply}\n").as_bytes()).await;
            });
        }
    });
    addr
}

#[derive(Clone)]
struct LineLock {
    addr: SocketAddr,
    late_lease: bool,
}

impl LineLock {
    async fn call(&self, request: String) -> Result<String> {
        let io = async {
            let mut s = TcpStream::connect(self.addr).await?;
            s.write_all(format!("{request}\n").as_bytes()).await?;
            let mut line = String::new();
            BufReader::new(s).read_line(&mut line).await?;
            if line.is_empty() {
                return Err(std::io::Error::other("connection closed"));
            }
            Ok(line.trim().to_owned())
        };
        match tokio::time::timeout(CALL_TIMEOUT, io).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(Error::unavailable(BACKEND, e)),
            Err(_) => Err(Error::Timeout { operation: "call", after: CALL_TIMEOUT }),
        }
    }
}

#[async_trait]
impl LockProvider for LineLock {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        let early = Acquisition::begin(config);
        let at_most = config.lock_at_most_for().as_millis();
        let reply = self.call(format!("LOCK {} {at_most}", config.name())).await?;
        let Some(owner) = reply.strip_prefix("OK ").map(str::to_owned) else {
            return Ok(None);
        };
        // The bug: the lease is measured from the answer.
        let acquisition = if self.late_lease { Acquisition::begin(config) } else { early };
        let handle = LineHandle { p: self.clone(), owner };
        acquisition.grant(handle).await.map(Some)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_server_time(true).with_owner_checked(true)
    }
}

struct LineHandle {
    p: LineLock,
    owner: String,
}

#[async_trait]
impl LockHandle for LineHandle {
    async fn unlock(&mut self, config: &LockConfig) -> Result<()> {
        if !config.lock_at_least_for().is_zero() {
            return Err(Error::Unsupported { backend: BACKEND, operation: "lock_at_least_for" });
        }
        self.p.call(format!("UNLOCK {} {}", config.name(), self.owner)).await.map(|_| ())
    }
}

struct Factory {
    addr: SocketAddr,
    late_lease: bool,
}

#[async_trait]
impl ProviderFactory for Factory {
    fn name(&self) -> &str {
        "line-lock"
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let addr = options.address.unwrap_or(self.addr);
        Ok(Arc::new(LineLock { addr, late_lease: self.late_lease }))
    }

    fn hooks(&self) -> Hooks {
        Hooks::new().with_backend_address(self.addr)
    }
}

async fn c24(late_lease: bool) -> shedlock_conformance::CheckResult {
    let addr = serve().await;
    let suite = Suite::new(Factory { addr, late_lease }, Options::new()).await.unwrap();
    suite.run_check(checks::by_id("C24").unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c24_passes_a_provider_measuring_the_lease_from_before_the_request() {
    let v = c24(false).await;
    assert_eq!(v.outcome, Outcome::Pass, "{}", v.detail);
    assert!(v.detail.contains("LeaseExpiredInFlight"), "{}", v.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c24_rejects_a_provider_measuring_the_lease_from_the_answer() {
    let v = c24(true).await;
    assert_eq!(v.outcome, Outcome::Fail, "{}", v.detail);
    assert!(v.detail.contains("lease"), "{}", v.detail);
    println!("late lease rejected by C24: {}", v.detail);
}

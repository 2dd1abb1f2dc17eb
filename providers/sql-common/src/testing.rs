//! Test support shared by the SQL providers' tests (feature `testing`, used only as a
//! dev-dependency): servers from the launcher, unique names, a round-trip counting proxy, the
//! conformance hooks, and the lock checks every dialect runs against its real database.
//!
//! This is test code: like tests, it panics on failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, SystemTime},
};

use shedlock::{BoxError, Error, LockConfig, LockProvider};
use shedlock_conformance::{Hooks, RecordHooks, RestartHook};
use shedlock_launcher::{Backend, Mode, Service};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

use crate::RecordAdmin;

/// The server of `backend` (`label` names it in messages): the URL in its environment variable
/// (e.g. `$SHEDLOCK_POSTGRES_URL`) if set, else one the launcher starts once per test process
/// (native, on a free port). A missing server is an error with the launcher's message, never a
/// skip.
pub async fn service(backend: Backend, label: &str) -> Result<&'static Service, BoxError> {
    let r = tokio::task::spawn_blocking(move || shedlock_launcher::shared(backend)).await?;
    r.map_err(|e| format!("{label} is not available: {e}").into())
}

/// The URL of [`service`]; panics (fails the test) if there is none.
pub async fn url(backend: Backend, label: &str) -> String {
    match service(backend, label).await {
        Ok(s) => s.url().to_owned(),
        Err(e) => panic!("{e}"),
    }
}

/// A unique identifier-safe suffix.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{prefix}_{}_{n}_{nanos}", std::process::id())
}

/// A lock configuration with times in milliseconds.
pub fn cfg(name: &str, at_most_ms: u64, at_least_ms: u64) -> LockConfig {
    LockConfig::new(name, Duration::from_millis(at_most_ms), Duration::from_millis(at_least_ms))
        .unwrap()
}

/// A TCP proxy that counts round trips: a round trip starts each time the client sends after
/// the server has answered (or for the first time).
pub struct CountingProxy {
    /// Where the proxy listens.
    pub addr: SocketAddr,
    turns: Arc<AtomicU64>,
}

impl CountingProxy {
    /// Starts a proxy to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let turns = Arc::new(AtomicU64::new(0));
        let t = turns.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(target).await.unwrap();
                let turns = t.clone();
                tokio::spawn(pump(client, server, turns));
            }
        });
        Self { addr, turns }
    }

    /// Round trips since the start or the last reset.
    pub fn round_trips(&self) -> u64 {
        self.turns.load(Ordering::SeqCst)
    }

    /// Resets the count.
    pub fn reset(&self) {
        self.turns.store(0, Ordering::SeqCst);
    }
}

async fn pump(client: TcpStream, server: TcpStream, turns: Arc<AtomicU64>) {
    client.set_nodelay(true).ok();
    server.set_nodelay(true).ok();
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    // true: the last bytes went server -> client (so the next client bytes open a round trip).
    let server_spoke = Arc::new(AtomicBool::new(true));
    let s1 = server_spoke.clone();
    let up = async move {
        let mut buf = vec![0u8; 65536];
        loop {
            let n = match cr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if s1.swap(false, Ordering::SeqCst) {
                turns.fetch_add(1, Ordering::SeqCst);
            }
            if sw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = sw.shutdown().await;
    };
    let down = async move {
        let mut buf = vec![0u8; 65536];
        loop {
            let n = match sr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // Mark before forwarding: the client can only answer what it has received.
            server_spoke.store(true, Ordering::SeqCst);
            if cw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = cw.shutdown().await;
    };
    tokio::join!(up, down);
}

/// The conformance kit's raw row access (C14), on a provider's record helpers.
pub struct Records(pub Arc<dyn RecordAdmin>);

#[async_trait::async_trait]
impl RecordHooks for Records {
    async fn record_exists(&self, name: &str) -> Result<bool, BoxError> {
        Ok(self.0.record(name).await?.is_some())
    }

    async fn delete_record(&self, name: &str) -> Result<(), BoxError> {
        self.0.delete_record(name).await?;
        Ok(())
    }

    async fn plant_expired_record(&self, name: &str) -> Result<(), BoxError> {
        self.0.write_record(name, SystemTime::now() - Duration::from_secs(3600)).await?;
        Ok(())
    }
}

/// Restarts the server the launcher started (C25).
pub struct Restart(pub &'static Service);

#[async_trait::async_trait]
impl RestartHook for Restart {
    async fn restart(&self) -> Result<(), BoxError> {
        let service = self.0;
        tokio::task::spawn_blocking(move || service.restart()).await??;
        Ok(())
    }
}

/// The hooks of a server-backed provider: raw row access (C14), the server address for the
/// kit's fault proxy (C24) and, for a server the launcher started, a restart (C25). A server
/// given by URL is not ours to restart: C25 is then "not applicable".
pub fn server_hooks(
    records: Arc<dyn RecordAdmin>,
    addr: SocketAddr,
    service: &'static Service,
) -> Hooks {
    let hooks = Hooks::new().with_records(Records(records)).with_backend_address(addr);
    if service.mode() == Mode::External { hooks } else { hooks.with_restart(Restart(service)) }
}

/// The lock checks every SQL provider runs against its real database. `a` and `b` are two
/// independent providers on one table (separate pools, like two nodes); `records` are `a`'s
/// record helpers.
pub mod checks {
    use super::*;

    /// One winner; not reentrant; free again after unlock.
    pub async fn one_winner_and_release(a: &dyn LockProvider, b: &dyn LockProvider) {
        let c = cfg("job", 60_000, 0);
        let lock = a.try_lock(&c).await.unwrap().expect("free");
        assert!(b.try_lock(&c).await.unwrap().is_none());
        assert!(a.try_lock(&c).await.unwrap().is_none(), "not reentrant");
        lock.unlock().await.unwrap();
        let lock = b.try_lock(&c).await.unwrap().expect("free after unlock");
        lock.unlock().await.unwrap();
    }

    /// A holder whose lock expired and was taken over can neither extend nor unlock it.
    pub async fn stale_holder_cannot_unlock_or_extend(
        a: &dyn LockProvider,
        b: &dyn LockProvider,
        records: &dyn RecordAdmin,
    ) {
        let name = "stale";
        let mut stale = a.try_lock(&cfg(name, 200, 0)).await.unwrap().expect("free");
        // Granularity is 1 ms and both sides use the database clock: 200 ms + 150 ms margin.
        tokio::time::sleep(Duration::from_millis(350)).await;
        let fresh = b.try_lock(&cfg(name, 60_000, 0)).await.unwrap().expect("expired, free");
        assert!(fresh.fencing_token() > stale.fencing_token());
        let before = records.record(name).await.unwrap().unwrap();

        match stale.extend(Duration::from_secs(600), Duration::ZERO).await {
            Err(Error::LockLost { name: n }) => assert_eq!(n, name),
            other => panic!("stale extend must fail with LockLost, got {other:?}"),
        }
        stale.unlock().await.unwrap();
        let after = records.record(name).await.unwrap().unwrap();
        assert_eq!(before, after, "a stale unlock/extend must not change the row");
        assert!(a.try_lock(&cfg(name, 60_000, 0)).await.unwrap().is_none(), "new holder keeps it");
        fresh.unlock().await.unwrap();
    }

    /// Extend keeps the lock; an extend after expiry fails and does not revive it.
    pub async fn extend_keeps_the_lock_and_expired_extend_fails(
        a: &dyn LockProvider,
        b: &dyn LockProvider,
    ) {
        let mut lock = a.try_lock(&cfg("ext", 300, 0)).await.unwrap().unwrap();
        lock.extend(Duration::from_secs(60), Duration::ZERO).await.unwrap();
        tokio::time::sleep(Duration::from_millis(450)).await;
        assert!(b.try_lock(&cfg("ext", 60_000, 0)).await.unwrap().is_none(), "extended");
        lock.extend(Duration::from_millis(100), Duration::ZERO).await.unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(matches!(
            lock.extend(Duration::from_secs(60), Duration::ZERO).await,
            Err(Error::LockLost { .. })
        ));
        assert!(
            b.try_lock(&cfg("ext", 60_000, 0)).await.unwrap().is_some(),
            "expired extend did not revive it"
        );
    }

    /// Unlock keeps `lock_at_least_for`, counted from the stored `locked_at`.
    pub async fn at_least_is_kept_from_locked_at(
        a: &dyn LockProvider,
        b: &dyn LockProvider,
        records: &dyn RecordAdmin,
    ) {
        let lock = a.try_lock(&cfg("least", 60_000, 700)).await.unwrap().unwrap();
        lock.unlock().await.unwrap();
        let rec = records.record("least").await.unwrap().unwrap();
        // Computed in SQL from the stored locked_at: exact.
        assert_eq!(
            rec.lock_until.duration_since(rec.locked_at).unwrap(),
            Duration::from_millis(700)
        );
        assert!(
            b.try_lock(&cfg("least", 60_000, 0)).await.unwrap().is_none(),
            "held for at least 700 ms"
        );
        tokio::time::sleep(Duration::from_millis(850)).await;
        assert!(b.try_lock(&cfg("least", 60_000, 0)).await.unwrap().is_some());
    }

    /// A deleted row is free and recreated with a larger token; a stale unlock does not free
    /// the new holder's lock; a planted expired record never blocks.
    pub async fn deleted_row_is_recreated_with_a_larger_token(
        a: &dyn LockProvider,
        b: &dyn LockProvider,
        records: &dyn RecordAdmin,
    ) {
        let lock = a.try_lock(&cfg("del", 60_000, 0)).await.unwrap().unwrap();
        let t1 = lock.fencing_token().unwrap();
        assert!(records.delete_record("del").await.unwrap());
        assert!(records.record("del").await.unwrap().is_none());
        let lock2 = b.try_lock(&cfg("del", 60_000, 0)).await.unwrap().expect("deleted row is free");
        let t2 = lock2.fencing_token().unwrap();
        assert!(t2 > t1, "{t2} > {t1}");
        // The stale holder's unlock does not free the new holder's lock.
        lock.unlock().await.unwrap();
        assert!(a.try_lock(&cfg("del", 60_000, 0)).await.unwrap().is_none());
        // A planted expired record never blocks, and tokens keep rising past it.
        records
            .write_record("planted", SystemTime::now() - Duration::from_secs(3600))
            .await
            .unwrap();
        let l3 =
            b.try_lock(&cfg("planted", 60_000, 0)).await.unwrap().expect("expired record is free");
        assert!(l3.fencing_token().unwrap() > t2);
    }

    /// `rounds` acquisitions alternating between the nodes get strictly increasing tokens.
    pub async fn fencing_tokens_strictly_increase(
        a: &dyn LockProvider,
        b: &dyn LockProvider,
        rounds: usize,
    ) {
        let mut last = 0;
        for i in 0..rounds {
            let p = if i % 2 == 0 { a } else { b };
            let lock = p.try_lock(&cfg("fence", 60_000, 0)).await.unwrap().unwrap();
            let t = lock.fencing_token().unwrap();
            assert!(t > last, "{t} > {last}");
            last = t;
            lock.unlock().await.unwrap();
        }
    }

    /// `rounds` rounds in which every node races for a fresh name (each on its own task):
    /// exactly one winner per round.
    pub async fn racing_nodes_have_one_winner_per_round<P: LockProvider>(
        nodes: &[Arc<P>],
        rounds: usize,
    ) {
        for round in 0..rounds {
            let name = format!("race{round}");
            let mut tasks = Vec::new();
            for n in nodes {
                let n = n.clone();
                let c = cfg(&name, 60_000, 0);
                tasks.push(tokio::spawn(async move { n.try_lock(&c).await.map(|l| l.is_some()) }));
            }
            let mut winners = 0;
            for t in tasks {
                if t.await.unwrap().unwrap() {
                    winners += 1;
                }
            }
            assert_eq!(winners, 1, "round {round}");
        }
    }
}

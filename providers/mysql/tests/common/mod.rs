//! Test support: the server URL and a round-trip counting TCP proxy.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(dead_code)]

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// The MariaDB server's URL: `$SHEDLOCK_MARIADB_URL` if set, else a server the launcher starts once per
/// test process (native, on a free port). A missing server fails the test with the launcher's
/// message, never skips it.
pub async fn url() -> String {
    let r = tokio::task::spawn_blocking(|| {
        shedlock_launcher::shared(shedlock_launcher::Backend::MariaDb).map(|s| s.url().to_owned())
    })
    .await
    .expect("launcher task");
    match r {
        Ok(url) => url,
        Err(e) => panic!("MariaDB is not available: {e}"),
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

/// A TCP proxy that counts round trips: a round trip starts each time the client sends after
/// the server has answered (or for the first time).
pub struct CountingProxy {
    pub addr: SocketAddr,
    turns: Arc<AtomicU64>,
}

impl CountingProxy {
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

    pub fn round_trips(&self) -> u64 {
        self.turns.load(Ordering::SeqCst)
    }

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

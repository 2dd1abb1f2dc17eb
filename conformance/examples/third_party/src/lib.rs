//! A toy TCP lock server and its [`shedlock`] provider.
//!
//! This is a worked example of a provider written outside the shedlock-rs workspace and
//! validated by `shedlock-conformance` (see `tests/conformance.rs`). The server speaks one text
//! line per request over TCP:
//!
//! - `LOCK <at_most_ms> <at_least_ms> <name as hex>` → `OK <handle> <token>` or `HELD`
//! - `UNLOCK <handle> <at_least_ms>` → `OK`
//! - `EXTEND <handle> <at_most_ms> <at_least_ms>` → `OK` or `LOST`
//!
//! The server judges time by its own clock (server time) and keeps its records in a
//! [`shedlock_memory::MemoryServer`].
//!
//! The provider is written the way core suggests for any backend that keeps a record per lock:
//! its three storage calls are a [`LeaseStore`] ([`ToyStore`]), and core's [`StoreProvider`]
//! turns them into a [`LockProvider`], adding the name check, owner ids, lease validity, time
//! limits, spans and the `LockLost` of a failed extension.

use std::{
    collections::HashMap,
    io,
    net::SocketAddr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use shedlock::{
    Capabilities, Error, Lock, LockConfig, LockProvider, Result,
    store::{DelegatingProvider, Extension, Granted, LeaseStore, Request, Settings, StoreProvider},
};
use shedlock_memory::{MemoryLockProvider, MemoryServer};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
};

const BACKEND: &str = "toy";
/// The longest lock name the toy accepts, in bytes.
pub const MAX_NAME_LEN: usize = 255;

// ---------------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------------

struct ServerState {
    memory: MemoryServer,
    node: MemoryLockProvider,
    handles: Mutex<HashMap<u64, Lock>>,
    next: AtomicU64,
    kill: watch::Sender<u64>,
}

/// The toy lock server, listening on 127.0.0.1.
pub struct ToyServer {
    addr: SocketAddr,
    state: Arc<ServerState>,
    acceptor: Mutex<Option<JoinHandle<()>>>,
}

impl ToyServer {
    /// Starts a server on an ephemeral port.
    pub async fn start() -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let memory = MemoryServer::new();
        let (kill, _) = watch::channel(0);
        let state = Arc::new(ServerState {
            node: MemoryLockProvider::new(&memory),
            memory,
            handles: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            kill,
        });
        let acceptor = tokio::spawn(accept(listener, state.clone()));
        Ok(Self { addr, state, acceptor: Mutex::new(Some(acceptor)) })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The record store (for the conformance kit's record hooks).
    pub fn memory(&self) -> &MemoryServer {
        &self.state.memory
    }

    /// Restarts the server on the same port: every connection is dropped and every record and
    /// handle forgotten, as a non-durable server restart would.
    pub async fn restart(&self) -> io::Result<()> {
        let old = self.acceptor.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(h) = old {
            h.abort();
            let _ = h.await;
        }
        self.state.kill.send_modify(|k| *k += 1);
        self.state.handles.lock().unwrap_or_else(PoisonError::into_inner).clear();
        self.state.memory.restart();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let listener = TcpListener::bind(self.addr).await?;
        let h = tokio::spawn(accept(listener, self.state.clone()));
        *self.acceptor.lock().unwrap_or_else(PoisonError::into_inner) = Some(h);
        Ok(())
    }
}

impl Drop for ToyServer {
    fn drop(&mut self) {
        self.state.kill.send_modify(|k| *k += 1);
        if let Some(h) = self.acceptor.lock().unwrap_or_else(PoisonError::into_inner).take() {
            h.abort();
        }
    }
}

async fn accept(listener: TcpListener, state: Arc<ServerState>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let state = state.clone();
        let mut kill = state.kill.subscribe();
        tokio::spawn(async move {
            tokio::select! {
                _ = serve(stream, &state) => {}
                _ = kill.changed() => {}
            }
        });
    }
}

async fn serve(stream: TcpStream, state: &ServerState) {
    let _ = stream.set_nodelay(true);
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let reply = answer(state, &line).await;
        if w.write_all(format!("{reply}\n").as_bytes()).await.is_err() {
            return;
        }
    }
}

fn ms(s: Option<&str>) -> Option<Duration> {
    s?.parse().ok().map(Duration::from_millis)
}

async fn answer(state: &ServerState, line: &str) -> String {
    let mut parts = line.split(' ');
    match parts.next() {
        Some("LOCK") => {
            let (Some(most), Some(least), Some(name)) =
                (ms(parts.next()), ms(parts.next()), parts.next())
            else {
                return "ERR malformed LOCK".into();
            };
            let Some(name) = unhex(name) else { return "ERR name is not hex".into() };
            let cfg = match LockConfig::new(name, most, least) {
                Ok(c) => c,
                Err(e) => return format!("ERR {e}"),
            };
            match state.node.try_lock(&cfg).await {
                Ok(Some(lock)) => {
                    let token = lock.fencing_token().unwrap_or(0);
                    let id = state.next.fetch_add(1, Ordering::SeqCst);
                    state.handles.lock().unwrap_or_else(PoisonError::into_inner).insert(id, lock);
                    format!("OK {id} {token}")
                }
                Ok(None) => "HELD".into(),
                Err(e) => format!("ERR {e}"),
            }
        }
        Some("UNLOCK") => {
            let id: Option<u64> = parts.next().and_then(|s| s.parse().ok());
            let lock = id.and_then(|id| {
                state.handles.lock().unwrap_or_else(PoisonError::into_inner).remove(&id)
            });
            if let Some(lock) = lock {
                let _ = lock.unlock().await;
            }
            "OK".into()
        }
        Some("EXTEND") => {
            let id: Option<u64> = parts.next().and_then(|s| s.parse().ok());
            let (Some(id), Some(most), Some(least)) = (id, ms(parts.next()), ms(parts.next()))
            else {
                return "ERR malformed EXTEND".into();
            };
            let lock = state.handles.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
            let Some(mut lock) = lock else { return "LOST".into() };
            let r = lock.extend(most, least).await;
            state.handles.lock().unwrap_or_else(PoisonError::into_inner).insert(id, lock);
            if r.is_ok() { "OK".into() } else { "LOST".into() }
        }
        _ => "ERR unknown command".into(),
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect();
    String::from_utf8(bytes?).ok()
}

// ---------------------------------------------------------------------------------------------
// Provider
// ---------------------------------------------------------------------------------------------

type Conn = BufReader<TcpStream>;

/// A shedlock provider talking to a [`ToyServer`]. Each instance has its own connection.
#[derive(Clone)]
pub struct ToyLockProvider {
    inner: StoreProvider<ToyStore>,
}

impl ToyLockProvider {
    /// A provider for the server at `addr`; connects on first use, reconnects after errors.
    pub fn new(addr: SocketAddr) -> Self {
        let settings = Settings::new(BACKEND).with_timeout(Some(Duration::from_secs(2)));
        let store = ToyStore { addr, conn: Arc::default() };
        Self { inner: StoreProvider::new(store, settings) }
    }

    /// Sets the timeout of each request (default 2 s).
    #[must_use]
    pub fn with_timeout(self, timeout: Duration) -> Self {
        let settings = self.inner.settings().clone().with_timeout(Some(timeout));
        let store = self.inner.store();
        let store = ToyStore { addr: store.addr, conn: Arc::clone(&store.conn) };
        Self { inner: StoreProvider::new(store, settings) }
    }
}

impl DelegatingProvider for ToyLockProvider {
    fn delegate(&self) -> &dyn LockProvider {
        &self.inner
    }
}

/// The toy's storage calls: one request line each, on the provider's one connection.
pub struct ToyStore {
    addr: SocketAddr,
    conn: Arc<tokio::sync::Mutex<Option<Conn>>>,
}

impl ToyStore {
    /// Sends one request line and reads the reply. Cancel-safe: the connection is taken out of
    /// its slot for the call and put back only after a complete reply, so a call dropped midway
    /// (the driver's time limit, a cancelled task) closes its connection instead of leaving a
    /// stale reply for the next call.
    async fn call(&self, request: String) -> Result<String> {
        let mut slot = self.conn.lock().await;
        let conn = slot.take();
        let work = async {
            let mut conn = match conn {
                Some(c) => c,
                None => {
                    let s = TcpStream::connect(self.addr).await?;
                    s.set_nodelay(true)?;
                    BufReader::new(s)
                }
            };
            conn.get_mut().write_all(format!("{request}\n").as_bytes()).await?;
            let mut reply = String::new();
            if conn.read_line(&mut reply).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                ));
            }
            Ok::<_, io::Error>((conn, reply.trim_end().to_owned()))
        };
        let (conn, reply) = work.await.map_err(|e| Error::unavailable(BACKEND, e))?;
        *slot = Some(conn);
        if let Some(msg) = reply.strip_prefix("ERR ") {
            return Err(Error::backend(BACKEND, msg.to_owned()));
        }
        Ok(reply)
    }
}

/// A held lock: the server's handle id.
pub struct Held {
    id: u64,
}

#[async_trait]
impl LeaseStore for ToyStore {
    type Held = Held;

    fn capabilities(&self, _: &Settings) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(true)
            .with_owner_checked(true)
            .with_server_time(true)
            .with_granularity(Duration::from_millis(1))
            .with_max_name_len(Some(MAX_NAME_LEN))
    }

    async fn acquire(&self, req: &Request<'_>) -> Result<Option<Granted<Held>>> {
        let request = format!(
            "LOCK {} {} {}",
            req.lock_at_most_for().as_millis(),
            req.lock_at_least_for().as_millis(),
            hex(req.name())
        );
        let reply = self.call(request).await?;
        if reply == "HELD" {
            return Ok(None);
        }
        let mut parts = reply.split(' ').skip(1);
        let id = parts.next().and_then(|s| s.parse().ok());
        let token = parts.next().and_then(|s| s.parse().ok());
        match (reply.starts_with("OK "), id, token) {
            (true, Some(id), Some(token)) => {
                Ok(Some(Granted::new(Held { id }).with_fencing_token(token)))
            }
            _ => Err(Error::backend(BACKEND, format!("unexpected reply {reply:?}"))),
        }
    }

    async fn release(&self, req: &Request<'_>, held: &mut Held) -> Result<()> {
        let at_least = req.lock_at_least_for().as_millis();
        let reply = self.call(format!("UNLOCK {} {at_least}", held.id)).await?;
        if reply == "OK" {
            Ok(())
        } else {
            Err(Error::backend(BACKEND, format!("unexpected reply {reply:?}")))
        }
    }

    async fn extend(&self, req: &Request<'_>, held: &mut Held) -> Result<Extension> {
        let request = format!(
            "EXTEND {} {} {}",
            held.id,
            req.lock_at_most_for().as_millis(),
            req.lock_at_least_for().as_millis()
        );
        match self.call(request).await?.as_str() {
            "OK" => Ok(Extension::Extended),
            "LOST" => Ok(Extension::Lost),
            other => Err(Error::backend(BACKEND, format!("unexpected reply {other:?}"))),
        }
    }
}

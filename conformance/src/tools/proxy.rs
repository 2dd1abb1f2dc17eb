//! A TCP fault proxy on 127.0.0.1 (C24 and the round-trip figures).
//!
//! It forwards bytes between clients and one upstream address, and on command:
//! - delays every forwarded chunk ([`FaultProxy::set_delay`]);
//! - cuts every existing connection ([`FaultProxy::cut_all`]);
//! - refuses new connections ([`FaultProxy::set_refusing`]): the listener is closed, so clients
//!   get "connection refused"; it re-binds the same port when refusing is turned off;
//! - stalls ([`FaultProxy::set_stalled`]): connections, new ones included, are accepted and kept
//!   open, but nothing is forwarded either way, as a backend that hangs would behave; a client
//!   without timeouts waits forever;
//! - holds answers ([`FaultProxy::set_holding_answers`]): requests reach the backend, but its
//!   answers wait in the proxy until released, so a call stays in flight after the backend acted
//!   on it (this is how the kit makes a stale holder's unlock or extend land around another
//!   instance's takeover deterministically);
//! - holds requests ([`FaultProxy::set_holding_requests`]): what the client sends waits in the
//!   proxy until released, so a request that left the client reaches the backend later (a slow
//!   link, a retransmission, a paused sender), after whatever happened there meanwhile.
//!
//! Data held by a stall or a hold is forwarded when it ends, unless the connection was cut
//! meanwhile ([`FaultProxy::cut_all`] drops it).
//!
//! **Round trips** are counted as client→server turnarounds: on each connection the proxy
//! remembers which direction last carried data; a chunk from the client counts one round trip
//! when the previous chunk on that connection went server→client (or when it is the first
//! chunk). Pipelined requests sent before the answer arrives therefore count once, and a request
//! split into several writes counts once. Data the server sends first (greetings) does not count
//! by itself. Counts are summed over all connections ([`FaultProxy::round_trips`]); measure an
//! operation by the difference before and after it, with nothing else running on the client.

use std::{
    io,
    net::SocketAddr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpSocket, TcpStream},
    sync::watch,
    task::JoinHandle,
};

/// What the proxy currently holds back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Holds {
    /// Nothing is forwarded either way.
    stalled: bool,
    /// Server→client data is held.
    answers: bool,
    /// Client→server data is held.
    requests: bool,
}

impl Holds {
    fn holds(self, dir: u8) -> bool {
        self.stalled || (dir == TO_CLIENT && self.answers) || (dir == TO_SERVER && self.requests)
    }
}

#[derive(Debug)]
struct State {
    upstream: SocketAddr,
    delay_us: AtomicU64,
    round_trips: AtomicU64,
    connections: AtomicU64,
    /// Connections open now, and the most open at once since the last
    /// [`FaultProxy::reset_peak_open`].
    open: AtomicU64,
    peak_open: AtomicU64,
    held: AtomicU64,
    refusing: AtomicBool,
    holds: watch::Sender<Holds>,
    cut: watch::Sender<u64>,
    stop: watch::Sender<bool>,
}

/// A running fault proxy. Stopped when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    state: Arc<State>,
    acceptor: Mutex<Option<JoinHandle<()>>>,
}

fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(128)
}

impl FaultProxy {
    /// Starts a proxy on an ephemeral port of 127.0.0.1 forwarding to `upstream`. Must be called
    /// within a tokio runtime.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        let addr = listener.local_addr()?;
        let (cut, _) = watch::channel(0);
        let (stop, _) = watch::channel(false);
        let (holds, _) = watch::channel(Holds::default());
        let state = Arc::new(State {
            upstream,
            delay_us: AtomicU64::new(0),
            round_trips: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            open: AtomicU64::new(0),
            peak_open: AtomicU64::new(0),
            held: AtomicU64::new(0),
            refusing: AtomicBool::new(false),
            holds,
            cut,
            stop,
        });
        let acceptor = tokio::spawn(accept_loop(listener, state.clone()));
        Ok(Self { addr, state, acceptor: Mutex::new(Some(acceptor)) })
    }

    /// The address clients should connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The upstream address.
    pub fn upstream(&self) -> SocketAddr {
        self.state.upstream
    }

    /// Delays every forwarded chunk, in both directions, by `delay` (zero: none).
    pub fn set_delay(&self, delay: Duration) {
        self.state
            .delay_us
            .store(u64::try_from(delay.as_micros()).unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    /// Closes every existing connection (both sides).
    pub fn cut_all(&self) {
        self.state.cut.send_modify(|e| *e += 1);
    }

    /// Stalls the link (`true`): every connection, existing or new, is kept open (new ones are
    /// accepted), but no byte is forwarded in either direction, as a backend that hangs without
    /// closing anything would behave. `false` forwards what was held and resumes; cut the
    /// connections first ([`cut_all`](Self::cut_all)) to drop it instead.
    pub fn set_stalled(&self, stalled: bool) {
        self.state.holds.send_modify(|h| h.stalled = stalled);
    }

    /// Holds the backend's answers (`true`): client→server data still flows, so the backend
    /// acts on requests, but server→client data waits in the proxy; `false` releases it in order.
    /// A call made meanwhile stays in flight after the backend acted on it.
    pub fn set_holding_answers(&self, hold: bool) {
        self.state.holds.send_modify(|h| h.answers = hold);
    }

    /// Holds the client's requests (`true`): client→server data waits in the proxy, so a
    /// request the client sent meanwhile reaches the backend only when `false` releases it (in
    /// order). Answers still flow.
    pub fn set_holding_requests(&self, hold: bool) {
        self.state.holds.send_modify(|h| h.requests = hold);
    }

    /// Chunks read from either side but held back (by a stall or a hold) right now.
    pub fn held_chunks(&self) -> u64 {
        self.state.held.load(Ordering::SeqCst)
    }

    /// Refuses new connections (closes the listening socket), or accepts them again (re-binds the
    /// same port).
    pub async fn set_refusing(&self, refuse: bool) -> io::Result<()> {
        let was = self.state.refusing.swap(refuse, Ordering::SeqCst);
        if refuse && !was {
            let handle = self.acceptor.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(h) = handle {
                h.abort();
                let _ = h.await;
            }
        } else if !refuse && was {
            let mut tries = 0;
            let listener = loop {
                match bind(self.addr) {
                    Ok(l) => break l,
                    Err(e) if tries < 50 => {
                        tries += 1;
                        tracing::debug!(%e, "re-binding the proxy port");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => return Err(e),
                }
            };
            let h = tokio::spawn(accept_loop(listener, self.state.clone()));
            *self.acceptor.lock().unwrap_or_else(PoisonError::into_inner) = Some(h);
        }
        Ok(())
    }

    /// Client→server turnarounds so far (see the module docs).
    pub fn round_trips(&self) -> u64 {
        self.state.round_trips.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// Client connections open through the proxy now.
    pub fn open_connections(&self) -> u64 {
        self.state.open.load(Ordering::SeqCst)
    }

    /// The most client connections open through the proxy at once since the last
    /// [`reset_peak_open`](Self::reset_peak_open) (or the start).
    pub fn peak_open(&self) -> u64 {
        self.state.peak_open.load(Ordering::SeqCst)
    }

    /// Starts a new [`peak_open`](Self::peak_open) window at the connections open now.
    pub fn reset_peak_open(&self) {
        self.state.peak_open.store(self.state.open.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.state.stop.send_replace(true);
        self.state.cut.send_modify(|e| *e += 1);
        if let Some(h) = self.acceptor.lock().unwrap_or_else(PoisonError::into_inner).take() {
            h.abort();
        }
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    let mut stop = state.stop.subscribe();
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.changed() => return,
        };
        let Ok((client, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        state.connections.fetch_add(1, Ordering::SeqCst);
        let open = state.open.fetch_add(1, Ordering::SeqCst) + 1;
        state.peak_open.fetch_max(open, Ordering::SeqCst);
        let state = state.clone();
        tokio::spawn(async move {
            serve(client, state.clone()).await;
            state.open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

const TO_SERVER: u8 = 1;
const TO_CLIENT: u8 = 2;

async fn serve(client: TcpStream, state: Arc<State>) {
    let mut cut = state.cut.subscribe();
    let server = tokio::select! {
        r = TcpStream::connect(state.upstream) => r,
        _ = cut.changed() => return,
    };
    let Ok(server) = server else { return };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let last = Arc::new(std::sync::atomic::AtomicU8::new(TO_CLIENT));
    let epoch = *cut.borrow();
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = pump(cr, sw, state.clone(), last.clone(), TO_SERVER, epoch);
    let down = pump(sr, cw, state.clone(), last, TO_CLIENT, epoch);
    // The cut is polled first, and each pump checks it again right before forwarding a chunk: a
    // chunk read in the same poll as a cut (on a multi-thread runtime the other side may answer
    // within that poll) is never forwarded.
    tokio::select! {
        biased;
        _ = cut.changed() => {}
        _ = async { tokio::join!(up, down) } => {}
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    state: Arc<State>,
    last: Arc<std::sync::atomic::AtomicU8>,
    dir: u8,
    epoch: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let prev = last.swap(dir, Ordering::SeqCst);
        if dir == TO_SERVER && prev != TO_SERVER {
            state.round_trips.fetch_add(1, Ordering::SeqCst);
        }
        let delay = state.delay_us.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_micros(delay)).await;
        }
        if !wait_while_held(&state, dir, epoch).await {
            break;
        }
        if *state.cut.borrow() != epoch {
            break;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// Waits while a stall or a hold keeps `dir` from forwarding. Returns `false` when the
/// connection was cut (or the proxy stopped) meanwhile: the held chunk is dropped.
async fn wait_while_held(state: &State, dir: u8, epoch: u64) -> bool {
    let mut holds = state.holds.subscribe();
    if !holds.borrow_and_update().holds(dir) {
        return true;
    }
    let mut cut = state.cut.subscribe();
    // Counted while held; the guard also uncounts when the pump is dropped (a cut connection).
    struct Held<'a>(&'a AtomicU64);
    impl Drop for Held<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    state.held.fetch_add(1, Ordering::SeqCst);
    let _held = Held(&state.held);
    loop {
        if *cut.borrow_and_update() != epoch {
            return false;
        }
        if !holds.borrow_and_update().holds(dir) {
            return true;
        }
        tokio::select! {
            r = holds.changed() => if r.is_err() { return false },
            r = cut.changed() => if r.is_err() { return false },
        }
    }
}

/// The names of the batch whose round trips the report gives ([`round_trips_per_batch`]).
pub const BATCH_FIGURE_NAMES: usize = 100;

/// Average client→server turnarounds per [`try_lock_many`](shedlock::LockProvider::try_lock_many)
/// of `names` free names (from `next_config`) with [`BatchOptions`](shedlock::BatchOptions)'s
/// defaults, over `samples` batches, `provider` reaching its backend through `proxy`. Each batch
/// must win every name; its locks are released afterwards, outside the count, and the traffic
/// is allowed to settle before each batch. Pipelined requests written together count once.
///
/// # Errors
/// A failed or hung (10 s) batch, or a name it did not win.
pub async fn round_trips_per_batch(
    proxy: &FaultProxy,
    provider: &dyn shedlock::LockProvider,
    samples: usize,
    names: usize,
    mut next_config: impl FnMut() -> Result<shedlock::LockConfig, &'static str>,
) -> Result<f64, String> {
    let n = samples.max(1);
    let mut total = 0u64;
    for _ in 0..n {
        let configs = (0..names.max(1)).map(|_| next_config()).collect::<Result<Vec<_>, _>>()?;
        settle(proxy).await;
        let before = proxy.round_trips();
        let answers = tokio::time::timeout(
            Duration::from_secs(10),
            provider.try_lock_many(&configs, shedlock::BatchOptions::new()),
        )
        .await
        .map_err(|_| "a batch hung".to_owned())?
        .map_err(|e| e.to_string())?;
        total += proxy.round_trips() - before;
        for answer in answers {
            let lock = answer.map_err(|e| e.to_string())?.ok_or("a free name of the batch held")?;
            tokio::time::timeout(Duration::from_secs(10), lock.unlock())
                .await
                .map_err(|_| "an unlock hung".to_owned())?
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(total as f64 / n as f64)
}

/// Round trips per lock operation, as [`round_trips_per_cycle`] measured them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RoundTrips {
    /// Average client→server turnarounds per successful `try_lock`.
    pub acquire: f64,
    /// Average turnarounds per `unlock`.
    pub release: f64,
    /// Average turnarounds per acquire+release cycle that arrived after a call had returned
    /// (e.g. a pool pinging a connection it got back): off the call path, counted apart.
    pub background: f64,
}

/// Measures [`RoundTrips`] of `provider`, which must reach its backend through `proxy`: three
/// warm-up cycles, then `samples` cycles, each on the next config from `next_config` (a free
/// name each time). The traffic is allowed to settle before each call, so that what a client
/// sends after a call returned is not counted against the next call. This is the conformance
/// report's figure; benchmarks call it too.
///
/// # Errors
/// A failed or hung (10 s) call, a name that was not free, or an instance that never connected
/// through the proxy.
pub async fn round_trips_per_cycle(
    proxy: &FaultProxy,
    provider: &dyn shedlock::LockProvider,
    samples: usize,
    mut next_config: impl FnMut() -> Result<shedlock::LockConfig, &'static str>,
) -> Result<RoundTrips, String> {
    async fn bounded<T>(fut: impl std::future::Future<Output = T>) -> Result<T, String> {
        tokio::time::timeout(Duration::from_secs(10), fut).await.map_err(|_| "call hung".to_owned())
    }
    for _ in 0..3 {
        let c = next_config()?;
        let l = bounded(provider.try_lock(&c))
            .await?
            .map_err(|e| e.to_string())?
            .ok_or("fresh name held")?;
        bounded(l.unlock()).await?.map_err(|e| e.to_string())?;
    }
    if proxy.connections() == 0 {
        return Err("the instance did not connect through the proxy".into());
    }
    let n = samples.max(1);
    let (mut acq, mut rel, mut background) = (0u64, 0u64, 0u64);
    for _ in 0..n {
        let c = next_config()?;
        settle(proxy).await;
        let r0 = proxy.round_trips();
        let l = bounded(provider.try_lock(&c))
            .await?
            .map_err(|e| e.to_string())?
            .ok_or("fresh name held")?;
        let r1 = proxy.round_trips();
        settle(proxy).await;
        let r2 = proxy.round_trips();
        bounded(l.unlock()).await?.map_err(|e| e.to_string())?;
        let r3 = proxy.round_trips();
        settle(proxy).await;
        let r4 = proxy.round_trips();
        acq += r1 - r0;
        rel += r3 - r2;
        background += (r2 - r1) + (r4 - r3);
    }
    let n = n as f64;
    Ok(RoundTrips {
        acquire: acq as f64 / n,
        release: rel as f64 / n,
        background: background as f64 / n,
    })
}

/// Waits until no new round trip has started for 20 ms (at most about 1 s).
async fn settle(proxy: &FaultProxy) {
    for _ in 0..50 {
        let before = proxy.round_trips();
        tokio::time::sleep(Duration::from_millis(20)).await;
        if proxy.round_trips() == before {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// An echo server that answers each line with the same line.
    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else { return };
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    loop {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if s.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    async fn ask(s: &mut TcpStream, msg: &[u8]) -> io::Result<Vec<u8>> {
        s.write_all(msg).await?;
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).await?;
        Ok(got)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_counts_delays_cuts_and_refuses() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();

        // Pass, and count one round trip per request/response turnaround.
        assert_eq!(ask(&mut c, b"ping").await.unwrap(), b"ping");
        assert_eq!(ask(&mut c, b"pong").await.unwrap(), b"pong");
        assert_eq!(proxy.round_trips(), 2);
        // Two writes before reading the answer: one turnaround.
        c.write_all(b"ab").await.unwrap();
        c.write_all(b"cd").await.unwrap();
        let mut got = [0u8; 4];
        c.read_exact(&mut got).await.unwrap();
        assert!(proxy.round_trips() == 3 || proxy.round_trips() == 4, "{}", proxy.round_trips());
        assert_eq!(proxy.connections(), 1);

        // Delay.
        proxy.set_delay(Duration::from_millis(100));
        let t = Instant::now();
        ask(&mut c, b"slow").await.unwrap();
        assert!(t.elapsed() >= Duration::from_millis(200), "{:?}", t.elapsed());
        proxy.set_delay(Duration::ZERO);

        // Cut existing connections: the client sees EOF or an error.
        proxy.cut_all();
        let r = tokio::time::timeout(Duration::from_secs(2), ask(&mut c, b"x")).await.unwrap();
        assert!(r.is_err(), "a cut connection still answered");

        // Refuse new connections, then accept again on the same port.
        proxy.set_refusing(true).await.unwrap();
        let e = TcpStream::connect(proxy.addr()).await;
        assert!(e.is_err(), "connection accepted while refusing");
        proxy.set_refusing(false).await.unwrap();
        let mut c2 = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(ask(&mut c2, b"back").await.unwrap(), b"back");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn open_connections_and_their_peak_follow_clients_closing_and_a_reset() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut a = TcpStream::connect(proxy.addr()).await.unwrap();
        let mut b = TcpStream::connect(proxy.addr()).await.unwrap();
        // An answer through each proves the proxy accepted both.
        assert_eq!(ask(&mut a, b"a").await.unwrap(), b"a");
        assert_eq!(ask(&mut b, b"b").await.unwrap(), b"b");
        assert_eq!((proxy.open_connections(), proxy.peak_open()), (2, 2));
        drop(b);
        // The close reaches the proxy asynchronously: wait for it, bounded.
        let deadline = Instant::now() + Duration::from_secs(5);
        while proxy.open_connections() != 1 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(proxy.open_connections(), 1, "the closed client is still counted open");
        assert_eq!(proxy.peak_open(), 2, "the peak keeps the most open at once");
        proxy.reset_peak_open();
        assert_eq!(proxy.peak_open(), 1, "a reset starts from the connections open now");
        assert_eq!(ask(&mut a, b"still").await.unwrap(), b"still");
        assert_eq!(proxy.connections(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stall_accepts_and_never_answers_until_cut() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(ask(&mut c, b"one").await.unwrap(), b"one");
        proxy.set_stalled(true);
        // An existing connection: no answer.
        let r = tokio::time::timeout(Duration::from_millis(300), ask(&mut c, b"two")).await;
        assert!(r.is_err(), "a stalled link answered: {r:?}");
        // A new connection is accepted, and never answered either.
        let mut d = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(proxy.addr()))
            .await
            .expect("a stalled proxy must accept connections")
            .unwrap();
        let r = tokio::time::timeout(Duration::from_millis(300), ask(&mut d, b"new")).await;
        assert!(r.is_err(), "a new connection to a stalled link answered: {r:?}");
        assert!(proxy.held_chunks() >= 2, "{}", proxy.held_chunks());
        // Cut, then resume: the held data is dropped, new connections work.
        proxy.cut_all();
        proxy.set_stalled(false);
        let r = tokio::time::timeout(Duration::from_secs(2), ask(&mut c, b"x")).await.unwrap();
        assert!(r.is_err(), "a cut connection still answered");
        let mut e = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(ask(&mut e, b"back").await.unwrap(), b"back");
        // The cut connections' held chunks are dropped (asynchronously, with their tasks).
        let t = Instant::now();
        while proxy.held_chunks() != 0 {
            assert!(
                t.elapsed() < Duration::from_secs(2),
                "{} chunks still held",
                proxy.held_chunks()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn held_answers_arrive_after_release_and_requests_get_through() {
        // The upstream counts what it received, so the test sees the request arrive while its
        // answer is held.
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = l.local_addr().unwrap();
        let seen = Arc::new(AtomicU64::new(0));
        let seen2 = seen.clone();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 64];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        seen2.fetch_add(n as u64, Ordering::SeqCst);
                        let _ = s.write_all(&buf[..n]).await;
                    }
                }
            }
        });
        let proxy = FaultProxy::start(upstream).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.set_holding_answers(true);
        let call = tokio::spawn(async move { ask(&mut c, b"held").await.map(|v| (v, c)) });
        let t = Instant::now();
        while seen.load(Ordering::SeqCst) < 4 {
            assert!(t.elapsed() < Duration::from_secs(2), "the request never reached upstream");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!call.is_finished(), "the answer was not held");
        assert_eq!(proxy.held_chunks(), 1);
        proxy.set_holding_answers(false);
        let (got, _c) =
            tokio::time::timeout(Duration::from_secs(2), call).await.unwrap().unwrap().unwrap();
        assert_eq!(got, b"held");
    }
}

//! Connections: one meta-protocol exchange at a time on a tokio `TcpStream` (or TLS over one,
//! with the `tls` feature), and the provider's small pool of them.

use std::{
    fmt,
    future::Future,
    io,
    pin::Pin,
    sync::{Mutex, PoisonError},
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, ReadBuf},
    net::TcpStream,
    sync::{Semaphore, SemaphorePermit, TryAcquireError},
    time::{Instant, Sleep},
};

use crate::{
    proto::{Line, MAX_LINE_LEN, MAX_STATS_LINES, MAX_VALUE_LEN, Reply, parse_line},
    tls::{self, Tls},
};

/// Why an exchange failed. Every failure leaves the connection in an unknown state: it is
/// discarded, never reused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    /// The connection could not be opened, or broke (reset, closed, EOF mid-reply).
    #[error("{0}")]
    Io(io::Error),
    /// The TLS handshake or session failed for a reason a retry does not change (a certificate
    /// not accepted, a server that does not speak TLS, a refused client certificate): what to
    /// change.
    #[error("{0}")]
    Tls(String),
    /// The server answered with an error line (`ERROR`, `CLIENT_ERROR …`, `SERVER_ERROR …`).
    #[error("the server answered {0:?}")]
    Server(String),
    /// The server answered something this client does not understand.
    #[error("unexpected reply {0:?}")]
    Protocol(String),
    /// The server sent more than this client ever reads: a value block over
    /// [`MAX_VALUE_LEN`], a line over [`MAX_LINE_LEN`], a `stats` reply over
    /// [`MAX_STATS_LINES`] lines. Nothing was allocated for it; the connection is dropped.
    #[error("{0}")]
    Oversized(String),
    /// The call's deadline passed first.
    #[error("the deadline passed")]
    TimedOut,
}

impl From<io::Error> for ConnError {
    /// A TLS verdict inside the I/O error is [`ConnError::Tls`]; anything else
    /// [`ConnError::Io`].
    fn from(e: io::Error) -> Self {
        match tls::failure(&e) {
            Some(what) => ConnError::Tls(what),
            None => ConnError::Io(e),
        }
    }
}

/// What a connection carries its bytes over: TCP, or TLS over TCP.
enum Stream {
    Plain(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Stream {
    /// Connects to `address`, then, with `tls`, runs the TLS handshake.
    async fn connect(address: &str, tls: Option<&Tls>) -> Result<Self, ConnError> {
        let tcp = TcpStream::connect(address).await?;
        tcp.set_nodelay(true)?;
        match tls {
            None => Ok(Stream::Plain(tcp)),
            #[cfg(feature = "tls")]
            Some(tls) => Ok(Stream::Tls(Box::new(tls.connect(tcp).await?))),
            #[cfg(not(feature = "tls"))]
            Some(never) => match *never {},
        }
    }

    /// The TCP connection underneath.
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.get_ref().0,
        }
    }

    fn is_tls(&self) -> bool {
        !matches!(self, Stream::Plain(_))
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Runs `f` until `deadline` (none: no limit).
async fn until<F: Future>(deadline: Option<Instant>, f: F) -> Result<F::Output, ConnError> {
    match deadline {
        None => Ok(f.await),
        Some(d) => tokio::time::timeout_at(d, f).await.map_err(|_| ConnError::TimedOut),
    }
}

/// Which memcached process a connection talks to: its pid and its start time (Unix seconds).
/// memcached loses every item when it restarts, and its CAS counter starts again from 1, so a
/// CAS value is only meaningful for the process that issued it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Epoch {
    pid: u32,
    started: i64,
}

/// One connection: requests are written whole, then one reply is read whole.
pub(crate) struct Conn {
    io: Io,
    epoch: Option<Epoch>,
    /// The deadline timer of this connection's requests, re-armed for each one. Moving a
    /// registered tokio timer to a later deadline only updates it in place, where a fresh
    /// `tokio::time::timeout` per request registers a new timer each time (and may wake the
    /// timer driver): that cost as much as the request itself on a loopback server.
    timer: Pin<Box<Sleep>>,
}

struct Io {
    stream: BufReader<Stream>,
    line: Vec<u8>,
}

impl Conn {
    /// Opens a connection (`host:port`; over TLS with `tls`), without learning its epoch.
    pub(crate) async fn open(address: &str, tls: Option<&Tls>) -> Result<Self, ConnError> {
        let stream = Stream::connect(address, tls).await?;
        let far = Instant::now() + Duration::from_secs(86_400);
        Ok(Self {
            io: Io { stream: BufReader::new(stream), line: Vec::with_capacity(64) },
            epoch: None,
            timer: Box::pin(tokio::time::sleep_until(far)),
        })
    }

    /// Opens a connection and asks the server who it is (`stats`: pid, time, uptime).
    pub(crate) async fn open_with_epoch(
        address: &str,
        tls: Option<&Tls>,
    ) -> Result<Self, ConnError> {
        let mut conn = Self::open(address, tls).await?;
        conn.epoch = Some(conn.io.stats_epoch().await.map_err(|e| plaintext_hint(&conn, e))?);
        Ok(conn)
    }

    /// The process this connection talks to (set by [`open_with_epoch`](Self::open_with_epoch)).
    pub(crate) fn epoch(&self) -> Option<Epoch> {
        self.epoch
    }

    /// Sends one request (command line and data block, CRLF-terminated) and reads its reply,
    /// unless `deadline` passes first ([`ConnError::TimedOut`]; the connection must then be
    /// dropped). An error line is [`ConnError::Server`].
    pub(crate) async fn request(
        &mut self,
        request: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Reply, ConnError> {
        let Some(deadline) = deadline else { return self.io.request(request).await };
        self.timer.as_mut().reset(deadline);
        tokio::select! {
            biased;
            r = self.io.request(request) => r,
            () = self.timer.as_mut() => Err(ConnError::TimedOut),
        }
    }

    /// Sends `requests` in one write (a pipeline: one round trip) and reads their replies, in
    /// order, unless `deadline` passes first ([`ConnError::TimedOut`]). On any error the
    /// connection may hold unread replies: it must then be dropped.
    pub(crate) async fn pipeline(
        &mut self,
        requests: &[Vec<u8>],
        deadline: Option<Instant>,
    ) -> Result<Vec<Reply>, ConnError> {
        let Some(deadline) = deadline else { return self.io.pipeline(requests).await };
        self.timer.as_mut().reset(deadline);
        tokio::select! {
            biased;
            r = self.io.pipeline(requests) => r,
            () = self.timer.as_mut() => Err(ConnError::TimedOut),
        }
    }

    /// Whether an idle connection still looks usable: nothing to read and not closed by the
    /// server (a restarted or stopped server, or a cut connection, closes it).
    ///
    /// On a TLS connection the probe looks at the TCP connection underneath: any byte there
    /// (a `close_notify`, or anything else an idle connection should not receive) or its end
    /// discards the connection, so the byte the probe may take is never missed.
    fn is_idle_and_open(&self) -> bool {
        if !self.io.stream.buffer().is_empty() {
            return false;
        }
        let mut probe = [0u8; 1];
        matches!(self.io.stream.get_ref().tcp().try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// `e`, from the first exchange (`stats`) of a plaintext connection, with a hint when the
/// server closed or reset the connection without a byte of reply: that is what memcached's
/// TLS listener does to a client that does not speak TLS. The error stays [`ConnError::Io`]
/// (`Error::Unavailable`): a server going away looks the same from here.
fn plaintext_hint(conn: &Conn, e: ConnError) -> ConnError {
    match e {
        ConnError::Io(e)
            if !conn.io.stream.get_ref().is_tls()
                && matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
                ) =>
        {
            ConnError::Io(io::Error::new(
                e.kind(),
                format!(
                    "{e}, before any reply to the first request of a new connection (if this \
                     is memcached's TLS listener (-Z), enable TLS: the `tls` feature and \
                     tls_ca_pem)"
                ),
            ))
        }
        e => e,
    }
}

impl Io {
    async fn stats_epoch(&mut self) -> Result<Epoch, ConnError> {
        self.write(b"stats\r\n").await?;
        let (mut pid, mut time, mut uptime) = (None, None, None);
        for n in 0.. {
            if n == MAX_STATS_LINES {
                return Err(ConnError::Oversized(format!(
                    "the server's stats reply went on past {MAX_STATS_LINES} lines without END"
                )));
            }
            let line = self.read_line().await?;
            let text = String::from_utf8_lossy(line);
            if text == "END" {
                break;
            }
            let mut t = text.split(' ');
            match (t.next(), t.next(), t.next()) {
                (Some("STAT"), Some("pid"), Some(v)) => pid = v.parse::<u32>().ok(),
                (Some("STAT"), Some("time"), Some(v)) => time = v.parse::<i64>().ok(),
                (Some("STAT"), Some("uptime"), Some(v)) => uptime = v.parse::<i64>().ok(),
                (Some("STAT"), _, _) => {}
                _ => return Err(ConnError::Protocol(text.into_owned())),
            }
        }
        match (pid, time, uptime) {
            // `time` and `uptime` are read from one clock sample, so their difference is the
            // same for every `stats` of one process.
            (Some(pid), Some(time), Some(uptime)) => match time.checked_sub(uptime) {
                Some(started) => Ok(Epoch { pid, started }),
                None => Err(ConnError::Protocol(format!("stats: time {time}, uptime {uptime}"))),
            },
            _ => Err(ConnError::Protocol("stats without pid, time and uptime".into())),
        }
    }

    /// Reads one line, without its CRLF: at most [`MAX_LINE_LEN`] bytes before it, whatever
    /// the server sends.
    async fn read_line(&mut self) -> Result<&[u8], ConnError> {
        self.line.clear();
        let limit = MAX_LINE_LEN + 2;
        let n = (&mut self.stream).take(limit as u64).read_until(b'\n', &mut self.line).await?;
        if n == limit && !self.line.ends_with(b"\n") {
            let start = String::from_utf8_lossy(&self.line[..64]).into_owned();
            return Err(ConnError::Oversized(format!(
                "the server sent a line longer than {MAX_LINE_LEN} bytes, starting {start:?}"
            )));
        }
        if n == 0 || !self.line.ends_with(b"\r\n") {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed").into());
        }
        self.line.truncate(self.line.len() - 2);
        Ok(&self.line)
    }

    /// Writes `bytes` whole and flushes them (a TLS stream may hold them back otherwise).
    async fn write(&mut self, bytes: &[u8]) -> Result<(), ConnError> {
        let stream = self.stream.get_mut();
        stream.write_all(bytes).await?;
        stream.flush().await?;
        Ok(())
    }

    async fn request(&mut self, request: &[u8]) -> Result<Reply, ConnError> {
        self.write(request).await?;
        self.read_reply().await
    }

    /// Writes `requests` at once, then reads one reply each, in order.
    async fn pipeline(&mut self, requests: &[Vec<u8>]) -> Result<Vec<Reply>, ConnError> {
        self.write(&requests.concat()).await?;
        let mut replies = Vec::with_capacity(requests.len());
        for _ in requests {
            replies.push(self.read_reply().await?);
        }
        Ok(replies)
    }

    /// Reads one reply: its line, and the value block it announces (bounded).
    async fn read_reply(&mut self) -> Result<Reply, ConnError> {
        let line = self.read_line().await?;
        match parse_line(line) {
            Line::Error(e) => Err(ConnError::Server(e)),
            Line::Meta(reply, None) => Ok(reply),
            Line::Meta(reply, Some(len)) if len > MAX_VALUE_LEN => {
                Err(ConnError::Oversized(format!(
                    "the server announced a value of {len} bytes ({} {len}); this client reads \
                     at most {MAX_VALUE_LEN} (a lock record is far smaller)",
                    reply.code_str()
                )))
            }
            Line::Meta(mut reply, Some(len)) => {
                let mut value = vec![0; len + 2];
                self.stream.read_exact(&mut value).await?;
                if !value.ends_with(b"\r\n") {
                    return Err(ConnError::Protocol("value block without CRLF".into()));
                }
                value.truncate(len);
                reply.value = Some(value);
                Ok(reply)
            }
        }
    }
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn")
            .field("peer", &self.io.stream.get_ref().tcp().peer_addr().ok())
            .field("tls", &self.io.stream.get_ref().is_tls())
            .field("epoch", &self.epoch)
            .finish()
    }
}

/// The provider's connections: at most `max` open at once; idle ones are kept for reuse.
pub(crate) struct Pool {
    address: String,
    tls: Option<Tls>,
    idle: Mutex<Vec<Conn>>,
    permits: Semaphore,
    max: usize,
}

impl Pool {
    pub(crate) fn new(address: String, tls: Option<Tls>, max: usize) -> Self {
        Self { address, tls, idle: Mutex::new(Vec::new()), permits: Semaphore::new(max), max }
    }

    pub(crate) fn address(&self) -> &str {
        &self.address
    }

    /// The TLS every connection uses, if any.
    pub(crate) fn tls(&self) -> Option<&Tls> {
        self.tls.as_ref()
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// A connection for one exchange: an idle one that is still open, or a new one. Give it
    /// back with [`Checkout::done`] once its reply has been read whole; a checkout dropped
    /// earlier (an error, a timeout, a cancelled call) closes its connection.
    ///
    /// Waiting for a free connection and connecting end at `deadline`.
    pub(crate) async fn checkout(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Checkout<'_>, ConnError> {
        let closed = || ConnError::Io(io::Error::other("the connection pool is closed"));
        let permit = match self.permits.try_acquire() {
            Ok(p) => p,
            Err(TryAcquireError::NoPermits) => {
                until(deadline, self.permits.acquire()).await?.map_err(|_| closed())?
            }
            Err(TryAcquireError::Closed) => return Err(closed()),
        };
        loop {
            let conn = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
            match conn {
                Some(c) if c.is_idle_and_open() => {
                    return Ok(Checkout { pool: self, conn: c, _permit: permit });
                }
                Some(c) => {
                    tracing::debug!(conn = ?c, "discarding a closed idle memcached connection")
                }
                None => break,
            }
        }
        let conn = until(deadline, Conn::open_with_epoch(&self.address, self.tls())).await??;
        Ok(Checkout { pool: self, conn, _permit: permit })
    }
}

/// A connection taken from the [`Pool`] for one exchange.
pub(crate) struct Checkout<'a> {
    pool: &'a Pool,
    conn: Conn,
    _permit: SemaphorePermit<'a>,
}

impl Checkout<'_> {
    pub(crate) fn conn(&mut self) -> &mut Conn {
        &mut self.conn
    }

    /// The exchange completed: the connection goes back to the pool.
    pub(crate) fn done(self) {
        self.pool.idle.lock().unwrap_or_else(PoisonError::into_inner).push(self.conn);
    }
}

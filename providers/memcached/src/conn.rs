//! Connections: one meta-protocol exchange at a time on a tokio `TcpStream`, and the provider's
//! small pool of them.

use std::{
    fmt,
    future::Future,
    io,
    pin::Pin,
    sync::{Mutex, PoisonError},
    time::Duration,
};

use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::TcpStream,
    sync::{Semaphore, SemaphorePermit, TryAcquireError},
    time::{Instant, Sleep},
};

use crate::proto::{Line, MAX_LINE_LEN, MAX_STATS_LINES, MAX_VALUE_LEN, Reply, parse_line};

/// Why an exchange failed. Every failure leaves the connection in an unknown state: it is
/// discarded, never reused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    /// The connection could not be opened, or broke (reset, closed, EOF mid-reply).
    #[error("{0}")]
    Io(#[from] io::Error),
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
    stream: BufReader<TcpStream>,
    line: Vec<u8>,
}

impl Conn {
    /// Opens a connection (`host:port`), without learning its epoch.
    pub(crate) async fn open(address: &str) -> Result<Self, ConnError> {
        let stream = TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        let far = Instant::now() + Duration::from_secs(86_400);
        Ok(Self {
            io: Io { stream: BufReader::new(stream), line: Vec::with_capacity(64) },
            epoch: None,
            timer: Box::pin(tokio::time::sleep_until(far)),
        })
    }

    /// Opens a connection and asks the server who it is (`stats`: pid, time, uptime).
    pub(crate) async fn open_with_epoch(address: &str) -> Result<Self, ConnError> {
        let mut conn = Self::open(address).await?;
        conn.epoch = Some(conn.io.stats_epoch().await?);
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

    /// Whether an idle connection still looks usable: nothing to read and not closed by the
    /// server (a restarted or stopped server, or a cut connection, closes it).
    fn is_idle_and_open(&self) -> bool {
        if !self.io.stream.buffer().is_empty() {
            return false;
        }
        let mut probe = [0u8; 1];
        matches!(self.io.stream.get_ref().try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

impl Io {
    async fn stats_epoch(&mut self) -> Result<Epoch, ConnError> {
        self.stream.get_mut().write_all(b"stats\r\n").await?;
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

    async fn request(&mut self, request: &[u8]) -> Result<Reply, ConnError> {
        self.stream.get_mut().write_all(request).await?;
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
            .field("peer", &self.io.stream.get_ref().peer_addr().ok())
            .field("epoch", &self.epoch)
            .finish()
    }
}

/// The provider's connections: at most `max` open at once; idle ones are kept for reuse.
pub(crate) struct Pool {
    address: String,
    idle: Mutex<Vec<Conn>>,
    permits: Semaphore,
    max: usize,
}

impl Pool {
    pub(crate) fn new(address: String, max: usize) -> Self {
        Self { address, idle: Mutex::new(Vec::new()), permits: Semaphore::new(max), max }
    }

    pub(crate) fn address(&self) -> &str {
        &self.address
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
        let conn = until(deadline, Conn::open_with_epoch(&self.address)).await??;
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

//! Connections: one meta-protocol exchange at a time on a tokio `TcpStream`, and the provider's
//! small pool of them.

use std::{
    fmt, io,
    sync::{Mutex, PoisonError},
};

use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::TcpStream,
    sync::{Semaphore, SemaphorePermit},
};

use crate::proto::{Line, Reply, parse_line};

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
    stream: BufReader<TcpStream>,
    line: Vec<u8>,
    epoch: Option<Epoch>,
}

impl Conn {
    /// Opens a connection (`host:port`), without learning its epoch.
    pub(crate) async fn open(address: &str) -> Result<Self, ConnError> {
        let stream = TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        Ok(Self { stream: BufReader::new(stream), line: Vec::with_capacity(64), epoch: None })
    }

    /// Opens a connection and asks the server who it is (`stats`: pid, time, uptime).
    pub(crate) async fn open_with_epoch(address: &str) -> Result<Self, ConnError> {
        let mut conn = Self::open(address).await?;
        conn.epoch = Some(conn.stats_epoch().await?);
        Ok(conn)
    }

    /// The process this connection talks to (set by [`open_with_epoch`](Self::open_with_epoch)).
    pub(crate) fn epoch(&self) -> Option<Epoch> {
        self.epoch
    }

    async fn stats_epoch(&mut self) -> Result<Epoch, ConnError> {
        self.stream.get_mut().write_all(b"stats\r\n").await?;
        let (mut pid, mut time, mut uptime) = (None, None, None);
        loop {
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
            (Some(pid), Some(time), Some(uptime)) => Ok(Epoch { pid, started: time - uptime }),
            _ => Err(ConnError::Protocol("stats without pid, time and uptime".into())),
        }
    }

    /// Reads one line, without its CRLF.
    async fn read_line(&mut self) -> Result<&[u8], ConnError> {
        self.line.clear();
        let n = self.stream.read_until(b'\n', &mut self.line).await?;
        if n == 0 || !self.line.ends_with(b"\r\n") {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed").into());
        }
        self.line.truncate(self.line.len() - 2);
        Ok(&self.line)
    }

    /// Sends one request (command line and data block, CRLF-terminated) and reads its reply.
    /// An error line is [`ConnError::Server`].
    pub(crate) async fn request(&mut self, request: &[u8]) -> Result<Reply, ConnError> {
        self.stream.get_mut().write_all(request).await?;
        let line = self.read_line().await?;
        match parse_line(line) {
            Line::Error(e) => Err(ConnError::Server(e)),
            Line::Meta(reply, None) => Ok(reply),
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

    /// Whether an idle connection still looks usable: nothing to read and not closed by the
    /// server (a restarted or stopped server, or a cut connection, closes it).
    fn is_idle_and_open(&self) -> bool {
        if !self.stream.buffer().is_empty() {
            return false;
        }
        let mut probe = [0u8; 1];
        matches!(self.stream.get_ref().try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn")
            .field("peer", &self.stream.get_ref().peer_addr().ok())
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
    pub(crate) async fn checkout(&self) -> Result<Checkout<'_>, ConnError> {
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| ConnError::Io(io::Error::other("the connection pool is closed")))?;
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
        let conn = Conn::open_with_epoch(&self.address).await?;
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

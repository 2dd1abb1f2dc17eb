//! Readiness probes that speak each server's own protocol: a server is ready when it answers a
//! real request (PostgreSQL: a trusted login reaching ReadyForQuery; MariaDB: a login and
//! COM_PING; Redis: PING; memcached: version; NATS: INFO plus the JetStream health endpoint;
//! MongoDB: `hello`; DynamoDB: ListTables; S3: ListBuckets; etcd: `/health`; ZooKeeper: `srvr`
//! reporting a Mode), not merely when its port accepts connections.
//!
//! A probe trusts nothing the server sends: every length it reads is checked against
//! [`MAX_REPLY`] before anything is allocated for it, every line stops at [`MAX_LINE`], every
//! loop over messages at [`MAX_MESSAGES`], and a whole probe at [`PROBE_DEADLINE`] however
//! slowly the server drips its bytes. A server over a limit fails the probe with a message that
//! says what it sent.

use std::{
    io::{self, Read, Write},
    net::{SocketAddr, TcpStream},
    time::{Duration, Instant},
};

/// One readiness probe.
#[derive(Debug, Clone)]
pub(crate) enum Probe {
    Postgres(SocketAddr),
    MySql(SocketAddr),
    Redis(SocketAddr),
    Memcached(SocketAddr),
    Nats {
        client: SocketAddr,
        monitor: SocketAddr,
    },
    MongoDb(SocketAddr),
    DynamoDb(SocketAddr),
    S3(SocketAddr),
    Etcd(SocketAddr),
    ZooKeeper(SocketAddr),
    /// Any server whose `GET path` answers 200 (MinIO's readiness endpoint).
    HttpOk {
        addr: SocketAddr,
        path: &'static str,
    },
    /// A secure launch's server, probed with its own client over TLS and with credentials
    /// (`pg_isready`, `mariadb-admin ping`, `curl /health`).
    Command(Box<crate::secure::CommandProbe>),
    /// A secure launch's Redis or Valkey node: `PING` through `redis-cli` (or `valkey-cli`)
    /// over TLS as the administrator.
    RedisTls(Box<crate::secure::RedisCli>),
}

const IO_TIMEOUT: Duration = Duration::from_secs(3);

/// The longest time one probe spends on its connection, however the server paces its bytes.
const PROBE_DEADLINE: Duration = Duration::from_secs(10);

/// The longest line a probe reads (Redis, memcached, NATS `INFO`): 64 KiB. A NATS `INFO` line,
/// the longest of them, is a few KiB.
const MAX_LINE: usize = 64 * 1024;

/// The largest reply a probe reads whole or allocates for from a server-sent length: 1 MiB (an
/// HTTP response, a Redis bulk string, ZooKeeper's `srvr`, a PostgreSQL message, a MySQL packet,
/// a MongoDB reply). The replies a probe expects are a few KiB at most.
const MAX_REPLY: usize = 1 << 20;

/// The most messages a probe reads before the one it waits for (PostgreSQL sends about twenty
/// before ReadyForQuery; MySQL one authentication switch or two).
const MAX_MESSAGES: usize = 256;

/// A probe's connection: reads and writes end at the probe's deadline, each within
/// [`IO_TIMEOUT`].
struct Wire {
    s: TcpStream,
    deadline: Instant,
}

impl Wire {
    /// The time left, at most [`IO_TIMEOUT`]; an error once the deadline has passed.
    fn left(&self) -> io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the probe's {PROBE_DEADLINE:?} deadline passed"),
            ));
        }
        Ok(left.min(IO_TIMEOUT))
    }

    /// `e`, or the deadline's error if `e` is a time-out that reached the deadline.
    fn timed_out(&self, e: io::Error) -> io::Error {
        let timeout = matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut);
        match self.left() {
            Err(deadline) if timeout => deadline,
            _ => e,
        }
    }
}

impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.s.set_read_timeout(Some(self.left()?))?;
        self.s.read(buf).map_err(|e| self.timed_out(e))
    }
}

impl Write for Wire {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.s.set_write_timeout(Some(self.left()?))?;
        self.s.write(buf).map_err(|e| self.timed_out(e))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.s.flush()
    }
}

fn connect(addr: SocketAddr) -> Result<Wire, String> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = s.set_nodelay(true);
    Ok(Wire { s, deadline: Instant::now() + PROBE_DEADLINE })
}

/// `len`, a length the server sent for `what`, if it is within [`MAX_REPLY`].
fn bounded(what: &str, len: usize) -> Result<usize, String> {
    if len > MAX_REPLY {
        Err(format!(
            "the server announced a {what} of {len} bytes; a probe reads at most {MAX_REPLY}"
        ))
    } else {
        Ok(len)
    }
}

/// Reads until the server closes the connection, at most [`MAX_REPLY`] bytes: more is an error.
fn read_to_close(s: &mut Wire, what: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let r = Read::by_ref(s).take(MAX_REPLY as u64 + 1).read_to_end(&mut out);
    if out.len() > MAX_REPLY {
        return Err(format!("the server sent a {what} longer than {MAX_REPLY} bytes"));
    }
    match r {
        Err(e) if out.is_empty() => Err(format!("read {what}: {e}")),
        _ => Ok(out),
    }
}

fn io(what: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl Probe {
    /// The client address the probe talks to.
    pub(crate) fn addr(&self) -> SocketAddr {
        match self {
            Probe::Postgres(a)
            | Probe::MySql(a)
            | Probe::Redis(a)
            | Probe::Memcached(a)
            | Probe::MongoDb(a)
            | Probe::DynamoDb(a)
            | Probe::S3(a)
            | Probe::Etcd(a)
            | Probe::ZooKeeper(a) => *a,
            Probe::Nats { client, .. } => *client,
            Probe::HttpOk { addr, .. } => *addr,
            Probe::Command(c) => c.addr,
            Probe::RedisTls(c) => c.addr,
        }
    }

    /// `Ok(())` when the server answered a real request; `Err` says what it answered instead.
    pub(crate) fn check(&self) -> Result<(), String> {
        match self {
            Probe::Command(c) => c.check(),
            Probe::RedisTls(c) => c.ping(),
            Probe::Postgres(a) => postgres(*a),
            Probe::MySql(a) => mysql(*a),
            Probe::Redis(a) => {
                let reply = line_exchange(*a, b"*1\r\n$4\r\nPING\r\n")?;
                expect_prefix(&reply, "+PONG")
            }
            Probe::Memcached(a) => {
                let reply = line_exchange(*a, b"version\r\n")?;
                expect_prefix(&reply, "VERSION ")
            }
            Probe::Nats { client, monitor } => {
                let mut s = connect(*client)?;
                let info = read_line(&mut s)?;
                expect_prefix(&info, "INFO {")?;
                let (status, body) =
                    http(*monitor, "GET", "/healthz?js-enabled-only=true", &[], "")?;
                if status == 200 && body.contains("ok") {
                    Ok(())
                } else {
                    Err(format!("JetStream health: HTTP {status}: {}", snippet(&body)))
                }
            }
            Probe::MongoDb(a) => mongo_hello(*a),
            Probe::DynamoDb(a) => {
                let headers = [
                    ("Content-Type", "application/x-amz-json-1.0"),
                    ("X-Amz-Target", "DynamoDB_20120810.ListTables"),
                    ("X-Amz-Date", "20250101T000000Z"),
                    (
                        "Authorization",
                        "AWS4-HMAC-SHA256 Credential=shedlock/20250101/us-east-1/dynamodb/aws4_request, \
                         SignedHeaders=host;x-amz-date;x-amz-target, Signature=0000",
                    ),
                ];
                let (status, body) = http(*a, "POST", "/", &headers, "{}")?;
                if status == 200 && body.contains("TableNames") {
                    Ok(())
                } else {
                    Err(format!("ListTables: HTTP {status}: {}", snippet(&body)))
                }
            }
            Probe::S3(a) => {
                let headers = [
                    ("X-Amz-Date", "20250101T000000Z"),
                    (
                        "Authorization",
                        "AWS4-HMAC-SHA256 Credential=shedlock/20250101/us-east-1/s3/aws4_request, \
                         SignedHeaders=host;x-amz-date, Signature=0000",
                    ),
                ];
                let (status, body) = http(*a, "GET", "/", &headers, "")?;
                if status == 200 && body.contains("ListAllMyBucketsResult") {
                    Ok(())
                } else {
                    Err(format!("ListBuckets: HTTP {status}: {}", snippet(&body)))
                }
            }
            Probe::Etcd(a) => {
                let (status, body) = http(*a, "GET", "/health", &[], "")?;
                if status == 200 && body.replace(' ', "").contains("\"health\":\"true\"") {
                    Ok(())
                } else {
                    Err(format!("/health: HTTP {status}: {}", snippet(&body)))
                }
            }
            Probe::HttpOk { addr, path } => match http(*addr, "GET", path, &[], "")? {
                (200, _) => Ok(()),
                (status, body) => Err(format!("GET {path}: HTTP {status}: {}", snippet(&body))),
            },
            Probe::ZooKeeper(a) => {
                let mut s = connect(*a)?;
                s.write_all(b"srvr").map_err(io("send srvr"))?;
                let out = read_to_close(&mut s, "srvr reply")?;
                let out = String::from_utf8_lossy(&out);
                let mode = out.lines().find_map(|l| l.strip_prefix("Mode:")).map(str::trim);
                match mode {
                    Some("standalone" | "leader" | "follower") => Ok(()),
                    Some(other) => Err(format!("srvr: Mode: {other}")),
                    None => Err(format!("srvr: no Mode line yet: {}", snippet(&out))),
                }
            }
        }
    }
}

fn snippet(s: &str) -> String {
    let s = s.trim();
    let cut: String = s.chars().take(200).collect();
    if cut.len() < s.len() { format!("{cut}...") } else { cut }
}

fn expect_prefix(reply: &str, prefix: &str) -> Result<(), String> {
    if reply.starts_with(prefix) {
        Ok(())
    } else {
        Err(format!("expected {prefix:?}, got {:?}", snippet(reply)))
    }
}

/// Reads one line (with its newline, if the server closed after it without one: without), at
/// most [`MAX_LINE`] bytes: a longer one is an error.
fn read_line(s: &mut Wire) -> Result<String, String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        if buf.len() == MAX_LINE {
            return Err(format!(
                "the server sent a line longer than {MAX_LINE} bytes, starting {:?}",
                snippet(&String::from_utf8_lossy(&buf[..64]))
            ));
        }
        match s.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => {
                buf.push(byte[0]);
                if byte[0] == b'\n' {
                    break;
                }
            }
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    if buf.is_empty() {
        return Err("connection closed without a reply".to_owned());
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// `Ok(())` when the Redis Cluster node at `addr` reports `cluster_state:ok` (every slot
/// served) in `CLUSTER INFO` and, if it is a replica, has finished its sync with its master
/// (`master_link_status:up`): a replica that never synced cannot take over in a fail-over;
/// and no append-only-file rewrite is running.
pub(crate) fn redis_cluster_ok(addr: SocketAddr) -> Result<(), String> {
    let info = redis_bulk(addr, b"*2\r\n$7\r\nCLUSTER\r\n$4\r\nINFO\r\n")?;
    let repl = redis_bulk(addr, b"*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n")?;
    let persistence = redis_bulk(addr, b"*2\r\n$4\r\nINFO\r\n$11\r\npersistence\r\n")?;
    redis_cluster_judge(addr, &info, &repl, &persistence)
}

/// [`redis_cluster_ok`]'s verdict on the node's answers to `CLUSTER INFO`, `INFO replication`
/// and `INFO persistence` (a secure cluster's come from `redis-cli` over TLS).
pub(crate) fn redis_cluster_judge(
    addr: SocketAddr,
    info: &str,
    repl: &str,
    persistence: &str,
) -> Result<(), String> {
    if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
        let state = info.lines().find(|l| l.starts_with("cluster_state:")).unwrap_or("no state");
        return Err(format!("{addr}: {}", state.trim()));
    }
    let replica = repl.lines().any(|l| l.trim() == "role:slave");
    if replica && !repl.lines().any(|l| l.trim() == "master_link_status:up") {
        return Err(format!("{addr}: the replica has not synced with its master yet"));
    }
    // After a sync a replica rewrites its append-only file; until that ends it refuses to shut
    // down on SIGTERM ("Writing initial AOF, can't exit").
    let busy = ["aof_rewrite_in_progress:1", "aof_rewrite_scheduled:1"];
    if persistence.lines().any(|l| busy.contains(&l.trim())) {
        return Err(format!("{addr}: rewriting its append-only file"));
    }
    Ok(())
}

/// Sends one RESP command and reads a bulk-string reply.
fn redis_bulk(addr: SocketAddr, request: &[u8]) -> Result<String, String> {
    let mut s = connect(addr)?;
    s.write_all(request).map_err(io("send"))?;
    let header = read_line(&mut s)?;
    let len: usize = header
        .strip_prefix('$')
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| format!("{addr} answered {}", snippet(&header)))?;
    let mut body = vec![0; bounded("bulk string", len)?];
    s.read_exact(&mut body).map_err(io("read a bulk reply"))?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// Sends `request` and reads one line of reply.
fn line_exchange(addr: SocketAddr, request: &[u8]) -> Result<String, String> {
    let mut s = connect(addr)?;
    s.write_all(request).map_err(io("send"))?;
    read_line(&mut s)
}

/// A minimal HTTP/1.1 request with `Connection: close`; returns the status and body.
pub(crate) fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<(u16, String), String> {
    let mut s = connect(addr)?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).map_err(io("send HTTP request"))?;
    let resp = read_to_close(&mut s, "HTTP response")?;
    let text = String::from_utf8_lossy(&resp);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP response: {:?}", snippet(&text)))?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}

// ---------- PostgreSQL ----------

fn postgres(addr: SocketAddr) -> Result<(), String> {
    let mut s = connect(addr)?;
    let params = b"user\0postgres\0database\0postgres\0\0";
    let len = u32::try_from(8 + params.len()).unwrap_or(0);
    let mut msg = Vec::new();
    msg.extend_from_slice(&len.to_be_bytes());
    msg.extend_from_slice(&196_608u32.to_be_bytes());
    msg.extend_from_slice(params);
    s.write_all(&msg).map_err(io("send startup"))?;
    for _ in 0..MAX_MESSAGES {
        let mut head = [0u8; 5];
        s.read_exact(&mut head).map_err(io("read"))?;
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if len < 4 {
            return Err(format!("a message of type {:?} with length {len}", char::from(head[0])));
        }
        let mut body = vec![0u8; bounded("message", len - 4)?];
        s.read_exact(&mut body).map_err(io("read"))?;
        match head[0] {
            b'R' => {
                let code = body.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                if code != Some(0) {
                    return Err(format!("server asks for authentication (code {code:?})"));
                }
            }
            b'E' => {
                let fields: Vec<String> = body
                    .split(|b| *b == 0)
                    .filter(|f| f.first() == Some(&b'M'))
                    .map(|f| String::from_utf8_lossy(&f[1..]).into_owned())
                    .collect();
                return Err(format!("error: {}", fields.join("; ")));
            }
            b'Z' => {
                let _ = s.write_all(&[b'X', 0, 0, 0, 4]);
                return Ok(());
            }
            _ => {}
        }
    }
    Err(format!("no ReadyForQuery after {MAX_MESSAGES} messages"))
}

// ---------- MySQL / MariaDB ----------

fn mysql_read(s: &mut Wire) -> Result<(u8, Vec<u8>), String> {
    let mut head = [0u8; 4];
    s.read_exact(&mut head).map_err(io("read"))?;
    let len = usize::from(head[0]) | usize::from(head[1]) << 8 | usize::from(head[2]) << 16;
    let mut payload = vec![0u8; bounded("packet", len)?];
    s.read_exact(&mut payload).map_err(io("read"))?;
    Ok((head[3], payload))
}

fn mysql_write(s: &mut Wire, seq: u8, payload: &[u8]) -> Result<(), String> {
    let len = payload.len();
    let mut p =
        vec![(len & 0xff) as u8, ((len >> 8) & 0xff) as u8, ((len >> 16) & 0xff) as u8, seq];
    p.extend_from_slice(payload);
    s.write_all(&p).map_err(io("send"))
}

fn mysql_err(payload: &[u8]) -> String {
    // 0xFF, code (2), '#', sqlstate (5), message
    let code = payload.get(1..3).map(|c| u16::from_le_bytes([c[0], c[1]])).unwrap_or(0);
    let msg_start = if payload.get(3) == Some(&b'#') { 9 } else { 3 };
    let msg = payload.get(msg_start..).map(String::from_utf8_lossy).unwrap_or_default();
    format!("error {code}: {msg}")
}

fn mysql(addr: SocketAddr) -> Result<(), String> {
    let mut s = connect(addr)?;
    let (seq, hello) = mysql_read(&mut s)?;
    match hello.first() {
        Some(10) => {}
        Some(0xff) => return Err(mysql_err(&hello)),
        other => return Err(format!("unexpected handshake (protocol {other:?})")),
    }
    // HandshakeResponse41 for user root with an empty password.
    const CLIENT_LONG_PASSWORD: u32 = 1;
    const CLIENT_PROTOCOL_41: u32 = 0x200;
    const CLIENT_SECURE_CONNECTION: u32 = 0x8000;
    const CLIENT_PLUGIN_AUTH: u32 = 0x80000;
    let caps =
        CLIENT_LONG_PASSWORD | CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH;
    let mut resp = Vec::new();
    resp.extend_from_slice(&caps.to_le_bytes());
    resp.extend_from_slice(&(16u32 << 20).to_le_bytes());
    resp.push(33);
    resp.extend_from_slice(&[0u8; 23]);
    resp.extend_from_slice(b"root\0");
    resp.push(0);
    resp.extend_from_slice(b"mysql_native_password\0");
    let mut seq = seq.wrapping_add(1);
    mysql_write(&mut s, seq, &resp)?;
    for n in 0.. {
        if n == MAX_MESSAGES {
            return Err(format!("no login answer after {MAX_MESSAGES} packets"));
        }
        let (got, reply) = mysql_read(&mut s)?;
        match reply.first() {
            Some(0) => break,
            Some(0xfe) => {
                // Auth switch: an empty password answers every plugin with an empty response.
                seq = got.wrapping_add(1);
                mysql_write(&mut s, seq, &[])?;
            }
            Some(0xff) => return Err(mysql_err(&reply)),
            other => return Err(format!("unexpected login reply {other:?}")),
        }
    }
    mysql_write(&mut s, 0, &[0x0e])?; // COM_PING
    let (_, pong) = mysql_read(&mut s)?;
    match pong.first() {
        Some(0) => {
            let _ = mysql_write(&mut s, 0, &[0x01]); // COM_QUIT
            Ok(())
        }
        Some(0xff) => Err(mysql_err(&pong)),
        other => Err(format!("unexpected COM_PING reply {other:?}")),
    }
}

// ---------- MongoDB ----------

fn bson_hello() -> Vec<u8> {
    let mut doc = Vec::new();
    doc.extend_from_slice(&[0, 0, 0, 0]);
    doc.push(0x10);
    doc.extend_from_slice(b"hello\0");
    doc.extend_from_slice(&1i32.to_le_bytes());
    doc.push(0x02);
    doc.extend_from_slice(b"$db\0");
    doc.extend_from_slice(&6i32.to_le_bytes());
    doc.extend_from_slice(b"admin\0");
    doc.push(0);
    let len = i32::try_from(doc.len()).unwrap_or(0).to_le_bytes();
    doc[..4].copy_from_slice(&len);
    doc
}

/// Finds the top-level `ok` field of a BSON document as a number.
fn bson_ok(doc: &[u8]) -> Option<f64> {
    let mut i = 4;
    while i < doc.len() {
        let ty = *doc.get(i)?;
        if ty == 0 {
            return None;
        }
        let name_end = i + 1 + doc.get(i + 1..)?.iter().position(|b| *b == 0)?;
        let name = doc.get(i + 1..name_end)?;
        let v = name_end + 1;
        let le4 = |at: usize| -> Option<usize> {
            let b = doc.get(at..at + 4)?;
            usize::try_from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])).ok()
        };
        let size = match ty {
            0x01 | 0x09 | 0x11 | 0x12 => 8,
            0x02 | 0x0D | 0x0E => 4 + le4(v)?,
            0x03 | 0x04 => le4(v)?,
            0x05 => 5 + le4(v)?,
            0x07 => 12,
            0x08 => 1,
            0x0A | 0x06 | 0x7F | 0xFF => 0,
            0x10 => 4,
            0x13 => 16,
            _ => return None,
        };
        if name == b"ok" {
            let b = doc.get(v..v + size)?;
            return match ty {
                0x01 => Some(f64::from_le_bytes(b.try_into().ok()?)),
                0x10 => Some(f64::from(i32::from_le_bytes(b.try_into().ok()?))),
                0x12 => Some(i64::from_le_bytes(b.try_into().ok()?) as f64),
                0x08 => Some(f64::from(b[0])),
                _ => None,
            };
        }
        i = v + size;
    }
    None
}

fn mongo_hello(addr: SocketAddr) -> Result<(), String> {
    let mut s = connect(addr)?;
    let doc = bson_hello();
    let total = 16 + 4 + 1 + doc.len();
    let mut msg = Vec::with_capacity(total);
    msg.extend_from_slice(&i32::try_from(total).unwrap_or(0).to_le_bytes());
    msg.extend_from_slice(&1i32.to_le_bytes()); // requestID
    msg.extend_from_slice(&0i32.to_le_bytes()); // responseTo
    msg.extend_from_slice(&2013i32.to_le_bytes()); // OP_MSG
    msg.extend_from_slice(&0u32.to_le_bytes()); // flagBits
    msg.push(0); // section kind 0: body
    msg.extend_from_slice(&doc);
    s.write_all(&msg).map_err(io("send hello"))?;
    let mut head = [0u8; 16];
    s.read_exact(&mut head).map_err(io("read"))?;
    let len = i32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let len = usize::try_from(len)
        .ok()
        .filter(|l| *l >= 16)
        .ok_or_else(|| format!("a reply with message length {len}"))?;
    let opcode = i32::from_le_bytes([head[12], head[13], head[14], head[15]]);
    let mut rest = vec![0u8; bounded("reply", len - 16)?];
    s.read_exact(&mut rest).map_err(io("read"))?;
    if opcode != 2013 || rest.len() < 5 || rest[4] != 0 {
        return Err(format!("unexpected reply (opcode {opcode})"));
    }
    match bson_ok(&rest[5..]) {
        Some(1.0) => Ok(()),
        other => Err(format!("hello answered ok={other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bson_ok_is_found_after_other_fields() {
        let mut doc = bson_hello();
        // {hello: 1, $db: "admin", ok: 1.0}
        doc.pop();
        doc.push(0x01);
        doc.extend_from_slice(b"ok\0");
        doc.extend_from_slice(&1.0f64.to_le_bytes());
        doc.push(0);
        let len = i32::try_from(doc.len()).unwrap().to_le_bytes();
        doc[..4].copy_from_slice(&len);
        assert_eq!(bson_ok(&doc), Some(1.0));
        assert_eq!(bson_ok(&bson_hello()), None);
    }

    #[test]
    fn probes_fail_fast_on_a_closed_port() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let err = Probe::Redis(addr).check().unwrap_err();
        assert!(err.contains("connect"), "{err}");
    }

    /// A hostile server on 127.0.0.1: each connection gets `answer`, then stays open until the
    /// client closes it.
    fn hostile(answer: impl Fn(&mut TcpStream) + Send + 'static) -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                answer(&mut s);
                let mut sink = [0u8; 1024];
                while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
            }
        });
        addr
    }

    /// Writes `head`, then `fill` until the client goes away.
    fn endless(s: &mut TcpStream, head: &[u8], fill: u8) {
        let chunk = vec![fill; 64 * 1024];
        if s.write_all(head).is_ok() {
            while s.write_all(&chunk).is_ok() {}
        }
    }

    /// The error of `probe`, which must come well before [`PROBE_DEADLINE`]: the limits end it,
    /// not the clock.
    fn fails_fast(probe: impl FnOnce() -> Result<(), String>) -> String {
        let started = Instant::now();
        let e = probe().expect_err("a hostile server fails the probe");
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
        e
    }

    fn says(e: &str, words: &[&str]) {
        for w in words {
            assert!(e.contains(w), "{e:?} should say {w:?}");
        }
    }

    #[test]
    fn an_endless_line_is_an_error_at_64_kib_not_a_truncated_line_that_passes() {
        // Each starts with what the probe looks for: a cut line would have passed.
        let redis = hostile(|s| endless(s, b"+PONG", b'x'));
        says(&fails_fast(|| Probe::Redis(redis).check()), &["longer than 65536", "+PONGx"]);
        let memcached = hostile(|s| endless(s, b"VERSION ", b'1'));
        says(&fails_fast(|| Probe::Memcached(memcached).check()), &["longer than 65536"]);
        let nats = hostile(|s| endless(s, b"INFO {", b' '));
        let monitor = nats;
        says(&fails_fast(|| Probe::Nats { client: nats, monitor }.check()), &["longer than"]);
    }

    #[test]
    fn a_redis_bulk_length_of_99999999999_is_refused_before_allocating() {
        let a = hostile(|s| {
            let _ = s.write_all(b"$99999999999\r\n");
        });
        says(&fails_fast(|| redis_cluster_ok(a)), &["bulk string of 99999999999 bytes", "1048576"]);
    }

    #[test]
    fn an_endless_http_response_is_an_error_at_1_mib() {
        let head = b"HTTP/1.1 200 OK\r\n\r\n{\"health\":\"true\"";
        let etcd = hostile(move |s| endless(s, head, b' '));
        says(&fails_fast(|| Probe::Etcd(etcd).check()), &["HTTP response longer than 1048576"]);
        let ok = hostile(|s| endless(s, b"HTTP/1.1 200 OK\r\n\r\n", b'x'));
        let e = fails_fast(|| Probe::HttpOk { addr: ok, path: "/ready" }.check());
        says(&e, &["longer than 1048576"]);
    }

    #[test]
    fn an_endless_zookeeper_srvr_reply_is_an_error_at_1_mib() {
        let zk = hostile(|s| endless(s, b"Mode: standalone\n", b'x'));
        says(&fails_fast(|| Probe::ZooKeeper(zk).check()), &["srvr reply longer than 1048576"]);
    }

    #[test]
    fn a_postgres_message_length_of_4_gib_is_refused_before_allocating() {
        let a = hostile(|s| {
            let _ = s.write_all(&[b'R', 0xff, 0xff, 0xff, 0xff]);
        });
        says(&fails_fast(|| Probe::Postgres(a).check()), &["message of 4294967291 bytes"]);
        let a = hostile(|s| {
            let _ = s.write_all(&[b'R', 0, 0, 0, 3]);
        });
        says(&fails_fast(|| Probe::Postgres(a).check()), &["length 3"]);
    }

    #[test]
    fn a_postgres_server_that_never_says_ready_is_cut_after_256_messages() {
        // Empty ParameterStatus messages, forever.
        let a = hostile(|s| {
            let msgs = [b'S', 0, 0, 0, 4].repeat(4096);
            while s.write_all(&msgs).is_ok() {}
        });
        says(&fails_fast(|| Probe::Postgres(a).check()), &["no ReadyForQuery after 256"]);
    }

    #[test]
    fn a_mysql_packet_length_of_16_mib_is_refused_before_allocating() {
        let a = hostile(|s| {
            let _ = s.write_all(&[0xff, 0xff, 0xff, 0]);
        });
        says(&fails_fast(|| Probe::MySql(a).check()), &["packet of 16777215 bytes"]);
    }

    #[test]
    fn a_mongo_reply_length_of_2_gib_or_below_its_header_is_refused_before_allocating() {
        let head = |len: i32| {
            let mut h = len.to_le_bytes().to_vec();
            h.extend_from_slice(&[0; 8]);
            h.extend_from_slice(&2013i32.to_le_bytes());
            h
        };
        let big = head(i32::MAX);
        let a = hostile(move |s| {
            let _ = s.write_all(&big);
        });
        says(&fails_fast(|| Probe::MongoDb(a).check()), &["reply of 2147483631 bytes"]);
        let negative = head(-1);
        let a = hostile(move |s| {
            let _ = s.write_all(&negative);
        });
        says(&fails_fast(|| Probe::MongoDb(a).check()), &["message length -1"]);
    }

    #[test]
    fn a_server_dripping_bytes_is_cut_at_the_probe_deadline() {
        let a = hostile(|s| {
            while s.write_all(b"x").is_ok() {
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let mut w = connect(a).unwrap();
        w.deadline = Instant::now() + Duration::from_millis(300);
        let started = Instant::now();
        let e = read_line(&mut w).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
        says(&e, &["deadline passed"]);
    }

    #[test]
    fn shell_quoting() {
        use crate::process::shell_quote;
        assert_eq!(shell_quote("a-b/c"), "a-b/c");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}

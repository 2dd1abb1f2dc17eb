//! The TLS forwarder (see the parent module): loopback listeners whose connections are carried
//! to the servers of the connect string over TLS (rustls on ring).

use std::{
    fmt, io,
    net::{Ipv4Addr, SocketAddr},
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use rustls::{
    ClientConfig, RootCertStore,
    pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject},
};
use shedlock::{Error, Result};
use tokio::{
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};
use tokio_rustls::{TlsConnector, client::TlsStream};

use super::first_exchange;
use crate::BACKEND;

/// The TLS of a provider: the client configuration (the CA, the optional client certificate),
/// the servers, and the forwarder, started with the first session and kept for the provider's
/// life (every session and reconnection goes through it).
pub(crate) struct Tls {
    connector: TlsConnector,
    servers: Vec<Arc<Server>>,
    /// Bounds the TCP connect and the handshake to a server.
    timeout: Duration,
    /// What `Debug` shows: never a key.
    summary: String,
    bridge: Mutex<Option<Bridge>>,
    failures: Arc<Failures>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary)
    }
}

/// One server of the connect string and the name its certificate must carry.
struct Server {
    /// `host:port` as given (for messages).
    addr: String,
    host: String,
    port: u16,
    name: ServerName<'static>,
}

/// The running forwarder: one listener per server. Dropping it stops accepting; connections in
/// progress end with their client.
struct Bridge {
    connect_string: String,
    _accepting: Vec<AbortOnDrop>,
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Why a server could not be reached over TLS, per server (the latest).
#[derive(Default)]
struct Failures(Mutex<Vec<(String, Failure)>>);

#[derive(Clone)]
struct Failure {
    /// A failure that retrying will not fix (certificate, protocol): [`Error::Setup`].
    setup: bool,
    message: String,
}

impl Failures {
    fn record(&self, server: &Server, failure: Failure) {
        if failure.setup {
            tracing::warn!(server = %server.addr, error = %failure.message, "TLS connection to ZooKeeper failed");
        } else {
            tracing::debug!(server = %server.addr, error = %failure.message, "TLS connection to ZooKeeper failed");
        }
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|(addr, _)| *addr != server.addr);
        all.push((server.addr.clone(), failure));
    }

    fn succeeded(&self, server: &Server) {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|(addr, _)| *addr != server.addr);
    }
}

impl Tls {
    /// Parses the CA, the identity and the servers' names; no I/O.
    pub(super) fn new(
        connect_string: &str,
        ca_pem: &str,
        identity: Option<(&str, &str)>,
        server_name: Option<&str>,
        timeout: Duration,
    ) -> std::result::Result<Self, String> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            let cert =
                cert.map_err(|e| format!("tls_ca_pem: a certificate does not parse: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("tls_ca_pem: a certificate is not a valid CA: {e}"))?;
        }
        if roots.is_empty() {
            return Err(
                "tls_ca_pem: no PEM certificate (-----BEGIN CERTIFICATE-----) in the text given"
                    .to_owned(),
            );
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some((cert_pem, key_pem)) => {
                let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| {
                        format!("tls_identity_pem: the certificate does not parse: {e}")
                    })?;
                if chain.is_empty() {
                    return Err("tls_identity_pem: no PEM certificate (-----BEGIN \
                                CERTIFICATE-----) in the certificate given"
                        .to_owned());
                }
                // The key's parse error is not shown: it could quote the key.
                let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|_| {
                    "tls_identity_pem: no PEM private key (PKCS#8 `PRIVATE KEY`, PKCS#1 `RSA \
                     PRIVATE KEY` or SEC1 `EC PRIVATE KEY`) in the key given"
                        .to_owned()
                })?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    format!("tls_identity_pem: the certificate and key do not make a client identity: {e}")
                })?
            }
        };
        let mut servers = Vec::new();
        for addr in connect_string.split(',').map(str::trim) {
            let (host, port) = parse_address(addr)
                .ok_or_else(|| format!("the connect string's host {addr:?} is not host:port"))?;
            let name = server_name.unwrap_or(host);
            let name = ServerName::try_from(name.to_owned()).map_err(|_| {
                format!(
                    "{name:?} cannot be checked against a certificate (not a DNS name or IP \
                     address): set tls_server_name"
                )
            })?;
            servers.push(Arc::new(Server {
                addr: addr.to_owned(),
                host: host.to_owned(),
                port,
                name,
            }));
        }
        let summary = format!(
            "TLS (rustls on ring; CA: {} certificate(s); client certificate: {}; server name: {})",
            count(ca_pem),
            if identity.is_some() { "yes" } else { "no" },
            server_name.unwrap_or("each server's host"),
        );
        Ok(Self {
            connector: TlsConnector::from(Arc::new(config)),
            servers,
            timeout,
            summary,
            bridge: Mutex::new(None),
            failures: Arc::default(),
        })
    }

    /// The connect string the client is given: the forwarder's listeners, started on first use
    /// (in the tokio runtime, which runs it).
    pub(crate) fn connect_string(&self) -> Result<String> {
        let mut bridge = self.bridge.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(b) = bridge.as_ref() {
            return Ok(b.connect_string.clone());
        }
        let started = self.start().map_err(|e| {
            Error::unavailable(
                BACKEND,
                format!("opening the loopback listener of the TLS forwarder failed: {e}"),
            )
        })?;
        let connect_string = started.connect_string.clone();
        *bridge = Some(started);
        Ok(connect_string)
    }

    fn start(&self) -> io::Result<Bridge> {
        let mut hosts = Vec::new();
        let mut accepting = Vec::new();
        for server in &self.servers {
            let std_listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
            std_listener.set_nonblocking(true)?;
            let listener = TcpListener::from_std(std_listener)?;
            hosts.push(listener.local_addr()?.to_string());
            let forward = Forward {
                server: server.clone(),
                connector: self.connector.clone(),
                timeout: self.timeout,
                failures: self.failures.clone(),
            };
            accepting.push(AbortOnDrop(tokio::spawn(accept(listener, forward))));
        }
        tracing::debug!(servers = self.servers.len(), "TLS forwarder started");
        Ok(Bridge { connect_string: hosts.join(","), _accepting: accepting })
    }

    /// Forgets the failures seen so far (before a new session is opened).
    pub(crate) fn clear_failures(&self) {
        self.failures.0.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    /// What went wrong with the TLS connections since [`clear_failures`](Self::clear_failures),
    /// as the error of the session that could not open: [`Error::Setup`] when a server's
    /// certificate or protocol is wrong, else [`Error::Unavailable`]. `None`: nothing failed.
    pub(crate) fn failure(&self) -> Option<Error> {
        let all = self.failures.0.lock().unwrap_or_else(PoisonError::into_inner);
        if all.is_empty() {
            return None;
        }
        let text: Vec<String> =
            all.iter().map(|(addr, f)| format!("{addr}: {}", f.message)).collect();
        let message = format!("TLS to ZooKeeper failed: {}", text.join("; "));
        Some(if all.iter().any(|(_, f)| f.setup) {
            Error::Setup { backend: BACKEND, message }
        } else {
            Error::unavailable(BACKEND, message)
        })
    }
}

fn count(pem: &str) -> usize {
    CertificateDer::pem_slice_iter(pem.as_bytes()).filter(std::result::Result::is_ok).count()
}

/// `host:port`, `[v6]:port` or `host` (port 2181), as zookeeper-client reads a connect string.
fn parse_address(s: &str) -> Option<(&str, u16)> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, tail) = rest.split_once(']')?;
        match tail {
            "" => (host, ""),
            _ => (host, tail.strip_prefix(':')?),
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, p),
            None => (s, ""),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = if port.is_empty() { 2181 } else { port.parse().ok().filter(|p| *p != 0)? };
    Some((host, port))
}

/// What the forwarder does with each accepted connection.
#[derive(Clone)]
struct Forward {
    server: Arc<Server>,
    connector: TlsConnector,
    timeout: Duration,
    failures: Arc<Failures>,
}

async fn accept(listener: TcpListener, forward: Forward) {
    let Ok(local) = listener.local_addr() else { return };
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                tokio::spawn(forward.clone().run(stream, peer, local));
            }
            Err(e) => {
                // Out of file descriptors, say: try again shortly.
                tracing::debug!(error = %e, "the TLS forwarder could not accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

impl Forward {
    async fn run(self, client: TcpStream, peer: SocketAddr, local: SocketAddr) {
        // Reading /proc is file I/O (the whole namespace's TCP table, then every descriptor of
        // this process): off the async runtime's threads.
        let ours = tokio::task::spawn_blocking(move || from_this_process(peer, local))
            .await
            .unwrap_or_else(|e| Err(io::Error::other(e)));
        match ours {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(%peer, "the TLS forwarder refused a connection from another process");
                return;
            }
            Err(e) => {
                let message = format!(
                    "the TLS forwarder cannot tell whether a connection comes from this process \
                     (reading /proc/self: {e}); it refuses it"
                );
                self.failures.record(&self.server, Failure { setup: true, message });
                return;
            }
        }
        let _ = client.set_nodelay(true);
        let connect = async {
            let tcp = TcpStream::connect((self.server.host.as_str(), self.server.port)).await?;
            let _ = tcp.set_nodelay(true);
            self.connector.connect(self.server.name.clone(), tcp).await
        };
        let server = match tokio::time::timeout(self.timeout, connect).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                self.failures.record(&self.server, classify(&self.server, &e));
                return;
            }
            Err(_) => {
                let message = format!(
                    "no TCP connection and TLS handshake within {:?} (the connection timeout)",
                    self.timeout
                );
                self.failures.record(&self.server, Failure { setup: false, message });
                return;
            }
        };
        if let Some(version) = server.get_ref().1.protocol_version() {
            tracing::debug!(server = %self.server.addr, ?version, "TLS connection to ZooKeeper");
        }
        let (mut client, mut server) = (client, server);
        let first = first_exchange::relay(&mut client, &mut server);
        let message = match tokio::time::timeout(self.timeout, first).await {
            Ok(Ok(())) => None,
            Ok(Err(first_exchange::Failed::Client(e))) => {
                // The client gave up (its own connection timeout) or is not a ZooKeeper client.
                tracing::debug!(error = %e, "the forwarded client left before its session was answered");
                return;
            }
            Ok(Err(first_exchange::Failed::Server(e))) => {
                Some(format!("the server did not answer the session request: {e}"))
            }
            Err(_) => Some(format!(
                "the server did not answer the session request within {:?} (the connection \
                 timeout)",
                self.timeout
            )),
        };
        if let Some(message) = message {
            self.failures.record(&self.server, Failure { setup: false, message });
            return;
        }
        self.failures.succeeded(&self.server);
        pipe(client, server).await;
    }
}

/// Forwards both ways until either side closes or fails, then closes both: ZooKeeper never
/// half-closes, and a server cut off must not keep the task waiting.
async fn pipe(client: TcpStream, server: TlsStream<TcpStream>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = tokio::io::split(server);
    tokio::select! {
        _ = tokio::io::copy(&mut client_read, &mut server_write) => {
            use tokio::io::AsyncWriteExt as _;
            // The client closed: say so to the server (close_notify), briefly.
            let _ = tokio::time::timeout(Duration::from_secs(1), server_write.shutdown()).await;
        }
        _ = tokio::io::copy(&mut server_read, &mut client_write) => {}
    }
}

/// Says what a failed connection or handshake means; never shows a key (rustls' errors hold
/// none).
fn classify(server: &Server, e: &io::Error) -> Failure {
    use rustls::{CertificateError as C, Error as R};
    let name = match &server.name {
        ServerName::DnsName(n) => n.as_ref().to_owned(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        other => format!("{other:?}"),
    };
    let setup = |message: String| Failure { setup: true, message };
    let Some(tls) = e.get_ref().and_then(|inner| inner.downcast_ref::<R>()) else {
        let message = match e.kind() {
            io::ErrorKind::UnexpectedEof => format!(
                "the server closed the connection during the TLS handshake ({e}): is it \
                 ZooKeeper's TLS port (secureClientPort), not its plaintext clientPort?"
            ),
            _ => format!("{e}"),
        };
        return Failure { setup: false, message };
    };
    match tls {
        R::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => setup(format!(
            "the server's certificate is not signed by the CA given to tls_ca_pem ({tls})"
        )),
        R::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            setup(format!(
                "the server's certificate is not valid for {name:?} ({tls}): connect by a name \
                 or address the certificate carries, or set tls_server_name"
            ))
        }
        R::InvalidCertificate(
            C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. },
        ) => setup(format!("the server's certificate is expired or not yet valid ({tls})")),
        R::InvalidCertificate(_) => setup(format!("the server's certificate is refused ({tls})")),
        R::AlertReceived(alert) => setup(format!(
            "the server refused the TLS handshake (alert {alert:?}): it may require a client \
             certificate (tls_identity_pem) the provider does not have or the server does not \
             accept, or a TLS version this client does not speak (1.2, 1.3)"
        )),
        R::InvalidMessage(_)
        | R::InappropriateMessage { .. }
        | R::InappropriateHandshakeMessage { .. } => setup(format!(
            "the server does not speak TLS ({tls}): is it ZooKeeper's TLS port \
             (secureClientPort), not its plaintext clientPort?"
        )),
        _ => setup(format!("the TLS handshake failed ({tls})")),
    }
}

/// Whether the connection from `peer` to the listener at `local` was made by this process: the
/// connecting socket (the `/proc/self/net/tcp` entry from `peer` to `local`) is one of this
/// process's file descriptors.
#[cfg(target_os = "linux")]
fn from_this_process(peer: SocketAddr, local: SocketAddr) -> io::Result<bool> {
    // The kernel builds /proc/net/tcp bucket by bucket while it is read: sockets opened and
    // closed meanwhile (other connections of a busy process) can make one read miss an entry.
    // A connection is refused only when several reads agree it is not ours.
    for _ in 0..5 {
        if socket_of_this_process(peer, local)? {
            return Ok(true);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    Ok(false)
}

/// One read of /proc/self/net/tcp and /proc/self/fd: see [`from_this_process`].
#[cfg(target_os = "linux")]
fn socket_of_this_process(peer: SocketAddr, local: SocketAddr) -> io::Result<bool> {
    let table = std::fs::read_to_string("/proc/self/net/tcp")?;
    let inode = table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (from, to) = (parse_proc_v4(f.get(1)?)?, parse_proc_v4(f.get(2)?)?);
        (from == peer && to == local).then(|| f.get(9).map(|s| (*s).to_owned())).flatten()
    });
    let Some(inode) = inode else { return Ok(false) };
    let socket = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let Ok(entry) = entry else { continue };
        if std::fs::read_link(entry.path())
            .is_ok_and(|target| target.as_os_str() == socket.as_str())
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Elsewhere the peer is not checked: see the README's TLS section.
#[cfg(not(target_os = "linux"))]
fn from_this_process(_peer: SocketAddr, _local: SocketAddr) -> io::Result<bool> {
    Ok(true)
}

/// An address of `/proc/net/tcp`: the IPv4 address as the kernel's `%08X` of the network-order
/// word, a `:`, the port in hex.
#[cfg(target_os = "linux")]
fn parse_proc_v4(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let ip = u32::from_str_radix(ip, 16).ok()?;
    let port = u16::from_str_radix(port, 16).ok()?;
    Some(SocketAddr::from((Ipv4Addr::from(ip.to_ne_bytes()), port)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn addresses_parse_as_the_client_reads_them() {
        assert_eq!(parse_address("127.0.0.1:2281"), Some(("127.0.0.1", 2281)));
        assert_eq!(parse_address("zk1"), Some(("zk1", 2181)));
        assert_eq!(parse_address("[::1]:2281"), Some(("::1", 2281)));
        assert_eq!(parse_address("[::1]"), Some(("::1", 2181)));
        for bad in ["", ":1", "h:0", "h:x", "[::1", "[::1]x"] {
            assert_eq!(parse_address(bad), None, "{bad:?}");
        }
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_forwarder_tells_its_own_connections_from_another_process() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        let _ours = TcpStream::connect(local).await.unwrap();
        let (_, peer) = listener.accept().await.unwrap();
        assert!(from_this_process(peer, local).unwrap());
        // Another process connects (bash's /dev/tcp) and holds the connection open.
        let mut other = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("exec 3<>/dev/tcp/127.0.0.1/{}; sleep 5", local.port()))
            .spawn()
            .unwrap();
        let (_, peer) = listener.accept().await.unwrap();
        let theirs = from_this_process(peer, local).unwrap();
        let _ = other.kill();
        let _ = other.wait();
        assert!(!theirs);
    }
}

//! ZooKeeper lock provider for [`shedlock`], on [`zookeeper_client`] (with its `tokio` runtime).
//!
//! Each lock name `N` owns two znodes under the provider's root (default `/shedlock`):
//!
//! - the **name node** `<root>/<key_for(N)>`, persistent and empty. Every acquisition bumps its
//!   data version in the same transaction that creates the lock node, so the version it returns
//!   identifies that acquisition: it is the owner check of unlock and extend (the lock node's
//!   own version restarts at 0 each time it is recreated, so it alone could not tell a stale
//!   holder from a new one).
//! - the **lock node** `<root>/<key_for(N)>/lock`, **ephemeral**: it holds `hold_ms` and
//!   `locked_by`. It vanishes with its holder's session, so a holder whose process or session
//!   dies frees the name at once.
//!
//! Expiry is judged by **server time**: the lock node's `mtime`, stamped by the ZooKeeper leader
//! when it created (or last extended) the node, plus `hold_ms`. ZooKeeper has no "now" to read,
//! so a contender that finds the name held writes the provider's clock node `<root>/.clock` (its
//! new `mtime` is the leader's now) pipelined with a consistent multi-read of the name and lock
//! nodes, and takes over an expired lock in one transaction that checks the name node's version
//! (so nobody acquired in between) and the lock node's version (so the holder did not extend).
//! No client clock is read.
//!
//! - **Acquire**: one transaction (`setData` on the name node + `create` of the ephemeral lock
//!   node), one round trip on a free name. A held name costs one more (the pipelined clock write
//!   and read), an expired one a third (the takeover transaction).
//! - **Fencing token**: the zxid of the acquiring transaction (the lock node's `czxid`), strictly
//!   increasing across the whole ensemble and its restarts.
//! - **Unlock / extend**: one transaction each, owner-checked by the name node's version.
//!
//! **Authentication and ACLs.** [`digest_auth`](ZooKeeperLockProviderBuilder::digest_auth) (or
//! [`auth`](ZooKeeperLockProviderBuilder::auth) for another scheme) authenticates every session
//! the provider opens; the nodes it creates (root, name nodes, clock node, lock nodes) then get
//! [`NodeAcl::CreatorAll`] (`auth::cdrwa`) by default, so that only that identity can read,
//! take, release or change them, and every instance of the application must authenticate as the
//! same identity. Without credentials they are [`NodeAcl::Open`] (`world:anyone:cdrwa`): open to
//! anyone who reaches the ensemble. [`node_acl`](ZooKeeperLockProviderBuilder::node_acl) chooses
//! another ACL. A request the server refuses for want of a right (`NoAuth`), rejected credentials
//! (`AuthFailed`) and a refused ACL (`InvalidAcl`) are [`Error::Setup`] naming what is missing.
//! Credentials are never printed. See the README's "Authentication" and "Permissions" sections,
//! which also say how to close an existing open tree.
//!
//! **TLS** (cargo feature `tls`). [`tls_ca_pem`](ZooKeeperLockProviderBuilder::tls_ca_pem)
//! makes every connection of the provider, reconnections included, TLS verified against exactly
//! that CA (rustls on ring; [`tls_identity_pem`](ZooKeeperLockProviderBuilder::tls_identity_pem)
//! adds a client certificate, [`tls_server_name`](ZooKeeperLockProviderBuilder::tls_server_name)
//! the name to verify). The client reaches the servers through a loopback forwarder of the
//! provider that accepts only this process's connections: see the README's "TLS" section for why
//! and how. An untrusted or misnamed certificate is [`Error::Setup`]; asking for TLS without the
//! feature is [`Error::Setup`] from `build()`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_zookeeper::ZooKeeperLockProvider;
//!
//! let provider = ZooKeeperLockProvider::builder("127.0.0.1:2181").root("/shedlock").build()?;
//! let cfg = LockConfig::new("nightly-report", Duration::from_secs(600), Duration::from_secs(30))?;
//! if let Some(lock) = provider.try_lock(&cfg).await? {
//!     // ... run the task ...
//!     lock.unlock().await?;
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod auth;
mod tls;

pub use auth::{AclEntry, NodeAcl};

use std::{
    collections::HashMap,
    fmt,
    sync::{
        Arc, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use shedlock::{
    Acquisition, Capabilities, Error, ForceRelease, Lease, Lock, LockConfig, LockHandle, LockInfo,
    LockPage, LockProvider, Result, TimeSource,
    inspect::page_limit,
    store::{Operation, ProviderSettings, log_forced_release},
    support::{check_lock_name, duration_millis_ceil, from_unix_micros, with_timeout},
};
use tokio::{
    sync::{Mutex, oneshot},
    time::Instant,
};
use tracing::Instrument;
use zookeeper_client::{
    Acl, Acls, Client, CreateMode, CreateOptions, MultiReadResult, MultiWriteError, SessionState,
    Stat, StateWatcher,
};

use crate::auth::{Credential, Op};

const BACKEND: &str = "zookeeper";

/// The longest lock name, in bytes. An escaped name is at most three times as long (see
/// [`key_for`]).
pub const MAX_NAME_LEN: usize = 1024;

/// The builder setters every provider shares (`operation_timeout`, `locked_by`).
pub use shedlock::ProviderBuilder;
/// The default time limit of each lock operation: 10 s, as for every provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT as DEFAULT_TIMEOUT;

/// The default session timeout asked of the server (the server clamps it to between 2 and 20
/// ticks: 4 s to 40 s with its default `tickTime` of 2 s).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The default root path.
pub const DEFAULT_ROOT: &str = "/shedlock";

/// The child of a name node that is the lock.
const LOCK_CHILD: &str = "lock";
/// The child of the root whose `mtime` is the leader's now. Escaped names never start with `.`.
const CLOCK_CHILD: &str = ".clock";

/// Maps a lock name to its znode name under the root, one-to-one: ASCII letters, digits, `-`
/// and `_` stay as they are; every other byte (`/`, `.`, `%`, spaces, control bytes and each byte
/// of a non-ASCII character) becomes `%` followed by two upper-case hex digits. So every name is
/// a valid znode name (never `.`, `..` or `zookeeper`, never containing `/`), and two names never
/// share a node.
///
/// ```
/// assert_eq!(shedlock_zookeeper::key_for("nightly-report"), "nightly-report");
/// assert_eq!(shedlock_zookeeper::key_for("a/b.c"), "a%2Fb%2Ec");
/// assert_eq!(shedlock_zookeeper::key_for("%"), "%25");
/// ```
pub fn key_for(name: &str) -> String {
    let mut key = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_') {
            key.push(char::from(b));
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            key.push('%');
            key.push(char::from(HEX[usize::from(b >> 4)]));
            key.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
    key
}

/// The lock name of a znode name under the root, the inverse of [`key_for`]: `None` for a node
/// that [`key_for`] makes of no name (the clock node, nodes other tools created).
fn name_for(key: &str) -> Option<String> {
    let hex = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    };
    let (mut bytes, mut rest) = (Vec::with_capacity(key.len()), key.as_bytes());
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let [hi, lo, tail @ ..] = tail else { return None };
            bytes.push(hex(*hi)? << 4 | hex(*lo)?);
            rest = tail;
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    let name = String::from_utf8(bytes).ok()?;
    // One node per name: a node with an escape key_for would not write is no lock's.
    (key_for(&name) == key).then_some(name)
}

/// How many lock nodes one read of [`LockProvider::list`] asks for at most (a multi-read of
/// escaped names of up to 3 KiB each stays far below the server's 1 MiB packet limit).
const LIST_BATCH: usize = 128;

/// How often a forced release reads again when the name changed between its read and its
/// delete.
const FORCE_RELEASE_ATTEMPTS: usize = 3;

/// Checks a root path: absolute, not `/` itself, no trailing `/`, no empty, `.` or `..`
/// segment, no character ZooKeeper refuses in paths, and not under `/zookeeper` (the server's
/// own subtree).
fn check_root(root: &str) -> std::result::Result<(), String> {
    if root == "/" {
        return Err(
            "the ZooKeeper root node `/` cannot hold locks: use a path such as /shedlock".into()
        );
    }
    let Some(rest) = root.strip_prefix('/') else {
        return Err("it must be absolute (start with '/')".into());
    };
    for segment in rest.split('/') {
        if segment.is_empty() {
            return Err("it has an empty segment ('//' or a trailing '/')".into());
        }
        if segment == "." || segment == ".." {
            return Err("it has a '.' or '..' segment".into());
        }
    }
    if rest == "zookeeper" || rest.starts_with("zookeeper/") {
        return Err("/zookeeper is the server's own subtree".into());
    }
    if let Some(c) = root.chars().find(|&c| {
        matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}')
    }) {
        return Err(format!("it contains {c:?}, which ZooKeeper does not allow in paths"));
    }
    Ok(())
}

/// Builds a [`ZooKeeperLockProvider`].
///
/// The shared setters (`operation_timeout`, `locked_by`) come from [`ProviderBuilder`], in scope
/// with `use shedlock_zookeeper::ProviderBuilder;`. Here the time limit includes connecting
/// (`None`: unbounded); `locked_by` is stored in each lock node.
#[must_use]
pub struct ZooKeeperLockProviderBuilder {
    connect_string: String,
    root: String,
    session_timeout: Duration,
    connection_timeout: Option<Duration>,
    settings: ProviderSettings,
    /// Never printed: `Credential`'s `Debug` shows the scheme and the digest user only.
    credentials: Vec<Credential>,
    node_acl: Option<NodeAcl>,
    /// `Debug` says what is set, never the client key.
    tls: tls::TlsSettings,
}

impl fmt::Debug for ZooKeeperLockProviderBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The connect string is left out: a deployment may consider its hosts sensitive, and it
        // is never needed to tell two providers apart.
        f.debug_struct("ZooKeeperLockProviderBuilder")
            .field("root", &self.root)
            .field("session_timeout", &self.session_timeout)
            .field("connection_timeout", &self.connection_timeout)
            .field("settings", &self.settings)
            .field("auth", &self.credentials)
            .field("node_acl", &self.node_acl)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl ProviderBuilder for ZooKeeperLockProviderBuilder {
    fn settings_mut(&mut self) -> &mut ProviderSettings {
        &mut self.settings
    }
}

impl ZooKeeperLockProviderBuilder {
    /// The root path under which lock nodes live (default [`DEFAULT_ROOT`]). Created on first
    /// use if missing (persistent, with the [`node_acl`](Self::node_acl), as are its missing
    /// ancestors). Must be absolute, not `/`, without a trailing `/`, and not under
    /// `/zookeeper`.
    pub fn root(mut self, root: impl Into<String>) -> Self {
        self.root = root.into();
        self
    }

    /// The session timeout asked of the server (default [`DEFAULT_SESSION_TIMEOUT`]). A holder
    /// whose session expires loses its locks (their nodes are ephemeral): see the README.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long a silent connection is kept before the client tries another server (default:
    /// 2/5 of the session timeout, the client's own default).
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = Some(timeout);
        self
    }

    /// Authenticates the session with ZooKeeper's `digest` scheme (`addauth digest
    /// user:password`), when it connects and again on every reconnection. The server accepts any
    /// digest credentials (a wrong password is simply another identity); what they are worth is
    /// decided per node by its ACL. Nodes the provider creates are then, by default,
    /// creator-only ([`NodeAcl::CreatorAll`]): every instance of the application must use the
    /// same user and password. The password is never printed (`Debug` shows the user).
    ///
    /// `user` must not be empty and must not contain `:` ([`Error::Setup`] from `build()`).
    pub fn digest_auth(self, user: impl AsRef<str>, password: impl AsRef<str>) -> Self {
        self.auth_credential(Credential::digest(user.as_ref(), password.as_ref()))
    }

    /// Authenticates the session with `scheme` and `auth` bytes (`addauth <scheme> <auth>`), for
    /// a scheme the server has an authentication provider for; `auth("digest",
    /// b"user:password")` is [`digest_auth`](Self::digest_auth). May be called more than once
    /// (the session then has every identity). A scheme the server does not know, or credentials
    /// it rejects, fail the session with `AuthFailed`: [`Error::Setup`] from the first call.
    /// The bytes are never printed (`Debug` shows the scheme).
    pub fn auth(self, scheme: impl Into<String>, auth: impl Into<Vec<u8>>) -> Self {
        self.auth_credential(Credential::new(scheme.into(), auth.into()))
    }

    fn auth_credential(mut self, credential: Credential) -> Self {
        self.credentials.push(credential);
        self
    }

    /// The ACL of the nodes the provider creates: the root (and its missing ancestors), the
    /// name nodes, the clock node and the lock nodes. Default: [`NodeAcl::CreatorAll`] when the
    /// provider authenticates, [`NodeAcl::Open`] (anyone can do anything, as in earlier
    /// versions) when it does not. Nodes that exist already keep their ACL.
    pub fn node_acl(mut self, acl: NodeAcl) -> Self {
        self.node_acl = Some(acl);
        self
    }

    /// Connects to every server over TLS, trusting exactly the CA certificates in `pem` (one or
    /// more `-----BEGIN CERTIFICATE-----` blocks; no system roots): each server's certificate
    /// must be signed by one of them and carry the server's host, as the connect string names
    /// it, or [`tls_server_name`](Self::tls_server_name). Give the servers' TLS port
    /// (`secureClientPort`). Every connection of the provider, reconnections included, is TLS
    /// (1.3, or 1.2 where the server offers nothing newer; rustls on ring): see the README's
    /// "TLS" section.
    ///
    /// Needs the `tls` cargo feature: without it, [`build`](Self::build) returns
    /// [`Error::Setup`]. A `pem` without a certificate is [`Error::Setup`] from `build()`; an
    /// untrusted server certificate, [`Error::Setup`] from the first call.
    pub fn tls_ca_pem(mut self, pem: impl Into<String>) -> Self {
        self.tls.set_ca_pem(pem.into());
        self
    }

    /// A client certificate (`cert_pem`: the certificate, then any intermediates) and its
    /// private key (`key_pem`: PKCS#8, PKCS#1 or SEC1), presented in every TLS handshake, for
    /// servers that require one (`ssl.clientAuth=need`) or authenticate with it (`x509`). Needs
    /// [`tls_ca_pem`](Self::tls_ca_pem) too. The key is never printed.
    pub fn tls_identity_pem(
        mut self,
        cert_pem: impl Into<String>,
        key_pem: impl Into<String>,
    ) -> Self {
        self.tls.set_identity(cert_pem.into(), key_pem.into());
        self
    }

    /// The name (DNS name or IP address) every server's certificate must carry, instead of the
    /// host the connect string gives for it: for servers reached by an address their
    /// certificates do not name (a shared certificate, a tunnel). Needs
    /// [`tls_ca_pem`](Self::tls_ca_pem) too.
    pub fn tls_server_name(mut self, name: impl Into<String>) -> Self {
        self.tls.set_server_name(name.into());
        self
    }

    /// Validates the configuration and builds the provider. Does no I/O: the session is opened
    /// by the first lock call (bounded by the operation timeout). An invalid root path, connect
    /// string, `locked_by`, credentials, node ACL (a creator ACL without credentials) or TLS
    /// setting (TLS without the `tls` feature, a CA or client certificate that does not parse)
    /// gives [`Error::Setup`].
    pub fn build(self) -> Result<ZooKeeperLockProvider> {
        check_root(&self.root)
            .map_err(|why| setup(format!("root path {:?} is invalid: {why}", self.root)))?;
        let hosts = self.connect_string.split('/').next().unwrap_or("");
        if hosts.split(',').any(|h| h.trim().is_empty()) {
            return Err(setup(
                "the connect string must list host:port pairs separated by ',' (e.g. \
                 127.0.0.1:2181,127.0.0.1:2182)",
            ));
        }
        if self.connect_string.contains("://") {
            return Err(setup(
                "the connect string must list host:port pairs, without a scheme: for TLS, give \
                 the servers' TLS port and tls_ca_pem (feature `tls`)",
            ));
        }
        if self.connect_string.contains('/') {
            return Err(setup(
                "the connect string must not carry a chroot suffix: give the path with root() \
                 instead",
            ));
        }
        let settings = self.settings.validate(BACKEND)?;
        for c in &self.credentials {
            c.validate().map_err(setup)?;
        }
        let authenticated = !self.credentials.is_empty();
        let node_acl = self.node_acl.unwrap_or(if authenticated {
            NodeAcl::CreatorAll
        } else {
            NodeAcl::Open
        });
        let acls = node_acl.resolve(authenticated).map_err(setup)?;
        // The forwarder's connect and handshake are bounded as the client bounds a connection.
        let tls_timeout = self.connection_timeout.unwrap_or(self.session_timeout * 2 / 5);
        let tls = self.tls.resolve(&self.connect_string, tls_timeout).map_err(setup)?;
        Ok(ZooKeeperLockProvider {
            inner: Arc::new(Inner {
                clock_path: format!("{}/{CLOCK_CHILD}", self.root),
                connect_string: self.connect_string,
                root: self.root,
                session_timeout: self.session_timeout,
                connection_timeout: self.connection_timeout,
                timeout: settings.timeout(),
                locked_by: settings.locked_by().to_owned(),
                identity: auth::identity(&self.credentials),
                credentials: self.credentials,
                node_acl,
                acls,
                tls,
                client: Mutex::new(None),
                live: std::sync::Mutex::default(),
            }),
        })
    }
}

/// A [`LockProvider`] on ZooKeeper ephemeral nodes. Cheap to clone; clones share one ZooKeeper
/// session.
#[derive(Clone)]
pub struct ZooKeeperLockProvider {
    inner: Arc<Inner>,
}

impl fmt::Debug for ZooKeeperLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZooKeeperLockProvider")
            .field("root", &self.inner.root)
            .field("session_timeout", &self.inner.session_timeout)
            .field("operation_timeout", &self.inner.timeout)
            .field("locked_by", &self.inner.locked_by)
            .field("identity", &self.inner.identity)
            .field("node_acl", &self.inner.node_acl)
            .field("tls", &self.inner.tls)
            .finish_non_exhaustive()
    }
}

struct Inner {
    connect_string: String,
    root: String,
    clock_path: String,
    session_timeout: Duration,
    connection_timeout: Option<Duration>,
    timeout: Option<Duration>,
    locked_by: String,
    /// Presented by every session this provider opens. Never printed.
    credentials: Vec<Credential>,
    /// Who the credentials make the provider, for messages (schemes and digest users only).
    identity: String,
    /// What nodes are created with (the builder's choice or the default), and as entries.
    node_acl: NodeAcl,
    acls: Vec<Acl>,
    /// TLS to every server (through the forwarder of [`tls`]), when asked for.
    tls: Option<tls::Tls>,
    /// The session, opened on first use and replaced once it expired or closed.
    client: Mutex<Option<Client>>,
    /// Per lock node seen live by a clock-node look: its mzxid and a monotonic instant before
    /// which it surely has not expired. Spares the clock write while it holds.
    live: std::sync::Mutex<HashMap<String, (i64, Instant)>>,
}

/// How many lock nodes [`Inner::live`] remembers before it starts over.
const LIVE_CAPACITY: usize = 4096;

fn setup(message: impl Into<String>) -> Error {
    Error::Setup { backend: BACKEND, message: message.into() }
}

/// The client found no host to connect to ("no available hosts", its only words for it), and
/// what a plain TCP connect to each host of the connect string says (refused, not resolved):
/// the cause the client does not keep.
#[derive(Debug)]
struct HostsFailed {
    error: zookeeper_client::Error,
    hosts: Vec<(String, std::io::Error)>,
    /// Whether the provider speaks TLS (else a TLS-only server is a likely cause).
    tls: bool,
}

impl HostsFailed {
    /// How long each host's connect may take: a host that neither answers nor refuses is
    /// reported as not answering.
    const PROBE: Duration = Duration::from_millis(500);

    async fn probe(error: zookeeper_client::Error, connect_string: &str, tls: bool) -> Self {
        let hosts = connect_string.split('/').next().unwrap_or("");
        let mut failed = Vec::new();
        for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
            let why = match tokio::time::timeout(Self::PROBE, tokio::net::TcpStream::connect(host))
                .await
            {
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => e,
                Err(_) => std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {:?}", Self::PROBE),
                ),
            };
            failed.push((host.to_owned(), why));
        }
        Self { error, hosts: failed, tls }
    }
}

impl fmt::Display for HostsFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.error)?;
        for (i, (host, why)) in self.hosts.iter().enumerate() {
            write!(f, "{}{host}: {why}", if i == 0 { " (" } else { "; " })?;
        }
        if !self.hosts.is_empty() {
            f.write_str(")")?;
        } else if !self.tls {
            f.write_str(
                " (every host accepts TCP connections, but none completed the ZooKeeper \
                 handshake: a server that takes TLS only (secureClientPort) needs tls_ca_pem, \
                 feature `tls`; or the servers are not serving yet)",
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for HostsFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Maps a client error: connection problems are retryable [`Error::Unavailable`], permission
/// problems [`Error::Setup`], the rest [`Error::Backend`].
fn map_err(root: &str, e: zookeeper_client::Error) -> Error {
    use zookeeper_client::Error as Z;
    match e {
        Z::ConnectionLoss
        | Z::Timeout
        | Z::NoHosts
        | Z::SessionExpired
        | Z::SessionMoved
        | Z::ClientClosed
        | Z::Throttled
        | Z::NotReadOnly
        // The client's own connection failures: I/O errors and "no response from connection"
        // (a silent server past the connection timeout).
        | Z::Custom(_) => Error::unavailable(BACKEND, e),
        Z::NoAuth | Z::AuthFailed | Z::InvalidAcl => setup(format!(
            "no permission on {root} ({e}): the session needs create, write, read and delete \
             rights on the root and its children (see the README's \"Permissions\" section)"
        )),
        other => Error::backend(BACKEND, other),
    }
}

/// The paths of one lock name.
#[derive(Clone)]
struct Paths {
    name: String,
    lock: String,
}

/// What an acquire won: the name node's new version (owner check) and the transaction's zxid
/// (fencing token).
struct Granted {
    name_version: i32,
    zxid: i64,
    /// The leader's time of the transaction: the lock node's mtime.
    mtime: i64,
}

/// The kinds of acquire transaction.
#[derive(Clone, Copy)]
enum Txn {
    /// The name node exists.
    Existing,
    /// The name node does not exist yet.
    Fresh,
    /// The lock node was seen expired, with these versions.
    Takeover { name_version: i32, lock_version: i32 },
}

/// How an acquire transaction failed, when not with an I/O error.
enum Refused {
    /// The root is missing.
    NoRoot,
    /// The lock node exists: held (or expired, to be judged).
    Held,
    /// The name node (or the root) is missing.
    NoNameNode,
    /// The name node's or lock node's version changed (someone acquired, extended or released).
    Changed,
}

/// The encoded lock node data: `hold_ms` on the first line, `locked_by` on the second.
fn encode(hold: Duration, locked_by: &str) -> Vec<u8> {
    format!("{}\n{locked_by}", hold_ms(hold)).into_bytes()
}

/// The `hold_ms` stored for a duration: one millisecond more than asked (rounded up), since the
/// leader's mtime is a whole millisecond (truncated).
fn hold_ms(hold: Duration) -> i64 {
    duration_millis_ceil(hold).saturating_add(1)
}

/// `hold_ms` of a lock node; `None` for data this provider did not write (held until deleted).
fn decode_hold(data: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(data).ok()?;
    text.split('\n').next()?.parse::<i64>().ok().filter(|ms| *ms >= 0)
}

/// `locked_by` of a lock node: its second line (`None` for data this provider did not write).
fn decode_locked_by(data: &[u8]) -> Option<&str> {
    decode_hold(data)?;
    std::str::from_utf8(data).ok()?.split_once('\n').map(|(_, by)| by)
}

/// The record of lock `name` in its lock node (`data`, `stat`), judged by the leader's `now`
/// (ms since the epoch) as an acquire judges it: expired from `mtime + hold_ms`; a node whose
/// data this provider did not write never expires. The acquisition and fencing token are the
/// node's `czxid` (the acquiring transaction's zxid; extensions and the at-least rewrite keep it).
fn record(name: &str, data: &[u8], stat: &Stat, now: i64) -> LockInfo {
    let millis = |ms: i64| from_unix_micros(ms.saturating_mul(1000));
    let hold = decode_hold(data);
    let until = hold.map(|ms| stat.mtime.saturating_add(ms));
    let held = until.is_none_or(|until| until > now);
    let token = hold.and_then(|_| u64::try_from(stat.czxid).ok());
    let mut info = LockInfo::new(name, stat.czxid.to_string(), held, TimeSource::Server)
        .with_locked_at(millis(stat.mtime))
        .with_fencing_token(token);
    if let Some(until) = until {
        info = info.with_lock_until(millis(until));
    }
    if let Some(by) = decode_locked_by(data) {
        info = info.with_locked_by(by);
    }
    info
}

impl Inner {
    /// How persistent nodes (root, name nodes, clock node) are created: with the node ACL.
    fn persistent(&self) -> CreateOptions<'_> {
        CreateMode::Persistent.with_acls(Acls::new(&self.acls))
    }

    /// How lock nodes are created: ephemeral, with the node ACL.
    fn ephemeral(&self) -> CreateOptions<'_> {
        CreateMode::Ephemeral.with_acls(Acls::new(&self.acls))
    }

    /// Maps the server's answer to `op`: a refusal for want of a permission, credentials or a
    /// valid ACL is [`Error::Setup`] naming what is missing; the rest as [`Inner::map`].
    fn refused(&self, op: Op<'_>, e: zookeeper_client::Error) -> Error {
        match auth::refusal(op, &e, &self.identity, &self.node_acl) {
            Some(message) => setup(message),
            None => self.map(e),
        }
    }

    /// [`Inner::refused`] for a failed transaction whose requests are `ops`, in order.
    fn refused_multi(&self, ops: &[Op<'_>], e: MultiWriteError) -> Error {
        match e {
            MultiWriteError::OperationFailed { index, source } => match ops.get(index) {
                Some(op) => self.refused(*op, source),
                None => self.map(source),
            },
            MultiWriteError::RequestFailed { source } => self.map(source),
        }
    }

    fn paths(&self, name: &str) -> Paths {
        let node = format!("{}/{}", self.root, key_for(name));
        Paths { lock: format!("{node}/{LOCK_CHILD}"), name: node }
    }

    fn known_live(&self, lock: &str) -> Option<(i64, Instant)> {
        let live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.get(lock).copied()
    }

    fn remember_live(&self, lock: &str, mzxid: i64, until: Instant) {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        if live.len() >= LIVE_CAPACITY && !live.contains_key(lock) {
            live.clear();
        }
        live.insert(lock.to_owned(), (mzxid, until));
    }

    /// [`map_err`]; rejected credentials (or none, where the server requires them) are said
    /// as [`Inner::refused`] says them.
    fn map(&self, e: zookeeper_client::Error) -> Error {
        match e {
            zookeeper_client::Error::AuthFailed => self.refused(Op::Request, e),
            e => map_err(&self.root, e),
        }
    }

    /// The live session: opened on first use, reopened after it expired or was closed. While
    /// the client is disconnected (reconnecting on its own), calls fail at once with the
    /// retryable [`Error::Unavailable`] instead of queueing a lock request that would be sent
    /// after the caller gave up.
    async fn client(&self) -> Result<Client> {
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref() {
            match c.state() {
                SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                    return Ok(c.clone());
                }
                SessionState::Disconnected => {
                    return Err(Error::unavailable(
                        BACKEND,
                        "disconnected from ZooKeeper (the client is reconnecting)",
                    ));
                }
                state => {
                    tracing::info!(?state, "the ZooKeeper session ended; opening a new one");
                    *slot = None;
                }
            }
        }
        let mut connector =
            Client::connector().with_session_timeout(self.session_timeout).with_fail_eagerly();
        if let Some(t) = self.connection_timeout {
            connector = connector.with_connection_timeout(t);
        }
        for c in &self.credentials {
            connector = connector.with_auth(c.scheme(), c.secret());
        }
        // With TLS, the client reaches the servers through the forwarder.
        let connect_string = match &self.tls {
            Some(tls) => {
                tls.clear_failures();
                tls.connect_string()?
            }
            None => self.connect_string.clone(),
        };
        let client = match connector.connect(&connect_string).await {
            Ok(c) => c,
            Err(e) => {
                use zookeeper_client::Error as Z;
                // A failed TLS connection says more than the client's "no available hosts".
                let unreached = matches!(e, Z::NoHosts | Z::Timeout | Z::ConnectionLoss);
                if let Some(failure) =
                    self.tls.as_ref().filter(|_| unreached).and_then(tls::Tls::failure)
                {
                    return Err(failure);
                }
                return Err(match e {
                    Z::NoHosts => Error::unavailable(
                        BACKEND,
                        HostsFailed::probe(e, &self.connect_string, self.tls.is_some()).await,
                    ),
                    e => self.refused(Op::Authenticate, e),
                });
            }
        };
        tracing::debug!(session = %client.session_id(), "ZooKeeper session opened");
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Creates a node under the root (and the root when missing). Idempotent: a node that
    /// exists is fine even where this identity may not create it (the server checks CREATE on
    /// the parent before it looks whether the node exists).
    async fn ensure_node(&self, client: &Client, path: &str) -> Result<()> {
        use zookeeper_client::Error as Z;
        let created = match client.create(path, b"", &self.persistent()).await {
            Err(Z::NoNode) => {
                self.create_root(client).await?;
                client.create(path, b"", &self.persistent()).await
            }
            other => other,
        };
        match created {
            Ok(_) | Err(Z::NodeExists) => Ok(()),
            Err(Z::NoAuth) if client.check_stat(path).await.is_ok_and(|s| s.is_some()) => Ok(()),
            Err(e) => Err(self.refused(Op::Create(path), e)),
        }
    }

    /// Creates the root and its missing ancestors, with the node ACL.
    async fn create_root(&self, client: &Client) -> Result<()> {
        tracing::debug!(root = %self.root, "creating the root path");
        client
            .mkdir(&self.root, &self.persistent())
            .await
            .map_err(|e| self.refused(Op::CreatePath(&self.root), e))
    }

    /// One acquire transaction. [`Txn::Existing`]: bump the name node's version and create our
    /// lock node. [`Txn::Fresh`]: create the name node too. [`Txn::Takeover`]: bump the name
    /// node's version only if it is still the one seen, delete the expired lock node at the
    /// version seen, and create ours.
    async fn acquire_txn(
        &self,
        client: &Client,
        p: &Paths,
        data: &[u8],
        txn: Txn,
    ) -> Result<std::result::Result<Granted, Refused>> {
        let mut w = client.new_multi_writer();
        let (persistent, ephemeral) = (self.persistent(), self.ephemeral());
        let built = (|| {
            match txn {
                Txn::Existing => w.add_set_data(&p.name, b"", None)?,
                Txn::Fresh => {
                    w.add_create(&p.name, b"", &persistent)?;
                    w.add_set_data(&p.name, b"", Some(0))?;
                }
                Txn::Takeover { name_version, lock_version } => {
                    w.add_set_data(&p.name, b"", Some(name_version))?;
                    w.add_delete(&p.lock, Some(lock_version))?;
                }
            }
            w.add_create(&p.lock, data, &ephemeral)
        })();
        let ops: &[Op<'_>] = match txn {
            Txn::Existing => &[Op::SetData(&p.name), Op::Create(&p.lock)],
            Txn::Fresh => &[Op::Create(&p.name), Op::SetData(&p.name), Op::Create(&p.lock)],
            Txn::Takeover { .. } => {
                &[Op::SetData(&p.name), Op::Delete(&p.lock), Op::Create(&p.lock)]
            }
        };
        built.map_err(|e| self.map(e))?;
        let set_index = usize::from(matches!(txn, Txn::Fresh));
        match w.commit().await {
            Ok(results) => match results.into_iter().nth(set_index) {
                Some(zookeeper_client::MultiWriteResult::SetData { stat }) => Ok(Ok(Granted {
                    name_version: stat.version,
                    zxid: stat.mzxid,
                    mtime: stat.mtime,
                })),
                other => Err(Error::backend(
                    BACKEND,
                    format!("unexpected answer to the acquire transaction: {other:?}"),
                )),
            },
            Err(MultiWriteError::OperationFailed { index, source }) => {
                use zookeeper_client::Error as Z;
                let create_index = match txn {
                    Txn::Existing => 1,
                    Txn::Fresh | Txn::Takeover { .. } => 2,
                };
                match (txn, index, source) {
                    (Txn::Existing, 0, Z::NoNode) => Ok(Err(Refused::NoNameNode)),
                    (Txn::Fresh, 0, Z::NoNode) => Ok(Err(Refused::NoRoot)),
                    (Txn::Fresh, 0, Z::NodeExists) => Ok(Err(Refused::Changed)),
                    (Txn::Takeover { .. }, 0 | 1, Z::NoNode | Z::BadVersion) => {
                        Ok(Err(Refused::Changed))
                    }
                    (_, i, Z::NodeExists) if i == create_index => Ok(Err(Refused::Held)),
                    (_, index, source) => {
                        Err(self
                            .refused_multi(ops, MultiWriteError::OperationFailed { index, source }))
                    }
                }
            }
            Err(e) => Err(self.refused_multi(ops, e)),
        }
    }

    /// The leader's now (the clock node's new `mtime`), and the name and lock nodes as one
    /// consistent read, pipelined: both requests leave before either answer is awaited, so this
    /// costs one round trip.
    /// Without `clock`, only the read (`now` is then `None`).
    async fn look(&self, client: &Client, p: &Paths, clock: bool) -> Result<Look> {
        let snap = self.snapshot(client, &[&p.name, &p.lock], clock).await?;
        let mut nodes = snap.nodes.into_iter();
        let name = nodes.next().flatten().map(|(_, stat)| stat);
        let lock = nodes.next().flatten().map(|(data, stat)| (decode_hold(&data), stat));
        Ok(Look { now: snap.now, sent: snap.sent, name, lock })
    }

    /// The leader's now (with `clock`: the clock node's new `mtime`) and the nodes at `paths` as
    /// one consistent read (`None` for a missing node), pipelined: both requests leave before
    /// either answer is awaited, so this costs one round trip.
    async fn snapshot(&self, client: &Client, paths: &[&str], clock: bool) -> Result<Snapshot> {
        for _ in 0..2 {
            let sent = Instant::now();
            let clock = clock.then(|| client.set_data(&self.clock_path, b"", None));
            let mut reader = client.new_multi_reader();
            for path in paths {
                reader.add_get_data(path).map_err(|e| self.map(e))?;
            }
            let read = reader.commit();
            let (clock, read) = tokio::join!(
                async {
                    match clock {
                        Some(c) => Some(c.await),
                        None => None,
                    }
                },
                read
            );
            let now = match clock {
                None => None,
                Some(Ok(stat)) => Some(stat.mtime),
                Some(Err(zookeeper_client::Error::NoNode)) => {
                    self.ensure_node(client, &self.clock_path).await?;
                    continue;
                }
                Some(Err(e)) => return Err(self.refused(Op::SetData(&self.clock_path), e)),
            };
            let mut nodes = Vec::with_capacity(paths.len());
            for (i, answer) in read.map_err(|e| self.map(e))?.into_iter().enumerate() {
                nodes.push(match answer {
                    MultiReadResult::Data { data, stat } => Some((data, stat)),
                    MultiReadResult::Error { err: zookeeper_client::Error::NoNode } => None,
                    MultiReadResult::Error { err } => match paths.get(i) {
                        Some(path) => return Err(self.refused(Op::Read(path), err)),
                        None => return Err(self.map(err)),
                    },
                    other => {
                        return Err(Error::backend(
                            BACKEND,
                            format!("unexpected read answer {other:?}"),
                        ));
                    }
                });
            }
            if nodes.len() != paths.len() {
                return Err(Error::backend(
                    BACKEND,
                    format!("{} answers to a read of {} nodes", nodes.len(), paths.len()),
                ));
            }
            return Ok(Snapshot { now, sent, nodes });
        }
        Err(Error::backend(
            BACKEND,
            format!("the clock node {} keeps disappearing", self.clock_path),
        ))
    }

    /// [`LockProvider::inspect`] after the name check, without the time limit.
    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>> {
        let client = self.client().await?;
        let p = self.paths(name);
        let snap = self.snapshot(&client, &[&p.lock], true).await?;
        let now = snap.leader_now()?;
        Ok(snap
            .nodes
            .into_iter()
            .next()
            .flatten()
            .map(|(data, stat)| record(name, &data, &stat, now)))
    }

    /// [`LockProvider::list`] after the prefix check, without the time limit: the root's
    /// children (one answer holding them all: ZooKeeper's API has no paging), decoded, filtered
    /// by the prefix, sorted; then their lock nodes, in batches, until the page and one more
    /// record are found (name nodes without a lock node hold no record).
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<LockPage> {
        let client = self.client().await?;
        let children = match client.list_children(&self.root).await {
            Ok(c) => c,
            Err(zookeeper_client::Error::NoNode) => Vec::new(),
            Err(e) => return Err(self.refused(Op::List(&self.root), e)),
        };
        let mut names: Vec<String> = children
            .iter()
            .filter_map(|key| name_for(key))
            .filter(|n| n.starts_with(prefix) && cursor.is_none_or(|c| n.as_str() > c))
            .collect();
        names.sort_unstable();
        let mut records = Vec::new();
        let mut rest = names.as_slice();
        while !rest.is_empty() && records.len() <= limit {
            let take = (limit + 1 - records.len()).min(LIST_BATCH).min(rest.len());
            let (batch, tail) = rest.split_at(take);
            rest = tail;
            let paths: Vec<String> = batch.iter().map(|n| self.paths(n).lock).collect();
            let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
            let snap = self.snapshot(&client, &refs, true).await?;
            let now = snap.leader_now()?;
            for (name, node) in batch.iter().zip(snap.nodes) {
                if let Some((data, stat)) = node {
                    records.push(record(name, &data, &stat, now));
                }
            }
        }
        let more = records.len() > limit;
        records.truncate(limit);
        let next = if more { records.last().map(|r| r.name.clone()) } else { None };
        Ok(LockPage::new(records, next))
    }

    /// [`LockProvider::force_release`] after the name check, without the time limit: a read of
    /// the name and lock nodes (with the leader's now), then, if the lock node is still the
    /// acquisition seen (its `czxid`), one transaction: `check` the name node's version read
    /// (no acquisition since) and `delete` the lock node.
    async fn force_release(&self, seen: &LockInfo) -> Result<ForceRelease> {
        let client = self.client().await?;
        let p = self.paths(&seen.name);
        for _ in 0..FORCE_RELEASE_ATTEMPTS {
            let snap = self.snapshot(&client, &[&p.name, &p.lock], true).await?;
            let now = snap.leader_now()?;
            let mut nodes = snap.nodes.into_iter();
            let name_node = nodes.next().flatten();
            let Some((data, stat)) = nodes.next().flatten() else {
                return Ok(ForceRelease::Changed(None));
            };
            let info = record(&seen.name, &data, &stat, now);
            if info.acquisition != seen.acquisition {
                return Ok(ForceRelease::Changed(Some(info)));
            }
            let Some((_, name_stat)) = name_node else {
                return Err(Error::backend(
                    BACKEND,
                    format!("the lock node {} has no name node", p.lock),
                ));
            };
            let mut w = client.new_multi_writer();
            let built = (|| {
                w.add_check_version(&p.name, name_stat.version)?;
                w.add_delete(&p.lock, None)
            })();
            built.map_err(|e| self.map(e))?;
            use zookeeper_client::Error as Z;
            match w.commit().await {
                Ok(_) => return Ok(ForceRelease::Released(info)),
                // Released, or acquired again, in between: look again.
                Err(MultiWriteError::OperationFailed {
                    source: Z::NoNode | Z::BadVersion, ..
                }) => {}
                Err(e) => {
                    return Err(self.refused_multi(&[Op::Check(&p.name), Op::Delete(&p.lock)], e));
                }
            }
        }
        Err(Error::unavailable(
            BACKEND,
            "the lock changed under every attempt to release it; try again",
        ))
    }

    async fn acquire(&self, p: &Paths, data: &[u8]) -> Result<Option<(Granted, Client)>> {
        let client = self.client().await?;
        let mut txn = Txn::Existing;
        // A few turns at most: each refusal other than "held" means the name changed under us
        // (created, released, taken over) and is looked at again.
        for _ in 0..4 {
            match self.acquire_txn(&client, p, data, txn).await? {
                Ok(g) => return Ok(Some((g, client))),
                // A name never locked before: its name node is created in the acquire itself.
                Err(Refused::NoNameNode) => {
                    txn = Txn::Fresh;
                    continue;
                }
                Err(Refused::NoRoot) => {
                    self.create_root(&client).await?;
                    continue;
                }
                Err(Refused::Changed) if matches!(txn, Txn::Takeover { .. }) => return Ok(None),
                Err(Refused::Held | Refused::Changed) => {}
            }
            // A lock this instance already judged live, unchanged since (same mzxid) and
            // surely not expired yet by the monotonic clock: held, by a read alone (no clock
            // write, which is a logged and fsynced transaction).
            let known = self.known_live(&p.lock).filter(|(_, until)| Instant::now() < *until);
            let mut look = self.look(&client, p, known.is_none()).await?;
            if let (Some((zxid, until)), Some((_, lock))) = (known, &look.lock)
                && lock.mzxid == zxid
                && Instant::now() < until
            {
                return Ok(None);
            }
            if look.now.is_none() {
                look = self.look(&client, p, true).await?;
            }
            let (Some(now), Some(name), Some((hold, lock))) = (look.now, look.name, look.lock)
            else {
                // Released (or never created) in between: try again from the start.
                txn = Txn::Existing;
                continue;
            };
            let expired = hold.is_some_and(|ms| lock.mtime.saturating_add(ms) <= now);
            if !expired {
                if let Some(ms) = hold {
                    // The leader stamped `now` after `sent`, so the lock lives at least
                    // `remaining` past `sent`; less a margin for clock rates (0.1 % + 2 ms).
                    let remaining = lock.mtime.saturating_add(ms).saturating_sub(now);
                    let remaining = Duration::from_millis(u64::try_from(remaining).unwrap_or(0));
                    let margin = remaining / 1000 + Duration::from_millis(2);
                    if let Some(d) = remaining.checked_sub(margin) {
                        self.remember_live(&p.lock, lock.mzxid, look.sent + d);
                    }
                }
                return Ok(None);
            }
            tracing::debug!(
                lock = %p.lock,
                expired_ms_ago = now - lock.mtime.saturating_add(hold.unwrap_or(0)),
                "taking over an expired lock"
            );
            txn = Txn::Takeover { name_version: name.version, lock_version: lock.version };
        }
        Ok(None)
    }

    async fn try_lock(self: &Arc<Self>, config: &LockConfig) -> Result<Option<Lock>> {
        check_lock_name(BACKEND, config.name(), Some(MAX_NAME_LEN), false)?;
        let paths = self.paths(config.name());
        let data = encode(config.lock_at_most_for(), &self.locked_by);
        let acquisition = Acquisition::begin(config); // the default clock step, as declared
        let span = Operation::TryLock.span(BACKEND, config.name());
        let won = with_timeout("try_lock", self.timeout, self.acquire(&paths, &data))
            .instrument(span)
            .await?;
        // The handle keeps the session it acquired with: after that session expired (its
        // ephemeral node is gone) every owner-checked call on it fails.
        let Some((g, client)) = won else { return Ok(None) };
        let watcher = client.state_watcher();
        let session_timeout = client.session_timeout();
        let (stop, stopped) = oneshot::channel();
        let session_gone = Arc::new(AtomicBool::new(false));
        let handle = ZkHandle {
            _stop_watch: stop,
            session_gone: session_gone.clone(),
            inner: self.clone(),
            client,
            paths,
            name_version: g.name_version,
            token: g.zxid,
            mtime: g.mtime,
            hold_ms: hold_ms(config.lock_at_most_for()),
            since: Instant::now(),
        };
        let lock = acquisition.grant(handle).await?;
        let lease = lock.lease().clone();
        let lost_after = lost_after_disconnect(session_timeout, self.connection_timeout);
        let watch =
            watch_session(watcher, lost_after, session_timeout, lease, session_gone, stopped);
        tokio::spawn(watch);
        Ok(Some(lock))
    }
}

/// How long after the client reports `Disconnected` a held lock is reported lost: before the
/// server can have expired the session, and so before another node can hold the lock.
///
/// The server expires a session `session` after it last heard from it. The client notices a
/// silent connection only after its connection timeout (`connection`, by default 2/5 of the
/// session timeout) plus one tick of its timer (1/20 of the session timeout, or 1/8 of a
/// configured connection timeout up to 3/5 of the session's), counted from the last answer it
/// received. This delay is half of what is left of the session then: the other half is the
/// margin for a timer that fires late (a loaded machine, a process paused) and for the server
/// having heard the client a little before its last answer arrived. A connection that fails at
/// once (reset, refused) is noticed earlier, and the lock is then reported lost earlier still.
fn lost_after_disconnect(session: Duration, connection: Option<Duration>) -> Duration {
    let (detect, tick) = match connection {
        Some(c) if !c.is_zero() && c <= session * 3 / 5 => (c, c / 8),
        _ => (session * 2 / 5, session / 20),
    };
    session.saturating_sub(detect + tick) / 2
}

/// Reports a held lock lost as soon as its session is known to be gone, or could be, without
/// waiting for an extend: when the session reaches a terminal state (expired, closed,
/// authentication failed), or when the client has been disconnected for `lost_after` (see
/// [`lost_after_disconnect`]: soon the server may expire the session and delete the ephemeral
/// lock node; the client itself learns "expired" only once it reconnects). The session counts
/// as gone (`gone`: unlock and extend then know there is nothing to release) only once it is
/// terminated, or disconnected for a whole `session_timeout`, when the server has surely
/// expired it; until then an unlock still tries to delete the node (an error while
/// disconnected, the delete once reconnected within the session). Ends when the handle is
/// dropped (unlock, or the `Lock` dropped).
async fn watch_session(
    mut watcher: StateWatcher,
    lost_after: Duration,
    session_timeout: Duration,
    lease: Lease,
    gone: Arc<AtomicBool>,
    mut stopped: oneshot::Receiver<()>,
) {
    // When the current disconnection was noticed, and whether the loss was reported.
    let mut since: Option<Instant> = None;
    let mut reported = false;
    loop {
        let state = watcher.state();
        if state.is_terminated() {
            tracing::warn!(?state, "the ZooKeeper session of a held lock ended; lock lost");
            gone.store(true, Ordering::Release);
            lease.report_lost();
            return;
        }
        if matches!(state, SessionState::Disconnected) {
            since.get_or_insert_with(Instant::now);
        } else {
            since = None;
        }
        let next = since.map(|s| s + if reported { session_timeout } else { lost_after });
        let far = Instant::now() + Duration::from_secs(3600);
        tokio::select! {
            _ = &mut stopped => return,
            _ = watcher.changed() => {}
            () = tokio::time::sleep_until(next.unwrap_or(far)), if next.is_some() => {
                if reported {
                    gone.store(true, Ordering::Release);
                    return;
                }
                tracing::warn!(
                    ?lost_after,
                    "disconnected from ZooKeeper for as long as the server may keep the \
                     session; lock lost"
                );
                lease.report_lost();
                reported = true;
            }
        }
    }
}

/// The answer of [`Inner::snapshot`].
struct Snapshot {
    /// The leader's now, in ms since the epoch (`None`: not asked).
    now: Option<i64>,
    /// When the requests were sent: the leader stamped `now` after this instant.
    sent: Instant,
    /// Each node asked for, in order: its data and stat, `None` when missing.
    nodes: Vec<Option<(Vec<u8>, Stat)>>,
}

impl Snapshot {
    fn leader_now(&self) -> Result<i64> {
        self.now.ok_or_else(|| Error::backend(BACKEND, "a read without the leader's time"))
    }
}

struct Look {
    /// The leader's now, in ms since the epoch (`None`: not asked).
    now: Option<i64>,
    /// When the requests were sent: the leader stamped `now` after this instant.
    sent: Instant,
    name: Option<Stat>,
    lock: Option<(Option<i64>, Stat)>,
}

/// One held lock: the name node's version its acquisition set (owner check) and the acquiring
/// zxid (fencing token).
struct ZkHandle {
    /// Dropped with the handle: stops the session watcher (see [`watch_session`]).
    _stop_watch: oneshot::Sender<()>,
    /// Set by the watcher once the session is surely gone (and the ephemeral lock node with it):
    /// unlock is then a no-op and extend reports the loss, even while still disconnected.
    session_gone: Arc<AtomicBool>,
    inner: Arc<Inner>,
    client: Client,
    paths: Paths,
    name_version: i32,
    token: i64,
    /// The lock node's mtime (the leader's time of its last write) and hold: the server deems
    /// it expired from `mtime + hold_ms`.
    mtime: i64,
    hold_ms: i64,
    /// When the answer of the acquire (or last extension) arrived: `lock_at_least_for` counts
    /// from here, which keeps the lock at least as long as asked.
    since: Instant,
}

impl ZkHandle {
    /// Whether this handle's session can still send: `Err` when disconnected (retryable), and
    /// `Ok(false)` when the session ended (its ephemeral lock node is gone with it).
    fn session_alive(&self) -> Result<bool> {
        if self.session_gone.load(Ordering::Acquire) {
            // The watcher saw the session end, or a whole session timeout of disconnection.
            return Ok(false);
        }
        match self.client.state() {
            SessionState::SyncConnected | SessionState::ConnectedReadOnly => Ok(true),
            SessionState::Disconnected => Err(Error::unavailable(
                BACKEND,
                "disconnected from ZooKeeper (the client is reconnecting)",
            )),
            _ => Ok(false),
        }
    }

    /// An owner-checked transaction: the name node still has this acquisition's version (no
    /// acquisition since ours, so the lock node, if any, is ours), then a write or delete of the
    /// lock node at any version. The lock node's own version is deliberately not checked: an
    /// extension whose future was dropped after it was sent may have changed it, and the
    /// release must still work. `Ok(None)`: not ours any more.
    async fn checked(&self, data: Option<&[u8]>) -> Result<Option<Option<Stat>>> {
        let inner = &self.inner;
        let mut w = self.client.new_multi_writer();
        let built = (|| {
            w.add_check_version(&self.paths.name, self.name_version)?;
            match data {
                Some(d) => w.add_set_data(&self.paths.lock, d, None),
                None => w.add_delete(&self.paths.lock, None),
            }
        })();
        built.map_err(|e| inner.map(e))?;
        use zookeeper_client::Error as Z;
        match w.commit().await {
            Ok(results) => Ok(Some(match results.into_iter().nth(1) {
                Some(zookeeper_client::MultiWriteResult::SetData { stat }) => Some(stat),
                _ => None,
            })),
            Err(MultiWriteError::OperationFailed { source: Z::NoNode | Z::BadVersion, .. }) => {
                Ok(None)
            }
            Err(
                MultiWriteError::RequestFailed { source: Z::SessionExpired }
                | MultiWriteError::OperationFailed { source: Z::SessionExpired, .. },
            ) => Ok(None),
            Err(e) => {
                let write = match data {
                    Some(_) => Op::SetData(&self.paths.lock),
                    None => Op::Delete(&self.paths.lock),
                };
                Err(inner.refused_multi(&[Op::Check(&self.paths.name), write], e))
            }
        }
    }
}

#[async_trait::async_trait]
impl LockHandle for ZkHandle {
    async fn unlock(&mut self, config: &LockConfig) -> Result<()> {
        if !self.session_alive()? {
            // The session ended: its ephemeral node went with it.
            return Ok(());
        }
        let timeout = self.inner.timeout;
        with_timeout("unlock", timeout, async {
            let rest = config
                .lock_at_least_for()
                .checked_sub(self.since.elapsed())
                .filter(|d| !d.is_zero());
            let data = rest.map(|hold| encode(hold, &self.inner.locked_by));
            // Within lock_at_least_for: the node stays, holding the rest of it (from the
            // leader's now); after it: the node goes. A stale holder's transaction fails the
            // name node's version check and changes nothing.
            self.checked(data.as_deref()).await.map(|_| ())
        })
        .instrument(Operation::Unlock.span(BACKEND, config.name()))
        .await
    }

    async fn extend(&mut self, config: &LockConfig) -> Result<()> {
        let lost = || Error::LockLost { name: config.name().to_owned() };
        if !self.session_alive()? {
            return Err(lost());
        }
        let timeout = self.inner.timeout;
        let data = encode(config.lock_at_most_for(), &self.inner.locked_by);
        let done = with_timeout("extend", timeout, self.checked(Some(&data)))
            .instrument(Operation::Extend.span(BACKEND, config.name()))
            .await?;
        let Some(Some(stat)) = done else { return Err(lost()) };
        if stat.mtime >= self.mtime.saturating_add(self.hold_ms) {
            // The extension reached the leader after the lock had expired by its clock (nobody
            // had taken it yet): it must not revive the lock. Release it again (owner-checked)
            // and report the loss.
            tracing::debug!(lock = %self.paths.lock, "an extension arrived after expiry; releasing");
            if let Err(error) = with_timeout("extend", timeout, self.checked(None)).await {
                tracing::warn!(%error, "releasing a lock revived by a late extension failed; it expires after lock_at_most_for");
            }
            return Err(lost());
        }
        self.mtime = stat.mtime;
        self.hold_ms = hold_ms(config.lock_at_most_for());
        self.since = Instant::now();
        Ok(())
    }

    fn fencing_token(&self) -> Option<u64> {
        u64::try_from(self.token).ok()
    }
}

#[async_trait::async_trait]
impl LockProvider for ZooKeeperLockProvider {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        self.inner.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(true)
            .with_server_time(true)
            .with_owner_checked(true)
            // The leader stamps mtime in whole milliseconds.
            .with_granularity(Duration::from_millis(1))
            .with_max_name_len(Some(MAX_NAME_LEN))
            .with_check(true)
            .with_inspect(true)
            .with_list(true)
            .with_force_release(true)
    }

    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    /// Opens the session if there is none (or says it is reconnecting; credentials the server
    /// rejects are [`Error::Setup`]), then reads the clock node: the ensemble answers, and an
    /// identity the tree's ACL does not let read it is [`Error::Setup`] naming the missing
    /// right. A missing root or clock node is fine: the first lock creates them.
    async fn check(&self) -> Result<()> {
        let inner = &self.inner;
        let read = async {
            let client = inner.client().await?;
            match client.get_data(&inner.clock_path).await {
                Ok(_) | Err(zookeeper_client::Error::NoNode) => Ok(()),
                Err(e) => Err(inner.refused(Op::Read(&inner.clock_path), e)),
            }
        };
        Operation::Check.run(BACKEND, "", inner.timeout, read).await
    }

    /// The lock node, read together with a write of the clock node (its new `mtime` is the
    /// leader's now, which judges whether the lock is held), pipelined: one round trip. The
    /// acquisition is the lock node's `czxid`.
    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>> {
        check_lock_name(BACKEND, name, Some(MAX_NAME_LEN), false)?;
        let inner = &self.inner;
        Operation::Inspect.run(BACKEND, name, inner.timeout, inner.inspect(name)).await
    }

    /// `getChildren` of the root (ZooKeeper answers with all the children at once), filtered
    /// by the prefix as a value on the decoded names and sorted here; then the lock nodes of the
    /// page, each batch read together with a clock write. The cursor is the last name of the
    /// page.
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<LockPage> {
        if !prefix.is_empty() {
            check_lock_name(BACKEND, prefix, Some(MAX_NAME_LEN), false)?;
        }
        let inner = &self.inner;
        let list = inner.list(prefix, cursor, page_limit(limit));
        Operation::List.run(BACKEND, prefix, inner.timeout, list).await
    }

    /// A read of the name and lock nodes, then, if the lock node is still the acquisition seen,
    /// a transaction that checks the name node's version and deletes the lock node. The holder
    /// that lost it fails its next extend (`LockLost`); its unlock changes nothing.
    async fn force_release(&self, seen: &LockInfo) -> Result<ForceRelease> {
        let name = seen.name.as_str();
        check_lock_name(BACKEND, name, Some(MAX_NAME_LEN), false)?;
        let inner = &self.inner;
        let released = Operation::ForceRelease
            .run(BACKEND, name, inner.timeout, inner.force_release(seen))
            .await?;
        log_forced_release(BACKEND, seen, &released);
        Ok(released)
    }
}

impl ZooKeeperLockProvider {
    /// Starts a builder on a connect string `host:port[,host:port...]` (root `/shedlock`, 10 s
    /// session timeout, 10 s operation timeout).
    pub fn builder(connect_string: impl Into<String>) -> ZooKeeperLockProviderBuilder {
        ZooKeeperLockProviderBuilder {
            connect_string: connect_string.into(),
            root: DEFAULT_ROOT.to_owned(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            connection_timeout: None,
            settings: ProviderSettings::new(),
            credentials: Vec::new(),
            node_acl: None,
            tls: tls::TlsSettings::default(),
        }
    }

    /// The root path.
    pub fn root(&self) -> &str {
        &self.inner.root
    }

    /// The ACL the provider creates nodes with: the builder's
    /// [`node_acl`](ZooKeeperLockProviderBuilder::node_acl), or the default it chose
    /// ([`NodeAcl::CreatorAll`] when authenticated, [`NodeAcl::Open`] when not).
    pub fn node_acl(&self) -> &NodeAcl {
        &self.inner.node_acl
    }

    /// The name node of a lock name: `<root>/<key_for(name)>`.
    pub fn name_path(&self, name: &str) -> String {
        self.inner.paths(name).name
    }

    /// The ephemeral lock node of a lock name: `<root>/<key_for(name)>/lock`.
    pub fn lock_path(&self, name: &str) -> String {
        self.inner.paths(name).lock
    }

    /// Opens the session now (instead of on the first lock call) and creates the root and the
    /// clock node if missing. Bounded by the operation timeout.
    pub async fn connect(&self) -> Result<()> {
        let inner = &self.inner;
        with_timeout("connect", inner.timeout, async {
            let client = inner.client().await?;
            inner.ensure_node(&client, &inner.clock_path).await
        })
        .await
    }

    /// The id of the current session, if one is open.
    pub async fn session_id(&self) -> Option<i64> {
        self.inner.client.lock().await.as_ref().map(|c| c.session_id().0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_disconnected_lock_is_lost_before_the_server_can_expire_its_session() {
        let ms = Duration::from_millis;
        // Defaults: noticed after 2/5 + 1/20 of the session; lost half-way through the rest.
        assert_eq!(lost_after_disconnect(ms(10_000), None), ms(2_750));
        // A configured connection timeout: noticed after it plus 1/8 of it.
        assert_eq!(lost_after_disconnect(ms(10_000), Some(ms(4_000))), ms(2_750));
        assert_eq!(lost_after_disconnect(ms(10_000), Some(ms(2_000))), ms(3_875));
        // One above 3/5 of the session is the client's default again.
        assert_eq!(lost_after_disconnect(ms(10_000), Some(ms(9_000))), ms(2_750));
        for session in [1_000, 1_500, 10_000, 40_000] {
            for connection in [None, Some(ms(1)), Some(ms(session / 3)), Some(ms(session))] {
                let after = lost_after_disconnect(ms(session), connection);
                let noticed_by = match connection {
                    Some(c) if c <= ms(session) * 3 / 5 => c + c / 8,
                    _ => ms(session) * 9 / 20,
                };
                // Half of the rest is left as margin.
                assert!(noticed_by + after * 2 <= ms(session), "{session} {connection:?}");
            }
        }
    }

    #[test]
    fn keys_are_valid_znode_names_and_one_to_one() {
        let names =
            ["a", "a.b", "a%2Eb", "a b", "/", "..", ".", "ü", "a/b", "a\0", "%", "zookeeper"];
        let keys: std::collections::HashSet<_> = names.iter().map(|n| key_for(n)).collect();
        assert_eq!(keys.len(), names.len());
        for k in &keys {
            assert!(k.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_%".contains(&b)), "{k}");
            assert!(!k.starts_with('.'));
        }
        assert_eq!(key_for("ü"), "%C3%BC");
        assert_eq!(key_for(&"\u{7f}".repeat(MAX_NAME_LEN)).len(), 3 * MAX_NAME_LEN);
    }

    #[test]
    fn bad_roots_and_connect_strings_are_setup_errors() {
        for root in [
            "/",
            "",
            "shedlock",
            "/a/",
            "/a//b",
            "/a/./b",
            "/..",
            "/zookeeper",
            "/zookeeper/x",
            "/a\u{1}",
        ] {
            let r = ZooKeeperLockProvider::builder("127.0.0.1:2181").root(root).build();
            assert!(matches!(r, Err(Error::Setup { .. })), "{root:?}: {r:?}");
        }
        assert!(ZooKeeperLockProvider::builder("127.0.0.1:2181").root("/a/b-c").build().is_ok());
        for cs in ["", "127.0.0.1:2181,", "127.0.0.1:2181/chroot"] {
            let r = ZooKeeperLockProvider::builder(cs).build();
            assert!(matches!(r, Err(Error::Setup { .. })), "{cs:?}: {r:?}");
        }
        let r = ZooKeeperLockProvider::builder("h:1").locked_by("x".repeat(256)).build();
        assert!(matches!(r, Err(Error::Setup { .. })));
    }

    #[test]
    fn lock_data_round_trips_and_rounds_up() {
        assert_eq!(decode_hold(&encode(Duration::from_micros(1500), "h/1")), Some(3));
        assert_eq!(
            decode_locked_by(&encode(Duration::from_micros(1500), "h/1\nx")),
            Some("h/1\nx")
        );
        assert_eq!(decode_hold(b"junk"), None);
        assert_eq!(decode_locked_by(b"junk\nx"), None);
    }

    #[test]
    fn node_names_decode_to_the_names_they_were_made_of_and_others_to_none() {
        for n in ["a", "a.b", "a%2Eb", "a b", "/", "..", "ü", "c30_%/0", "%"] {
            assert_eq!(name_for(&key_for(n)).as_deref(), Some(n), "{n:?}");
        }
        for key in [".clock", "%2e", "%2D", "%", "%4", "a.b", "%FF"] {
            assert_eq!(name_for(key), None, "{key:?}");
        }
    }

    #[test]
    fn records_are_judged_by_the_leaders_now() {
        let stat = Stat {
            czxid: 42,
            mzxid: 42,
            pzxid: 42,
            ctime: 1_000,
            mtime: 1_000,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 7,
            data_length: 0,
            num_children: 0,
        };
        let data = encode(Duration::from_millis(99), "me");
        let held = record("n", &data, &stat, 1_099);
        assert!(held.held);
        assert_eq!((held.acquisition.as_str(), held.fencing_token), ("42", Some(42)));
        assert_eq!(held.locked_by.as_deref(), Some("me"));
        assert!(!record("n", &data, &stat, 1_100).held, "expired at mtime + hold_ms");
        let foreign = record("n", b"junk", &stat, i64::MAX);
        assert!(foreign.held && foreign.lock_until.is_none() && foreign.fencing_token.is_none());
    }
}

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

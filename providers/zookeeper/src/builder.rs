//! The builder: the provider's settings, their checks, and `build`.

use std::{fmt, sync::Arc, time::Duration};

use shedlock::{Result, store::ProviderSettings};
use tokio::sync::Mutex;

use crate::{
    BACKEND, NodeAcl, ProviderBuilder, ZooKeeperLockProvider,
    auth::{self, Credential},
    keys::CLOCK_CHILD,
    session::Inner,
    tls,
};

use shedlock::Error;

/// The default session timeout asked of the server (the server clamps it to between 2 and 20
/// ticks: 4 s to 40 s with its default `tickTime` of 2 s).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The default root path.
pub const DEFAULT_ROOT: &str = "/shedlock";

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
        check_root(&self.root).map_err(|why| {
            Error::setup(BACKEND, format!("root path {:?} is invalid: {why}", self.root))
        })?;
        let hosts = self.connect_string.split('/').next().unwrap_or("");
        if hosts.split(',').any(|h| h.trim().is_empty()) {
            return Err(Error::setup(
                BACKEND,
                "the connect string must list host:port pairs separated by ',' (e.g. \
                 127.0.0.1:2181,127.0.0.1:2182)",
            ));
        }
        if self.connect_string.contains("://") {
            return Err(Error::setup(
                BACKEND,
                "the connect string must list host:port pairs, without a scheme: for TLS, give \
                 the servers' TLS port and tls_ca_pem (feature `tls`)",
            ));
        }
        if self.connect_string.contains('/') {
            return Err(Error::setup(
                BACKEND,
                "the connect string must not carry a chroot suffix: give the path with root() \
                 instead",
            ));
        }
        let settings = self.settings.validate(BACKEND)?;
        for c in &self.credentials {
            c.validate().map_err(|m| Error::setup(BACKEND, m))?;
        }
        let authenticated = !self.credentials.is_empty();
        let node_acl = self.node_acl.unwrap_or(if authenticated {
            NodeAcl::CreatorAll
        } else {
            NodeAcl::Open
        });
        let acls = node_acl.resolve(authenticated).map_err(|m| Error::setup(BACKEND, m))?;
        // The forwarder's connect and handshake are bounded as the client bounds a connection.
        let tls_timeout = self.connection_timeout.unwrap_or(self.session_timeout * 2 / 5);
        let tls = self
            .tls
            .resolve(&self.connect_string, tls_timeout)
            .map_err(|m| Error::setup(BACKEND, m))?;
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
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use shedlock::Error;

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
}

//! [`EtcdClientBuilder`]: an etcd-client [`Client`] set up as production needs it: TLS (feature
//! `tls`), a user whose password never crosses the network in clear unless the caller says so,
//! an auth token renewed when it expires, and errors that say what to change.

use std::{
    fmt,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use etcd_client::{Client, ConnectOptions};
use shedlock::{Error, Result};

use crate::{BACKEND, error::classify};

/// Builds an etcd-client [`Client`] for [`EtcdLockProvider::builder`](crate::EtcdLockProvider::builder):
/// endpoints, a user, TLS, timeouts.
///
/// ```no_run
/// # async fn demo(ca_pem: String, password: String) -> shedlock::Result<()> {
/// use shedlock_etcd::{EtcdClientBuilder, EtcdLockProvider};
///
/// let client = EtcdClientBuilder::new(["https://10.0.0.1:2379", "https://10.0.0.2:2379"])
///     .tls_ca_pem(ca_pem) // feature `tls`
///     .user("billing", password)
///     .connect()
///     .await?;
/// let provider = EtcdLockProvider::builder(client).key_prefix("billing/").build()?;
/// # Ok(()) }
/// ```
///
/// - **Passwords stay off plaintext.** A user with `http://` endpoints is refused
///   (`Error::Setup`): etcd's login (`Authenticate`) would carry the password in clear, and so
///   would every re-login. Use `https://` endpoints (feature `tls`), or, on a link you trust
///   (loopback, a private network), opt in with
///   [`allow_password_over_plaintext(true)`](Self::allow_password_over_plaintext), which logs a
///   warning once per process.
/// - **Tokens are renewed.** etcd's auth token expires after `--auth-token-ttl` (300 s by default)
///   without use; the client logs in again when etcd refuses it (etcd-client's
///   `with_auto_token_refresh`), instead of failing every call after an idle spell.
/// - **Secrets are never shown**: `Debug` prints neither the password nor a client key, and the
///   errors of [`connect`](Self::connect) quote the server's words, never the request.
#[must_use]
#[derive(Clone)]
pub struct EtcdClientBuilder {
    endpoints: Vec<String>,
    user: Option<(String, String)>,
    allow_plaintext_password: bool,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    keep_alive: Option<(Duration, Duration)>,
    #[cfg(feature = "tls")]
    pub(crate) tls: crate::tls::TlsSettings,
}

impl fmt::Debug for EtcdClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("EtcdClientBuilder");
        d.field("endpoints", &self.endpoints)
            .field("user", &self.user.as_ref().map(|(name, _)| name))
            .field("password", &self.user.as_ref().map(|_| "***"))
            .field("allow_password_over_plaintext", &self.allow_plaintext_password)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("keep_alive", &self.keep_alive);
        #[cfg(feature = "tls")]
        d.field("tls", &self.tls);
        d.finish()
    }
}

/// The time limit of a TLS handshake when no [`EtcdClientBuilder::connect_timeout`] is given.
#[cfg(feature = "tls")]
const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the warning about a password over plaintext was logged (once per process).
static PLAINTEXT_WARNED: AtomicBool = AtomicBool::new(false);

/// How an endpoint is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Http,
    Https,
    /// `host:port`: TLS when TLS settings were given, else plaintext (as etcd-client does).
    None,
}

fn scheme(endpoint: &str) -> Scheme {
    let lower = endpoint.get(..8).unwrap_or(endpoint).to_ascii_lowercase();
    if lower.starts_with("https://") {
        Scheme::Https
    } else if lower.starts_with("http://") {
        Scheme::Http
    } else {
        Scheme::None
    }
}

impl EtcdClientBuilder {
    /// A builder for a client of `endpoints`: give every member of the cluster (`http://host:2379`,
    /// `https://host:2379`; all of one scheme).
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            user: None,
            allow_plaintext_password: false,
            connect_timeout: None,
            request_timeout: None,
            keep_alive: None,
            #[cfg(feature = "tls")]
            tls: crate::tls::TlsSettings::default(),
        }
    }

    /// Log in as `name` with `password` (etcd with `auth enable`). The password is sent only
    /// over TLS unless [`allow_password_over_plaintext`](Self::allow_password_over_plaintext).
    pub fn user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((name.into(), password.into()));
        self
    }

    /// Whether a user's password may be sent over `http://` endpoints, in clear (default
    /// `false`: [`connect`](Self::connect) refuses). With `true` the first such connect of the
    /// process logs a warning.
    pub fn allow_password_over_plaintext(mut self, allow: bool) -> Self {
        self.allow_plaintext_password = allow;
        self
    }

    /// The time limit of opening a connection to an endpoint: the TCP connect, and the TLS
    /// handshake (which is otherwise limited to 10 s; without a limit a server that accepts and
    /// then says nothing would hold every request). Default: none for the TCP connect (the
    /// system's).
    pub fn connect_timeout(mut self, limit: Duration) -> Self {
        self.connect_timeout = Some(limit);
        self
    }

    /// The time limit of each request, so a stalled connection fails its request (the
    /// provider's `operation_timeout` bounds each lock call besides).
    pub fn request_timeout(mut self, limit: Duration) -> Self {
        self.request_timeout = Some(limit);
        self
    }

    /// HTTP/2 keep-alive pings every `interval`, the connection given up when one is not
    /// answered within `timeout`: finds a silently dead connection.
    pub fn keep_alive(mut self, interval: Duration, timeout: Duration) -> Self {
        self.keep_alive = Some((interval, timeout));
        self
    }

    /// The endpoints as etcd-client takes them, and its options. Checks everything that needs no
    /// I/O.
    fn prepare(&self) -> Result<(Vec<String>, ConnectOptions)> {
        if self.endpoints.is_empty() {
            return Err(Error::setup(BACKEND, "no etcd endpoint given"));
        }
        let schemes: Vec<Scheme> = self.endpoints.iter().map(|e| scheme(e)).collect();
        let any = |s: Scheme| schemes.contains(&s);
        if any(Scheme::Https) && (any(Scheme::Http) || any(Scheme::None)) {
            return Err(Error::setup(
                BACKEND,
                "the endpoints mix https:// with http:// or no scheme: give them all as https://",
            ));
        }
        let mut options = ConnectOptions::new();
        #[cfg(feature = "tls")]
        let tls = any(Scheme::Https) || (self.tls.is_set() && !any(Scheme::Http));
        #[cfg(not(feature = "tls"))]
        let tls = false;
        if any(Scheme::Https) && !tls {
            return Err(Error::setup(
                BACKEND,
                "https:// endpoints need TLS, which this build leaves out: enable the `tls` \
                 feature of shedlock-etcd (rustls on ring)",
            ));
        }
        #[cfg(feature = "tls")]
        if self.tls.is_set() && any(Scheme::Http) {
            return Err(Error::setup(
                BACKEND,
                "TLS settings were given, but the endpoints are http:// (plaintext): give them as \
                 https://",
            ));
        }
        #[cfg(feature = "tls")]
        if tls {
            let handshake = self.connect_timeout.unwrap_or(DEFAULT_HANDSHAKE_TIMEOUT);
            options = options.with_tls(self.tls.options(handshake)?);
        }
        let endpoints = self
            .endpoints
            .iter()
            .map(|e| match scheme(e) {
                Scheme::None if tls => format!("https://{e}"),
                Scheme::None => format!("http://{e}"),
                Scheme::Http | Scheme::Https => e.clone(),
            })
            .collect();
        if let Some((name, password)) = &self.user {
            if !tls {
                if !self.allow_plaintext_password {
                    return Err(Error::setup(
                        BACKEND,
                        format!(
                            "the password of etcd user {name:?} would cross the network in clear \
                         (the endpoints are http://): use https:// endpoints (feature `tls`, \
                         tls_ca_pem), or, on a link you trust, \
                         allow_password_over_plaintext(true)"
                        ),
                    ));
                }
                if !PLAINTEXT_WARNED.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        user = %name,
                        endpoints = ?self.endpoints,
                        "etcd: the password of this user crosses the network in clear (http:// \
                         endpoints, allow_password_over_plaintext): anyone on the path can read it"
                    );
                }
            }
            options =
                options.with_user(name.clone(), password.clone()).with_auto_token_refresh(true);
        }
        if let Some(limit) = self.connect_timeout {
            options = options.with_connect_timeout(limit);
        }
        if let Some(limit) = self.request_timeout {
            options = options.with_timeout(limit);
        }
        if let Some((interval, timeout)) = self.keep_alive {
            options = options.with_keep_alive(interval, timeout);
        }
        Ok((endpoints, options))
    }

    /// Checks the settings and connects; with a user, logs in (one round trip to one endpoint).
    /// Without a user no request is sent: an unreachable cluster or a certificate not accepted
    /// shows at the first call (`Error::Unavailable`, or `Error::Setup` for TLS).
    ///
    /// Errors: `Error::Setup` for settings that cannot work (an `https://` endpoint without the
    /// `tls` feature or a CA, a password over plaintext, unreadable PEM), a refused login (no such
    /// user or a wrong password; never quoting the password) or a certificate not accepted;
    /// `Error::Unavailable` when no endpoint could be reached.
    pub async fn connect(self) -> Result<Client> {
        let (endpoints, options) = self.prepare()?;
        let password = self.user.as_ref().map(|(_, p)| p.as_str()).unwrap_or_default();
        Client::connect(endpoints, Some(options))
            .await
            .map_err(|e| hide(connect_error(e), password))
    }
}

fn connect_error(e: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    match e {
        E::InvalidArgs(msg) => {
            Error::setup(BACKEND, format!("etcd-client refused the settings: {msg}"))
        }
        E::InvalidUri(u) => Error::setup(BACKEND, format!("an endpoint is not a URL: {u}")),
        // A refused login, a certificate not accepted: `Error::Setup`; no endpoint reached:
        // `Error::Unavailable`.
        other => classify(other).into_error(),
    }
}

/// `e`, with `secret` (when not empty) replaced in its text: no message of a connect quotes the
/// password, whatever a lower layer put in it.
fn hide(e: Error, secret: &str) -> Error {
    if secret.is_empty() || !(e.to_string().contains(secret) || format!("{e:?}").contains(secret)) {
        return e;
    }
    let text = e.to_string().replace(secret, "***");
    match e {
        Error::Setup { .. } => Error::setup(BACKEND, text),
        Error::Unavailable { .. } => Error::unavailable(BACKEND, text),
        _ => Error::backend(BACKEND, text),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn refused(b: &EtcdClientBuilder) -> String {
        match b.prepare() {
            Err(Error::Setup { message, .. }) => message,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_password_over_plaintext_is_refused_unless_allowed() {
        let b = EtcdClientBuilder::new(["http://10.0.0.1:2379"]).user("app", "s3cret-pw");
        let msg = refused(&b);
        assert!(msg.contains("in clear") && msg.contains("allow_password_over_plaintext"), "{msg}");
        assert!(!msg.contains("s3cret-pw"), "{msg}");
        let b = EtcdClientBuilder::new(["10.0.0.1:2379"]).user("app", "s3cret-pw");
        assert!(refused(&b).contains("in clear"));
        let b = b.allow_password_over_plaintext(true);
        assert!(b.prepare().is_ok());
        assert!(EtcdClientBuilder::new(["http://10.0.0.1:2379"]).prepare().is_ok());
    }

    #[test]
    fn debug_shows_the_user_and_never_the_password() {
        let b = EtcdClientBuilder::new(["http://10.0.0.1:2379"]).user("app", "s3cret-pw");
        let shown = format!("{b:?}");
        assert!(shown.contains("app") && !shown.contains("s3cret-pw"), "{shown}");
    }

    #[test]
    fn mixed_schemes_and_no_endpoints_are_refused() {
        let none: [&str; 0] = [];
        assert!(refused(&EtcdClientBuilder::new(none)).contains("no etcd endpoint"));
        let mixed = EtcdClientBuilder::new(["https://a:2379", "http://b:2379"]);
        assert!(refused(&mixed).contains("mix"));
    }

    #[test]
    fn a_secret_is_hidden_from_any_error() {
        let e = hide(Error::setup(BACKEND, "login as app with pw hunter22 failed"), "hunter22");
        assert!(!e.to_string().contains("hunter22"), "{e}");
        let e = hide(Error::unavailable(BACKEND, "hunter22"), "hunter22");
        assert!(matches!(e, Error::Unavailable { .. }) && !e.to_string().contains("hunter22"));
    }

    #[cfg(feature = "tls")]
    #[test]
    fn https_needs_a_ca_and_tls_settings_need_https() {
        let msg = refused(&EtcdClientBuilder::new(["https://10.0.0.1:2379"]));
        assert!(msg.contains("tls_ca_pem"), "{msg}");
        let b = EtcdClientBuilder::new(["http://10.0.0.1:2379"]).tls_ca_pem("x");
        assert!(refused(&b).contains("http://"));
        let b = EtcdClientBuilder::new(["https://10.0.0.1:2379"]).tls_ca_pem("not a pem");
        assert!(refused(&b).contains("no PEM certificate"));
    }
}

//! [`NatsLockProvider::connect`]: a client made for the provider, its failures typed and its
//! permission violations watched.

use async_nats::ConnectOptions;
use shedlock::Result;

use crate::{NatsLockProvider, NatsLockProviderBuilder, PermissionWatch, error::connect_error};

impl NatsLockProvider {
    /// Connects to `url` (`nats://` or `tls://host:port`, a comma-separated list for several
    /// servers; credentials may be in the URL, `tls://user:password@host:4222`, or in
    /// `options`) and starts a builder on that client, with a [`PermissionWatch`] installed as
    /// the client's event callback (replacing any set in `options`; async-nats logs every
    /// event itself), so that a request the server refuses for a missing permission fails at
    /// once with [`Error::Setup`](shedlock::Error::Setup) naming it.
    ///
    /// TLS and credentials are async-nats's [`ConnectOptions`]:
    /// [`require_tls`](ConnectOptions::require_tls),
    /// [`add_root_certificates`](ConnectOptions::add_root_certificates) (a CA file) or
    /// [`tls_client_config`](ConnectOptions::tls_client_config) with
    /// [`tls::client_config`](crate::tls::client_config) (a CA as PEM text),
    /// [`add_client_certificate`](ConnectOptions::add_client_certificate) (mutual TLS),
    /// [`user_and_password`](ConnectOptions::user_and_password),
    /// [`token`](ConnectOptions::token); nkeys and `.creds` files with async-nats's `nkeys`
    /// feature (see the README).
    ///
    /// Errors, never quoting a password or token: refused credentials (wrong user or
    /// password) and a failed TLS handshake (a server certificate the client cannot verify)
    /// are [`Error::Setup`](shedlock::Error::Setup); an unreachable server is
    /// [`Error::Unavailable`](shedlock::Error::Unavailable). The first connection is tried
    /// once (unless `options` asks for `retry_on_initial_connect`); later the client reconnects
    /// by itself.
    pub async fn connect(url: &str, options: ConnectOptions) -> Result<NatsLockProviderBuilder> {
        let watch = PermissionWatch::new();
        let client =
            watch.install(options).connect(url).await.map_err(|e| connect_error(&e, url))?;
        Ok(Self::builder(client).permission_watch(watch))
    }
}

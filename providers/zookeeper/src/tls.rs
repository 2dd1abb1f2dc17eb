//! TLS to the ensemble (cargo feature `tls`): the settings the builder takes
//! ([`tls_ca_pem`](crate::ZooKeeperLockProviderBuilder::tls_ca_pem),
//! [`tls_identity_pem`](crate::ZooKeeperLockProviderBuilder::tls_identity_pem),
//! [`tls_server_name`](crate::ZooKeeperLockProviderBuilder::tls_server_name)), checked at
//! `build()`, and the connections made with them.
//!
//! `zookeeper-client`'s own TLS (its `tls` feature) is not used: it turns on rustls' default
//! crypto provider, aws-lc-rs, so that every program built with this crate would carry two rustls
//! providers, and every library in it that calls `rustls::ClientConfig::builder()` (Redis, NATS
//! clients) would panic for want of a choice. Instead the client connects to a forwarder of this
//! provider on 127.0.0.1 (one listener per server of the connect string, opened with the first
//! session); for each connection the forwarder accepts, it opens a TLS connection to its server
//! (rustls on ring), verified against exactly the CA given, and forwards the bytes both ways. So
//! every connection of the provider, reconnections included, reaches the ensemble over TLS, and
//! a failed handshake is reported by what failed (an unknown CA, a wrong name, a plaintext port).
//! The forwarder keeps each connection's first exchange in order (see `first_exchange`): the
//! client's credentials reach the server only after its session is answered.
//! The forwarder accepts only connections made by this very process (on Linux it checks the
//! connecting socket against `/proc/self/fd`), so that no other local program can borrow its TLS
//! session or client certificate.

use std::fmt;

#[cfg(feature = "tls")]
mod bridge;
#[cfg(feature = "tls")]
mod first_exchange;

#[cfg(feature = "tls")]
pub(crate) use bridge::Tls;

/// Nothing: without the `tls` feature no provider has TLS (`build()` refuses it).
#[cfg(not(feature = "tls"))]
#[derive(Debug)]
pub(crate) enum Tls {}

#[cfg(not(feature = "tls"))]
impl Tls {
    pub(crate) fn connect_string(&self) -> shedlock::Result<String> {
        match *self {}
    }

    pub(crate) fn clear_failures(&self) {
        match *self {}
    }

    pub(crate) fn failure(&self) -> Option<shedlock::Error> {
        match *self {}
    }
}

/// The TLS settings of a builder. `Debug` says what is set, never the client key.
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    ca_pem: Option<String>,
    /// The client certificate chain and its private key, PEM. The key is never printed.
    identity: Option<(String, String)>,
    server_name: Option<String>,
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("ca_pem", &self.ca_pem.as_ref().map(|_| "<CA certificates>"))
            .field("identity", &self.identity.as_ref().map(|_| "<certificate and key>"))
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl TlsSettings {
    pub(crate) fn set_ca_pem(&mut self, pem: String) {
        self.ca_pem = Some(pem);
    }

    pub(crate) fn set_identity(&mut self, cert_pem: String, key_pem: String) {
        self.identity = Some((cert_pem, key_pem));
    }

    pub(crate) fn set_server_name(&mut self, name: String) {
        self.server_name = Some(name);
    }

    /// Whether anything was asked for: then every connection must be TLS.
    pub(crate) fn is_set(&self) -> bool {
        self.ca_pem.is_some() || self.identity.is_some() || self.server_name.is_some()
    }

    /// The provider's TLS, checked without I/O: `None` when none was asked for. The message of
    /// an error never shows the client key.
    #[cfg(feature = "tls")]
    pub(crate) fn resolve(
        &self,
        connect_string: &str,
        timeout: std::time::Duration,
    ) -> Result<Option<Tls>, String> {
        if !self.is_set() {
            return Ok(None);
        }
        let Some(ca) = &self.ca_pem else {
            return Err("TLS needs the CA that signed the servers' certificates: \
                        tls_ca_pem(<its PEM>) (the provider trusts that CA and no other)"
                .to_owned());
        };
        let identity = self.identity.as_ref().map(|(c, k)| (c.as_str(), k.as_str()));
        Tls::new(connect_string, ca, identity, self.server_name.as_deref(), timeout).map(Some)
    }

    /// Without the `tls` feature, asking for TLS is a set-up error.
    #[cfg(not(feature = "tls"))]
    pub(crate) fn resolve(
        &self,
        _connect_string: &str,
        _timeout: std::time::Duration,
    ) -> Result<Option<Tls>, String> {
        if self.is_set() {
            return Err("TLS (tls_ca_pem, tls_identity_pem, tls_server_name) needs the `tls` \
                        cargo feature of shedlock-zookeeper: features = [\"tls\"]"
                .to_owned());
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn settings_say_what_is_set_and_never_show_the_key() {
        let mut s = TlsSettings::default();
        assert!(!s.is_set());
        s.set_identity("CERT".to_owned(), "s3cret-key-material".to_owned());
        s.set_server_name("zk.example.org".to_owned());
        assert!(s.is_set());
        let shown = format!("{s:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("<certificate and key>") && shown.contains("zk.example.org"));
        // An identity without a CA is refused (with the feature); without the feature, any TLS.
        let e = s.resolve("127.0.0.1:2281", std::time::Duration::from_secs(1)).unwrap_err();
        assert!(!e.contains("s3cret"), "{e}");
        assert!(
            TlsSettings::default().resolve("h:1", std::time::Duration::ZERO).unwrap().is_none()
        );
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn without_the_feature_tls_is_a_setup_error_naming_it() {
        let mut s = TlsSettings::default();
        s.set_ca_pem("-----BEGIN CERTIFICATE-----".to_owned());
        let e = s.resolve("h:1", std::time::Duration::ZERO).unwrap_err();
        assert!(e.contains("`tls` cargo feature"), "{e}");
    }
}

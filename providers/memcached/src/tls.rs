//! TLS to memcached's TLS listener (`-Z`), behind the `tls` feature: tokio-rustls with rustls on
//! ring. The builder's settings ([`TlsSettings`]) are checked at `build` (no I/O) into a
//! [`Tls`] connector that every connection of the pool uses.

use std::fmt;

#[cfg(not(feature = "tls"))]
use {
    crate::BACKEND,
    shedlock::{Error, Result},
};

/// The TLS settings of a builder, as given. `Debug` shows whether each is set, never the key.
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    pub(crate) ca_pem: Option<String>,
    pub(crate) server_name: Option<String>,
    pub(crate) identity: Option<(String, String)>,
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("ca_pem", &self.ca_pem.is_some())
            .field("server_name", &self.server_name)
            .field("identity", &self.identity.as_ref().map(|_| "<certificate and key>"))
            .finish()
    }
}

impl TlsSettings {
    /// Whether any TLS setting was given: then every connection uses TLS.
    pub(crate) fn is_set(&self) -> bool {
        self.ca_pem.is_some() || self.server_name.is_some() || self.identity.is_some()
    }
}

/// Without the `tls` feature there is no TLS connector: asking for TLS fails the build.
#[cfg(not(feature = "tls"))]
#[derive(Debug)]
pub(crate) enum Tls {}

#[cfg(not(feature = "tls"))]
impl TlsSettings {
    /// `None` when no TLS setting was given; otherwise [`shedlock::Error::Setup`]: this build
    /// cannot speak TLS.
    pub(crate) fn connector(&self, _host: &str) -> Result<Option<Tls>> {
        if self.is_set() {
            return Err(Error::setup(
                BACKEND,
                "TLS was asked for (tls_ca_pem, tls_server_name or tls_identity), but \
                 shedlock-memcached was built without its `tls` feature: enable it \
                 (shedlock-memcached = { features = [\"tls\"] })",
            ));
        }
        Ok(None)
    }
}

#[cfg(feature = "tls")]
pub(crate) use enabled::Tls;

#[cfg(feature = "tls")]
mod enabled {
    use std::{fmt, io, sync::Arc};

    use rustls::{
        ClientConfig, RootCertStore,
        pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject},
    };
    use shedlock::Result;
    use tokio::net::TcpStream;
    use tokio_rustls::{TlsConnector, client::TlsStream};

    use shedlock::Error;

    use super::TlsSettings;
    use crate::BACKEND;

    /// A checked TLS client configuration and the name to verify the server's certificate
    /// against.
    #[derive(Clone)]
    pub(crate) struct Tls {
        connector: TlsConnector,
        server_name: ServerName<'static>,
    }

    impl fmt::Debug for Tls {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("Tls").field("server_name", &self.server_name).finish()
        }
    }

    impl Tls {
        /// The TLS handshake on a connected `stream`.
        pub(crate) async fn connect(&self, stream: TcpStream) -> io::Result<TlsStream<TcpStream>> {
            self.connector.connect(self.server_name.clone(), stream).await
        }
    }

    fn certificates(pem: &str, what: &str) -> Result<Vec<CertificateDer<'static>>> {
        let certs =
            CertificateDer::pem_slice_iter(pem.as_bytes()).collect::<Result<Vec<_>, _>>().map_err(
                |e| Error::setup(BACKEND, format!("{what}: the PEM text could not be read: {e}")),
            )?;
        if certs.is_empty() {
            return Err(Error::setup(
                BACKEND,
                format!(
                    "{what}: no PEM certificate (-----BEGIN CERTIFICATE-----) in the text given"
                ),
            ));
        }
        Ok(certs)
    }

    impl TlsSettings {
        /// The connector of these settings for a server at `host` (the host of the address:
        /// the default name to verify), or `None` when no TLS setting was given. A missing CA,
        /// PEM text that does not parse, a key that does not match its certificate or a name
        /// that is neither a DNS name nor an IP address: [`shedlock::Error::Setup`]. No I/O.
        pub(crate) fn connector(&self, host: &str) -> Result<Option<Tls>> {
            if !self.is_set() {
                return Ok(None);
            }
            let Some(ca) = &self.ca_pem else {
                return Err(Error::setup(
                    BACKEND,
                    "TLS needs the CA that signed memcached's certificate: \
                     builder.tls_ca_pem(<its PEM>) (the client trusts that CA and no other)",
                ));
            };
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca, "tls_ca_pem")? {
                roots.add(cert).map_err(|e| {
                    Error::setup(BACKEND, format!("tls_ca_pem: a certificate is not usable: {e}"))
                })?;
            }
            // Explicitly ring: rustls picks no provider by itself when several are compiled in.
            let builder = ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::setup(BACKEND, format!("TLS: {e}")))?
            .with_root_certificates(roots);
            let config = match &self.identity {
                None => builder.with_no_client_auth(),
                Some((cert, key)) => {
                    let chain = certificates(cert, "tls_identity (certificate)")?;
                    // The error names what failed to parse, never the key's bytes.
                    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| {
                        Error::setup(BACKEND, format!(
                            "tls_identity: no usable PEM private key (-----BEGIN PRIVATE KEY-----, \
                             RSA or EC) in the key given: {e}"
                        ))
                    })?;
                    builder.with_client_auth_cert(chain, key).map_err(|e| {
                        Error::setup(
                            BACKEND,
                            format!("tls_identity: the certificate and key are not usable: {e}"),
                        )
                    })?
                }
            };
            let name = self.server_name.as_deref().unwrap_or(host);
            // `[::1]` from an address: the name is the address without its brackets.
            let bare = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')).unwrap_or(name);
            let server_name = ServerName::try_from(bare.to_owned()).map_err(|e| {
                Error::setup(BACKEND, format!(
                    "TLS server name {name:?} is neither a DNS name nor an IP address ({e}): set \
                     tls_server_name to a name memcached's certificate holds"
                ))
            })?;
            Ok(Some(Tls { connector: TlsConnector::from(Arc::new(config)), server_name }))
        }
    }

    /// What a TLS failure means for the caller, when `e` is one (a rustls error inside the
    /// I/O error): a configuration problem, with what to change, or `None` for an error that
    /// is no TLS verdict (a reset, an EOF: the network or the server, maybe transient).
    pub(crate) fn failure(e: &io::Error) -> Option<String> {
        let tls = e.get_ref()?.downcast_ref::<rustls::Error>()?;
        let what = match tls {
            rustls::Error::InvalidCertificate(_) => {
                "memcached's certificate was not accepted: give the CA that signed it \
                 (tls_ca_pem), and connect to a host name or address the certificate names (or \
                 set tls_server_name to one)"
            }
            rustls::Error::AlertReceived(_) => {
                "memcached refused the TLS session: if it asks for client certificates \
                 (ssl_verify_mode with ssl_ca_cert), give one its ssl_ca_cert signed \
                 (tls_identity); if it accepts only some TLS versions or ciphers \
                 (ssl_min_version, ssl_ciphers), TLS 1.2 and 1.3 are what this client offers"
            }
            rustls::Error::InvalidMessage(_)
            | rustls::Error::InappropriateMessage { .. }
            | rustls::Error::InappropriateHandshakeMessage { .. } => {
                "the server does not answer TLS: is this memcached's TLS listener (-Z)? A \
                 plaintext listener needs a provider without TLS settings"
            }
            rustls::Error::PeerIncompatible(_) | rustls::Error::NoCertificatesPresented => {
                "memcached and this client have no TLS version, cipher or certificate type in \
                 common (this client offers TLS 1.2 and 1.3 with rustls' safe defaults)"
            }
            _ => return None,
        };
        Some(format!("TLS: {what} ({tls})"))
    }
}

#[cfg(feature = "tls")]
pub(crate) use enabled::failure;

/// Without the `tls` feature no I/O error is a TLS verdict.
#[cfg(not(feature = "tls"))]
pub(crate) fn failure(_: &std::io::Error) -> Option<String> {
    None
}

#[cfg(all(test, feature = "tls"))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use shedlock::Error;

    use super::*;

    fn settings(ca: Option<&str>) -> TlsSettings {
        TlsSettings { ca_pem: ca.map(str::to_owned), ..TlsSettings::default() }
    }

    #[test]
    fn tls_needs_a_ca_and_pem_that_parses() {
        assert!(settings(None).connector("h").unwrap().is_none());
        let name_only = TlsSettings { server_name: Some("x".into()), ..TlsSettings::default() };
        let e = name_only.connector("h").unwrap_err();
        assert!(matches!(e, Error::Setup { .. }) && e.to_string().contains("tls_ca_pem"), "{e}");
        let e = settings(Some("not pem")).connector("h").unwrap_err();
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
        let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(matches!(settings(Some(garbage)).connector("h"), Err(Error::Setup { .. })));
    }

    #[test]
    fn debug_hides_the_key() {
        let s = TlsSettings {
            identity: Some(("cert".into(), "SECRET-KEY".into())),
            ..TlsSettings::default()
        };
        assert!(!format!("{s:?}").contains("SECRET-KEY"));
    }
}

//! TLS for the client the provider runs on: a rustls configuration that trusts exactly the
//! certificate authority you give it, as PEM text (async-nats itself takes a CA only as a file,
//! [`ConnectOptions::add_root_certificates`](async_nats::ConnectOptions::add_root_certificates)).
//!
//! ```no_run
//! # async fn demo(ca_pem: &str, password: String) -> Result<(), Box<dyn std::error::Error>> {
//! use async_nats::ConnectOptions;
//! use shedlock_nats::NatsLockProvider;
//!
//! let options = ConnectOptions::new()
//!     .require_tls(true)
//!     .tls_client_config(shedlock_nats::tls::client_config(ca_pem)?)
//!     .user_and_password("shedlock_app".into(), password);
//! let provider = NatsLockProvider::connect("tls://nats.internal:4222", options)
//!     .await?
//!     .bucket("billing")
//!     .build()?;
//! # Ok(()) }
//! ```

use std::sync::Arc;

use async_nats::rustls::{
    self, ClientConfig, RootCertStore,
    pki_types::{CertificateDer, pem::PemObject},
};
use shedlock::{Error, Result};

use crate::BACKEND;

/// A TLS client configuration that trusts only the certificates of `ca_pem` (one or more PEM
/// `CERTIFICATE` blocks; the system's roots are not added), on rustls with the *ring* crypto
/// provider (the one the workspace builds async-nats with), TLS 1.2 and 1.3. Give it to
/// [`ConnectOptions::tls_client_config`](async_nats::ConnectOptions::tls_client_config), with
/// [`require_tls(true)`](async_nats::ConnectOptions::require_tls) so that the client never falls
/// back to plaintext.
///
/// PEM text without a certificate, or a certificate rustls cannot use as a root, is
/// [`Error::Setup`].
pub fn client_config(ca_pem: &str) -> Result<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| {
            Error::setup(BACKEND, format!("the CA certificate PEM is not valid: {e}"))
        })?;
        roots.add(cert).map_err(|e| {
            Error::setup(BACKEND, format!("the CA certificate cannot be a root of trust: {e}"))
        })?;
    }
    if roots.is_empty() {
        return Err(Error::setup(BACKEND, "the CA certificate PEM holds no CERTIFICATE block"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::setup(BACKEND, format!("TLS configuration: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_without_a_certificate_is_a_setup_error() {
        for pem in ["", "not pem", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"]
        {
            match client_config(pem) {
                Err(shedlock::Error::Setup { message, .. }) => {
                    assert!(message.contains("CA certificate"), "{message}");
                }
                other => panic!("{pem:?}: {:?}", other.map(|_| ())),
            }
        }
    }
}

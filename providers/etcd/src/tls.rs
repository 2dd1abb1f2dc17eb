//! TLS for `https://` endpoints (feature `tls`: etcd-client's rustls on ring): the CA to trust,
//! a client certificate, the name to verify.

use std::{fmt, time::Duration};

use etcd_client::{Certificate, Identity, TlsOptions};
use shedlock::Result;

use crate::BACKEND;
use crate::EtcdClientBuilder;
use shedlock::Error;

/// The TLS settings of an [`EtcdClientBuilder`]. `Debug` shows whether each is set, never the
/// client key.
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    ca_pem: Option<String>,
    identity: Option<(String, String)>,
    domain: Option<String>,
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("ca_pem", &self.ca_pem.is_some())
            .field("identity", &self.identity.as_ref().map(|_| "<certificate and key>"))
            .field("domain", &self.domain)
            .finish()
    }
}

impl TlsSettings {
    /// Whether anything was set (then the endpoints must be `https://`).
    pub(crate) fn is_set(&self) -> bool {
        self.ca_pem.is_some() || self.identity.is_some() || self.domain.is_some()
    }

    /// The client's TLS options, checked: a CA is required (the client trusts no other root),
    /// the PEM texts and the name must parse. A handshake takes at most `handshake` (tonic's
    /// connect timeout covers the TCP connect only: a server that accepts and then says nothing
    /// would stall every request waiting for the connection). No I/O.
    pub(crate) fn options(&self, handshake: Duration) -> Result<TlsOptions> {
        let Some(ca) = &self.ca_pem else {
            return Err(Error::setup(
                BACKEND,
                "an https:// endpoint needs the CA that signed etcd's certificate: \
                 EtcdClientBuilder::tls_ca_pem(<its PEM>) (the client trusts that CA and no other)",
            ));
        };
        if !ca.contains("-----BEGIN CERTIFICATE-----") {
            return Err(Error::setup(
                BACKEND,
                "tls_ca_pem: no PEM certificate (-----BEGIN CERTIFICATE-----) in the text given",
            ));
        }
        // etcd speaks HTTP/2 only: no need for the server to confirm it by ALPN.
        let mut tls = TlsOptions::new()
            .ca_certificate(Certificate::from_pem(ca))
            .assume_http2(true)
            .timeout(handshake);
        if let Some((cert, key)) = &self.identity {
            if !cert.contains("-----BEGIN CERTIFICATE-----") {
                return Err(Error::setup(
                    BACKEND,
                    "tls_identity: no PEM certificate (-----BEGIN CERTIFICATE-----) in the \
                     certificate given",
                ));
            }
            if !key.contains("PRIVATE KEY-----") {
                return Err(Error::setup(
                    BACKEND,
                    "tls_identity: no PEM private key (-----BEGIN PRIVATE KEY-----, or RSA / EC) \
                     in the key given",
                ));
            }
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        if let Some(domain) = &self.domain {
            tls = tls.domain_name(domain.clone());
        }
        // tonic parses the certificates, the key and the name when it builds the connector:
        // build one now, so that bad input is a set-up error before any connection.
        let probe = tonic::transport::Endpoint::from_static("https://localhost");
        if let Err(e) = probe.tls_config(tls.clone()) {
            let mut text = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                text = format!("{text}: {c}");
                cause = c.source();
            }
            // The text names what failed to parse, never the key's bytes.
            return Err(Error::setup(BACKEND, format!("the TLS settings are not usable: {text}")));
        }
        Ok(tls)
    }
}

impl EtcdClientBuilder {
    /// Trust exactly this certificate authority (PEM text; a bundle of several certificates
    /// trusts each): etcd's server certificate must be signed by it. Required for `https://`
    /// endpoints (the client trusts no system roots). Endpoints given without a scheme are then
    /// reached over TLS.
    pub fn tls_ca_pem(mut self, pem: impl Into<String>) -> Self {
        self.tls.ca_pem = Some(pem.into());
        self
    }

    /// A client certificate and its private key (PEM), for an etcd that asks for one
    /// (`--client-cert-auth`). The key is never printed. (etcd can also take the user name
    /// from the certificate's common name when no user is given: `--client-cert-auth` with
    /// authentication enabled.)
    pub fn tls_identity(mut self, cert_pem: impl Into<String>, key_pem: impl Into<String>) -> Self {
        self.tls.identity = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// The name to verify etcd's certificate against, when it is not the endpoints' host (e.g.
    /// endpoints given by address, a certificate issued for `etcd.internal`).
    pub fn tls_domain(mut self, name: impl Into<String>) -> Self {
        self.tls.domain = Some(name.into());
        self
    }
}

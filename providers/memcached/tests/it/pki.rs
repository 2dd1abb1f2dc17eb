//! A throwaway certificate authority for the tests that need one of their own (a CA the server
//! was not signed by, a fake TLS server, client certificates): rcgen on ring.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    net::{IpAddr, Ipv4Addr},
    sync::Arc,
};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use rustls::{
    RootCertStore, ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::WebPkiClientVerifier,
};

/// A CA, and the certificates it signs.
pub struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, PEM.
pub struct Identity {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Pki {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Self {
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, name);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Pki { ca: CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap() }
    }

    /// The CA's certificate, PEM.
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    fn issue(&self, names: &[&str], purpose: ExtendedKeyUsagePurpose) -> Identity {
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name.push(DnType::CommonName, names[0]);
        if purpose == ExtendedKeyUsagePurpose::ServerAuth {
            params.subject_alt_names.push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![purpose];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        Identity { cert_pem: cert.pem(), key_pem: key.serialize_pem() }
    }

    /// A server certificate for `localhost` and 127.0.0.1.
    pub fn server(&self) -> Identity {
        self.issue(&["localhost"], ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate named `name`.
    pub fn client(&self, name: &str) -> Identity {
        self.issue(&[name], ExtendedKeyUsagePurpose::ClientAuth)
    }
}

/// A TLS server configuration (rustls on ring) presenting `server`, and, with `client_ca`,
/// requiring a client certificate that CA signed.
pub fn server_config(server: &Identity, client_ca: Option<&Pki>) -> Arc<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            roots.add(CertificateDer::from_pem_slice(ca.ca_pem().as_bytes()).unwrap()).unwrap();
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let chain = vec![CertificateDer::from_pem_slice(server.cert_pem.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(server.key_pem.as_bytes()).unwrap();
    Arc::new(builder.with_single_cert(chain, key).unwrap())
}

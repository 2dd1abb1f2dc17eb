//! A throwaway certificate authority and a server certificate for `127.0.0.1` and `localhost`,
//! written as PEM files: for a server a test starts itself, or as a CA that the launcher's
//! servers were not signed by.

use std::path::{Path, PathBuf};

/// The PEM files of one throwaway authority.
pub struct Pki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
}

impl Pki {
    /// Makes a CA and a server certificate signed by it, in `dir`.
    pub fn generate(dir: &Path) -> Pki {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
            IsCa, KeyPair, KeyUsagePurpose, SanType,
        };
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "shedlock-cli tests throwaway CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let mut server = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        server.distinguished_name.push(DnType::CommonName, "localhost");
        server.subject_alt_names.push(SanType::IpAddress([127, 0, 0, 1].into()));
        server.key_usages =
            vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().unwrap();
        let cert = server.signed_by(&key, &ca).unwrap();
        let pki = Pki {
            ca: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
        };
        std::fs::write(&pki.ca, ca.pem()).unwrap();
        std::fs::write(&pki.server_cert, cert.pem()).unwrap();
        std::fs::write(&pki.server_key, key.serialize_pem()).unwrap();
        pki
    }
}

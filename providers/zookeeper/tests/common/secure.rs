//! The secure ZooKeeper of the launcher ([`shedlock_launcher::shared_secure`]): a TLS-only
//! client port (Netty, a certificate for 127.0.0.1 and localhost signed by a throwaway CA) and
//! `enforce.auth.enabled=true` with `enforce.auth.schemes=digest` (every session must `addauth
//! digest` before any request; no super user).
//!
//! Here: the `zookeeper-secure` factory (the plain suite's [`Zk`], reaching the server over TLS as
//! the digest identity `shedlock_app`, its nodes creator-only), and a TLS forwarder for the
//! tests' raw sessions (zookeeper-client's own TLS is not built: see the crate's `tls` module).

use std::{net::SocketAddr, sync::Arc};

use shedlock::BoxError;
use shedlock_conformance::Security;
use shedlock_launcher::{Backend, Service};
use shedlock_test_support as testing;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{
    TlsConnector,
    rustls::{
        ClientConfig, ProtocolVersion, RootCertStore,
        pki_types::{CertificateDer, ServerName, pem::PemObject},
    },
};
use zookeeper_client::Permission;

use super::{Access, Zk};

/// The secure server of this process.
pub async fn service() -> Result<&'static Service, BoxError> {
    testing::secure::service(Backend::ZooKeeper, "ZooKeeper").await
}

/// The access of the application identity: TLS trusting the launcher's CA, `addauth digest
/// shedlock_app:<password>`.
pub fn app_access(service: &Service) -> Access {
    let s = service.secure().expect("a secure service");
    Access {
        ca_pem: Some(s.ca_pem().to_owned()),
        digest: Some((s.app_user().to_owned(), s.app_password().to_owned())),
    }
}

fn connector(ca_pem: &str) -> Result<TlsConnector, BoxError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// A TLS handshake with `addr` (verified against `ca_pem`, as the provider verifies it): the
/// version negotiated.
pub async fn negotiated(addr: SocketAddr, ca_pem: &str) -> Result<ProtocolVersion, BoxError> {
    let tcp = TcpStream::connect(addr).await?;
    let tls = connector(ca_pem)?.connect(ServerName::from(addr.ip()), tcp).await?;
    tls.get_ref().1.protocol_version().ok_or_else(|| "no TLS version negotiated".into())
}

/// A forwarder on 127.0.0.1 whose connections reach `upstream` over TLS verified against
/// `ca_pem`: what the tests' raw sessions connect to. Runs until the runtime ends.
pub async fn tunnel(upstream: SocketAddr, ca_pem: &str) -> Result<SocketAddr, BoxError> {
    let connector = connector(ca_pem)?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let connector = connector.clone();
            tokio::spawn(async move {
                let Ok(tcp) = TcpStream::connect(upstream).await else { return };
                let Ok(server) = connector.connect(ServerName::from(upstream.ip()), tcp).await
                else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = tokio::io::split(server);
                tokio::select! {
                    _ = tokio::io::copy(&mut cr, &mut sw) => {}
                    _ = tokio::io::copy(&mut sr, &mut cw) => {}
                }
            });
        }
    });
    Ok(addr)
}

/// The `zookeeper-secure` factory: the plain suite's, every instance connecting over TLS (the
/// launcher's CA, and no other) as the digest identity `shedlock_app`, under a root of its own
/// whose nodes are creator-only ([`shedlock_zookeeper::NodeAcl::CreatorAll`], the default once
/// authenticated). The record hooks' session is that identity too: nobody else may touch the
/// nodes.
pub async fn new_secure() -> Result<testing::secure::Secured<Zk>, BoxError> {
    let service = service().await?;
    let secure = service.secure().ok_or("the secure launch says nothing of its credentials")?;
    let addr = service.addr().ok_or("no server address")?;
    // What the report states is what a handshake negotiates, as the provider's would (same
    // rustls configuration: 1.3 and 1.2 offered).
    let version = match negotiated(addr, secure.ca_pem()).await? {
        ProtocolVersion::TLSv1_3 => "TLS 1.3 (negotiated; rustls offers 1.3 and 1.2)".to_owned(),
        ProtocolVersion::TLSv1_2 => "TLS 1.2 (negotiated: rustls offers 1.3 and 1.2; the server, \
                                     on ZooKeeper 3.8's default ssl.protocol TLSv1.2, offers no \
                                     1.3)"
            .to_owned(),
        other => return Err(format!("the secure ZooKeeper negotiated {other:?}").into()),
    };
    let root = format!("/shedlock-conformance-secure/{}", super::run_segment());
    let zk = Zk::on("zookeeper-secure", service, root, app_access(service)).await?;
    // The claim of the report, checked: the root carries the application's digest identity with
    // every right, and nothing else.
    let (acls, _) = zk.admin().get_acl(zk.root()).await?;
    let user = secure.app_user();
    let exact = acls.len() == 1
        && acls[0].scheme() == "digest"
        && acls[0].id().starts_with(&format!("{user}:"))
        && acls[0].permission() == Permission::ALL;
    if !exact {
        return Err(format!("the root's ACL is {acls:?}, not creator-only for {user}").into());
    }
    let security = Security::new(
        user,
        format!(
            "{version} to the server's only client port (secureClientPort, through Netty), its \
             certificate verified against the launcher's throwaway CA and no other (rustls on \
             ring)"
        ),
    )
    .grant(format!(
        "digest:{user}:<base64 sha1 of {user}:password>:cdrwa (NodeAcl::CreatorAll, written \
         auth::cdrwa) on the root, the clock node, the name nodes and the lock nodes: nobody \
         else has any right"
    ))
    .grant(format!(
        "the server enforces digest authentication (enforce.auth.enabled=true, \
         enforce.auth.schemes=digest): every session authenticates (addauth digest {user}:***) \
         before any request; no super user"
    ))
    .secret(secure.app_password())
    .secret(secure.admin_password());
    Ok(testing::secure::Secured::new(zk, security, service))
}

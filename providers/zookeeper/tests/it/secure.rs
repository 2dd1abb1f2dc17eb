//! TLS and enforced authentication against the launcher's secure ZooKeeper (a TLS-only client
//! port through Netty, a certificate for 127.0.0.1 signed by a throwaway CA, and
//! `enforce.auth.enabled=true` with the `digest` scheme): the whole lock cycle works over TLS as a
//! digest identity whose nodes are creator-only, also across reconnections; a session without
//! credentials, a provider without TLS, one trusting another CA or expecting another name, and
//! one speaking TLS to a plaintext port all fail with typed errors that say why; no password or
//! key is ever printed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use shedlock::{Error, ForceRelease, LockProvider, ProviderBuilder as _};
use shedlock_launcher::Backend;
use shedlock_test_support::{FaultProxy, cfg, unique};
use shedlock_zookeeper::{NodeAcl, ZooKeeperLockProvider};
use zookeeper_client::Permission;

use crate::common::{
    Access,
    secure::{app_access, service},
};

/// The secure server's address (`127.0.0.1:PORT`), its CA, the application's user and password.
async fn secure() -> (String, String, String, String) {
    let s = service().await.unwrap();
    let sec = s.secure().unwrap();
    assert_eq!(s.url(), s.addr().unwrap().to_string());
    (
        s.url().to_owned(),
        sec.ca_pem().to_owned(),
        sec.app_user().to_owned(),
        sec.app_password().to_owned(),
    )
}

fn root() -> String {
    format!("/{}", unique("secure"))
}

/// Neither the `Display` nor the `Debug` of an error contains `secret`.
fn assert_hides(what: &str, e: &Error, secret: &str) {
    for text in [e.to_string(), format!("{e:?}")] {
        assert!(!text.contains(secret), "{what} shows a secret: {text}");
    }
}

/// A CA that signed nothing the server has.
fn another_ca() -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, "not the launcher's CA");
    params.self_signed(&key).unwrap().pem()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_lock_cycle_runs_over_tls_as_a_digest_identity_with_creator_only_nodes() {
    let s = service().await.unwrap();
    let (cs, _, user, password) = secure().await;
    let access = app_access(s);
    let root = root();
    let a = access.builder(&cs, &root).build().unwrap();
    let b = access.builder(&cs, &root).build().unwrap();
    assert_eq!(a.node_acl(), &NodeAcl::CreatorAll);
    a.check().await.unwrap();
    a.connect().await.unwrap();
    let c = cfg("job", 60_000, 0);

    let mut lock = a.try_lock(&c).await.unwrap().expect("free");
    assert!(b.try_lock(&c).await.unwrap().is_none(), "held by a");
    lock.extend(Duration::from_secs(90), Duration::ZERO).await.unwrap();
    let seen = b.inspect("job").await.unwrap().expect("held");
    assert!(seen.held);
    assert_eq!(seen.fencing_token, lock.fencing_token());
    let page = b.list("", None, 10).await.unwrap();
    assert_eq!(page.records.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["job"]);

    // Every node the provider made is the application identity's alone.
    let raw = access.raw(&cs).await;
    for path in [root.clone(), format!("{root}/.clock"), a.name_path("job"), a.lock_path("job")] {
        let (acls, _) = raw.get_acl(&path).await.unwrap();
        assert_eq!(acls.len(), 1, "{path}: {acls:?}");
        assert_eq!(acls[0].scheme(), "digest", "{path}: {acls:?}");
        assert!(acls[0].id().starts_with(&format!("{user}:")), "{path}: {acls:?}");
        assert_eq!(acls[0].permission(), Permission::ALL, "{path}: {acls:?}");
    }

    // An operator of the identity force-releases it; the other instance takes it; the stale
    // holder's unlock changes nothing.
    match b.force_release(&seen).await.unwrap() {
        ForceRelease::Released(r) => assert_eq!(r.acquisition, seen.acquisition),
        x => panic!("{x:?}"),
    }
    let taken = b.try_lock(&c).await.unwrap().expect("force-released");
    assert!(lock.extend(Duration::from_secs(90), Duration::ZERO).await.is_err(), "lost");
    lock.unlock().await.unwrap();
    assert!(a.try_lock(&c).await.unwrap().is_none(), "the stale unlock freed b's lock");
    taken.unlock().await.unwrap();
    assert!(a.inspect("job").await.unwrap().is_none_or(|r| !r.held));
    a.try_lock(&c).await.unwrap().expect("released").unlock().await.unwrap();
    b.check().await.unwrap();
    assert!(!format!("{a:?}").contains(&password), "{a:?}");
}

/// The server takes TLS only: a provider that locks again after every connection was cut has
/// reconnected over TLS (a plaintext reconnection would be refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_is_tls_reconnections_included() {
    let s = service().await.unwrap();
    let proxy = FaultProxy::start(s.addr().unwrap()).await.unwrap();
    let root = root();
    let p = app_access(s).builder(&proxy.addr().to_string(), &root).build().unwrap();
    p.try_lock(&cfg("a", 60_000, 0)).await.unwrap().expect("free").unlock().await.unwrap();
    let session = p.session_id().await;
    for round in 0..2 {
        proxy.cut_all();
        let start = tokio::time::Instant::now();
        loop {
            match p.try_lock(&cfg("a", 60_000, 0)).await {
                Ok(Some(l)) => {
                    l.unlock().await.unwrap();
                    break;
                }
                Ok(None) => panic!("round {round}: held by nobody else"),
                Err(e) => {
                    assert!(e.is_retryable(), "round {round}: {e:?}");
                    assert!(start.elapsed() < Duration::from_secs(10), "no reconnection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    assert!(proxy.connections() >= 3, "{} connections", proxy.connections());
    assert_eq!(p.session_id().await, session, "the session survived the cuts");
}

#[tokio::test]
async fn a_session_without_credentials_is_a_setup_error_saying_authentication_is_required() {
    let (cs, ca, _, password) = secure().await;
    let access = Access { ca_pem: Some(ca), digest: None };
    let p = access.builder(&cs, &root()).build().unwrap();
    assert_eq!(p.node_acl(), &NodeAcl::Open);
    for (call, e) in [
        ("check", p.check().await.unwrap_err()),
        ("try_lock", p.try_lock(&cfg("job", 60_000, 0)).await.unwrap_err()),
        ("list", p.list("", None, 10).await.unwrap_err()),
    ] {
        eprintln!("{call}: {e}");
        assert_hides(call, &e, &password);
        let Error::Setup { message, .. } = &e else { panic!("{call}: not a setup error: {e:?}") };
        assert!(message.contains("requires authentication"), "{call}: {message}");
        assert!(message.contains("digest_auth"), "{call}: {message}");
        assert!(!e.is_retryable());
    }
}

#[tokio::test]
async fn a_plaintext_provider_is_refused_with_a_typed_error_that_suggests_tls() {
    let (cs, _, user, password) = secure().await;
    let p = Access { ca_pem: None, digest: Some((user, password.clone())) }
        .builder(&cs, &root())
        .build()
        .unwrap();
    let e = p.try_lock(&cfg("job", 60_000, 0)).await.unwrap_err();
    eprintln!("{e}");
    assert_hides("plaintext", &e, &password);
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
    assert!(e.to_string().contains("tls_ca_pem"), "{e}");
}

#[tokio::test]
async fn a_provider_trusting_another_ca_or_expecting_another_name_gets_setup_saying_so() {
    let (cs, ca, user, password) = secure().await;
    let other =
        Access { ca_pem: Some(another_ca()), digest: Some((user.clone(), password.clone())) }
            .builder(&cs, &root())
            .build()
            .unwrap();
    let e = other.try_lock(&cfg("job", 60_000, 0)).await.unwrap_err();
    eprintln!("{e}");
    assert_hides("another CA", &e, &password);
    let Error::Setup { message, .. } = &e else { panic!("not a setup error: {e:?}") };
    assert!(message.contains("not signed by the CA given to tls_ca_pem"), "{message}");
    assert!(message.contains(&cs), "names the server: {message}");
    assert!(matches!(other.check().await.unwrap_err(), Error::Setup { .. }));

    let named = Access { ca_pem: Some(ca), digest: Some((user, password.clone())) }
        .builder(&cs, &root())
        .tls_server_name("zk.example.org")
        .build()
        .unwrap();
    let e = named.check().await.unwrap_err();
    eprintln!("{e}");
    let Error::Setup { message, .. } = &e else { panic!("not a setup error: {e:?}") };
    assert!(message.contains("not valid for \"zk.example.org\""), "{message}");
}

#[tokio::test]
async fn tls_to_a_plaintext_port_is_a_typed_error_naming_the_likely_cause() {
    let plain = shedlock_test_support::service(Backend::ZooKeeper, "ZooKeeper").await.unwrap();
    let (_, ca, _, _) = secure().await;
    let p = ZooKeeperLockProvider::builder(plain.url())
        .root(root())
        .tls_ca_pem(ca)
        .operation_timeout(Some(Duration::from_secs(3)))
        .build()
        .unwrap();
    let e = p.check().await.unwrap_err();
    eprintln!("{e}");
    assert!(matches!(e, Error::Unavailable { .. } | Error::Setup { .. }), "{e:?}");
    assert!(e.to_string().contains("secureClientPort"), "{e}");
}

#[tokio::test]
async fn a_client_certificate_is_accepted_and_neither_it_nor_the_password_is_ever_printed() {
    let (cs, ca, user, password) = secure().await;
    let id = rcgen::generate_simple_self_signed(vec!["shedlock-client".to_owned()]).unwrap();
    let key = id.signing_key.serialize_pem();
    let key_body: String =
        key.lines().filter(|l| !l.starts_with("-----")).collect::<Vec<_>>().join("");
    // The key's last characters (its first are the same ASN.1 header in every key).
    let secrets = [password.as_str(), &key_body[key_body.len() - 40..]];
    let b = ZooKeeperLockProvider::builder(&cs)
        .root(root())
        .digest_auth(&user, &password)
        .tls_ca_pem(&ca)
        .tls_identity_pem(id.cert.pem(), &key);
    let shown = format!("{b:?}");
    for secret in secrets {
        assert!(!shown.contains(secret), "{shown}");
    }
    assert!(shown.contains("<certificate and key>"), "{shown}");
    let p = b.build().unwrap();
    let shown = format!("{p:?}");
    for secret in secrets {
        assert!(!shown.contains(secret), "{shown}");
    }
    assert!(shown.contains("client certificate: yes"), "{shown}");
    // The server asks for no client certificate (ssl.clientAuth=none): the lock works.
    p.try_lock(&cfg("job", 60_000, 0)).await.unwrap().expect("free").unlock().await.unwrap();

    // Bad TLS input is refused at build time, without quoting the key.
    for (what, b) in [
        ("no certificate in the CA", ZooKeeperLockProvider::builder(&cs).tls_ca_pem("junk")),
        (
            "a key that is not one",
            ZooKeeperLockProvider::builder(&cs)
                .tls_ca_pem(&ca)
                .tls_identity_pem(id.cert.pem(), format!("{}x", &key_body[..60])),
        ),
        (
            "an identity without a CA",
            ZooKeeperLockProvider::builder(&cs).tls_identity_pem(id.cert.pem(), &key),
        ),
        (
            "a scheme in the connect string",
            ZooKeeperLockProvider::builder(format!("tcp+tls://{cs}")).tls_ca_pem(&ca),
        ),
    ] {
        let e = b.build().unwrap_err();
        eprintln!("{what}: {e}");
        assert!(matches!(e, Error::Setup { .. }), "{what}: {e:?}");
        for secret in secrets {
            assert_hides(what, &e, secret);
        }
    }
}

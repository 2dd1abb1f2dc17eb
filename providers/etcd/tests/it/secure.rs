//! The provider in production posture, against the launcher's secure etcd (https only, `auth
//! enable`d): TLS, logins, and exactly the role the README's "Permissions" section documents —
//! and what a user gets when its role lacks part of it, or its password is wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use etcd_client::{Client, PermissionType};
use shedlock::{Error, ForceRelease, LockProvider, ProviderBuilder as _};
use shedlock_etcd::{EtcdClientBuilder, EtcdLockProvider};
use shedlock_launcher::{Backend, Service};
use shedlock_test_support::{self as testing, cfg, unique};

use crate::common::{self, Login};

async fn service() -> &'static Service {
    testing::secure::service(Backend::Etcd, "etcd").await.unwrap()
}

async fn root(service: &Service) -> Client {
    Login::root(service).client(service.url()).await.unwrap()
}

/// A fresh user holding one fresh role with `permission` on `granted`, logged in over TLS.
async fn user_with(
    service: &Service,
    permission: PermissionType,
    granted: &str,
) -> (Login, Client) {
    let name = unique("user");
    let password = unique("pw");
    let role = unique("role");
    common::grant(&root(service).await, &role, permission, granted, &name, &password)
        .await
        .unwrap();
    let login = Login::root(service).other(&name, &password);
    let client = login.client(service.url()).await.unwrap();
    (login, client)
}

fn provider(client: Client, prefix: &str) -> EtcdLockProvider {
    EtcdLockProvider::builder(client)
        .key_prefix(prefix)
        .operation_timeout(Some(common::OPERATION_TIMEOUT))
        .build()
        .unwrap()
}

fn setup_message<T: std::fmt::Debug>(r: shedlock::Result<T>) -> String {
    match r {
        Err(Error::Setup { message, .. }) => message,
        other => panic!("expected Error::Setup, got {other:?}"),
    }
}

#[tokio::test]
async fn over_tls_a_role_with_readwrite_on_the_prefix_is_enough_for_every_call() {
    let s = service().await;
    let prefix = format!("{}/", unique("rw"));
    let (_, client) = user_with(s, PermissionType::Readwrite, &prefix).await;
    let p = provider(client.clone(), &prefix);
    p.check().await.unwrap();
    // Lock, extend (same TTL: keep-alive; another: a new lease), unlock within at-least (a
    // short lease), and unlock after it.
    let mut lock = p.try_lock(&cfg("job", 5_000, 0)).await.unwrap().expect("free");
    lock.extend(Duration::from_secs(5), Duration::ZERO).await.unwrap();
    lock.extend(Duration::from_secs(10), Duration::ZERO).await.unwrap();
    assert!(p.inspect("job").await.unwrap().is_some_and(|r| r.held));
    assert_eq!(p.list("", None, 10).await.unwrap().records.len(), 1);
    lock.unlock().await.unwrap();
    let least = p.try_lock(&cfg("least", 10_000, 5_000)).await.unwrap().expect("free");
    least.unlock().await.unwrap();
    // The at-least remainder is a lock like another: an operator's forced release ends it.
    let seen = p.inspect("least").await.unwrap().expect("held for at-least");
    assert!(matches!(p.force_release(&seen).await.unwrap(), ForceRelease::Released(_)));
    // Without lease reuse, unlock revokes the lease its key is attached to: write permission on
    // the key, which the role gives.
    let fresh =
        EtcdLockProvider::builder(client).key_prefix(&prefix).reuse_leases(false).build().unwrap();
    let l = fresh.try_lock(&cfg("fresh", 10_000, 0)).await.unwrap().expect("free");
    l.unlock().await.unwrap();
    assert!(fresh.inspect("fresh").await.unwrap().is_none());
    // The loss watch reads the key too: a lock whose key an administrator deletes is reported.
    let watched = p.try_lock(&cfg("watched", 30_000, 0)).await.unwrap().expect("free");
    tokio::time::sleep(Duration::from_millis(400)).await;
    root(s).await.delete(p.key("watched"), None).await.unwrap();
    let lost = watched.lost_signal();
    tokio::time::timeout(Duration::from_secs(3), lost.lost()).await.expect("reported lost");
    watched.unlock().await.unwrap();
}

#[tokio::test]
async fn a_read_only_role_may_inspect_and_list_but_locking_check_and_force_release_name_readwrite()
{
    let s = service().await;
    let prefix = format!("{}/", unique("ro"));
    let (_, client) = user_with(s, PermissionType::Read, &prefix).await;
    let reader = provider(client, &prefix);
    let holder = provider(root(s).await, &prefix);
    let lock = holder.try_lock(&cfg("job", 30_000, 0)).await.unwrap().expect("free");
    let seen = reader.inspect("job").await.unwrap().expect("held");
    assert_eq!(reader.list("", None, 10).await.unwrap().records.len(), 1);
    let grant = format!("--prefix=true readwrite {prefix}");
    for (call, msg) in [
        ("check", setup_message(reader.check().await)),
        ("try_lock", setup_message(reader.try_lock(&cfg("mine", 30_000, 0)).await)),
        ("force_release", setup_message(reader.force_release(&seen).await)),
    ] {
        assert!(msg.contains("permission denied"), "{call}: {msg}");
        assert!(msg.contains("read and write permission (readwrite)"), "{call}: {msg}");
        assert!(msg.contains(&grant), "{call}: {msg}");
        assert!(msg.contains(&prefix), "{call} names the key: {msg}");
    }
    assert!(holder.inspect("job").await.unwrap().is_some_and(|r| r.held), "nothing changed");
    lock.unlock().await.unwrap();
}

#[tokio::test]
async fn a_role_on_another_prefix_gets_setup_errors_naming_the_key_or_range_and_the_permission() {
    let s = service().await;
    let base = unique("elsewhere");
    // `<base>/app/` is granted, the provider uses `<base>/app2/`: a prefix of the granted range's
    // text, but not under it.
    let (_, client) = user_with(s, PermissionType::Readwrite, &format!("{base}/app/")).await;
    let p = provider(client, &format!("{base}/app2"));
    let key = format!("{base}/app2/job");
    let msg = setup_message(p.try_lock(&cfg("job", 30_000, 0)).await);
    assert!(msg.contains(&format!("the key {key:?}")), "{msg}");
    assert!(msg.contains(&format!("readwrite {base}/app2/")), "{msg}");
    let msg = setup_message(p.inspect("job").await);
    assert!(msg.contains("read permission (read or readwrite)"), "{msg}");
    assert!(msg.contains(&format!("the key {key:?}")), "{msg}");
    let msg = setup_message(p.list("", None, 10).await);
    assert!(msg.contains(&format!("the key range [\"{base}/app2/\", \"{base}/app20\")")), "{msg}");
    assert!(msg.contains("read permission"), "{msg}");
    setup_message(p.check().await);
}

#[tokio::test]
async fn a_wrong_password_is_a_setup_error_that_never_shows_the_password() {
    let s = service().await;
    let secure = s.secure().unwrap();
    for (user, password) in
        [(secure.app_user(), "wrong-password-4f1b9c"), ("no_such_user", secure.app_password())]
    {
        let login = Login::root(s).other(user, password);
        let err = login.client(s.url()).await.map(drop).unwrap_err();
        let (shown, debug) = (err.to_string(), format!("{err:?}"));
        assert!(matches!(err, Error::Setup { .. }), "{debug}");
        assert!(shown.contains("authentication failed"), "{shown}");
        for text in [&shown, &debug] {
            assert!(!text.contains(password), "the password shows: {text}");
        }
    }
}

#[tokio::test]
async fn a_password_changed_under_a_running_provider_is_a_setup_error_without_the_password() {
    let s = service().await;
    let prefix = format!("{}/", unique("changed"));
    let (login, client) = user_with(s, PermissionType::Readwrite, &prefix).await;
    let p = provider(client, &prefix);
    p.check().await.unwrap();
    // etcd drops the user's tokens; the client logs in again with the old password.
    let new = unique("new-pw");
    root(s).await.auth_client().user_change_password(&login.user, &new).await.unwrap();
    let err = p.try_lock(&cfg("job", 30_000, 0)).await.unwrap_err();
    let debug = format!("{err:?}");
    assert!(matches!(err, Error::Setup { .. }), "{debug}");
    assert!(!debug.contains(&login.password) && !debug.contains(&new), "{debug}");
}

#[tokio::test]
async fn no_login_against_an_etcd_with_authentication_is_a_setup_error_saying_to_give_a_user() {
    let s = service().await;
    let ca = s.secure().unwrap().ca_pem();
    let client = common::builder(s.url()).tls_ca_pem(ca).connect().await.unwrap();
    let msg = setup_message(provider(client, "nobody/").check().await);
    assert!(msg.contains("gave no user"), "{msg}");
}

#[tokio::test]
async fn a_certificate_not_signed_by_the_given_ca_or_for_another_name_is_a_setup_error() {
    let s = service().await;
    let secure = s.secure().unwrap();
    // The server's own certificate as the only root: not the CA that signed it.
    let server_pem = secure.ca_path().with_file_name("server.pem");
    let wrong_ca = std::fs::read_to_string(server_pem).unwrap();
    let login = Login::app(s);
    let wrong = common::builder(s.url()).tls_ca_pem(&wrong_ca).user(&login.user, &login.password);
    let msg = setup_message(wrong.connect().await.map(drop));
    assert!(msg.contains("certificate was not accepted"), "{msg}");
    assert!(!msg.contains(&login.password), "{msg}");
    let other_name = common::builder(s.url())
        .tls_ca_pem(secure.ca_pem())
        .tls_domain("etcd.example")
        .user(&login.user, &login.password);
    let msg = setup_message(other_name.connect().await.map(drop));
    assert!(msg.contains("certificate was not accepted"), "{msg}");
    // Without a login no request is sent at connect: the first call says it.
    let client = common::builder(s.url()).tls_ca_pem(&wrong_ca).connect().await.unwrap();
    let msg = setup_message(provider(client, "x/").check().await);
    assert!(msg.contains("certificate was not accepted"), "{msg}");
}

#[tokio::test]
async fn tls_against_a_plaintext_etcd_and_plaintext_against_a_tls_one_fail_fast_without_hanging() {
    let s = service().await;
    let ca = s.secure().unwrap().ca_pem().to_owned();
    let plain = testing::url(Backend::Etcd, "etcd").await;
    let started = std::time::Instant::now();
    let tls_url = plain.replacen("http://", "https://", 1);
    let client = common::builder(&tls_url).tls_ca_pem(&ca).connect().await.unwrap();
    // etcd closes or resets the connection at the TLS handshake: Unavailable, retryable (as a
    // connection cut during a handshake is), the message naming the handshake.
    let r = provider(client, "x/").check().await;
    assert!(r.is_err(), "{r:?}");
    let plain_url = s.url().replacen("https://", "http://", 1);
    let client = EtcdClientBuilder::new([plain_url])
        .connect_timeout(Duration::from_secs(1))
        .request_timeout(Duration::from_secs(3))
        .connect()
        .await
        .unwrap();
    let r = provider(client, "x/").check().await;
    assert!(r.is_err(), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
}

//! Authentication and node ACLs against the real ZooKeeper server: a creator-only lock tree
//! (digest authentication; the server needs no configuration for it) refuses other identities
//! and unauthenticated clients, works for every instance of the identity that created it, and
//! the refusals reach the caller as `Error::Setup` naming the missing right. No password is ever
//! printed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use shedlock::{Error, ForceRelease, LockProvider, ProviderBuilder as _};
use shedlock_launcher::Backend;
use shedlock_test_support::{cfg, unique};
use shedlock_zookeeper::{AclEntry, NodeAcl, ZooKeeperLockProvider, ZooKeeperLockProviderBuilder};
use zookeeper_client::{Acls, Client, CreateMode, Error as Z, Permission};

/// Every password of this file starts with this; it must appear in no output.
const SECRET: &str = "s3cret-zk-";
const PASSWORD_A: &str = "s3cret-zk-alpha";
const PASSWORD_B: &str = "s3cret-zk-bravo";
const USER_A: &str = "app-a";
const USER_B: &str = "app-b";

async fn connect_string() -> String {
    shedlock_test_support::url(Backend::ZooKeeper, "ZooKeeper").await
}

fn root() -> String {
    format!("/{}", unique("auth"))
}

fn builder(cs: &str, root: &str) -> ZooKeeperLockProviderBuilder {
    ZooKeeperLockProvider::builder(cs)
        .root(root)
        .session_timeout(Duration::from_secs(4))
        .operation_timeout(Some(Duration::from_secs(3)))
}

/// A provider authenticated as `user` with `password`, with the default node ACL.
fn provider_as(cs: &str, root: &str, user: &str, password: &str) -> ZooKeeperLockProvider {
    builder(cs, root).digest_auth(user, password).build().unwrap()
}

/// A raw session, as an operator with `zkCli.sh` would have it: authenticated with `addauth
/// digest user:password`, or not at all.
async fn raw(cs: &str, digest: Option<(&str, &str)>) -> Client {
    let mut c = Client::connector().with_session_timeout(Duration::from_secs(4));
    if let Some((user, password)) = digest {
        c = c.with_auth("digest", format!("{user}:{password}").as_bytes());
    }
    c.connect(cs).await.expect("connect to ZooKeeper")
}

/// Neither the `Display` nor the `Debug` of `shown` contains a password.
fn assert_no_secret(what: &str, shown: &(impl std::fmt::Debug + std::fmt::Display)) {
    for text in [shown.to_string(), format!("{shown:?}")] {
        assert!(!text.contains(SECRET), "{what} shows a password: {text}");
    }
}

/// `Error::Setup` whose message says ZooKeeper refused for want of `right` on `node`.
fn assert_setup_lacking(what: &str, e: &Error, right: &str, node: &str) {
    assert_no_secret(what, e);
    let Error::Setup { message, .. } = e else { panic!("{what}: not a setup error: {e:?}") };
    assert!(message.contains("(NoAuth)"), "{what}: {message}");
    let lacks = format!("lacks {right} on {node}");
    assert!(message.contains(&lacks), "{what}: {message:?} does not say {lacks:?}");
    assert!(!e.is_retryable(), "{what}: {e:?}");
}

#[tokio::test]
async fn the_builder_and_provider_debug_show_the_user_and_scheme_but_no_password() {
    let b = ZooKeeperLockProvider::builder("127.0.0.1:2181")
        .digest_auth(USER_A, PASSWORD_A)
        .auth("digest", format!("{USER_B}:{PASSWORD_B}").into_bytes())
        .auth("x509-like", PASSWORD_B.as_bytes().to_vec());
    let shown = format!("{b:?}");
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(shown.contains(USER_A) && shown.contains(USER_B) && shown.contains("x509-like"));
    let p = b.build().unwrap();
    let shown = format!("{p:?}");
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(shown.contains(USER_A), "{shown}");
    assert_eq!(p.node_acl(), &NodeAcl::CreatorAll, "the default once authenticated");
    let open = ZooKeeperLockProvider::builder("127.0.0.1:2181").build().unwrap();
    assert_eq!(open.node_acl(), &NodeAcl::Open, "the default without credentials");

    // Refused at build time, without the password in the message.
    for b in [
        ZooKeeperLockProvider::builder("h:1").node_acl(NodeAcl::CreatorAll),
        ZooKeeperLockProvider::builder("h:1").digest_auth("", PASSWORD_A),
        ZooKeeperLockProvider::builder("h:1").digest_auth("a:b", PASSWORD_A),
        ZooKeeperLockProvider::builder("h:1").auth("digest", PASSWORD_A.as_bytes().to_vec()),
        ZooKeeperLockProvider::builder("h:1")
            .node_acl(NodeAcl::Custom(vec![AclEntry::creator("cdrwa")])),
        ZooKeeperLockProvider::builder("h:1")
            .digest_auth(USER_A, PASSWORD_A)
            .node_acl(NodeAcl::Custom(vec![AclEntry::anyone("rwx")])),
    ] {
        let e = b.build().unwrap_err();
        assert!(matches!(e, Error::Setup { .. }), "{e:?}");
        assert_no_secret("a build error", &e);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_identity_and_an_unauthenticated_client_cannot_touch_a_creator_only_lock() {
    let cs = connect_string().await;
    let root = root();
    let a = provider_as(&cs, &root, USER_A, PASSWORD_A);
    a.connect().await.unwrap(); // creates the root and the clock node
    let c = cfg("job", 60_000, 0);
    let lock = a.try_lock(&c).await.unwrap().expect("free");
    let (name, lock_path) = (a.name_path("job"), a.lock_path("job"));

    // Every node the provider created carries the creator's digest identity, and only it.
    let owner = raw(&cs, Some((USER_A, PASSWORD_A))).await;
    for path in [root.clone(), format!("{root}/.clock"), name.clone(), lock_path.clone()] {
        let (acls, _) = owner.get_acl(&path).await.unwrap();
        assert_eq!(acls.len(), 1, "{path}: {acls:?}");
        assert_eq!(acls[0].scheme(), "digest", "{path}: {acls:?}");
        assert!(acls[0].id().starts_with(&format!("{USER_A}:")), "{path}: {acls:?}");
        assert_eq!(acls[0].permission(), Permission::ALL, "{path}: {acls:?}");
    }

    let before = owner.get_data(&lock_path).await.unwrap();
    let name_before = owner.get_data(&name).await.unwrap();

    let intruder = raw(&cs, Some((USER_B, PASSWORD_B))).await;
    let wrong_password = raw(&cs, Some((USER_A, PASSWORD_B))).await;
    let anonymous = raw(&cs, None).await;
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    for (who, client) in [
        ("identity B", &intruder),
        ("A's user, wrong password", &wrong_password),
        ("no auth", &anonymous),
    ] {
        let r = client.set_data(&lock_path, b"1\nforged", None).await;
        assert_eq!(r.unwrap_err(), Z::NoAuth, "{who}: setData of the lock node");
        let r = client.delete(&lock_path, None).await;
        assert_eq!(r.unwrap_err(), Z::NoAuth, "{who}: delete of the lock node");
        let r = client.get_data(&lock_path).await;
        assert_eq!(r.unwrap_err(), Z::NoAuth, "{who}: read of the lock node");
        let r = client.create(&format!("{name}/forged"), b"", &eph).await;
        assert_eq!(r.unwrap_err(), Z::NoAuth, "{who}: a child of the name node");
        let r = client.create(&format!("{root}/other"), b"", &open).await;
        assert_eq!(r.unwrap_err(), Z::NoAuth, "{who}: a child of the root");
        let r = client.delete(&name, None).await;
        assert_eq!(r.unwrap_err(), Z::NoAuth, "{who}: delete of the name node");
        let r = client.set_data(&name, b"", None).await;
        assert_eq!(r.unwrap_err(), Z::NoAuth, "{who}: setData of the name node");
        let r = client.set_acl(&name, &Acls::anyone_all(), None).await;
        assert_eq!(r.unwrap_err(), Z::NoAuth, "{who}: setAcl of the name node");
        let r = client.set_acl(&root, &Acls::anyone_all(), None).await;
        assert_eq!(r.unwrap_err(), Z::NoAuth, "{who}: setAcl of the root");
        // Even the version check an unlock or forced release starts its transaction with.
        let mut w = client.new_multi_writer();
        w.add_check_version(&name, name_before.1.version).unwrap();
        let r = w.commit().await.unwrap_err();
        assert_eq!(Z::from(r), Z::NoAuth, "{who}: check of the name node's version");
    }

    // Still A's lock, untouched (same data, same versions): another instance of identity A finds
    // it held, with the same acquisition, and cannot take it.
    assert_eq!(owner.get_data(&lock_path).await.unwrap(), before, "the lock node changed");
    assert_eq!(owner.get_data(&name).await.unwrap(), name_before, "the name node changed");
    let a2 = provider_as(&cs, &root, USER_A, PASSWORD_A);
    assert!(a2.try_lock(&c).await.unwrap().is_none(), "the lock was freed");
    let seen = a2.inspect("job").await.unwrap().expect("held");
    assert!(seen.held);
    assert_eq!(seen.fencing_token, lock.fencing_token());
    lock.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_of_one_identity_share_a_creator_only_tree_through_the_whole_lock_cycle() {
    let cs = connect_string().await;
    let root = root();
    let a1 = provider_as(&cs, &root, USER_A, PASSWORD_A);
    let a2 = provider_as(&cs, &root, USER_A, PASSWORD_A);
    a1.check().await.unwrap();
    let c = cfg("job", 60_000, 0);

    // Lock, held elsewhere, extend, inspect and list from the other instance, unlock.
    let mut l1 = a1.try_lock(&c).await.unwrap().expect("free");
    assert!(a2.try_lock(&c).await.unwrap().is_none(), "held by a1");
    l1.extend(Duration::from_secs(90), Duration::ZERO).await.unwrap();
    let seen = a2.inspect("job").await.unwrap().expect("held");
    assert!(seen.held);
    let page = a2.list("", None, 10).await.unwrap();
    assert_eq!(page.records.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["job"]);
    l1.unlock().await.unwrap();

    // The released lock is taken by the other instance (its lock node is recreated, the name
    // node bumped by another session of the same identity).
    let l2 = a2.try_lock(&c).await.unwrap().expect("released by a1");
    assert!(a1.try_lock(&c).await.unwrap().is_none(), "held by a2");

    // An operator of the same identity force-releases it; a1 then takes it.
    let seen = a1.inspect("job").await.unwrap().expect("held");
    match a1.force_release(&seen).await.unwrap() {
        ForceRelease::Released(r) => assert_eq!(r.acquisition, seen.acquisition),
        x => panic!("{x:?}"),
    }
    let l1 = a1.try_lock(&c).await.unwrap().expect("force-released");
    l2.unlock().await.unwrap(); // stale: changes nothing
    assert!(a2.try_lock(&c).await.unwrap().is_none(), "the stale unlock freed a1's lock");
    l1.unlock().await.unwrap();

    // A lock of a1 that expires while a1's session lives is taken over by a2: the takeover
    // transaction deletes a1's ephemeral lock node, which the shared identity may.
    let short = cfg("short", 300, 0);
    let held = a1.try_lock(&short).await.unwrap().expect("free");
    let start = tokio::time::Instant::now();
    let taken = loop {
        if let Some(l) = a2.try_lock(&short).await.unwrap() {
            break l;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "the expired lock was never taken over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(taken.fencing_token() > held.fencing_token());
    held.unlock().await.unwrap(); // stale
    assert!(a1.try_lock(&short).await.unwrap().is_none(), "taken over by a2");
    taken.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_of_another_identity_gets_setup_errors_naming_the_missing_right() {
    let cs = connect_string().await;
    let root = root();
    let a = provider_as(&cs, &root, USER_A, PASSWORD_A);
    a.connect().await.unwrap(); // creates the root and the clock node
    let c = cfg("job", 60_000, 0);
    let held = a.try_lock(&c).await.unwrap().expect("free");
    let released = a.try_lock(&cfg("released", 60_000, 0)).await.unwrap().expect("free");
    released.unlock().await.unwrap();
    let name = a.name_path("released");
    let clock = format!("{root}/.clock");

    let others = [
        ("identity B", provider_as(&cs, &root, USER_B, PASSWORD_B)),
        ("A's user with a wrong password", provider_as(&cs, &root, USER_A, PASSWORD_B)),
        ("no credentials", builder(&cs, &root).build().unwrap()),
    ];
    for (who, p) in &others {
        assert!(!format!("{p:?}").contains(SECRET), "{who}: {p:?}");
        // A name node of A's: the acquire's first write is refused.
        let e = p.try_lock(&cfg("released", 60_000, 0)).await.unwrap_err();
        eprintln!("{who}: {e}");
        assert_setup_lacking(who, &e, "WRITE", &name);
        // A name never locked: creating its name node under A's root is refused.
        let e = p.try_lock(&cfg("fresh", 60_000, 0)).await.unwrap_err();
        assert_setup_lacking(who, &e, "CREATE", &root);
        // Inspection writes the clock node; listing reads the root.
        let e = p.inspect("job").await.unwrap_err();
        assert_setup_lacking(who, &e, "WRITE", &clock);
        let e = p.list("", None, 10).await.unwrap_err();
        assert_setup_lacking(who, &e, "READ", &root);
        // The start-up check says so before any lock is tried.
        let e = p.check().await.unwrap_err();
        assert_setup_lacking(who, &e, "READ", &clock);
        // Connecting works (the root and clock node exist: nothing needs creating).
        p.connect().await.unwrap();
    }
    // The lock is still A's.
    assert!(provider_as(&cs, &root, USER_A, PASSWORD_A).try_lock(&c).await.unwrap().is_none());
    held.unlock().await.unwrap();
}

#[tokio::test]
async fn credentials_for_a_scheme_the_server_does_not_know_are_a_setup_error() {
    let cs = connect_string().await;
    let p =
        builder(&cs, &root()).auth("no-such-scheme", SECRET.as_bytes().to_vec()).build().unwrap();
    let e = p.try_lock(&cfg("job", 60_000, 0)).await.unwrap_err();
    eprintln!("{e}");
    assert_no_secret("AuthFailed", &e);
    let Error::Setup { message, .. } = &e else { panic!("not a setup error: {e:?}") };
    assert!(message.contains("(AuthFailed)"), "{message}");
    assert!(message.contains("no-such-scheme"), "{message}");
    let e = p.check().await.unwrap_err();
    assert!(matches!(e, Error::Setup { .. }), "{e:?}");
}

#[tokio::test]
async fn a_custom_acl_lets_anyone_read_the_locks_but_only_the_creator_change_them() {
    let cs = connect_string().await;
    let root = root();
    let acl = NodeAcl::Custom(vec![AclEntry::creator("cdrwa"), AclEntry::anyone("r")]);
    let a = builder(&cs, &root).digest_auth(USER_A, PASSWORD_A).node_acl(acl).build().unwrap();
    a.connect().await.unwrap(); // creates the root and the clock node
    let lock = a.try_lock(&cfg("job", 60_000, 0)).await.unwrap().expect("free");
    let anonymous = raw(&cs, None).await;
    let (data, _) = anonymous.get_data(&a.lock_path("job")).await.unwrap();
    assert!(data.starts_with(b"60001\n"));
    assert_eq!(anonymous.list_children(&root).await.unwrap().len(), 2, "the clock and job");
    let r = anonymous.delete(&a.lock_path("job"), None).await;
    assert_eq!(r.unwrap_err(), Z::NoAuth);
    let r = anonymous.set_data(&a.name_path("job"), b"", None).await;
    assert_eq!(r.unwrap_err(), Z::NoAuth);
    // READ is what a version check in a transaction needs.
    let (_, name) = anonymous.get_data(&a.name_path("job")).await.unwrap();
    let mut w = anonymous.new_multi_writer();
    w.add_check_version(&a.name_path("job"), name.version).unwrap();
    w.commit().await.unwrap();
    lock.unlock().await.unwrap();
}

/// The README's migration: an open tree made by an unauthenticated provider, closed with
/// `addauth digest app-a:…` and `setAcl auth::cdrwa` on the root, the clock node and the name
/// nodes (what `setAcl -R` does); the lock nodes left open vanish with their sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_tree_closed_with_set_acl_works_for_its_identity_and_refuses_the_rest() {
    let cs = connect_string().await;
    let root = root();
    let old = builder(&cs, &root).build().unwrap();
    old.try_lock(&cfg("job", 60_000, 0)).await.unwrap().expect("free").unlock().await.unwrap();

    let operator = raw(&cs, Some((USER_A, PASSWORD_A))).await;
    let mut paths = vec![root.clone()];
    paths.extend(
        operator.list_children(&root).await.unwrap().into_iter().map(|c| format!("{root}/{c}")),
    );
    for path in &paths {
        operator.set_acl(path, &Acls::creator_all(), None).await.unwrap();
    }

    let a = provider_as(&cs, &root, USER_A, PASSWORD_A);
    a.try_lock(&cfg("job", 60_000, 0)).await.unwrap().expect("free").unlock().await.unwrap();
    let e = old.try_lock(&cfg("job", 60_000, 0)).await.unwrap_err();
    assert_setup_lacking("the old unauthenticated provider", &e, "WRITE", &a.name_path("job"));
}

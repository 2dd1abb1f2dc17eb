//! Production posture against the launcher's secure NATS (TLS required, a certificate signed by a
//! throwaway CA, users with passwords): the application user holds exactly the README's
//! "Permissions" blocks (read from the README), and every call works over TLS; each permission
//! removed in turn fails the call that needs it with `Error::Setup` naming it; a wrong password
//! and a missing CA are typed errors that show no secret.
//!
//! Every test here shares the process's one secure server and its one application user, whose
//! permissions file the tests rewrite: they hold [`PERMISSIONS`] throughout.

use std::{future::Future, net::SocketAddr, time::Duration};

use async_nats::{Client, ConnectOptions};
use shedlock::{Error, ForceRelease, Lock, LockInfo, LockProvider, ProviderBuilder as _};
use shedlock_launcher::{Backend, Secure, Service};
use shedlock_nats::{NatsLockProvider, NatsLockProviderBuilder};
use shedlock_test_support::{cfg, unique};
use tokio::{sync::Mutex, time::Instant};

/// Held by every test that uses the application user (whose permissions file they rewrite).
static PERMISSIONS: Mutex<()> = Mutex::const_new(());

use crate::permissions::{app_permissions, block};

struct Server {
    service: &'static Service,
    secure: &'static Secure,
    addr: SocketAddr,
}

async fn server() -> Server {
    let service = shedlock_test_support::secure::service(Backend::Nats, "NATS").await.unwrap();
    let secure = service.secure().expect("a secure service");
    Server { service, secure, addr: service.addr().unwrap() }
}

impl Server {
    fn url(&self) -> String {
        format!("tls://{}", self.addr)
    }

    fn options(&self, user: &str, password: &str) -> ConnectOptions {
        ConnectOptions::new()
            .require_tls(true)
            .add_root_certificates(self.secure.ca_path())
            .user_and_password(user.to_owned(), password.to_owned())
            .connection_timeout(Duration::from_secs(3))
    }

    async fn admin_client(&self) -> Client {
        let s = self.secure;
        let url = self.url();
        eventually("the administrator's connection", || async {
            let options = self.options(s.admin_user(), s.admin_password());
            options.connect(url.as_str()).await.map_err(|e| e.to_string())
        })
        .await
    }

    /// A bucket made by the administrator.
    async fn bucket(&self) -> String {
        let bucket = unique("sec");
        let admin =
            NatsLockProvider::builder(self.admin_client().await).bucket(&bucket).build().unwrap();
        admin.create_bucket().await.unwrap();
        bucket
    }

    /// A builder on a new connection of the application user, with a permission watch. A
    /// connection made while the server reloads its configuration can be refused
    /// (`authorization violation`): it is tried again for a few seconds.
    async fn app(&self, bucket: &str) -> NatsLockProviderBuilder {
        let s = self.secure;
        let url = self.url();
        eventually("the application user's connection", || async {
            let options = self.options(s.app_user(), s.app_password());
            NatsLockProvider::connect(&url, options).await.map_err(|e| e.to_string())
        })
        .await
        .bucket(bucket)
        .operation_timeout(Some(Duration::from_secs(3)))
    }

    async fn app_provider(&self, bucket: &str) -> NatsLockProvider {
        self.app(bucket).await.build().unwrap()
    }

    /// Gives the application user exactly these permissions (rewrites its file, reloads).
    fn grant(&self, publish: &[String], subscribe: &[String]) {
        let path = self.secure.app_permissions_path().unwrap();
        std::fs::write(path, block(publish, subscribe)).unwrap();
        self.service.reload().unwrap();
    }
}

/// Retries `attempt` (each on fresh connections) until it answers `Ok`, for up to 10 s: the
/// server applies a reload within milliseconds, but asynchronously.
async fn eventually<T, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match attempt().await {
            Ok(t) => return t,
            Err(e) if Instant::now() > deadline => panic!("{what}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// `r` is `Error::Setup` whose message contains every one of `needles`.
fn setup_naming<T: std::fmt::Debug>(
    r: shedlock::Result<T>,
    needles: &[&str],
) -> Result<(), String> {
    match r {
        Err(Error::Setup { message, .. }) if needles.iter().all(|n| message.contains(n)) => Ok(()),
        other => Err(format!("expected Setup naming {needles:?}, got {other:?}")),
    }
}

#[tokio::test]
async fn the_app_user_with_the_readmes_permissions_runs_every_call_over_tls() {
    let _g = PERMISSIONS.lock().await;
    let s = server().await;
    let bucket = s.bucket().await;
    let (publish, subscribe) = app_permissions(&bucket);
    s.grant(&publish, &subscribe);
    let p = eventually("check() with the README's permissions", || async {
        let p = s.app_provider(&bucket).await;
        p.check().await.map(|()| p).map_err(|e| e.to_string())
    })
    .await;
    let name = unique("job");
    let c = cfg(&name, 30_000, 0);
    let mut lock = p.try_lock(&c).await.unwrap().expect("free");
    assert!(p.try_lock(&c).await.unwrap().is_none(), "held");
    // A second instance meets the holder: its direct get.
    let other = s.app_provider(&bucket).await;
    assert!(other.try_lock(&c).await.unwrap().is_none(), "held for another instance");
    lock.extend(Duration::from_secs(60), Duration::ZERO).await.unwrap();
    let info = p.inspect(&name).await.unwrap().expect("a record");
    assert!(info.held);
    let page = p.list("", None, 10).await.unwrap();
    assert_eq!(page.records.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), [name.as_str()]);
    lock.unlock().await.unwrap();
    // Within lock_at_least_for, unlock republishes.
    let at_least = cfg(&unique("atleast"), 30_000, 10_000);
    p.try_lock(&at_least).await.unwrap().expect("free").unlock().await.unwrap();
    assert!(p.inspect(at_least.name()).await.unwrap().is_some_and(|i| i.held));
    let held = other.inspect(at_least.name()).await.unwrap().unwrap();
    assert!(matches!(other.force_release(&held).await.unwrap(), ForceRelease::Released(_)));
    assert!(p.try_lock(&at_least).await.unwrap().is_some(), "free after force_release");
    p.check().await.unwrap();
    // Set-up is the administrator's: the application may not create a bucket.
    let r = s.app_provider(&unique("mine")).await.create_bucket().await;
    setup_naming(r, &["publish", "$JS.API.STREAM.CREATE.KV_mine"]).unwrap();
}

#[tokio::test]
async fn another_applications_bucket_is_refused_with_setup() {
    let _g = PERMISSIONS.lock().await;
    let s = server().await;
    let (mine, theirs) = (s.bucket().await, s.bucket().await);
    let (publish, subscribe) = app_permissions(&mine);
    s.grant(&publish, &subscribe);
    eventually("check() on the granted bucket", || async {
        s.app_provider(&mine).await.check().await.map_err(|e| e.to_string())
    })
    .await;
    let other = s.app_provider(&theirs).await;
    let info = format!("$JS.API.STREAM.INFO.KV_{theirs}");
    setup_naming(other.check().await, &[&info]).unwrap();
    setup_naming(other.try_lock(&cfg("x", 30_000, 0)).await, &[&info]).unwrap();
    let get = format!("$JS.API.DIRECT.GET.KV_{theirs}.");
    setup_naming(other.inspect("x").await, &[&get]).unwrap();
    let create = format!("$JS.API.CONSUMER.CREATE.KV_{theirs}");
    setup_naming(other.list("", None, 10).await, &[&create]).unwrap();
}

/// What the calls of a removal case work on, made while every permission is granted: two locks
/// held by `p` (one within its `lock_at_least_for`), and what `inspect` saw of the first.
struct Held {
    p: NatsLockProvider,
    lock: Lock,
    at_least: Lock,
    seen: LockInfo,
}

impl Held {
    async fn new(s: &Server, bucket: &str, publish: &[String], subscribe: &[String]) -> Held {
        s.grant(publish, subscribe);
        let p = every_call_works(s, bucket).await;
        let lock = p.try_lock(&cfg(&unique("held"), 60_000, 0)).await.unwrap().unwrap();
        let at_least = p.try_lock(&cfg(&unique("least"), 60_000, 60_000)).await.unwrap().unwrap();
        let seen = p.inspect(lock.name()).await.unwrap().unwrap();
        Held { p, lock, at_least, seen }
    }
}

/// Waits until a new instance of the application user runs every call on `bucket` (after a
/// grant of all of the README's permissions), and returns it.
async fn every_call_works(s: &Server, bucket: &str) -> NatsLockProvider {
    eventually("every call with every permission", || async {
        let p = s.app_provider(bucket).await;
        let e = |e: Error| e.to_string();
        let lock = p.try_lock(&cfg(&unique("all"), 60_000, 0)).await.map_err(e)?.ok_or("held")?;
        p.inspect(lock.name()).await.map_err(e)?;
        p.list("", None, 1).await.map_err(e)?;
        lock.unlock().await.map_err(e)?;
        p.check().await.map_err(e)?;
        Ok(p)
    })
    .await
}

/// `r` failed with `Error::Setup` naming every one of `needles`; panics otherwise.
#[track_caller]
fn assert_setup<T: std::fmt::Debug>(what: &str, r: shedlock::Result<T>, needles: &[&str]) {
    if let Err(e) = setup_naming(r, needles) {
        panic!("{what}: {e}");
    }
}

#[tokio::test]
async fn each_permission_removed_fails_the_call_that_needs_it_with_setup_naming_it() {
    let _g = PERMISSIONS.lock().await;
    let s = server().await;
    let b = s.bucket().await;
    let (publish, subscribe) = app_permissions(&b);
    let kv = format!("$KV.{b}.>");
    let info = format!("$JS.API.STREAM.INFO.KV_{b}");
    let get = format!("$JS.API.DIRECT.GET.KV_{b}.>");
    let purge = format!("$JS.API.STREAM.PURGE.KV_{b}");
    let create = format!("$JS.API.CONSUMER.CREATE.KV_{b}");
    let delete = format!("$JS.API.CONSUMER.DELETE.KV_{b}.>");
    let inbox = "_INBOX.>".to_owned();
    let mut expected = vec![kv.clone(), info.clone(), get.clone(), purge.clone()];
    expected.extend([create.clone(), delete.clone(), format!("$JS.FC.KV_{b}.>")]);
    assert_eq!(publish, expected, "the README's locking, inspection and force_release blocks");
    assert_eq!(subscribe, std::slice::from_ref(&inbox));
    let without = |removed: &str| {
        let keep = |l: &[String]| l.iter().filter(|x| *x != removed).cloned().collect::<Vec<_>>();
        (keep(&publish), keep(&subscribe))
    };
    let fresh = || async { s.app_provider(&b).await };
    let job = || cfg(&unique("job"), 60_000, 0);

    // `$KV.<bucket>.>`: acquire, extend, and unlock within lock_at_least_for publish there.
    let mut h = Held::new(&s, &b, &publish, &subscribe).await;
    let (pubs, subs) = without(&kv);
    s.grant(&pubs, &subs);
    let key = format!("publish to \"$KV.{b}.");
    eventually("try_lock without $KV", || async {
        setup_naming(fresh().await.try_lock(&job()).await, &[&key, &kv])
    })
    .await;
    let r = h.lock.extend(Duration::from_secs(60), Duration::ZERO).await;
    assert_setup("extend without $KV", r, &[&key, "(extend)", &kv]);
    assert_setup("unlock within at-least", h.at_least.unlock().await, &[&key, "(unlock)", &kv]);

    // `STREAM.INFO`: check(), and a provider's first lock call.
    let h = Held::new(&s, &b, &publish, &subscribe).await;
    let (pubs, subs) = without(&info);
    s.grant(&pubs, &subs);
    eventually("check without STREAM.INFO", || async {
        setup_naming(fresh().await.check().await, &["publish to", &info, "(check)"])
    })
    .await;
    assert_setup("first try_lock", fresh().await.try_lock(&job()).await, &[&info, "(try_lock)"]);
    // A provider that checked its bucket before goes on locking without it.
    let lock = h.p.try_lock(&job()).await.unwrap().expect("free");
    lock.unlock().await.unwrap();

    // `DIRECT.GET`: inspect, force_release, and an acquire that meets an unknown holder.
    let h = Held::new(&s, &b, &publish, &subscribe).await;
    let (pubs, subs) = without(&get);
    s.grant(&pubs, &subs);
    let direct = format!("$JS.API.DIRECT.GET.KV_{b}.$KV.{b}.");
    eventually("inspect without DIRECT.GET", || async {
        setup_naming(fresh().await.inspect("x").await, &[&direct, &get, "(inspect)"])
    })
    .await;
    let r = fresh().await.force_release(&h.seen).await;
    assert_setup("force_release without DIRECT.GET", r, &[&direct, &get]);
    let contender = fresh().await;
    contender.check().await.unwrap();
    let r = contender.try_lock(h.lock.config()).await;
    assert_setup("try_lock meeting a holder", r, &[&direct, &get, "(try_lock)"]);

    // `STREAM.PURGE`: unlock (after lock_at_least_for) and force_release.
    let h = Held::new(&s, &b, &publish, &subscribe).await;
    let (pubs, subs) = without(&purge);
    s.grant(&pubs, &subs);
    eventually("unlock without STREAM.PURGE", || async {
        let p = fresh().await;
        let lock = p.try_lock(&job()).await.map_err(|e| e.to_string())?.ok_or("held")?;
        setup_naming(lock.unlock().await, &["publish to", &purge, "(unlock)"])
    })
    .await;
    assert_setup("unlock", h.lock.unlock().await, &[&purge, "(unlock)"]);
    let r = fresh().await.force_release(&h.seen).await;
    assert_setup("force_release without STREAM.PURGE", r, &[&purge, "(force_release)"]);

    // `CONSUMER.CREATE`: list.
    let (pubs, subs) = without(&create);
    s.grant(&pubs, &subs);
    eventually("list without CONSUMER.CREATE", || async {
        setup_naming(fresh().await.list("", None, 10).await, &["publish to", &create, "(list)"])
    })
    .await;

    // `CONSUMER.DELETE`: not on the call's path; list still answers (the server removes the
    // consumer after 10 s idle).
    let (pubs, subs) = without(&delete);
    s.grant(&pubs, &subs);
    let p = fresh().await;
    for _ in 0..3 {
        p.list("", None, 10).await.unwrap();
    }

    // `_INBOX.>` subscribe: every call (no reply can come back), on a new connection and on
    // one that was subscribed before the reload.
    let h = Held::new(&s, &b, &publish, &subscribe).await;
    let (pubs, subs) = without(&inbox);
    s.grant(&pubs, &subs);
    let sub = "subscribe to \"_INBOX.";
    eventually("check without _INBOX.>", || async {
        setup_naming(fresh().await.check().await, &[sub, "\"_INBOX.>\"", "reconnect"])
    })
    .await;
    assert_setup("try_lock", fresh().await.try_lock(&job()).await, &[sub, "replies of try_lock"]);
    assert_setup(
        "an older connection",
        h.p.inspect(h.lock.name()).await,
        &[sub, "replies of inspect"],
    );

    // Everything back: every call works again on new connections.
    s.grant(&publish, &subscribe);
    every_call_works(&s, &b).await;
}

#[tokio::test]
async fn without_a_permission_watch_a_refused_request_is_unavailable_naming_permissions() {
    let _g = PERMISSIONS.lock().await;
    let s = server().await;
    let b = s.bucket().await;
    let (publish, subscribe) = app_permissions(&b);
    let purge = format!("$JS.API.STREAM.PURGE.KV_{b}");
    let pubs: Vec<String> = publish.iter().filter(|p| **p != purge).cloned().collect();
    s.grant(&pubs, &subscribe);
    let sec = s.secure;
    let unwatched = || async {
        let url = s.url();
        let client = eventually("the application user's connection", || async {
            let options = s.options(sec.app_user(), sec.app_password());
            options.connect(url.as_str()).await.map_err(|e| e.to_string())
        })
        .await;
        NatsLockProvider::builder(client)
            .bucket(&b)
            .operation_timeout(Some(Duration::from_secs(1)))
            .build()
            .unwrap()
    };
    // The reload applied: a watched instance sees the refusal.
    eventually("unlock without STREAM.PURGE", || async {
        let p = s.app_provider(&b).await;
        let lock = p.try_lock(&cfg(&unique("w"), 60_000, 0)).await.map_err(|e| e.to_string())?;
        setup_naming(lock.ok_or("held")?.unlock().await, &[&purge])
    })
    .await;
    let p = unwatched().await;
    let lock = p.try_lock(&cfg(&unique("u"), 60_000, 0)).await.unwrap().unwrap();
    let started = Instant::now();
    let e = lock.unlock().await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
    assert!(e.is_retryable());
    let text = e.to_string();
    for needle in
        [purge.as_str(), "(unlock)", "within 1s", "permission", "\"_INBOX.>\"", "PermissionWatch"]
    {
        assert!(text.contains(needle), "{needle:?} in {text}");
    }
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(3), "{took:?}");
    s.grant(&publish, &subscribe);
}

#[tokio::test]
async fn a_wrong_password_is_setup_and_never_shown() {
    let _g = PERMISSIONS.lock().await;
    let s = server().await;
    let wrong = format!("{}-not-it", s.secure.app_password());
    let options = s.options(s.secure.app_user(), &wrong);
    let e = NatsLockProvider::connect(&s.url(), options).await.unwrap_err();
    assert!(matches!(e, Error::Setup { .. }), "{e:?}");
    let shown = format!("{e} {e:?}");
    assert!(shown.contains("refused the credentials"), "{shown}");
    assert!(!shown.contains(&wrong) && !shown.contains("-not-it"), "{shown}");
    // The same, with the credentials in the URL.
    let url = format!("tls://{}:{wrong}@{}", s.secure.app_user(), s.addr);
    let options = ConnectOptions::new().add_root_certificates(s.secure.ca_path());
    let e = NatsLockProvider::connect(&url, options).await.unwrap_err();
    let shown = format!("{e} {e:?}");
    assert!(matches!(e, Error::Setup { .. }), "{shown}");
    assert!(!shown.contains("-not-it"), "{shown}");
}

#[tokio::test]
async fn without_the_ca_the_tls_handshake_fails_with_setup() {
    let _g = PERMISSIONS.lock().await;
    let s = server().await;
    let sec = s.secure;
    let options = ConnectOptions::new()
        .require_tls(true)
        .user_and_password(sec.app_user().to_owned(), sec.app_password().to_owned());
    let e = NatsLockProvider::connect(&s.url(), options).await.unwrap_err();
    let shown = format!("{e} {e:?}");
    assert!(matches!(e, Error::Setup { .. }), "{shown}");
    assert!(shown.contains("TLS"), "{shown}");
    assert!(!shown.contains(sec.app_password()), "{shown}");
    // The CA as PEM text (shedlock_nats::tls::client_config) is enough.
    let options = || {
        ConnectOptions::new()
            .require_tls(true)
            .tls_client_config(shedlock_nats::tls::client_config(sec.ca_pem()).unwrap())
            .user_and_password(sec.app_user().to_owned(), sec.app_password().to_owned())
    };
    let b = s.bucket().await;
    let (publish, subscribe) = app_permissions(&b);
    s.grant(&publish, &subscribe);
    let url = s.url();
    let builder = eventually("connecting with the CA from PEM", || async {
        NatsLockProvider::connect(&url, options()).await.map_err(|e| e.to_string())
    })
    .await;
    let p = builder.bucket(&b).build().unwrap();
    eventually("check() over TLS with the CA from PEM", || async {
        p.check().await.map_err(|e| e.to_string())
    })
    .await;
    let shown = format!("{p:?}");
    assert!(!shown.contains(sec.app_password()), "{shown}");
}

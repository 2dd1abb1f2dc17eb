//! The etcd provider's own behaviour against a real etcd server, beyond the conformance
//! catalogue: what the keys and leases look like, lease reuse, bad input and unreachable
//! clusters, and a lease revoked by an operator.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use shedlock::ProviderBuilder as _;

use std::{sync::Arc, time::Duration};

use shedlock::{Error, KeepAliveProvider, LockConfig, LockProvider};
use shedlock_etcd::{EtcdLockProvider, MAX_NAME_LEN};
use shedlock_launcher::Backend;
use shedlock_test_support::{self as testing, cfg, unique};

async fn url() -> String {
    testing::url(Backend::Etcd, "etcd").await
}

async fn provider(prefix: &str) -> EtcdLockProvider {
    common::provider(&url().await, prefix).await
}

fn prefix() -> String {
    format!("{}/", unique("etcd-test"))
}

#[tokio::test]
async fn the_key_holds_locked_by_on_a_lease_of_at_most_and_the_token_is_its_create_revision() {
    let p = provider(&prefix()).await;
    let lock = p.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free");
    let mut c = p.client();
    let r = c.get(p.key("job"), None).await.unwrap();
    let kv = &r.kvs()[0];
    assert_eq!(kv.value(), p.locked_by().as_bytes());
    assert_eq!(lock.fencing_token(), Some(kv.create_revision() as u64));
    let ttl = c.lease_time_to_live(kv.lease(), None).await.unwrap();
    assert_eq!(ttl.granted_ttl(), 10, "lock_at_most_for in whole seconds");
    assert!(ttl.ttl() > 8 && ttl.ttl() <= 10, "{}", ttl.ttl());
    lock.unlock().await.unwrap();
    assert_eq!(c.get(p.key("job"), None).await.unwrap().count(), 0, "unlock deletes the key");
}

#[tokio::test]
async fn a_released_lease_is_reused_so_cycles_grant_no_new_leases() {
    let p = provider(&prefix()).await;
    let mut c = p.client();
    let c1 = cfg("reuse", 30_000, 0);
    let first = p.try_lock(&c1).await.unwrap().expect("free");
    let mut c2 = c.clone();
    let lease = c2.get(p.key("reuse"), None).await.unwrap().kvs()[0].lease();
    first.unlock().await.unwrap();
    assert_eq!(p.kept_leases(), 1);
    for _ in 0..5 {
        let l = p.try_lock(&c1).await.unwrap().expect("free");
        let now = c.get(p.key("reuse"), None).await.unwrap().kvs()[0].lease();
        assert_eq!(now, lease, "the same lease, renewed");
        l.unlock().await.unwrap();
    }
    // A name held elsewhere: the attempt's lease is kept too, not leaked.
    let other = provider(&prefix()).await;
    let held = p.try_lock(&cfg("held", 30_000, 0)).await.unwrap().expect("free");
    let _ = other.try_lock(&cfg("held", 30_000, 0)).await.unwrap();
    assert!(other.try_lock(&cfg("held", 30_000, 0)).await.unwrap().is_none());
    assert_eq!(other.kept_leases(), 1, "one lease for both failed attempts");
    held.unlock().await.unwrap();
}

#[tokio::test]
async fn without_reuse_every_acquire_grants_and_every_unlock_revokes() {
    let client = common::client(&url().await).await.unwrap();
    let p =
        EtcdLockProvider::builder(client).key_prefix(prefix()).reuse_leases(false).build().unwrap();
    let mut c = p.client();
    let lock = p.try_lock(&cfg("fresh", 30_000, 0)).await.unwrap().expect("free");
    let lease = c.get(p.key("fresh"), None).await.unwrap().kvs()[0].lease();
    lock.unlock().await.unwrap();
    assert_eq!(p.kept_leases(), 0);
    assert_eq!(c.get(p.key("fresh"), None).await.unwrap().count(), 0);
    let ttl = c.lease_time_to_live(lease, None).await.unwrap();
    assert_eq!(ttl.ttl(), -1, "the lease was revoked");
}

#[tokio::test]
async fn at_least_moves_the_key_to_a_short_lease_of_the_remaining_time() {
    let p = provider(&prefix()).await;
    let lock = p.try_lock(&cfg("least", 60_000, 2_000)).await.unwrap().expect("free");
    lock.unlock().await.unwrap();
    let mut c = p.client();
    let kv = c.get(p.key("least"), None).await.unwrap().kvs()[0].clone();
    let ttl = c.lease_time_to_live(kv.lease(), None).await.unwrap();
    assert_eq!(ttl.granted_ttl(), 2, "the rest of at-least, rounded up to whole seconds");
    assert!(p.try_lock(&cfg("least", 60_000, 0)).await.unwrap().is_none(), "held for at-least");
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let l = p.try_lock(&cfg("least", 60_000, 0)).await.unwrap().expect("free after at-least");
    l.unlock().await.unwrap();
}

#[tokio::test]
async fn extend_with_the_same_ttl_renews_the_lease_and_with_another_moves_the_key() {
    let p = provider(&prefix()).await;
    let mut c = p.client();
    let mut lock = p.try_lock(&cfg("ext", 5_000, 0)).await.unwrap().expect("free");
    let first = c.get(p.key("ext"), None).await.unwrap().kvs()[0].clone();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    lock.extend(Duration::from_secs(5), Duration::ZERO).await.unwrap();
    let kv = c.get(p.key("ext"), None).await.unwrap().kvs()[0].clone();
    assert_eq!((kv.lease(), kv.mod_revision()), (first.lease(), first.mod_revision()), "renewed");
    let ttl = c.lease_time_to_live(kv.lease(), None).await.unwrap().ttl();
    assert!(ttl >= 4, "renewed to 5 s, {ttl} left");
    lock.extend(Duration::from_secs(30), Duration::ZERO).await.unwrap();
    let kv = c.get(p.key("ext"), None).await.unwrap().kvs()[0].clone();
    assert_ne!(kv.lease(), first.lease(), "moved to a 30 s lease");
    assert_eq!(kv.create_revision(), first.create_revision(), "the same acquisition");
    assert_eq!(c.lease_time_to_live(kv.lease(), None).await.unwrap().granted_ttl(), 30);
    lock.unlock().await.unwrap();
}

#[tokio::test]
async fn a_lease_revoked_by_an_operator_fires_the_lost_signal_at_the_next_keep_alive() {
    let p = provider(&prefix()).await;
    let kept = KeepAliveProvider::new(Arc::new(p.clone())).unwrap();
    let at_most = Duration::from_secs(4);
    let config = LockConfig::new("revoked", at_most, Duration::ZERO).unwrap();
    let lock = kept.try_lock(&config).await.unwrap().expect("free");
    let lost = lock.lost_signal();
    let mut c = p.client();
    let lease = c.get(p.key("revoked"), None).await.unwrap().kvs()[0].lease();
    let revoked = tokio::time::Instant::now();
    c.lease_revoke(lease).await.unwrap();
    // The keep-alive extends every at_most / 2: its next extension finds the lease gone.
    tokio::time::timeout(at_most, lost.lost()).await.expect("the lost signal fired");
    let after = revoked.elapsed();
    assert!(after <= at_most / 2 + Duration::from_millis(500), "fired after {after:?}");
    assert!(lock.is_lost());
    // Another instance can take the name at once.
    let other = provider(&p_prefix(&p)).await;
    let l = other.try_lock(&config).await.unwrap().expect("free after the revoke");
    l.unlock().await.unwrap();
    lock.unlock().await.unwrap();
}

fn p_prefix(p: &EtcdLockProvider) -> String {
    let key = p.key("");
    String::from_utf8(key).unwrap()
}

#[tokio::test]
async fn an_extend_after_an_operator_deleted_the_key_is_lock_lost_even_though_the_lease_lives() {
    let p = provider(&prefix()).await;
    let mut lock = p.try_lock(&cfg("deleted", 30_000, 0)).await.unwrap().expect("free");
    let mut c = p.client();
    c.delete(p.key("deleted"), None).await.unwrap();
    let other = provider(&p_prefix(&p)).await;
    let theirs = other.try_lock(&cfg("deleted", 30_000, 0)).await.unwrap().expect("deleted: free");
    let before = c.get(p.key("deleted"), None).await.unwrap().kvs()[0].clone();
    match lock.extend(Duration::from_secs(30), Duration::ZERO).await {
        Err(Error::LockLost { .. }) => {}
        other => panic!("expected LockLost, got {other:?}"),
    }
    match lock.extend(Duration::from_secs(60), Duration::ZERO).await {
        Err(Error::LockLost { .. }) => {}
        other => panic!("expected LockLost, got {other:?}"),
    }
    lock.unlock().await.unwrap();
    let after = c.get(p.key("deleted"), None).await.unwrap().kvs()[0].clone();
    assert_eq!(
        (after.create_revision(), after.mod_revision(), after.lease()),
        (before.create_revision(), before.mod_revision(), before.lease()),
        "the stale holder changed nothing"
    );
    theirs.unlock().await.unwrap();
}

#[tokio::test]
async fn bad_names_and_prefixes_are_typed_errors() {
    let p = provider(&prefix()).await;
    let long = "n".repeat(MAX_NAME_LEN + 1);
    match p.try_lock(&cfg(&long, 10_000, 0)).await {
        Err(Error::InvalidName { name, .. }) => assert_eq!(name, long),
        other => panic!("{other:?}"),
    }
    let l = p.try_lock(&cfg(&"n".repeat(MAX_NAME_LEN), 10_000, 0)).await.unwrap().expect("free");
    l.unlock().await.unwrap();
    // Names are bytes: NUL, slashes and non-ASCII are fine and distinct.
    for name in ["a\0b", "a/b", "ä", "a"] {
        let l = p.try_lock(&cfg(name, 10_000, 0)).await.unwrap().expect(name);
        drop(l);
    }
    let client = p.client();
    for bad in ["", "a\nb", &"x".repeat(shedlock_etcd::MAX_PREFIX_LEN + 1)] {
        match EtcdLockProvider::builder(client.clone()).key_prefix(bad).build() {
            Err(Error::Setup { .. }) => {}
            other => panic!("prefix {bad:?}: {other:?}"),
        }
    }
    match EtcdLockProvider::builder(client).locked_by("x".repeat(300)).build() {
        Err(Error::Setup { .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn every_endpoint_down_is_a_typed_error_within_the_operation_timeout() {
    // Three ports nothing listens on.
    let mut urls = Vec::new();
    for _ in 0..3 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        urls.push(format!("http://{}", l.local_addr().unwrap()));
    }
    let client = common::client(&urls.join(",")).await.unwrap();
    let limit = Duration::from_secs(2);
    let p = EtcdLockProvider::builder(client).operation_timeout(Some(limit)).build().unwrap();
    let start = tokio::time::Instant::now();
    let err = p.try_lock(&cfg("down", 10_000, 0)).await.unwrap_err();
    let took = start.elapsed();
    assert!(err.is_retryable(), "{err:?}");
    assert!(matches!(err, Error::Unavailable { .. } | Error::Timeout { .. }), "{err:?}");
    assert!(took < limit + Duration::from_millis(500), "took {took:?}");
}

/// Lease reuse: an acquire on a reused lease sends no grant (the key rides the lease of the
/// warm-up acquisition), while `reuse_leases(false)` grants one lease per acquisition. (What this
/// costs on the wire is the conformance report's round-trip figure: over HTTP/2 a single call's
/// turnaround count moves by one or two between runs, as WINDOW_UPDATE and keep-alive frames
/// coalesce with other writes or not, so it is averaged there rather than compared here.)
#[tokio::test]
async fn a_reused_lease_is_never_granted_again_and_without_reuse_every_acquire_gets_its_own() {
    let pre = prefix();
    let reused = provider(&pre).await;
    let fresh = EtcdLockProvider::builder(reused.client())
        .key_prefix(&pre)
        .reuse_leases(false)
        .build()
        .unwrap();
    let mut kv = reused.client().kv_client();
    let c = cfg("rt", 30_000, 0);
    let key = reused.key("rt");
    let warm = reused.try_lock(&c).await.unwrap().expect("free");
    let first = kv.get(key.clone(), None).await.unwrap().kvs()[0].lease();
    warm.unlock().await.unwrap();
    let (mut reused_leases, mut fresh_leases) = (vec![], vec![]);
    for _ in 0..7 {
        let l = reused.try_lock(&c).await.unwrap().expect("free");
        reused_leases.push(kv.get(key.clone(), None).await.unwrap().kvs()[0].lease());
        l.unlock().await.unwrap();
        let l = fresh.try_lock(&c).await.unwrap().expect("free");
        fresh_leases.push(kv.get(key.clone(), None).await.unwrap().kvs()[0].lease());
        l.unlock().await.unwrap();
    }
    assert!(
        reused_leases.iter().all(|l| *l == first),
        "every reused acquisition rides the warm-up's lease {first}: {reused_leases:?}"
    );
    fresh_leases.sort_unstable();
    fresh_leases.dedup();
    assert_eq!(fresh_leases.len(), 7, "a lease per fresh acquisition: {fresh_leases:?}");
    assert!(!fresh_leases.contains(&first), "no fresh acquisition rides the reused lease");
}

#[tokio::test]
async fn a_lease_revoked_by_an_operator_fires_the_lost_signal_at_once_without_an_extend() {
    let p = provider(&prefix()).await;
    let config = LockConfig::new("revoked-now", Duration::from_secs(30), Duration::ZERO).unwrap();
    let lock = p.try_lock(&config).await.unwrap().expect("free");
    let lost = lock.lost_signal();
    let mut c = p.client();
    let lease = c.get(p.key("revoked-now"), None).await.unwrap().kvs()[0].lease();
    // The watch is created right after the acquire; give it a moment, then revoke.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let revoked = tokio::time::Instant::now();
    c.lease_revoke(lease).await.unwrap();
    // Nothing extends this lock: only the loss watch can fire the signal before the 30 s
    // deadline. On loopback the delete event arrives within milliseconds; 3 s is a wide margin.
    tokio::time::timeout(Duration::from_secs(3), lost.lost())
        .await
        .expect("the lost signal fired long before the lock's deadline");
    eprintln!("lost signal {:?} after the revoke", revoked.elapsed());
    assert!(lock.is_lost());
    lock.unlock().await.unwrap();
}

#[tokio::test]
async fn a_key_deleted_before_the_watch_was_created_is_still_reported_lost() {
    // The watch starts from the revision after the acquiring put, so a delete that lands before
    // the watch is created is replayed to it, not missed.
    let p = provider(&prefix()).await;
    let mut c = p.client();
    let config = LockConfig::new("deleted-early", Duration::from_secs(30), Duration::ZERO).unwrap();
    let lock = p.try_lock(&config).await.unwrap().expect("free");
    c.delete(p.key("deleted-early"), None).await.unwrap();
    tokio::time::timeout(Duration::from_secs(3), lock.lost_signal().lost())
        .await
        .expect("the lost signal fired");
    lock.unlock().await.unwrap();
}

#[tokio::test]
async fn unlock_extend_and_a_ttl_change_are_never_reported_as_a_loss() {
    let p = provider(&prefix()).await;
    let mut lock = p.try_lock(&cfg("own-writes", 10_000, 0)).await.unwrap().expect("free");
    // A new TTL re-puts the key on a fresh lease (a put event with the same create_revision).
    lock.extend(Duration::from_secs(20), Duration::ZERO).await.unwrap();
    lock.extend(Duration::from_secs(20), Duration::ZERO).await.unwrap();
    let lease = lock.lease().clone();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!lease.is_lost(), "a put by the holder itself was taken for a loss");
    lock.unlock().await.unwrap();
    // The unlock deletes the key: the watch sees the delete of a released lock.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!lease.is_lost(), "the holder's own unlock was taken for a loss");
    // The same with lock_at_least_for (the key moves to a short lease).
    let lock = p.try_lock(&cfg("own-writes-2", 10_000, 1_000)).await.unwrap().expect("free");
    let lease = lock.lease().clone();
    lock.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!lease.is_lost(), "the at-least re-put or its expiry was taken for a loss");
}

#[tokio::test]
async fn without_the_loss_watch_a_revoke_shows_only_at_the_next_extend() {
    let client = common::client(&url().await).await.unwrap();
    let p = EtcdLockProvider::builder(client)
        .key_prefix(prefix())
        .watch_for_loss(false)
        .build()
        .unwrap();
    let config = LockConfig::new("unwatched", Duration::from_secs(30), Duration::ZERO).unwrap();
    let mut lock = p.try_lock(&config).await.unwrap().expect("free");
    let mut c = p.client();
    let lease = c.get(p.key("unwatched"), None).await.unwrap().kvs()[0].lease();
    c.lease_revoke(lease).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!lock.is_lost(), "nothing watches: the loss is not known yet");
    match lock.extend(Duration::from_secs(30), Duration::ZERO).await {
        Err(Error::LockLost { .. }) => {}
        other => panic!("expected LockLost, got {other:?}"),
    }
    assert!(lock.is_lost());
}

#[tokio::test]
async fn a_server_gone_after_connecting_is_unavailable_and_the_message_says_why() {
    use shedlock_test_support::{
        FaultProxy, host_port,
        unreachable::{GONE, assert_named},
    };
    use std::net::ToSocketAddrs;
    let url = url().await;
    let addr = host_port(&url).to_socket_addrs().unwrap().next().unwrap();
    let proxy = FaultProxy::start(addr).await.unwrap();
    let p = common::provider(&testing::url_via(&url, proxy.addr()), &prefix()).await;
    p.try_lock(&cfg("gone", 60_000, 0)).await.unwrap().expect("free").unlock().await.unwrap();
    // The server goes away: its connection is cut and a new one is refused.
    proxy.set_refusing(true).await.unwrap();
    proxy.cut_all();
    assert_named(&p, "the server gone", GONE).await;
}

#[tokio::test]
async fn inspection_sees_the_at_least_remainder_as_the_same_acquisition_and_force_release_ends_it()
{
    let shared = prefix();
    let (p, other) = (provider(&shared).await, provider(&shared).await);
    let lock = p.try_lock(&cfg("least", 30_000, 20_000)).await.unwrap().expect("free");
    let seen = other.inspect("least").await.unwrap().expect("a record");
    lock.unlock().await.unwrap();
    // Within lock_at_least_for the key lives on a short lease: still held, still this acquisition.
    let rest = other.inspect("least").await.unwrap().expect("kept for at-least");
    assert!(rest.held);
    assert_eq!(
        (rest.acquisition.as_str(), rest.fencing_token),
        (seen.acquisition.as_str(), seen.fencing_token)
    );
    match other.force_release(&rest).await.unwrap() {
        shedlock::ForceRelease::Released(r) => assert_eq!(r.acquisition, seen.acquisition),
        x => panic!("{x:?}"),
    }
    assert!(other.inspect("least").await.unwrap().is_none());
    other
        .try_lock(&cfg("least", 30_000, 0))
        .await
        .unwrap()
        .expect("free at once")
        .unlock()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_key_under_the_prefix_that_no_provider_wrote_is_a_backend_error_not_a_panic() {
    let p = provider(&prefix()).await;
    let mut c = p.client();
    c.put(p.key("foreign"), vec![0xff, 0xfe], None).await.unwrap();
    let mut bad_key = p.key("x");
    bad_key.push(0xff);
    c.put(bad_key, "someone", None).await.unwrap();
    assert!(matches!(p.inspect("foreign").await, Err(Error::Backend { .. })));
    assert!(matches!(p.list("", None, 10).await, Err(Error::Backend { .. })));
    // A page that does not reach the bad keys is answered.
    let locked = p.try_lock(&cfg("a", 30_000, 0)).await.unwrap().expect("free");
    let page = p.list("a", None, 10).await.unwrap();
    assert_eq!(page.records.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["a"]);
    locked.unlock().await.unwrap();
}

#[tokio::test]
async fn prefixes_app_and_app2_lock_2x_and_x_independently() {
    // Without a delimiter both would be the key `app2x`.
    let base = unique("tenants");
    let app = provider(&format!("{base}/app")).await;
    let app2 = provider(&format!("{base}/app2")).await;
    assert_ne!(app.key("2x"), app2.key("x"));
    assert_eq!(app.key_prefix(), format!("{base}/app/"), "a `/` is added");
    let a = app.try_lock(&cfg("2x", 30_000, 0)).await.unwrap().expect("app's 2x is free");
    let b = app2.try_lock(&cfg("x", 30_000, 0)).await.unwrap().expect("app2's x is free too");
    // Releasing one does not free the other.
    a.unlock().await.unwrap();
    assert!(app2.try_lock(&cfg("x", 30_000, 0)).await.unwrap().is_none(), "x still held");
    assert!(app2.inspect("x").await.unwrap().is_some_and(|r| r.held));
    assert!(app.inspect("2x").await.unwrap().is_none());
    b.unlock().await.unwrap();
    assert!(app2.inspect("x").await.unwrap().is_none());
}

#[tokio::test]
async fn a_nested_prefix_shares_no_key_with_its_parent_and_is_never_listed_by_it() {
    let base = unique("nested");
    let parent = provider(&format!("{base}/a/")).await;
    let child = provider(&format!("{base}/a/b/")).await;
    // Prefix `a/` with name `b/x` against prefix `a/b/` with name `x`: `/` in a name is escaped.
    assert_eq!(parent.key("b/x"), format!("{base}/a/b%2Fx").into_bytes());
    assert_eq!(child.key("x"), format!("{base}/a/b/x").into_bytes());
    let mine = parent.try_lock(&cfg("b/x", 30_000, 0)).await.unwrap().expect("free");
    let theirs = child.try_lock(&cfg("x", 30_000, 0)).await.unwrap().expect("free as well");
    // Locks of the parent on both sides of the child's keys, in key order: `b%2Fx`, `b/…`, `c`.
    let c = parent.try_lock(&cfg("c", 30_000, 0)).await.unwrap().expect("free");
    let aa = parent.try_lock(&cfg("a%", 30_000, 0)).await.unwrap().expect("free");
    let names =
        |page: &shedlock::LockPage| page.records.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
    let all = parent.list("", None, 10).await.unwrap();
    assert_eq!(names(&all), ["a%", "b/x", "c"]);
    assert_eq!(all.next, None);
    // One record per page: the child's keys between them are skipped, never a page of their own.
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = parent.list("", cursor.as_deref(), 1).await.unwrap();
        seen.extend(names(&page));
        match page.next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    assert_eq!(seen, ["a%", "b/x", "c"]);
    assert_eq!(names(&parent.list("b/", None, 10).await.unwrap()), ["b/x"]);
    assert_eq!(names(&child.list("", None, 10).await.unwrap()), ["x"]);
    for l in [mine, theirs, c, aa] {
        l.unlock().await.unwrap();
    }
}

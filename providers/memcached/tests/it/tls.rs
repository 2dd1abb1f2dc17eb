//! TLS against a real memcached: the launcher's secure one (`-Z` on its only listener, a
//! certificate for 127.0.0.1 and localhost signed by a throwaway CA; no credentials, since the
//! meta protocol has none). The whole lock cycle over TLS, reconnects over TLS, and every way
//! of getting TLS wrong ending in a typed error, quickly, never a panic or a hang.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use shedlock::{Error, LockProvider, ProviderBuilder as _, inspect::ForceRelease};
use shedlock_launcher::{Backend, Service};
use shedlock_memcached::{MemcachedLockProvider, MemcachedLockProviderBuilder};
use shedlock_test_support::{self as testing, FaultProxy, cfg, unique};

use crate::pki::Pki;

async fn secure() -> &'static Service {
    testing::secure::service(Backend::Memcached, "memcached").await.unwrap()
}

fn addr(s: &Service) -> SocketAddr {
    s.addr().expect("the secure memcached has an address")
}

fn ca(s: &Service) -> String {
    s.secure().expect("a secure launch").ca_pem().to_owned()
}

/// A TLS builder on the secure server (trusting its CA), with a key prefix of its own.
async fn tls_builder(prefix: &str) -> MemcachedLockProviderBuilder {
    let s = secure().await;
    MemcachedLockProvider::builder(addr(s).to_string())
        .tls_ca_pem(ca(s))
        .key_prefix(prefix)
        .operation_timeout(Some(Duration::from_secs(3)))
}

/// Runs `call` and returns its error, asserting that it came within `within`.
async fn error_within<T: std::fmt::Debug>(
    within: Duration,
    call: impl std::future::Future<Output = shedlock::Result<T>>,
) -> Error {
    let started = Instant::now();
    let r = tokio::time::timeout(within + Duration::from_secs(2), call).await.expect("not hung");
    let e = r.expect_err("an error");
    assert!(started.elapsed() < within, "took {:?}: {e}", started.elapsed());
    e
}

fn assert_setup_saying(e: &Error, words: &[&str]) {
    assert!(matches!(e, Error::Setup { backend: "memcached", .. }), "{e:?}");
    assert!(!e.is_retryable(), "{e:?}");
    let text = e.to_string();
    for w in words {
        assert!(text.contains(w), "{text:?} should say {w:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_full_lock_cycle_runs_over_tls() {
    let prefix = unique("tls") + ":";
    let a = tls_builder(&prefix).await.locked_by("node-a").build().unwrap();
    let b = tls_builder(&prefix).await.build().unwrap();
    assert!(a.uses_tls() && b.uses_tls());
    a.check().await.unwrap();

    // try_lock: one winner.
    let c = cfg("job", 30_000, 0);
    let mut lock = a.try_lock(&c).await.unwrap().expect("free");
    assert!(b.try_lock(&c).await.unwrap().is_none(), "held over TLS too");

    // extend: owner-checked, over TLS.
    lock.extend(Duration::from_secs(60), Duration::ZERO).await.unwrap();

    // inspect: the record as the server holds it.
    let info = b.inspect("job").await.unwrap().expect("a record");
    assert!(info.held);
    assert_eq!(info.locked_by.as_deref(), Some("node-a"));
    // list: memcached cannot enumerate keys, over TLS as in plaintext.
    assert!(matches!(b.list("", None, 10).await, Err(Error::Unsupported { .. })));

    // The record through a raw connection of the provider: a TLS one.
    let key = a.key("job").unwrap();
    let mut raw = a.raw_connection().await.unwrap();
    let r = raw.request(format!("mg {key} b t v\r\n").as_bytes()).await.unwrap();
    assert_eq!(r.code, "VA");
    let ttl: u64 = r.flag('t').unwrap().parse().unwrap();
    assert!((58..=62).contains(&ttl), "extended to 60 s + 2: {ttl}");

    // unlock, then the name is free again.
    lock.unlock().await.unwrap();
    assert!(b.inspect("job").await.unwrap().is_none());
    let held_by_b = b.try_lock(&c).await.unwrap().expect("free after unlock");

    // force_release: an operator releases b's lock over TLS; b's extend then finds it lost.
    let seen = a.inspect("job").await.unwrap().expect("b's record");
    match a.force_release(&seen).await.unwrap() {
        ForceRelease::Released(was) => assert_eq!(was.acquisition, seen.acquisition),
        other => panic!("expected Released, got {other:?}"),
    }
    let mut held_by_b = held_by_b;
    let e = held_by_b.extend(Duration::from_secs(30), Duration::ZERO).await.unwrap_err();
    assert!(matches!(e, Error::LockLost { .. }), "{e:?}");
    held_by_b.unlock().await.unwrap();
    // A second force_release of the same acquisition changes nothing.
    assert!(matches!(a.force_release(&seen).await.unwrap(), ForceRelease::Changed(None)));
    b.check().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_are_tls_too_and_each_call_stays_one_round_trip() {
    let s = secure().await;
    let proxy = FaultProxy::start(addr(s)).await.unwrap();
    // Through the proxy the address is still 127.0.0.1, which the certificate names.
    let p = MemcachedLockProvider::builder(proxy.addr().to_string())
        .tls_ca_pem(ca(s))
        .key_prefix(unique("tlsre") + ":")
        .max_connections(1)
        .build()
        .unwrap();
    p.try_lock(&cfg("warm", 60_000, 0)).await.unwrap().unwrap().unlock().await.unwrap();
    // Flushed whole: an acquire and its release are one round trip each over TLS too.
    let c = cfg("rt", 60_000, 0);
    let r0 = proxy.round_trips();
    let l = p.try_lock(&c).await.unwrap().unwrap();
    let r1 = proxy.round_trips();
    l.unlock().await.unwrap();
    assert_eq!((r1 - r0, proxy.round_trips() - r1), (1, 1));

    // The idle TLS connection is cut underneath: replaced by a new TLS connection, no error.
    proxy.cut_all();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let l = p.try_lock(&cfg("after-cut", 60_000, 0)).await.unwrap().expect("a new connection");
    l.unlock().await.unwrap();
    assert_eq!(proxy.connections(), 2);

    // Cut mid-call: that call fails with the retryable Unavailable, the next one reconnects.
    proxy.set_delay(Duration::from_millis(300));
    let call = {
        let p = p.clone();
        tokio::spawn(async move { p.try_lock(&cfg("mid", 60_000, 0)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.cut_all();
    let e = call.await.unwrap().unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }) && e.is_retryable(), "{e:?}");
    proxy.set_delay(Duration::ZERO);
    let l = p.try_lock(&cfg("mid", 60_000, 0)).await.unwrap().expect("recovered over TLS");
    l.unlock().await.unwrap();
    assert_eq!(proxy.connections(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_trusting_another_ca_fails_with_setup_quickly_and_no_panic() {
    let s = secure().await;
    let other = Pki::new("not memcached's CA");
    let p = MemcachedLockProvider::builder(addr(s).to_string())
        .tls_ca_pem(other.ca_pem())
        .operation_timeout(Some(Duration::from_secs(3)))
        .build()
        .unwrap();
    let e = error_within(Duration::from_secs(2), p.try_lock(&cfg("x", 60_000, 0))).await;
    assert_setup_saying(&e, &["certificate was not accepted", "tls_ca_pem", "UnknownIssuer"]);
    let e = error_within(Duration::from_secs(2), p.check()).await;
    assert_setup_saying(&e, &["tls_ca_pem"]);
    let e = error_within(Duration::from_secs(2), p.raw_connection()).await;
    assert_setup_saying(&e, &["tls_ca_pem"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_without_a_ca_is_refused_at_build() {
    let s = secure().await;
    // A server name alone asks for TLS, but trusts nothing: refused before any I/O.
    let e = MemcachedLockProvider::builder(addr(s).to_string())
        .tls_server_name("localhost")
        .build()
        .unwrap_err();
    assert_setup_saying(&e, &["tls_ca_pem"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_name_the_certificate_does_not_hold_fails_with_setup_and_localhost_works() {
    let s = secure().await;
    let builder = || {
        MemcachedLockProvider::builder(addr(s).to_string())
            .tls_ca_pem(ca(s))
            .operation_timeout(Some(Duration::from_secs(3)))
    };
    let p = builder().tls_server_name("memcached.example").build().unwrap();
    let e = error_within(Duration::from_secs(2), p.check()).await;
    assert_setup_saying(&e, &["certificate was not accepted", "tls_server_name"]);
    // The certificate names localhost: verified against that name instead of the address.
    builder().tls_server_name("localhost").build().unwrap().check().await.unwrap();
    assert!(matches!(builder().tls_server_name("not a name").build(), Err(Error::Setup { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plaintext_provider_against_the_tls_port_fails_fast_with_unavailable_not_a_hang() {
    let s = secure().await;
    let p = MemcachedLockProvider::builder(addr(s).to_string())
        .operation_timeout(Some(Duration::from_secs(2)))
        .build()
        .unwrap();
    assert!(!p.uses_tls());
    // memcached's TLS listener resets a connection whose first bytes (the client's `stats`) are
    // no TLS record: the client sees a reset, which it cannot tell from a server going away
    // (retryable), and says what it may mean. At once, well within the operation timeout.
    let e = error_within(Duration::from_secs(1), p.try_lock(&cfg("x", 60_000, 0))).await;
    assert!(matches!(e, Error::Unavailable { backend: "memcached", .. }), "{e:?}");
    assert!(e.to_string().contains("TLS listener (-Z)"), "{e}");
    let e = error_within(Duration::from_secs(1), p.check()).await;
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_provider_against_a_plaintext_port_fails_with_a_typed_error_not_a_hang() {
    let url = testing::url(Backend::Memcached, "memcached").await;
    let plain = url.trim_start_matches("memcache://").trim_end_matches('/').to_owned();
    let p = MemcachedLockProvider::builder(plain)
        .tls_ca_pem(ca(secure().await))
        .tls_server_name("localhost")
        .operation_timeout(Some(Duration::from_secs(2)))
        .build()
        .unwrap();
    let e = error_within(Duration::from_secs(3), p.try_lock(&cfg("x", 60_000, 0))).await;
    assert_setup_saying(&e, &["does not answer TLS"]);
}

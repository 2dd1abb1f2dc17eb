//! Provider-level tests against a real NATS server (JetStream, per-message TTL).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::ProviderBuilder as _;
use std::{
    net::{SocketAddr, ToSocketAddrs},
    time::Duration,
};

use async_nats::{Client, ConnectOptions, HeaderMap, Request};
use shedlock::{Error, LockProvider};
use shedlock_launcher::{Backend, LaunchOptions, Service};
use shedlock_nats::{MAX_NAME_LEN, NatsLockProvider, TimeSource, key_for};
use shedlock_test_support::{FaultProxy, cfg, host_port, unique};
use tokio::time::Instant;

async fn url() -> String {
    shedlock_test_support::url(Backend::Nats, "NATS").await
}

fn addr_of(url: &str) -> SocketAddr {
    host_port(url).to_socket_addrs().unwrap().next().unwrap()
}

fn options() -> ConnectOptions {
    ConnectOptions::new()
        .connection_timeout(Duration::from_secs(2))
        .request_timeout(Some(Duration::from_secs(3)))
        .reconnect_delay_callback(|n| Duration::from_millis((n as u64 * 50).min(500)))
}

async fn client_at(url: &str) -> Client {
    options().connect(url).await.expect("connect to NATS")
}

async fn client() -> Client {
    client_at(&url().await).await
}

fn provider(client: Client, bucket: &str) -> NatsLockProvider {
    NatsLockProvider::builder(client)
        .bucket(bucket)
        .operation_timeout(Some(Duration::from_secs(3)))
        .build()
        .unwrap()
}

/// A fresh bucket and two independent providers on it (separate clients, like two nodes).
async fn two_nodes() -> (NatsLockProvider, NatsLockProvider) {
    let bucket = unique("b");
    let a = provider(client().await, &bucket);
    a.create_bucket().await.unwrap();
    let b = provider(client().await, &bucket);
    (a, b)
}

async fn raw(c: &Client, subject: String, headers: HeaderMap, body: &str) -> async_nats::Message {
    let req = Request::new()
        .headers(headers)
        .payload(body.to_owned().into())
        .timeout(Some(Duration::from_secs(5)));
    c.send_request(subject, req).await.unwrap()
}

/// `nats kv del`: a tombstone becomes the key's last message.
async fn kv_del(c: &Client, p: &NatsLockProvider, name: &str) {
    let mut h = HeaderMap::new();
    h.insert("KV-Operation", "DEL");
    let m = raw(c, p.subject_for(name), h, "").await;
    assert!(!String::from_utf8_lossy(&m.payload).contains("error"));
}

/// `nats stream purge KV_x --subject ...`: the key's messages are removed, nothing is left.
async fn purge_subject(c: &Client, p: &NatsLockProvider, name: &str) {
    let body = format!(r#"{{"filter":"{}"}}"#, p.subject_for(name));
    let m = raw(c, format!("$JS.API.STREAM.PURGE.{}", p.stream()), HeaderMap::new(), &body).await;
    assert!(String::from_utf8_lossy(&m.payload).contains("\"success\":true"));
}

#[tokio::test]
async fn names_map_to_distinct_valid_keys_and_lock_independently() {
    let (a, b) = two_nodes().await;
    // Names that a naive mapping would collide or that NATS subjects forbid.
    let names = ["a.b", "a=2Eb", "a b", "a*", "a>", "a/b", "ü", "a\0b", "a..b", ".", "=", "a_b"];
    let mut locks = Vec::new();
    for n in names {
        let k = key_for(n);
        assert!(k.bytes().all(|c| c.is_ascii_alphanumeric() || b"-_/=".contains(&c)), "{k}");
        locks.push(a.try_lock(&cfg(n, 60_000, 0)).await.unwrap().expect(n));
    }
    for n in names {
        assert!(b.try_lock(&cfg(n, 60_000, 0)).await.unwrap().is_none(), "{n} held");
    }
    for l in locks {
        l.unlock().await.unwrap();
    }
    for n in names {
        b.try_lock(&cfg(n, 60_000, 0)).await.unwrap().expect(n).unlock().await.unwrap();
    }
}

#[tokio::test]
async fn the_longest_name_is_accepted_and_one_byte_more_is_rejected_not_truncated() {
    let (a, _) = two_nodes().await;
    // The worst case for the escaped subject: every byte escaped.
    let longest = "é".repeat(MAX_NAME_LEN / 2);
    assert_eq!(longest.len(), MAX_NAME_LEN);
    a.try_lock(&cfg(&longest, 60_000, 0)).await.unwrap().unwrap().unlock().await.unwrap();
    let too_long = format!("{longest}x");
    match a.try_lock(&cfg(&too_long, 60_000, 0)).await {
        Err(Error::InvalidName { name, .. }) => assert_eq!(name, too_long),
        other => panic!("expected InvalidName, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_bucket_is_a_setup_error_that_says_how_to_create_it() {
    let p = provider(client().await, &unique("missing"));
    for r in [p.try_lock(&cfg("x", 60_000, 0)).await.map(|_| ()), p.check_bucket().await] {
        match r {
            Err(Error::Setup { message, .. }) => {
                assert!(message.contains("create_bucket()"), "{message}");
            }
            other => panic!("expected Setup, got {other:?}"),
        }
    }
    p.create_bucket().await.unwrap();
    p.create_bucket().await.unwrap(); // idempotent
    p.check_bucket().await.unwrap();
    p.try_lock(&cfg("x", 60_000, 0)).await.unwrap().unwrap().unlock().await.unwrap();
}

#[tokio::test]
async fn a_bucket_without_per_message_ttl_is_refused_in_server_time_and_works_in_client_time() {
    // What a server before 2.11 offers: a bucket without allow_msg_ttl.
    let bucket = unique("nottl");
    let c = client().await;
    let client_time = NatsLockProvider::builder(c.clone())
        .bucket(&bucket)
        .time_source(TimeSource::Client)
        .build()
        .unwrap();
    assert!(!client_time.bucket_config().contains("allow_msg_ttl"));
    client_time.create_bucket().await.unwrap();
    let server_time = provider(c.clone(), &bucket);
    for r in [
        server_time.check_bucket().await,
        server_time.create_bucket().await,
        server_time.try_lock(&cfg("x", 60_000, 0)).await.map(|_| ()),
    ] {
        match r {
            Err(Error::Setup { message, .. }) => {
                assert!(message.contains("allow_msg_ttl"), "{message}");
            }
            other => panic!("expected Setup, got {other:?}"),
        }
    }
    assert!(!client_time.capabilities().server_time);
    let other = NatsLockProvider::builder(client().await)
        .bucket(&bucket)
        .time_source(TimeSource::Client)
        .build()
        .unwrap();
    // Held, expired by the clients' clocks (the record stays: no TTL), taken over.
    let l = client_time.try_lock(&cfg("x", 300, 0)).await.unwrap().unwrap();
    assert!(other.try_lock(&cfg("x", 300, 0)).await.unwrap().is_none());
    tokio::time::sleep(Duration::from_millis(350)).await;
    let l2 = other.try_lock(&cfg("x", 60_000, 0)).await.unwrap().expect("expired by client time");
    assert!(l2.fencing_token() > l.fencing_token());
    l.unlock().await.unwrap(); // stale: no-op
    assert!(client_time.try_lock(&cfg("x", 60_000, 0)).await.unwrap().is_none());
    l2.unlock().await.unwrap();
    client_time.try_lock(&cfg("x", 60_000, 0)).await.unwrap().unwrap().unlock().await.unwrap();
}

#[tokio::test]
async fn a_stale_holder_can_neither_extend_nor_unlock_the_new_holders_lock() {
    let (a, b) = two_nodes().await;
    let c = client().await;
    let mut stale = a.try_lock(&cfg("stale", 60_000, 0)).await.unwrap().unwrap();
    // An operator deletes the record while A still holds it; B takes the name.
    kv_del(&c, &a, "stale").await;
    let fresh = b.try_lock(&cfg("stale", 60_000, 0)).await.unwrap().expect("deleted: free");
    assert!(fresh.fencing_token() > stale.fencing_token());
    // A's lease is still running: its extend reaches the server and fails the sequence check.
    match stale.extend(Duration::from_secs(600), Duration::ZERO).await {
        Err(Error::LockLost { name }) => assert_eq!(name, "stale"),
        other => panic!("expected LockLost, got {other:?}"),
    }
    stale.unlock().await.unwrap();
    assert!(a.try_lock(&cfg("stale", 60_000, 0)).await.unwrap().is_none(), "B still holds it");
    fresh.unlock().await.unwrap();
    let l = a.try_lock(&cfg("stale", 60_000, 0)).await.unwrap().expect("free after B's unlock");
    l.unlock().await.unwrap();
}

/// Polls `p` until it takes `name` (at_most 60 s), returning when, measured from `from`.
async fn free_after(p: &NatsLockProvider, name: &str, from: Instant, limit: Duration) -> Duration {
    loop {
        if let Some(l) = p.try_lock(&cfg(name, 60_000, 0)).await.unwrap() {
            let at = from.elapsed();
            l.unlock().await.unwrap();
            return at;
        }
        assert!(from.elapsed() < limit, "{name} still held after {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn lock_at_least_for_holds_the_key_after_an_early_unlock_then_frees_it() {
    let (a, b) = two_nodes().await;
    let started = Instant::now();
    let l = a.try_lock(&cfg("least", 60_000, 2_000)).await.unwrap().unwrap();
    l.unlock().await.unwrap();
    let free = free_after(&b, "least", started, Duration::from_secs(6)).await;
    // Whole-second TTL of what remained (just under 2 s, rounded up to 2 s), plus the server's
    // expiry tick.
    assert!(free >= Duration::from_secs(2), "freed at {free:?}, before lock_at_least_for");
    assert!(free < Duration::from_millis(3_500), "freed only at {free:?}");
    // An unlock after at-least has passed frees at once.
    let l = a.try_lock(&cfg("least2", 60_000, 100)).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    l.unlock().await.unwrap();
    let l = b.try_lock(&cfg("least2", 60_000, 0)).await.unwrap().expect("free at once");
    l.unlock().await.unwrap();
}

#[tokio::test]
async fn the_server_never_expires_a_lock_before_lock_at_most_for() {
    let (a, b) = two_nodes().await;
    // 1 s is the smallest TTL; 1.5 s is rounded up to 2 s (the server would truncate it to 1 s).
    for (name, at_most) in [("ttl1", 1_000u64), ("ttl15", 1_500)] {
        let sent = Instant::now();
        let _held = a.try_lock(&cfg(name, at_most, 0)).await.unwrap().unwrap();
        let free = free_after(&b, name, sent, Duration::from_secs(5)).await;
        assert!(free >= Duration::from_millis(at_most), "{name}: free at {free:?}");
        println!("{name}: lock_at_most_for {at_most} ms, free at {free:?}");
    }
}

#[tokio::test]
async fn fencing_tokens_increase_across_unlock_expiry_and_operator_deletes() {
    let (a, b) = two_nodes().await;
    let c = client().await;
    let mut tokens = Vec::new();
    let l = a.try_lock(&cfg("f", 1_000, 0)).await.unwrap().unwrap();
    tokens.push(l.fencing_token().unwrap());
    l.unlock().await.unwrap();
    let l = b.try_lock(&cfg("f", 1_000, 0)).await.unwrap().unwrap();
    tokens.push(l.fencing_token().unwrap());
    drop(l); // expires
    let free = free_after(&a, "f", Instant::now(), Duration::from_secs(5)).await;
    assert!(free > Duration::ZERO);
    let l = a.try_lock(&cfg("f", 60_000, 0)).await.unwrap().unwrap();
    tokens.push(l.fencing_token().unwrap());
    kv_del(&c, &a, "f").await;
    let l2 = b.try_lock(&cfg("f", 60_000, 0)).await.unwrap().unwrap();
    tokens.push(l2.fencing_token().unwrap());
    purge_subject(&c, &a, "f").await;
    let mut l3 = a.try_lock(&cfg("f", 60_000, 0)).await.unwrap().unwrap();
    tokens.push(l3.fencing_token().unwrap());
    // An extension keeps the acquisition's token.
    l3.extend(Duration::from_secs(60), Duration::ZERO).await.unwrap();
    assert_eq!(l3.fencing_token(), tokens.last().copied());
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    drop((l, l2));
    l3.unlock().await.unwrap();
}

#[tokio::test]
async fn fencing_tokens_keep_increasing_and_held_locks_survive_a_server_restart() {
    // A private server: restarting the shared one would disturb the other tests.
    let service = tokio::task::spawn_blocking(|| {
        Service::start(Backend::Nats, &LaunchOptions::new().ignore_env(true))
    })
    .await
    .unwrap()
    .expect("start a private NATS server");
    let service = std::sync::Arc::new(service);
    let url = service.url().to_owned();
    let p = provider(client_at(&url).await, "restart");
    p.create_bucket().await.unwrap();
    let mut last = 0;
    for _ in 0..3 {
        let l = p.try_lock(&cfg("r", 60_000, 0)).await.unwrap().unwrap();
        last = l.fencing_token().unwrap();
        l.unlock().await.unwrap(); // purged: the stream is empty again
    }
    let s = service.clone();
    tokio::task::spawn_blocking(move || s.restart()).await.unwrap().unwrap();
    let started = Instant::now();
    let l = loop {
        match p.try_lock(&cfg("r", 60_000, 0)).await {
            Ok(Some(l)) => break l,
            Ok(None) => panic!("nothing holds r"),
            Err(e) => {
                assert!(e.is_retryable(), "{e:?}");
                assert!(started.elapsed() < Duration::from_secs(10), "no recovery: {e:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let after = l.fencing_token().unwrap();
    println!("token before the restart {last}, after {after}");
    assert!(after > last, "the stream sequence restarted: {after} <= {last}");
    l.unlock().await.unwrap();
    // A lock held across a restart is still held (file storage), and still ours.
    let held = p.try_lock(&cfg("held", 60_000, 0)).await.unwrap().unwrap();
    let s = service.clone();
    tokio::task::spawn_blocking(move || s.restart()).await.unwrap().unwrap();
    let started = Instant::now();
    while let Err(e) = p.check_bucket().await {
        assert!(started.elapsed() < Duration::from_secs(10), "no recovery: {e:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(p.try_lock(&cfg("held", 60_000, 0)).await.unwrap().is_none(), "lost in the restart");
    held.unlock().await.unwrap();
    p.try_lock(&cfg("held", 60_000, 0)).await.unwrap().expect("released").unlock().await.unwrap();
    // Stopping the server blocks: not on the runtime's threads.
    tokio::task::spawn_blocking(move || drop(service)).await.unwrap();
}

/// Counts the turnarounds of `f` through `proxy`, after the traffic settled. A request and its
/// answer first, so that a PONG the client sent last (the server PINGs each client about 2 s
/// after it connects) cannot hide the next request's turnaround.
async fn turnarounds<T>(proxy: &FaultProxy, c: &Client, f: impl Future<Output = T>) -> (T, u64) {
    c.request("$JS.API.INFO", "".into()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    let before = proxy.round_trips();
    let r = f.await;
    (r, proxy.round_trips() - before)
}

#[tokio::test]
async fn round_trips_per_path_through_the_fault_proxy() {
    let url = url().await;
    let proxy = FaultProxy::start(addr_of(&url)).await.unwrap();
    let via = shedlock_test_support::url_via(&url, proxy.addr());
    let bucket = unique("rt");
    let pc = client_at(&via).await;
    let p = provider(pc.clone(), &bucket);
    p.create_bucket().await.unwrap();
    let other = provider(client().await, &bucket);
    let c = client().await;
    // Warm up (the client subscribes its response inbox on the first request).
    p.try_lock(&cfg("warm", 60_000, 0)).await.unwrap().unwrap().unlock().await.unwrap();

    let mut report = Vec::new();
    let mut acquire = async |path: &str, name: &str, expect: u64, at_least: u64| {
        let (l, n) = turnarounds(&proxy, &pc, p.try_lock(&cfg(name, 60_000, at_least))).await;
        let l = l.unwrap().expect(path);
        report.push(format!("acquire {path}: {n}"));
        assert_eq!(n, expect, "acquire {path}");
        l
    };
    let l = acquire("fresh key", "k", 1, 0).await;
    let (r, n) = turnarounds(&proxy, &pc, l.unlock()).await;
    r.unwrap();
    assert_eq!(n, 1, "release (purge)");
    let l = acquire("after our unlock", "k", 1, 1_000).await;
    let (r, n) = turnarounds(&proxy, &pc, l.unlock()).await;
    r.unwrap();
    assert_eq!(n, 1, "release within lock_at_least_for (republish with TTL)");
    let _ = free_after(&other, "k", Instant::now(), Duration::from_secs(5)).await;
    let l = acquire("after an at-least hold expired and another node's unlock", "k", 1, 0).await;
    drop(l);
    let short = other.try_lock(&cfg("e", 1_000, 0)).await.unwrap().unwrap();
    drop(short);
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    let l = acquire("after expiry", "e", 1, 0).await;
    purge_subject(&c, &p, "e").await;
    drop(l);
    let l = acquire("after an operator purge", "e", 1, 0).await;
    kv_del(&c, &p, "e").await;
    drop(l);
    // A tombstone: the publish fails, a direct get finds the tombstone, a publish takes it over.
    let l = acquire("over a `nats kv del` tombstone", "e", 3, 0).await;
    // Held elsewhere: the first encounter looks once; later ones answer from the first reply.
    assert!(other.try_lock(&cfg("e", 60_000, 0)).await.unwrap().is_none());
    let held = other.try_lock(&cfg("h", 60_000, 0)).await.unwrap().unwrap();
    let (r, n1) = turnarounds(&proxy, &pc, p.try_lock(&cfg("h", 60_000, 0))).await;
    assert!(r.unwrap().is_none());
    let (r, n2) = turnarounds(&proxy, &pc, p.try_lock(&cfg("h", 60_000, 0))).await;
    assert!(r.unwrap().is_none());
    assert_eq!((n1, n2), (2, 1), "held: first and later encounters");
    let mut l = l;
    let (r, n) = turnarounds(&proxy, &pc, l.extend(Duration::from_secs(60), Duration::ZERO)).await;
    r.unwrap();
    assert_eq!(n, 1, "extend");
    held.unlock().await.unwrap();
    l.unlock().await.unwrap();
    println!("{}", report.join("\n"));
}

#[tokio::test]
async fn a_cut_connection_fails_fast_with_a_retryable_error_and_the_next_calls_recover() {
    let url = url().await;
    let proxy = FaultProxy::start(addr_of(&url)).await.unwrap();
    let via = shedlock_test_support::url_via(&url, proxy.addr());
    let bucket = unique("cut");
    let p = provider(client_at(&via).await, &bucket);
    p.create_bucket().await.unwrap();
    let direct = provider(client().await, &bucket);
    p.try_lock(&cfg("w", 60_000, 0)).await.unwrap().unwrap().unlock().await.unwrap();

    let held = p.try_lock(&cfg("held", 60_000, 0)).await.unwrap().unwrap();
    proxy.set_refusing(true).await.unwrap();
    proxy.cut_all();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let err = p.try_lock(&cfg("x", 60_000, 0)).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    assert!(started.elapsed() < Duration::from_millis(100), "failed fast: {:?}", started.elapsed());
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(held.unlock().await.unwrap_err().is_retryable());
    // Nothing was queued to be sent later: "x" stays free.
    proxy.set_refusing(false).await.unwrap();
    let started = Instant::now();
    let l = loop {
        match p.try_lock(&cfg("y", 60_000, 0)).await {
            Ok(l) => break l.expect("free"),
            Err(e) => {
                assert!(e.is_retryable(), "{e:?}");
                assert!(started.elapsed() < Duration::from_secs(5), "no recovery: {e:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    println!("recovered after {:?}", started.elapsed());
    l.unlock().await.unwrap();
    let l = direct.try_lock(&cfg("x", 60_000, 0)).await.unwrap().expect("x was never taken");
    l.unlock().await.unwrap();
}

#[tokio::test]
async fn debug_output_carries_no_client_or_url() {
    let p = provider(client().await, "dbg");
    let d = format!("{p:?}");
    assert!(d.contains("dbg") && !d.contains("nats://") && !d.contains("127.0.0.1"), "{d}");
}

#[tokio::test]
async fn a_connection_cut_while_the_request_is_out_fails_fast_not_at_the_timeout() {
    let url = url().await;
    let proxy = FaultProxy::start(addr_of(&url)).await.unwrap();
    let via = shedlock_test_support::url_via(&url, proxy.addr());
    let bucket = unique("inflight");
    let p = provider(client_at(&via).await, &bucket);
    p.create_bucket().await.unwrap();
    p.try_lock(&cfg("w", 60_000, 0)).await.unwrap().unwrap().unlock().await.unwrap();
    // The request sits in the proxy when the connection is cut.
    proxy.set_delay(Duration::from_millis(500));
    let started = Instant::now();
    let call =
        tokio::spawn(async move { p.try_lock(&cfg("x", 60_000, 0)).await.map(|l| l.is_some()) });
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.cut_all();
    let r = call.await.unwrap();
    let took = started.elapsed();
    proxy.set_delay(Duration::ZERO);
    assert!(matches!(r, Err(Error::Unavailable { .. })), "{r:?}");
    // Well before the 3 s operation timeout.
    assert!(took < Duration::from_secs(1), "took {took:?}");
}

#[tokio::test]
async fn a_bucket_with_max_age_is_refused_because_it_would_end_locks_early() {
    // The server removes a message at the stream's max_age even when its TTL is longer.
    let c = client().await;
    let p = provider(c.clone(), &unique("maxage"));
    let config = p.bucket_config().replace("\"max_age\":0", "\"max_age\":3600000000000");
    assert!(config.contains("\"max_age\":3600000000000"), "{config}");
    let m =
        raw(&c, format!("$JS.API.STREAM.CREATE.{}", p.stream()), HeaderMap::new(), &config).await;
    assert!(!String::from_utf8_lossy(&m.payload).contains("\"error\""));
    for r in [
        p.check_bucket().await,
        p.create_bucket().await,
        p.try_lock(&cfg("x", 60_000, 0)).await.map(|_| ()),
    ] {
        match r {
            Err(Error::Setup { message, .. }) => assert!(message.contains("max_age"), "{message}"),
            other => panic!("expected Setup, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn client_time_does_not_revive_an_expired_lock_on_extend() {
    let bucket = unique("ctx");
    let build = async || {
        NatsLockProvider::builder(client().await)
            .bucket(&bucket)
            .time_source(TimeSource::Client)
            .build()
            .unwrap()
    };
    let a = build().await;
    a.create_bucket().await.unwrap();
    let b = build().await;
    let mut l = a.try_lock(&cfg("x", 200, 0)).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(matches!(
        l.extend(Duration::from_secs(60), Duration::ZERO).await,
        Err(Error::LockLost { .. })
    ));
    let l2 = b.try_lock(&cfg("x", 60_000, 0)).await.unwrap().expect("expired, not revived");
    l2.unlock().await.unwrap();
}

#[tokio::test]
async fn expiry_markers_of_a_bucket_with_subject_delete_marker_ttl_do_not_block_the_key() {
    // With `subject_delete_marker_ttl` every expiry leaves a marker as the key's last message:
    // the acquire trips over it, reads it, and takes the key over it.
    let c = client().await;
    let bucket = unique("markers");
    let p = provider(c.clone(), &bucket);
    let config = p.bucket_config().replace(
        "\"allow_msg_ttl\":true",
        "\"allow_msg_ttl\":true,\"subject_delete_marker_ttl\":60000000000",
    );
    assert!(config.contains("subject_delete_marker_ttl"), "{config}");
    let m =
        raw(&c, format!("$JS.API.STREAM.CREATE.{}", p.stream()), HeaderMap::new(), &config).await;
    assert!(!String::from_utf8_lossy(&m.payload).contains("\"error\""), "{:?}", m.payload);
    p.check_bucket().await.unwrap();
    let other = provider(client().await, &bucket);
    let l = p.try_lock(&cfg("m", 1_000, 0)).await.unwrap().unwrap();
    let first = l.fencing_token().unwrap();
    drop(l); // expires after 1 s, leaving a marker
    let get = format!("$JS.API.DIRECT.GET.{}.{}", p.stream(), p.subject_for("m"));
    let started = Instant::now();
    loop {
        let m = raw(&c, get.clone(), HeaderMap::new(), "").await;
        let marker = m.headers.as_ref().and_then(|h| h.get("Nats-Marker-Reason")).is_some();
        if marker {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "no expiry marker appeared");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let l = other.try_lock(&cfg("m", 60_000, 0)).await.unwrap().expect("a marker is no lock");
    assert!(l.fencing_token().unwrap() > first);
    l.unlock().await.unwrap();
}

#[tokio::test]
async fn a_server_gone_after_connecting_is_unavailable_and_the_message_says_why() {
    use shedlock_test_support::unreachable::{GONE, assert_named};
    let url = url().await;
    let proxy = FaultProxy::start(addr_of(&url)).await.unwrap();
    let p = provider(
        client_at(&shedlock_test_support::url_via(&url, proxy.addr())).await,
        &unique("gone"),
    );
    p.create_bucket().await.unwrap();
    p.try_lock(&cfg("gone", 60_000, 0)).await.unwrap().expect("free").unlock().await.unwrap();
    // The server goes away: its connection is cut and a new one is refused.
    proxy.set_refusing(true).await.unwrap();
    proxy.cut_all();
    // async-nats reconnects in the background and tells why a reconnect fails (refused) only
    // to the client's event callback, which the application sets: the provider's message says
    // the connection was lost, then that it is not connected and reconnecting.
    let lost: Vec<&str> = GONE
        .iter()
        .copied()
        .chain(["connection to the nats server was lost", "not connected to the nats server"])
        .collect();
    assert_named(&p, "the server gone", &lost).await;
}

/// `nats kv put` of a plain value (no TTL, not a lock message).
async fn kv_put(c: &Client, subject: String, value: &str) {
    let m = raw(c, subject, HeaderMap::new(), value).await;
    assert!(!String::from_utf8_lossy(&m.payload).contains("error"));
}

#[tokio::test]
async fn list_decodes_escaped_keys_pages_by_name_and_skips_keys_no_name_maps_to() {
    let (a, b) = two_nodes().await;
    // Names whose keys are escaped (`.`, space, `=`, `*`, `>`, non-ASCII), and one that is
    // another's escaped form: each is listed under its own name, once, in name order.
    let names = ["p.a", "p a", "p=2E", "p*", "p>", "pü", "p_%/x", "p"];
    let mut held = Vec::new();
    for n in names {
        held.push(a.try_lock(&cfg(n, 30_000, 0)).await.unwrap().expect("free"));
    }
    let c = client().await;
    // Keys other tools wrote, which no lock name maps to: not listed, and no error.
    kv_put(&c, format!("$KV.{}.p=2e", a.bucket()), "x").await;
    kv_put(&c, format!("$KV.{}.p.dotted", a.bucket()), "x").await;
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = b.list("p", cursor.as_deref(), 3).await.unwrap();
        assert!(page.records.len() <= 3);
        listed.extend(page.records.into_iter().map(|r| r.name));
        match page.next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    let mut expected: Vec<&str> = names.to_vec();
    expected.sort_unstable();
    assert_eq!(listed, expected, "every name once, in name order, pages of 3");
    let only = b.list("p=", None, 10).await.unwrap();
    assert_eq!(only.records.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["p=2E"]);
    assert!(b.list("nothing", None, 10).await.unwrap().records.is_empty());
    for l in held {
        l.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn inspect_reports_server_times_and_a_hand_put_value_can_be_seen_and_force_released() {
    let (a, b) = two_nodes().await;
    let lock = a.try_lock(&cfg("timed", 30_000, 0)).await.unwrap().expect("free");
    let info = b.inspect("timed").await.unwrap().expect("held");
    let (at, until) = (info.locked_at.expect("locked_at"), info.lock_until.expect("lock_until"));
    assert_eq!(until.duration_since(at).unwrap(), Duration::from_secs(30), "the message's TTL");
    let skew = at.duration_since(std::time::SystemTime::now() - Duration::from_secs(60));
    assert!(skew.is_ok_and(|d| d < Duration::from_secs(120)), "a server time near now: {at:?}");
    assert!(info.locked_by.is_some_and(|by| !by.is_empty()));
    lock.unlock().await.unwrap();

    // A value put by hand holds the name: inspected as held, no holder, and an operator can
    // release it.
    let c = client().await;
    kv_put(&c, a.subject_for("manual"), "not json").await;
    assert!(a.try_lock(&cfg("manual", 30_000, 0)).await.unwrap().is_none());
    let seen = b.inspect("manual").await.unwrap().expect("a record");
    assert!(seen.held && seen.locked_by.is_none() && seen.fencing_token.is_none(), "{seen:?}");
    assert!(matches!(b.force_release(&seen).await.unwrap(), shedlock::ForceRelease::Released(_)));
    a.try_lock(&cfg("manual", 30_000, 0)).await.unwrap().expect("free").unlock().await.unwrap();

    // A tombstone (`nats kv del`) is no record.
    let l = a.try_lock(&cfg("gone", 30_000, 0)).await.unwrap().expect("free");
    kv_del(&c, &a, "gone").await;
    assert_eq!(b.inspect("gone").await.unwrap(), None);
    drop(l);
}

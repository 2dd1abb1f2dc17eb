//! Provider-level tests against a real memcached server (the launcher's, or
//! `SHEDLOCK_MEMCACHED_URL`): key mapping, TTL arithmetic, owner checks, round trips, broken
//! connections, durations memcached cannot express, and a server restart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::ProviderBuilder as _;
use std::{net::SocketAddr, time::Duration};

use shedlock::{Error, LockConfig, LockProvider};
use shedlock_launcher::{Backend, LaunchOptions, Service};
use shedlock_memcached::{
    MAX_KEY_LEN, MAX_LOCK_DURATION, MemcachedLockProvider, MemcachedLockProviderBuilder,
    RawConnection, RawReply,
};
use shedlock_test_support::{self as testing, FaultProxy, cfg, unique, unreachable};

async fn address() -> String {
    let url = testing::url(Backend::Memcached, "memcached").await;
    url.trim_start_matches("memcache://").trim_end_matches('/').to_owned()
}

/// A builder on the shared server with a key prefix of its own (tests run in parallel).
async fn builder() -> MemcachedLockProviderBuilder {
    MemcachedLockProvider::builder(address().await).key_prefix(unique("t") + ":")
}

/// Two providers on the same keys, each with its own connections (two nodes).
async fn pair() -> (MemcachedLockProvider, MemcachedLockProvider) {
    let (addr, prefix) = (address().await, unique("t") + ":");
    let node = || MemcachedLockProvider::builder(&addr).key_prefix(&prefix).build().unwrap();
    (node(), node())
}

async fn raw(p: &MemcachedLockProvider) -> RawConnection {
    RawConnection::connect(p.address()).await.unwrap()
}

/// `mg <key> b t c v`: the record of `name`, with its TTL left, CAS and value; `EN` if absent.
async fn record(p: &MemcachedLockProvider, name: &str) -> RawReply {
    let key = p.key(name).unwrap();
    raw(p).await.request(format!("mg {key} b t c v\r\n").as_bytes()).await.unwrap()
}

fn ttl(r: &RawReply) -> u64 {
    assert_eq!(r.code, "VA", "{r:?}");
    r.flag('t').unwrap().parse().unwrap()
}

fn secs(at_most: u64, at_least: u64) -> LockConfig {
    cfg("x", at_most * 1000, at_least * 1000)
}

fn named(name: &str, c: &LockConfig) -> LockConfig {
    LockConfig::new(name, c.lock_at_most_for(), c.lock_at_least_for()).unwrap()
}

async fn proxy_to(p: &MemcachedLockProvider) -> FaultProxy {
    let upstream: SocketAddr = tokio::net::lookup_host(p.address()).await.unwrap().next().unwrap();
    FaultProxy::start(upstream).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_name_is_its_own_key_base64_of_prefix_and_name() {
    let (addr, prefix) = (address().await, unique("t") + ":");
    let p = MemcachedLockProvider::builder(&addr)
        .key_prefix(&prefix)
        .locked_by("node-a")
        .build()
        .unwrap();
    let q = MemcachedLockProvider::builder(&addr).key_prefix(&prefix).build().unwrap();
    // Names a plain memcached key could not hold, and pairs a lossy escaping would merge.
    let names = ["a b", "a_b", "a\nb", "a\0b", "a\r\nb", "ä", "a%20b", "😀", " ", "\t"];
    let mut locks = Vec::new();
    for n in names {
        locks.push(p.try_lock(&cfg(n, 60_000, 0)).await.unwrap().expect(n));
    }
    for n in names {
        assert!(q.try_lock(&cfg(n, 60_000, 0)).await.unwrap().is_none(), "{n:?} held");
        let r = record(&p, n).await;
        let value = String::from_utf8(r.value.clone().unwrap()).unwrap();
        // `<16 hex digits> <locked_by>`
        let (id, by) = value.split_once(' ').unwrap();
        assert_eq!((id.len(), by), (16, "node-a"), "{value:?}");
        assert!(u64::from_str_radix(id, 16).is_ok());
    }
    for l in locks {
        l.unlock().await.unwrap();
    }
    for n in names {
        assert_eq!(record(&p, n).await.code, "EN", "{n:?} deleted on unlock");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_name_fits_and_one_byte_more_is_invalid_name_not_truncated() {
    let p = MemcachedLockProvider::builder(address().await).key_prefix("").build().unwrap();
    assert_eq!(p.max_name_len(), MAX_KEY_LEN);
    // Unique in their first bytes, so that runs never share a key.
    let stem = unique("long");
    let longest = format!("{stem}{}", "x".repeat(MAX_KEY_LEN - stem.len()));
    let l = p.try_lock(&cfg(&longest, 60_000, 0)).await.unwrap().expect("the longest name");
    let too_long = format!("{longest}x");
    match p.try_lock(&cfg(&too_long, 60_000, 0)).await {
        Err(Error::InvalidName { name, backend, .. }) => {
            assert_eq!((name.as_str(), backend), (too_long.as_str(), "memcached"));
        }
        other => panic!("expected InvalidName, got {other:?}"),
    }
    assert!(matches!(p.key(&too_long), Err(Error::InvalidName { .. })));
    l.unlock().await.unwrap();

    // The prefix takes its share: 186 bytes in all.
    let d = builder().await.key_prefix("shedlock:").build().unwrap();
    assert_eq!(d.max_name_len(), 177);
    assert!(matches!(
        d.try_lock(&cfg(&"y".repeat(178), 1000, 0)).await,
        Err(Error::InvalidName { .. })
    ));
    // Bytes, not characters: 45 four-byte characters are 180 bytes.
    assert!(matches!(
        d.try_lock(&cfg(&"😀".repeat(45), 1000, 0)).await,
        Err(Error::InvalidName { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_ttl_is_at_most_rounded_up_plus_two_seconds() {
    let p = builder().await.build().unwrap();
    // Sub-second leases round up to 1 s. 200 ms, not 1 ms: a 1 ms lease can end before the
    // acquire's answer arrives on a loaded machine (LeaseExpiredInFlight after 3.8 ms, seen once).
    for (at_most_ms, want) in [(10_000, 12), (1_500, 4), (200, 3), (59_001, 62)] {
        let name = format!("ttl{at_most_ms}");
        let l = p.try_lock(&cfg(&name, at_most_ms, 0)).await.unwrap().unwrap();
        let t = ttl(&record(&p, &name).await);
        // One memcached tick may fall between the set and the read.
        assert!(
            t == want || t + 1 == want,
            "lock_at_most_for {at_most_ms} ms: TTL {t}, want {want}"
        );
        l.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_keeps_at_least_with_ttl_remaining_rounded_up_plus_one_else_deletes() {
    let (p, other) = pair().await;

    let c = named("least", &secs(60, 5));
    let l = p.try_lock(&c).await.unwrap().unwrap();
    let before = record(&p, "least").await;
    l.unlock().await.unwrap();
    let after = record(&p, "least").await;
    // ⌈5 s − a few ms⌉ + 1 = 6.
    let t = ttl(&after);
    assert!(t == 6 || t == 5, "TTL after unlock {t}");
    assert_eq!(after.value, before.value, "the record is kept as it was, only its TTL shortened");
    assert!(other.try_lock(&c).await.unwrap().is_none(), "held for at least 5 s");

    // No at-least left: the record is deleted at once.
    let c = named("gone", &secs(60, 0));
    let l = p.try_lock(&c).await.unwrap().unwrap();
    l.unlock().await.unwrap();
    assert_eq!(record(&p, "gone").await.code, "EN");
    assert!(other.try_lock(&c).await.unwrap().is_some());

    // At-least already elapsed by the time of the unlock: deleted too.
    let c =
        LockConfig::new("elapsed", Duration::from_secs(60), Duration::from_millis(100)).unwrap();
    let l = p.try_lock(&c).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    l.unlock().await.unwrap();
    assert_eq!(record(&p, "elapsed").await.code, "EN");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_handle_can_neither_unlock_nor_extend_the_new_holders_record() {
    let (a, b) = pair().await;
    let c = named("stale", &secs(60, 0));
    let mut stale = a.try_lock(&c).await.unwrap().unwrap();
    // An operator deletes the record; another node takes the name.
    let key = a.key("stale").unwrap();
    assert_eq!(
        raw(&a).await.request(format!("md {key} b\r\n").as_bytes()).await.unwrap().code,
        "HD"
    );
    let fresh = b.try_lock(&c).await.unwrap().expect("deleted, so free");
    let before = record(&a, "stale").await;

    match stale.extend(Duration::from_secs(600), Duration::ZERO).await {
        Err(Error::LockLost { name }) => assert_eq!(name, "stale"),
        other => panic!("a stale extend must give LockLost, got {other:?}"),
    }
    stale.unlock().await.unwrap();
    let after = record(&a, "stale").await;
    assert_eq!(after.flag('c'), before.flag('c'), "same CAS: the record was not rewritten");
    assert_eq!(after.value, before.value);
    assert!(ttl(&after) > 60, "TTL unchanged by the stale extend (62 s, not 602 s)");
    assert!(ttl(&after) < 100);
    assert!(a.try_lock(&c).await.unwrap().is_none(), "the new holder keeps it");
    fresh.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_sets_the_new_ttl_and_keeps_the_new_cas_for_unlock() {
    let p = builder().await.build().unwrap();
    let c = named("ext", &secs(5, 0));
    let mut l = p.try_lock(&c).await.unwrap().unwrap();
    let cas0 = record(&p, "ext").await.flag('c').unwrap().to_owned();
    l.extend(Duration::from_secs(30), Duration::ZERO).await.unwrap();
    let r = record(&p, "ext").await;
    let t = ttl(&r);
    assert!(t == 32 || t == 31, "TTL after extend {t}");
    assert_ne!(r.flag('c').unwrap(), cas0, "extend stores a new CAS");
    l.extend(Duration::from_secs(20), Duration::ZERO).await.unwrap();
    // An unlock with the first CAS would be refused (EX) and leave the record.
    l.unlock().await.unwrap();
    assert_eq!(record(&p, "ext").await.code, "EN", "unlock used the CAS of the last extend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_round_trip_per_acquire_per_refusal_and_per_release() {
    let direct = builder().await.build().unwrap();
    let proxy = proxy_to(&direct).await;
    let prefix = unique("rt") + ":";
    let p = MemcachedLockProvider::builder(proxy.addr().to_string())
        .key_prefix(&prefix)
        .build()
        .unwrap();
    // Warm up: the first call opens the connection (and asks `stats` once).
    p.try_lock(&cfg("warm", 60_000, 0)).await.unwrap().unwrap().unlock().await.unwrap();
    for i in 0..5 {
        let c = cfg(&format!("rt{i}"), 60_000, 0);
        let r0 = proxy.round_trips();
        let l = p.try_lock(&c).await.unwrap().unwrap();
        let r1 = proxy.round_trips();
        assert!(p.try_lock(&c).await.unwrap().is_none());
        let r2 = proxy.round_trips();
        l.unlock().await.unwrap();
        let r3 = proxy.round_trips();
        assert_eq!((r1 - r0, r2 - r1, r3 - r2), (1, 1, 1), "acquire, refusal, release");
    }
    // An unlock that keeps at least is one round trip too.
    let c = cfg("least", 60_000, 30_000);
    let l = p.try_lock(&c).await.unwrap().unwrap();
    let r0 = proxy.round_trips();
    l.unlock().await.unwrap();
    assert_eq!(proxy.round_trips() - r0, 1);
    assert_eq!(proxy.connections(), 1, "one connection, reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_twenty_names_is_one_round_trip_on_one_connection_and_answers_per_name() {
    let direct = builder().await.build().unwrap();
    let proxy = proxy_to(&direct).await;
    let prefix = unique("batch") + ":";
    let p = MemcachedLockProvider::builder(proxy.addr().to_string())
        .key_prefix(&prefix)
        .build()
        .unwrap();
    p.try_lock(&cfg("warm", 60_000, 0)).await.unwrap().unwrap().unlock().await.unwrap();
    let held = p.try_lock(&cfg("b7", 60_000, 0)).await.unwrap().unwrap();
    let configs: Vec<LockConfig> = (0..20).map(|i| cfg(&format!("b{i}"), 60_000, 0)).collect();
    let r0 = proxy.round_trips();
    let answers = p.try_lock_many(&configs, shedlock::BatchOptions::new()).await.unwrap();
    assert_eq!(proxy.round_trips() - r0, 1, "one pipeline");
    assert_eq!(proxy.connections(), 1, "on the one connection");
    for (i, a) in answers.into_iter().enumerate() {
        match (i, a.unwrap()) {
            (7, None) => {}
            (7, Some(_)) => panic!("b7 is held elsewhere but was granted"),
            (_, Some(l)) => l.unlock().await.unwrap(),
            (i, None) => panic!("b{i} is free but was refused"),
        }
    }
    held.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_cut_mid_call_fails_that_call_with_unavailable_then_the_next_recovers() {
    let direct = builder().await.build().unwrap();
    let proxy = proxy_to(&direct).await;
    let p = MemcachedLockProvider::builder(proxy.addr().to_string())
        .key_prefix(unique("cut") + ":")
        .build()
        .unwrap();
    p.try_lock(&cfg("warm", 60_000, 0)).await.unwrap().unwrap().unlock().await.unwrap();
    let before = proxy.connections();
    proxy.set_delay(Duration::from_millis(300));
    let call = {
        let p = p.clone();
        tokio::spawn(async move { p.try_lock(&cfg("x", 60_000, 0)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.cut_all();
    let err = call.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(err.is_retryable());
    proxy.set_delay(Duration::ZERO);
    // The request never reached the server (it was held in the proxy): the name is free.
    let l = p.try_lock(&cfg("x", 60_000, 0)).await.unwrap().expect("recovered, and free");
    l.unlock().await.unwrap();
    assert!(proxy.connections() > before, "a fresh connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_closed_underneath_is_replaced_before_use() {
    let direct = builder().await.build().unwrap();
    let proxy = proxy_to(&direct).await;
    let p = MemcachedLockProvider::builder(proxy.addr().to_string())
        .key_prefix(unique("idle") + ":")
        .build()
        .unwrap();
    p.try_lock(&cfg("warm", 60_000, 0)).await.unwrap().unwrap().unlock().await.unwrap();
    proxy.cut_all();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let l = p.try_lock(&cfg("y", 60_000, 0)).await.unwrap().expect("a fresh connection, no error");
    l.unlock().await.unwrap();
    assert_eq!(proxy.connections(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_call_gives_timeout_and_its_connection_is_never_reused() {
    let direct = builder().await.build().unwrap();
    let proxy = proxy_to(&direct).await;
    let p = MemcachedLockProvider::builder(proxy.addr().to_string())
        .key_prefix(unique("slow") + ":")
        .operation_timeout(Some(Duration::from_millis(200)))
        .build()
        .unwrap();
    p.try_lock(&cfg("warm", 60_000, 0)).await.unwrap().unwrap().unlock().await.unwrap();
    proxy.set_delay(Duration::from_millis(400));
    let started = std::time::Instant::now();
    match p.try_lock(&cfg("slow", 60_000, 0)).await {
        Err(Error::Timeout { operation, after }) => {
            assert_eq!((operation, after), ("try_lock", Duration::from_millis(200)));
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(1));
    proxy.set_delay(Duration::ZERO);
    // The late reply of the timed-out call ("HD c…") must not be read as the answer to the next
    // request: that connection was dropped. The timed-out acquire did take the lock.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let n = proxy.connections();
    assert!(
        p.try_lock(&cfg("slow", 60_000, 0)).await.unwrap().is_none(),
        "held by the timed-out call"
    );
    let l = p.try_lock(&cfg("other", 60_000, 0)).await.unwrap().expect("free");
    l.unlock().await.unwrap();
    assert_eq!(proxy.connections(), n + 1, "one fresh connection replaced the dropped one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durations_over_30_days_are_refused_before_sending_and_30_days_stay_relative() {
    let direct = builder().await.build().unwrap();
    let proxy = proxy_to(&direct).await;
    let p = MemcachedLockProvider::builder(proxy.addr().to_string())
        .key_prefix(unique("long") + ":")
        .build()
        .unwrap();
    p.try_lock(&cfg("warm", 60_000, 0)).await.unwrap().unwrap().unlock().await.unwrap();
    let too_long =
        LockConfig::new("month", MAX_LOCK_DURATION + Duration::from_millis(1), Duration::ZERO)
            .unwrap();
    let r0 = proxy.round_trips();
    match p.try_lock(&too_long).await {
        Err(Error::Unsupported { backend: "memcached", operation }) => {
            assert!(operation.contains("30 days"), "{operation}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    assert_eq!(proxy.round_trips(), r0, "nothing sent");

    // The longest accepted: TTL exactly 30 days, still read as relative (the record exists).
    let longest = LockConfig::new("month", MAX_LOCK_DURATION, Duration::ZERO).unwrap();
    let mut l = p.try_lock(&longest).await.unwrap().expect("30 days less 2 s");
    let t = ttl(&record(&p, "month").await);
    assert!(t == 2_592_000 || t == 2_591_999, "TTL {t}");
    // An extend beyond it is refused the same way and leaves the lock as it was.
    let err = l.extend(MAX_LOCK_DURATION + Duration::from_secs(1), Duration::ZERO).await;
    assert!(matches!(err, Err(Error::Unsupported { .. })), "{err:?}");
    assert!(!l.is_lost());
    l.extend(Duration::from_secs(10), Duration::ZERO).await.unwrap();
    l.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_server_restart_an_old_lock_never_touches_a_new_record_with_the_same_cas() {
    // A private server: restarting the shared one would disturb the other tests.
    let service = tokio::task::spawn_blocking(|| {
        Service::start(Backend::Memcached, &LaunchOptions::new().ignore_env(true))
    })
    .await
    .unwrap()
    .expect("a private memcached");
    let addr = service.url().trim_start_matches("memcache://").trim_end_matches('/').to_owned();
    let a = MemcachedLockProvider::builder(&addr).build().unwrap();
    let b = MemcachedLockProvider::builder(&addr).build().unwrap();
    let c = named("job", &secs(60, 0));
    let mut r = RawConnection::connect(&addr).await.unwrap();
    for _ in 0..3 {
        r.request(b"ms before 1 T60\r\nx\r\n").await.unwrap();
    }
    let mut old = a.try_lock(&c).await.unwrap().unwrap();
    let old_cas: u64 = record(&a, "job").await.flag('c').unwrap().parse().unwrap();

    let service = tokio::task::spawn_blocking(move || service.restart().map(|()| service))
        .await
        .unwrap()
        .unwrap();
    // memcached forgot everything, and its CAS counter starts again from 1: store other items
    // until the next CAS is the old lock's, then let `b` take the name with exactly that CAS.
    let mut r = RawConnection::connect(&addr).await.unwrap();
    let mut last = 0;
    while last + 1 < old_cas {
        let reply = r.request(b"ms filler 1 T60 c\r\nx\r\n").await.unwrap();
        last = reply.flag('c').unwrap().parse().unwrap();
    }
    let new = b.try_lock(&c).await.unwrap().expect("the restart lost the old record");
    let before = record(&b, "job").await;
    assert_eq!(
        before.flag('c').unwrap().parse::<u64>().unwrap(),
        old_cas,
        "same CAS as the old lock"
    );

    // The old lock's extend and unlock reach another server process: refused / no-op, even
    // though the CAS would match.
    let err = old.extend(Duration::from_secs(60), Duration::ZERO).await;
    assert!(matches!(err, Err(Error::LockLost { .. }) | Err(Error::Unavailable { .. })), "{err:?}");
    if matches!(err, Err(Error::Unavailable { .. })) {
        // The first call found `a`'s pre-restart connection dead; the next one is fresh.
        let err = old.extend(Duration::from_secs(60), Duration::ZERO).await;
        assert!(matches!(err, Err(Error::LockLost { .. })), "{err:?}");
    }
    old.unlock().await.unwrap();
    let after = record(&b, "job").await;
    assert_eq!((after.code.as_str(), after.flag('c')), ("VA", before.flag('c')), "untouched");
    assert!(a.try_lock(&c).await.unwrap().is_none(), "the new holder keeps it");
    new.unlock().await.unwrap();
    drop(service);
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_and_the_message_says_why() {
    for (case, host, port, expected) in unreachable::cases(11211) {
        let p = MemcachedLockProvider::builder(format!("{host}:{port}")).build().unwrap();
        unreachable::assert_named(&p, case, expected).await;
    }
}

/// Tenants sharing a server: prefix `app` with name `2x` and prefix `app2` with name `x` were
/// one key (`app2x`) before prefixes were delimited. Each pair is held at once, and releasing
/// one leaves the other held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefixes_app_and_app2_lock_names_2x_and_x_independently() {
    let (addr, run) = (address().await, unique("tenant"));
    let tenant = |prefix: String| {
        let node = || MemcachedLockProvider::builder(&addr).key_prefix(&prefix).build().unwrap();
        (node(), node())
    };
    // `app` + `2x` against `app2` + `x`; and nested prefixes with a ':' in the names.
    let cases = [
        (format!("{run}app"), "2x", format!("{run}app2"), "x"),
        (format!("{run}:app:"), "2:x", format!("{run}:app:2:"), "x"),
    ];
    for (prefix_a, name_a, prefix_b, name_b) in cases {
        let ((a, a2), (b, b2)) = (tenant(prefix_a.clone()), tenant(prefix_b.clone()));
        assert_ne!(a.key(name_a).unwrap(), b.key(name_b).unwrap());
        let la = a.try_lock(&cfg(name_a, 60_000, 0)).await.unwrap().expect("a's lock is free");
        let lb = b.try_lock(&cfg(name_b, 60_000, 0)).await.unwrap().expect("b's lock is free too");
        // Each is held for its own tenant's other nodes.
        assert!(a2.try_lock(&cfg(name_a, 60_000, 0)).await.unwrap().is_none());
        assert!(b2.try_lock(&cfg(name_b, 60_000, 0)).await.unwrap().is_none());
        // Releasing a's does not free b's.
        la.unlock().await.unwrap();
        assert!(b2.try_lock(&cfg(name_b, 60_000, 0)).await.unwrap().is_none(), "{prefix_b}");
        let again = a2.try_lock(&cfg(name_a, 60_000, 0)).await.unwrap().expect("a's is free");
        lb.unlock().await.unwrap();
        again.unlock().await.unwrap();
        assert_eq!(record(&b, name_b).await.code, "EN");
    }
}

/// The default prefix keeps the keys it always had: `shedlock:` and the name, for a name
/// without ':'.
#[test]
fn the_default_prefix_and_names_without_a_colon_keep_their_keys() {
    let p = MemcachedLockProvider::builder("127.0.0.1:11211").build().unwrap();
    assert_eq!(p.key_prefix(), b"shedlock:");
    let key = p.key("nightly-report").unwrap();
    // base64("shedlock:nightly-report")
    assert_eq!(key, "c2hlZGxvY2s6bmlnaHRseS1yZXBvcnQ=");
}

//! shedlock-mongodb against a real MongoDB wire-protocol server (from the launcher, or
//! `SHEDLOCK_MONGODB_URL`): what the conformance catalogue does not cover — the stored
//! documents, server time against a planted live lock, round trips per path, setup errors, an
//! unreachable server and credentials kept out of errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::{ClockBuilder as _, ProviderBuilder as _};
use std::{
    future::Future,
    net::{SocketAddr, ToSocketAddrs},
    sync::Arc,
    time::{Duration, SystemTime},
};

use mongodb::{
    Client, Collection, Database,
    bson::{Bson, DateTime, Document, doc},
    options::{ClientOptions, WriteConcern},
};
use shedlock::{Error, LockProvider, SharedClock};
use shedlock_mongodb::{MongoLockProvider, TimeSource};
use shedlock_test_support::{Backend, FaultProxy, cfg, host_port, unique};
use tokio::time::Instant;

async fn url() -> String {
    shedlock_test_support::url(Backend::MongoDb, "MongoDB").await
}

fn addr_of(url: &str) -> SocketAddr {
    host_port(url).to_socket_addrs().unwrap().next().unwrap()
}

async fn client_at(url: &str) -> Client {
    let mut o = ClientOptions::parse(url).await.unwrap();
    o.server_selection_timeout = Some(Duration::from_secs(2));
    // The server monitors' own traffic (a heartbeat every 10 s by default) stays out of the
    // round-trip windows below.
    o.heartbeat_freq = Some(Duration::from_secs(60));
    Client::with_options(o).unwrap()
}

async fn database() -> Database {
    client_at(&url().await).await.database("shedlock_tests")
}

fn provider(db: Database, collection: &str, time: TimeSource) -> MongoLockProvider {
    MongoLockProvider::builder(db).collection(collection).time_source(time).build().unwrap()
}

/// A clock an hour off: a server-time provider must not read it.
#[derive(Debug)]
struct Skewed;
impl shedlock::Clock for Skewed {
    fn now(&self) -> SystemTime {
        SystemTime::now() + Duration::from_secs(3600)
    }
}

async fn doc_of(c: &Collection<Document>, name: &str) -> Option<Document> {
    c.find_one(doc! { "_id": name }).await.unwrap()
}

#[tokio::test]
async fn a_live_lock_planted_thirty_seconds_ahead_is_held_in_both_time_modes() {
    // The regression guard for servers that compare `$$NOW` wrongly with stored dates: there,
    // a plain `{$lte: ["$lockUntil", "$$NOW"]}` frees this lock at once.
    let db = database().await;
    let coll = unique("planted");
    for time in [TimeSource::Server, TimeSource::Client] {
        let p = provider(db.clone(), &coll, time);
        let name = format!("job-{time:?}");
        let now = SystemTime::now();
        let live = doc! {
            "lockUntil": DateTime::from_system_time(now + Duration::from_secs(30)),
            "lockedAt": DateTime::from_system_time(now),
            "lockedBy": "elsewhere/1",
            "owner": 7_i64,
            "token": 1_i64,
        };
        p.collection().replace_one(doc! { "_id": &name }, live).upsert(true).await.unwrap();
        assert!(p.try_lock(&cfg(&name, 60_000, 0)).await.unwrap().is_none(), "{time:?}");
        let stored = doc_of(p.collection(), &name).await.unwrap();
        assert_eq!(stored.get_i64("owner").unwrap(), 7, "{time:?}: the live lock was overwritten");

        // The same document expired a second ago is free.
        let expired = doc! {
            "lockUntil": DateTime::from_system_time(now - Duration::from_secs(1)),
            "lockedAt": DateTime::from_system_time(now - Duration::from_secs(31)),
            "lockedBy": "elsewhere/1",
            "owner": 7_i64,
            "token": 1_i64,
        };
        p.collection().replace_one(doc! { "_id": &name }, expired).await.unwrap();
        let lock = p.try_lock(&cfg(&name, 60_000, 0)).await.unwrap().expect("expired: free");
        assert!(lock.fencing_token().unwrap() > 1);
        lock.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn server_time_ignores_an_instance_clock_an_hour_ahead() {
    let db = database().await;
    let coll = unique("skew");
    let skewed: SharedClock = Arc::new(Skewed);
    let ahead =
        MongoLockProvider::builder(db.clone()).collection(&coll).clock(skewed).build().unwrap();
    let other = provider(db, &coll, TimeSource::Server);
    let lock = other.try_lock(&cfg("job", 60_000, 0)).await.unwrap().unwrap();
    // With its clock an hour ahead, a client-time instance would see this lock as expired.
    assert!(ahead.try_lock(&cfg("job", 60_000, 0)).await.unwrap().is_none());
    let stored = doc_of(other.collection(), "job").await.unwrap();
    let until = stored.get_datetime("lockUntil").unwrap().to_system_time();
    let off = until.duration_since(SystemTime::now()).unwrap_or_default();
    assert!(off < Duration::from_secs(61), "lockUntil {off:?} ahead: not the server's time");
    lock.unlock().await.unwrap();
    let l = ahead.try_lock(&cfg("job", 1_000, 0)).await.unwrap().expect("free after unlock");
    let stored = doc_of(other.collection(), "job").await.unwrap();
    let until = stored.get_datetime("lockUntil").unwrap().to_system_time();
    assert!(until < SystemTime::now() + Duration::from_secs(2), "the skewed clock was read");
    l.unlock().await.unwrap();
}

#[tokio::test]
async fn documents_hold_the_documented_fields_and_unlock_deletes_or_keeps_at_least() {
    for time in [TimeSource::Server, TimeSource::Client] {
        let db = database().await;
        let coll = unique("fields");
        let p = MongoLockProvider::builder(db)
            .collection(&coll)
            .time_source(time)
            .locked_by("node-a/42")
            .build()
            .unwrap();
        let lock = p.try_lock(&cfg("job", 45_000, 0)).await.unwrap().unwrap();
        let d = doc_of(p.collection(), "job").await.unwrap();
        let until = d.get_datetime("lockUntil").unwrap().timestamp_millis();
        let at = d.get_datetime("lockedAt").unwrap().timestamp_millis();
        assert_eq!(until - at, 45_000, "{time:?}: {d}");
        assert_eq!(d.get_str("lockedBy").unwrap(), "node-a/42");
        assert!(matches!(d.get("owner"), Some(Bson::Int64(_))), "{d}");
        assert_eq!(d.get_i64("token").unwrap() as u64, lock.fencing_token().unwrap());
        // lock_at_least_for 0 has passed: the document goes.
        lock.unlock().await.unwrap();
        assert!(doc_of(p.collection(), "job").await.is_none(), "{time:?}: not deleted");

        // Within lock_at_least_for the document stays, held until lockedAt + at-least.
        let lock = p.try_lock(&cfg("job", 45_000, 30_000)).await.unwrap().unwrap();
        lock.unlock().await.unwrap();
        let d = doc_of(p.collection(), "job").await.unwrap();
        let until = d.get_datetime("lockUntil").unwrap().timestamp_millis();
        let at = d.get_datetime("lockedAt").unwrap().timestamp_millis();
        assert_eq!(until - at, 30_000, "{time:?}: {d}");
        assert!(p.try_lock(&cfg("job", 45_000, 0)).await.unwrap().is_none());
    }
}

#[tokio::test]
async fn a_missing_collection_is_created_by_the_first_lock_and_create_collection_is_idempotent() {
    let db = database().await;
    let coll = unique("created");
    let p = provider(db.clone(), &coll, TimeSource::Server);
    assert!(!db.list_collection_names().await.unwrap().contains(&coll));
    let l = p.try_lock(&cfg("job", 60_000, 0)).await.unwrap().unwrap();
    assert!(db.list_collection_names().await.unwrap().contains(&coll));
    l.unlock().await.unwrap();
    p.create_collection().await.unwrap();
    p.create_collection().await.unwrap();
    let fresh = provider(db.clone(), &unique("precreated"), TimeSource::Server);
    fresh.create_collection().await.unwrap();
    fresh.create_collection().await.unwrap();
    assert!(fresh.try_lock(&cfg("job", 60_000, 0)).await.unwrap().is_some());
}

#[tokio::test]
async fn bad_setup_is_refused_by_build_with_a_setup_error() {
    let db = database().await;
    let long = "c".repeat(250);
    for bad in ["", "a$b", "a\0b", "system.locks", long.as_str()] {
        let r = MongoLockProvider::builder(db.clone()).collection(bad).build();
        assert!(matches!(r, Err(Error::Setup { .. })), "{bad:?}: {r:?}");
    }
    let r = MongoLockProvider::builder(db.clone()).write_concern(WriteConcern::nodes(0)).build();
    assert!(matches!(r, Err(Error::Setup { .. })), "{r:?}");
    let r = MongoLockProvider::builder(db.clone()).locked_by("x".repeat(256)).build();
    assert!(matches!(r, Err(Error::Setup { .. })), "{r:?}");
    // w: 1 is accepted.
    let p = MongoLockProvider::builder(db)
        .collection(unique("w1"))
        .write_concern(WriteConcern::nodes(1))
        .build()
        .unwrap();
    assert!(p.try_lock(&cfg("job", 60_000, 0)).await.unwrap().is_some());
}

#[tokio::test]
async fn an_unreachable_server_is_a_typed_error_saying_why_in_bounded_time_without_the_password() {
    // A port nothing listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let secret = "s3cret-Pa55word";
    let url = format!(
        "mongodb://locker:{secret}@127.0.0.1:{port}/?directConnection=true&serverSelectionTimeoutMS=500"
    );
    let client = Client::with_uri_str(&url).await.unwrap();
    let p = MongoLockProvider::builder(client.database("app")).build().unwrap();
    assert!(!format!("{p:?}").contains(secret));
    let started = Instant::now();
    let e = p.try_lock(&cfg("job", 60_000, 0)).await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
    assert!(e.is_retryable());
    assert!(took < Duration::from_secs(5), "took {took:?}");
    for text in [format!("{e}"), format!("{e:?}"), format!("{:?}", std::error::Error::source(&e))] {
        assert!(!text.contains(secret), "the password leaked: {text}");
    }
    // The message says why, for a closed port and for a host that does not resolve.
    {
        use shedlock_test_support::unreachable::{
            REFUSED, UNRESOLVABLE_HOST, UNRESOLVED, assert_named,
        };
        assert_named(&p, "a closed port", REFUSED).await;
        let client = Client::with_uri_str(format!(
            "mongodb://{UNRESOLVABLE_HOST}:27017/?directConnection=true&serverSelectionTimeoutMS=500"
        ))
        .await
        .unwrap();
        let unresolved = MongoLockProvider::builder(client.database("app")).build().unwrap();
        assert_named(&unresolved, "an unresolvable host", UNRESOLVED).await;
    }
    // The provider's own time limit bounds a call when the driver would wait longer.
    let client = Client::with_uri_str(format!(
        "mongodb://locker:{secret}@127.0.0.1:{port}/?directConnection=true"
    ))
    .await
    .unwrap();
    let p = MongoLockProvider::builder(client.database("app"))
        .operation_timeout(Some(Duration::from_millis(300)))
        .build()
        .unwrap();
    let started = Instant::now();
    let e = p.try_lock(&cfg("job", 60_000, 0)).await.unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(!format!("{e:?}").contains(secret));
}

async fn turnarounds<T>(proxy: &FaultProxy, f: impl Future<Output = T>) -> (T, u64) {
    let before = proxy.round_trips();
    let r = f.await;
    (r, proxy.round_trips() - before)
}

#[tokio::test]
async fn one_round_trip_per_acquire_unlock_and_extend_on_every_path() {
    let url = url().await;
    let proxy = FaultProxy::start(addr_of(&url)).await.unwrap();
    let via = shedlock_test_support::url_via(&url, proxy.addr());
    let db = client_at(&via).await.database("shedlock_tests");
    let other_db = database().await;
    for time in [TimeSource::Server, TimeSource::Client] {
        let coll = unique("rt");
        let p = provider(db.clone(), &coll, time);
        let other = provider(other_db.clone(), &coll, time);
        // Warm up: the pool opens its connection (handshake) on the first call.
        p.try_lock(&cfg("warm", 60_000, 0)).await.unwrap().unwrap().unlock().await.unwrap();

        let mut seen = Vec::new();
        let (l, n) = turnarounds(&proxy, p.try_lock(&cfg("a", 60_000, 0))).await;
        let mut l = l.unwrap().unwrap();
        seen.push(("acquire a fresh name", n));
        let (r, n) = turnarounds(&proxy, l.extend(Duration::from_secs(60), Duration::ZERO)).await;
        r.unwrap();
        seen.push(("extend", n));
        let (r, n) = turnarounds(&proxy, l.unlock()).await;
        r.unwrap();
        seen.push(("unlock (delete)", n));
        let (r, n) = turnarounds(&proxy, p.try_lock(&cfg("a", 60_000, 30_000))).await;
        let l = r.unwrap().unwrap();
        seen.push(("acquire after unlock", n));
        let (r, n) = turnarounds(&proxy, l.unlock()).await;
        r.unwrap();
        seen.push(("unlock within at-least (update)", n));
        let (r, n) = turnarounds(&proxy, p.try_lock(&cfg("a", 60_000, 0))).await;
        assert!(r.unwrap().is_none());
        seen.push(("acquire held (by at-least)", n));
        let held = other.try_lock(&cfg("b", 60_000, 0)).await.unwrap().unwrap();
        let (r, n) = turnarounds(&proxy, p.try_lock(&cfg("b", 60_000, 0))).await;
        assert!(r.unwrap().is_none());
        seen.push(("acquire held elsewhere", n));
        drop(held);
        let short = other.try_lock(&cfg("c", 50, 0)).await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (r, n) = turnarounds(&proxy, p.try_lock(&cfg("c", 60_000, 0))).await;
        assert!(r.unwrap().is_some());
        seen.push(("acquire over an expired lock", n));
        drop(short);
        for (path, n) in &seen {
            assert_eq!(*n, 1, "{time:?}: {path}: {n} round trips ({seen:?})");
        }
    }
}

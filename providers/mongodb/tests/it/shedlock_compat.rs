//! The ShedLock-compatible mode against the MongoDB-protocol server: ShedLock's documents, a
//! Java ShedLock node played by its exact operations, and a mixed fleet of both kinds of nodes
//! contending on the same names with the conformance kit's history checker watching.
//!
//! The Java node issues the operations of ShedLock's `MongoLockProvider`, times from the JVM's
//! clock truncated to milliseconds (`ClockProvider.now()`):
//! - lock: `findOneAndUpdate({_id: name, lockUntil: {$lte: now}}, {$set: {lockUntil: createdAt +
//!   lockAtMostFor, lockedAt: now, lockedBy: hostname}}, upsert)`; a duplicate-key error (11000)
//!   means "held";
//! - unlock: `findOneAndUpdate({_id: name}, {$set: {lockUntil: max(now, createdAt +
//!   lockAtLeastFor)}})`, by name only (ShedLock's Mongo unlock is not owner-checked).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use mongodb::{
    Collection,
    bson::{Bson, DateTime, Document, doc},
    error::{ErrorKind, WriteFailure},
};
use shedlock::{LockConfig, LockProvider};
use shedlock_mongodb::MongoLockProvider;
use shedlock_test_support::{
    Backend, cfg,
    fleet::{self, Fleet, JavaNode as _, Node},
    unique,
};

async fn collection_on_new_client(name: &str) -> Collection<Document> {
    let url = shedlock_test_support::url(Backend::MongoDb, "MongoDB").await;
    common::client(&url).await.unwrap().database("shedlock_compat").collection(name)
}

async fn compat(collection: &str) -> MongoLockProvider {
    let url = shedlock_test_support::url(Backend::MongoDb, "MongoDB").await;
    let db = common::client(&url).await.unwrap().database("shedlock_compat");
    MongoLockProvider::builder(db).collection(collection).shedlock_compatible().build().unwrap()
}

/// `ClockProvider.now()`: the JVM's clock, truncated to milliseconds.
fn jvm_now() -> SystemTime {
    DateTime::from_system_time(SystemTime::now()).to_system_time()
}

/// A Java ShedLock node (one JVM host: its `lockedBy`), on its own client.
struct JavaNode {
    collection: Collection<Document>,
    host: String,
}

/// What a Java acquisition remembers for its unlock.
struct JavaLock {
    name: String,
    created_at: SystemTime,
    at_most: Duration,
    at_least: Duration,
}

impl JavaNode {
    async fn new(collection: &str, host: &str) -> Self {
        Self { collection: collection_on_new_client(collection).await, host: host.to_owned() }
    }
}

#[async_trait::async_trait]
impl fleet::JavaNode for JavaNode {
    type Held = JavaLock;
    type Released = bool;

    async fn lock(&self, c: &LockConfig) -> Option<JavaLock> {
        let created_at = jvm_now();
        let now = DateTime::from_system_time(jvm_now());
        let r = self
            .collection
            .find_one_and_update(
                doc! { "_id": c.name(), "lockUntil": { "$lte": now } },
                doc! { "$set": {
                    "lockUntil": DateTime::from_system_time(created_at + c.lock_at_most_for()),
                    "lockedAt": now,
                    "lockedBy": &self.host,
                } },
            )
            .upsert(true)
            .await;
        match r {
            Ok(_) => Some(JavaLock {
                name: c.name().to_owned(),
                created_at,
                at_most: c.lock_at_most_for(),
                at_least: c.lock_at_least_for(),
            }),
            // DuplicateKey: the upsert met a live document.
            Err(e)
                if matches!(e.kind.as_ref(), ErrorKind::Command(c) if c.code == 11000)
                    || matches!(e.kind.as_ref(),
                    ErrorKind::Write(WriteFailure::WriteError(w)) if w.code == 11000) =>
            {
                None
            }
            Err(e) => panic!("Java lock: {e}"),
        }
    }

    /// Unlock by name; returns whether a document matched.
    async fn unlock(&self, l: &JavaLock) -> bool {
        let unlock_time = (l.created_at + l.at_least).max(jvm_now());
        self.collection
            .find_one_and_update(
                doc! { "_id": &l.name },
                doc! { "$set": { "lockUntil": DateTime::from_system_time(unlock_time) } },
            )
            .await
            .unwrap()
            .is_some()
    }

    /// ShedLock's Mongo unlock is by name only: it releases whoever holds the name.
    fn unchecked_unlock_until(&self, l: &JavaLock) -> Option<SystemTime> {
        Some(l.created_at + l.at_most)
    }
}

#[tokio::test]
async fn documents_are_shedlocks_with_the_owner_in_locked_by_and_no_token() {
    let coll = unique("c");
    let p = compat(&coll).await;
    assert!(!p.capabilities().fencing, "no field for a token, so no fencing");
    assert!(p.capabilities().owner_checked && p.capabilities().server_time);
    let lock = p.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free");
    assert_eq!(lock.fencing_token(), None);
    let d = p.collection().find_one(doc! { "_id": "job" }).await.unwrap().unwrap();
    let mut keys: Vec<&str> = d.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["_id", "lockUntil", "lockedAt", "lockedBy"], "{d}");
    let (until, at) = (d.get_datetime("lockUntil").unwrap(), d.get_datetime("lockedAt").unwrap());
    assert_eq!(until.timestamp_millis() - at.timestamp_millis(), 10_000);
    let by = d.get_str("lockedBy").unwrap();
    fleet::assert_acquisition_locked_by(by);
    let other = compat(&coll).await;
    assert!(other.try_lock(&cfg("job", 10_000, 0)).await.unwrap().is_none(), "held");
    lock.unlock().await.unwrap();
    let again = other.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free after unlock");
    let d2 = p.collection().find_one(doc! { "_id": "job" }).await.unwrap().unwrap();
    assert_ne!(d2.get_str("lockedBy").unwrap(), by, "every acquisition has its own lockedBy");
    again.unlock().await.unwrap();
}

#[tokio::test]
async fn each_kind_honours_the_others_lock_and_lock_at_least_for() {
    let coll = unique("c");
    let ours = compat(&coll).await;
    let java = JavaNode::new(&coll, "java-host").await;
    let l = java.lock(&cfg("java", 10_000, 0)).await.expect("free");
    assert!(ours.try_lock(&cfg("java", 10_000, 0)).await.unwrap().is_none(), "held by Java");
    let d = ours.collection().find_one(doc! { "_id": "java" }).await.unwrap().unwrap();
    assert_eq!(d.get("lockedBy"), Some(&Bson::String("java-host".into())));
    assert!(java.unlock(&l).await);
    let mine = ours.try_lock(&cfg("java", 10_000, 0)).await.unwrap().expect("Java released");
    assert!(java.lock(&cfg("java", 10_000, 0)).await.is_none(), "held by us");
    mine.unlock().await.unwrap();
    let l = java.lock(&cfg("java", 10_000, 0)).await.expect("we released");
    java.unlock(&l).await;
    // At-least, both ways: released at once, held 400 ms from the acquisition (BSON dates are
    // milliseconds).
    fleet::lock_at_least_for_binds_both_kinds(&ours, &java, |&matched| matched).await;
}

#[tokio::test]
async fn our_stale_holder_changes_nothing_but_a_stale_java_unlock_releases_any_holder() {
    let coll = unique("c");
    let ours = compat(&coll).await;
    let java = JavaNode::new(&coll, "java-host").await;
    // Our lock expires; Java takes over; our stale extend and unlock change nothing.
    let stored =
        async |name: &str| ours.collection().find_one(doc! { "_id": name }).await.unwrap().unwrap();
    fleet::our_stale_holder_changes_nothing(&ours, &java, "a", stored, |&matched| matched).await;
    // A Java lock expires; we take over; ShedLock's stale unlock (by name) releases our lock:
    // the hazard the README states, pinned here.
    fleet::a_stale_java_unlock_releases_any_holder(&ours, &java, "b", |&matched| matched).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_fleet_of_java_and_rust_nodes_never_has_two_holders() {
    let coll = unique("c");
    let mut nodes = Vec::new();
    for _ in 0..3 {
        let p: Arc<dyn LockProvider> = Arc::new(compat(&coll).await);
        nodes.push(("rust", Node::Ours(p)));
    }
    for host in ["java-host-1", "java-host-2", "java-host-3"] {
        nodes.push(("java", Node::Java(JavaNode::new(&coll, host).await)));
    }
    // SecantusDB answers in milliseconds, so fewer acquisitions fit than on SQL.
    Fleet::new().run(nodes, Duration::from_secs(4), 10).await;
}

#[tokio::test]
async fn the_native_mode_honours_a_compatible_document_and_takes_it_once_expired() {
    let coll = unique("c");
    let ours = compat(&coll).await;
    let url = shedlock_test_support::url(Backend::MongoDb, "MongoDB").await;
    let db = common::client(&url).await.unwrap().database("shedlock_compat");
    let native = MongoLockProvider::builder(db).collection(&coll).build().unwrap();
    let held = ours.try_lock(&cfg("m", 300, 0)).await.unwrap().expect("free");
    assert!(native.try_lock(&cfg("m", 10_000, 0)).await.unwrap().is_none(), "held by compat");
    tokio::time::sleep(Duration::from_millis(350)).await;
    let lock = native.try_lock(&cfg("m", 10_000, 0)).await.unwrap().expect("expired");
    assert!(lock.fencing_token().is_some_and(|t| t > 0), "a token once native");
    held.unlock().await.unwrap(); // the stale compatible holder changes nothing
    let other =
        MongoLockProvider::builder(common::client(&url).await.unwrap().database("shedlock_compat"))
            .collection(&coll)
            .build()
            .unwrap();
    assert!(other.try_lock(&cfg("m", 10_000, 0)).await.unwrap().is_none(), "still held");
    lock.unlock().await.unwrap();
}

#[tokio::test]
async fn a_java_nodes_lock_is_inspected_as_one_acquisition_and_released_only_as_seen() {
    use shedlock::ForceRelease;
    let coll = unique("c");
    let ours = compat(&coll).await;
    let java = JavaNode::new(&coll, "java-host").await;
    let c = cfg("j", 10_000, 0);
    let first = java.lock(&c).await.expect("free");
    let seen = ours.inspect("j").await.unwrap().expect("a record");
    assert!(seen.held, "{seen:?}");
    assert_eq!(seen.locked_by.as_deref(), Some("java-host"));
    assert!(seen.acquisition.starts_with("at:") && seen.acquisition.ends_with(":by:java-host"));
    assert_eq!(seen.fencing_token, None);
    // ShedLock's extend moves lockUntil only: the same acquisition.
    let extended = java
        .collection
        .update_one(
            doc! { "_id": "j", "lockedBy": "java-host", "lockUntil": { "$gt": DateTime::now() } },
            doc! { "$set": { "lockUntil": DateTime::from_system_time(jvm_now() + Duration::from_secs(20)) } },
        )
        .await
        .unwrap();
    assert_eq!(extended.matched_count, 1);
    let after_extend = ours.inspect("j").await.unwrap().expect("a record");
    assert_eq!(after_extend.acquisition, seen.acquisition);
    assert!(after_extend.lock_until > seen.lock_until);
    // The same host unlocks and locks again: same lockedBy, another acquisition.
    assert!(java.unlock(&first).await);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let _second = java.lock(&c).await.expect("free after unlock");
    let now = ours.inspect("j").await.unwrap().expect("a record");
    assert_ne!(now.acquisition, seen.acquisition, "a Java node's next acquisition");
    match ours.force_release(&seen).await.unwrap() {
        ForceRelease::Changed(Some(current)) => assert_eq!(current.acquisition, now.acquisition),
        other => panic!("a stale forced release gave {other:?}"),
    }
    assert!(ours.try_lock(&c).await.unwrap().is_none(), "the Java node still holds it");
    match ours.force_release(&now).await.unwrap() {
        ForceRelease::Released(r) => assert_eq!(r, now),
        other => panic!("{other:?}"),
    }
    let lock = ours.try_lock(&c).await.unwrap().expect("released");
    let mine = ours.inspect("j").await.unwrap().expect("a record");
    assert_eq!(mine.acquisition, format!("by:{}", mine.locked_by.as_deref().unwrap()));
    lock.unlock().await.unwrap();
}

#[tokio::test]
async fn the_native_mode_inspects_and_force_releases_a_compatible_document() {
    use shedlock::ForceRelease;
    let coll = unique("c");
    let ours = compat(&coll).await;
    let url = shedlock_test_support::url(Backend::MongoDb, "MongoDB").await;
    let db = common::client(&url).await.unwrap().database("shedlock_compat");
    let native = MongoLockProvider::builder(db).collection(&coll).build().unwrap();
    let held = ours.try_lock(&cfg("n", 10_000, 0)).await.unwrap().expect("free");
    // No owner in ShedLock's document: the native mode tells the acquisition by its lockedBy.
    let seen = native.inspect("n").await.unwrap().expect("a document");
    assert!(seen.held && seen.fencing_token.is_none(), "{seen:?}");
    assert_eq!(seen.acquisition, format!("by:{}", seen.locked_by.as_deref().unwrap()));
    assert_eq!(ours.inspect("n").await.unwrap().unwrap().acquisition, seen.acquisition);
    assert!(matches!(native.force_release(&seen).await.unwrap(), ForceRelease::Released(_)));
    let lock = native.try_lock(&cfg("n", 10_000, 0)).await.unwrap().expect("released");
    held.unlock().await.unwrap(); // the released compatible holder changes nothing
    let now = native.inspect("n").await.unwrap().expect("a document");
    assert!(now.held && now.fencing_token == lock.fencing_token() && now.acquisition.len() == 16);
    lock.unlock().await.unwrap();
}

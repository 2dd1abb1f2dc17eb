//! The ShedLock-compatible mode against the DynamoDB API server: ShedLock's items, a Java
//! ShedLock node played by its exact requests, and a mixed fleet of both kinds of nodes
//! contending on the same names with the conformance kit's history checker watching.
//!
//! The Java node sends the requests of ShedLock's `DynamoDBLockProvider` (SDK v2), times from
//! the JVM's clock in ShedLock's ISO form (`Utils.toIsoString`):
//! - lock: `UpdateItem` `set lockUntil = :lockUntil, lockedAt = :lockedAt, lockedBy =
//!   :lockedBy` if `lockUntil <= :lockedAt or attribute_not_exists(lockUntil)`; a failed
//!   condition means "held";
//! - unlock: `UpdateItem` `set lockUntil = :lockUntil` (`max(now, createdAt + lockAtLeastFor)`),
//!   with no condition (ShedLock's DynamoDB unlock is not owner-checked). It has no extend.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use shedlock::ProviderBuilder as _;

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, SystemTime},
};

use aws_sdk_dynamodb::{Client, types::AttributeValue};
use shedlock::{LockConfig, LockProvider, support::iso8601_millis};
use shedlock_dynamodb::{ATTR_ID, DynamoDbLockProvider};
use shedlock_test_support::{
    cfg,
    fleet::{self, Fleet, JavaNode as _, Node},
    unique,
};

async fn endpoint() -> String {
    common::service().await.unwrap().url().trim_end_matches('/').to_owned()
}

/// A fresh table and a compatible provider on it.
async fn fresh() -> (String, DynamoDbLockProvider) {
    let table = unique("t");
    let p = compat(&table).await;
    p.create_table().await.unwrap();
    (table, p)
}

async fn compat(table: &str) -> DynamoDbLockProvider {
    DynamoDbLockProvider::builder(common::client(&endpoint().await))
        .table(table)
        .operation_timeout(Some(Duration::from_secs(3)))
        .shedlock_compatible()
        .build()
        .unwrap()
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// A Java ShedLock node (one JVM host: its `lockedBy`), on its own client.
struct JavaNode {
    client: Client,
    table: String,
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
    async fn new(table: &str, host: &str) -> Self {
        Self {
            client: common::client(&endpoint().await),
            table: table.to_owned(),
            host: host.to_owned(),
        }
    }
}

#[async_trait::async_trait]
impl fleet::JavaNode for JavaNode {
    type Held = JavaLock;
    type Released = ();

    async fn lock(&self, c: &LockConfig) -> Option<JavaLock> {
        let created_at = SystemTime::now();
        let r = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(ATTR_ID, s(c.name()))
            .update_expression(
                "set lockUntil = :lockUntil, lockedAt = :lockedAt, lockedBy = :lockedBy",
            )
            .condition_expression("lockUntil <= :lockedAt or attribute_not_exists(lockUntil)")
            .set_expression_attribute_values(Some(HashMap::from([
                (":lockUntil".to_owned(), s(&iso8601_millis(created_at + c.lock_at_most_for()))),
                (":lockedAt".to_owned(), s(&iso8601_millis(SystemTime::now()))),
                (":lockedBy".to_owned(), s(&self.host)),
            ])))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew)
            .send()
            .await;
        match r {
            Ok(_) => Some(JavaLock {
                name: c.name().to_owned(),
                created_at,
                at_most: c.lock_at_most_for(),
                at_least: c.lock_at_least_for(),
            }),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                None
            }
            Err(e) => panic!("Java lock: {e:?}"),
        }
    }

    async fn unlock(&self, l: &JavaLock) {
        let unlock_time = (l.created_at + l.at_least).max(SystemTime::now());
        self.client
            .update_item()
            .table_name(&self.table)
            .key(ATTR_ID, s(&l.name))
            .update_expression("set lockUntil = :lockUntil")
            .expression_attribute_values(":lockUntil", s(&iso8601_millis(unlock_time)))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew)
            .send()
            .await
            .unwrap();
    }

    /// ShedLock's DynamoDB unlock has no condition: it releases whoever holds the name.
    fn unchecked_unlock_until(&self, l: &JavaLock) -> Option<SystemTime> {
        Some(l.created_at + l.at_most)
    }
}

async fn item(p: &DynamoDbLockProvider, name: &str) -> HashMap<String, AttributeValue> {
    let out = p
        .client()
        .get_item()
        .table_name(p.table())
        .key(ATTR_ID, s(name))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.item.unwrap_or_default()
}

#[tokio::test]
async fn items_are_shedlocks_strings_with_the_owner_in_locked_by_and_no_token() {
    let (_, p) = fresh().await;
    assert!(!p.capabilities().fencing, "no attribute for a token, so no fencing");
    assert!(p.capabilities().owner_checked && !p.capabilities().server_time);
    let lock = p.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free");
    assert_eq!(lock.fencing_token(), None);
    let i = item(&p, "job").await;
    let mut keys: Vec<&str> = i.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["_id", "lockUntil", "lockedAt", "lockedBy"], "{i:?}");
    let text = |k: &str| match &i[k] {
        AttributeValue::S(v) => v.clone(),
        other => panic!("{k} is not a string: {other:?}"),
    };
    let (until, at) = (text("lockUntil"), text("lockedAt"));
    for t in [&until, &at] {
        let b = t.as_bytes();
        assert!(b.len() == 24 && b[10] == b'T' && b[19] == b'.' && b[23] == b'Z', "{t}");
    }
    assert!(at < until, "ISO strings sort as the times do: {at} < {until}");
    fleet::assert_acquisition_locked_by(&text("lockedBy"));
    lock.unlock().await.unwrap();
    let released = item(&p, "job").await;
    assert!(!released.contains_key("lockUntil"), "a released lock has no lockUntil");
}

#[tokio::test]
async fn each_kind_honours_the_others_lock_and_lock_at_least_for() {
    let (table, ours) = fresh().await;
    let java = JavaNode::new(&table, "java-host").await;
    let l = java.lock(&cfg("java", 10_000, 0)).await.expect("free");
    assert!(ours.try_lock(&cfg("java", 10_000, 0)).await.unwrap().is_none(), "held by Java");
    java.unlock(&l).await;
    let mine = ours.try_lock(&cfg("java", 10_000, 0)).await.unwrap().expect("Java released");
    assert!(java.lock(&cfg("java", 10_000, 0)).await.is_none(), "held by us");
    mine.unlock().await.unwrap();
    let l = java.lock(&cfg("java", 10_000, 0)).await.expect("we released: no lockUntil");
    java.unlock(&l).await;
    // At-least, both ways: released at once, held 400 ms from the acquisition (the strings
    // keep milliseconds).
    fleet::lock_at_least_for_binds_both_kinds(&ours, &java, |()| true).await;
}

#[tokio::test]
async fn our_stale_holder_changes_nothing_but_a_stale_java_unlock_releases_any_holder() {
    let (table, ours) = fresh().await;
    let java = JavaNode::new(&table, "java-host").await;
    // Our lock expires; Java takes over; our stale extend and unlock change nothing.
    let stored = async |name: &str| item(&ours, name).await;
    fleet::our_stale_holder_changes_nothing(&ours, &java, "a", stored, |()| true).await;
    // A Java lock expires; we take over; ShedLock's stale unlock (no condition) releases our
    // lock: the hazard the README states, pinned here.
    fleet::a_stale_java_unlock_releases_any_holder(&ours, &java, "b", |()| true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_fleet_of_java_and_rust_nodes_never_has_two_holders() {
    let (table, first) = fresh().await;
    let mut nodes: Vec<(&'static str, Node<JavaNode>)> =
        vec![("rust", Node::Ours(Arc::new(first)))];
    for _ in 0..2 {
        let p: Arc<dyn LockProvider> = Arc::new(compat(&table).await);
        nodes.push(("rust", Node::Ours(p)));
    }
    for host in ["java-host-1", "java-host-2", "java-host-3"] {
        nodes.push(("java", Node::Java(JavaNode::new(&table, host).await)));
    }
    Fleet::new().run(nodes, Duration::from_secs(4), 10).await;
}

#[tokio::test]
async fn a_java_nodes_lock_is_inspected_as_one_acquisition_and_released_only_as_seen() {
    use shedlock::ForceRelease;
    let (table, ours) = fresh().await;
    let java = JavaNode::new(&table, "java-host").await;
    let c = cfg("j", 10_000, 0);
    let first = java.lock(&c).await.expect("free");
    let seen = ours.inspect("j").await.unwrap().expect("an item");
    assert!(seen.held, "{seen:?}");
    assert_eq!(seen.locked_by.as_deref(), Some("java-host"));
    assert!(seen.acquisition.starts_with("at:") && seen.acquisition.ends_with(":by:java-host"));
    assert_eq!(seen.fencing_token, None);
    let (at, until) = (seen.locked_at.unwrap(), seen.lock_until.unwrap());
    let stored = item(&ours, "j").await;
    assert_eq!(stored["lockedAt"], s(&iso8601_millis(at)), "the ISO time read back exactly");
    assert_eq!(stored["lockUntil"], s(&iso8601_millis(until)));
    // The same host unlocks and locks again: same lockedBy, another acquisition.
    java.unlock(&first).await;
    assert!(!ours.inspect("j").await.unwrap().unwrap().held, "unlocked by Java");
    tokio::time::sleep(Duration::from_millis(5)).await;
    let _second = java.lock(&c).await.expect("free after unlock");
    let now = ours.inspect("j").await.unwrap().expect("an item");
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
    assert!(item(&ours, "j").await.is_empty(), "the item is deleted");
    let lock = ours.try_lock(&c).await.unwrap().expect("released");
    let mine = ours.inspect("j").await.unwrap().expect("an item");
    assert_eq!(mine.acquisition, format!("by:{}", mine.locked_by.as_deref().unwrap()));
    lock.unlock().await.unwrap();
}

//! Provider-level tests against a real DynamoDB API server (dynalite from the launcher, or
//! `SHEDLOCK_DYNAMODB_URL`): the stored item, setup errors, credentials hygiene.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use shedlock::ProviderBuilder as _;

use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use common::{Records, client, provider};
use shedlock::{Error, LockProvider};
use shedlock_dynamodb::{
    ATTR_ACQUISITION_ID, ATTR_FENCING_TOKEN, ATTR_LOCK_UNTIL, ATTR_LOCKED_AT, ATTR_LOCKED_BY,
    DynamoDbError, DynamoDbLockProvider,
};
use shedlock_test_support::{aws, cfg, unique};

async fn endpoint() -> String {
    common::service().await.unwrap().url().trim_end_matches('/').to_owned()
}

/// A fresh table (names are unique per test) and a provider on it.
async fn fresh() -> (DynamoDbLockProvider, Records) {
    let url = endpoint().await;
    let table = unique("t");
    let p = provider(&url, &table);
    p.create_table().await.unwrap();
    (p, Records { client: client(&url), table, compat: false })
}

fn s(item: &std::collections::HashMap<String, AttributeValue>, k: &str) -> Option<String> {
    match item.get(k) {
        Some(AttributeValue::S(v)) => Some(v.clone()),
        _ => None,
    }
}

#[tokio::test]
async fn the_item_holds_epoch_millisecond_numbers_the_owner_and_the_fencing_token() {
    let (p, records) = fresh().await;
    let lock = p.try_lock(&cfg("job", 60_000, 0)).await.unwrap().expect("free");
    let item = records.item("job").await.unwrap().expect("an item");
    let until = records.number("job", ATTR_LOCK_UNTIL).await.unwrap().unwrap();
    let at = records.number("job", ATTR_LOCKED_AT).await.unwrap().unwrap();
    assert_eq!(until - at, 60_000, "lockUntil = lockedAt + lock_at_most_for, in ms");
    let now_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
            as i64;
    assert!((now_ms - at).abs() < 5_000, "lockedAt {at} is epoch ms (now {now_ms})");
    assert_eq!(s(&item, ATTR_ACQUISITION_ID).map(|a| a.len()), Some(16));
    assert!(s(&item, ATTR_LOCKED_BY).unwrap().ends_with(&format!("/{}", std::process::id())));
    let token = records.number("job", ATTR_FENCING_TOKEN).await.unwrap().unwrap();
    assert_eq!(Some(token as u64), lock.fencing_token());

    // Unlock removes the lease and the owner, keeps the counter.
    lock.unlock().await.unwrap();
    let item = records.item("job").await.unwrap().expect("the item stays");
    assert!(!item.contains_key(ATTR_LOCK_UNTIL) && !item.contains_key(ATTR_ACQUISITION_ID));
    let again = p.try_lock(&cfg("job", 60_000, 0)).await.unwrap().expect("free after unlock");
    assert_eq!(again.fencing_token(), Some(token as u64 + 1));
    again.unlock().await.unwrap();
}

#[tokio::test]
async fn an_early_unlock_keeps_the_lease_until_locked_at_plus_at_least() {
    let (p, records) = fresh().await;
    let lock = p.try_lock(&cfg("least", 60_000, 5_000)).await.unwrap().unwrap();
    lock.unlock().await.unwrap();
    let until = records.number("least", ATTR_LOCK_UNTIL).await.unwrap().unwrap();
    let at = records.number("least", ATTR_LOCKED_AT).await.unwrap().unwrap();
    assert_eq!(until - at, 5_000);
    assert!(p.try_lock(&cfg("least", 60_000, 0)).await.unwrap().is_none());
}

#[tokio::test]
async fn extend_moves_the_stored_lease_and_keeps_the_token() {
    let (p, records) = fresh().await;
    let mut lock = p.try_lock(&cfg("ext", 1_000, 0)).await.unwrap().unwrap();
    let token = lock.fencing_token();
    lock.extend(Duration::from_secs(120), Duration::ZERO).await.unwrap();
    let until = records.number("ext", ATTR_LOCK_UNTIL).await.unwrap().unwrap();
    let at = records.number("ext", ATTR_LOCKED_AT).await.unwrap().unwrap();
    assert_eq!(until - at, 120_000);
    assert_eq!(lock.fencing_token(), token);
    lock.unlock().await.unwrap();
}

#[tokio::test]
async fn a_missing_table_is_a_setup_error_that_says_how_to_create_it() {
    let url = endpoint().await;
    let p = provider(&url, &unique("missing"));
    let errors =
        [p.try_lock(&cfg("x", 60_000, 0)).await.unwrap_err(), p.check_table().await.unwrap_err()];
    aws::assert_setup_errors_say(errors, &["create_table()", "AttributeName=_id,AttributeType=S"]);
}

#[tokio::test]
async fn a_table_with_another_key_is_a_setup_error() {
    let url = endpoint().await;
    let table = unique("wrongkey");
    client(&url)
        .create_table()
        .table_name(&table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();
    let p = provider(&url, &table);
    assert!(matches!(p.try_lock(&cfg("x", 60_000, 0)).await, Err(Error::Setup { .. })));
    match p.create_table().await {
        Err(Error::Setup { message, .. }) => assert!(message.contains("\"_id\""), "{message}"),
        other => panic!("expected Setup, got {other:?}"),
    }
}

#[tokio::test]
async fn create_table_is_idempotent() {
    let (p, _) = fresh().await;
    p.create_table().await.unwrap();
    p.check_table().await.unwrap();
}

#[tokio::test]
async fn invalid_table_names_and_locked_by_are_refused_before_any_request() {
    let c = client("http://127.0.0.1:9");
    for bad in ["ab", "has space", "semi;colon", &"x".repeat(256)] {
        let r = DynamoDbLockProvider::builder(c.clone()).table(bad).build();
        assert!(matches!(r, Err(Error::Setup { .. })), "{bad:?}");
    }
    let r = DynamoDbLockProvider::builder(c).locked_by("x".repeat(256)).build();
    assert!(matches!(r, Err(Error::Setup { .. })));
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_says_why_and_credentials_never_show() {
    let provider = |endpoint: &str| provider(endpoint, "shedlock");
    let is_transport = |s: &(dyn std::error::Error + 'static)| {
        matches!(s.downcast_ref(), Some(DynamoDbError::Transport { operation: "try_lock", .. }))
    };
    aws::an_unreachable_server_is_unavailable_says_why_and_hides_the_secret(provider, is_transport)
        .await;
}

#[tokio::test]
async fn names_up_to_2048_bytes_are_stored_whole_and_distinct() {
    let (p, records) = fresh().await;
    let long = "é".repeat(1024);
    let l = p.try_lock(&cfg(&long, 60_000, 0)).await.unwrap().expect("2048 bytes accepted");
    assert!(records.item(&long).await.unwrap().is_some());
    let prefix = &long[..2046];
    let l2 = p.try_lock(&cfg(prefix, 60_000, 0)).await.unwrap().expect("a prefix is another name");
    l.unlock().await.unwrap();
    l2.unlock().await.unwrap();
    let too_long = format!("{long}x");
    assert!(matches!(p.try_lock(&cfg(&too_long, 60_000, 0)).await, Err(Error::InvalidName { .. })));
}

/// A scan has no order by name and a filtered scan page can hold fewer items than its limit:
/// `list` still returns every name under the prefix once, in pages of at most the limit, among
/// many names outside it; an unlocked (free) item is listed as free.
#[tokio::test]
async fn list_scans_every_name_under_a_prefix_once_among_many_others() {
    let (p, _records) = fresh().await;
    let mut held = Vec::new();
    for i in 0..40 {
        held.push(p.try_lock(&cfg(&format!("other/{i:02}"), 60_000, 0)).await.unwrap().unwrap());
    }
    let mut inside: Vec<String> = (0..5).map(|i| format!("job_%/{i}")).collect();
    for name in &inside {
        held.push(p.try_lock(&cfg(name, 60_000, 0)).await.unwrap().unwrap());
    }
    held.push(p.try_lock(&cfg("jobx%/9", 60_000, 0)).await.unwrap().unwrap());
    let free = p.try_lock(&cfg("job_%/free", 60_000, 0)).await.unwrap().unwrap();
    free.unlock().await.unwrap();
    inside.push("job_%/free".to_owned());
    inside.sort();
    for limit in [1, 2, 5, 1000] {
        let (mut names, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
        loop {
            let page = p.list("job_%/", cursor.as_deref(), limit).await.unwrap();
            assert!(page.records.len() <= limit);
            for r in &page.records {
                assert_eq!(r.held, r.name != "job_%/free", "{r:?}");
            }
            names.extend(page.records.into_iter().map(|r| r.name));
            pages += 1;
            assert!(pages < 50, "list did not end");
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        names.sort();
        assert_eq!(names, inside, "limit {limit}");
    }
    let all = p.list("", None, 1000).await.unwrap();
    assert_eq!(all.records.len(), 47);
    assert_eq!(all.next, None);
    for lock in held {
        lock.unlock().await.unwrap();
    }
}

/// `check()`'s `UpdateItem` proves the locking permission and writes nothing: no item appears,
/// and a lock that happens to have the probe's name is left as it is.
#[tokio::test]
async fn check_writes_nothing_even_over_a_lock_of_the_probes_name() {
    use shedlock_dynamodb::CHECK_NAME;
    let (p, records) = fresh().await;
    p.check_table().await.unwrap();
    assert_eq!(records.item(CHECK_NAME).await.unwrap(), None, "check wrote an item");
    let lock = p.try_lock(&cfg(CHECK_NAME, 60_000, 0)).await.unwrap().expect("free");
    let before = records.item(CHECK_NAME).await.unwrap();
    p.check().await.unwrap();
    assert_eq!(records.item(CHECK_NAME).await.unwrap(), before, "check changed the lock");
    lock.unlock().await.unwrap();
}

//! Provider-level tests against a real S3 API server with conditional writes (moto from the
//! launcher, or `SHEDLOCK_S3_URL`): the stored object, setup errors, credentials hygiene.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use shedlock::ProviderBuilder as _;

use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use common::{Records, client, provider};
use shedlock::{Error, LockProvider};
use shedlock_s3::{S3Error, S3LockProvider};
use shedlock_test_support::{aws, cfg, unique};

async fn endpoint() -> String {
    common::endpoint(common::service().await.unwrap())
}

/// A fresh bucket (names are unique per test) and a provider on it.
async fn fresh() -> (S3LockProvider, Records) {
    let url = endpoint().await;
    let bucket = unique("b").replace('_', "-").to_ascii_lowercase();
    let p = provider(&url, &bucket);
    p.create_bucket().await.unwrap();
    (p.clone(), Records { client: client(&url), bucket, admin: p })
}

#[tokio::test]
async fn the_object_holds_the_lease_the_owner_and_the_token_and_unlock_keeps_the_token() {
    let (p, records) = fresh().await;
    let lock = p.try_lock(&cfg("job", 60_000, 0)).await.unwrap().expect("free");
    let body = records.body("job").await.unwrap().expect("an object");
    let until = body["lock_until_ms"].as_i64().unwrap();
    let at = body["locked_at_ms"].as_i64().unwrap();
    assert_eq!(until - at, 60_000, "lock_until = locked_at + lock_at_most_for, in ms");
    assert_eq!(body["acquisition_id"].as_str().map(str::len), Some(16));
    assert_eq!(body["fencing_token"].as_u64(), lock.fencing_token());
    let token = lock.fencing_token().unwrap();

    lock.unlock().await.unwrap();
    let body = records.body("job").await.unwrap().expect("the object stays");
    assert!(body["lock_until_ms"].is_null(), "released: {body}");
    assert_eq!(body["fencing_token"].as_u64(), Some(token));
    let again = p.try_lock(&cfg("job", 60_000, 0)).await.unwrap().expect("free after unlock");
    assert_eq!(again.fencing_token(), Some(token + 1));
    again.unlock().await.unwrap();
}

#[tokio::test]
async fn an_early_unlock_keeps_the_lease_until_locked_at_plus_at_least() {
    let (p, records) = fresh().await;
    let lock = p.try_lock(&cfg("least", 60_000, 5_000)).await.unwrap().unwrap();
    lock.unlock().await.unwrap();
    let body = records.body("least").await.unwrap().unwrap();
    let until = body["lock_until_ms"].as_i64().unwrap();
    let at = body["locked_at_ms"].as_i64().unwrap();
    assert_eq!(until - at, 5_000);
    let other = provider(&endpoint().await, &records.bucket);
    assert!(other.try_lock(&cfg("least", 60_000, 0)).await.unwrap().is_none());
}

#[tokio::test]
async fn a_stale_holder_changes_nothing_after_a_takeover() {
    let (a, records) = fresh().await;
    let b = provider(&endpoint().await, &records.bucket);
    let mut stale = a.try_lock(&cfg("stale", 200, 0)).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fresh = b.try_lock(&cfg("stale", 60_000, 0)).await.unwrap().expect("expired: free");
    let before = records.body("stale").await.unwrap();
    assert!(matches!(
        stale.extend(Duration::from_secs(60), Duration::ZERO).await,
        Err(Error::LockLost { .. })
    ));
    stale.unlock().await.unwrap();
    assert_eq!(records.body("stale").await.unwrap(), before, "the stale unlock changed nothing");
    assert!(fresh.fencing_token() > Some(0));
    fresh.unlock().await.unwrap();
}

#[tokio::test]
async fn a_missing_bucket_is_a_setup_error_that_says_how_to_create_it() {
    let p = provider(&endpoint().await, "shedlock-no-such-bucket");
    let errors =
        [p.try_lock(&cfg("x", 60_000, 0)).await.unwrap_err(), p.check_bucket().await.unwrap_err()];
    aws::assert_setup_errors_say(errors, &["create_bucket()", "create-bucket"]);
}

#[tokio::test]
async fn create_bucket_is_idempotent() {
    let (p, _) = fresh().await;
    p.create_bucket().await.unwrap();
    p.check_bucket().await.unwrap();
}

#[tokio::test]
async fn a_foreign_object_under_a_lock_key_is_a_backend_error_not_a_lock() {
    let (p, records) = fresh().await;
    records
        .client
        .put_object()
        .bucket(&records.bucket)
        .key(p.key_for("foreign"))
        .body(ByteStream::from_static(b"hello"))
        .send()
        .await
        .unwrap();
    match p.try_lock(&cfg("foreign", 60_000, 0)).await {
        Err(Error::Backend { source, .. }) => {
            assert!(source.to_string().contains("not a lock object"), "{source}")
        }
        other => panic!("expected a Backend error, got {other:?}"),
    }
}

#[tokio::test]
async fn invalid_bucket_names_prefixes_and_locked_by_are_refused_before_any_request() {
    let c = client("http://127.0.0.1:9");
    for bad in ["ab", "Upper", "has space", "-dash", "a..b", &"x".repeat(64)] {
        let r = S3LockProvider::builder(c.clone(), bad).build();
        assert!(matches!(r, Err(Error::Setup { .. })), "{bad:?}");
    }
    for bad in ["/abs", "a/../b", "a//b", "sp ace", &"p".repeat(256)] {
        let r = S3LockProvider::builder(c.clone(), "locks").prefix(bad).build();
        assert!(matches!(r, Err(Error::Setup { .. })), "{bad:?}");
    }
    let r = S3LockProvider::builder(c, "locks").locked_by("x".repeat(256)).build();
    assert!(matches!(r, Err(Error::Setup { .. })));
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_says_why_and_credentials_never_show() {
    let provider = |endpoint: &str| provider(endpoint, "locks");
    let is_transport = |s: &(dyn std::error::Error + 'static)| {
        matches!(s.downcast_ref(), Some(S3Error::Transport { operation: "try_lock", .. }))
    };
    aws::an_unreachable_server_is_unavailable_says_why_and_hides_the_secret(provider, is_transport)
        .await;
}

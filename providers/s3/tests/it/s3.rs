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
    // 255 bytes and the '/' the builder appends are one byte too many.
    for bad in ["/abs", "a/../b", "a//b", "sp ace", &"p".repeat(256), &"p".repeat(255)] {
        let r = S3LockProvider::builder(c.clone(), "locks").prefix(bad).build();
        assert!(matches!(r, Err(Error::Setup { .. })), "{bad:?}");
    }
    for good in ["", "locks.", &"p".repeat(254), &format!("{}/", "p".repeat(254))] {
        let r = S3LockProvider::builder(c.clone(), "locks").prefix(good).build();
        assert!(r.is_ok(), "{good:?}");
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

/// Tenants sharing a bucket: prefix `app` with name `2x` and prefix `app2` with name `x` were
/// one object (`app2x`) before prefixes were delimited. Each is held at once, and releasing one
/// leaves the other held.
#[tokio::test]
async fn prefixes_app_and_app2_lock_names_2x_and_x_independently() {
    let (p, records) = fresh().await;
    let tenant = |prefix: &str| {
        let node = || {
            S3LockProvider::builder(records.client.clone(), &records.bucket)
                .prefix(prefix)
                .build()
                .unwrap()
        };
        (node(), node())
    };
    let ((a, a2), (b, b2)) = (tenant("app"), tenant("app2"));
    assert_eq!((a.prefix(), b.prefix()), ("app/", "app2/"));
    assert_eq!((a.key_for("2x"), b.key_for("x")), ("app/2x".to_owned(), "app2/x".to_owned()));
    let la = a.try_lock(&cfg("2x", 60_000, 0)).await.unwrap().expect("a's lock is free");
    let lb = b.try_lock(&cfg("x", 60_000, 0)).await.unwrap().expect("b's lock is free too");
    assert!(a2.try_lock(&cfg("2x", 60_000, 0)).await.unwrap().is_none(), "a's is held");
    assert!(b2.try_lock(&cfg("x", 60_000, 0)).await.unwrap().is_none(), "b's is held");
    la.unlock().await.unwrap();
    assert!(b2.try_lock(&cfg("x", 60_000, 0)).await.unwrap().is_none(), "b's is still held");
    let again = a2.try_lock(&cfg("2x", 60_000, 0)).await.unwrap().expect("a's is free");
    // Each tenant lists its own lock only; the default prefix sees neither.
    assert_eq!(a.list("", None, 10).await.unwrap().records.len(), 1);
    assert_eq!(b.list("", None, 10).await.unwrap().records.len(), 1);
    assert!(p.list("", None, 10).await.unwrap().records.is_empty());
    lb.unlock().await.unwrap();
    again.unlock().await.unwrap();
}

/// Names map to keys by escaping each byte (`/` is `=2F`): `list` asks for the keys under the
/// escaped prefix, and maps every key back to its name. Names a byte-wise escape could confuse
/// (`=2F` spelled out, `/` itself, non-ASCII) stay apart, and objects under a longer prefix (a
/// second provider's `shedlock/sub/`) are passed over.
#[tokio::test]
async fn list_maps_escaped_keys_back_to_names_under_exactly_the_prefix() {
    let (p, records) = fresh().await;
    let nested = S3LockProvider::builder(records.client.clone(), &records.bucket)
        .prefix("shedlock/sub/")
        .build()
        .unwrap();
    let mut held = vec![nested.try_lock(&cfg("a/x", 60_000, 0)).await.unwrap().unwrap()];
    let mut inside: Vec<String> =
        ["a/", "a/b", "a/b.c d", "a/ü=2F", "a/%_", "a/\u{1f512}"].map(str::to_owned).to_vec();
    for name in inside.iter().map(String::as_str).chain(["a=2Fb", "a", "b/a", "A/b"]) {
        held.push(p.try_lock(&cfg(name, 60_000, 0)).await.unwrap().unwrap());
    }
    inside.sort();
    for limit in [1, 2, 1000] {
        let (mut names, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
        loop {
            let page = p.list("a/", cursor.as_deref(), limit).await.unwrap();
            assert!(page.records.len() <= limit);
            assert!(page.records.iter().all(|r| r.held && r.fencing_token.is_some()));
            names.extend(page.records.into_iter().map(|r| r.name));
            pages += 1;
            assert!(pages <= inside.len() + 1, "list did not end");
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        names.sort();
        assert_eq!(names, inside, "limit {limit}");
    }
    let all = p.list("", None, 1000).await.unwrap();
    assert_eq!(all.records.len(), inside.len() + 4, "every name of this prefix, no nested one");
    assert_eq!(nested.list("", None, 10).await.unwrap().records.len(), 1);
    for name in &inside {
        assert_eq!(p.inspect(name).await.unwrap().unwrap().name, *name);
    }
    for lock in held {
        lock.unlock().await.unwrap();
    }
    // Released objects stay, listed as free.
    let page = p.list("a/b", None, 10).await.unwrap();
    assert_eq!(page.records.len(), 2);
    assert!(page.records.iter().all(|r| !r.held && r.lock_until.is_none()));
}

/// A forced release deletes the object only as it was read (`If-Match` on its ETag): the server
/// refuses a delete with a stale ETag, and a lock released and taken again is left alone.
#[tokio::test]
async fn force_release_deletes_only_the_object_as_read() {
    use shedlock::ForceRelease;
    let (p, records) = fresh().await;
    // The server's conditional delete, which the forced release rests on.
    let key = p.key_for("cond");
    let put = |body: &'static [u8]| {
        records
            .client
            .put_object()
            .bucket(&records.bucket)
            .key(&key)
            .body(ByteStream::from_static(body))
            .send()
    };
    let first = put(b"one").await.unwrap().e_tag.unwrap();
    put(b"two").await.unwrap();
    let stale =
        records.client.delete_object().bucket(&records.bucket).key(&key).if_match(first).send();
    let e = stale.await.expect_err("a delete with a stale ETag must be refused");
    assert_eq!(e.raw_response().map(|r| r.status().as_u16()), Some(412));

    let mut holder = p.try_lock(&cfg("job", 60_000, 0)).await.unwrap().unwrap();
    let seen = p.inspect("job").await.unwrap().unwrap();
    // The holder extends: another ETag, the same acquisition, still released.
    holder.extend(Duration::from_secs(60), Duration::ZERO).await.unwrap();
    match p.force_release(&seen).await.unwrap() {
        ForceRelease::Released(r) => assert_eq!(r.acquisition, seen.acquisition),
        other => panic!("{other:?}"),
    }
    assert_eq!(records.body("job").await.unwrap(), None, "deleted");
    assert!(matches!(
        holder.extend(Duration::from_secs(60), Duration::ZERO).await,
        Err(Error::LockLost { .. })
    ));
    let next = p.try_lock(&cfg("job", 60_000, 0)).await.unwrap().expect("released");
    match p.force_release(&seen).await.unwrap() {
        ForceRelease::Changed(Some(now)) => {
            assert!(now.held && now.acquisition != seen.acquisition)
        }
        other => panic!("{other:?}"),
    }
    holder.unlock().await.unwrap();
    assert!(p.inspect("job").await.unwrap().unwrap().held, "the new holder keeps it");
    next.unlock().await.unwrap();
}

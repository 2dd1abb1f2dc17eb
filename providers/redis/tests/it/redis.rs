//! `shedlock-redis` against a real Redis server (`$SHEDLOCK_REDIS_URL`, or one the launcher
//! starts): what the stored keys look like, round trips on the wire, server-side at-least,
//! fencing across deletion and data loss, and the errors of a bad setup. The lock semantics
//! themselves are the conformance suite's (`tests/conformance*.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use shedlock::ProviderBuilder as _;

use std::time::Duration;

use redis::AsyncCommands;
use shedlock::{Error, LockProvider};
use shedlock_launcher::Backend;
use shedlock_redis::RedisLockProvider;
use shedlock_test_support::{FaultProxy, cfg, unique};

async fn url() -> String {
    shedlock_test_support::url(Backend::Redis, "Redis").await
}

/// A fault proxy in front of the shared Redis server.
async fn proxy() -> FaultProxy {
    let service = shedlock_test_support::service(Backend::Redis, "Redis").await.unwrap();
    FaultProxy::start(common::addr_of(service).unwrap()).await.unwrap()
}

async fn raw() -> redis::aio::MultiplexedConnection {
    redis::Client::open(url().await).unwrap().get_multiplexed_async_connection().await.unwrap()
}

#[tokio::test]
async fn keys_carry_prefix_environment_and_an_escaped_hash_tag_and_the_value_names_the_holder() {
    let prefix = format!("{}:", unique("keys"));
    let p = RedisLockProvider::builder(common::manager(&url().await).await.unwrap())
        .key_prefix(&prefix)
        .environment("prod")
        .locked_by("node-7")
        .build()
        .await
        .unwrap();
    let name = "a{b}%";
    let key = format!("{prefix}prod:{{a%7Bb%7D%25}}");
    assert_eq!(p.key(name), key);
    assert_eq!(p.fence_key(name), format!("{key}:fence"));

    let lock = p.try_lock(&cfg(name, 60_000, 0)).await.unwrap().expect("free");
    let mut c = raw().await;
    let value: String = c.get(&key).await.unwrap();
    let fields: Vec<&str> = value.split('|').collect();
    assert_eq!(fields.len(), 4, "{value}");
    assert_eq!(fields[0].len(), 16, "acquisition id in hex: {value}");
    assert_eq!(fields[1], "node-7");
    assert_eq!(fields[2].parse::<u64>().unwrap(), lock.fencing_token().unwrap());
    let fence: u64 = c.get(p.fence_key(name)).await.unwrap();
    assert_eq!(fence, lock.fencing_token().unwrap());
    let ttl: i64 = c.pttl(&key).await.unwrap();
    assert!((59_000..=60_000).contains(&ttl), "the key expires with lock_at_most_for: {ttl} ms");

    lock.unlock().await.unwrap();
    let exists: bool = c.exists(&key).await.unwrap();
    assert!(!exists, "unlock without at-least deletes the key");
    let fence_kept: bool = c.exists(p.fence_key(name)).await.unwrap();
    assert!(fence_kept, "the fencing counter outlives the lock");
}

#[tokio::test]
async fn acquire_release_and_extend_are_one_round_trip_each() {
    let proxy = proxy().await;
    let p =
        common::provider(&format!("redis://{}", proxy.addr()), &format!("{}:", unique("rt"))).await;
    let name = unique("job");
    for _ in 0..3 {
        let before = proxy.round_trips();
        let mut lock = p.try_lock(&cfg(&name, 60_000, 0)).await.unwrap().expect("free");
        let acquired = proxy.round_trips();
        lock.extend(Duration::from_secs(60), Duration::ZERO).await.unwrap();
        let extended = proxy.round_trips();
        lock.unlock().await.unwrap();
        let released = proxy.round_trips();
        assert_eq!(
            (acquired - before, extended - acquired, released - extended),
            (1, 1, 1),
            "round trips for acquire, extend, release"
        );
    }
    // Held elsewhere: still one round trip to learn it.
    let held = p.try_lock(&cfg(&name, 60_000, 0)).await.unwrap().expect("free");
    let before = proxy.round_trips();
    assert!(p.try_lock(&cfg(&name, 60_000, 0)).await.unwrap().is_none());
    assert_eq!(proxy.round_trips() - before, 1);
    held.unlock().await.unwrap();
}

#[tokio::test]
async fn at_least_counts_from_the_servers_time_of_the_last_extension() {
    let p = common::provider(&url().await, &format!("{}:", unique("least"))).await;
    let name = unique("job");
    let mut lock = p.try_lock(&cfg(&name, 10_000, 0)).await.unwrap().expect("free");
    tokio::time::sleep(Duration::from_millis(300)).await;
    lock.extend(Duration::from_secs(10), Duration::from_millis(500)).await.unwrap();
    lock.unlock().await.unwrap();
    let ttl: i64 = raw().await.pttl(p.key(&name)).await.unwrap();
    // Counted from the extension: ~500 ms less the unlock's round trip; counted from the
    // acquisition it would be ~200 ms.
    assert!((350..=500).contains(&ttl), "the key is kept {ttl} ms after unlock");
    assert!(p.try_lock(&cfg(&name, 10_000, 0)).await.unwrap().is_none(), "held until at-least");
}

#[tokio::test]
async fn fencing_tokens_keep_increasing_when_the_lock_key_or_all_data_is_lost() {
    let p = common::provider(&url().await, &format!("{}:", unique("fence"))).await;
    let name = unique("job");
    let mut c = raw().await;
    let first = p.try_lock(&cfg(&name, 60_000, 0)).await.unwrap().expect("free");
    let t1 = first.fencing_token().unwrap();
    // An operator deletes the lock key while it is held: the next holder's token is larger.
    let _: i64 = c.del(p.key(&name)).await.unwrap();
    let second = p.try_lock(&cfg(&name, 60_000, 0)).await.unwrap().expect("free after deletion");
    let t2 = second.fencing_token().unwrap();
    assert!(t2 > t1, "{t2} > {t1}");
    // Both keys lost (a restart without persistence): the server-clock term keeps it larger.
    let _: i64 = c.del(&[p.key(&name), p.fence_key(&name)]).await.unwrap();
    let third = p.try_lock(&cfg(&name, 60_000, 0)).await.unwrap().expect("free after data loss");
    assert!(third.fencing_token().unwrap() > t2);
    // The stale holders' unlocks change nothing.
    first.unlock().await.unwrap();
    second.unlock().await.unwrap();
    assert!(p.try_lock(&cfg(&name, 60_000, 0)).await.unwrap().is_none());
    third.unlock().await.unwrap();
}

#[tokio::test]
async fn a_user_whom_an_acl_denies_scripts_gets_a_setup_error_at_build() {
    let mut c = raw().await;
    let user = unique("nolua");
    let _: () = redis::cmd("ACL")
        .arg(
            &["SETUSER", &user, "on", ">secret-pw", "~*", "+@all", "-evalsha", "-eval", "-script"]
                [..],
        )
        .query_async(&mut c)
        .await
        .unwrap();
    let base = url().await;
    let authed = base.replacen("redis://", &format!("redis://{user}:secret-pw@"), 1);
    let conn =
        redis::Client::open(authed).unwrap().get_multiplexed_async_connection().await.unwrap();
    let err = RedisLockProvider::builder(conn).build().await.unwrap_err();
    let _: i64 = redis::cmd("ACL").arg(&["DELUSER", &user][..]).query_async(&mut c).await.unwrap();
    match &err {
        Error::Setup { message, .. } => {
            assert!(message.contains("ACL"), "{message}");
            assert!(!message.contains("secret-pw"));
        }
        other => panic!("expected Error::Setup, got {other:?}"),
    }
}

#[tokio::test]
async fn braces_or_control_characters_in_the_prefix_or_environment_are_setup_errors() {
    let u = url().await;
    for (prefix, env) in [("a{", None), ("ok:", Some("x}")), ("ok:", Some("")), ("a\nb", None)] {
        let mut b =
            RedisLockProvider::builder(common::manager(&u).await.unwrap()).key_prefix(prefix);
        if let Some(env) = env {
            b = b.environment(env);
        }
        assert!(
            matches!(b.build().await, Err(Error::Setup { .. })),
            "prefix {prefix:?}, environment {env:?}"
        );
    }
}

#[tokio::test]
async fn a_multiplexed_connection_works_as_well_as_a_connection_manager() {
    let prefix = format!("{}:", unique("mux"));
    let a = RedisLockProvider::builder(raw().await).key_prefix(&prefix).build().await.unwrap();
    let b = common::provider(&url().await, &prefix).await;
    let c = cfg(&unique("job"), 60_000, 0);
    let lock = a.try_lock(&c).await.unwrap().expect("free");
    assert!(b.try_lock(&c).await.unwrap().is_none());
    lock.unlock().await.unwrap();
    b.try_lock(&c).await.unwrap().expect("free after unlock").unlock().await.unwrap();
}

#[tokio::test]
async fn the_debug_output_leaves_out_the_connection_and_its_password() {
    let p = common::provider(&url().await, "dbg:").await;
    let text = format!("{p:?}");
    assert!(text.contains("dbg:") && !text.contains("redis://"), "{text}");
}

#[tokio::test]
async fn a_server_gone_after_connecting_is_unavailable_and_the_message_says_why() {
    use shedlock_test_support::unreachable::{GONE, assert_named};
    let proxy = proxy().await;
    let manager = common::manager(&format!("redis://{}", proxy.addr())).await.unwrap();
    let p = RedisLockProvider::builder(manager)
        .key_prefix(format!("{}:", unique("gone")))
        .operation_timeout(Some(Duration::from_secs(5)))
        .build()
        .await
        .unwrap();
    p.try_lock(&cfg("gone", 60_000, 0)).await.unwrap().expect("free").unlock().await.unwrap();
    // The server goes away: its connection is cut and a new one is refused.
    proxy.set_refusing(true).await.unwrap();
    proxy.cut_all();
    assert_named(&p, "the server gone", GONE).await;
}

/// `wait_for_replicas` on a server without replicas: `WAIT` answers 0, so the grant does not
/// count: the caller gets `Unavailable` saying so, and the key is released at once (a plain
/// provider takes the name), in both modes.
#[tokio::test]
async fn an_acquire_no_replica_acknowledged_is_released_and_unavailable() {
    for compat in [false, true] {
        let prefix = format!("{}:", unique("wait"));
        let builder = RedisLockProvider::builder(common::manager(&url().await).await.unwrap())
            .key_prefix(&prefix)
            .wait_for_replicas(1, Duration::from_millis(50));
        let waiting = if compat { builder.shedlock_compatible() } else { builder }.build().await;
        let waiting = waiting.unwrap();
        let err = waiting.try_lock(&cfg("job", 60_000, 0)).await.unwrap_err();
        let Error::Unavailable { source, .. } = &err else { panic!("{err:?}") };
        assert!(source.to_string().contains("0 of 1 replica(s)"), "{source}");
        assert!(source.to_string().contains("released"), "{source}");
        let plain = RedisLockProvider::builder(common::manager(&url().await).await.unwrap())
            .key_prefix(&prefix);
        let plain = if compat { plain.shedlock_compatible() } else { plain }.build().await.unwrap();
        let lock = plain.try_lock(&cfg("job", 60_000, 0)).await.unwrap();
        assert!(lock.is_some(), "the unreplicated grant was left behind (compat: {compat})");
        lock.unwrap().unlock().await.unwrap();
    }
}

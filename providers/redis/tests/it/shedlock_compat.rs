//! The ShedLock-compatible mode against a real Redis server: ShedLock's keys and values, a Java
//! ShedLock node played by its exact commands, and a mixed fleet of both kinds of nodes
//! contending on the same names with the conformance kit's history checker watching.
//!
//! The Java node issues the commands of ShedLock's Redis providers (`InternalRedisLockProvider`,
//! shared by the Spring, Jedis and Lettuce providers since 6.7): `SET key value NX PX ms` with
//! `ms` counted from `LockConfiguration.createdAt`, and on unlock either `DEL` or, while
//! `lock_at_least_for` lasts, `SET key value XX PX remaining`. With `safeUpdate` it runs
//! ShedLock's two compare-by-value Lua scripts instead of `DEL` and `SET XX`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use redis::{AsyncCommands, aio::ConnectionManager};
use shedlock::{Error, LockConfig, LockProvider, support::iso8601_millis};
use shedlock_redis::RedisLockProvider;
use shedlock_test_support::{
    cfg,
    fleet::{self, Fleet, JavaNode as _, Node},
    unique,
};

async fn url() -> String {
    shedlock_test_support::url(shedlock_launcher::Backend::Redis, "Redis").await
}

/// A compatible provider under ShedLock's key prefix `prefix` (the default environment).
async fn compat(prefix: &str) -> RedisLockProvider {
    RedisLockProvider::builder(common::manager(&url().await).await.unwrap())
        .key_prefix(prefix)
        .shedlock_compatible()
        .build()
        .await
        .unwrap()
}

/// ShedLock's `safeUpdate` delete script, verbatim.
const SAFE_DEL: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then
    return redis.call("del",KEYS[1])
else
    return 0
end"#;

/// ShedLock's `safeUpdate` expire script, verbatim.
const SAFE_PEXPIRE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then
   return redis.call('pexpire', KEYS[1], ARGV[2])
else
   return 0
end";

/// A Java ShedLock node (one JVM host) on its own connection.
struct JavaNode {
    conn: ConnectionManager,
    /// ShedLock's key prefix; the environment is ShedLock's `default`.
    prefix: String,
    host: String,
    /// `safeUpdate(true)`: unlock compares the value (ShedLock's default is `false`).
    safe: bool,
}

/// What a Java acquisition remembers: its key, value and configuration.
struct JavaLock {
    key: String,
    value: String,
    created_at: SystemTime,
    at_least: Duration,
}

/// Java's `UUID.randomUUID().toString()`: 36 characters, version 4, RFC 4122 variant.
fn uuid() -> String {
    let (a, b) = (shedlock::support::acquisition_id(), shedlock::support::acquisition_id());
    let a = (a & !0xF000) | 0x4000;
    let b = (b & !(0b11 << 62)) | (0b10 << 62);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xFFFF,
        a & 0xFFFF,
        b >> 48,
        b & 0xFFFF_FFFF_FFFF
    )
}

/// `ClockProvider.now()`'s milliseconds from `from` to `to`: `Duration.between(...).toMillis()`.
fn ms_between(from: SystemTime, to: SystemTime) -> i64 {
    match to.duration_since(from) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap(),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap(),
    }
}

impl JavaNode {
    async fn new(prefix: &str, host: &str, safe: bool) -> Self {
        Self {
            conn: common::manager(&url().await).await.unwrap(),
            prefix: prefix.to_owned(),
            host: host.to_owned(),
            safe,
        }
    }
}

#[async_trait::async_trait]
impl fleet::JavaNode for JavaNode {
    type Held = JavaLock;
    type Released = bool;

    /// `lock`: `SET key "ADDED:<now>@<host>:<uuid>" NX PX <ms until createdAt + atMost>`.
    async fn lock(&self, c: &LockConfig) -> Option<JavaLock> {
        let created_at = SystemTime::now();
        let key = format!("{}:default:{}", self.prefix, c.name());
        let value = format!("ADDED:{}@{}:{}", iso8601_millis(created_at), self.host, uuid());
        let px = ms_between(SystemTime::now(), created_at + c.lock_at_most_for());
        let mut conn = self.conn.clone();
        let r: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(&value)
            .arg("NX")
            .arg("PX")
            .arg(px)
            .query_async(&mut conn)
            .await
            .unwrap();
        r.is_some_and(|ok| ok == "OK").then(|| JavaLock {
            key,
            value,
            created_at,
            at_least: c.lock_at_least_for(),
        })
    }

    /// `unlock`: delete, or keep the key until `createdAt + lockAtLeastFor`. Returns whether
    /// a key was deleted or changed.
    async fn unlock(&self, l: &JavaLock) -> bool {
        let keep = ms_between(SystemTime::now(), l.created_at + l.at_least);
        let mut conn = self.conn.clone();
        let n: i64 = match (keep <= 0, self.safe) {
            (true, false) => conn.del(&l.key).await.unwrap(),
            (true, true) => {
                let script = redis::Script::new(SAFE_DEL);
                script.key(&l.key).arg(&l.value).invoke_async(&mut conn).await.unwrap()
            }
            (false, false) => {
                let r: Option<String> = redis::cmd("SET")
                    .arg(&l.key)
                    .arg(&l.value)
                    .arg("XX")
                    .arg("PX")
                    .arg(keep)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                i64::from(r.is_some())
            }
            (false, true) => {
                let script = redis::Script::new(SAFE_PEXPIRE);
                let mut call = script.key(&l.key);
                call.arg(&l.value).arg(keep.to_string());
                call.invoke_async(&mut conn).await.unwrap()
            }
        };
        n > 0
    }
}

/// `ADDED:<ISO ms>@<locked_by>:<UUID v4>`, or a description of what is wrong.
fn check_value(v: &str, locked_by: &str) -> Result<(), String> {
    let rest = v.strip_prefix("ADDED:").ok_or("no ADDED: prefix")?;
    let (time, rest) = rest.split_at(24.min(rest.len()));
    let t = time.as_bytes();
    if !(t.len() == 24 && t[10] == b'T' && t[19] == b'.' && t[23] == b'Z') {
        return Err(format!("time {time:?} is not ShedLock's ISO form"));
    }
    let rest = rest.strip_prefix('@').ok_or("no @ after the time")?;
    let (by, uuid) = rest.rsplit_once(':').ok_or("no : before the UUID")?;
    if by != locked_by {
        return Err(format!("locked_by {by:?}"));
    }
    let groups: Vec<&str> = uuid.split('-').collect();
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    if lens != [8, 4, 4, 4, 12] || !groups[2].starts_with('4') {
        return Err(format!("{uuid:?} is not a v4 UUID"));
    }
    Ok(())
}

#[tokio::test]
async fn keys_and_values_are_shedlocks_and_nothing_else_is_written() {
    let prefix = unique("job-lock");
    let p = compat(&prefix).await;
    assert!(!p.capabilities().fencing, "no counter in ShedLock's layout, so no fencing");
    assert!(p.capabilities().owner_checked && p.capabilities().server_time);
    let lock = p.try_lock(&cfg("job {x}", 10_000, 0)).await.unwrap().expect("free");
    assert_eq!(lock.fencing_token(), None);
    let key = format!("{prefix}:default:job {{x}}");
    assert_eq!(p.key("job {x}"), key, "the name as it is, no escaping, no hash tag");
    let mut c = p.connection();
    let value: String = c.get(&key).await.unwrap();
    check_value(&value, p.locked_by()).unwrap_or_else(|e| panic!("{value:?}: {e}"));
    let pttl: i64 = c.pttl(&key).await.unwrap();
    assert!(pttl > 9_000 && pttl <= 10_000, "PX is lock_at_most_for: {pttl}");
    let keys: Vec<String> = c.keys(format!("{prefix}*")).await.unwrap();
    assert_eq!(keys, std::slice::from_ref(&key), "one key per lock");
    let again = p.try_lock(&cfg("job {x}", 10_000, 0)).await.unwrap();
    assert!(again.is_none(), "held");
    lock.unlock().await.unwrap();
    assert!(!c.exists::<_, bool>(&key).await.unwrap(), "unlock deletes the key");
    // ShedLock's `keyPrefix` and environment.
    let other = RedisLockProvider::builder(common::manager(&url().await).await.unwrap())
        .key_prefix(&prefix)
        .environment("prod")
        .shedlock_compatible()
        .build()
        .await
        .unwrap();
    assert_eq!(other.key("job"), format!("{prefix}:prod:job"));
    let default = RedisLockProvider::builder(common::manager(&url().await).await.unwrap())
        .shedlock_compatible()
        .build()
        .await
        .unwrap();
    assert_eq!(default.key("job"), "job-lock:default:job", "ShedLock's defaults");
}

#[tokio::test]
async fn each_kind_honours_the_others_lock_and_lock_at_least_for() {
    let prefix = unique("job-lock");
    let ours = compat(&prefix).await;
    for safe in [false, true] {
        let java = JavaNode::new(&prefix, "java-host", safe).await;
        let n = |s: &str| format!("{s}-{safe}");
        // Held by Java: not ours to take, until Java unlocks.
        let l = java.lock(&cfg(&n("java"), 10_000, 0)).await.expect("free");
        assert!(ours.try_lock(&cfg(&n("java"), 10_000, 0)).await.unwrap().is_none());
        assert!(java.unlock(&l).await);
        let mine = ours.try_lock(&cfg(&n("java"), 10_000, 0)).await.unwrap().expect("released");
        // Held by us: not Java's to take, until we unlock.
        assert!(java.lock(&cfg(&n("java"), 10_000, 0)).await.is_none());
        mine.unlock().await.unwrap();
        java.unlock(&java.lock(&cfg(&n("java"), 10_000, 0)).await.expect("released")).await;
        // At-least, both ways: released at once, held 400 ms from the acquisition.
        let mine = ours.try_lock(&cfg(&n("least-ours"), 10_000, 400)).await.unwrap().unwrap();
        let t0 = Instant::now();
        mine.unlock().await.unwrap();
        assert!(java.lock(&cfg(&n("least-ours"), 10_000, 0)).await.is_none(), "inside at-least");
        let theirs = java.lock(&cfg(&n("least-java"), 10_000, 400)).await.expect("free");
        assert!(java.unlock(&theirs).await);
        assert!(ours.try_lock(&cfg(&n("least-java"), 10_000, 0)).await.unwrap().is_none());
        // Both remainders end 400 ms after their acquisitions (PX is in whole milliseconds).
        tokio::time::sleep(Duration::from_millis(450).saturating_sub(t0.elapsed())).await;
        let j = java.lock(&cfg(&n("least-ours"), 10_000, 0)).await.expect("at-least over");
        assert!(java.unlock(&j).await);
        let l = ours.try_lock(&cfg(&n("least-java"), 10_000, 0)).await.unwrap().expect("over");
        l.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn a_stale_holder_cannot_release_a_lock_taken_over_unless_java_runs_without_safe_update() {
    let prefix = unique("job-lock");
    let ours = compat(&prefix).await;
    let mut c = ours.connection();
    // Our lock expires; Java takes over; our stale extend and unlock change nothing.
    let java = JavaNode::new(&prefix, "java-host", true).await;
    let mut mine = ours.try_lock(&cfg("a", 100, 0)).await.unwrap().expect("free");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let theirs = java.lock(&cfg("a", 10_000, 0)).await.expect("our lock expired");
    assert!(matches!(
        mine.extend(Duration::from_secs(10), Duration::ZERO).await,
        Err(Error::LockLost { .. })
    ));
    mine.unlock().await.unwrap();
    let v: String = c.get(ours.key("a")).await.unwrap();
    assert_eq!(v, theirs.value, "the stale holder changed Java's key");
    assert!(java.unlock(&theirs).await);
    // A Java lock expires; we take over; a stale Java unlock with safeUpdate changes nothing.
    let stale = java.lock(&cfg("b", 100, 0)).await.expect("free");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mine = ours.try_lock(&cfg("b", 10_000, 0)).await.unwrap().expect("Java's lock expired");
    assert!(!java.unlock(&stale).await, "a safeUpdate unlock matched our key");
    assert!(java.lock(&cfg("b", 10_000, 0)).await.is_none(), "our lock was released");
    mine.unlock().await.unwrap();
    // Without safeUpdate (ShedLock's default) the stale Java unlock deletes our key: the hazard
    // the README states, pinned here.
    let unsafe_java = JavaNode::new(&prefix, "java-host", false).await;
    let stale = unsafe_java.lock(&cfg("c", 100, 0)).await.expect("free");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mine = ours.try_lock(&cfg("c", 10_000, 0)).await.unwrap().expect("Java's lock expired");
    assert!(unsafe_java.unlock(&stale).await, "DEL removes whatever key is there");
    assert!(!c.exists::<_, bool>(ours.key("c")).await.unwrap(), "our lock is gone");
    mine.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_fleet_of_java_and_rust_nodes_never_has_two_holders() {
    let prefix = unique("job-lock");
    let mut nodes = Vec::new();
    for _ in 0..3 {
        let p: Arc<dyn LockProvider> = Arc::new(compat(&prefix).await);
        nodes.push(("rust", Node::Ours(p)));
    }
    // With safeUpdate: without it, a Java holder stalled past lock_at_most_for deletes the next
    // holder's key (pinned by the stale-holder test above), which a loaded machine can cause in
    // any run. ShedLock's default mode in time is covered by the test before that.
    for host in ["java-host-1", "java-host-2", "java-host-3"] {
        nodes.push(("java-safe", Node::Java(JavaNode::new(&prefix, host, true).await)));
    }
    Fleet::new().run(nodes, Duration::from_secs(4), 10).await;
}

#[tokio::test]
async fn a_java_nodes_lock_is_inspected_with_its_host_and_a_forced_release_spares_its_next_one() {
    use shedlock::inspect::ForceRelease;
    let prefix = unique("job-lock");
    let ours = compat(&prefix).await;
    let java = JavaNode::new(&prefix, "java-host", true).await;
    let first = java.lock(&cfg("job", 10_000, 0)).await.expect("free");
    let seen = ours.inspect("job").await.unwrap().expect("Java's key");
    assert!(seen.held);
    assert_eq!(seen.locked_by.as_deref(), Some("java-host"));
    assert_eq!(seen.acquisition, first.value, "the acquisition is ShedLock's value");
    assert!(seen.lock_until.is_some_and(|t| t > SystemTime::now()));
    // Java releases and locks again: the same host, a new value, which the seen record's
    // forced release must not touch.
    assert!(java.unlock(&first).await);
    let second = java.lock(&cfg("job", 10_000, 0)).await.expect("released");
    match ours.force_release(&seen).await.unwrap() {
        ForceRelease::Changed(Some(now)) => assert_eq!(now.acquisition, second.value),
        other => panic!("a forced release of an ended acquisition answered {other:?}"),
    }
    let mut c = ours.connection();
    let v: String = c.get(ours.key("job")).await.unwrap();
    assert_eq!(v, second.value, "the next acquisition was touched");
    let now = ours.inspect("job").await.unwrap().expect("held");
    assert!(matches!(ours.force_release(&now).await.unwrap(), ForceRelease::Released(_)));
    assert!(ours.inspect("job").await.unwrap().is_none(), "the released key is gone");
}

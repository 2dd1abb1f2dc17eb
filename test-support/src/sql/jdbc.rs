//! The ShedLock-compatible mode of the SQL providers against Java ShedLock's JDBC providers: the
//! flow of ShedLock's `StorageBasedLockProvider` ([`JdbcStatements`], whose statements each
//! dialect's tests issue), and the checks every SQL dialect runs on it with such a node.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use shedlock::{Error, LockConfig, LockProvider};
use shedlock_sql::{Dialect, ShedlockTable, SqlLockProvider};

use crate::{
    cfg,
    fleet::{self, Fleet, Node},
};

/// What a Java acquisition remembers for its unlock.
pub struct JdbcLock {
    /// The lock's name.
    pub name: String,
    /// `LockConfiguration.lockAtLeastFor`.
    pub at_least: Duration,
    /// `LockConfiguration.createdAt` (client-time mode).
    pub created_at: SystemTime,
}

impl JdbcLock {
    /// `LockConfiguration.getUnlockTime()`: max(createdAt + lockAtLeastFor, now).
    pub fn unlock_time(&self) -> SystemTime {
        (self.created_at + self.at_least).max(SystemTime::now())
    }
}

/// A Java ShedLock node on a JDBC `DataSource` (one JVM host: its `locked_by`), issuing the
/// statements of `S`; a [`fleet::JavaNode`] with ShedLock's `StorageBasedLockProvider` flow: the
/// INSERT the first time a name is tried, the UPDATE after that, and an unlock by name and
/// `locked_by`.
pub struct JdbcNode<S: JdbcStatements> {
    /// The node's own pool.
    pub pool: S::Pool,
    /// ShedLock's table.
    pub table: String,
    /// The JVM host's name.
    pub locked_by: String,
    /// `usingDbTime()` (the server's clock), or else the JVM's clock in UTC.
    pub db_time: bool,
    /// ShedLock's `LockRecordRegistry`: names whose row this node created or saw.
    created: Mutex<HashSet<String>>,
}

impl<S: JdbcStatements> JdbcNode<S> {
    /// A node on `pool` and `table`, writing `locked_by`, in database time if `db_time`.
    pub fn new(pool: S::Pool, table: &str, locked_by: &str, db_time: bool) -> Self {
        Self {
            pool,
            table: table.to_owned(),
            locked_by: locked_by.to_owned(),
            db_time,
            created: Mutex::new(HashSet::new()),
        }
    }
}

/// The statements of one of ShedLock's JDBC `SqlStatementsSource`s, with its named parameters
/// bound positionally, as a [`JdbcNode`] issues them.
#[async_trait::async_trait]
pub trait JdbcStatements: Sized + Send + Sync + 'static {
    /// The pool a node issues them on.
    type Pool: Send + Sync;
    /// `getInsertStatement()` for `c` at `now` (the JVM's clock); whether it took the lock.
    async fn insert(node: &JdbcNode<Self>, c: &LockConfig, now: SystemTime) -> bool;
    /// `getUpdateStatement()` for `c` at `now`; whether it took the lock.
    async fn update(node: &JdbcNode<Self>, c: &LockConfig, now: SystemTime) -> bool;
    /// `getUnlockStatement()` for `l`; the rows it changed.
    async fn unlock(node: &JdbcNode<Self>, l: &JdbcLock) -> u64;
}

#[async_trait::async_trait]
impl<S: JdbcStatements> fleet::JavaNode for JdbcNode<S> {
    type Held = JdbcLock;
    type Released = u64;

    /// `StorageBasedLockProvider.lock`: the INSERT unless the name is known, then the UPDATE.
    async fn lock(&self, c: &LockConfig) -> Option<JdbcLock> {
        let created_at = SystemTime::now();
        let name = c.name().to_owned();
        let known = self.created.lock().unwrap().contains(&name);
        let won = (!known && S::insert(self, c, created_at).await)
            || S::update(self, c, created_at).await;
        self.created.lock().unwrap().insert(name.clone());
        won.then(|| JdbcLock { name, at_least: c.lock_at_least_for(), created_at })
    }

    /// `getUnlockStatement()`; returns the rows it changed.
    async fn unlock(&self, l: &JdbcLock) -> u64 {
        S::unlock(self, l).await
    }
}

/// `a` and `b`, compatible providers on one table (`what` names them in messages): one holder
/// at a time, no fencing token, and every acquisition writes its own `locked_by` (the default
/// one and the acquisition's suffix); the row keeps `lock_at_most_for` exactly.
pub async fn each_acquisition_writes_its_own_locked_by_and_has_no_token<D: Dialect>(
    a: &SqlLockProvider<D>,
    b: &SqlLockProvider<D>,
    what: &str,
) {
    let lock = a.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free");
    assert_eq!(lock.fencing_token(), None);
    assert!(b.try_lock(&cfg("job", 10_000, 0)).await.unwrap().is_none(), "held ({what})");
    let rec = a.record("job").await.unwrap().unwrap();
    fleet::assert_acquisition_locked_by(&rec.locked_by);
    assert_eq!(rec.lock_until.duration_since(rec.locked_at).unwrap(), Duration::from_secs(10));
    lock.unlock().await.unwrap();
    let again = b.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free after unlock");
    let rec2 = b.record("job").await.unwrap().unwrap();
    assert_ne!(rec.locked_by, rec2.locked_by, "every acquisition has its own locked_by");
    again.unlock().await.unwrap();
}

/// The wrong mode on a table is a setup error that says which mode the table is in: the
/// compatible mode on a native table (`native`) and the native mode on ShedLock's table
/// (`shedlock`), each created here with a provider on a pool from `pool`, both refuse their
/// first call, and neither writes a row (`rows` counts those of both tables).
pub async fn the_wrong_mode_on_a_table_is_a_setup_error<D: ShedlockTable>(
    pool: impl AsyncFn() -> D::Pool,
    native: &str,
    shedlock: &str,
    rows: impl AsyncFnOnce() -> i64,
) {
    let builder = async |table: &str| SqlLockProvider::<D>::builder(pool().await).table(table);
    // The compatible mode on a native table.
    builder(native).await.build().unwrap().create_table().await.unwrap();
    let c = builder(native).await.shedlock_compatible().build().unwrap();
    match c.try_lock(&cfg("x", 1_000, 0)).await {
        Err(Error::Setup { message, .. }) => {
            assert!(message.contains("native shedlock-rs schema"), "{message}");
            assert!(message.contains("acquisition_id"), "{message}");
        }
        other => panic!("expected Setup, got {other:?}"),
    }
    // The native mode on ShedLock's table.
    builder(shedlock).await.shedlock_compatible().build().unwrap().create_table().await.unwrap();
    let n = builder(shedlock).await.build().unwrap();
    match n.try_lock(&cfg("x", 1_000, 0)).await {
        Err(Error::Setup { message, .. }) => {
            assert!(message.contains("ShedLock table"), "{message}");
            assert!(message.contains(".shedlock_compatible()"), "{message}");
        }
        other => panic!("expected Setup, got {other:?}"),
    }
    // Nothing was written by either.
    assert_eq!(rows().await, 0);
}

/// For each of Java's time modes (database time, then the JVM's clock), a row written by a Java
/// node (`java(db_time)`, `locked_by` `java-host`) is judged like our own by `ours`: held until
/// released, `lock_until - locked_at` within `max_skew` of `lock_at_most_for` (10 s), its times
/// UTC (10 s from now by this host's clock).
pub async fn a_row_written_by_a_java_node_is_judged_like_our_own<D: Dialect, J>(
    ours: &SqlLockProvider<D>,
    java: impl AsyncFn(bool) -> J,
    max_skew: Duration,
) where
    J: fleet::JavaNode<Released = u64>,
{
    for db_time in [true, false] {
        let java = java(db_time).await;
        let name = format!("java-row-{db_time}");
        let l = java.lock(&cfg(&name, 10_000, 0)).await.expect("free");
        assert!(ours.try_lock(&cfg(&name, 10_000, 0)).await.unwrap().is_none(), "held by Java");
        let rec = ours.record(&name).await.unwrap().unwrap();
        assert_eq!(rec.locked_by, "java-host");
        let held = rec.lock_until.duration_since(rec.locked_at).unwrap();
        assert!(
            held.abs_diff(Duration::from_secs(10)) <= max_skew,
            "lock_until - locked_at = {held:?}"
        );
        // The row's times are UTC: lock_until is 10 s from now by the same host clock.
        let left = rec.lock_until.duration_since(SystemTime::now()).unwrap();
        assert!(left > Duration::from_secs(9) && left <= Duration::from_secs(10), "{left:?}");
        assert_eq!(java.unlock(&l).await, 1);
        let mine = ours.try_lock(&cfg(&name, 10_000, 0)).await.unwrap().expect("Java released");
        mine.unlock().await.unwrap();
    }
}

/// An operator's forced release of a Java node's row frees that acquisition, and never the
/// node's next one: a ShedLock node writes the same `locked_by` (its host) every time, so the
/// acquisition is told by its `locked_at` too.
pub async fn a_forced_release_of_a_java_row_never_touches_its_next_acquisition<D: Dialect, J>(
    ours: &SqlLockProvider<D>,
    java: &J,
) where
    J: fleet::JavaNode<Released = u64>,
{
    use shedlock::{ForceRelease, LockProvider};
    let c = cfg("forced-java", 10_000, 0);
    let first = java.lock(&c).await.expect("free");
    let old = ours.inspect("forced-java").await.unwrap().expect("a row");
    assert!(old.held);
    assert_eq!((old.locked_by.as_deref(), old.fencing_token), (Some("java-host"), None));
    assert_eq!(java.unlock(&first).await, 1);
    // A later locked_at, by more than the columns' millisecond precision.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let _again = java.lock(&c).await.expect("released");
    let now = ours.inspect("forced-java").await.unwrap().expect("a row");
    assert!(now.held && now.acquisition != old.acquisition, "{old:?} then {now:?}");
    assert_eq!(ours.force_release(&old).await.unwrap(), ForceRelease::Changed(Some(now.clone())));
    assert!(ours.try_lock(&c).await.unwrap().is_none(), "the Java node's new lock is untouched");
    assert_eq!(ours.force_release(&now).await.unwrap(), ForceRelease::Released(now));
    let mine = ours.try_lock(&c).await.unwrap().expect("released by the operator");
    mine.unlock().await.unwrap();
}

/// Stale holders of either kind cannot release a lock the other kind took over: a stale Java
/// unlock matches no row (ShedLock's JDBC unlock checks `locked_by`), and our stale extend and
/// unlock change nothing.
pub async fn stale_holders_of_either_kind_cannot_release_a_takeover<D: Dialect, J>(
    ours: &SqlLockProvider<D>,
    java: &J,
) where
    J: fleet::JavaNode<Released = u64>,
{
    // A Java lock expires; we take over; the stale Java unlock changes nothing.
    let stale = java.lock(&cfg("a", 100, 0)).await.expect("free");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mine = ours.try_lock(&cfg("a", 10_000, 0)).await.unwrap().expect("the Java lock expired");
    assert_eq!(java.unlock(&stale).await, 0, "a Java unlock matched our row");
    assert!(java.lock(&cfg("a", 10_000, 0)).await.is_none(), "our lock was released");
    mine.unlock().await.unwrap();
    // Our lock expires; Java takes over; our stale unlock and extend change nothing.
    let row = async |name: &str| ours.record(name).await.unwrap().unwrap();
    fleet::our_stale_holder_changes_nothing(ours, java, "b", row, |&rows| rows == 1).await;
}

/// A mixed fleet never has two holders: `ours` and three Java nodes made by
/// `java(locked_by, db_time)`, two in database time and one on the JVM's clock, contend for 4 s.
pub async fn a_mixed_fleet_never_has_two_holders<J: fleet::JavaNode>(
    ours: Vec<Arc<dyn LockProvider>>,
    java: impl AsyncFn(&str, bool) -> J,
) {
    let mut nodes: Vec<_> = ours.into_iter().map(|p| ("rust", Node::Ours(p))).collect();
    nodes.push(("java-db-time", Node::Java(java("java-host-1", true).await)));
    nodes.push(("java-db-time", Node::Java(java("java-host-2", true).await)));
    nodes.push(("java-utc", Node::Java(java("java-host-3", false).await)));
    Fleet::new().run(nodes, Duration::from_secs(4), 10).await;
}

/// After the README's migration (`migrate`, which returns a native provider on the migrated
/// table), the native mode honours the rows `java` wrote before it: a held lock (10 s) stays
/// held, its UTC times read as UTC, and an expiring one (200 ms) is taken once expired, with a
/// fencing token.
pub async fn after_the_migration_the_native_mode_honours_java_rows<D: Dialect, J>(
    java: &J,
    migrate: impl AsyncFnOnce() -> SqlLockProvider<D>,
) where
    J: fleet::JavaNode,
{
    let _held = java.lock(&cfg("held", 10_000, 0)).await.expect("free");
    let _expiring = java.lock(&cfg("expiring", 200, 0)).await.expect("free");
    let native = migrate().await;
    assert!(native.try_lock(&cfg("held", 1_000, 0)).await.unwrap().is_none(), "Java's lock");
    let rec = native.record("held").await.unwrap().unwrap();
    let left = rec.lock_until.duration_since(SystemTime::now()).unwrap();
    assert!(left > Duration::from_secs(9), "the UTC times were read as UTC: {left:?} left");
    tokio::time::sleep(Duration::from_millis(250)).await;
    let lock = native.try_lock(&cfg("expiring", 1_000, 0)).await.unwrap().expect("expired");
    assert!(lock.fencing_token().is_some_and(|t| t > 0), "a token from the server clock");
    lock.unlock().await.unwrap();
}

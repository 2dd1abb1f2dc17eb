//! The ShedLock-compatible mode against a real MariaDB server: ShedLock's table, a Java
//! ShedLock node played by its exact statements, and a mixed fleet of both kinds of nodes
//! contending on the same names with the conformance kit's history checker watching.
//!
//! The Java node issues the statements of ShedLock's JDBC providers for MySQL and MariaDB:
//! `MySqlServerTimeStatementsSource` with `usingDbTime()` (durations bound as microseconds, the
//! times `UTC_TIMESTAMP(3)`), and the generic `SqlStatementsSource` with `forceUtcTimeZone()`
//! (times bound as UTC datetimes with milliseconds, as Connector/J sends a `Timestamp` with a
//! UTC calendar). Its named parameters are bound positionally in the order they appear. Its flow
//! is ShedLock's `StorageBasedLockProvider`: the INSERT the first time a name is tried (`INSERT
//! IGNORE` in database time; a plain INSERT, whose duplicate-key error means "not acquired", in
//! client time), the UPDATE after that, and an unlock by name and `locked_by`. Its pool leaves
//! the session `time_zone` at the server default, as a JDBC connection does.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use shedlock::{Error, LockConfig, LockProvider};
use shedlock_mysql::{Flavor, MySqlLockProvider, recommended_pool_options};
use shedlock_test_support::{
    cfg,
    fleet::{self, Fleet, JavaNode as _, Node, utc_text},
    unique,
};
use sqlx::{MySqlPool, Row, mysql::MySqlConnectOptions};
use tokio::sync::OnceCell;

const DB: &str = "shedlock_compat";

async fn options() -> MySqlConnectOptions {
    let url = shedlock_test_support::url(shedlock_launcher::Backend::MariaDb, "MariaDB").await;
    url.parse().unwrap()
}

/// A pool as our nodes have it (sqlx's default session `time_zone`, `+00:00`).
async fn pool() -> MySqlPool {
    static DONE: OnceCell<()> = OnceCell::const_new();
    let pool = recommended_pool_options().connect_with(options().await).await.unwrap();
    DONE.get_or_init(|| async {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE IF NOT EXISTS {DB}")))
            .execute(&pool)
            .await
            .unwrap();
    })
    .await;
    pool
}

fn table() -> String {
    format!("{DB}.{}", unique("t"))
}

async fn compat_with(table: &str, flavor: Flavor) -> MySqlLockProvider {
    let p = MySqlLockProvider::builder(pool().await)
        .table(table)
        .option(flavor)
        .shedlock_compatible()
        .build()
        .unwrap();
    p.create_table().await.unwrap();
    p
}

async fn compat(table: &str) -> MySqlLockProvider {
    compat_with(table, Flavor::Detect).await
}

/// A Java ShedLock node (one JVM host: its `locked_by`), on its own pool.
struct JavaNode {
    pool: MySqlPool,
    table: String,
    locked_by: String,
    /// `usingDbTime()` (the server's clock) or `forceUtcTimeZone()` (the JVM's clock).
    db_time: bool,
    /// ShedLock's `LockRecordRegistry`: names whose row this node created or saw.
    created: Mutex<HashSet<String>>,
}

/// What a Java acquisition remembers for its unlock.
struct JavaLock {
    name: String,
    at_least: Duration,
    /// `LockConfiguration.createdAt` (client-time mode).
    created_at: SystemTime,
}

const NOW: &str = "UTC_TIMESTAMP(3)";
const AT_MOST: &str = "TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3))";

/// `ClockProvider.now()`: the JVM's clock, truncated to milliseconds, as UTC text.
fn ms(t: SystemTime) -> String {
    utc_text(t, 3)
}

/// A duration as ShedLock binds it: `toNanos() / 1_000`.
fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_nanos() / 1_000).unwrap()
}

impl JavaNode {
    async fn new(table: &str, locked_by: &str, db_time: bool) -> Self {
        // A JDBC connection keeps the server's default session time zone.
        let opts = options().await.timezone(None);
        Self {
            pool: recommended_pool_options().connect_with(opts).await.unwrap(),
            table: table.to_owned(),
            locked_by: locked_by.to_owned(),
            db_time,
            created: Mutex::new(HashSet::new()),
        }
    }

    async fn insert(&self, c: &LockConfig, now: SystemTime) -> bool {
        let t = &self.table;
        let r = if self.db_time {
            // MySqlServerTimeStatementsSource.getInsertStatement(): :name,
            // :lockAtMostForMicros, :lockedBy.
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT IGNORE INTO {t}(name, lock_until, locked_at, locked_by) VALUES(?, \
                 {AT_MOST}, {NOW}, ?)"
            )))
            .bind(c.name().to_owned())
            .bind(micros(c.lock_at_most_for()))
            .bind(self.locked_by.clone())
            .execute(&self.pool)
            .await
        } else {
            // SqlStatementsSource.getInsertStatement(): :name, :lockUntil, :now, :lockedBy.
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {t}(name, lock_until, locked_at, locked_by) VALUES(?, ?, ?, ?)"
            )))
            .bind(c.name().to_owned())
            .bind(ms(now + c.lock_at_most_for()))
            .bind(ms(now))
            .bind(self.locked_by.clone())
            .execute(&self.pool)
            .await
        };
        match r {
            Ok(done) => done.rows_affected() > 0,
            // ER_DUP_ENTRY: JDBC's SQLIntegrityConstraintViolationException, "not acquired".
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("23000") => false,
            Err(e) => panic!("Java insert: {e}"),
        }
    }

    async fn update(&self, c: &LockConfig, now: SystemTime) -> bool {
        let t = &self.table;
        let q = if self.db_time {
            // getUpdateStatement(): :lockAtMostForMicros, :lockedBy, :name.
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {t} SET lock_until = {AT_MOST}, locked_at = {NOW}, locked_by = ? WHERE \
                 name = ? AND lock_until <= {NOW}"
            )))
            .bind(micros(c.lock_at_most_for()))
            .bind(self.locked_by.clone())
            .bind(c.name().to_owned())
        } else {
            // :lockUntil, :now, :lockedBy, :name, :now.
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {t} SET lock_until = ?, locked_at = ?, locked_by = ? WHERE name = ? AND \
                 lock_until <= ?"
            )))
            .bind(ms(now + c.lock_at_most_for()))
            .bind(ms(now))
            .bind(self.locked_by.clone())
            .bind(c.name().to_owned())
            .bind(ms(now))
        };
        q.execute(&self.pool).await.unwrap().rows_affected() > 0
    }
}

#[async_trait::async_trait]
impl fleet::JavaNode for JavaNode {
    type Held = JavaLock;
    type Released = u64;

    /// `StorageBasedLockProvider.lock`: the INSERT unless the name is known, then the UPDATE.
    async fn lock(&self, c: &LockConfig) -> Option<JavaLock> {
        let created_at = SystemTime::now();
        let name = c.name().to_owned();
        let known = self.created.lock().unwrap().contains(&name);
        let won = (!known && self.insert(c, created_at).await) || self.update(c, created_at).await;
        self.created.lock().unwrap().insert(name.clone());
        won.then(|| JavaLock { name, at_least: c.lock_at_least_for(), created_at })
    }

    /// `getUnlockStatement()`; returns the rows it changed.
    async fn unlock(&self, l: &JavaLock) -> u64 {
        let t = &self.table;
        let q = if self.db_time {
            // :lockAtLeastForMicros (twice), :name, :lockedBy.
            let at_least = "TIMESTAMPADD(MICROSECOND, ?, locked_at)";
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {t} SET lock_until = IF ({at_least} > {NOW} , {at_least}, {NOW}) WHERE \
                 name = ? AND locked_by = ?"
            )))
            .bind(micros(l.at_least))
            .bind(micros(l.at_least))
            .bind(l.name.clone())
            .bind(self.locked_by.clone())
        } else {
            // LockConfiguration.getUnlockTime(): max(createdAt + lockAtLeastFor, now).
            let unlock_time = (l.created_at + l.at_least).max(SystemTime::now());
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {t} SET lock_until = ? WHERE name = ? AND locked_by = ?"
            )))
            .bind(ms(unlock_time))
            .bind(l.name.clone())
            .bind(self.locked_by.clone())
        };
        q.execute(&self.pool).await.unwrap().rows_affected()
    }
}

#[tokio::test]
async fn create_table_makes_shedlocks_documented_table_with_a_byte_exact_name() {
    let table = table();
    let p = compat(&table).await;
    let (_, bare) = table.split_once('.').unwrap();
    let cols: Vec<(String, String)> = sqlx::query(
        "SELECT CAST(column_name AS CHAR), CAST(column_type AS CHAR) FROM \
         information_schema.columns WHERE table_schema = ? AND table_name = ? \
         ORDER BY ordinal_position",
    )
    .bind(DB)
    .bind(bare)
    .fetch_all(&pool().await)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    assert_eq!(
        cols,
        [
            ("name".into(), "varbinary(255)".into()),
            ("lock_until".into(), "timestamp(3)".into()),
            ("locked_at".into(), "timestamp(3)".into()),
            ("locked_by".into(), "varchar(255)".into()),
        ]
    );
    assert!(p.ddl().contains("PRIMARY KEY (`name`)"), "{}", p.ddl());
    assert!(!p.capabilities().fencing, "no column for a token, so no fencing");
    assert!(p.capabilities().owner_checked && p.capabilities().server_time);
}

#[tokio::test]
async fn each_acquisition_writes_its_own_locked_by_in_both_flavors_and_has_no_token() {
    for flavor in [Flavor::MariaDb, Flavor::MySql] {
        let table = table();
        let a = compat_with(&table, flavor).await;
        let b = compat_with(&table, flavor).await;
        let lock = a.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free");
        assert_eq!(lock.fencing_token(), None);
        assert!(b.try_lock(&cfg("job", 10_000, 0)).await.unwrap().is_none(), "held ({flavor:?})");
        let rec = a.record("job").await.unwrap().unwrap();
        let (base, suffix) = rec.locked_by.rsplit_once(" #").expect("the acquisition's suffix");
        assert_eq!(suffix.len(), 16, "{}", rec.locked_by);
        assert!(u64::from_str_radix(suffix, 16).is_ok(), "{}", rec.locked_by);
        assert_eq!(base, shedlock::support::default_locked_by());
        assert_eq!(rec.lock_until.duration_since(rec.locked_at).unwrap(), Duration::from_secs(10));
        lock.unlock().await.unwrap();
        let again = b.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free after unlock");
        let rec2 = b.record("job").await.unwrap().unwrap();
        assert_ne!(rec.locked_by, rec2.locked_by, "every acquisition has its own locked_by");
        again.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn the_wrong_mode_on_a_table_is_a_setup_error_that_says_which_mode_the_table_is_in() {
    // The compatible mode on a native table.
    let native = table();
    let n = MySqlLockProvider::builder(pool().await).table(&native).build().unwrap();
    n.create_table().await.unwrap();
    let c = MySqlLockProvider::builder(pool().await)
        .table(&native)
        .shedlock_compatible()
        .build()
        .unwrap();
    match c.try_lock(&cfg("x", 1_000, 0)).await {
        Err(Error::Setup { message, .. }) => {
            assert!(message.contains("native shedlock-rs schema"), "{message}");
            assert!(message.contains("acquisition_id"), "{message}");
        }
        other => panic!("expected Setup, got {other:?}"),
    }
    // The native mode on ShedLock's table.
    let shedlock = table();
    compat(&shedlock).await;
    let n = MySqlLockProvider::builder(pool().await).table(&shedlock).build().unwrap();
    match n.try_lock(&cfg("x", 1_000, 0)).await {
        Err(Error::Setup { message, .. }) => {
            assert!(message.contains("ShedLock table"), "{message}");
            assert!(message.contains(".shedlock_compatible()"), "{message}");
        }
        other => panic!("expected Setup, got {other:?}"),
    }
    // Nothing was written by either.
    let rows: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT (SELECT count(*) FROM {native}) + (SELECT count(*) FROM {shedlock})"
    )))
    .fetch_one(&pool().await)
    .await
    .unwrap();
    assert_eq!(rows, 0);
}

#[tokio::test]
async fn a_session_time_zone_off_the_server_default_is_a_setup_error_before_any_write() {
    let table = table();
    compat(&table).await;
    // Two hours east of whatever the server default is: never its offset.
    let global: i64 = sqlx::query_scalar(
        "SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), \
         CONVERT_TZ(UTC_TIMESTAMP(), '+00:00', @@global.time_zone))",
    )
    .fetch_one(&pool().await)
    .await
    .unwrap();
    let east = global + 7_200;
    let zone = format!("{}{:02}:{:02}", if east < 0 { '-' } else { '+' }, east.abs() / 3600, 0);
    let skewed = recommended_pool_options()
        .connect_with(options().await.timezone(Some(zone.clone())))
        .await
        .unwrap();
    let p = MySqlLockProvider::builder(skewed).table(&table).shedlock_compatible().build().unwrap();
    match p.try_lock(&cfg("tz", 1_000, 0)).await {
        Err(Error::Setup { message, .. }) => {
            assert!(message.contains("session time_zone"), "{message}");
            assert!(message.contains(&zone), "{message}");
            assert!(message.contains("timezone(None)"), "{message}");
        }
        other => panic!("expected Setup, got {other:?}"),
    }
    let rows: i64 =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
            .fetch_one(&pool().await)
            .await
            .unwrap();
    assert_eq!(rows, 0, "nothing was written");
    // The server default's own zone is accepted, as a JDBC node's session is.
    let jdbc_like =
        recommended_pool_options().connect_with(options().await.timezone(None)).await.unwrap();
    let p =
        MySqlLockProvider::builder(jdbc_like).table(&table).shedlock_compatible().build().unwrap();
    p.try_lock(&cfg("tz", 1_000, 0)).await.unwrap().expect("free").unlock().await.unwrap();
}

#[tokio::test]
async fn a_row_written_by_a_java_node_is_judged_like_our_own() {
    let table = table();
    let ours = compat(&table).await;
    for db_time in [true, false] {
        let java = JavaNode::new(&table, "java-host", db_time).await;
        let name = format!("java-row-{db_time}");
        let l = java.lock(&cfg(&name, 10_000, 0)).await.expect("free");
        assert!(ours.try_lock(&cfg(&name, 10_000, 0)).await.unwrap().is_none(), "held by Java");
        let rec = ours.record(&name).await.unwrap().unwrap();
        assert_eq!(rec.locked_by, "java-host");
        let held = rec.lock_until.duration_since(rec.locked_at).unwrap();
        // TIMESTAMP(3) keeps milliseconds: the client-time node truncates both ends.
        assert!(
            held.abs_diff(Duration::from_secs(10)) <= Duration::from_millis(1),
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

#[tokio::test]
async fn java_honours_our_lock_at_least_and_we_honour_a_java_one() {
    let table = table();
    let ours = compat(&table).await;
    let java = JavaNode::new(&table, "java-host", true).await;
    // Ours, released early with 400 ms at least: Java cannot take it before then.
    let mine = ours.try_lock(&cfg("least-ours", 10_000, 400)).await.unwrap().expect("free");
    mine.unlock().await.unwrap();
    assert!(java.lock(&cfg("least-ours", 10_000, 0)).await.is_none(), "inside at-least");
    // Java's, released early with 400 ms at least: neither can we.
    let theirs = java.lock(&cfg("least-java", 10_000, 400)).await.expect("free");
    assert_eq!(java.unlock(&theirs).await, 1);
    assert!(ours.try_lock(&cfg("least-java", 10_000, 0)).await.unwrap().is_none());
    // Both remainders end (400 ms after acquiring, plus the millisecond columns' rounding).
    tokio::time::sleep(Duration::from_millis(450)).await;
    let j = java.lock(&cfg("least-ours", 10_000, 0)).await.expect("at-least over");
    assert_eq!(java.unlock(&j).await, 1);
    let l = ours.try_lock(&cfg("least-java", 10_000, 0)).await.unwrap().expect("at-least over");
    l.unlock().await.unwrap();
}

#[tokio::test]
async fn stale_holders_of_either_kind_cannot_release_a_lock_the_other_kind_took_over() {
    let table = table();
    let ours = compat(&table).await;
    let java = JavaNode::new(&table, "java-host", true).await;
    // A Java lock expires; we take over; the stale Java unlock changes nothing.
    let stale = java.lock(&cfg("a", 100, 0)).await.expect("free");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mine = ours.try_lock(&cfg("a", 10_000, 0)).await.unwrap().expect("the Java lock expired");
    assert_eq!(java.unlock(&stale).await, 0, "a Java unlock matched our row");
    assert!(java.lock(&cfg("a", 10_000, 0)).await.is_none(), "our lock was released");
    mine.unlock().await.unwrap();
    // Our lock expires; Java takes over; our stale unlock and extend change nothing.
    let mut mine = ours.try_lock(&cfg("b", 100, 0)).await.unwrap().expect("free");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let theirs = java.lock(&cfg("b", 10_000, 0)).await.expect("our lock expired");
    let before = ours.record("b").await.unwrap().unwrap();
    assert!(matches!(
        mine.extend(Duration::from_secs(10), Duration::ZERO).await,
        Err(Error::LockLost { .. })
    ));
    mine.unlock().await.unwrap();
    assert_eq!(ours.record("b").await.unwrap().unwrap(), before, "the stale holder changed it");
    assert_eq!(java.unlock(&theirs).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_fleet_of_java_and_rust_nodes_never_has_two_holders() {
    let table = table();
    let mut nodes = Vec::new();
    for flavor in [Flavor::MariaDb, Flavor::MariaDb, Flavor::MySql] {
        let p: Arc<dyn LockProvider> = Arc::new(compat_with(&table, flavor).await);
        nodes.push(("rust", Node::Ours(p)));
    }
    nodes.push(("java-db-time", Node::Java(JavaNode::new(&table, "java-host-1", true).await)));
    nodes.push(("java-db-time", Node::Java(JavaNode::new(&table, "java-host-2", true).await)));
    nodes.push(("java-utc", Node::Java(JavaNode::new(&table, "java-host-3", false).await)));
    Fleet::new().run(nodes, Duration::from_secs(4), 10).await;
}

#[tokio::test]
async fn after_the_readme_migration_the_native_mode_honours_rows_written_by_java() {
    let table = table();
    compat(&table).await;
    let java = JavaNode::new(&table, "java-host", true).await;
    let _held = java.lock(&cfg("held", 10_000, 0)).await.expect("free");
    let _expiring = java.lock(&cfg("expiring", 200, 0)).await.expect("free");
    // The README's migration, verbatim but for the table name, in a session on the fleet's zone
    // (here the server default, as the Java nodes use it).
    let java_like =
        recommended_pool_options().connect_with(options().await.timezone(None)).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ALTER TABLE {table}
             MODIFY name VARBINARY(255) NOT NULL,
             MODIFY lock_until DATETIME(3) NOT NULL,
             MODIFY locked_at DATETIME(3) NOT NULL,
             ADD COLUMN acquisition_id BIGINT NOT NULL DEFAULT 0,
             ADD COLUMN fencing_token BIGINT NOT NULL DEFAULT 0;"
    )))
    .execute(&java_like)
    .await
    .unwrap();
    let native = MySqlLockProvider::builder(pool().await).table(&table).build().unwrap();
    assert!(native.try_lock(&cfg("held", 1_000, 0)).await.unwrap().is_none(), "Java's lock");
    let rec = native.record("held").await.unwrap().unwrap();
    let left = rec.lock_until.duration_since(SystemTime::now()).unwrap();
    assert!(left > Duration::from_secs(9), "the UTC times were read as UTC: {left:?} left");
    tokio::time::sleep(Duration::from_millis(250)).await;
    let lock = native.try_lock(&cfg("expiring", 1_000, 0)).await.unwrap().expect("expired");
    assert!(lock.fencing_token().is_some_and(|t| t > 0), "a token from the server clock");
    lock.unlock().await.unwrap();
}

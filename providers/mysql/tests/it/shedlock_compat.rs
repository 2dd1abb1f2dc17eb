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
    sync::Arc,
    time::{Duration, SystemTime},
};

use shedlock::{Error, LockConfig, LockProvider};
use shedlock_mysql::{Flavor, MySqlDialect, MySqlLockProvider, recommended_pool_options};
use shedlock_test_support::{
    cfg,
    fleet::{self, utc_text},
    sql::jdbc::{self, JdbcLock, JdbcNode, JdbcStatements},
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

/// ShedLock's JDBC statements for this database, in database time (`usingDbTime()`, the
/// server's clock) or client time (the JVM's clock in UTC, see the module's documentation).
struct Statements;

/// A Java ShedLock node (one JVM host: its `locked_by`), on its own pool.
type JavaNode = JdbcNode<Statements>;

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

/// A Java node on its own pool.
async fn java_node(table: &str, locked_by: &str, db_time: bool) -> JavaNode {
    // A JDBC connection keeps the server's default session time zone.
    let opts = options().await.timezone(None);
    let pool = recommended_pool_options().connect_with(opts).await.unwrap();
    JdbcNode::new(pool, table, locked_by, db_time)
}

#[async_trait::async_trait]
impl JdbcStatements for Statements {
    type Pool = MySqlPool;

    async fn insert(node: &JavaNode, c: &LockConfig, now: SystemTime) -> bool {
        let t = &node.table;
        let r = if node.db_time {
            // MySqlServerTimeStatementsSource.getInsertStatement(): :name,
            // :lockAtMostForMicros, :lockedBy.
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT IGNORE INTO {t}(name, lock_until, locked_at, locked_by) VALUES(?, \
                 {AT_MOST}, {NOW}, ?)"
            )))
            .bind(c.name().to_owned())
            .bind(micros(c.lock_at_most_for()))
            .bind(node.locked_by.clone())
            .execute(&node.pool)
            .await
        } else {
            // SqlStatementsSource.getInsertStatement(): :name, :lockUntil, :now, :lockedBy.
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {t}(name, lock_until, locked_at, locked_by) VALUES(?, ?, ?, ?)"
            )))
            .bind(c.name().to_owned())
            .bind(ms(now + c.lock_at_most_for()))
            .bind(ms(now))
            .bind(node.locked_by.clone())
            .execute(&node.pool)
            .await
        };
        match r {
            Ok(done) => done.rows_affected() > 0,
            // ER_DUP_ENTRY: JDBC's SQLIntegrityConstraintViolationException, "not acquired".
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("23000") => false,
            Err(e) => panic!("Java insert: {e}"),
        }
    }

    async fn update(node: &JavaNode, c: &LockConfig, now: SystemTime) -> bool {
        let t = &node.table;
        let q = if node.db_time {
            // getUpdateStatement(): :lockAtMostForMicros, :lockedBy, :name.
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {t} SET lock_until = {AT_MOST}, locked_at = {NOW}, locked_by = ? WHERE \
                 name = ? AND lock_until <= {NOW}"
            )))
            .bind(micros(c.lock_at_most_for()))
            .bind(node.locked_by.clone())
            .bind(c.name().to_owned())
        } else {
            // :lockUntil, :now, :lockedBy, :name, :now.
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {t} SET lock_until = ?, locked_at = ?, locked_by = ? WHERE name = ? AND \
                 lock_until <= ?"
            )))
            .bind(ms(now + c.lock_at_most_for()))
            .bind(ms(now))
            .bind(node.locked_by.clone())
            .bind(c.name().to_owned())
            .bind(ms(now))
        };
        q.execute(&node.pool).await.unwrap().rows_affected() > 0
    }

    async fn unlock(node: &JavaNode, l: &JdbcLock) -> u64 {
        let t = &node.table;
        let q = if node.db_time {
            // :lockAtLeastForMicros (twice), :name, :lockedBy.
            let at_least = "TIMESTAMPADD(MICROSECOND, ?, locked_at)";
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {t} SET lock_until = IF ({at_least} > {NOW} , {at_least}, {NOW}) WHERE \
                 name = ? AND locked_by = ?"
            )))
            .bind(micros(l.at_least))
            .bind(micros(l.at_least))
            .bind(l.name.clone())
            .bind(node.locked_by.clone())
        } else {
            let unlock_time = l.unlock_time();
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {t} SET lock_until = ? WHERE name = ? AND locked_by = ?"
            )))
            .bind(ms(unlock_time))
            .bind(l.name.clone())
            .bind(node.locked_by.clone())
        };
        q.execute(&node.pool).await.unwrap().rows_affected()
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
        let what = format!("{flavor:?}");
        jdbc::each_acquisition_writes_its_own_locked_by_and_has_no_token(&a, &b, &what).await;
    }
}

#[tokio::test]
async fn the_wrong_mode_on_a_table_is_a_setup_error_that_says_which_mode_the_table_is_in() {
    let (native, shedlock) = (table(), table());
    let q = format!("SELECT (SELECT count(*) FROM {native}) + (SELECT count(*) FROM {shedlock})");
    let rows = async || sqlx::query_scalar(sqlx::AssertSqlSafe(q)).fetch_one(&pool().await).await;
    jdbc::the_wrong_mode_on_a_table_is_a_setup_error::<MySqlDialect>(
        pool,
        &native,
        &shedlock,
        async || rows().await.unwrap(),
    )
    .await;
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
    let java = async |db_time| java_node(&table, "java-host", db_time).await;
    // TIMESTAMP(3) keeps milliseconds: the client-time node truncates both ends.
    jdbc::a_row_written_by_a_java_node_is_judged_like_our_own(
        &ours,
        java,
        Duration::from_millis(1),
    )
    .await;
}

#[tokio::test]
async fn java_honours_our_lock_at_least_and_we_honour_a_java_one() {
    let table = table();
    let ours = compat(&table).await;
    let java = java_node(&table, "java-host", true).await;
    fleet::lock_at_least_for_binds_both_kinds(&ours, &java, |&rows| rows == 1).await;
}

#[tokio::test]
async fn a_forced_release_of_a_java_nodes_row_never_touches_its_next_acquisition() {
    let table = table();
    let ours = compat(&table).await;
    let java = java_node(&table, "java-host", true).await;
    jdbc::a_forced_release_of_a_java_row_never_touches_its_next_acquisition(&ours, &java).await;
}

#[tokio::test]
async fn stale_holders_of_either_kind_cannot_release_a_lock_the_other_kind_took_over() {
    let table = table();
    let ours = compat(&table).await;
    let java = java_node(&table, "java-host", true).await;
    jdbc::stale_holders_of_either_kind_cannot_release_a_takeover(&ours, &java).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_fleet_of_java_and_rust_nodes_never_has_two_holders() {
    let table = table();
    let mut ours = Vec::new();
    for flavor in [Flavor::MariaDb, Flavor::MariaDb, Flavor::MySql] {
        ours.push(Arc::new(compat_with(&table, flavor).await) as Arc<dyn LockProvider>);
    }
    let java = async |host: &str, db_time| java_node(&table, host, db_time).await;
    jdbc::a_mixed_fleet_never_has_two_holders(ours, java).await;
}

#[tokio::test]
async fn after_the_readme_migration_the_native_mode_honours_rows_written_by_java() {
    let table = table();
    compat(&table).await;
    let java = java_node(&table, "java-host", true).await;
    jdbc::after_the_migration_the_native_mode_honours_java_rows(&java, async || {
        // The README's migration, verbatim but for the table name, in a session on the fleet's
        // zone (here the server default, as the Java nodes use it).
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
        MySqlLockProvider::builder(pool().await).table(&table).build().unwrap()
    })
    .await;
}

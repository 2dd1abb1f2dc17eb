//! The ShedLock-compatible mode against a real PostgreSQL server: ShedLock's table, a Java
//! ShedLock node played by its exact statements, and a mixed fleet of both kinds of nodes
//! contending on the same names with the conformance kit's history checker watching.
//!
//! The Java node issues the statements of ShedLock's `shedlock-provider-jdbc-template` for
//! PostgreSQL (`PostgresSqlServerTimeStatementsSource` with `usingDbTime()`, and
//! `PostgresSqlStatementsSource` with `withTimeZone(UTC)`), its named parameters bound
//! positionally with the values ShedLock binds: durations as seconds (ShedLock binds a
//! `BigDecimal`, which the server casts to `make_interval`'s double precision; bound here as the
//! same double), times as UTC timestamps (PgJDBC sends them as text the server reads as
//! `timestamp`; here the text carries an explicit `::timestamp`). Its flow is ShedLock's
//! `StorageBasedLockProvider`: the INSERT the first time a name is tried, the UPDATE after that,
//! and an unlock by name and `locked_by`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant, SystemTime},
};

use shedlock::{LockConfig, LockProvider};
use shedlock_postgres::{PostgresDialect, PostgresLockProvider, recommended_pool_options};
use shedlock_test_support::{
    cfg,
    fleet::{Fleet, Node},
    sql::jdbc::{self, JdbcLock, JdbcNode, JdbcStatements},
    unique,
};
use sqlx::{PgPool, Row};

async fn url() -> String {
    shedlock_test_support::url(shedlock_launcher::Backend::Postgres, "PostgreSQL").await
}

async fn pool() -> PgPool {
    recommended_pool_options().connect(&url().await).await.expect("connect to PostgreSQL")
}

async fn compat(table: &str) -> PostgresLockProvider {
    let p = PostgresLockProvider::builder(pool().await)
        .table(table)
        .shedlock_compatible()
        .build()
        .unwrap();
    p.create_table().await.unwrap();
    p
}

/// `t` as ShedLock's PgJDBC parameter text: `YYYY-MM-DD HH:MM:SS.ffffff` in UTC.
fn utc_text(t: SystemTime) -> String {
    shedlock_test_support::fleet::utc_text(t, 6)
}

/// ShedLock's JDBC statements for this database, in database time (`usingDbTime()`, the
/// server's clock) or client time (the JVM's clock in UTC, see the module's documentation).
struct Statements;

/// A Java ShedLock node (one JVM host: its `locked_by`), on its own pool.
type JavaNode = JdbcNode<Statements>;

const NOW: &str = "timezone('utc', CURRENT_TIMESTAMP)";

/// A Java node on its own pool.
async fn java_node(table: &str, locked_by: &str, db_time: bool) -> JavaNode {
    JdbcNode::new(pool().await, table, locked_by, db_time)
}

#[async_trait::async_trait]
impl JdbcStatements for Statements {
    type Pool = PgPool;

    async fn insert(node: &JavaNode, c: &LockConfig, now: SystemTime) -> bool {
        let t = &node.table;
        let q = if node.db_time {
            // PostgresSqlServerTimeStatementsSource.getInsertStatement(): :name $1,
            // :lockAtMostForInterval $2, :lockedBy $3.
            let at_most = format!("{NOW} + make_interval(secs => $2)");
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {t}(name, lock_until, locked_at, locked_by) VALUES($1, {at_most}, \
                 {NOW}, $3) ON CONFLICT (name) DO UPDATE SET lock_until = {at_most}, locked_at = \
                 {NOW}, locked_by = $3 WHERE {t}.name = $1 AND {t}.lock_until <= {NOW}"
            )))
            .bind(c.name().to_owned())
            .bind(c.lock_at_most_for().as_secs_f64())
            .bind(node.locked_by.clone())
        } else {
            // PostgresSqlStatementsSource.getInsertStatement(): :name $1, :lockUntil $2,
            // :now $3, :lockedBy $4.
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {t}(name, lock_until, locked_at, locked_by) VALUES($1, \
                 $2::timestamp, $3::timestamp, $4) ON CONFLICT (name) DO UPDATE SET lock_until = \
                 $2::timestamp, locked_at = $3::timestamp, locked_by = $4 WHERE \
                 {t}.lock_until <= $3::timestamp"
            )))
            .bind(c.name().to_owned())
            .bind(utc_text(now + c.lock_at_most_for()))
            .bind(utc_text(now))
            .bind(node.locked_by.clone())
        };
        q.execute(&node.pool).await.unwrap().rows_affected() > 0
    }

    async fn update(node: &JavaNode, c: &LockConfig, now: SystemTime) -> bool {
        let t = &node.table;
        let q = if node.db_time {
            // getUpdateStatement(): "UPDATE " + tableName + updateClause().
            let at_most = format!("{NOW} + make_interval(secs => $2)");
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {t} SET lock_until = {at_most}, locked_at = {NOW}, locked_by = $3 WHERE \
                 {t}.name = $1 AND {t}.lock_until <= {NOW}"
            )))
            .bind(c.name().to_owned())
            .bind(c.lock_at_most_for().as_secs_f64())
            .bind(node.locked_by.clone())
        } else {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {t} SET lock_until = $2::timestamp, locked_at = $3::timestamp, locked_by \
                 = $4 WHERE name = $1 AND lock_until <= $3::timestamp"
            )))
            .bind(c.name().to_owned())
            .bind(utc_text(now + c.lock_at_most_for()))
            .bind(utc_text(now))
            .bind(node.locked_by.clone())
        };
        q.execute(&node.pool).await.unwrap().rows_affected() > 0
    }

    async fn unlock(node: &JavaNode, l: &JdbcLock) -> u64 {
        let t = &node.table;
        let q = if node.db_time {
            let at_least = "locked_at + make_interval(secs => $3)";
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {t} SET lock_until = CASE WHEN {at_least} > {NOW} THEN {at_least} ELSE \
                 {NOW} END WHERE name = $1 AND locked_by = $2"
            )))
            .bind(l.name.clone())
            .bind(node.locked_by.clone())
            .bind(l.at_least.as_secs_f64())
        } else {
            let unlock_time = l.unlock_time();
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {t} SET lock_until = $2::timestamp WHERE name = $1 AND locked_by = $3"
            )))
            .bind(l.name.clone())
            .bind(utc_text(unlock_time))
            .bind(node.locked_by.clone())
        };
        q.execute(&node.pool).await.unwrap().rows_affected()
    }
}

#[tokio::test]
async fn create_table_makes_shedlocks_documented_four_column_table() {
    let table = unique("compat_ddl");
    let p = compat(&table).await;
    let cols: Vec<(String, String)> = sqlx::query(
        "SELECT column_name::text, data_type::text FROM information_schema.columns \
         WHERE table_name = $1 ORDER BY ordinal_position",
    )
    .bind(&table)
    .fetch_all(&pool().await)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    let ts = "timestamp without time zone";
    assert_eq!(
        cols,
        [
            ("name".into(), "character varying".into()),
            ("lock_until".into(), ts.into()),
            ("locked_at".into(), ts.into()),
            ("locked_by".into(), "character varying".into()),
        ]
    );
    assert!(p.ddl().contains("PRIMARY KEY (\"name\")"), "{}", p.ddl());
    assert!(!p.capabilities().fencing, "no column for a token, so no fencing");
    assert!(p.capabilities().owner_checked && p.capabilities().server_time);
}

#[tokio::test]
async fn each_acquisition_writes_its_own_locked_by_and_has_no_fencing_token() {
    let table = unique("compat_row");
    let (a, b) = (compat(&table).await, compat(&table).await);
    jdbc::each_acquisition_writes_its_own_locked_by_and_has_no_token(&a, &b, "postgres").await;
}

#[tokio::test]
async fn the_wrong_mode_on_a_table_is_a_setup_error_that_says_which_mode_the_table_is_in() {
    let (native, shedlock) = (unique("native"), unique("shedlock"));
    let q = format!(
        "SELECT (SELECT count(*) FROM \"{native}\") + (SELECT count(*) FROM \"{shedlock}\")"
    );
    let rows = async || sqlx::query_scalar(sqlx::AssertSqlSafe(q)).fetch_one(&pool().await).await;
    jdbc::the_wrong_mode_on_a_table_is_a_setup_error::<PostgresDialect>(
        pool,
        &native,
        &shedlock,
        async || rows().await.unwrap(),
    )
    .await;
}

#[tokio::test]
async fn a_row_written_by_a_java_node_is_judged_like_our_own() {
    let table = unique("compat_java_row");
    let ours = compat(&table).await;
    let java = async |db_time| java_node(&table, "java-host", db_time).await;
    // The timestamps keep microseconds: under 1 ms off is at most 999 µs off.
    jdbc::a_row_written_by_a_java_node_is_judged_like_our_own(&ours, java, MICROS_UNDER_1_MS).await;
}

/// The largest difference under 1 ms between two PostgreSQL timestamps (whole microseconds).
const MICROS_UNDER_1_MS: Duration = Duration::from_micros(999);

#[tokio::test]
async fn a_forced_release_of_a_java_nodes_row_never_touches_its_next_acquisition() {
    let table = unique("compat_forced");
    let ours = compat(&table).await;
    let java = java_node(&table, "java-host", true).await;
    jdbc::a_forced_release_of_a_java_row_never_touches_its_next_acquisition(&ours, &java).await;
}

#[tokio::test]
async fn stale_holders_of_either_kind_cannot_release_a_lock_the_other_kind_took_over() {
    let table = unique("compat_stale");
    let ours = compat(&table).await;
    let java = java_node(&table, "java-host", true).await;
    jdbc::stale_holders_of_either_kind_cannot_release_a_takeover(&ours, &java).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_fleet_of_java_and_rust_nodes_never_has_two_holders() {
    let table = unique("compat_fleet");
    let mut ours = Vec::new();
    for p in compat_nodes(3, &table).await {
        ours.push(Arc::new(p) as Arc<dyn LockProvider>);
    }
    let java = async |host: &str, db_time| java_node(&table, host, db_time).await;
    jdbc::a_mixed_fleet_never_has_two_holders(ours, java).await;
}

#[tokio::test]
async fn after_the_readme_migration_the_native_mode_honours_rows_written_by_java() {
    let table = unique("compat_migrate");
    compat(&table).await;
    let java = java_node(&table, "java-host", true).await;
    jdbc::after_the_migration_the_native_mode_honours_java_rows(&java, async || {
        // The README's migration, verbatim but for the table name.
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE \"{table}\"
             ALTER COLUMN lock_until TYPE TIMESTAMPTZ USING lock_until AT TIME ZONE 'UTC',
             ALTER COLUMN locked_at TYPE TIMESTAMPTZ USING locked_at AT TIME ZONE 'UTC',
             ADD COLUMN acquisition_id BIGINT NOT NULL DEFAULT 0,
             ADD COLUMN fencing_token BIGINT NOT NULL DEFAULT 0;"
        )))
        .execute(&pool().await)
        .await
        .unwrap();
        PostgresLockProvider::builder(pool().await).table(&table).build().unwrap()
    })
    .await;
}

/// Now on `CLOCK_MONOTONIC`, in nanoseconds: the clock of Rust's `Instant` and of Java's
/// `System.nanoTime()` on Linux, so the Java nodes' events can be placed in this history.
fn monotonic_nanos() -> i128 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// The JDBC URL, user and password of the test server's URL (`postgres://user[:pw]@host:port/db`).
fn jdbc(url: &str) -> (String, String, String) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let (auth, hostpart) = rest.rsplit_once('@').unwrap_or(("postgres", rest));
    let (user, password) = auth.split_once(':').unwrap_or((auth, "-"));
    let hostpart = hostpart.split('?').next().unwrap_or(hostpart);
    (format!("jdbc:postgresql://{hostpart}"), user.to_owned(), password.to_owned())
}

/// PgJDBC: `$SHEDLOCK_PGJDBC_JAR`, else Debian's `libpostgresql-jdbc-java`.
fn pgjdbc_jar() -> std::path::PathBuf {
    let jar = std::env::var_os("SHEDLOCK_PGJDBC_JAR")
        .map_or_else(|| "/usr/share/java/postgresql.jar".into(), std::path::PathBuf::from);
    assert!(
        jar.is_file(),
        "PgJDBC not found at {}: install it with `apt-get install libpostgresql-jdbc-java` (cargo \
         xtask provision does), or set SHEDLOCK_PGJDBC_JAR",
        jar.display()
    );
    jar
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_nodes_through_pgjdbc_and_rust_nodes_never_have_two_holders() {
    use std::process::{Command, Stdio};
    let jar = pgjdbc_jar();
    let classes = std::env::temp_dir().join(unique("shedlock-jdbc-node"));
    std::fs::create_dir_all(&classes).unwrap();
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/java/ShedLockJdbcNode.java");
    let javac = Command::new("javac").arg("-d").arg(&classes).arg(source).status();
    match javac {
        Ok(s) if s.success() => {}
        other => panic!(
            "javac failed ({other:?}): install a JDK with `apt-get install \
             openjdk-17-jdk-headless` (cargo xtask provision does)"
        ),
    }

    let table = unique("compat_jdbc");
    let rust: Vec<_> = compat_nodes(3, &table).await;
    let fleet = Fleet::new();
    let (url, user, password) = jdbc(&url().await);
    let base_instant = Instant::now();
    let base_nanos = monotonic_nanos();
    let classpath = format!("{}:{}", jar.display(), classes.display());
    let java: Vec<_> = (0..2)
        .map(|i| {
            Command::new("java")
                .args(["-cp", &classpath, "ShedLockJdbcNode", &url, &user, &password, &table])
                .arg(format!("java-jdbc-host-{i}"))
                .arg("5000")
                .arg(fleet.names.join(","))
                .arg(format!("{}", 17 + i))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start java")
        })
        .collect();
    // The Rust nodes contend while the JVMs run (they start in well under a second).
    let until = Instant::now() + Duration::from_millis(5_500);
    let tasks: Vec<_> = rust
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let node = Node::<JavaNode>::Ours(Arc::new(p));
            tokio::spawn(fleet.clone().contend("rust", i, node, until))
        })
        .collect();
    let outputs = tokio::task::spawn_blocking(move || {
        java.into_iter().map(|c| c.wait_with_output().unwrap()).collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let at = |nanos: i128| {
        let d = Duration::from_nanos(u64::try_from(nanos - base_nanos).expect("after the base"));
        base_instant + d
    };
    for (i, out) in outputs.iter().enumerate() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("DONE "),
            "Java node {i} failed ({}): {}\n{stdout}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let mut ids = std::collections::HashMap::new();
        for line in stdout.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            match f[..] {
                ["ACQ", n, name, start, end, at_most, at_least] => {
                    let c = cfg(name, at_most.parse().unwrap(), at_least.parse().unwrap());
                    let (s, e) = (at(start.parse().unwrap()), at(end.parse().unwrap()));
                    let id = fleet.history.acquired(format!("java-jdbc node {i}"), &c, s, e);
                    fleet.wins[1].fetch_add(1, Ordering::Relaxed);
                    ids.insert(n.to_owned(), id);
                }
                ["REL", n, start] => fleet.history.released(ids[n], at(start.parse().unwrap())),
                _ => {}
            }
        }
    }
    let _ = std::fs::remove_dir_all(&classes);
    fleet.verify(10);
}

/// `n` compatible providers on `table`, each on its own pool.
async fn compat_nodes(n: usize, table: &str) -> Vec<PostgresLockProvider> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(compat(table).await);
    }
    v
}

//! Provider-level tests against a real MariaDB server (MySQL dialect).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common {
    pub use shedlock_test_support::{FaultProxy, unique};

    /// The MariaDB server's URL: `$SHEDLOCK_MARIADB_URL` if set, else a server the launcher
    /// starts once per test process. A missing server fails the test, never skips it.
    pub async fn url() -> String {
        shedlock_test_support::url(shedlock_launcher::Backend::MariaDb, "MariaDB").await
    }
}

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, SystemTime},
};

use common::{FaultProxy, unique};
use shedlock::{Error, LockConfig, LockProvider};
use shedlock_mysql::{Flavor, MySqlDialect, MySqlLockProvider, recommended_pool_options};
use shedlock_test_support::{cfg, sql};
use sqlx::{Executor, MySqlPool, mysql::MySqlConnectOptions};
use tokio::sync::OnceCell;

const DB: &str = "shedlock_test";

async fn ensure_db() {
    static DONE: OnceCell<()> = OnceCell::const_new();
    DONE.get_or_init(|| async {
        let pool = recommended_pool_options()
            .connect(&common::url().await)
            .await
            .expect("connect to MariaDB");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE IF NOT EXISTS {DB}")))
            .execute(&pool)
            .await
            .unwrap();
    })
    .await;
}

async fn pool() -> MySqlPool {
    ensure_db().await;
    recommended_pool_options().connect(&common::url().await).await.expect("connect to MariaDB")
}

fn table() -> String {
    format!("{DB}.{}", unique("t"))
}

async fn provider_on(pool: MySqlPool, table: &str, flavor: Flavor) -> MySqlLockProvider {
    let p = MySqlLockProvider::builder(pool).table(table).option(flavor).build().unwrap();
    p.create_table().await.unwrap();
    p
}

/// A fresh table and two independent providers (separate pools, like two nodes).
async fn two_nodes_with(flavor: Flavor) -> (MySqlLockProvider, MySqlLockProvider) {
    let table = table();
    let a = provider_on(pool().await, &table, flavor).await;
    let b = provider_on(pool().await, &table, flavor).await;
    (a, b)
}

async fn two_nodes() -> (MySqlLockProvider, MySqlLockProvider) {
    two_nodes_with(Flavor::Detect).await
}

async fn server_addr() -> SocketAddr {
    let opts: MySqlConnectOptions = common::url().await.parse().unwrap();
    let host = match opts.get_host() {
        "localhost" => "127.0.0.1",
        h => h,
    };
    format!("{host}:{}", opts.get_port()).parse().unwrap()
}

async fn round_trips(flavor: Flavor) -> Vec<u64> {
    ensure_db().await;
    let proxy = FaultProxy::start(server_addr().await).await.unwrap();
    let opts: MySqlConnectOptions = common::url()
        .await
        .parse::<MySqlConnectOptions>()
        .unwrap()
        .host("127.0.0.1")
        .port(proxy.addr().port());
    let pool = recommended_pool_options().max_connections(1).connect_with(opts).await.unwrap();
    let p = provider_on(pool, &table(), flavor).await;

    sql::round_trips_of_each_call(&p, &proxy, &format!("{flavor:?}")).await
}

#[tokio::test]
async fn mariadb_acquire_unlock_extend_are_one_round_trip_each() {
    assert_eq!(round_trips(Flavor::MariaDb).await, vec![1, 1, 1, 1, 1]);
}

#[tokio::test]
async fn mysql_flavor_acquire_is_two_round_trips() {
    // The MySQL path (no RETURNING): upsert, then a primary-key SELECT.
    assert_eq!(round_trips(Flavor::MySql).await, vec![2, 2, 1, 1, 2]);
}

#[tokio::test]
async fn flavor_is_detected() {
    let (a, _) = two_nodes().await;
    assert_eq!(a.dialect().flavor(), None);
    let _ = a.try_lock(&cfg("detect", 1000, 0)).await.unwrap();
    assert_eq!(a.dialect().flavor(), Some(Flavor::MariaDb));
}

#[tokio::test]
async fn one_winner_and_release_both_flavors() {
    // The conformance suite runs the MariaDB path by default; this runs MySQL 8's two-statement
    // acquire too (the conformance suite `mariadb-mysql-flavor` runs the whole catalogue on it).
    for flavor in [Flavor::MariaDb, Flavor::MySql] {
        let (a, b) = two_nodes_with(flavor).await;
        let c = cfg("job", 60_000, 0);
        let lock = a.try_lock(&c).await.unwrap().expect("free");
        assert!(b.try_lock(&c).await.unwrap().is_none(), "{flavor:?}: held elsewhere");
        assert!(a.try_lock(&c).await.unwrap().is_none(), "{flavor:?}: not reentrant");
        lock.unlock().await.unwrap();
        let lock = b.try_lock(&c).await.unwrap().expect("free after unlock");
        lock.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn stale_holder_cannot_unlock_or_extend() {
    for flavor in [Flavor::MariaDb, Flavor::MySql] {
        let (a, b) = two_nodes_with(flavor).await;
        sql::stale_holder_cannot_unlock_or_extend(&a, &b, &*a.records()).await;
    }
}

#[tokio::test]
async fn at_least_is_kept_from_locked_at() {
    let (a, b) = two_nodes().await;
    sql::at_least_is_kept_from_locked_at(&a, &b, &*a.records()).await;
}

#[tokio::test]
async fn lock_until_keeps_milliseconds() {
    let (a, _) = two_nodes().await;
    sql::lock_until_keeps_milliseconds(&a, &*a.records()).await;
    // A sub-millisecond fraction rounds up, never down. (A lease long enough that no round trip
    // outlives it: a 1.5 ms lease was answered after it ended on a loaded machine, and the core
    // then released the late grant before the record could be read.)
    let l = a
        .try_lock(
            &LockConfig::new("sub", Duration::from_micros(60_000_500), Duration::ZERO).unwrap(),
        )
        .await
        .unwrap()
        .expect("a fresh name");
    let rec = a.record("sub").await.unwrap().unwrap();
    assert_eq!(
        rec.lock_until.duration_since(rec.locked_at).unwrap(),
        Duration::from_millis(60_001)
    );
    l.unlock().await.unwrap();
}

#[tokio::test]
async fn session_time_zone_is_never_consulted() {
    ensure_db().await;
    let table = table();
    let tz_pool = |tz: &'static str| {
        recommended_pool_options().after_connect(move |conn, _| {
            Box::pin(async move {
                conn.execute(sqlx::AssertSqlSafe(format!("SET time_zone = '{tz}'"))).await?;
                Ok(())
            })
        })
    };
    let east = tz_pool("+09:00").connect(&common::url().await).await.unwrap();
    let west = tz_pool("-07:00").connect(&common::url().await).await.unwrap();
    let a = provider_on(east, &table, Flavor::Detect).await;
    let b = provider_on(west, &table, Flavor::Detect).await;
    let lock = a.try_lock(&cfg("tz", 2_000, 0)).await.unwrap().unwrap();
    assert!(b.try_lock(&cfg("tz", 60_000, 0)).await.unwrap().is_none());
    let rec = b.record("tz").await.unwrap().unwrap();
    // Stored in UTC: within seconds of the real time, not hours off.
    let now = SystemTime::now();
    let diff = rec.locked_at.duration_since(now).unwrap_or_else(|e| e.duration());
    assert!(diff < Duration::from_secs(5), "locked_at off by {diff:?}");
    lock.unlock().await.unwrap();
    assert!(b.try_lock(&cfg("tz", 60_000, 0)).await.unwrap().is_some());
}

#[tokio::test]
async fn a_missing_table_is_a_setup_error_quoting_the_ddl_from_try_lock_and_check() {
    let p = MySqlLockProvider::builder(pool().await)
        .table(format!("{DB}.{}", unique("missing")))
        .build()
        .unwrap();
    sql::missing_table_is_a_setup_error_quoting_the_ddl(&p, p.ddl()).await;
    let p2 = MySqlLockProvider::builder(pool().await)
        .table(format!("{}.shedlock", unique("nodb")))
        .build()
        .unwrap();
    assert!(matches!(p2.try_lock(&cfg("x", 1000, 0)).await, Err(Error::Setup { .. })));
    p.create_table().await.unwrap();
    p.check().await.unwrap();
}

#[tokio::test]
async fn identifiers_are_validated() {
    let valid =
        [format!("{DB}.select"), format!("{DB}.MixedCase_{}", unique("m")), format!("{DB}._x")];
    sql::identifiers_are_validated::<MySqlDialect>(pool().await, '`', "key", &valid).await;
}

#[tokio::test]
async fn long_names_are_rejected_not_truncated() {
    let (a, b) = two_nodes().await;
    sql::long_names_are_rejected_not_truncated(&a, &b, &*a.records()).await;

    // A table whose column is shorter than configured, with a NON-strict session sql_mode: the
    // statement still runs strict, so the server refuses instead of truncating into a collision.
    let table = table();
    let short =
        MySqlLockProvider::builder(pool().await).table(&table).max_name_len(10).build().unwrap();
    short.create_table().await.unwrap();
    assert!(short.ddl().contains("VARBINARY(10)"));
    assert!(matches!(
        short.try_lock(&cfg("0123456789a", 1000, 0)).await,
        Err(Error::InvalidName { .. })
    ));
    for flavor in [Flavor::MariaDb, Flavor::MySql] {
        let lax = recommended_pool_options()
            .after_connect(|conn, _| {
                Box::pin(async move {
                    conn.execute("SET SESSION sql_mode = ''").await?;
                    Ok(())
                })
            })
            .connect(&common::url().await)
            .await
            .unwrap();
        let q = MySqlLockProvider::builder(lax).table(&table).option(flavor).build().unwrap();
        if flavor == Flavor::MariaDb {
            assert!(q.try_lock(&cfg("0123456789", 60_000, 0)).await.unwrap().is_some());
        }
        let r = q.try_lock(&cfg("0123456789ab", 60_000, 0)).await;
        if flavor == Flavor::MariaDb {
            assert!(matches!(r, Err(Error::InvalidName { .. })), "{flavor:?}: {r:?}");
        } else {
            // MariaDB ignores MySQL's SET_VAR hint, so under a lax session mode the MySQL
            // flavor's upsert truncates here; the owner check then sees that the row is not ours
            // (the truncated name is held): refused, never a false "acquired". On MySQL 8 the
            // hint makes it an InvalidName error.
            assert!(matches!(r, Ok(None) | Err(Error::InvalidName { .. })), "{flavor:?}: {r:?}");
        }
    }
}

#[tokio::test]
async fn hostile_names_are_stored_and_matched_exactly() {
    let (a, b) = two_nodes().await;
    sql::hostile_names_are_stored_and_matched_exactly(&a, &b, &*a.records(), false).await;
}

#[tokio::test]
async fn deleted_row_is_recreated_with_a_larger_token() {
    let (a, b) = two_nodes().await;
    sql::deleted_row_is_recreated_with_a_larger_token(&a, &b, &*a.records()).await;
}

#[tokio::test]
async fn racing_nodes_have_one_winner_per_round() {
    let table = table();
    let mut nodes = Vec::new();
    for _ in 0..6 {
        nodes.push(Arc::new(provider_on(pool().await, &table, Flavor::Detect).await));
    }
    sql::racing_nodes_have_one_winner_per_round(&nodes, 30).await;
}

#[tokio::test]
async fn lock_statements_do_not_join_a_callers_transaction() {
    let pool = pool().await;
    let table = table();
    let p = provider_on(pool.clone(), &table, Flavor::Detect).await;
    let observer = provider_on(self::pool().await, &table, Flavor::Detect).await;
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
    let lock = p.try_lock(&cfg("tx", 60_000, 0)).await.unwrap().unwrap();
    assert!(observer.record("tx").await.unwrap().is_some(), "visible before the caller commits");
    tx.rollback().await.unwrap();
    assert!(
        observer.try_lock(&cfg("tx", 60_000, 0)).await.unwrap().is_none(),
        "rollback did not undo it"
    );
    lock.unlock().await.unwrap();
}

#[tokio::test]
async fn database_time_ignores_client_skew_client_time_does_not() {
    sql::database_time_ignores_client_skew_client_time_does_not::<MySqlDialect>(pool, &table())
        .await;
}

#[tokio::test]
async fn an_unreachable_server_a_wrong_password_and_tls_required_are_errors_that_say_why() {
    use shedlock_test_support::unreachable::{assert_both_say, assert_named, cases};
    let base: MySqlConnectOptions = common::url().await.parse().unwrap();
    let lazy = |opts: MySqlConnectOptions, flavor: Flavor| {
        let pool = recommended_pool_options()
            .acquire_timeout(Duration::from_secs(1))
            .connect_lazy_with(opts);
        MySqlLockProvider::builder(pool).option(flavor).build().unwrap()
    };
    // The cause survives sqlx's "pool timed out": the probe's connect error is named. Detecting
    // the flavor needs the server too: the same error.
    for (case, host, port, expected) in cases(3306) {
        for flavor in [Flavor::MariaDb, Flavor::Detect] {
            let p = lazy(base.clone().host(&host).port(port), flavor);
            assert_named(&p, &format!("{case} ({flavor:?})"), expected).await;
        }
    }
    let root = pool().await;
    let user = unique("pw").replace('-', "_");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE USER '{user}'@'%' IDENTIFIED BY 'right-password'"
    )))
    .execute(&root)
    .await
    .unwrap();
    let wrong = lazy(base.clone().username(&user).password("wrong-password"), Flavor::MariaDb);
    assert_both_say(&wrong, "a wrong password", &["access denied"]).await;
    let e = wrong.try_lock(&cfg("pw", 60_000, 0)).await.map(drop).unwrap_err();
    assert!(matches!(e, Error::Setup { .. }), "refused credentials are a setup error: {e:?}");
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP USER '{user}'@'%'")))
        .execute(&root)
        .await
        .unwrap();
    // TLS required, where it cannot be had: these tests build sqlx without a TLS backend (a
    // user's own sqlx features decide).
    let tls = lazy(base.ssl_mode(sqlx::mysql::MySqlSslMode::Required), Flavor::MariaDb);
    assert_both_say(&tls, "TLS required", &["tls", "ssl"]).await;
}

#[tokio::test]
async fn dropped_acquire_leaves_no_bad_connection() {
    ensure_db().await;
    let pool =
        recommended_pool_options().max_connections(1).connect(&common::url().await).await.unwrap();
    let p = provider_on(pool, &table(), Flavor::Detect).await;
    sql::dropped_acquire_leaves_no_bad_connection(&p).await;
}

/// Options for a pool that connects through `proxy` to its own database `db` (created here), so
/// that the server's process list tells its connections apart.
async fn via(proxy: SocketAddr, db: &str) -> MySqlConnectOptions {
    let admin = pool().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE IF NOT EXISTS {db}")))
        .execute(&admin)
        .await
        .unwrap();
    common::url()
        .await
        .parse::<MySqlConnectOptions>()
        .unwrap()
        .host("127.0.0.1")
        .port(proxy.port())
        .database(db)
}

#[tokio::test]
async fn pooled_statements_still_work() {
    for flavor in [Flavor::MariaDb, Flavor::MySql] {
        let table = table();
        let node = async || {
            let p = MySqlLockProvider::builder(pool().await)
                .table(&table)
                .option(flavor)
                .dedicated_connection(false)
                .build()
                .unwrap();
            p.create_table().await.unwrap();
            p
        };
        let (a, b) = (node().await, node().await);
        sql::one_winner_and_release(&a, &b).await;
        sql::stale_holder_cannot_unlock_or_extend(&a, &b, &*a.records()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_operations_on_one_provider_do_not_queue() {
    ensure_db().await;
    let pool = recommended_pool_options().max_connections(2).connect(&common::url().await).await;
    let p = Arc::new(provider_on(pool.unwrap(), &table(), Flavor::Detect).await);
    // 40 locks at once: one runs on the dedicated connection, the others on the pool.
    sql::concurrent_calls_on_one_provider(p, 40).await;
}

#[tokio::test]
async fn a_killed_connection_is_replaced() {
    // The server kills the provider's idle connection (KILL, as an operator or a restart
    // would): the next call may fail with a retryable error (MariaDB closes the socket without
    // a word, so the outcome of a statement sent on it is unknown and it is not repeated), and
    // the call after that works on a fresh connection.
    let proxy = FaultProxy::start(server_addr().await).await.unwrap();
    let db = unique("kill");
    let pool = recommended_pool_options().connect_lazy_with(via(proxy.addr(), &db).await);
    let p = provider_on(pool, &table(), Flavor::Detect).await;
    let admin = self::pool().await;
    for round in 0..3 {
        let l = p.try_lock(&cfg(&format!("before{round}"), 60_000, 0)).await.unwrap().unwrap();
        l.unlock().await.unwrap();
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()",
        )
        .bind(&db)
        .fetch_all(&admin)
        .await
        .unwrap();
        assert!(!ids.is_empty(), "round {round}: the provider's connection was not found");
        for id in ids {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL CONNECTION {id}")))
                .execute(&admin)
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let name = format!("after{round}");
        let r = p.try_lock(&cfg(&name, 60_000, 0)).await;
        println!("round {round}: the call after KILL: {:?}", r.as_ref().map(Option::is_some));
        match r {
            Ok(l) => l.expect("a fresh name").unlock().await.unwrap(),
            Err(e) => {
                assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
                // Whether or not it ran, the name is free or ours: the retry takes it.
                let l = p.try_lock(&cfg(&name, 60_000, 0)).await.unwrap();
                if let Some(l) = l {
                    l.unlock().await.unwrap();
                }
                let l = p.try_lock(&cfg(&unique("fresh"), 60_000, 0)).await.unwrap();
                l.expect("works again").unlock().await.unwrap();
            }
        }
    }
}

#[tokio::test]
async fn a_connection_lost_mid_statement_fails_once_then_recovers() {
    let proxy =
        shedlock_conformance::tools::proxy::FaultProxy::start(server_addr().await).await.unwrap();
    ensure_db().await;
    let opts = via(proxy.addr(), DB).await;
    let p =
        provider_on(recommended_pool_options().connect_lazy_with(opts), &table(), Flavor::Detect)
            .await;
    sql::a_lost_connection_fails_once_then_recovers(&p, &proxy).await;
}

#[tokio::test]
async fn the_dedicated_connection_follows_the_pool_idle_timeout_and_closing() {
    let proxy =
        shedlock_conformance::tools::proxy::FaultProxy::start(server_addr().await).await.unwrap();
    ensure_db().await;
    let pool = recommended_pool_options()
        .idle_timeout(Duration::from_millis(300))
        .connect_lazy_with(via(proxy.addr(), DB).await);
    // The table is created elsewhere, so that only the dedicated connection uses this pool.
    let table = table();
    provider_on(self::pool().await, &table, Flavor::MariaDb).await;
    let p = MySqlLockProvider::builder(pool.clone()).table(&table).option(Flavor::MariaDb).build();
    let p = p.unwrap();
    sql::the_dedicated_connection_follows_idle_timeout_and_closing(&p, &proxy, async || {
        pool.close().await
    })
    .await;
}

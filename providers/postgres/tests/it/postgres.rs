//! Provider-level tests against a real PostgreSQL server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common {
    pub use shedlock_test_support::{FaultProxy, unique};

    /// The PostgreSQL server's URL: `$SHEDLOCK_POSTGRES_URL` if set, else a server the launcher
    /// starts once per test process. A missing server fails the test, never skips it.
    pub async fn url() -> String {
        shedlock_test_support::url(shedlock_launcher::Backend::Postgres, "PostgreSQL").await
    }
}

use std::{net::SocketAddr, sync::Arc, time::Duration};

use common::{FaultProxy, unique};
use shedlock::{Error, LockProvider};
use shedlock_postgres::{PostgresDialect, PostgresLockProvider, recommended_pool_options};
use shedlock_test_support::{cfg, sql};
use sqlx::{Connection, PgPool, postgres::PgConnectOptions};

async fn pool() -> PgPool {
    recommended_pool_options().connect(&common::url().await).await.expect("connect to PostgreSQL")
}

async fn provider_on(pool: PgPool, table: &str) -> PostgresLockProvider {
    let p = PostgresLockProvider::builder(pool).table(table).build().unwrap();
    p.create_table().await.unwrap();
    p
}

/// A fresh table and two independent providers (separate pools, like two nodes).
async fn two_nodes() -> (PostgresLockProvider, PostgresLockProvider) {
    let table = unique("t");
    let a = provider_on(pool().await, &table).await;
    let b = provider_on(pool().await, &table).await;
    (a, b)
}

async fn server_addr() -> SocketAddr {
    let opts: PgConnectOptions = common::url().await.parse().unwrap();
    let host = match opts.get_host() {
        "localhost" => "127.0.0.1",
        h => h,
    };
    format!("{host}:{}", opts.get_port()).parse().unwrap()
}

#[tokio::test]
async fn acquire_unlock_extend_are_one_round_trip_each() {
    let proxy = FaultProxy::start(server_addr().await).await.unwrap();
    let opts: PgConnectOptions = common::url()
        .await
        .parse::<PgConnectOptions>()
        .unwrap()
        .host("127.0.0.1")
        .port(proxy.addr().port());
    let pool = recommended_pool_options().max_connections(1).connect_with(opts).await.unwrap();
    let p = provider_on(pool, &unique("rt")).await;
    let other = provider_on(self::pool().await, p_table(&p)).await;

    let counts = sql::round_trips_of_each_call(&p, &proxy, "postgres").await;
    // Acquire (no row: insert path; held: conflict path, refused), extend, unlock, acquire
    // (free row: conflict path, taken over).
    assert_eq!(counts, [1, 1, 1, 1, 1]);
    drop(other);
}

fn p_table(p: &PostgresLockProvider) -> &str {
    // The DDL names the table: `CREATE TABLE IF NOT EXISTS "x" (`.
    let ddl = p.ddl();
    let start = ddl.find('"').unwrap() + 1;
    let end = start + ddl[start..].find('"').unwrap();
    &ddl[start..end]
}

#[tokio::test]
async fn stale_holder_cannot_unlock_or_extend() {
    let (a, b) = two_nodes().await;
    sql::stale_holder_cannot_unlock_or_extend(&a, &b, &*a.records()).await;
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
}

#[tokio::test]
async fn a_missing_table_is_a_setup_error_quoting_the_ddl_from_try_lock_and_check() {
    let p = PostgresLockProvider::builder(pool().await).table(unique("missing")).build().unwrap();
    sql::missing_table_is_a_setup_error_quoting_the_ddl(&p, p.ddl()).await;
    let p2 = PostgresLockProvider::builder(pool().await)
        .table(format!("{}.shedlock", unique("noschema")))
        .build()
        .unwrap();
    assert!(matches!(p2.try_lock(&cfg("x", 1000, 0)).await, Err(Error::Setup { .. })));
    p.create_table().await.unwrap();
    p.check().await.unwrap();
}

#[tokio::test]
async fn identifiers_are_validated() {
    let pool = pool().await;
    // Valid ones work against the server, reserved words and mixed case included (quoted).
    let schema = unique("s");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
        .execute(&pool)
        .await
        .unwrap();
    let valid = [
        format!("{schema}.locks"),
        format!("{schema}.select"),
        format!("{schema}.MixedCase"),
        "_x".into(),
    ];
    sql::identifiers_are_validated::<PostgresDialect>(pool, '"', "user", &valid).await;
}

#[tokio::test]
async fn long_names_are_rejected_not_truncated() {
    let (a, b) = two_nodes().await;
    sql::long_names_are_rejected_not_truncated(&a, &b, &*a.records()).await;

    // A smaller configured maximum sizes the column and is enforced client-side.
    let table = unique("short");
    let p =
        PostgresLockProvider::builder(pool().await).table(&table).max_name_len(10).build().unwrap();
    p.create_table().await.unwrap();
    assert!(p.ddl().contains("VARCHAR(10)"));
    assert!(p.try_lock(&cfg("0123456789", 1000, 0)).await.unwrap().is_some());
    assert!(matches!(
        p.try_lock(&cfg("0123456789a", 1000, 0)).await,
        Err(Error::InvalidName { .. })
    ));
    // A table whose column is shorter than configured: the server's refusal is InvalidName too.
    let q = PostgresLockProvider::builder(pool().await).table(&table).build().unwrap();
    assert!(matches!(
        q.try_lock(&cfg("0123456789ab", 1000, 0)).await,
        Err(Error::InvalidName { .. })
    ));
}

#[tokio::test]
async fn hostile_names_are_stored_and_matched_exactly() {
    let (a, b) = two_nodes().await;
    sql::hostile_names_are_stored_and_matched_exactly(&a, &b, &*a.records(), true).await;
}

#[tokio::test]
async fn deleted_row_is_recreated_with_a_larger_token() {
    let (a, b) = two_nodes().await;
    sql::deleted_row_is_recreated_with_a_larger_token(&a, &b, &*a.records()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_nodes_have_one_winner_per_round() {
    // Six nodes, each with its own pool, race for a fresh name on their own tasks, 30 times.
    let table = unique("race");
    let mut nodes = Vec::new();
    for _ in 0..6 {
        nodes.push(Arc::new(provider_on(pool().await, &table).await));
    }
    sql::racing_nodes_have_one_winner_per_round(&nodes, 30).await;
}

#[tokio::test]
async fn lock_statements_do_not_join_a_callers_transaction() {
    let pool = pool().await;
    let table = unique("tx");
    let p = provider_on(pool.clone(), &table).await;
    let observer = provider_on(self::pool().await, &table).await;

    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
    let lock = p.try_lock(&cfg("tx", 60_000, 0)).await.unwrap().unwrap();
    // Visible to another connection before the caller's transaction ends: autocommit.
    assert!(observer.record("tx").await.unwrap().is_some());
    tx.rollback().await.unwrap();
    assert!(observer.record("tx").await.unwrap().is_some(), "caller's rollback did not undo it");
    assert!(observer.try_lock(&cfg("tx", 60_000, 0)).await.unwrap().is_none());
    lock.unlock().await.unwrap();

    // The same with a single-connection transaction opened by hand on one connection.
    let mut conn = sqlx::PgConnection::connect(&common::url().await).await.unwrap();
    let tx = conn.begin().await.unwrap();
    let l2 = p.try_lock(&cfg("tx2", 60_000, 0)).await.unwrap().unwrap();
    tx.rollback().await.unwrap();
    assert!(observer.try_lock(&cfg("tx2", 60_000, 0)).await.unwrap().is_none());
    l2.unlock().await.unwrap();
}

#[tokio::test]
async fn database_time_ignores_client_skew_client_time_does_not() {
    sql::database_time_ignores_client_skew_client_time_does_not::<PostgresDialect>(
        pool,
        &unique("skew"),
    )
    .await;
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_and_the_message_says_why() {
    use shedlock_test_support::unreachable::{assert_both_say, assert_named, cases};
    let base: PgConnectOptions = common::url().await.parse().unwrap();
    let lazy = |opts: PgConnectOptions| {
        let pool = recommended_pool_options()
            .acquire_timeout(Duration::from_secs(1))
            .connect_lazy_with(opts);
        PostgresLockProvider::builder(pool).build().unwrap()
    };
    // The cause survives sqlx's "pool timed out": the probe's connect error is named.
    for (case, host, port, expected) in cases(5432) {
        assert_named(&lazy(base.clone().host(&host).port(port)), case, expected).await;
    }
    // TLS required, where it cannot be had: these tests build sqlx without a TLS backend (a
    // user's own sqlx features decide; the test server also runs with `ssl = off`).
    let tls = lazy(base.ssl_mode(sqlx::postgres::PgSslMode::Require));
    assert_both_say(&tls, "TLS required", &["tls"]).await;
}

#[tokio::test]
async fn a_wrong_password_fails_saying_the_password_was_refused() {
    use shedlock_launcher::PG_PASSWORD_ROLE;
    use shedlock_test_support::unreachable::assert_both_say;
    let base: PgConnectOptions = common::url().await.parse().unwrap();
    // A role that must give its password: the launcher's server asks it of this role alone
    // (a scram-sha-256 rule in pg_hba.conf), a Docker one of every role.
    let admin = PgPool::connect_with(base.clone()).await.unwrap();
    let create = format!(
        "DO $$ BEGIN CREATE ROLE {PG_PASSWORD_ROLE} LOGIN PASSWORD 'right'; \
         EXCEPTION WHEN duplicate_object THEN NULL; END $$"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(create)).execute(&admin).await.unwrap();
    let as_role = base.username(PG_PASSWORD_ROLE);
    let right = PgPool::connect_with(as_role.clone().password("right")).await;
    assert!(right.is_ok(), "the right password must be accepted: {:?}", right.err());
    let pool = recommended_pool_options()
        .acquire_timeout(Duration::from_secs(1))
        .connect_lazy_with(as_role.password("wrong"));
    let p = PostgresLockProvider::builder(pool).build().unwrap();
    // A server that trusts every connection (no password rule) would let this call through.
    assert_both_say(&p, "a wrong password", &["password authentication failed"]).await;
    // Not retryable, and the server's words without sqlx's "at line 334" (auth.c's line).
    let e = p.try_lock(&cfg("pw", 60_000, 0)).await.map(drop).unwrap_err();
    assert!(matches!(e, Error::Setup { .. }), "{e:?}");
    assert!(!e.to_string().contains("at line"), "{e}");
}

#[tokio::test]
async fn dropped_acquire_leaves_no_bad_connection() {
    let pool =
        recommended_pool_options().max_connections(1).connect(&common::url().await).await.unwrap();
    let table = unique("cancel");
    let p = provider_on(pool, &table).await;
    // Drop acquire futures at different points; the single connection must stay usable.
    sql::dropped_acquire_leaves_no_bad_connection(&p).await;
}

/// A provider whose pool connects through `proxy`, with a unique `application_name`.
async fn via(proxy: SocketAddr, app: &str) -> PgConnectOptions {
    common::url()
        .await
        .parse::<PgConnectOptions>()
        .unwrap()
        .host("127.0.0.1")
        .port(proxy.port())
        .application_name(app)
}

#[tokio::test]
async fn pooled_statements_still_work() {
    let table = unique("pooled");
    let node = async || {
        let p = PostgresLockProvider::builder(pool().await)
            .table(&table)
            .dedicated_connection(false)
            .build()
            .unwrap();
        p.create_table().await.unwrap();
        p
    };
    let (a, b) = (node().await, node().await);
    sql::one_winner_and_release(&a, &b).await;
    sql::stale_holder_cannot_unlock_or_extend(&a, &b, a.records().as_ref()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_operations_on_one_provider_do_not_queue() {
    let pool = recommended_pool_options().max_connections(2).connect(&common::url().await).await;
    let p = Arc::new(provider_on(pool.unwrap(), &unique("conc")).await);
    // 40 locks at once: one runs on the dedicated connection, the others on the pool.
    sql::concurrent_calls_on_one_provider(p, 40).await;
}

#[tokio::test]
async fn a_connection_ended_by_the_server_is_replaced_transparently() {
    // The server terminates the provider's connection while it is idle (as on a restart): the
    // next statement gets the server's FATAL 57P01, so it never ran; it is retried once on a
    // fresh connection and the caller sees nothing.
    let proxy = FaultProxy::start(server_addr().await).await.unwrap();
    let app = unique("term");
    let pool = recommended_pool_options().connect_lazy_with(via(proxy.addr(), &app).await);
    let p = provider_on(pool, &unique("term")).await;
    let admin = self::pool().await;
    for round in 0..3 {
        let l = p.try_lock(&cfg(&format!("before{round}"), 60_000, 0)).await.unwrap().unwrap();
        l.unlock().await.unwrap();
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        )
        .bind(&app)
        .fetch_all(&admin)
        .await
        .unwrap();
        assert!(!killed.is_empty(), "round {round}: the provider's connection was not found");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let l = p.try_lock(&cfg(&format!("after{round}"), 60_000, 0)).await.unwrap();
        l.expect("a fresh name").unlock().await.unwrap();
    }
}

#[tokio::test]
async fn a_connection_lost_mid_statement_fails_once_then_recovers() {
    // A connection cut with nothing said by the server: the outcome of the statement is
    // unknown, so the call fails (retryable) instead of being repeated; the next call opens a
    // fresh connection.
    let proxy =
        shedlock_conformance::tools::proxy::FaultProxy::start(server_addr().await).await.unwrap();
    let pool = recommended_pool_options().connect_lazy_with(via(proxy.addr(), "cut").await);
    let p = provider_on(pool, &unique("cut")).await;
    sql::a_lost_connection_fails_once_then_recovers(&p, &proxy).await;
}

#[tokio::test]
async fn the_dedicated_connection_follows_the_pool_idle_timeout_and_closing() {
    let proxy =
        shedlock_conformance::tools::proxy::FaultProxy::start(server_addr().await).await.unwrap();
    let pool = recommended_pool_options()
        .idle_timeout(Duration::from_millis(300))
        .connect_lazy_with(via(proxy.addr(), "idle").await);
    // The table is created elsewhere, so that only the dedicated connection uses this pool.
    let table = unique("idle");
    provider_on(self::pool().await, &table).await;
    let p = PostgresLockProvider::builder(pool.clone()).table(&table).build().unwrap();
    sql::the_dedicated_connection_follows_idle_timeout_and_closing(&p, &proxy, async || {
        pool.close().await
    })
    .await;
}

/// A fleet starting at once: every node calls `create_table` on the same new table concurrently.
/// PostgreSQL's `CREATE TABLE IF NOT EXISTS` is not atomic (the loser of the race hits a unique
/// violation on `pg_type`); found by the example service's three-process test.
#[tokio::test]
async fn create_table_from_many_nodes_at_once_succeeds_on_every_node() {
    for _round in 0..5 {
        let table = unique("race");
        let mut nodes = Vec::new();
        for _ in 0..6 {
            nodes.push(PostgresLockProvider::builder(pool().await).table(&table).build().unwrap());
        }
        let mut set = tokio::task::JoinSet::new();
        for p in &nodes {
            let p = p.clone();
            set.spawn(async move { p.create_table().await });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap().unwrap();
        }
        sql::one_winner_and_release(&nodes[0], &nodes[1]).await;
    }
}

#[tokio::test]
async fn unlogged_table_creates_an_unlogged_table_that_locks_as_usual() {
    let persistence = async |pool: &PgPool, table: &str| -> String {
        sqlx::query_scalar("SELECT relpersistence::text FROM pg_class WHERE oid = $1::regclass")
            .bind(format!("\"{table}\""))
            .fetch_one(pool)
            .await
            .unwrap()
    };
    let admin = pool().await;
    let table = unique("unlogged");
    let p = PostgresLockProvider::builder(pool().await)
        .table(&table)
        .unlogged_table(true)
        .build()
        .unwrap();
    assert!(p.ddl().starts_with("CREATE UNLOGGED TABLE IF NOT EXISTS"), "{}", p.ddl());
    p.create_table().await.unwrap();
    assert_eq!(persistence(&admin, &table).await, "u");
    // A provider without the setting locks on the same table with it.
    let q = provider_on(pool().await, &table).await;
    sql::one_winner_and_release(&p, &q).await;
    // The default stays a logged table.
    let logged = unique("logged");
    provider_on(pool().await, &logged).await;
    assert_eq!(persistence(&admin, &logged).await, "p");
}

/// `asynchronous_commit(true)` on a durable server (fsync and synchronous_commit on): the
/// provider's lock statements no longer flush the WAL at each commit. PostgreSQL counts WAL
/// flushes in `pg_stat_wal.wal_sync` (only when fsync is on), so the same lock cycles flush
/// about twice per cycle without the setting and hardly at all with it.
#[tokio::test]
async fn asynchronous_commit_skips_the_wal_flush_of_each_lock_statement() {
    use shedlock_launcher::{Backend, LaunchOptions, Service};
    const CYCLES: i64 = 50;
    let opts = LaunchOptions::new().ignore_env(true).durable(true);
    let service = tokio::task::spawn_blocking(move || Service::start(Backend::Postgres, &opts))
        .await
        .unwrap()
        .expect("a durable PostgreSQL");
    let url = service.url().to_owned();
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    for setting in ["fsync", "synchronous_commit", "full_page_writes"] {
        let value: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SHOW {setting}")))
            .fetch_one(&mut admin)
            .await
            .unwrap();
        assert_eq!(value, "on", "{setting} on a durable server");
    }
    let table = unique("async");
    provider_on(PgPool::connect(&url).await.unwrap(), &table).await;

    // WAL records and flushes since the start, as the server's statistics have them.
    let wal = async |admin: &mut sqlx::PgConnection| -> (i64, i64) {
        sqlx::query_as("SELECT wal_records, wal_sync FROM pg_stat_wal")
            .fetch_one(admin)
            .await
            .unwrap()
    };
    // The WAL flushes of `CYCLES` lock cycles of a provider with `asynchronous_commit(on)`,
    // once its connections have closed and their statistics are in (a backend reports its WAL
    // usage, the records with the flushes, when it exits or after a while idle).
    let mut flushes = async |on: bool| -> i64 {
        let (records, syncs) = wal(&mut admin).await;
        let pool = recommended_pool_options().max_connections(2).connect(&url).await.unwrap();
        let p = PostgresLockProvider::builder(pool.clone())
            .table(&table)
            .asynchronous_commit(on)
            .build()
            .unwrap();
        let other = PostgresLockProvider::builder(PgPool::connect(&url).await.unwrap())
            .table(&table)
            .build()
            .unwrap();
        let c = cfg("cycle", 60_000, 0);
        for _ in 0..CYCLES {
            let lock = p.try_lock(&c).await.unwrap().expect("free");
            lock.unlock().await.unwrap();
        }
        // Still exclusive against a provider that commits synchronously.
        sql::one_winner_and_release(&p, &other).await;
        // The pool's own connections keep the server's setting.
        let pooled: String =
            sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&pool).await.unwrap();
        assert_eq!(pooled, "on");
        drop((p, other));
        pool.close().await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (r, s) = wal(&mut admin).await;
            // Each cycle writes at least an insert or update and a commit, twice.
            if r - records >= 4 * CYCLES {
                break s - syncs;
            }
            assert!(tokio::time::Instant::now() < deadline, "no WAL statistics after 30 s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let synchronous = flushes(false).await;
    let asynchronous = flushes(true).await;
    assert!(synchronous >= 2 * CYCLES, "a flush per commit: {synchronous}");
    assert!(asynchronous * 5 < synchronous, "{asynchronous} flushes against {synchronous}");
}

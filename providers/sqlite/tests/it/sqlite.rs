//! Provider-level tests against real SQLite database files.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::ClockBuilder as _;
use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime},
};

use shedlock::{Error, LockProvider, SkewedClock, system_clock};
use shedlock_sqlite::{
    SqliteDialect, SqliteLockProvider, TimeSource, recommended_connect_options,
    recommended_pool_options,
};
use shedlock_test_support::{cfg, sql};
use sqlx::SqlitePool;

/// A fresh database file in a fresh directory under the system temp dir, removed on drop.
struct TempDb {
    dir: PathBuf,
    path: PathBuf,
}

impl Drop for TempDb {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn db_file() -> TempDb {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "shedlock-sqlite-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("locks.db");
    TempDb { dir, path }
}

async fn pool(path: &PathBuf) -> SqlitePool {
    recommended_pool_options().connect_with(recommended_connect_options(path)).await.unwrap()
}

/// Two independent providers (separate pools on one file, like two processes).
async fn two_nodes() -> (SqliteLockProvider, SqliteLockProvider, TempDb) {
    let db = db_file();
    let a = SqliteLockProvider::builder(pool(&db.path).await).build().unwrap();
    a.create_table().await.unwrap();
    let b = SqliteLockProvider::builder(pool(&db.path).await).build().unwrap();
    (a, b, db)
}

#[tokio::test]
async fn stale_holder_cannot_unlock_or_extend() {
    let (a, b, _db) = two_nodes().await;
    sql::stale_holder_cannot_unlock_or_extend(&a, &b, &*a.records()).await;
}

#[tokio::test]
async fn at_least_is_kept_from_locked_at() {
    let (a, b, _db) = two_nodes().await;
    sql::at_least_is_kept_from_locked_at(&a, &b, &*a.records()).await;
}

#[tokio::test]
async fn lock_until_keeps_milliseconds_and_utc() {
    let (a, _, _db) = two_nodes().await;
    sql::lock_until_keeps_milliseconds(&a, &*a.records()).await;
    let _lock = a.try_lock(&cfg("ms", 1_234, 0)).await.unwrap().unwrap();
    let rec = a.record("ms").await.unwrap().unwrap();
    let diff = rec.locked_at.duration_since(SystemTime::now()).unwrap_or_else(|e| e.duration());
    assert!(diff < Duration::from_secs(2), "locked_at is the current UTC time, off by {diff:?}");
}

#[tokio::test]
async fn a_missing_table_is_a_setup_error_quoting_the_ddl_from_try_lock_and_check() {
    let db = db_file();
    let path = &db.path;
    let p = SqliteLockProvider::builder(pool(path).await).table("missing").build().unwrap();
    sql::missing_table_is_a_setup_error_quoting_the_ddl(&p, p.ddl()).await;
    let p2 = SqliteLockProvider::builder(pool(path).await).table("nodb.shedlock").build().unwrap();
    assert!(matches!(p2.try_lock(&cfg("x", 1000, 0)).await, Err(Error::Setup { .. })));
    p.create_table().await.unwrap();
    p.check().await.unwrap();
}

#[tokio::test]
async fn identifiers_are_validated() {
    let db = db_file();
    let valid = ["main.locks", "select", "MixedCase", "_x"].map(String::from);
    sql::identifiers_are_validated::<SqliteDialect>(pool(&db.path).await, '"', "key", &valid).await;
}

#[tokio::test]
async fn long_names_are_rejected_not_truncated() {
    let (a, b, _db) = two_nodes().await;
    sql::long_names_are_rejected_not_truncated(&a, &b, &*a.records()).await;
}

#[tokio::test]
async fn hostile_names_are_stored_and_matched_exactly() {
    let (a, b, _db) = two_nodes().await;
    sql::hostile_names_are_stored_and_matched_exactly(&a, &b, &*a.records(), false).await;
}

#[tokio::test]
async fn deleted_row_is_recreated_with_a_larger_token() {
    let (a, b, _db) = two_nodes().await;
    sql::deleted_row_is_recreated_with_a_larger_token(&a, &b, &*a.records()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_nodes_have_one_winner_per_round() {
    let db = db_file();
    let path = &db.path;
    let mut nodes = Vec::new();
    for _ in 0..5 {
        let p = SqliteLockProvider::builder(pool(path).await).build().unwrap();
        p.create_table().await.unwrap();
        nodes.push(Arc::new(p));
    }
    sql::racing_nodes_have_one_winner_per_round(&nodes, 30).await;
}

#[tokio::test]
async fn lock_statements_do_not_join_a_callers_transaction() {
    let db = db_file();
    let path = &db.path;
    let pool = pool(path).await;
    let p = SqliteLockProvider::builder(pool.clone()).build().unwrap();
    p.create_table().await.unwrap();
    let observer = SqliteLockProvider::builder(self::pool(path).await).build().unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
    let lock = p.try_lock(&cfg("tx", 60_000, 0)).await.unwrap().unwrap();
    assert!(observer.record("tx").await.unwrap().is_some(), "visible before the caller's commit");
    tx.rollback().await.unwrap();
    assert!(observer.try_lock(&cfg("tx", 60_000, 0)).await.unwrap().is_none());
    lock.unlock().await.unwrap();
}

#[tokio::test]
async fn database_time_ignores_client_skew_client_time_does_not() {
    let db = db_file();
    let path = &db.path;
    let behind = Arc::new(SkewedClock::behind(system_clock(), Duration::from_secs(3600)));
    let slow = SqliteLockProvider::builder(pool(path).await)
        .time_source(TimeSource::Client)
        .clock(behind)
        .build()
        .unwrap();
    slow.create_table().await.unwrap();
    let right = SqliteLockProvider::builder(pool(path).await)
        .time_source(TimeSource::Client)
        .build()
        .unwrap();
    let _held = slow.try_lock(&cfg("c", 60_000, 0)).await.unwrap().unwrap();
    assert!(
        right.try_lock(&cfg("c", 60_000, 0)).await.unwrap().is_some(),
        "client time breaks under skew"
    );
    // Database time: the same kind of skew, given to the providers, must not be consulted.
    let hour = Duration::from_secs(3600);
    let holder = SqliteLockProvider::builder(pool(path).await)
        .clock(Arc::new(SkewedClock::behind(system_clock(), hour)))
        .build()
        .unwrap();
    let rival = SqliteLockProvider::builder(pool(path).await)
        .clock(Arc::new(SkewedClock::ahead(system_clock(), hour)))
        .build()
        .unwrap();
    sql::database_time_ignores_the_given_clocks(&holder, &rival, &*holder.records()).await;
}

#[tokio::test]
async fn dropped_acquire_leaves_no_bad_connection() {
    let db = db_file();
    let path = &db.path;
    let pool = recommended_pool_options()
        .max_connections(1)
        .connect_with(recommended_connect_options(path))
        .await
        .unwrap();
    let p = SqliteLockProvider::builder(pool).build().unwrap();
    p.create_table().await.unwrap();
    for i in 0..30u64 {
        let c = cfg(&format!("c{i}"), 400, 0);
        let _ = tokio::time::timeout(Duration::from_micros(20 * i), p.try_lock(&c)).await;
    }
    let lock = p.try_lock(&cfg("after", 60_000, 0)).await.unwrap().expect("provider still works");
    lock.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(550)).await;
    for i in 0..30u64 {
        assert!(p.try_lock(&cfg(&format!("c{i}"), 60_000, 0)).await.unwrap().is_some(), "c{i}");
    }
}

#[tokio::test]
async fn a_locked_database_is_a_retryable_error() {
    let db = db_file();
    let path = &db.path;
    let pool_a = pool(path).await;
    let p = SqliteLockProvider::builder(
        recommended_pool_options()
            .connect_with(
                recommended_connect_options(path).busy_timeout(Duration::from_millis(100)),
            )
            .await
            .unwrap(),
    )
    .build()
    .unwrap();
    p.create_table().await.unwrap();
    // Another connection holds the write lock (an exclusive transaction).
    let mut conn = pool_a.acquire().await.unwrap();
    sqlx::query("BEGIN EXCLUSIVE").execute(&mut *conn).await.unwrap();
    let err = p.try_lock(&cfg("busy", 60_000, 0)).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    sqlx::query("ROLLBACK").execute(&mut *conn).await.unwrap();
    assert!(p.try_lock(&cfg("busy", 60_000, 0)).await.unwrap().is_some());
}

#[tokio::test]
async fn a_database_file_that_cannot_be_opened_is_unavailable_naming_the_file() {
    // A directory that does not exist: SQLite can create the file, not its directory.
    let db = db_file();
    let file = db.dir.join("no-such-dir").join("locks.db");
    let pool = recommended_pool_options()
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy_with(recommended_connect_options(&file));
    let p = SqliteLockProvider::builder(pool).build().unwrap();
    for err in
        [p.create_table().await.unwrap_err(), p.try_lock(&cfg("x", 1000, 0)).await.unwrap_err()]
    {
        assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains(&format!("{:?}", file.display().to_string())), "{message}");
        assert!(message.contains("unable to open database file"), "{message}");
    }
}

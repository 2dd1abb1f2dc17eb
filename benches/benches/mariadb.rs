//! MariaDB (the `shedlock-mysql` provider): its `try_lock` + `unlock` beside the raw statements an
//! acquire and a release build on (an `INSERT … ON DUPLICATE KEY UPDATE … RETURNING` that takes
//! the row only where its lease has ended, then an owner-checked `UPDATE`), issued on one detached
//! connection as the provider does: criterion's runs, then the zoo (B1 interleaved, B2, B3,
//! round trips; see `shedlock_benches::zoo`). The server comes from `shedlock-launcher`
//! (`SHEDLOCK_MARIADB_URL` wins).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use criterion::Criterion;
use shedlock::LockProvider;
use shedlock_benches::{
    cycle, runtime, server,
    zoo::{Zoo, cfg, op, unique},
};
use shedlock_launcher::Backend;
use shedlock_mysql::MySqlLockProvider;
use sqlx::{MySqlConnection, MySqlPool};
use tokio::sync::Mutex;

const TABLE: &str = "bench_shedlock";

async fn pool(url: &str) -> MySqlPool {
    shedlock_mysql::recommended_pool_options().connect(url).await.unwrap()
}

async fn node(url: &str) -> Arc<dyn LockProvider> {
    Arc::new(MySqlLockProvider::builder(pool(url).await).table(TABLE).build().unwrap())
}

/// The floor: the acquire upsert (owner first, then the lease, both only where the lease has
/// ended; the owner it returns says who won), then the owner-checked release.
async fn raw_pair(conn: &Mutex<MySqlConnection>, name: &str, owner: u64) {
    let mut conn = conn.lock().await;
    let owner = owner as i64;
    let (won,): (i64,) = sqlx::query_as(
        "INSERT INTO bench_raw (name, lock_until, owner) \
         VALUES (?, UTC_TIMESTAMP(6) + INTERVAL 120 SECOND, ?) ON DUPLICATE KEY UPDATE \
         owner = IF(lock_until <= UTC_TIMESTAMP(6), VALUES(owner), owner), \
         lock_until = IF(owner = VALUES(owner), VALUES(lock_until), lock_until) RETURNING owner",
    )
    .bind(name)
    .bind(owner)
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!(won, owner, "the raw name is free");
    let r = sqlx::query(
        "UPDATE bench_raw SET lock_until = UTC_TIMESTAMP(6) WHERE name = ? AND owner = ?",
    )
    .bind(name)
    .bind(owner)
    .execute(&mut *conn)
    .await
    .unwrap();
    assert_eq!(r.rows_affected(), 1);
}

/// MariaDB's session lock, the analogue of PostgreSQL's advisory lock: `GET_LOCK(name, 0)` then
/// `RELEASE_LOCK` (no expiry, no record).
async fn get_lock(conn: &Mutex<MySqlConnection>, name: &str) {
    let mut conn = conn.lock().await;
    let (got,): (Option<i64>,) =
        sqlx::query_as("SELECT GET_LOCK(?, 0)").bind(name).fetch_one(&mut *conn).await.unwrap();
    assert_eq!(got, Some(1), "the session lock is free");
    sqlx::query("DO RELEASE_LOCK(?)").bind(name).execute(&mut *conn).await.unwrap();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let service = server(Backend::MariaDb);
    let url = service.url().to_owned();
    let rt = runtime();
    let raw = rt.block_on(async {
        let pool = pool(&url).await;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS bench_raw (name VARCHAR(64) PRIMARY KEY, \
             lock_until DATETIME(6) NOT NULL, owner BIGINT NOT NULL)",
        )
        .execute(&pool)
        .await
        .unwrap();
        Mutex::new(pool.acquire().await.unwrap().detach())
    });
    let provider: Arc<dyn LockProvider> = rt.block_on(async {
        let p = MySqlLockProvider::builder(pool(&url).await).table(TABLE).build().unwrap();
        p.create_table().await.unwrap();
        Arc::new(p) as Arc<dyn LockProvider>
    });
    let (one, raw_name) = (cfg(&unique("cycle")), unique("raw"));
    let (p, one, raw, raw_name) = (provider.as_ref(), &one, &raw, raw_name.as_str());
    let owner = std::sync::atomic::AtomicU64::new(1);
    let owner = &owner;
    let next = move || owner.fetch_add(1, std::sync::atomic::Ordering::Relaxed);

    let mut g = c.benchmark_group("mariadb");
    g.bench_function("raw_upsert_returning_then_release", |b| {
        b.to_async(&rt).iter(|| raw_pair(raw, raw_name, next()))
    });
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p, one)));
    g.finish();

    let mut zoo = Zoo::new("mariadb", &rt);
    zoo.b1(
        op(move || cycle(p, one)),
        (
            "upsert RETURNING + owner-checked UPDATE (one connection)",
            op(move || raw_pair(raw, raw_name, next())),
        ),
        None,
        vec![("GET_LOCK(name, 0) + RELEASE_LOCK (no expiry)", op(move || get_lock(raw, raw_name)))],
    );
    zoo.contention(&url, provider.clone(), service.addr(), |u| async move { node(&u).await });
    zoo.note("no peer crate is measured; the extra row is MariaDB's own session lock (GET_LOCK), which writes nothing and never expires, like PostgreSQL's advisory locks");
    zoo.finish();
    c.final_summary();
}

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

/// An instance as a fleet runs it (B4's batch path): a pool of one connection beside the
/// provider's own, so it never holds more than two, whatever the number of jobs.
async fn fleet_node(url: &str) -> Arc<dyn LockProvider> {
    let pool =
        shedlock_mysql::recommended_pool_options().max_connections(1).connect(url).await.unwrap();
    Arc::new(MySqlLockProvider::builder(pool).table(TABLE).build().unwrap())
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

/// The provider's acquire, by hand (the statement the provider builds for MariaDB, as its README
/// shows it): six columns guarded by `IF`, a fencing token from the server clock, strict mode
/// for the statement.
const PROVIDER_ACQUIRE: &str = "SET STATEMENT sql_mode = 'STRICT_ALL_TABLES' FOR \
    INSERT INTO bench_shedlock (name, lock_until, locked_at, locked_by, acquisition_id, \
    fencing_token) VALUES (?, UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(3), ?, ?, \
    TIMESTAMPDIFF(MICROSECOND, CAST('1970-01-01 00:00:00' AS DATETIME(6)), UTC_TIMESTAMP(6))) \
    ON DUPLICATE KEY UPDATE \
    fencing_token = IF(lock_until <= VALUES(locked_at), GREATEST(fencing_token + 1, \
    VALUES(fencing_token)), fencing_token), \
    locked_by = IF(lock_until <= VALUES(locked_at), VALUES(locked_by), locked_by), \
    acquisition_id = IF(lock_until <= VALUES(locked_at), VALUES(acquisition_id), acquisition_id), \
    locked_at = IF(lock_until <= VALUES(locked_at), VALUES(locked_at), locked_at), \
    lock_until = IF(lock_until <= VALUES(locked_at), VALUES(lock_until), lock_until) \
    RETURNING acquisition_id, fencing_token";

/// The provider's owner-checked release, by hand.
const PROVIDER_RELEASE: &str = "SET STATEMENT sql_mode = 'STRICT_ALL_TABLES' FOR \
    UPDATE bench_shedlock SET lock_until = LEAST(lock_until, GREATEST(UTC_TIMESTAMP(3), \
    locked_at + INTERVAL ? MICROSECOND)) WHERE name = ? AND acquisition_id = ? \
    AND fencing_token = ?";

/// The provider's two statements issued by hand on one detached connection, on the provider's
/// table: what its SQL costs, without the provider's own code.
async fn provider_sql_by_hand(conn: &Mutex<MySqlConnection>, name: &str, id: u64) {
    let mut conn = conn.lock().await;
    let id = id as i64;
    let (aid, token): (i64, i64) = sqlx::query_as(PROVIDER_ACQUIRE)
        .bind(name.as_bytes())
        .bind(120_000_000_i64)
        .bind("bench/by-hand")
        .bind(id)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(aid, id, "the by-hand name is free");
    let r = sqlx::query(PROVIDER_RELEASE)
        .bind(0_i64)
        .bind(name.as_bytes())
        .bind(id)
        .bind(token)
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
    let (one, raw_name, hand_name) = (cfg(&unique("cycle")), unique("raw"), unique("by-hand"));
    let (p, one, raw, raw_name, hand_name) =
        (provider.as_ref(), &one, &raw, raw_name.as_str(), hand_name.as_str());
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
    zoo.server(service);
    zoo.b1(
        op(move || cycle(p, one)),
        (
            "upsert RETURNING + owner-checked UPDATE (one connection)",
            op(move || raw_pair(raw, raw_name, next())),
        ),
        None,
        vec![
            ("GET_LOCK(name, 0) + RELEASE_LOCK (no expiry)", op(move || get_lock(raw, raw_name))),
            (
                "the provider's own two statements by hand (one connection)",
                op(move || provider_sql_by_hand(raw, hand_name, next())),
            ),
        ],
    );
    zoo.contention_fleet(
        &url,
        provider.clone(),
        service.addr(),
        &|u: String| async move { node(&u).await },
        &|u: String| async move { fleet_node(&u).await },
    );
    zoo.note("no peer crate is measured; the extra row is MariaDB's own session lock (GET_LOCK), which writes nothing and never expires, like PostgreSQL's advisory locks. The CPU columns split the provider's gap to the floor between the client (sqlx, the provider, the runtime) and the server");
    zoo.finish();
    c.final_summary();
}

//! SQLite: the provider's `try_lock` + `unlock` beside the raw statements an acquire and a
//! release build on (a one-statement upsert and an update, through the same kind of pool), on a
//! temp file in WAL mode: criterion's runs, then the zoo (B1 interleaved, B2, B3; see
//! `shedlock_benches::zoo`). Embedded: no round trips.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, sync::Arc};

use criterion::Criterion;
use shedlock::LockProvider;
use shedlock_benches::{
    cycle, runtime,
    zoo::{Zoo, cfg, op, unique},
};
use shedlock_sqlite::SqliteLockProvider;
use sqlx::SqlitePool;

async fn pool(file: &Path) -> SqlitePool {
    shedlock_sqlite::recommended_pool_options()
        .connect_with(shedlock_sqlite::recommended_connect_options(file))
        .await
        .unwrap()
}

/// The floor: the acquire upsert (taking the row only where its lease has ended), then the
/// release update.
async fn raw_pair(pool: &SqlitePool, name: &str) {
    let row: Option<(i32,)> = sqlx::query_as(
        "INSERT INTO bench_raw (name, lock_until) VALUES (?1, unixepoch('subsec') * 1000 + 120000) \
         ON CONFLICT (name) DO UPDATE SET lock_until = excluded.lock_until \
         WHERE bench_raw.lock_until <= unixepoch('subsec') * 1000 RETURNING 1",
    )
    .bind(name)
    .fetch_optional(pool)
    .await
    .unwrap();
    assert!(row.is_some(), "the raw name is free");
    sqlx::query("UPDATE bench_raw SET lock_until = unixepoch('subsec') * 1000 WHERE name = ?1")
        .bind(name)
        .execute(pool)
        .await
        .unwrap();
}

/// SQLite's clock in milliseconds, as the provider reads it.
const MILLIS: &str = "(CAST(strftime('%s', 'now') AS INTEGER) * 1000 + \
    CAST(substr(strftime('%f', 'now'), 4, 3) AS INTEGER))";

/// The provider's own two statements by hand (its acquire: six columns, a fencing token from the
/// clock; its owner-checked release), through the same pool, on the provider's table: what its
/// SQL costs, without the provider's own code.
async fn provider_sql_by_hand(pool: &SqlitePool, name: &str, id: i64) {
    let acquire = format!(
        "INSERT INTO shedlock AS cur (name, lock_until, locked_at, locked_by, acquisition_id, \
         fencing_token) VALUES (?1, {MILLIS} + 120000, {MILLIS}, 'bench/by-hand', ?2, \
         max({MILLIS} * 1000, ?3)) ON CONFLICT (name) DO UPDATE SET \
         lock_until = excluded.lock_until, locked_at = excluded.locked_at, \
         locked_by = excluded.locked_by, acquisition_id = excluded.acquisition_id, \
         fencing_token = max(cur.fencing_token + 1, excluded.fencing_token) \
         WHERE cur.lock_until <= excluded.locked_at RETURNING fencing_token"
    );
    let micros =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros()
            as i64;
    let (token,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(acquire))
        .bind(name)
        .bind(id)
        .bind(micros)
        .fetch_optional(pool)
        .await
        .unwrap()
        .expect("the by-hand name is free");
    let release = format!(
        "UPDATE shedlock SET lock_until = min(lock_until, max({MILLIS}, locked_at + ?1)) \
         WHERE name = ?2 AND acquisition_id = ?3 AND fencing_token = ?4"
    );
    let r = sqlx::query(sqlx::AssertSqlSafe(release))
        .bind(0_i64)
        .bind(name)
        .bind(id)
        .bind(token)
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(r.rows_affected(), 1);
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let rt = runtime();
    let dir = std::env::temp_dir().join(unique("shedlock-bench-sqlite"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("locks.db");
    let raw = rt.block_on(pool(&file));
    rt.block_on(async {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS bench_raw (name TEXT PRIMARY KEY, lock_until INTEGER NOT NULL)",
        )
        .execute(&raw)
        .await
        .unwrap();
    });
    let provider: Arc<dyn LockProvider> = rt.block_on(async {
        let p = SqliteLockProvider::builder(pool(&file).await).build().unwrap();
        p.create_table().await.unwrap();
        Arc::new(p) as Arc<dyn LockProvider>
    });
    let (one, raw_name, hand_name) = (cfg(&unique("cycle")), unique("raw"), unique("by-hand"));
    let (p, one, raw, raw_name, hand_name) =
        (provider.as_ref(), &one, &raw, raw_name.as_str(), hand_name.as_str());
    let id = std::sync::atomic::AtomicI64::new(1);
    let id = &id;

    let mut g = c.benchmark_group("sqlite");
    g.bench_function("raw_upsert_then_release", |b| {
        b.to_async(&rt).iter(|| raw_pair(raw, raw_name))
    });
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p, one)));
    g.finish();

    let mut zoo = Zoo::new("sqlite", &rt);
    zoo.b1(
        op(move || cycle(p, one)),
        ("upsert + release UPDATE (pool)", op(move || raw_pair(raw, raw_name))),
        None,
        vec![(
            "the provider's own two statements by hand (pool)",
            op(move || {
                provider_sql_by_hand(
                    raw,
                    hand_name,
                    id.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                )
            }),
        )],
    );
    let file_ref = &file;
    zoo.b2(|| async move {
        Arc::new(SqliteLockProvider::builder(pool(file_ref).await).build().unwrap())
            as Arc<dyn LockProvider>
    });
    zoo.b3(provider.clone());
    zoo.b4(|| async move {
        Arc::new(SqliteLockProvider::builder(pool(file_ref).await).build().unwrap())
            as Arc<dyn LockProvider>
    });
    zoo.no_round_trips("embedded: no network round trips (every instance shares one file)");
    zoo.note("B2's contenders are separate pools on one database file: SQLite serialises their writes, so the curve shows its single-writer lock, not a network");
    zoo.finish();
    c.final_summary();
    let _ = std::fs::remove_dir_all(&dir);
}

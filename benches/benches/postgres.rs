//! PostgreSQL: the provider's `try_lock` + `unlock` beside the raw statements an acquire and a
//! release build on (a one-statement upsert and an update, through the same kind of pool), and
//! beside sqlx's `PgAdvisoryLock` (`pg_try_advisory_lock` + `pg_advisory_unlock` on a pooled
//! connection), the peer: criterion's runs, then the zoo (B1 interleaved, B2, B3, round trips;
//! see `shedlock_benches::zoo`). The server comes from `shedlock-launcher`
//! (`SHEDLOCK_POSTGRES_URL` wins).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use criterion::Criterion;
use shedlock::LockProvider;
use shedlock_benches::{
    cycle, runtime, server,
    zoo::{Zoo, cfg, op, unique},
};
use shedlock_launcher::Backend;
use shedlock_postgres::PostgresLockProvider;
use sqlx::{Either, PgPool, postgres::PgAdvisoryLock};

const TABLE: &str = "bench_shedlock";

async fn pool(url: &str) -> PgPool {
    shedlock_postgres::recommended_pool_options().connect(url).await.unwrap()
}

async fn node(url: &str) -> Arc<dyn LockProvider> {
    Arc::new(PostgresLockProvider::builder(pool(url).await).table(TABLE).build().unwrap())
}

/// The floor: the acquire upsert (taking the row only where its lease has ended), then the
/// release update, on the same kind of pool.
async fn raw_pair(pool: &PgPool, name: &str) {
    let row: Option<(i32,)> = sqlx::query_as(
        "INSERT INTO bench_raw (name, lock_until) VALUES ($1, now() + interval '2 minutes') \
         ON CONFLICT (name) DO UPDATE SET lock_until = EXCLUDED.lock_until \
         WHERE bench_raw.lock_until <= now() RETURNING 1",
    )
    .bind(name)
    .fetch_optional(pool)
    .await
    .unwrap();
    assert!(row.is_some(), "the raw name is free");
    sqlx::query("UPDATE bench_raw SET lock_until = now() WHERE name = $1")
        .bind(name)
        .execute(pool)
        .await
        .unwrap();
}

/// The peer: sqlx's advisory lock on a connection from the pool, released at once.
async fn advisory(pool: &PgPool, lock: &PgAdvisoryLock) {
    let conn = pool.acquire().await.unwrap();
    match lock.try_acquire(conn).await.unwrap() {
        Either::Left(guard) => drop(guard.release_now().await.unwrap()),
        Either::Right(_) => panic!("the advisory lock is free"),
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let service = server(Backend::Postgres);
    let url = service.url().to_owned();
    let rt = runtime();
    let raw = rt.block_on(pool(&url));
    rt.block_on(async {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS bench_raw (name TEXT PRIMARY KEY, lock_until TIMESTAMPTZ NOT NULL)",
        )
        .execute(&raw)
        .await
        .unwrap();
    });
    let provider: Arc<dyn LockProvider> = rt.block_on(async {
        let p = PostgresLockProvider::builder(pool(&url).await).table(TABLE).build().unwrap();
        p.create_table().await.unwrap();
        Arc::new(p) as Arc<dyn LockProvider>
    });
    // The ShedLock-compatible mode: ShedLock's four columns, no fencing token, no acquisition id.
    let compat: Arc<dyn LockProvider> = rt.block_on(async {
        let p = PostgresLockProvider::builder(pool(&url).await)
            .table("bench_shedlock_compat")
            .shedlock_compatible()
            .build()
            .unwrap();
        p.create_table().await.unwrap();
        Arc::new(p) as Arc<dyn LockProvider>
    });
    let peer_pool = rt.block_on(pool(&url));
    let lock = PgAdvisoryLock::new(unique("bench-advisory"));
    let (one, raw_name) = (cfg(&unique("cycle")), unique("raw"));
    let (p, sc, one, raw, raw_name, peer_pool, lock) =
        (provider.as_ref(), compat.as_ref(), &one, &raw, raw_name.as_str(), &peer_pool, &lock);

    let mut g = c.benchmark_group("postgres");
    g.bench_function("raw_upsert_then_release", |b| {
        b.to_async(&rt).iter(|| raw_pair(raw, raw_name))
    });
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p, one)));
    g.bench_function("peer_pg_advisory_lock", |b| {
        b.to_async(&rt).iter(|| advisory(peer_pool, lock))
    });
    g.finish();

    let mut zoo = Zoo::new("postgres", &rt);
    zoo.b1(
        op(move || cycle(p, one)),
        ("upsert + release UPDATE (pool)", op(move || raw_pair(raw, raw_name))),
        Some((
            "sqlx PgAdvisoryLock (try_acquire + release_now)",
            op(move || advisory(peer_pool, lock)),
        )),
        vec![("provider, ShedLock-compatible mode (no fencing)", op(move || cycle(sc, one)))],
    );
    zoo.contention(&url, provider.clone(), service.addr(), |u| async move { node(&u).await });
    zoo.note("sqlx's PgAdvisoryLock writes nothing and never expires: a session lock, held until released or the connection closes, with no lock_at_most_for, no lock_at_least_for and no record of who holds it; the provider's upsert and release are WAL-logged row writes (this server runs with fsync and synchronous_commit off, so no commit here waits for a disk; on a durable server the gap to the advisory lock widens by a WAL flush per statement, which synchronous_commit = off or an UNLOGGED table would remove at the price of losing locks on a server crash)");
    zoo.finish();
    c.final_summary();
}

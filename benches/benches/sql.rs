//! SQL providers: the raw statements an acquire and a release build on (a one-statement upsert and
//! an update, through the same kind of pool) beside the provider's `try_lock` + `unlock`, and N
//! nodes contending for one name. PostgreSQL comes from `shedlock-launcher` (`SHEDLOCK_POSTGRES_URL`
//! wins); SQLite uses a temp file.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::{sync::Arc, time::Duration};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use shedlock::{LockConfig, LockProvider};
use shedlock_benches::{contended_round, cycle};
use shedlock_launcher::Backend;
use shedlock_postgres::PostgresLockProvider;
use shedlock_sqlite::SqliteLockProvider;

fn cfg(name: &str) -> LockConfig {
    LockConfig::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

fn postgres(c: &mut Criterion) {
    let url = Backend::Postgres;
    let service = shedlock_launcher::shared(url).expect("PostgreSQL for the benchmark");
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let connect = || async {
        shedlock_postgres::recommended_pool_options().connect(service.url()).await.unwrap()
    };
    let pool = rt.block_on(connect());
    rt.block_on(async {
        sqlx::query("CREATE TABLE IF NOT EXISTS bench_raw (name TEXT PRIMARY KEY, lock_until TIMESTAMPTZ NOT NULL)")
            .execute(&pool)
            .await
            .unwrap();
    });
    let mut g = c.benchmark_group("postgres");
    g.bench_function("raw_upsert_then_release", |b| {
        b.to_async(&rt).iter(|| async {
            let row: Option<(i32,)> = sqlx::query_as(
                "INSERT INTO bench_raw (name, lock_until) VALUES ('raw', now() + interval '1 minute') \
                 ON CONFLICT (name) DO UPDATE SET lock_until = EXCLUDED.lock_until \
                 WHERE bench_raw.lock_until <= now() RETURNING 1",
            )
            .fetch_optional(&pool)
            .await
            .unwrap();
            assert!(row.is_some());
            sqlx::query("UPDATE bench_raw SET lock_until = now() WHERE name = 'raw'")
                .execute(&pool)
                .await
                .unwrap();
        })
    });
    let provider: Arc<dyn LockProvider> = rt.block_on(async {
        let p =
            PostgresLockProvider::builder(connect().await).table("bench_shedlock").build().unwrap();
        p.create_table().await.unwrap();
        Arc::new(p) as Arc<dyn LockProvider>
    });
    let one = cfg("bench");
    g.bench_function("try_lock_unlock", |b| {
        b.to_async(&rt).iter(|| cycle(provider.as_ref(), &one))
    });
    for n in [2usize, 4] {
        let nodes: Vec<Arc<dyn LockProvider>> = rt.block_on(async {
            let mut v: Vec<Arc<dyn LockProvider>> = Vec::new();
            for _ in 0..n {
                let p = PostgresLockProvider::builder(connect().await)
                    .table("bench_shedlock")
                    .build()
                    .unwrap();
                v.push(Arc::new(p));
            }
            v
        });
        let contended = cfg("contended");
        g.bench_with_input(BenchmarkId::new("contended_round", n), &nodes, |b, nodes| {
            b.to_async(&rt).iter(|| contended_round(nodes, &contended))
        });
    }
    g.finish();
}

fn sqlite(c: &mut Criterion) {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = std::env::temp_dir().join(format!("shedlock-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("locks.db");
    let connect = || async {
        shedlock_sqlite::recommended_pool_options()
            .connect_with(shedlock_sqlite::recommended_connect_options(&file))
            .await
            .unwrap()
    };
    let pool = rt.block_on(connect());
    rt.block_on(async {
        sqlx::query("CREATE TABLE IF NOT EXISTS bench_raw (name TEXT PRIMARY KEY, lock_until INTEGER NOT NULL)")
            .execute(&pool)
            .await
            .unwrap();
    });
    let mut g = c.benchmark_group("sqlite");
    g.bench_function("raw_upsert_then_release", |b| {
        b.to_async(&rt).iter(|| async {
            let row: Option<(i32,)> = sqlx::query_as(
                "INSERT INTO bench_raw (name, lock_until) VALUES ('raw', unixepoch('subsec') * 1000 + 60000) \
                 ON CONFLICT (name) DO UPDATE SET lock_until = excluded.lock_until \
                 WHERE bench_raw.lock_until <= unixepoch('subsec') * 1000 RETURNING 1",
            )
            .fetch_optional(&pool)
            .await
            .unwrap();
            assert!(row.is_some());
            sqlx::query("UPDATE bench_raw SET lock_until = unixepoch('subsec') * 1000 WHERE name = 'raw'")
                .execute(&pool)
                .await
                .unwrap();
        })
    });
    let provider: Arc<dyn LockProvider> = rt.block_on(async {
        let p = SqliteLockProvider::builder(connect().await).build().unwrap();
        p.create_table().await.unwrap();
        Arc::new(p) as Arc<dyn LockProvider>
    });
    let one = cfg("bench");
    g.bench_function("try_lock_unlock", |b| {
        b.to_async(&rt).iter(|| cycle(provider.as_ref(), &one))
    });
    let nodes: Vec<Arc<dyn LockProvider>> = rt.block_on(async {
        let mut v: Vec<Arc<dyn LockProvider>> = Vec::new();
        for _ in 0..2 {
            v.push(Arc::new(SqliteLockProvider::builder(connect().await).build().unwrap()));
        }
        v
    });
    let contended = cfg("contended");
    g.bench_with_input(BenchmarkId::new("contended_round", 2), &nodes, |b, nodes| {
        b.to_async(&rt).iter(|| contended_round(nodes, &contended))
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, postgres, sqlite);
criterion_main!(benches);

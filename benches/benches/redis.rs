//! Redis: the provider's `try_lock` + `unlock` beside the raw commands a Redis lock builds on
//! (`SET NX PX`, then a compare-and-`DEL` script), on the same kind of connection
//! (`ConnectionManager`), and N nodes contending for one name. With `--features peers`, the
//! `rslock` crate's lock/unlock on the same server too. The server comes from
//! `shedlock-launcher` (`SHEDLOCK_REDIS_URL` wins).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::{sync::Arc, time::Duration};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use redis::aio::ConnectionManager;
use shedlock::{LockConfig, LockProvider};
use shedlock_benches::{contended_round, cycle};
use shedlock_launcher::Backend;
use shedlock_redis::RedisLockProvider;

fn cfg(name: &str) -> LockConfig {
    LockConfig::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

const COMPARE_DEL: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

fn redis_bench(c: &mut Criterion) {
    let service = shedlock_launcher::shared(Backend::Redis).expect("Redis for the benchmark");
    let url = service.url().to_owned();
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let connect = || {
        let url = url.clone();
        async move { ConnectionManager::new(redis::Client::open(url).unwrap()).await.unwrap() }
    };
    let mut g = c.benchmark_group("redis");

    let raw = rt.block_on(connect());
    let compare_del = redis::Script::new(COMPARE_DEL);
    g.bench_function("raw_set_nx_px_then_compare_del", |b| {
        b.to_async(&rt).iter(|| {
            let mut conn = raw.clone();
            let compare_del = &compare_del;
            async move {
                let ok: Option<String> = redis::cmd("SET")
                    .arg("bench:raw")
                    .arg("0123456789abcdef|bench")
                    .arg("NX")
                    .arg("PX")
                    .arg(60_000)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                assert!(ok.is_some());
                let n: i64 = compare_del
                    .key("bench:raw")
                    .arg("0123456789abcdef|bench")
                    .invoke_async(&mut conn)
                    .await
                    .unwrap();
                assert_eq!(n, 1);
            }
        })
    });

    let provider: Arc<dyn LockProvider> = rt.block_on(async {
        let p = RedisLockProvider::builder(connect().await).key_prefix("bench:").build().await;
        Arc::new(p.unwrap()) as Arc<dyn LockProvider>
    });
    let one = cfg("cycle");
    g.bench_function("try_lock_unlock", |b| {
        b.to_async(&rt).iter(|| cycle(provider.as_ref(), &one))
    });

    #[cfg(feature = "peers")]
    {
        let rl = rslock::LockManager::new(vec![url.clone()]);
        g.bench_function("peer_rslock_lock_unlock", |b| {
            b.to_async(&rt).iter(|| async {
                let lock = rl.lock("bench:rslock", Duration::from_secs(60)).await.unwrap();
                rl.unlock(&lock).await;
            })
        });
    }

    for n in [2usize, 4] {
        let nodes: Vec<Arc<dyn LockProvider>> = rt.block_on(async {
            let mut v: Vec<Arc<dyn LockProvider>> = Vec::new();
            for _ in 0..n {
                let p = RedisLockProvider::builder(connect().await)
                    .key_prefix("bench:")
                    .build()
                    .await
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

criterion_group!(benches, redis_bench);
criterion_main!(benches);

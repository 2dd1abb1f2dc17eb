//! Memory provider: the raw operation (a mutex-guarded map insert/remove) beside try_lock+unlock,
//! the executor, and N nodes contending for one name.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::HashMap,
    hint::black_box,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use shedlock::{LockConfig, LockProvider, LockingExecutor};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

fn cfg(name: &str) -> LockConfig {
    LockConfig::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

fn bench(c: &mut Criterion) {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut g = c.benchmark_group("memory");

    // The raw backend operation: insert and remove a record in a mutex-guarded map.
    let map: Mutex<HashMap<String, SystemTime>> = Mutex::default();
    g.bench_function("raw_insert_remove", |b| {
        b.iter(|| {
            let mut m = map.lock().unwrap();
            m.insert(black_box("job").to_owned(), SystemTime::now());
            m.remove("job");
        })
    });

    let server = MemoryServer::new();
    let node = MemoryLockProvider::new(&server);
    let c1 = cfg("job");
    g.bench_function("try_lock_unlock", |b| {
        b.to_async(&rt).iter(|| async {
            let lock = node.try_lock(&c1).await.unwrap().unwrap();
            lock.unlock().await.unwrap();
        })
    });

    let executor = LockingExecutor::new(Arc::new(node.clone()));
    g.bench_function("executor_execute", |b| {
        b.to_async(&rt)
            .iter(|| async { executor.execute(&c1, || async { black_box(1) }).await.unwrap() })
    });

    // N nodes race for one fresh name each round; exactly one wins and releases.
    for n in [2usize, 8] {
        let nodes: Vec<_> = (0..n).map(|_| MemoryLockProvider::new(&server)).collect();
        g.bench_with_input(BenchmarkId::new("contended_round", n), &nodes, |b, nodes| {
            b.to_async(&rt).iter(|| async {
                let c = cfg("contended");
                let mut tasks = Vec::with_capacity(nodes.len());
                for p in nodes {
                    let (p, c) = (p.clone(), c.clone());
                    tasks.push(tokio::spawn(async move { p.try_lock(&c).await.unwrap() }));
                }
                let mut won = Vec::new();
                for t in tasks {
                    won.extend(t.await.unwrap());
                }
                let winners = won.len();
                for lock in won {
                    lock.unlock().await.unwrap();
                }
                assert_eq!(winners, 1);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

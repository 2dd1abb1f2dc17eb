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
use shedlock_benches::{contended_round, cycle};
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
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(&node, &c1)));

    let executor = LockingExecutor::new(Arc::new(node.clone()));
    g.bench_function("executor_execute", |b| {
        b.to_async(&rt)
            .iter(|| async { executor.execute(&c1, || async { black_box(1) }).await.unwrap() })
    });

    // N nodes race for one name each round; exactly one wins and releases.
    let contended = cfg("contended");
    for n in [2usize, 8] {
        let nodes: Vec<Arc<dyn LockProvider>> = (0..n)
            .map(|_| Arc::new(MemoryLockProvider::new(&server)) as Arc<dyn LockProvider>)
            .collect();
        g.bench_with_input(BenchmarkId::new("contended_round", n), &nodes, |b, nodes| {
            b.to_async(&rt).iter(|| contended_round(nodes, &contended))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

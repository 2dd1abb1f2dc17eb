//! Memory provider (the reference model): the raw operation (a mutex-guarded map insert and
//! remove) beside `try_lock` + `unlock` and the executor: criterion's runs, then the zoo (B1
//! interleaved, B2, B3; see `shedlock_benches::zoo`). In-process: no round trips.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::HashMap,
    hint::black_box,
    sync::{Arc, Mutex},
    time::SystemTime,
};

use criterion::Criterion;
use shedlock::{LockProvider, LockingExecutor};
use shedlock_benches::{
    cycle, runtime,
    zoo::{Zoo, cfg, op},
};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

/// The raw backend operation: insert and remove a record in a mutex-guarded map.
fn raw_insert_remove(map: &Mutex<HashMap<String, SystemTime>>) {
    let mut m = map.lock().unwrap();
    m.insert(black_box("job").to_owned(), SystemTime::now());
    m.remove("job");
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let rt = runtime();
    let map: Mutex<HashMap<String, SystemTime>> = Mutex::default();
    let server = MemoryServer::new();
    let node: Arc<dyn LockProvider> = Arc::new(MemoryLockProvider::new(&server));
    let executor = LockingExecutor::new(node.clone());
    let one = cfg("job");
    let (p, one, map, executor) = (node.as_ref(), &one, &map, &executor);

    let mut g = c.benchmark_group("memory");
    g.bench_function("raw_insert_remove", |b| b.iter(|| raw_insert_remove(map)));
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p, one)));
    g.bench_function("executor_execute", |b| {
        b.to_async(&rt)
            .iter(|| async { executor.execute(one, || async { black_box(1) }).await.unwrap() })
    });
    g.finish();

    let mut zoo = Zoo::new("memory", &rt);
    zoo.b1(
        op(move || cycle(p, one)),
        ("mutex-guarded map insert + remove", op(move || async move { raw_insert_remove(map) })),
        None,
        vec![(
            "LockingExecutor::execute (a no-op task)",
            op(move || async move {
                let r = executor.execute(one, || async { black_box(1) }).await.unwrap();
                assert!(r.was_executed(), "the name is free");
            }),
        )],
    );
    zoo.b2(|| {
        let server = server.clone();
        async move { Arc::new(MemoryLockProvider::new(&server)) as Arc<dyn LockProvider> }
    });
    zoo.b3(node.clone());
    zoo.b4(|| {
        let server = server.clone();
        async move { Arc::new(MemoryLockProvider::new(&server)) as Arc<dyn LockProvider> }
    });
    zoo.no_round_trips("in-process: no backend round trips");
    zoo.note("the reference model: its raw floor is a bare map operation, so B1's ratio measures the provider's bookkeeping (owner ids, clock reads, the lock handle), not a backend");
    zoo.finish();
    c.final_summary();
}

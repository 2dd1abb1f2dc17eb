//! ZooKeeper: the provider's `try_lock` + `unlock` (B1 cycle) beside the raw requests a
//! ZooKeeper lock builds on, on one session each: the naive floor (`create` of an ephemeral node,
//! then `delete`), and exactly the two transactions the provider sends (acquire: `setData` on the
//! name node + `create` of the ephemeral lock node; release: `check` of the name node's version +
//! `delete` of the lock node). N nodes (each with its own session) contending for one name. The
//! server comes from `shedlock-launcher` (`SHEDLOCK_ZOOKEEPER_URL` wins). Every write is a
//! ZooKeeper transaction, which the server fsyncs.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{sync::Arc, time::Duration};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use shedlock::{LockConfig, LockProvider};
use shedlock_benches::{contended_round, cycle};
use shedlock_launcher::Backend;
use shedlock_zookeeper::ZooKeeperLockProvider;
use zookeeper_client::{Acls, Client, CreateMode, MultiWriteResult};

fn cfg(name: &str) -> LockConfig {
    LockConfig::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

const ROOT: &str = "/bench";

fn zookeeper_bench(c: &mut Criterion) {
    let service =
        shedlock_launcher::shared(Backend::ZooKeeper).expect("ZooKeeper for the benchmark");
    let connect = service.url().to_owned();
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let provider = || ZooKeeperLockProvider::builder(connect.as_str()).root(ROOT).build().unwrap();
    let p = provider();
    rt.block_on(p.connect()).unwrap();
    let client = rt.block_on(Client::connect(&connect)).unwrap();
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let name_node = format!("{ROOT}/raw");
    let lock_node = format!("{name_node}/lock");
    rt.block_on(async {
        match client.create(&name_node, b"", &persistent).await {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => panic!("{e}"),
        }
    });
    let mut g = c.benchmark_group("zookeeper");

    // The naive floor: an ephemeral create and a delete (no owner check, no fencing).
    g.bench_function("raw_create_then_delete", |b| {
        b.to_async(&rt).iter(|| async {
            client.create(&lock_node, b"60001\nbench", &ephemeral).await.unwrap();
            client.delete(&lock_node, None).await.unwrap();
        })
    });

    // Exactly what the provider sends on a free name: two multi transactions.
    g.bench_function("raw_multi_pair", |b| {
        b.to_async(&rt).iter(|| async {
            let mut w = client.new_multi_writer();
            w.add_set_data(&name_node, b"", None).unwrap();
            w.add_create(&lock_node, b"60001\nbench", &ephemeral).unwrap();
            let r = w.commit().await.unwrap();
            let Some(MultiWriteResult::SetData { stat }) = r.into_iter().next() else {
                panic!("no setData result")
            };
            let mut w = client.new_multi_writer();
            w.add_check_version(&name_node, stat.version).unwrap();
            w.add_delete(&lock_node, Some(0)).unwrap();
            w.commit().await.unwrap();
        })
    });

    let one = cfg("cycle");
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(&p, &one)));

    for n in [2usize, 4] {
        let nodes: Vec<Arc<dyn LockProvider>> = rt.block_on(async {
            let mut v: Vec<Arc<dyn LockProvider>> = Vec::new();
            for _ in 0..n {
                let p = provider();
                p.connect().await.unwrap();
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

criterion_group!(benches, zookeeper_bench);
criterion_main!(benches);

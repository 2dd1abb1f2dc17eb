//! ZooKeeper: the provider's `try_lock` + `unlock` beside the raw requests a ZooKeeper lock builds
//! on, on one session each: exactly the two transactions the provider sends (acquire: `setData`
//! on the name node + `create` of the ephemeral lock node; release: `check` of the name node's
//! version + `delete` of the lock node), and the naive floor (an ephemeral `create`, then
//! `delete`: no owner check, no fencing): criterion's runs, then the zoo (B1 interleaved, B2,
//! B3, round trips; see `shedlock_benches::zoo`). The server comes from `shedlock-launcher`
//! (`SHEDLOCK_ZOOKEEPER_URL` wins). Every write is a ZooKeeper transaction, which the server
//! fsyncs.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use criterion::Criterion;
use shedlock::LockProvider;
use shedlock_benches::{
    cycle, runtime, server,
    zoo::{Zoo, cfg, op, unique},
};
use shedlock_launcher::Backend;
use shedlock_zookeeper::ZooKeeperLockProvider;
use zookeeper_client::{Acls, Client, CreateMode, MultiWriteResult};

const ROOT: &str = "/bench";

async fn node(connect: &str) -> Arc<dyn LockProvider> {
    let p = ZooKeeperLockProvider::builder(connect).root(ROOT).build().unwrap();
    p.connect().await.unwrap();
    Arc::new(p)
}

/// The naive floor: an ephemeral create and a delete.
async fn raw_create_delete(client: &Client, lock_node: &str) {
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    client.create(lock_node, b"120001\nbench", &ephemeral).await.unwrap();
    client.delete(lock_node, None).await.unwrap();
}

/// Exactly what the provider sends on a free name: two multi transactions.
async fn raw_multi_pair(client: &Client, name_node: &str, lock_node: &str) {
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let mut w = client.new_multi_writer();
    w.add_set_data(name_node, b"", None).unwrap();
    w.add_create(lock_node, b"120001\nbench", &ephemeral).unwrap();
    let r = w.commit().await.unwrap();
    let Some(MultiWriteResult::SetData { stat }) = r.into_iter().next() else {
        panic!("no setData result")
    };
    let mut w = client.new_multi_writer();
    w.add_check_version(name_node, stat.version).unwrap();
    w.add_delete(lock_node, Some(0)).unwrap();
    w.commit().await.unwrap();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let service = server(Backend::ZooKeeper);
    let connect = service.url().to_owned();
    let rt = runtime();
    let provider = rt.block_on(node(&connect));
    let client = rt.block_on(Client::connect(&connect)).unwrap();
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let name_node = format!("{ROOT}/{}", unique("raw"));
    let lock_node = format!("{name_node}/lock");
    let naive_node = format!("{ROOT}/{}", unique("naive"));
    rt.block_on(async {
        match client.create(&name_node, b"", &persistent).await {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => panic!("{e}"),
        }
    });
    let one = cfg(&unique("cycle"));
    let (p, one, client, name_node, lock_node, naive_node) = (
        provider.as_ref(),
        &one,
        &client,
        name_node.as_str(),
        lock_node.as_str(),
        naive_node.as_str(),
    );

    let mut g = c.benchmark_group("zookeeper");
    g.bench_function("raw_multi_pair", |b| {
        b.to_async(&rt).iter(|| raw_multi_pair(client, name_node, lock_node))
    });
    g.bench_function("raw_create_then_delete", |b| {
        b.to_async(&rt).iter(|| raw_create_delete(client, naive_node))
    });
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p, one)));
    g.finish();

    let mut zoo = Zoo::new("zookeeper", &rt);
    zoo.server(service);
    zoo.b1(
        op(move || cycle(p, one)),
        (
            "multi(setData + create) + multi(check + delete)",
            op(move || raw_multi_pair(client, name_node, lock_node)),
        ),
        None,
        vec![(
            "naive ephemeral create + delete (no owner check, no fencing)",
            op(move || raw_create_delete(client, naive_node)),
        )],
    );
    zoo.contention(&connect, provider.clone(), service.addr(), |u| async move { node(&u).await });
    zoo.finish();
    c.final_summary();
}

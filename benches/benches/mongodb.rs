//! MongoDB: the provider's `try_lock` + `unlock` (server time, the default; and client time)
//! beside the raw requests they send, issued by hand on the same client (a `findAndModify` with
//! upsert whose update pipeline takes the name only where `lockUntil <= $$NOW`, then a
//! `deleteOne` filtered on the owner id, both at write concern majority), and N nodes (each
//! with its own client) contending for one name. The server comes from `shedlock-launcher`
//! (`SHEDLOCK_MONGODB_URL` wins).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{sync::Arc, time::Duration};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mongodb::{
    Client,
    bson::{Bson, Document, doc},
    options::{ReturnDocument, WriteConcern},
};
use shedlock::{LockConfig, LockProvider, TimeSource};
use shedlock_benches::{contended_round, cycle};
use shedlock_launcher::Backend;
use shedlock_mongodb::MongoLockProvider;

fn cfg(name: &str) -> LockConfig {
    LockConfig::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

const DATABASE: &str = "shedlock_bench";
const COLLECTION: &str = "bench";

fn mongodb_bench(c: &mut Criterion) {
    let service = shedlock_launcher::shared(Backend::MongoDb).expect("MongoDB for the benchmark");
    let url = service.url().to_owned();
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let connect = || {
        let url = url.clone();
        async move { Client::with_uri_str(url).await.unwrap() }
    };
    let client = rt.block_on(connect());
    let node = |client: Client, time: TimeSource| {
        MongoLockProvider::builder(client.database(DATABASE))
            .collection(COLLECTION)
            .time_source(time)
            .build()
            .unwrap()
    };
    let provider = node(client.clone(), TimeSource::Server);
    rt.block_on(provider.create_collection()).unwrap();
    let mut g = c.benchmark_group("mongodb");

    // The floor: the provider's two requests (server time) by hand, on the same client.
    let coll = client.database(DATABASE).collection::<Document>(COLLECTION);
    let now = doc! { "$toDate": { "$toLong": "$$NOW" } };
    let free = doc! { "$lte": ["$lockUntil", now] };
    let token = doc! {
        "$max": [
            { "$add": [{ "$ifNull": ["$token", 0_i64] }, 1_i64] },
            { "$multiply": [{ "$toLong": "$$NOW" }, 1000_i64] },
        ]
    };
    let mut n = 0_i64;
    g.bench_function("raw_find_and_modify_then_delete", |b| {
        b.to_async(&rt).iter(|| {
            n += 1;
            let owner = n;
            let set = doc! {
                "lockUntil": { "$cond": [free.clone(), { "$add": ["$$NOW", 60_000_i64] }, "$lockUntil"] },
                "lockedAt": { "$cond": [free.clone(), "$$NOW", "$lockedAt"] },
                "lockedBy": { "$cond": [free.clone(), { "$literal": "bench" }, "$lockedBy"] },
                "owner": { "$cond": [free.clone(), owner, "$owner"] },
                "token": { "$cond": [free.clone(), token.clone(), "$token"] },
            };
            let coll = coll.clone();
            async move {
                let d = coll
                    .find_one_and_update(doc! { "_id": "raw" }, vec![doc! { "$set": set }])
                    .upsert(true)
                    .return_document(ReturnDocument::After)
                    .projection(doc! { "owner": 1, "token": 1 })
                    .write_concern(WriteConcern::majority())
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(d.get("owner"), Some(&Bson::Int64(owner)), "the raw name is free");
                let r = coll
                    .delete_one(doc! { "_id": "raw", "owner": owner })
                    .write_concern(WriteConcern::majority())
                    .await
                    .unwrap();
                assert_eq!(r.deleted_count, 1);
            }
        })
    });

    let p: Arc<dyn LockProvider> = Arc::new(provider.clone());
    let one = cfg("cycle");
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p.as_ref(), &one)));
    let ct: Arc<dyn LockProvider> = Arc::new(node(client.clone(), TimeSource::Client));
    let one = cfg("cycle-client-time");
    g.bench_function("try_lock_unlock_client_time", |b| {
        b.to_async(&rt).iter(|| cycle(ct.as_ref(), &one))
    });

    for n in [2usize, 4] {
        let nodes: Vec<Arc<dyn LockProvider>> = rt.block_on(async {
            let mut v: Vec<Arc<dyn LockProvider>> = Vec::new();
            for _ in 0..n {
                v.push(Arc::new(node(connect().await, TimeSource::Server)));
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

criterion_group!(benches, mongodb_bench);
criterion_main!(benches);

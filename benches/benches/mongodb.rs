//! MongoDB: the provider's `try_lock` + `unlock` (server time, the default; and client time)
//! beside the raw requests they send, issued by hand on the same client (a `findAndModify` with
//! upsert whose update pipeline takes the name only where `lockUntil <= $$NOW`, then a
//! `deleteOne` filtered on the owner id, both at write concern majority): criterion's runs,
//! then the zoo (B1 interleaved, B2, B3, round trips; see `shedlock_benches::zoo`). The server
//! comes from `shedlock-launcher` (`SHEDLOCK_MONGODB_URL` wins).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{
    Arc,
    atomic::{AtomicI64, Ordering},
};

use criterion::Criterion;
use mongodb::{
    Client, Collection,
    bson::{Bson, Document, doc},
    options::{ReturnDocument, WriteConcern},
};
use shedlock::{LockProvider, TimeSource};
use shedlock_benches::{
    cycle, runtime, server,
    zoo::{Zoo, cfg, op, unique},
};
use shedlock_launcher::Backend;
use shedlock_mongodb::MongoLockProvider;

const DATABASE: &str = "shedlock_bench";
const COLLECTION: &str = "bench";

fn node(client: &Client, time: TimeSource) -> MongoLockProvider {
    MongoLockProvider::builder(client.database(DATABASE))
        .collection(COLLECTION)
        .time_source(time)
        .build()
        .unwrap()
}

async fn server_time_node(url: &str) -> Arc<dyn LockProvider> {
    Arc::new(node(&Client::with_uri_str(url).await.unwrap(), TimeSource::Server))
}

/// The floor: the provider's two requests (server time) by hand, on the same client.
async fn raw_pair(coll: &Collection<Document>, id: &str, owner: i64) {
    let now = doc! { "$toDate": { "$toLong": "$$NOW" } };
    let free = doc! { "$lte": ["$lockUntil", now] };
    let token = doc! {
        "$max": [
            { "$add": [{ "$ifNull": ["$token", 0_i64] }, 1_i64] },
            { "$multiply": [{ "$toLong": "$$NOW" }, 1000_i64] },
        ]
    };
    let set = doc! {
        "lockUntil": { "$cond": [free.clone(), { "$add": ["$$NOW", 120_000_i64] }, "$lockUntil"] },
        "lockedAt": { "$cond": [free.clone(), "$$NOW", "$lockedAt"] },
        "lockedBy": { "$cond": [free.clone(), { "$literal": "bench" }, "$lockedBy"] },
        "owner": { "$cond": [free.clone(), owner, "$owner"] },
        "token": { "$cond": [free, token, "$token"] },
    };
    let d = coll
        .find_one_and_update(doc! { "_id": id }, vec![doc! { "$set": set }])
        .upsert(true)
        .return_document(ReturnDocument::After)
        .projection(doc! { "owner": 1, "token": 1 })
        .write_concern(WriteConcern::majority())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.get("owner"), Some(&Bson::Int64(owner)), "the raw name is free");
    let r = coll
        .delete_one(doc! { "_id": id, "owner": owner })
        .write_concern(WriteConcern::majority())
        .await
        .unwrap();
    assert_eq!(r.deleted_count, 1);
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let service = server(Backend::MongoDb);
    let url = service.url().to_owned();
    let rt = runtime();
    let client = rt.block_on(Client::with_uri_str(&url)).unwrap();
    let provider = node(&client, TimeSource::Server);
    rt.block_on(provider.create_collection()).unwrap();
    let provider: Arc<dyn LockProvider> = Arc::new(provider);
    let client_time: Arc<dyn LockProvider> = Arc::new(node(&client, TimeSource::Client));
    let coll = client.database(DATABASE).collection::<Document>(COLLECTION);
    let (one, raw_id) = (cfg(&unique("cycle")), unique("raw"));
    let owner = AtomicI64::new(1);
    let (p, ct, one, coll, raw_id, owner) =
        (provider.as_ref(), client_time.as_ref(), &one, &coll, raw_id.as_str(), &owner);
    let next = move || owner.fetch_add(1, Ordering::Relaxed);

    let mut g = c.benchmark_group("mongodb");
    g.bench_function("raw_find_and_modify_then_delete", |b| {
        b.to_async(&rt).iter(|| raw_pair(coll, raw_id, next()))
    });
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p, one)));
    g.bench_function("try_lock_unlock_client_time", |b| b.to_async(&rt).iter(|| cycle(ct, one)));
    g.finish();

    let mut zoo = Zoo::new("mongodb", &rt);
    zoo.server(service);
    zoo.b1(
        op(move || cycle(p, one)),
        (
            "findAndModify upsert + owner-filtered deleteOne (w: majority)",
            op(move || raw_pair(coll, raw_id, next())),
        ),
        None,
        vec![("provider in client time", op(move || cycle(ct, one)))],
    );
    zoo.contention(&url, provider.clone(), service.addr(), |u| async move {
        server_time_node(&u).await
    });
    zoo.finish();
    c.final_summary();
}

//! DynamoDB: the provider's `try_lock` + `unlock` beside the raw requests a DynamoDB lock builds
//! on, on the same client (plain HTTP to the local server): criterion's runs, then the zoo (B1
//! interleaved, B2, B3, round trips; see `shedlock_benches::zoo`). The server comes from
//! `shedlock-launcher` (dynalite natively; `SHEDLOCK_DYNAMODB_URL` wins).
//!
//! - `raw_update_pair`: the provider's own two requests by hand, a conditional `UpdateItem` that
//!   creates or takes over the item and a conditional `UpdateItem` that releases it: the floor.
//! - `raw_put_delete_pair`: what the `dynamodb-lease` crate sends per `try_acquire` + `release`
//!   (a conditional `PutItem`, a conditional `DeleteItem`). The crate itself cannot run against
//!   dynalite: its only constructor checks that TTL is enabled on the table, and dynalite has no
//!   `UpdateTimeToLive` (its `DescribeTimeToLive` always answers `DISABLED`). Its pattern by hand
//!   is the closest measurable stand-in, and leaves out its per-lease background task.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::HashMap,
    sync::Arc,
    time::{SystemTime, UNIX_EPOCH},
};

use aws_sdk_dynamodb::{
    Client,
    config::{BehaviorVersion, Credentials, Region},
    types::AttributeValue,
};
use criterion::Criterion;
use shedlock::LockProvider;
use shedlock_benches::{
    cycle, runtime, server,
    zoo::{Zoo, cfg, op, unique},
};
use shedlock_dynamodb::DynamoDbLockProvider;
use shedlock_launcher::Backend;

const TABLE: &str = "bench";

fn client(endpoint: &str) -> Client {
    let conf = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("bench", "bench", None, None, "bench"))
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    Client::from_conf(conf)
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn names(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// The provider's acquire and release, by hand.
async fn raw_update_pair(c: &Client, key: &str) {
    let now = now_ms();
    c.update_item()
        .table_name(TABLE)
        .key("_id", s(key))
        .update_expression(
            "SET #u = :until, #a = :now, #b = :by, #q = :acq, #f = if_not_exists(#f, :seed) + :one",
        )
        .condition_expression("attribute_not_exists(#u) OR #u <= :now")
        .set_expression_attribute_names(Some(names(&[
            ("#u", "lockUntil"),
            ("#a", "lockedAt"),
            ("#b", "lockedBy"),
            ("#q", "acquisitionId"),
            ("#f", "fencingToken"),
        ])))
        .expression_attribute_values(":until", n(now + 120_000))
        .expression_attribute_values(":now", n(now))
        .expression_attribute_values(":by", s("bench"))
        .expression_attribute_values(":acq", s("0123456789abcdef"))
        .expression_attribute_values(":seed", n(now * 1000))
        .expression_attribute_values(":one", n(1))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew)
        .send()
        .await
        .expect("free");
    c.update_item()
        .table_name(TABLE)
        .key("_id", s(key))
        .update_expression("REMOVE #u, #q")
        .condition_expression("#q = :acq")
        .set_expression_attribute_names(Some(names(&[
            ("#u", "lockUntil"),
            ("#q", "acquisitionId"),
        ])))
        .expression_attribute_values(":acq", s("0123456789abcdef"))
        .send()
        .await
        .expect("released");
}

/// dynamodb-lease 0.22's `try_acquire` + `release` requests, by hand (its table has the key
/// `key`; here the provider's table and `_id` serve, the requests are the same size).
async fn raw_put_delete_pair(c: &Client, key: &str) {
    let now = now_ms() / 1000;
    c.put_item()
        .table_name(TABLE)
        .item("_id", s(key))
        .item("lease_expiry", n(now + 120))
        .item("lease_version", s("9f1c2a4e-5b6d-4e7f-8a9b-0c1d2e3f4a5b"))
        .condition_expression("attribute_not_exists(lease_version) OR lease_expiry < :now")
        .expression_attribute_values(":now", n(now))
        .send()
        .await
        .expect("free");
    c.delete_item()
        .table_name(TABLE)
        .key("_id", s(key))
        .condition_expression("lease_version=:lease_v")
        .expression_attribute_values(":lease_v", s("9f1c2a4e-5b6d-4e7f-8a9b-0c1d2e3f4a5b"))
        .send()
        .await
        .expect("released");
}

fn node(endpoint: &str) -> Arc<dyn LockProvider> {
    Arc::new(DynamoDbLockProvider::builder(client(endpoint)).table(TABLE).build().unwrap())
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let service = server(Backend::DynamoDb);
    let url = service.url().trim_end_matches('/').to_owned();
    let rt = runtime();
    let raw = client(&url);
    let provider = DynamoDbLockProvider::builder(raw.clone()).table(TABLE).build().unwrap();
    rt.block_on(provider.create_table()).unwrap();
    let provider: Arc<dyn LockProvider> = Arc::new(provider);
    let (one, update_key, put_key) =
        (cfg(&unique("cycle")), unique("raw-update"), unique("raw-put"));
    let (p, one, raw, update_key, put_key) =
        (provider.as_ref(), &one, &raw, update_key.as_str(), put_key.as_str());

    let mut g = c.benchmark_group("dynamodb");
    g.bench_function("raw_update_pair", |b| {
        b.to_async(&rt).iter(|| raw_update_pair(raw, update_key))
    });
    g.bench_function("raw_put_delete_pair", |b| {
        b.to_async(&rt).iter(|| raw_put_delete_pair(raw, put_key))
    });
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p, one)));
    g.finish();

    let mut zoo = Zoo::new("dynamodb", &rt);
    zoo.server(service);
    zoo.b1(
        op(move || cycle(p, one)),
        ("conditional UpdateItem pair", op(move || raw_update_pair(raw, update_key))),
        None,
        vec![(
            "dynamodb-lease's requests by hand (PutItem + DeleteItem)",
            op(move || raw_put_delete_pair(raw, put_key)),
        )],
    );
    zoo.contention(&url, provider.clone(), service.addr(), |u| async move { node(&u) });
    zoo.note("no peer measured: dynamodb-lease cannot run on dynalite (its constructor requires TTL on the table, and dynalite has no UpdateTimeToLive); its two requests by hand are the extra row, without its per-lease background task");
    zoo.finish();
    c.final_summary();
}

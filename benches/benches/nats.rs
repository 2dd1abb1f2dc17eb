//! NATS JetStream: the provider's `try_lock` + `unlock` beside the raw requests a NATS lock builds
//! on (a publish with `Nats-Expected-Last-Subject-Sequence: 0` and `Nats-TTL`, then a
//! `STREAM.PURGE` of the subject up to that sequence), on the same client: criterion's runs,
//! then the zoo (B1 interleaved, B2, B3, round trips; see `shedlock_benches::zoo`). The server
//! comes from `shedlock-launcher` (`SHEDLOCK_NATS_URL` wins).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_nats::{Client, HeaderMap, Request};
use criterion::Criterion;
use shedlock::LockProvider;
use shedlock_benches::{
    cycle, runtime, server,
    zoo::{Zoo, cfg, op, unique},
};
use shedlock_launcher::Backend;
use shedlock_nats::NatsLockProvider;

const BUCKET: &str = "bench";

async fn node(url: &str) -> Arc<dyn LockProvider> {
    let client = async_nats::connect(url).await.unwrap();
    Arc::new(NatsLockProvider::builder(client).bucket(BUCKET).build().unwrap())
}

/// The floor: the same two requests by hand, on the same client.
async fn raw_pair(client: &Client, subject: &str, purge: &str) {
    let mut h = HeaderMap::new();
    h.insert("Nats-Expected-Last-Subject-Sequence", "0");
    h.insert("Nats-TTL", "120");
    let req = Request::new().headers(h).payload(r#"{"locked_by":"bench"}"#.into());
    let ack = client.send_request(subject.to_owned(), req).await.unwrap();
    let ack: serde_json::Value = serde_json::from_slice(&ack.payload).unwrap();
    let seq = ack["seq"].as_u64().expect("stored: the raw subject is free");
    let body = format!(r#"{{"filter":"{subject}","seq":{}}}"#, seq + 1);
    let r = client.request(purge.to_owned(), body.into()).await.unwrap();
    assert!(r.payload.starts_with(b"{\"type\""));
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let service = server(Backend::Nats);
    let url = service.url().to_owned();
    let rt = runtime();
    let client = rt.block_on(async_nats::connect(&url)).unwrap();
    let provider = NatsLockProvider::builder(client.clone()).bucket(BUCKET).build().unwrap();
    rt.block_on(provider.create_bucket()).unwrap();
    let subject = provider.subject_for(&unique("raw"));
    let purge = format!("$JS.API.STREAM.PURGE.{}", provider.stream());
    let provider: Arc<dyn LockProvider> = Arc::new(provider);
    let one = cfg(&unique("cycle"));
    let (p, one, client, subject, purge) =
        (provider.as_ref(), &one, &client, subject.as_str(), purge.as_str());

    let mut g = c.benchmark_group("nats");
    g.bench_function("raw_publish_then_purge", |b| {
        b.to_async(&rt).iter(|| raw_pair(client, subject, purge))
    });
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p, one)));
    g.finish();

    let mut zoo = Zoo::new("nats", &rt);
    zoo.server(service);
    zoo.b1(
        op(move || cycle(p, one)),
        ("expected-sequence publish + STREAM.PURGE", op(move || raw_pair(client, subject, purge))),
        None,
        Vec::new(),
    );
    zoo.contention(&url, provider.clone(), service.addr(), |u| async move { node(&u).await });
    zoo.finish();
    c.final_summary();
}

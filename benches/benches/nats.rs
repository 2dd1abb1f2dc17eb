//! NATS JetStream: the provider's `try_lock` + `unlock` beside the raw requests a NATS lock builds
//! on (a publish with `Nats-Expected-Last-Subject-Sequence: 0` and `Nats-TTL`, then a
//! `STREAM.PURGE` of the subject up to that sequence), on the same client, and N nodes (each
//! with its own client) contending for one name. The server comes from `shedlock-launcher`
//! (`SHEDLOCK_NATS_URL` wins).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::{sync::Arc, time::Duration};

use async_nats::{HeaderMap, Request};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use shedlock::{LockConfig, LockProvider};
use shedlock_benches::{contended_round, cycle};
use shedlock_launcher::Backend;
use shedlock_nats::NatsLockProvider;

fn cfg(name: &str) -> LockConfig {
    LockConfig::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

const BUCKET: &str = "bench";

fn nats_bench(c: &mut Criterion) {
    let service = shedlock_launcher::shared(Backend::Nats).expect("NATS for the benchmark");
    let url = service.url().to_owned();
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let connect = || {
        let url = url.clone();
        async move { async_nats::connect(url).await.unwrap() }
    };
    let client = rt.block_on(connect());
    let provider = NatsLockProvider::builder(client.clone()).bucket(BUCKET).build().unwrap();
    rt.block_on(provider.create_bucket()).unwrap();
    let mut g = c.benchmark_group("nats");

    // The floor: the same two requests by hand, on the same client.
    let subject = provider.subject_for("raw");
    let purge = format!("$JS.API.STREAM.PURGE.{}", provider.stream());
    g.bench_function("raw_publish_then_purge", |b| {
        b.to_async(&rt).iter(|| async {
            let mut h = HeaderMap::new();
            h.insert("Nats-Expected-Last-Subject-Sequence", "0");
            h.insert("Nats-TTL", "60");
            let req = Request::new().headers(h).payload(r#"{"locked_by":"bench"}"#.into());
            let ack = client.send_request(subject.clone(), req).await.unwrap();
            let ack: serde_json::Value = serde_json::from_slice(&ack.payload).unwrap();
            let seq = ack["seq"].as_u64().expect("stored");
            let body = format!(r#"{{"filter":"{subject}","seq":{}}}"#, seq + 1);
            let r = client.request(purge.clone(), body.into()).await.unwrap();
            assert!(r.payload.starts_with(b"{\"type\""));
        })
    });

    let p: Arc<dyn LockProvider> = Arc::new(provider.clone());
    let one = cfg("cycle");
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p.as_ref(), &one)));

    for n in [2usize, 4] {
        let nodes: Vec<Arc<dyn LockProvider>> = rt.block_on(async {
            let mut v: Vec<Arc<dyn LockProvider>> = Vec::new();
            for _ in 0..n {
                let p = NatsLockProvider::builder(connect().await).bucket(BUCKET).build().unwrap();
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

criterion_group!(benches, nats_bench);
criterion_main!(benches);

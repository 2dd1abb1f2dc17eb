//! S3 (conditional writes): the provider's `try_lock` + `unlock` beside the raw requests an S3
//! lock builds on, on the same client (plain HTTP, path-style, to the local server), and N nodes
//! (each with its own client) contending for one name. The server comes from
//! `shedlock-launcher` (moto natively; `SHEDLOCK_S3_URL` wins).
//!
//! - `raw_takeover_release`: `PutObject If-Match` over the released object (take over), then
//!   `PutObject If-Match` to release: what the provider sends per cycle once it has seen the
//!   object free (2 requests).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::{sync::Arc, time::Duration};

use aws_sdk_s3::{
    Client,
    config::{BehaviorVersion, Credentials, Region},
    primitives::ByteStream,
};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use shedlock::{LockConfig, LockProvider};
use shedlock_benches::{contended_round, cycle};
use shedlock_launcher::Backend;
use shedlock_s3::S3LockProvider;

const BUCKET: &str = "bench";

fn cfg(name: &str) -> LockConfig {
    LockConfig::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

fn client(endpoint: &str) -> Client {
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .credentials_provider(Credentials::new("bench", "bench", None, None, "bench"))
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    Client::from_conf(conf)
}

fn body(n: u64, held: bool) -> ByteStream {
    let until = if held { "4102444800000" } else { "null" };
    ByteStream::from(
        format!(
            r#"{{"v":1,"acquisition_id":"{n:016x}","lock_until_ms":{until},"locked_at_ms":0,"fencing_token":{n},"locked_by":"bench"}}"#
        )
        .into_bytes(),
    )
}

/// Take over a released object and release it again, with `If-Match` both times.
async fn raw_takeover_release(c: &Client, key: &str, etag: &mut String, n: &mut u64) {
    *n += 1;
    let held = c
        .put_object()
        .bucket(BUCKET)
        .key(key)
        .if_match(etag.as_str())
        .body(body(*n, true))
        .send()
        .await
        .expect("taken over");
    *n += 1;
    let released = c
        .put_object()
        .bucket(BUCKET)
        .key(key)
        .if_match(held.e_tag().unwrap())
        .body(body(*n, false))
        .send()
        .await
        .expect("released");
    *etag = released.e_tag().unwrap().to_owned();
}

fn s3_bench(c: &mut Criterion) {
    let service = shedlock_launcher::shared(Backend::S3).expect("S3 for the benchmark");
    let url = service.url().trim_end_matches('/').to_owned();
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let raw = client(&url);
    let provider = S3LockProvider::builder(raw.clone(), BUCKET).build().unwrap();
    rt.block_on(provider.create_bucket()).unwrap();
    let mut g = c.benchmark_group("s3");

    // The floor: the provider's steady-state requests by hand.
    let key = provider.key_for("raw");
    let (mut etag, mut n) = rt.block_on(async {
        let _ = raw.delete_object().bucket(BUCKET).key(&key).send().await;
        let out = raw
            .put_object()
            .bucket(BUCKET)
            .key(&key)
            .if_none_match("*")
            .body(body(1, false))
            .send()
            .await
            .unwrap();
        (out.e_tag().unwrap().to_owned(), 1u64)
    });
    g.bench_function("raw_takeover_release", |b| {
        b.iter(|| rt.block_on(raw_takeover_release(&raw, &key, &mut etag, &mut n)))
    });

    let p: Arc<dyn LockProvider> = Arc::new(provider.clone());
    let one = cfg("cycle");
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p.as_ref(), &one)));

    for k in [2usize, 4] {
        let nodes: Vec<Arc<dyn LockProvider>> = (0..k)
            .map(|_| {
                let p = S3LockProvider::builder(client(&url), BUCKET).build().unwrap();
                Arc::new(p) as Arc<dyn LockProvider>
            })
            .collect();
        let contended = cfg("contended");
        g.bench_with_input(BenchmarkId::new("contended_round", k), &nodes, |b, nodes| {
            b.to_async(&rt).iter(|| contended_round(nodes, &contended))
        });
    }
    g.finish();
}

criterion_group!(benches, s3_bench);
criterion_main!(benches);

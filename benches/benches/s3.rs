//! S3 (conditional writes): the provider's `try_lock` + `unlock` beside the raw requests an S3
//! lock builds on, on the same client (plain HTTP, path-style, to the local server):
//! criterion's runs, then the zoo (B1 interleaved, B2, B3, round trips; see
//! `shedlock_benches::zoo`). The server comes from `shedlock-launcher` (moto natively;
//! `SHEDLOCK_S3_URL` wins).
//!
//! - `raw_takeover_release`: `PutObject If-Match` over the released object (take over), then
//!   `PutObject If-Match` to release: what the provider sends per cycle once it has seen the
//!   object free (2 requests).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use aws_sdk_s3::{
    Client,
    config::{BehaviorVersion, Credentials, Region},
    primitives::ByteStream,
};
use criterion::Criterion;
use shedlock::LockProvider;
use shedlock_benches::{
    cycle, runtime, server,
    zoo::{Zoo, cfg, op, unique},
};
use shedlock_launcher::Backend;
use shedlock_s3::S3LockProvider;
use tokio::sync::Mutex;

const BUCKET: &str = "bench";

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
async fn raw_takeover_release(c: &Client, key: &str, state: &Mutex<(String, u64)>) {
    let mut state = state.lock().await;
    let (etag, n) = &mut *state;
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

fn node(endpoint: &str) -> Arc<dyn LockProvider> {
    Arc::new(S3LockProvider::builder(client(endpoint), BUCKET).build().unwrap())
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let service = server(Backend::S3);
    let url = service.url().trim_end_matches('/').to_owned();
    let rt = runtime();
    let raw = client(&url);
    let provider = S3LockProvider::builder(raw.clone(), BUCKET).build().unwrap();
    rt.block_on(provider.create_bucket()).unwrap();
    // The floor: the provider's steady-state requests by hand.
    let key = provider.key_for(&unique("raw"));
    let state = rt.block_on(async {
        let out = raw
            .put_object()
            .bucket(BUCKET)
            .key(&key)
            .if_none_match("*")
            .body(body(1, false))
            .send()
            .await
            .unwrap();
        Mutex::new((out.e_tag().unwrap().to_owned(), 1u64))
    });
    let provider: Arc<dyn LockProvider> = Arc::new(provider);
    let one = cfg(&unique("cycle"));
    let (p, one, raw, key, state) = (provider.as_ref(), &one, &raw, key.as_str(), &state);

    let mut g = c.benchmark_group("s3");
    g.bench_function("raw_takeover_release", |b| {
        b.to_async(&rt).iter(|| raw_takeover_release(raw, key, state))
    });
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p, one)));
    g.finish();

    let mut zoo = Zoo::new("s3", &rt);
    zoo.server(service);
    zoo.b1(
        op(move || cycle(p, one)),
        (
            "PutObject If-Match (take over) + PutObject If-Match (release)",
            op(move || raw_takeover_release(raw, key, state)),
        ),
        None,
        Vec::new(),
    );
    zoo.contention(&url, provider.clone(), service.addr(), |u| async move { node(&u) });
    zoo.finish();
    c.final_summary();
}

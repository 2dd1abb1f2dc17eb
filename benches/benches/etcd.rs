//! etcd: the provider's `try_lock` + `unlock` (B1) beside the raw transaction pair a lease lock
//! builds on (`version(key) = 0 → put with lease`, then an owner-checked delete), and beside
//! etcd-client's own Lock API (`lock` + `unlock` with a session lease, as etcd's
//! `concurrency.Mutex` does), on the same server and client. The server comes from
//! `shedlock-launcher` (`SHEDLOCK_ETCD_URL` wins).
//!
//! Besides criterion's runs (one variant after the other), an interleaved pass measures the
//! variants in turn, cycle by cycle, so that a server whose latency drifts (fsync, revision
//! growth) weighs on all of them alike; it prints medians and p99s. `SHEDLOCK_ETCD_CHURN=<n>`
//! instead runs `n` provider cycles on one name and prints the latency per 1 000 cycles and the
//! database size, without and then with a compaction every 1 000 cycles (the README's
//! compaction figures).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use etcd_client::{Client, Compare, CompareOp, LockOptions, PutOptions, Txn, TxnOp};
use shedlock::{LockConfig, LockProvider};
use shedlock_benches::{contended_round, cycle};
use shedlock_etcd::EtcdLockProvider;
use shedlock_launcher::Backend;

fn cfg(name: &str) -> LockConfig {
    LockConfig::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

/// The floor: the acquire transaction on a long-lived lease, then the owner-checked delete.
async fn raw_pair(client: &Client, key: &[u8], lease: i64) {
    let mut kv = client.kv_client();
    let put = Txn::new().when([Compare::version(key, CompareOp::Equal, 0)]).and_then([TxnOp::put(
        key,
        "bench",
        Some(PutOptions::new().with_lease(lease)),
    )]);
    let r = kv.txn(put).await.unwrap();
    assert!(r.succeeded(), "the raw key is free");
    let rev = r.header().unwrap().revision();
    let del = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, rev)])
        .and_then([TxnOp::delete(key, None)]);
    assert!(kv.txn(del).await.unwrap().succeeded());
}

/// etcd's Lock API: `lock` (creates `<name>/<lease>` and waits for earlier keys) and `unlock`.
async fn lock_api(client: &Client, name: &[u8], session: i64) {
    let mut lock = client.lock_client();
    let r = lock.lock(name, Some(LockOptions::new().with_lease(session))).await.unwrap();
    lock.unlock(r.key()).await.unwrap();
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn churn(rt: &tokio::runtime::Runtime, client: &Client, n: usize) {
    let p = EtcdLockProvider::builder(client.clone()).key_prefix("bench-churn/").build().unwrap();
    let one = cfg("churn");
    for compact in [false, true] {
        let mut c = client.clone();
        let start_rev =
            rt.block_on(c.get("bench-churn/", None)).unwrap().header().unwrap().revision();
        rt.block_on(c.compact(start_rev, None)).unwrap();
        rt.block_on(c.defragment()).unwrap();
        println!("churn, compaction every 1000 cycles: {compact}");
        let mut window = Vec::with_capacity(1000);
        for i in 1..=n {
            let s = Instant::now();
            rt.block_on(cycle(&p, &one));
            window.push(s.elapsed());
            if i % 1000 == 0 {
                let st = rt.block_on(c.status()).unwrap();
                let rev = st.header().unwrap().revision();
                if compact {
                    rt.block_on(c.compact(rev, None)).unwrap();
                }
                let mean = window.iter().sum::<Duration>() / window.len() as u32;
                let p50 = percentile(&mut window, 0.5);
                let p99 = percentile(&mut window, 0.99);
                println!(
                    "  cycles {:>6}: mean {mean:>9.2?} p50 {p50:>9.2?} p99 {p99:>9.2?}; revision \
                     {rev}, db size {} KiB",
                    i,
                    st.db_size() / 1024
                );
                window.clear();
            }
        }
    }
}

fn etcd_bench(c: &mut Criterion) {
    let service = shedlock_launcher::shared(Backend::Etcd).expect("etcd for the benchmark");
    let url = service.url().to_owned();
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let connect = || {
        let url = url.clone();
        async move { Client::connect([url], None).await.unwrap() }
    };
    let client = rt.block_on(connect());
    if let Some(n) = std::env::var("SHEDLOCK_ETCD_CHURN").ok().and_then(|v| v.parse().ok()) {
        churn(&rt, &client, n);
        return;
    }
    let mut admin = client.clone();
    let lease = rt.block_on(admin.lease_grant(3600, None)).unwrap().id();
    let session = rt.block_on(admin.lease_grant(3600, None)).unwrap().id();
    let provider = EtcdLockProvider::builder(client.clone()).key_prefix("bench/").build().unwrap();
    let fresh = EtcdLockProvider::builder(client.clone())
        .key_prefix("bench-fresh/")
        .reuse_leases(false)
        .build()
        .unwrap();
    let p: Arc<dyn LockProvider> = Arc::new(provider);
    let f: Arc<dyn LockProvider> = Arc::new(fresh);
    let one = cfg("cycle");

    // Interleaved: 1 000 rounds, each running every variant once, in turn.
    {
        let mut times: [Vec<Duration>; 4] = Default::default();
        for _ in 0..50 {
            rt.block_on(async {
                raw_pair(&client, b"bench-raw/warm", lease).await;
                lock_api(&client, b"bench-lockapi/warm", session).await;
                cycle(p.as_ref(), &one).await;
                cycle(f.as_ref(), &one).await;
            });
        }
        for _ in 0..1000 {
            rt.block_on(async {
                let s = Instant::now();
                raw_pair(&client, b"bench-raw/pair", lease).await;
                times[0].push(s.elapsed());
                let s = Instant::now();
                lock_api(&client, b"bench-lockapi/one", session).await;
                times[1].push(s.elapsed());
                let s = Instant::now();
                cycle(p.as_ref(), &one).await;
                times[2].push(s.elapsed());
                let s = Instant::now();
                cycle(f.as_ref(), &one).await;
                times[3].push(s.elapsed());
            });
        }
        let names = [
            "raw txn pair",
            "etcd Lock API (lock + unlock)",
            "provider B1 (reused lease)",
            "provider B1 (lease per acquire)",
        ];
        for (name, t) in names.iter().zip(times.iter_mut()) {
            let p50 = percentile(t, 0.5);
            let p99 = percentile(t, 0.99);
            println!("interleaved {name:<32}: p50 {p50:>9.2?} p99 {p99:>9.2?}");
        }
    }

    let mut g = c.benchmark_group("etcd");
    g.bench_function("raw_txn_pair", |b| {
        b.to_async(&rt).iter(|| raw_pair(&client, b"bench-raw/pair", lease))
    });
    g.bench_function("lock_api_lock_unlock", |b| {
        b.to_async(&rt).iter(|| lock_api(&client, b"bench-lockapi/one", session))
    });
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p.as_ref(), &one)));
    g.bench_function("try_lock_unlock_lease_per_acquire", |b| {
        b.to_async(&rt).iter(|| cycle(f.as_ref(), &one))
    });
    for n in [2usize, 4] {
        let nodes: Vec<Arc<dyn LockProvider>> = rt.block_on(async {
            let mut v: Vec<Arc<dyn LockProvider>> = Vec::new();
            for _ in 0..n {
                let p = EtcdLockProvider::builder(connect().await)
                    .key_prefix("bench/")
                    .build()
                    .unwrap();
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
    rt.block_on(async {
        let _ = admin.lease_revoke(lease).await;
        let _ = admin.lease_revoke(session).await;
    });
}

criterion_group!(benches, etcd_bench);
criterion_main!(benches);

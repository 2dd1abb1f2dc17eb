//! Interleaved cycle latencies against one etcd server, built with `--release` (the criterion
//! bench in `benches/` measures the same variants; this example needs only this crate's
//! dependencies, so an optimized build is quick): the raw transaction pair, etcd's Lock API and
//! this provider's `try_lock` + `unlock`, in turn, cycle by cycle.
//!
//! `cargo run --release -p shedlock-etcd --example cycle_latency -- http://127.0.0.1:2379 [rounds]`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, LockOptions, PutOptions, Txn, TxnOp};
use shedlock::{LockConfig, LockProvider};
use shedlock_etcd::EtcdLockProvider;

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "http://127.0.0.1:2379".to_owned());
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(1000);
    let client = Client::connect([url], None).await.unwrap();
    let mut admin = client.clone();
    let lease = admin.lease_grant(3600, None).await.unwrap().id();
    let session = admin.lease_grant(3600, None).await.unwrap().id();
    let reused = EtcdLockProvider::builder(client.clone()).key_prefix("example/").build().unwrap();
    let fresh = EtcdLockProvider::builder(client.clone())
        .key_prefix("example-fresh/")
        .reuse_leases(false)
        .build()
        .unwrap();
    let cfg = LockConfig::new("cycle", Duration::from_secs(60), Duration::ZERO).unwrap();
    let key = b"example-raw/pair".to_vec();
    let mut times: [Vec<Duration>; 4] = Default::default();
    for round in 0..rounds + 50 {
        let s = Instant::now();
        let mut kv = client.kv_client();
        let put = Txn::new()
            .when([Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), "raw", Some(PutOptions::new().with_lease(lease)))]);
        let r = kv.txn(put).await.unwrap();
        let rev = r.header().unwrap().revision();
        let del = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, rev)])
            .and_then([TxnOp::delete(key.clone(), None)]);
        assert!(kv.txn(del).await.unwrap().succeeded());
        let raw = s.elapsed();

        let s = Instant::now();
        let mut lock = client.lock_client();
        let r = lock.lock("example-lockapi", Some(LockOptions::new().with_lease(session))).await;
        lock.unlock(r.unwrap().key()).await.unwrap();
        let api = s.elapsed();

        let s = Instant::now();
        reused.try_lock(&cfg).await.unwrap().expect("free").unlock().await.unwrap();
        let b1 = s.elapsed();

        let s = Instant::now();
        fresh.try_lock(&cfg).await.unwrap().expect("free").unlock().await.unwrap();
        let b1_fresh = s.elapsed();
        if round >= 50 {
            for (t, d) in times.iter_mut().zip([raw, api, b1, b1_fresh]) {
                t.push(d);
            }
        }
    }
    let names = [
        "raw txn pair",
        "etcd Lock API (lock + unlock)",
        "provider B1 (reused lease)",
        "provider B1 (lease per acquire)",
    ];
    for (name, t) in names.iter().zip(times.iter_mut()) {
        let (p50, p99) = (percentile(t, 0.5), percentile(t, 0.99));
        println!("{name:<32}: p50 {p50:>9.2?} p99 {p99:>9.2?}");
    }
    let _ = admin.lease_revoke(lease).await;
    let _ = admin.lease_revoke(session).await;
}

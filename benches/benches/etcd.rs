//! etcd: the provider's `try_lock` + `unlock` beside the raw transaction pair a lease lock builds
//! on (`version(key) = 0 → put with lease`, then an owner-checked delete), and beside
//! etcd-client's own Lock API (`lock` + `unlock` with a session lease, as etcd's
//! `concurrency.Mutex` does), the peer, on the same server and client: criterion's runs, then
//! the zoo (B1 interleaved, B2, B3, round trips; see `shedlock_benches::zoo`). The server comes
//! from `shedlock-launcher` (`SHEDLOCK_ETCD_URL` wins).
//!
//! `SHEDLOCK_ETCD_CHURN=<n>` instead runs `n` provider cycles on one name and prints the latency
//! per 1 000 cycles and the database size, without and then with a compaction every 1 000
//! cycles (the README's compaction figures).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use criterion::Criterion;
use etcd_client::{
    Client, Compare, CompareOp, LeaseKeepAliveStream, LeaseKeeper, LockOptions, PutOptions, Txn,
    TxnOp,
};
use shedlock::LockProvider;
use shedlock_benches::{
    cycle, runtime, server,
    zoo::{Zoo, cfg, op, unique},
};
use shedlock_etcd::EtcdLockProvider;
use shedlock_launcher::Backend;

/// The floor's acquire: `key` put on `lease` if it does not exist.
fn put_if_absent(key: &[u8], lease: i64) -> Txn {
    Txn::new().when([Compare::version(key, CompareOp::Equal, 0)]).and_then([TxnOp::put(
        key,
        "bench",
        Some(PutOptions::new().with_lease(lease)),
    )])
}

/// The floor's owner-checked release: `key` deleted if the put at `revision` created it.
fn delete_if_created_at(key: &[u8], revision: i64) -> Txn {
    Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, revision)])
        .and_then([TxnOp::delete(key, None)])
}

/// The floor: the acquire transaction on a long-lived lease, then the owner-checked delete.
async fn raw_pair(client: &Client, key: &[u8], lease: i64) {
    let mut kv = client.kv_client();
    let put = put_if_absent(key, lease);
    let r = kv.txn(put).await.unwrap();
    assert!(r.succeeded(), "the raw key is free");
    let del = delete_if_created_at(key, r.header().unwrap().revision());
    assert!(kv.txn(del).await.unwrap().succeeded());
}

/// The floor plus the keep-alive the provider sends beside its acquire on a reused lease: the
/// put transaction and one renewal on the lease's open keep-alive stream, together, then the
/// owner-checked delete. What the provider's design costs before any of its own code.
async fn raw_pair_with_keep_alive(
    client: &Client,
    key: &[u8],
    lease: i64,
    keeper: &tokio::sync::Mutex<(LeaseKeeper, LeaseKeepAliveStream)>,
) {
    let mut kv = client.kv_client();
    let put = put_if_absent(key, lease);
    let mut k = keeper.lock().await;
    let (keeper, stream) = &mut *k;
    let renew = async {
        keeper.keep_alive().await.unwrap();
        stream.message().await.unwrap().expect("a keep-alive answer")
    };
    let (r, renewed) = tokio::join!(kv.txn(put), renew);
    let r = r.unwrap();
    assert!(r.succeeded() && renewed.ttl() > 0, "the raw key is free and the lease alive");
    let del = delete_if_created_at(key, r.header().unwrap().revision());
    assert!(kv.txn(del).await.unwrap().succeeded());
}

/// etcd's Lock API: `lock` (creates `<name>/<lease>` and waits for earlier keys) and `unlock`.
async fn lock_api(client: &Client, name: &[u8], session: i64) {
    let mut lock = client.lock_client();
    let r = lock.lock(name, Some(LockOptions::new().with_lease(session))).await.unwrap();
    lock.unlock(r.key()).await.unwrap();
}

async fn node(url: &str) -> Arc<dyn LockProvider> {
    let client = Client::connect([url], None).await.unwrap();
    Arc::new(EtcdLockProvider::builder(client).key_prefix("bench/").build().unwrap())
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

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let service = server(Backend::Etcd);
    let url = service.url().to_owned();
    let rt = runtime();
    let client = rt.block_on(Client::connect([url.as_str()], None)).unwrap();
    if let Some(n) = std::env::var("SHEDLOCK_ETCD_CHURN").ok().and_then(|v| v.parse().ok()) {
        churn(&rt, &client, n);
        return;
    }
    let mut admin = client.clone();
    let lease = rt.block_on(admin.lease_grant(3600, None)).unwrap().id();
    let session = rt.block_on(admin.lease_grant(3600, None)).unwrap().id();
    let keeper = tokio::sync::Mutex::new(
        rt.block_on(client.lease_client().keep_alive(lease)).expect("a keep-alive stream"),
    );
    let provider: Arc<dyn LockProvider> =
        Arc::new(EtcdLockProvider::builder(client.clone()).key_prefix("bench/").build().unwrap());
    let fresh: Arc<dyn LockProvider> = Arc::new(
        EtcdLockProvider::builder(client.clone())
            .key_prefix("bench-fresh/")
            .reuse_leases(false)
            .build()
            .unwrap(),
    );
    // Without the loss watch (a watch per held lock, created and cancelled on the shared watch
    // stream): what the watch costs the cycle.
    let unwatched: Arc<dyn LockProvider> = Arc::new(
        EtcdLockProvider::builder(client.clone())
            .key_prefix("bench-unwatched/")
            .watch_for_loss(false)
            .build()
            .unwrap(),
    );
    let (one, raw_key, lock_name) =
        (cfg(&unique("cycle")), unique("bench-raw/pair"), unique("bench-lockapi/one"));
    let (u, keeper) = (unwatched.as_ref(), &keeper);
    let (p, f, one, client, raw_key, lock_name) = (
        provider.as_ref(),
        fresh.as_ref(),
        &one,
        &client,
        raw_key.as_bytes(),
        lock_name.as_bytes(),
    );

    let mut g = c.benchmark_group("etcd");
    g.bench_function("raw_txn_pair", |b| b.to_async(&rt).iter(|| raw_pair(client, raw_key, lease)));
    g.bench_function("lock_api_lock_unlock", |b| {
        b.to_async(&rt).iter(|| lock_api(client, lock_name, session))
    });
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p, one)));
    g.bench_function("try_lock_unlock_lease_per_acquire", |b| {
        b.to_async(&rt).iter(|| cycle(f, one))
    });
    g.finish();

    let mut zoo = Zoo::new("etcd", &rt);
    zoo.server(service);
    zoo.b1(
        op(move || cycle(p, one)),
        (
            "txn(version = 0 → put with lease) + owner-checked delete txn",
            op(move || raw_pair(client, raw_key, lease)),
        ),
        Some((
            "etcd-client Lock API (lock + unlock, session lease)",
            op(move || lock_api(client, lock_name, session)),
        )),
        vec![
            ("provider, a lease per acquire (reuse_leases(false))", op(move || cycle(f, one))),
            ("provider without the loss watch (watch_for_loss(false))", op(move || cycle(u, one))),
            (
                "floor + a keep-alive beside the put (on an open stream), as the provider sends",
                op(move || raw_pair_with_keep_alive(client, raw_key, lease, keeper)),
            ),
        ],
    );
    zoo.contention(&url, provider.clone(), service.addr(), |u| async move { node(&u).await });
    zoo.note("the Lock API's lock has no expiry of its own: it lives as long as the session lease the caller keeps alive, and it queues instead of answering 'held' (a try-lock needs a timeout around it). The provider's acquire on a reused lease sends its transaction and a keep-alive of the lease together (the lease must live lock_at_most_for from the acquire); the keep-alive is one message on the lease's open stream, answered by the leader beside the transaction, and the cycle waits for both: that pair against the floor's lone transaction is the provider's remaining cost (compare the row without the loss watch). The loss watch is created only for a lock held 200 ms, so a short task costs the server no watch. The server CPU column shows what that keep-alive costs etcd per cycle (the floor with and without it); the Lock API pays it once per session, not per lock, because its lock has no expiry of its own");
    zoo.finish();
    rt.block_on(async {
        let _ = admin.lease_revoke(lease).await;
        let _ = admin.lease_revoke(session).await;
    });
    c.final_summary();
}

//! Fail-over on a Redis Cluster of 3 masters with one replica each, started by this test (it
//! must own the nodes to kill one): the master that owns a held lock's slot dies mid-hold.
//!
//! Redis replicates asynchronously, so a master that dies before a write reaches its replica
//! loses that write: a lock granted in that window is lost on fail-over (the README's caveat).
//! Here the master dies well after the grant (the replica has it), so the promoted replica must
//! still hold the lock: no contender may get it while its holder holds it. The tests measure
//! how long locking is unavailable around the fail-over.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use shedlock::ProviderBuilder as _;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use shedlock::LockProvider;
use shedlock_launcher::{Backend, LaunchOptions, Service};
use shedlock_redis::RedisLockProvider;
use shedlock_test_support::cfg;

async fn own_cluster() -> Arc<Service> {
    let opts = LaunchOptions::new().ignore_env(true);
    let s = tokio::task::spawn_blocking(move || Service::start(Backend::RedisCluster, &opts))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("Redis Cluster is not available: {e}"));
    Arc::new(s)
}

async fn provider(urls: &str) -> RedisLockProvider<redis::cluster_async::ClusterConnection> {
    RedisLockProvider::builder(common::cluster_connection(urls).await.unwrap())
        .key_prefix("failover:")
        .operation_timeout(Some(Duration::from_secs(3)))
        .build()
        .await
        .unwrap()
}

/// The index (in the service's node order) of the master that serves `key`'s slot, read from
/// `CLUSTER NODES` on a live node.
async fn master_of(service: &Service, key: &str, skip: Option<usize>) -> usize {
    let addrs = service.addrs();
    let ask = addrs.iter().enumerate().find(|(i, _)| Some(*i) != skip).unwrap().1;
    let client = redis::Client::open(format!("redis://{ask}")).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let slot: u16 =
        redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query_async(&mut c).await.unwrap();
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut c).await.unwrap();
    for line in nodes.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
            continue;
        }
        let serves = f[8..].iter().any(|r| {
            let (lo, hi) = r.split_once('-').unwrap_or((r, r));
            matches!((lo.parse::<u16>(), hi.parse::<u16>()), (Ok(lo), Ok(hi)) if lo <= slot && slot <= hi)
        });
        if serves {
            let port: u16 =
                f[1].split(['@', ',']).next().unwrap().rsplit(':').next().unwrap().parse().unwrap();
            return addrs.iter().position(|a| a.port() == port).unwrap();
        }
    }
    panic!("no master serves slot {slot}:\n{nodes}");
}

/// What contenders saw while polling one name.
#[derive(Default)]
struct Seen {
    acquired: Vec<Duration>,
    errors: Vec<Duration>,
    refused: Vec<Duration>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_survives_the_failover_of_its_master_and_locking_resumes() {
    let service = own_cluster().await;
    let urls = service.url().to_owned();
    let holder = provider(&urls).await;
    let contenders = [provider(&urls).await, provider(&urls).await];
    let name = "nightly-report";
    let config = cfg(name, 60_000, 0);

    let lock = holder.try_lock(&config).await.unwrap().expect("the name is free");
    let token = lock.fencing_token().unwrap();
    let master = master_of(&service, &holder.key(name), None).await;
    // Well past the replication of the grant (asynchronous, sub-millisecond on loopback).
    tokio::time::sleep(Duration::from_millis(200)).await;

    let t0 = Instant::now();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for p in contenders.clone() {
        let (seen, stop, config) = (seen.clone(), stop.clone(), config.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match p.try_lock(&config).await {
                    Ok(Some(l)) => {
                        seen.lock().unwrap().acquired.push(t0.elapsed());
                        let _ = l.unlock().await;
                    }
                    Ok(None) => seen.lock().unwrap().refused.push(t0.elapsed()),
                    Err(_) => seen.lock().unwrap().errors.push(t0.elapsed()),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }

    let s = service.clone();
    tokio::task::spawn_blocking(move || s.kill_node(master)).await.unwrap().unwrap();
    let killed = t0.elapsed();
    // Wait until the contenders are answered again (refused, since the lock is still held):
    // refusals for 300 ms after the last error. Requests sent to the dead master either fail
    // (timeout) or wait inside the cluster client until the slot has a new master.
    let deadline = Instant::now() + Duration::from_secs(30);
    let resumed = loop {
        let (last_error, first_refusal, span) = {
            let seen = seen.lock().unwrap();
            let last_error = seen.errors.iter().copied().filter(|t| *t > killed).max();
            let after = last_error.unwrap_or(killed);
            let refusals: Vec<Duration> =
                seen.refused.iter().copied().filter(|t| *t > after).collect();
            let span = match (refusals.first(), refusals.last()) {
                (Some(a), Some(b)) => *b - *a,
                _ => Duration::ZERO,
            };
            (last_error, refusals.first().copied(), span)
        };
        if let Some(first) = first_refusal.filter(|_| span > Duration::from_millis(300)) {
            break last_error.map_or(first, |e| e.min(first));
        }
        if Instant::now() > deadline {
            let seen = seen.lock().unwrap();
            let msg = format!(
                "locking did not resume within 30 s of the kill at {killed:?}: {} errors (last \
                 {last_error:?}), {} refusals, acquisitions at {:?}",
                seen.errors.len(),
                seen.refused.len(),
                seen.acquired
            );
            drop(seen);
            panic!("{msg}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    eprintln!(
        "master {master} killed at {killed:?}; answered again from {resumed:?} (unavailable for \
         {:?}); {} errors, {} refusals, {} acquisitions",
        resumed.saturating_sub(killed),
        seen.errors.len(),
        seen.refused.len(),
        seen.acquired.len()
    );
    assert!(
        seen.acquired.is_empty(),
        "a contender took the lock while its holder held it, at {:?}: the promoted replica lost it",
        seen.acquired
    );
    assert!(!lock.is_lost());

    // The holder releases through the promoted replica (it has the holder's value), and the
    // next holder's token is larger.
    lock.unlock().await.unwrap();
    let next =
        contenders[0].try_lock(&config).await.unwrap().expect("free after the holder's unlock");
    assert!(next.fencing_token().unwrap() > token);
    next.unlock().await.unwrap();

    // The old master comes back as a replica; the cluster keeps working.
    let s = service.clone();
    tokio::task::spawn_blocking(move || s.start_node(master)).await.unwrap().unwrap();
    let l = holder.try_lock(&cfg("after-rejoin", 10_000, 0)).await.unwrap().expect("free");
    l.unlock().await.unwrap();
    eprintln!("done at {:?}", t0.elapsed());
}

/// A listing walks every master of the shared cluster: 40 locks, whose names hash all over the
/// slots, come back exactly once each in pages of 7 (so pages end inside a `SCAN` step), with
/// their fencing tokens, and no fence counter or neighbouring key is ever listed as a lock.
#[tokio::test]
async fn list_returns_each_lock_on_every_master_once_in_pages_and_never_a_fence_counter() {
    let url = shedlock_test_support::url(Backend::RedisCluster, "Redis Cluster").await;
    let prefix = shedlock_test_support::unique("list");
    let p = RedisLockProvider::builder(common::cluster_connection(&url).await.unwrap())
        .key_prefix(format!("{prefix}:"))
        .build()
        .await
        .unwrap();
    let mut held = Vec::new();
    for i in 0..40 {
        held.push(p.try_lock(&cfg(&format!("job-{i:02}"), 30_000, 0)).await.unwrap().unwrap());
    }
    held.push(p.try_lock(&cfg("jox", 30_000, 0)).await.unwrap().unwrap());
    let mut conn = p.connection();
    let mut thirds = std::collections::HashSet::new();
    for l in &held {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(p.key(l.name()))
            .query_async(&mut conn)
            .await
            .unwrap();
        // `redis-cli --cluster create` gives each of the three masters a third of the slots.
        thirds.insert(usize::from(slot) * 3 / 16384);
    }
    assert_eq!(thirds.len(), 3, "the names do not spread over the three masters");
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let page = p.list("job-", cursor.as_deref(), 7).await.unwrap();
        assert!(page.records.len() <= 7);
        for r in &page.records {
            assert!(r.held && r.fencing_token.is_some(), "{r:?}");
        }
        listed.extend(page.records.into_iter().map(|r| r.name));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    listed.sort();
    let expected: Vec<String> = (0..40).map(|i| format!("job-{i:02}")).collect();
    assert_eq!(listed, expected);
    for l in held {
        l.unlock().await.unwrap();
    }
}

/// On the shared cluster every master has a replica: an acquire with `wait_for_replicas(1)`
/// counts once the replica acknowledged it, and the lock works as any other.
#[tokio::test]
async fn an_acquire_acknowledged_by_a_replica_counts_on_the_cluster() {
    let url = shedlock_test_support::url(Backend::RedisCluster, "Redis Cluster").await;
    let prefix = format!("{}:", shedlock_test_support::unique("wait"));
    let p = RedisLockProvider::builder(common::cluster_connection(&url).await.unwrap())
        .key_prefix(&prefix)
        .wait_for_replicas(1, Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let lock = p.try_lock(&cfg("job", 60_000, 0)).await.unwrap().expect("a free name");
    assert!(lock.fencing_token().is_some());
    assert!(p.try_lock(&cfg("job", 60_000, 0)).await.unwrap().is_none(), "held");
    lock.unlock().await.unwrap();
    p.try_lock(&cfg("job", 60_000, 0)).await.unwrap().expect("released").unlock().await.unwrap();
}

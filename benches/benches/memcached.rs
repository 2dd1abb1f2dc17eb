//! memcached: the raw meta commands an acquire and a release build on (an add-mode `ms` that
//! returns the CAS, then a CAS-checked `md`, issued by hand on one `RawConnection`, the same
//! connection code the provider uses) beside the provider's `try_lock` + `unlock`, and N nodes
//! contending for one name. The server comes from `shedlock-launcher` (`SHEDLOCK_MEMCACHED_URL`
//! wins).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{sync::Arc, time::Duration};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use shedlock::{LockConfig, LockProvider};
use shedlock_benches::{contended_round, cycle};
use shedlock_launcher::Backend;
use shedlock_memcached::{MemcachedLockProvider, RawConnection};

fn cfg(name: &str) -> LockConfig {
    LockConfig::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

fn memcached(c: &mut Criterion) {
    let service =
        shedlock_launcher::shared(Backend::Memcached).expect("memcached for the benchmark");
    let addr = service.url().trim_start_matches("memcache://").trim_end_matches('/').to_owned();
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let node = || MemcachedLockProvider::builder(&addr).key_prefix("bench:").build().unwrap();
    let mut g = c.benchmark_group("memcached");

    // The raw floor: what the provider sends for one acquire and one release, same key and
    // value sizes, on one connection.
    let key = node().key("raw").unwrap();
    let value = format!("{:016x} {}", 0u64, shedlock::support::default_locked_by());
    let add = format!("ms {key} {} b T62 ME c\r\n{value}\r\n", value.len()).into_bytes();
    // Behind an (uncontended) async mutex so that criterion's async loop can borrow it.
    let raw = tokio::sync::Mutex::new(rt.block_on(RawConnection::connect(&addr)).unwrap());
    g.bench_function("raw_add_then_cas_delete", |b| {
        b.to_async(&rt).iter(|| async {
            let mut raw = raw.lock().await;
            let r = raw.request(&add).await.unwrap();
            assert_eq!(r.code, "HD", "the raw key is free");
            let cas = r.flag('c').unwrap().to_owned();
            let r = raw.request(format!("md {key} b C{cas}\r\n").as_bytes()).await.unwrap();
            assert_eq!(r.code, "HD");
        })
    });

    let provider: Arc<dyn LockProvider> = Arc::new(node());
    let one = cfg("bench");
    g.bench_function("try_lock_unlock", |b| {
        b.to_async(&rt).iter(|| cycle(provider.as_ref(), &one))
    });
    for n in [2usize, 4] {
        let nodes: Vec<Arc<dyn LockProvider>> =
            (0..n).map(|_| Arc::new(node()) as Arc<dyn LockProvider>).collect();
        let contended = cfg("contended");
        g.bench_with_input(BenchmarkId::new("contended_round", n), &nodes, |b, nodes| {
            b.to_async(&rt).iter(|| contended_round(nodes, &contended))
        });
    }
    g.finish();
}

criterion_group!(benches, memcached);
criterion_main!(benches);

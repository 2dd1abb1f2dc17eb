//! memcached: the provider's `try_lock` + `unlock` beside the raw meta commands an acquire and a
//! release build on (an add-mode `ms` that returns the CAS, then a CAS-checked `md`, issued by
//! hand on one `RawConnection`, the connection code the provider uses): criterion's runs, then
//! the zoo (B1 interleaved, B2, B3, round trips; see `shedlock_benches::zoo`). The server comes
//! from `shedlock-launcher` (`SHEDLOCK_MEMCACHED_URL` wins).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use criterion::Criterion;
use shedlock::LockProvider;
use shedlock_benches::{
    cycle, runtime, server,
    zoo::{Zoo, cfg, op, unique},
};
use shedlock_launcher::Backend;
use shedlock_memcached::{MemcachedLockProvider, RawConnection};
use tokio::sync::Mutex;

fn node(addr: &str) -> Arc<dyn LockProvider> {
    Arc::new(MemcachedLockProvider::builder(addr).key_prefix("bench:").build().unwrap())
}

/// The floor: what the provider sends for one acquire and one release, same key and value
/// sizes, on one connection.
async fn raw_pair(raw: &Mutex<RawConnection>, add: &[u8], key: &str) {
    let mut raw = raw.lock().await;
    let r = raw.request(add).await.unwrap();
    assert_eq!(r.code, "HD", "the raw key is free");
    let cas = r.flag('c').unwrap().to_owned();
    let r = raw.request(format!("md {key} b C{cas}\r\n").as_bytes()).await.unwrap();
    assert_eq!(r.code, "HD");
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let service = server(Backend::Memcached);
    let addr = service.url().trim_start_matches("memcache://").trim_end_matches('/').to_owned();
    let rt = runtime();
    let key = MemcachedLockProvider::builder(&addr)
        .key_prefix("bench:")
        .build()
        .unwrap()
        .key(&unique("raw"))
        .unwrap();
    let value = format!("{:016x} {}", 0u64, shedlock::support::default_locked_by());
    let add = format!("ms {key} {} b T122 ME c\r\n{value}\r\n", value.len()).into_bytes();
    let raw = Mutex::new(rt.block_on(RawConnection::connect(&addr)).unwrap());
    let provider = node(&addr);
    let one = cfg(&unique("cycle"));
    let (p, one, raw, add, key) = (provider.as_ref(), &one, &raw, add.as_slice(), key.as_str());

    let mut g = c.benchmark_group("memcached");
    g.bench_function("raw_add_then_cas_delete", |b| {
        b.to_async(&rt).iter(|| raw_pair(raw, add, key))
    });
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p, one)));
    g.finish();

    let mut zoo = Zoo::new("memcached", &rt);
    zoo.server(service);
    zoo.b1(
        op(move || cycle(p, one)),
        ("meta ms (add) + CAS-checked md", op(move || raw_pair(raw, add, key))),
        None,
        Vec::new(),
    );
    zoo.contention(&addr, provider.clone(), service.addr(), |u| async move { node(&u) });
    zoo.finish();
    c.final_summary();
}

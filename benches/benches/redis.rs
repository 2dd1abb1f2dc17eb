//! Redis: the provider's `try_lock` + `unlock` beside the raw commands a Redis lock builds on
//! (`SET NX PX`, then a compare-and-`DEL` script) on the same kind of connection
//! (`ConnectionManager`), and beside the `rslock` crate (feature `peers`) on the same server:
//! criterion's runs, then the zoo (B1 interleaved, B2, B3, round trips; see
//! `shedlock_benches::zoo`). The server comes from `shedlock-launcher` (`SHEDLOCK_REDIS_URL`
//! wins).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use criterion::Criterion;
use redis::aio::{ConnectionManager, MultiplexedConnection};
use shedlock::LockProvider;
use shedlock_benches::{
    cycle, runtime, server,
    zoo::{Zoo, cfg, op, unique},
};
use shedlock_launcher::Backend;
use shedlock_redis::RedisLockProvider;

const COMPARE_DEL: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// The floor: `SET key value NX PX 120000`, then the compare-and-`DEL` script.
async fn raw_pair(mut conn: ConnectionManager, script: &redis::Script, key: &str) {
    let value = "0123456789abcdef|bench";
    let ok: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(120_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ok.is_some(), "the raw key is free");
    let n: i64 = script.key(key).arg(value).invoke_async(&mut conn).await.unwrap();
    assert_eq!(n, 1);
}

async fn manager(url: &str) -> ConnectionManager {
    ConnectionManager::new(redis::Client::open(url).unwrap()).await.unwrap()
}

async fn multiplexed(url: &str) -> MultiplexedConnection {
    redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap()
}

async fn node(url: &str) -> Arc<dyn LockProvider> {
    let p = RedisLockProvider::builder(manager(url).await).key_prefix("bench:").build().await;
    Arc::new(p.unwrap())
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let service = server(Backend::Redis);
    let url = service.url().to_owned();
    let rt = runtime();

    let raw = rt.block_on(manager(&url));
    let script = redis::Script::new(COMPARE_DEL);
    let provider = rt.block_on(node(&url));
    // The same provider on a plain multiplexed connection (what rslock uses), without the
    // ConnectionManager's reconnecting layer.
    let mux: Arc<dyn LockProvider> = rt.block_on(async {
        let p = RedisLockProvider::builder(multiplexed(&url).await).key_prefix("bench:").build();
        Arc::new(p.await.unwrap())
    });
    // The ShedLock-compatible mode: `SET NX PX` and a compare-and-`DEL`, no fencing token.
    let compat: Arc<dyn LockProvider> = rt.block_on(async {
        let p = RedisLockProvider::builder(manager(&url).await)
            .shedlock_compatible()
            .key_prefix("bench-compat")
            .build()
            .await;
        Arc::new(p.unwrap())
    });
    #[cfg(feature = "peers")]
    let rl = rslock::LockManager::new(vec![url.clone()]);
    let (one, raw_key, peer_key) = (cfg(&unique("cycle")), unique("bench:raw"), unique("bench:rl"));
    let (p, m, sc, one, script, raw_key) =
        (provider.as_ref(), mux.as_ref(), compat.as_ref(), &one, &script, &raw_key);
    let raw = &raw;

    let mut g = c.benchmark_group("redis");
    g.bench_function("raw_set_nx_px_then_compare_del", |b| {
        b.to_async(&rt).iter(|| raw_pair(raw.clone(), script, raw_key))
    });
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p, one)));
    g.bench_function("try_lock_unlock_multiplexed", |b| b.to_async(&rt).iter(|| cycle(m, one)));
    #[cfg(feature = "peers")]
    g.bench_function("peer_rslock_lock_unlock", |b| {
        b.to_async(&rt).iter(|| async {
            let lock =
                rl.lock(peer_key.as_str(), std::time::Duration::from_secs(120)).await.unwrap();
            rl.unlock(&lock).await;
        })
    });
    g.finish();

    let mut zoo = Zoo::new("redis", &rt);
    zoo.server(service);
    #[cfg(feature = "peers")]
    let peer = {
        let (rl, key) = (&rl, peer_key.as_str());
        Some((
            "rslock (lock + unlock)",
            op(move || async move {
                let lock = rl.lock(key, std::time::Duration::from_secs(120)).await.unwrap();
                rl.unlock(&lock).await;
            }),
        ))
    };
    #[cfg(not(feature = "peers"))]
    let peer = {
        let _ = &peer_key;
        None
    };
    zoo.b1(
        op(move || cycle(p, one)),
        ("SET NX PX + compare-DEL script", op(move || raw_pair(raw.clone(), script, raw_key))),
        peer,
        vec![
            ("provider on a MultiplexedConnection", op(move || cycle(m, one))),
            (
                "provider, ShedLock-compatible mode (SET NX PX, no fencing)",
                op(move || cycle(sc, one)),
            ),
        ],
    );
    zoo.contention(&url, provider.clone(), service.addr(), |u| async move { node(&u).await });
    zoo.note("the provider's acquire is one Lua script (GET, TIME, SET … GET of the fencing counter, SET PX) and its release another (GET, DEL; TIME only with lock_at_least_for); the floor is SET NX PX and a compare-DEL script, which is also all rslock sends: neither has a fencing token or server-time at-least. The gap to the floor is CPU on both sides, in the CPU columns of this run. The server's share is the script (INFO commandstats: about 14.5 µs of script time per cycle against the floor's 6 µs; a bare scripted GET + SET PX already costs 10 µs). The client's share is spread thin: a perf profile of the provider against the floor (SHEDLOCK_BENCH_PROFILE=provider, then =SET) put no symbol above 1.6 µs per cycle: allocation about 3 µs, core's try_lock and unlock frames with the delegating layer about 2.5 µs, parsing the script's three-value answer about 1.5 µs, spans and the operation timer about 1 µs. On 2 cores the client and the server take turns, so a cycle is slower by about the sum. The ShedLock-compatible mode's row (no fencing, no clock) is the floor's commands inside the provider");
    zoo.finish();
    c.final_summary();
}

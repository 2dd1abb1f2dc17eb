//! PostgreSQL: the provider's `try_lock` + `unlock` beside the raw statements an acquire and a
//! release build on (a one-statement upsert and an update, through the same kind of pool), and
//! beside sqlx's `PgAdvisoryLock` (`pg_try_advisory_lock` + `pg_advisory_unlock` on a pooled
//! connection), the peer: criterion's runs, then the zoo (B1 interleaved, B2, B3, round trips;
//! see `shedlock_benches::zoo`). The server comes from `shedlock-launcher`
//! (`SHEDLOCK_POSTGRES_URL` wins); it runs with `fsync` and `synchronous_commit` off. B1 also
//! measures, in the same interleaved pass, a second, durable server the launcher starts
//! (`LaunchOptions::durable(true)`: PostgreSQL's defaults, each commit waits for a WAL flush):
//! the provider, the provider with `asynchronous_commit(true)`, the provider on an UNLOGGED
//! table, and `PgAdvisoryLock` there.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use criterion::Criterion;
use shedlock::LockProvider;
use shedlock_benches::{
    cycle, runtime, server,
    zoo::{Zoo, cfg, op, unique},
};
use shedlock_launcher::{Backend, LaunchOptions, Service};
use shedlock_postgres::PostgresLockProvider;
use sqlx::{Either, PgPool, postgres::PgAdvisoryLock};

const TABLE: &str = "bench_shedlock";

async fn pool(url: &str) -> PgPool {
    shedlock_postgres::recommended_pool_options().connect(url).await.unwrap()
}

async fn node(url: &str) -> Arc<dyn LockProvider> {
    Arc::new(PostgresLockProvider::builder(pool(url).await).table(TABLE).build().unwrap())
}

/// An instance as a fleet runs it (B4's batch path): a pool of one connection beside the
/// provider's own, so it never holds more than two, whatever the number of jobs.
async fn fleet_node(url: &str) -> Arc<dyn LockProvider> {
    let pool = shedlock_postgres::recommended_pool_options()
        .max_connections(1)
        .connect(url)
        .await
        .unwrap();
    Arc::new(PostgresLockProvider::builder(pool).table(TABLE).build().unwrap())
}

/// The floor: the acquire upsert (taking the row only where its lease has ended), then the
/// release update, on the same kind of pool.
async fn raw_pair(pool: &PgPool, name: &str) {
    let row: Option<(i32,)> = sqlx::query_as(
        "INSERT INTO bench_raw (name, lock_until) VALUES ($1, now() + interval '2 minutes') \
         ON CONFLICT (name) DO UPDATE SET lock_until = EXCLUDED.lock_until \
         WHERE bench_raw.lock_until <= now() RETURNING 1",
    )
    .bind(name)
    .fetch_optional(pool)
    .await
    .unwrap();
    assert!(row.is_some(), "the raw name is free");
    sqlx::query("UPDATE bench_raw SET lock_until = now() WHERE name = $1")
        .bind(name)
        .execute(pool)
        .await
        .unwrap();
}

/// What B1 measures on the durable server.
struct Durable {
    provider: Arc<dyn LockProvider>,
    asynchronous: Arc<dyn LockProvider>,
    unlogged: Arc<dyn LockProvider>,
    pool: PgPool,
}

impl Durable {
    /// The providers (`asynchronous_commit(true)`, and an UNLOGGED table of its own) and the
    /// advisory lock's pool on the durable server at `url`.
    async fn on(url: &str) -> Durable {
        let p = PostgresLockProvider::builder(pool(url).await).table(TABLE).build().unwrap();
        p.create_table().await.unwrap();
        let asynchronous = PostgresLockProvider::builder(pool(url).await)
            .table(TABLE)
            .asynchronous_commit(true)
            .build()
            .unwrap();
        let unlogged = PostgresLockProvider::builder(pool(url).await)
            .table("bench_shedlock_unlogged")
            .unlogged_table(true)
            .build()
            .unwrap();
        unlogged.create_table().await.unwrap();
        Durable {
            provider: Arc::new(p),
            asynchronous: Arc::new(asynchronous),
            unlogged: Arc::new(unlogged),
            pool: pool(url).await,
        }
    }
}

/// A second, private PostgreSQL with PostgreSQL's own durability settings, or `None` (said why)
/// where the launcher cannot start one (e.g. Docker only: its servers run with fsync off).
fn durable_server() -> Option<Service> {
    let opts = LaunchOptions::new().ignore_env(true).durable(true);
    match Service::start(Backend::Postgres, &opts) {
        Ok(s) => Some(s),
        Err(e) => {
            println!("postgres: no durable server, so no durable rows: {e}");
            None
        }
    }
}

/// The peer: sqlx's advisory lock on a connection from the pool, released at once.
async fn advisory(pool: &PgPool, lock: &PgAdvisoryLock) {
    let conn = pool.acquire().await.unwrap();
    match lock.try_acquire(conn).await.unwrap() {
        Either::Left(guard) => drop(guard.release_now().await.unwrap()),
        Either::Right(_) => panic!("the advisory lock is free"),
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let service = server(Backend::Postgres);
    let url = service.url().to_owned();
    let rt = runtime();
    let raw = rt.block_on(pool(&url));
    rt.block_on(async {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS bench_raw (name TEXT PRIMARY KEY, lock_until TIMESTAMPTZ NOT NULL)",
        )
        .execute(&raw)
        .await
        .unwrap();
    });
    let provider: Arc<dyn LockProvider> = rt.block_on(async {
        let p = PostgresLockProvider::builder(pool(&url).await).table(TABLE).build().unwrap();
        p.create_table().await.unwrap();
        Arc::new(p) as Arc<dyn LockProvider>
    });
    // The ShedLock-compatible mode: ShedLock's four columns, no fencing token, no acquisition id.
    let compat: Arc<dyn LockProvider> = rt.block_on(async {
        let p = PostgresLockProvider::builder(pool(&url).await)
            .table("bench_shedlock_compat")
            .shedlock_compatible()
            .build()
            .unwrap();
        p.create_table().await.unwrap();
        Arc::new(p) as Arc<dyn LockProvider>
    });
    let peer_pool = rt.block_on(pool(&url));
    let lock = PgAdvisoryLock::new(unique("bench-advisory"));
    let durable_service = durable_server();
    let durable = durable_service.as_ref().map(|s| rt.block_on(Durable::on(s.url())));
    let (one, raw_name) = (cfg(&unique("cycle")), unique("raw"));
    let (p, sc, one, raw, raw_name, peer_pool, lock) =
        (provider.as_ref(), compat.as_ref(), &one, &raw, raw_name.as_str(), &peer_pool, &lock);

    let mut g = c.benchmark_group("postgres");
    g.bench_function("raw_upsert_then_release", |b| {
        b.to_async(&rt).iter(|| raw_pair(raw, raw_name))
    });
    g.bench_function("try_lock_unlock", |b| b.to_async(&rt).iter(|| cycle(p, one)));
    g.bench_function("peer_pg_advisory_lock", |b| {
        b.to_async(&rt).iter(|| advisory(peer_pool, lock))
    });
    g.finish();

    let mut zoo = Zoo::new("postgres", &rt);
    zoo.server(service);
    if let Some(d) = &durable_service {
        zoo.server(d);
    }
    let mut extras =
        vec![("provider, ShedLock-compatible mode (no fencing)", op(move || cycle(sc, one)))];
    if let Some(d) = &durable {
        let (dp, da, du, dpool) =
            (d.provider.as_ref(), d.asynchronous.as_ref(), d.unlogged.as_ref(), &d.pool);
        extras.extend([
            ("durable server: provider", op(move || cycle(dp, one))),
            ("durable server: provider, asynchronous_commit(true)", op(move || cycle(da, one))),
            ("durable server: provider, UNLOGGED table", op(move || cycle(du, one))),
            (
                "durable server: sqlx PgAdvisoryLock (try_acquire + release_now)",
                op(move || advisory(dpool, lock)),
            ),
        ]);
    }
    zoo.b1(
        op(move || cycle(p, one)),
        ("upsert + release UPDATE (pool)", op(move || raw_pair(raw, raw_name))),
        Some((
            "sqlx PgAdvisoryLock (try_acquire + release_now)",
            op(move || advisory(peer_pool, lock)),
        )),
        extras,
    );
    zoo.contention_fleet(
        &url,
        provider.clone(),
        service.addr(),
        &|u: String| async move { node(&u).await },
        &|u: String| async move { fleet_node(&u).await },
    );
    zoo.note("sqlx's PgAdvisoryLock writes nothing and never expires: a session lock, held until released or the connection closes, with no lock_at_most_for, no lock_at_least_for and no record of who holds it; the provider's upsert and release are WAL-logged row writes. This server runs with fsync and synchronous_commit off, so no commit here waits for a disk; the rows \"durable server: ...\" are measured on a second server with PostgreSQL's defaults (fsync, synchronous_commit and full_page_writes on), where each of the provider's commits waits for a WAL flush (on this machine's disk). asynchronous_commit(true) and an UNLOGGED table each remove that wait at a price: a server crash can forget the locks of the last ~600 ms, or empties the table (and a replica never has its rows); see the shedlock-postgres README, \"Cheaper commits, and what a crash then loses\"");
    zoo.finish();
    c.final_summary();
}

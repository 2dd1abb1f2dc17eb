//! Test support for the shedlock providers' own tests, used only as a dev-dependency (this crate
//! is `publish = false`, and no runtime crate depends on it): servers from the launcher, unique
//! names, the conformance hooks, and the row-level checks every SQL dialect runs against its real
//! database (what the conformance catalogue does not already cover). Round trips are counted with
//! the kit's [`FaultProxy`].
//!
//! This is test code: like tests, it panics on failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    net::SocketAddr,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};
#[cfg(feature = "sql")]
use std::{sync::Arc, time::SystemTime};

use shedlock::{BoxError, LockConfig};
#[cfg(feature = "sql")]
use shedlock::{Error, LockProvider};
pub use shedlock_conformance::tools::proxy::FaultProxy;

#[cfg(feature = "aws")]
pub mod aws;
pub mod faults;
pub mod fleet;
pub mod secrets;
pub mod secure;
pub mod unreachable;
use shedlock_conformance::{
    Hooks, InstanceOptions, Options, ProviderFactory, RecordHooks, RestartHook, SuiteSpec,
};
pub use shedlock_launcher::Backend;
use shedlock_launcher::{Mode, Service};
#[cfg(feature = "sql")]
use shedlock_sql::RecordAdmin;

/// `options` with C20 and C21 expected "unsupported": a ShedLock-compatible mode, whose storage
/// format has no place for a fencing token (`why` says which format, for C20's report line).
pub fn expect_no_fencing(options: Options, why: &str) -> Options {
    options
        .expect_unsupported("C20", why)
        .expect_unsupported("C21", "no fencing in the ShedLock-compatible mode (see C20)")
}

/// `host:port` of a one-host URL such as `mongodb://user:pass@host:port/db?opts`,
/// `http://host:port/` or a bare `host:port`: credentials, path and query are left out.
pub fn host_port(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    &rest[..end]
}

/// The first socket address `host` (e.g. `(host, port)` or `"host:port"`) resolves to; an error
/// if it resolves to none.
pub fn resolve(host: impl std::net::ToSocketAddrs) -> Result<SocketAddr, BoxError> {
    Ok(host.to_socket_addrs()?.next().ok_or("the server host does not resolve")?)
}

/// `url` with its `host:port` replaced by `addr` (e.g. a [`FaultProxy`]'s), credentials, path
/// and query kept.
pub fn url_via(url: &str, addr: SocketAddr) -> String {
    url.replacen(host_port(url), &addr.to_string(), 1)
}

/// The server of `backend` (`label` names it in messages): the URL in its environment variable
/// (e.g. `$SHEDLOCK_POSTGRES_URL`) if set, else one the launcher starts once per test process
/// (native, on a free port). A missing server is an error with the launcher's message, never a
/// skip.
///
/// It also checks that the launcher and [`server_from_env`] agree on where the server came from,
/// since that decides whether C25 is expected to be not applicable ([`server_options`]).
pub async fn service(backend: Backend, label: &str) -> Result<&'static Service, BoxError> {
    let r = tokio::task::spawn_blocking(move || shedlock_launcher::shared(backend)).await?;
    let service = r.map_err(|e| format!("{label} is not available: {e}"))?;
    let external = service.mode() == Mode::External;
    if external != server_from_env(backend) {
        return Err(format!(
            "the launcher's mode {:?} disagrees with server_from_env({}) = {}: fix \
             server_from_env, which decides whether C25 is expected to be not applicable",
            service.mode(),
            backend.name(),
            !external
        )
        .into());
    }
    Ok(service)
}

/// The URL of [`service`]; panics (fails the test) if there is none.
pub async fn url(backend: Backend, label: &str) -> String {
    match service(backend, label).await {
        Ok(s) => s.url().to_owned(),
        Err(e) => panic!("{e}"),
    }
}

/// `builder` as the conformance kit's instance with `options` has it: the instance's own
/// (possibly skewed) clock, which with server or database time must never be consulted (C18),
/// and a 3 s operation timeout, so that a cut connection fails fast instead of hanging (C24).
pub fn instance<B: shedlock::ClockBuilder>(builder: B, options: &InstanceOptions) -> B {
    builder.clock(options.clock_or_system()).operation_timeout(Some(Duration::from_secs(3)))
}

/// The URL an instance of the conformance kit uses: `url`, or, when the kit gives an `address`
/// (its fault proxy's), the same URL (credentials included) with that address.
pub fn instance_url(address: Option<SocketAddr>, url: &str) -> String {
    match address {
        Some(a) => url_via(url, a),
        None => url.to_owned(),
    }
}

/// A unique identifier-safe suffix.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{prefix}_{}_{n}_{nanos}", std::process::id())
}

/// A lock configuration with times in milliseconds.
pub fn cfg(name: &str, at_most_ms: u64, at_least_ms: u64) -> LockConfig {
    LockConfig::new(name, Duration::from_millis(at_most_ms), Duration::from_millis(at_least_ms))
        .unwrap()
}

/// The conformance kit's raw row access (C14), on a SQL provider's record helpers.
#[cfg(feature = "sql")]
pub struct Records(pub Arc<dyn RecordAdmin>);

#[cfg(feature = "sql")]
#[async_trait::async_trait]
impl RecordHooks for Records {
    async fn record_exists(&self, name: &str) -> Result<bool, BoxError> {
        Ok(self.0.record(name).await?.is_some())
    }

    async fn delete_record(&self, name: &str) -> Result<(), BoxError> {
        self.0.delete_record(name).await?;
        Ok(())
    }

    async fn plant_expired_record(&self, name: &str) -> Result<(), BoxError> {
        self.0.write_record(name, SystemTime::now() - Duration::from_secs(3600)).await?;
        Ok(())
    }
}

/// Restarts the server the launcher started (C25).
pub struct Restart(pub &'static Service);

#[async_trait::async_trait]
impl RestartHook for Restart {
    async fn restart(&self) -> Result<(), BoxError> {
        let service = self.0;
        tokio::task::spawn_blocking(move || service.restart()).await??;
        Ok(())
    }

    /// The server processes' ids: a restart starts new ones.
    async fn identity(&self) -> Result<Option<String>, BoxError> {
        Ok(Some(format!("pids {:?}", self.0.pids())))
    }
}

/// The hooks of a server-backed provider: raw row access (C14), the server address for the
/// kit's fault proxy (C24) and, for a server the launcher started, a restart (C25). A server
/// given by URL is not ours to restart: C25 is then "not applicable".
pub fn server_hooks(
    records: impl RecordHooks,
    addr: SocketAddr,
    service: &'static Service,
) -> Hooks {
    // C28's node processes use this very server (a secure one through its own variable, which
    // carries its credentials and CA).
    let mut env = vec![(service.backend().env_var().to_owned(), service.url().to_owned())];
    env.extend(service.secure_env());
    let hooks = Hooks::new().with_records(records).with_backend_address(addr).with_node_env(env);
    if service.mode() == Mode::External { hooks } else { hooks.with_restart(Restart(service)) }
}

/// Whether `backend`'s server comes from its environment variable (set by `cargo xtask test` or
/// `cargo xtask conformance --url`): the launcher then starts nothing (`Mode::External`).
pub fn server_from_env(backend: Backend) -> bool {
    std::env::var(backend.env_var()).is_ok_and(|url| !url.trim().is_empty())
}

/// The conformance options of a server-backed provider's `tests/conformance.rs`: from the
/// environment, and, when the server's URL comes from the environment (`backend`'s variable), C25
/// declared not applicable, since such a server is not ours to restart ([`server_hooks`] offers no
/// restart hook then).
pub fn server_options(backend: Backend) -> Options {
    let options = Options::from_env();
    if !server_from_env(backend) {
        return options;
    }
    options.expect_not_applicable(
        "C25",
        format!(
            "the server comes from {}: not ours to restart (no restart hook)",
            backend.env_var()
        ),
    )
}

/// One suite of a provider's conformance binary on `backend`'s server
/// ([`shedlock_conformance::harness_suites`]): `setup` with `options`, or — when
/// `SHEDLOCK_SKIP_BACKENDS` names the backend (as `cargo xtask test` does for an optional backend
/// that is not installed) — a suite shown as skipped, with the reason, never as passed.
pub fn suite<P, F, Fut>(backend: Backend, name: &str, options: Options, setup: F) -> SuiteSpec
where
    P: ProviderFactory,
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<P, BoxError>> + 'static,
{
    if shedlock_launcher::skip_requested(backend) {
        return SuiteSpec::skipped(
            name,
            format!(
                "{} skipped on request: SHEDLOCK_SKIP_BACKENDS={}",
                backend.name(),
                shedlock_launcher::skip_list().join(",")
            ),
        );
    }
    SuiteSpec::new(name, options, move || {
        let made = setup();
        async move { made.await.map(|inner| OnServer { inner, backend }) }
    })
}

/// A suite's factory that names, for the report, the server the launcher started for `backend`
/// ([`Service::server`]); everything else is `inner`'s.
struct OnServer<P> {
    inner: P,
    backend: Backend,
}

#[async_trait::async_trait]
impl<P: ProviderFactory> ProviderFactory for OnServer<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn create(
        &self,
        options: shedlock_conformance::InstanceOptions,
    ) -> Result<std::sync::Arc<dyn shedlock::LockProvider>, BoxError> {
        self.inner.create(options).await
    }

    fn hooks(&self) -> Hooks {
        self.inner.hooks()
    }

    async fn teardown(&self) {
        self.inner.teardown().await;
    }

    fn server(&self) -> Option<String> {
        self.inner
            .server()
            .or_else(|| shedlock_launcher::started(self.backend).map(|s| s.server().to_owned()))
    }

    fn security(&self) -> Option<shedlock_conformance::Security> {
        self.inner.security()
    }
}

/// The row-level checks every SQL provider runs against its real database, beyond the
/// conformance catalogue: what the stored row looks like after each operation, and races between
/// real connection pools. `a` and `b` are two independent providers on one table (separate pools,
/// like two nodes); `records` are `a`'s record helpers. Behind the `sql` feature.
#[cfg(feature = "sql")]
pub mod sql {
    use super::*;
    use shedlock::ProviderBuilder as _;
    use shedlock::{ClockBuilder as _, SkewedClock, TimeSource, system_clock};
    use shedlock_sql::{Columns, Dialect, SqlLockProvider};

    pub mod jdbc;
    pub mod suite;

    /// The round trips through `proxy` (which carries `p`'s only connection) of each call on the
    /// way of a lock, in this order: acquire with no row, acquire while held, extend, unlock,
    /// acquire of a free row. Each is measured alone, after a pause, and must be followed by no
    /// traffic (the dedicated connection never goes back to the pool, so there is no release
    /// ping). `what` names the provider in the lines it prints.
    pub async fn round_trips_of_each_call(
        p: &dyn LockProvider,
        proxy: &FaultProxy,
        what: &str,
    ) -> Vec<u64> {
        // Warm up: sqlx prepares each statement once per connection (one extra round trip).
        let mut warm = p.try_lock(&cfg(&unique("warm"), 60_000, 0)).await.unwrap().unwrap();
        warm.extend(Duration::from_secs(60), Duration::ZERO).await.unwrap();
        warm.unlock().await.unwrap();
        assert!(p.try_lock(&cfg("held-warm", 60_000, 0)).await.unwrap().is_some());
        assert!(p.try_lock(&cfg("held-warm", 60_000, 0)).await.unwrap().is_none());

        let name = unique("n");
        let measure = async |call: &str, f: std::pin::Pin<Box<dyn Future<Output = ()> + '_>>| {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let base = proxy.round_trips();
            f.await;
            let n = proxy.round_trips() - base;
            // Nothing after the call either: the dedicated connection never goes back to the
            // pool, so there is no release ping (a pooled connection gets one from sqlx 0.9).
            tokio::time::sleep(Duration::from_millis(50)).await;
            let after = proxy.round_trips() - base;
            println!(
                "{what} {call}: {n} round trip(s) on the call path, {after} including what followed"
            );
            assert_eq!(after, n, "{what} {call}: traffic after the call returned");
            n
        };
        let mut counts = Vec::new();
        let mut lock = None;
        let acquire = Box::pin(async {
            lock = p.try_lock(&cfg(&name, 60_000, 0)).await.unwrap();
        });
        counts.push(measure("acquire (no row)", acquire).await);
        let mut lock = lock.expect("free");
        let held = Box::pin(async {
            assert!(p.try_lock(&cfg(&name, 60_000, 0)).await.unwrap().is_none());
        });
        counts.push(measure("acquire (held)", held).await);
        let extend = Box::pin(async {
            lock.extend(Duration::from_secs(60), Duration::ZERO).await.unwrap();
        });
        counts.push(measure("extend", extend).await);
        counts.push(measure("unlock", Box::pin(async { lock.unlock().await.unwrap() })).await);
        let free = Box::pin(async {
            assert!(p.try_lock(&cfg(&name, 60_000, 0)).await.unwrap().is_some());
        });
        counts.push(measure("acquire (free row)", free).await);
        counts
    }

    /// `p` (on a pool of one connection) has acquire futures dropped at different points: its
    /// connection stays usable, and whatever a dropped future took expires by
    /// `lock_at_most_for` (400 ms).
    pub async fn dropped_acquire_leaves_no_bad_connection(p: &dyn LockProvider) {
        for i in 0..30u64 {
            let c = cfg(&format!("c{i}"), 400, 0);
            let _ = tokio::time::timeout(Duration::from_micros(50 * i), p.try_lock(&c)).await;
        }
        let lock =
            p.try_lock(&cfg("after", 60_000, 0)).await.unwrap().expect("provider still works");
        lock.unlock().await.unwrap();
        tokio::time::sleep(Duration::from_millis(550)).await;
        for i in 0..30u64 {
            let free = p.try_lock(&cfg(&format!("c{i}"), 60_000, 0)).await.unwrap();
            assert!(free.is_some(), "c{i}");
        }
    }

    /// On `table`, with providers on pools from `pool`: in client time, a node whose clock is
    /// an hour behind writes a `lock_until` already in the past for everyone else, so a correct
    /// node takes the "held" lock (the failure ShedLock #231 is); in database time the same
    /// kind of skew, given to the providers, is never consulted
    /// ([`database_time_ignores_the_given_clocks`]).
    pub async fn database_time_ignores_client_skew_client_time_does_not<D: Dialect>(
        pool: impl AsyncFn() -> D::Pool,
        table: &str,
    ) {
        let hour = Duration::from_secs(3600);
        let slow = SqlLockProvider::<D>::builder(pool().await)
            .table(table)
            .time_source(TimeSource::Client)
            .clock(Arc::new(SkewedClock::behind(system_clock(), hour)))
            .build()
            .unwrap();
        slow.create_table().await.unwrap();
        let right = SqlLockProvider::<D>::builder(pool().await)
            .table(table)
            .time_source(TimeSource::Client)
            .build()
            .unwrap();
        assert!(!slow.capabilities().server_time);
        let _held = slow.try_lock(&cfg("c", 60_000, 0)).await.unwrap().unwrap();
        assert!(
            right.try_lock(&cfg("c", 60_000, 0)).await.unwrap().is_some(),
            "client time breaks under skew"
        );

        // Database time: the same kind of skew, given to the providers, must not be consulted.
        let holder = SqlLockProvider::<D>::builder(pool().await)
            .table(table)
            .clock(Arc::new(SkewedClock::behind(system_clock(), hour)))
            .build()
            .unwrap();
        let rival = SqlLockProvider::<D>::builder(pool().await)
            .table(table)
            .clock(Arc::new(SkewedClock::ahead(system_clock(), hour)))
            .build()
            .unwrap();
        database_time_ignores_the_given_clocks(&holder, &rival, &*holder.records()).await;
    }

    /// Table and column names on dialect `D`: hostile or malformed table names (with `quote`,
    /// the dialect's identifier quote, inside one), bad column names, two columns of one name
    /// and a `locked_by` over 255 bytes are refused by `build` with [`Error::Setup`], before any
    /// I/O; the `valid` tables (reserved words, mixed case, schema-qualified), with reserved
    /// and mixed-case column names (`name_column` for the name), are created and work.
    pub async fn identifiers_are_validated<D: Dialect>(
        pool: D::Pool,
        quote: char,
        name_column: &str,
        valid: &[String],
    ) where
        D::Pool: Clone,
    {
        let builder = || SqlLockProvider::<D>::builder(pool.clone());
        let quoted = format!("t{quote}x");
        let long = "a".repeat(64);
        let invalid = [
            "",
            "1t",
            "t-x",
            "t x",
            "t;drop table x",
            &quoted,
            "t'x",
            "a.b.c",
            "ünïcode",
            "t\0",
            "t--",
            "t%",
            &long,
        ];
        for table in invalid {
            match builder().table(table).build() {
                Err(Error::Setup { .. }) => {}
                other => panic!("table {table:?} must be rejected, got {other:?}"),
            }
        }
        for col in ["", "x y", "x\"", "x`"] {
            let r = builder().columns(Columns::default().with_locked_by(col)).build();
            assert!(matches!(r, Err(Error::Setup { .. })), "column {col:?}");
        }
        let dup = builder().columns(Columns::default().with_locked_at("lock_until")).build();
        assert!(matches!(dup, Err(Error::Setup { .. })), "two columns named lock_until");
        let long_by = builder().locked_by("x".repeat(256)).build();
        assert!(matches!(long_by, Err(Error::Setup { .. })), "a 256-byte locked_by");

        for table in valid {
            let p = builder()
                .table(table)
                .columns(
                    Columns::default()
                        .with_name(name_column)
                        .with_lock_until("Until")
                        .with_locked_at("order")
                        .with_locked_by("by_")
                        .with_acquisition_id("aid")
                        .with_fencing_token("tok"),
                )
                .build()
                .unwrap();
            p.create_table().await.unwrap();
            let name = unique("v");
            let lock = p.try_lock(&cfg(&name, 60_000, 0)).await.unwrap().expect(table);
            lock.unlock().await.unwrap();
            assert!(p.record(&name).await.unwrap().is_some(), "{table}: the row is there");
        }
    }

    /// `try_lock` and `check` on a provider whose table does not exist both give
    /// [`Error::Setup`] quoting `ddl` (the statement that creates it).
    pub async fn missing_table_is_a_setup_error_quoting_the_ddl(p: &dyn LockProvider, ddl: &str) {
        let try_lock = p.try_lock(&cfg("x", 1000, 0)).await.map(drop);
        for (call, answer) in [("try_lock", try_lock), ("check", p.check().await)] {
            match answer {
                Err(Error::Setup { message, .. }) => {
                    assert!(message.contains(ddl), "{call}: {message}");
                    assert!(message.contains("CREATE TABLE"), "{call}: {message}");
                }
                other => panic!("{call}: expected Setup, got {other:?}"),
            }
        }
    }

    /// The longest default name (255 bytes) is accepted and stored whole; one byte more, or
    /// 64 four-byte characters, is `InvalidName` naming the whole name, never truncated; 63 of
    /// them (252 bytes) are accepted and stored exactly. `a` and `b` use the default
    /// `max_name_len`; `records` are `a`'s.
    pub async fn long_names_are_rejected_not_truncated(
        a: &dyn LockProvider,
        b: &dyn LockProvider,
        records: &dyn RecordAdmin,
    ) {
        let max = "x".repeat(255);
        let l = a.try_lock(&cfg(&max, 60_000, 0)).await.unwrap().expect("255 bytes accepted");
        assert_eq!(records.record(&max).await.unwrap().unwrap().name, max);
        for too_long in [format!("{max}a"), format!("{max}b"), "😀".repeat(64)] {
            match b.try_lock(&cfg(&too_long, 60_000, 0)).await {
                Err(Error::InvalidName { name, .. }) => assert_eq!(name, too_long),
                other => panic!("expected InvalidName, got {other:?}"),
            }
        }
        let emoji = "😀".repeat(63);
        let e = b.try_lock(&cfg(&emoji, 60_000, 0)).await.unwrap().expect("252 bytes accepted");
        assert_eq!(records.record(&emoji).await.unwrap().unwrap().name, emoji);
        l.unlock().await.unwrap();
        e.unlock().await.unwrap();
    }

    /// Names that SQL, `LIKE` patterns, collations or trimming could confuse are each their
    /// own lock, stored byte for byte: no collision, no case folding, no trailing-space
    /// padding. A name with a NUL is `InvalidName` where the database cannot store one
    /// (`rejects_nul`), else a lock distinct from the name cut at the NUL.
    pub async fn hostile_names_are_stored_and_matched_exactly(
        a: &dyn LockProvider,
        b: &dyn LockProvider,
        records: &dyn RecordAdmin,
        rejects_nul: bool,
    ) {
        let mut names = vec![
            "'",
            "\"",
            "`",
            "%",
            "_",
            "a%",
            "a_",
            ";",
            "--",
            "x'; DROP TABLE shedlock; --",
            "ünïcødé 😀",
            " padded ",
            "padded",
            "padded ",
            "new\nline",
            "*",
            "/",
            "..",
            "\\",
            "tab\t",
            "Case",
            "case",
        ];
        if !rejects_nul {
            names.extend(["nul\0byte", "nul"]);
        }
        let mut locks = Vec::new();
        for n in names {
            let lock = a.try_lock(&cfg(n, 60_000, 0)).await.unwrap();
            locks.push(lock.unwrap_or_else(|| panic!("{n:?} must be free (no collision)")));
            assert_eq!(records.record(n).await.unwrap().unwrap().name, n);
            assert!(b.try_lock(&cfg(n, 60_000, 0)).await.unwrap().is_none(), "{n:?} held");
        }
        if rejects_nul {
            match a.try_lock(&cfg("nul\0byte", 60_000, 0)).await {
                Err(Error::InvalidName { reason, .. }) => {
                    assert!(reason.contains("NUL"), "{reason}")
                }
                other => panic!("NUL must be rejected, got {other:?}"),
            }
        }
        for l in locks {
            l.unlock().await.unwrap();
        }
    }

    /// The stored `lock_until` is `locked_at` plus `lock_at_most_for` to the millisecond.
    pub async fn lock_until_keeps_milliseconds(p: &dyn LockProvider, records: &dyn RecordAdmin) {
        let name = unique("ms");
        let lock = p.try_lock(&cfg(&name, 1_234, 0)).await.unwrap().expect("free");
        let rec = records.record(&name).await.unwrap().unwrap();
        assert_eq!(
            rec.lock_until.duration_since(rec.locked_at).unwrap(),
            Duration::from_millis(1_234)
        );
        lock.unlock().await.unwrap();
    }

    /// One winner; not reentrant; free again after unlock. For provider modes the conformance
    /// run does not cover (e.g. pooled statements instead of the dedicated connection).
    pub async fn one_winner_and_release(a: &dyn LockProvider, b: &dyn LockProvider) {
        let c = cfg("job", 60_000, 0);
        let lock = a.try_lock(&c).await.unwrap().expect("free");
        assert!(b.try_lock(&c).await.unwrap().is_none());
        assert!(a.try_lock(&c).await.unwrap().is_none(), "not reentrant");
        lock.unlock().await.unwrap();
        let lock = b.try_lock(&c).await.unwrap().expect("free after unlock");
        lock.unlock().await.unwrap();
    }

    /// `n` locks taken at once on one provider, each on its own task: every call answers (none
    /// waits for another's statement to finish first), every lock is won and released.
    pub async fn concurrent_calls_on_one_provider<P: LockProvider>(p: Arc<P>, n: usize) {
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let p = p.clone();
                tokio::spawn(async move { p.try_lock(&cfg(&format!("c{i}"), 60_000, 0)).await })
            })
            .collect();
        let mut locks = Vec::new();
        for t in tasks {
            locks.push(t.await.unwrap().unwrap().expect("a fresh name"));
        }
        for l in locks {
            l.unlock().await.unwrap();
        }
        assert!(p.try_lock(&cfg("c0", 60_000, 0)).await.unwrap().is_some());
    }

    /// `p` runs its lock statements through `proxy`: a connection cut with nothing said by the
    /// server leaves the statement's outcome unknown, so the call fails (retryable) instead of
    /// being repeated; the next call opens a fresh connection and works.
    pub async fn a_lost_connection_fails_once_then_recovers(
        p: &dyn LockProvider,
        proxy: &FaultProxy,
    ) {
        let l = p.try_lock(&cfg("warm", 60_000, 0)).await.unwrap().unwrap();
        l.unlock().await.unwrap();
        let before = proxy.connections();
        proxy.cut_all();
        let err = p.try_lock(&cfg("x", 60_000, 0)).await.unwrap_err();
        assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
        let l = p.try_lock(&cfg("x", 60_000, 0)).await.unwrap().expect("nothing took it");
        l.unlock().await.unwrap();
        assert!(proxy.connections() > before, "a fresh connection");
    }

    /// `p`'s dedicated connection comes from a pool (through `proxy`) with a 300 ms
    /// `idle_timeout` that nothing else uses: it is reused while fresh, replaced once idle longer
    /// than that, and gone once the pool is closed (`close`, called only then: sqlx's `Pool::close`
    /// closes the pool as soon as it is called, before its future is awaited).
    pub async fn the_dedicated_connection_follows_idle_timeout_and_closing(
        p: &dyn LockProvider,
        proxy: &FaultProxy,
        close: impl AsyncFnOnce(),
    ) {
        let cycle = async |name: &str| {
            let l = p.try_lock(&cfg(name, 60_000, 0)).await.unwrap().unwrap();
            l.unlock().await.unwrap();
        };
        cycle("a").await;
        let n = proxy.connections();
        cycle("b").await;
        assert_eq!(proxy.connections(), n, "reused while fresh");
        tokio::time::sleep(Duration::from_millis(500)).await;
        cycle("c").await;
        assert_eq!(proxy.connections(), n + 1, "replaced after idle_timeout");
        close().await;
        let err = p.try_lock(&cfg("d", 60_000, 0)).await.unwrap_err();
        assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    }

    /// A holder whose row was taken over (an operator deleted it, another node took the name)
    /// can neither extend nor unlock it: the row is unchanged. The stale holder's lease is still
    /// running, so its extend really reaches the database and is refused by the owner check, not
    /// by the client-side lease.
    pub async fn stale_holder_cannot_unlock_or_extend(
        a: &dyn LockProvider,
        b: &dyn LockProvider,
        records: &dyn RecordAdmin,
    ) {
        let name = "stale";
        let mut stale = a.try_lock(&cfg(name, 60_000, 0)).await.unwrap().expect("free");
        assert!(records.delete_record(name).await.unwrap());
        let fresh = b.try_lock(&cfg(name, 60_000, 0)).await.unwrap().expect("deleted, free");
        assert!(fresh.fencing_token() > stale.fencing_token());
        let before = records.record(name).await.unwrap().unwrap();

        match stale.extend(Duration::from_secs(600), Duration::ZERO).await {
            Err(Error::LockLost { name: n }) => assert_eq!(n, name),
            other => panic!("stale extend must fail with LockLost, got {other:?}"),
        }
        assert!(stale.is_lost(), "a refused extension marks the lock lost");
        stale.unlock().await.unwrap();
        let after = records.record(name).await.unwrap().unwrap();
        assert_eq!(before, after, "a stale unlock/extend must not change the row");
        assert!(a.try_lock(&cfg(name, 60_000, 0)).await.unwrap().is_none(), "new holder keeps it");
        fresh.unlock().await.unwrap();
    }

    /// Unlock keeps `lock_at_least_for`, counted from the stored `locked_at`.
    pub async fn at_least_is_kept_from_locked_at(
        a: &dyn LockProvider,
        b: &dyn LockProvider,
        records: &dyn RecordAdmin,
    ) {
        let lock = a.try_lock(&cfg("least", 60_000, 700)).await.unwrap().unwrap();
        lock.unlock().await.unwrap();
        let rec = records.record("least").await.unwrap().unwrap();
        // Computed in SQL from the stored locked_at: exact.
        assert_eq!(
            rec.lock_until.duration_since(rec.locked_at).unwrap(),
            Duration::from_millis(700)
        );
        assert!(
            b.try_lock(&cfg("least", 60_000, 0)).await.unwrap().is_none(),
            "held for at least 700 ms"
        );
        tokio::time::sleep(Duration::from_millis(850)).await;
        assert!(b.try_lock(&cfg("least", 60_000, 0)).await.unwrap().is_some());
    }

    /// A deleted row is free and recreated with a larger token; a stale unlock does not free
    /// the new holder's lock; a planted expired record never blocks.
    pub async fn deleted_row_is_recreated_with_a_larger_token(
        a: &dyn LockProvider,
        b: &dyn LockProvider,
        records: &dyn RecordAdmin,
    ) {
        let lock = a.try_lock(&cfg("del", 60_000, 0)).await.unwrap().unwrap();
        let t1 = lock.fencing_token().unwrap();
        assert!(records.delete_record("del").await.unwrap());
        assert!(records.record("del").await.unwrap().is_none());
        let lock2 = b.try_lock(&cfg("del", 60_000, 0)).await.unwrap().expect("deleted row is free");
        let t2 = lock2.fencing_token().unwrap();
        assert!(t2 > t1, "{t2} > {t1}");
        // The stale holder's unlock does not free the new holder's lock.
        lock.unlock().await.unwrap();
        assert!(a.try_lock(&cfg("del", 60_000, 0)).await.unwrap().is_none());
        // A planted expired record never blocks, and tokens keep rising past it.
        records
            .write_record("planted", SystemTime::now() - Duration::from_secs(3600))
            .await
            .unwrap();
        let l3 =
            b.try_lock(&cfg("planted", 60_000, 0)).await.unwrap().expect("expired record is free");
        assert!(l3.fencing_token().unwrap() > t2);
    }

    /// Database time: `holder` was given a clock an hour behind and `rival` one an hour ahead.
    /// Consulting either clock for expiry would break exclusion: the holder would write a
    /// `lock_until` already in the past, the rival would see any lock as expired. So the rival
    /// must find the lock held, the stored `lock_until` must be the database's now plus
    /// `lock_at_most_for` (not an hour off), and the same after an extension by the holder.
    pub async fn database_time_ignores_the_given_clocks(
        holder: &dyn LockProvider,
        rival: &dyn LockProvider,
        records: &dyn RecordAdmin,
    ) {
        assert!(holder.capabilities().server_time && rival.capabilities().server_time);
        let name = "db-time";
        let near = |rec: &shedlock_sql::LockRecord, what: &str| {
            let expected = SystemTime::now() + Duration::from_secs(60);
            let off = match rec.lock_until.duration_since(expected) {
                Ok(d) => d,
                Err(e) => e.duration(),
            };
            // The database and this host share one clock; 10 s covers a slow machine, an hour
            // of skew does not fit in it.
            assert!(off < Duration::from_secs(10), "{what}: lock_until is {off:?} off");
        };
        let mut lock = holder.try_lock(&cfg(name, 60_000, 0)).await.unwrap().expect("free");
        near(&records.record(name).await.unwrap().unwrap(), "after acquire");
        assert!(rival.try_lock(&cfg(name, 60_000, 0)).await.unwrap().is_none(), "held");
        lock.extend(Duration::from_secs(60), Duration::ZERO).await.unwrap();
        near(&records.record(name).await.unwrap().unwrap(), "after extend");
        assert!(rival.try_lock(&cfg(name, 60_000, 0)).await.unwrap().is_none(), "still held");
        lock.unlock().await.unwrap();
        let lock = rival.try_lock(&cfg(name, 60_000, 0)).await.unwrap().expect("free after unlock");
        near(&records.record(name).await.unwrap().unwrap(), "rival's acquire");
        lock.unlock().await.unwrap();
    }

    /// `rounds` rounds in which every node races for a fresh name (each on its own task):
    /// exactly one winner per round.
    pub async fn racing_nodes_have_one_winner_per_round<P: LockProvider>(
        nodes: &[Arc<P>],
        rounds: usize,
    ) {
        for round in 0..rounds {
            let name = format!("race{round}");
            let mut tasks = Vec::new();
            for n in nodes {
                let n = n.clone();
                let c = cfg(&name, 60_000, 0);
                tasks.push(tokio::spawn(async move { n.try_lock(&c).await.map(|l| l.is_some()) }));
            }
            let mut winners = 0;
            for t in tasks {
                if t.await.unwrap().unwrap() {
                    winners += 1;
                }
            }
            assert_eq!(winners, 1, "round {round}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_leaves_out_scheme_credentials_path_and_query() {
        assert_eq!(
            host_port("mongodb://u:p@127.0.0.1:27017/db?directConnection=true"),
            "127.0.0.1:27017"
        );
        assert_eq!(host_port("http://127.0.0.1:8000/"), "127.0.0.1:8000");
        assert_eq!(host_port("nats://127.0.0.1:4222"), "127.0.0.1:4222");
        assert_eq!(host_port("127.0.0.1:2181"), "127.0.0.1:2181");
    }

    #[test]
    fn url_via_swaps_only_the_address_and_keeps_credentials_and_options() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(
            url_via("postgres://postgres:secret@127.0.0.1:5432/postgres?sslmode=disable", a),
            "postgres://postgres:secret@127.0.0.1:1/postgres?sslmode=disable"
        );
    }
}

//! The conformance factory of the PostgreSQL suites of `conformance.rs`: the native mode
//! (provider `postgres`), client time (`postgres-client-time`) and the ShedLock-compatible mode
//! (`postgres-shedlock-compat`). Each suite has its own table.
//!
//! Each instance has its own pool (like a separate node). The hooks give the kit raw row access
//! (C14), the server address for its fault proxy (C24) and a restart of the server (C25) —
//! unless the server comes from `SHEDLOCK_POSTGRES_URL` (as under `cargo xtask test`): a server this
//! process does not own cannot be restarted, so C25 is then expected to be "not applicable".
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use shedlock::BoxError;
use shedlock_launcher::Backend;
use shedlock_postgres::{PostgresDialect, recommended_pool_options};
use shedlock_test_support::{
    self as testing,
    sql::suite::{Mode, SqlSuite},
};
use sqlx::postgres::PgConnectOptions;

async fn new(name: &'static str, mode: Mode) -> Result<SqlSuite<PostgresDialect>, BoxError> {
    let service = testing::service(Backend::Postgres, "PostgreSQL").await?;
    let base: PgConnectOptions = service.url().parse()?;
    let addr = testing::resolve((base.get_host(), base.get_port()))?;
    let tag = match (mode.compat, mode.client_time) {
        (true, _) => "sc_",
        (false, true) => "ct_",
        (false, false) => "",
    };
    // C28's node processes (this binary, re-executed) share the run id: the same table.
    let table = format!("shedlock_conformance_{tag}{}", shedlock_conformance::run_id());
    let admin_pool = recommended_pool_options().connect_with(base.clone()).await?;
    let pool = move |address: Option<std::net::SocketAddr>| {
        let mut opts = base.clone();
        if let Some(a) = address {
            opts = opts.host(&a.ip().to_string()).port(a.port());
        }
        // Short limits so that a cut connection fails fast instead of hanging (C24).
        recommended_pool_options()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(2))
            .connect_lazy_with(opts)
    };
    SqlSuite::new(name, (service, addr), table, mode, admin_pool, pool, |b| b).await
}

/// The suite of one mode: native (`postgres`), client time (`postgres-client-time`), or the
/// ShedLock-compatible one (`compat`), whose table has no column for a fencing token: C20 and
/// C21 are then expected "unsupported".
pub fn suite(compat: bool, client_time: bool) -> shedlock_conformance::SuiteSpec {
    let mode = Mode { compat, client_time };
    let name = match (compat, client_time) {
        (true, _) => "postgres-shedlock-compat",
        (false, true) => "postgres-client-time",
        (false, false) => "postgres",
    };
    let options = testing::sql::suite::options(Backend::Postgres, mode);
    testing::suite(Backend::Postgres, name, options, move || new(name, mode))
}

/// The grants of the application role in `postgres-secure`: exactly what the README's
/// "Permissions" section lists for locking, inspection and forced release.
const SECURE_GRANTS: &str = "SELECT, INSERT, UPDATE, DELETE";

async fn new_secure() -> Result<testing::secure::Secured<SqlSuite<PostgresDialect>>, BoxError> {
    let service = testing::secure::service(Backend::Postgres, "PostgreSQL").await?;
    let secure = service.secure().ok_or("the secure launch says nothing of its credentials")?;
    let app: PgConnectOptions = service.url().parse()?;
    let addr = testing::resolve((app.get_host(), app.get_port()))?;
    let admin: PgConnectOptions =
        secure.url_for(addr, secure.admin_user(), secure.admin_password()).parse()?;
    let table = format!("shedlock_conformance_sec_{}", shedlock_conformance::run_id());
    let admin_pool = recommended_pool_options().connect_with(admin).await?;
    let pool = move |address: Option<std::net::SocketAddr>| {
        let mut opts = app.clone();
        if let Some(a) = address {
            opts = opts.host(&a.ip().to_string()).port(a.port());
        }
        recommended_pool_options()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(2))
            .connect_lazy_with(opts)
    };
    let mode = Mode { compat: false, client_time: false };
    let inner = SqlSuite::new(
        "postgres-secure",
        (service, addr),
        table.clone(),
        mode,
        admin_pool.clone(),
        pool,
        |b| b,
    )
    .await?;
    let grant = format!("GRANT {SECURE_GRANTS} ON {table} TO {}", secure.app_user());
    // Both names are ours: the run id is digits, the role is the launcher's constant.
    sqlx::query(sqlx::AssertSqlSafe(grant)).execute(&admin_pool).await?;
    let tls: String =
        sqlx::query_scalar("SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&admin_pool)
            .await?;
    let security = shedlock_conformance::Security::new(
        secure.app_user(),
        format!("{tls} (sslmode=verify-full against the launcher's throwaway CA), SCRAM-SHA-256"),
    )
    .grant(format!("GRANT {SECURE_GRANTS} ON <table> TO {}", secure.app_user()))
    .secret(secure.app_password())
    .secret(secure.admin_password());
    Ok(testing::secure::Secured::new(inner, security, service))
}

/// `postgres-secure`: the native mode against a server that takes only SCRAM logins over TLS
/// 1.3, as a role holding only the grants of the README's "Permissions" section.
pub fn secure_suite() -> shedlock_conformance::SuiteSpec {
    testing::secure::suite(
        Backend::Postgres,
        "postgres-secure",
        testing::secure::options(),
        new_secure,
    )
}

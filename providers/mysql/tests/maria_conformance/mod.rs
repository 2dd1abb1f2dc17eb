//! The MariaDB conformance factory of `conformance.rs`'s suites (see [`suite`]): `mariadb`
//! (database time, one-statement `RETURNING` acquire), `mariadb-client-time` (to show what the
//! skew checks detect), `mariadb-mysql-flavor` (the MySQL code path against MariaDB) and
//! `mariadb-shedlock-compat` (the ShedLock-compatible mode). Each suite has its own table.
//!
//! Each instance has its own pool (like a separate node). The hooks give the kit raw row access
//! (C14), the server address for its fault proxy (C24) and a restart of the server (C25) —
//! unless the server comes from `SHEDLOCK_MARIADB_URL` (as under `cargo xtask test`): a server this
//! process does not own cannot be restarted, so C25 is then expected to be "not applicable".
//! Every other check must pass.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use shedlock::BoxError;
use shedlock_launcher::Backend;
use shedlock_mysql::{Flavor, MySqlDialect, recommended_pool_options};
use shedlock_test_support::{
    self as testing,
    sql::suite::{Builder, Mode, SqlSuite},
};
use sqlx::mysql::MySqlConnectOptions;

async fn new(
    name: &'static str,
    mode: Mode,
    mysql_path: bool,
) -> Result<SqlSuite<MySqlDialect>, BoxError> {
    let service = testing::service(Backend::MariaDb, "MariaDB").await?;
    let base: MySqlConnectOptions = service.url().parse()?;
    let addr = testing::resolve((base.get_host(), base.get_port()))?;
    let admin_pool = recommended_pool_options().connect_with(base.clone()).await?;
    sqlx::raw_sql("CREATE DATABASE IF NOT EXISTS shedlock_conformance")
        .execute(&admin_pool)
        .await?;
    // One table per suite; C28's node processes (this binary, re-executed) share the run id.
    let tag = name_tag(mode.compat, mode.client_time, mysql_path);
    let table = format!("shedlock_conformance.t_{tag}{}", shedlock_conformance::run_id());
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
    let flavor: fn(Builder<MySqlDialect>) -> Builder<MySqlDialect> =
        if mysql_path { |b| b.option(Flavor::MySql) } else { |b| b.option(Flavor::Detect) };
    SqlSuite::new(name, (service, addr), table, mode, admin_pool, pool, flavor).await
}

fn suite_name(compat: bool, client_time: bool, mysql_path: bool) -> &'static str {
    match (compat, client_time, mysql_path) {
        (true, _, _) => "mariadb-shedlock-compat",
        (false, false, false) => "mariadb",
        (false, true, false) => "mariadb-client-time",
        (false, false, true) => "mariadb-mysql-flavor",
        (false, true, true) => "mariadb-mysql-flavor-client-time",
    }
}

fn name_tag(compat: bool, client_time: bool, mysql_path: bool) -> &'static str {
    match (compat, client_time, mysql_path) {
        (true, _, _) => "sc_",
        (false, false, false) => "",
        (false, true, false) => "ct_",
        (false, false, true) => "my_",
        (false, true, true) => "myct_",
    }
}

/// The suite of one mode: native (`mariadb`), client time (`mariadb-client-time`), the MySQL code
/// path against MariaDB (`mysql_path`: upsert, then a primary-key `SELECT`; no `RETURNING`;
/// `mariadb-mysql-flavor`), or the ShedLock-compatible one (`compat`), whose table has no column
/// for a fencing token: C20 and C21 are then expected "unsupported".
pub fn suite(compat: bool, client_time: bool, mysql_path: bool) -> shedlock_conformance::SuiteSpec {
    let mode = Mode { compat, client_time };
    let name = suite_name(compat, client_time, mysql_path);
    let options = testing::sql::suite::options(Backend::MariaDb, mode);
    testing::suite(Backend::MariaDb, name, options, move || new(name, mode, mysql_path))
}

/// The grants of the application user in `mariadb-secure`: exactly what the README's
/// "Permissions" section lists for locking, inspection and forced release.
const SECURE_GRANTS: &str = "SELECT, INSERT, UPDATE, DELETE";

async fn new_secure() -> Result<testing::secure::Secured<SqlSuite<MySqlDialect>>, BoxError> {
    let service = testing::secure::service(Backend::MariaDb, "MariaDB").await?;
    let secure = service.secure().ok_or("the secure launch says nothing of its credentials")?;
    let app: MySqlConnectOptions = service.url().parse()?;
    let addr = testing::resolve((app.get_host(), app.get_port()))?;
    let admin: MySqlConnectOptions =
        secure.url_for(addr, secure.admin_user(), secure.admin_password()).parse()?;
    let admin_pool = recommended_pool_options().connect_with(admin).await?;
    let table = format!("shedlock.t_sec_{}", shedlock_conformance::run_id());
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
        "mariadb-secure",
        (service, addr),
        table.clone(),
        mode,
        admin_pool.clone(),
        pool,
        |b| b.option(Flavor::Detect),
    )
    .await?;
    // Both names are ours: the run id is digits, the user is the launcher's constant.
    let grant = format!("GRANT {SECURE_GRANTS} ON {table} TO '{}'@'127.0.0.1'", secure.app_user());
    sqlx::query(sqlx::AssertSqlSafe(grant)).execute(&admin_pool).await?;
    let (_, tls): (String, String) =
        sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_version'").fetch_one(&admin_pool).await?;
    let security = shedlock_conformance::Security::new(
        format!("'{}'@'127.0.0.1' (REQUIRE SSL)", secure.app_user()),
        format!("{tls} (ssl-mode=VERIFY_IDENTITY against the launcher's throwaway CA)"),
    )
    .grant(format!(
        "GRANT {SECURE_GRANTS} ON shedlock.<table> TO '{}'@'127.0.0.1'",
        secure.app_user()
    ))
    .secret(secure.app_password())
    .secret(secure.admin_password());
    Ok(testing::secure::Secured::new(inner, security, service))
}

/// `mariadb-secure`: the native mode against a server that takes only TLS 1.3 connections, as a
/// user holding only the grants of the README's "Permissions" section on its table.
pub fn secure_suite() -> shedlock_conformance::SuiteSpec {
    testing::secure::suite(
        Backend::MariaDb,
        "mariadb-secure",
        testing::secure::options(),
        new_secure,
    )
}

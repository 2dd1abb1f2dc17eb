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

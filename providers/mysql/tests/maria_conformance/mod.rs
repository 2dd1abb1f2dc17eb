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

use shedlock::ClockBuilder as _;
use shedlock::ProviderBuilder as _;
use std::{
    net::{SocketAddr, ToSocketAddrs},
    sync::Arc,
    time::Duration,
};

use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{Hooks, InstanceOptions, ProviderFactory};
use shedlock_launcher::{Backend, Service};
use shedlock_mysql::{Flavor, MySqlLockProvider, TimeSource, recommended_pool_options};
use shedlock_test_support as testing;
use sqlx::mysql::MySqlConnectOptions;

struct Maria {
    service: &'static Service,
    name: &'static str,
    base: MySqlConnectOptions,
    addr: SocketAddr,
    table: String,
    client_time: bool,
    flavor: Flavor,
    compat: bool,
    admin: MySqlLockProvider,
}

impl Maria {
    async fn new(compat: bool, client_time: bool, mysql_path: bool) -> Result<Self, BoxError> {
        let service = testing::service(Backend::MariaDb, "MariaDB").await?;
        let url = service.url().to_owned();
        let base: MySqlConnectOptions = url.parse()?;
        let addr = (base.get_host(), base.get_port())
            .to_socket_addrs()?
            .next()
            .ok_or("the server host does not resolve")?;
        let pool = recommended_pool_options().connect_with(base.clone()).await?;
        sqlx::raw_sql("CREATE DATABASE IF NOT EXISTS shedlock_conformance").execute(&pool).await?;
        // One table per suite; C28's node processes (this binary, re-executed) share the run id.
        let mode = name_tag(compat, client_time, mysql_path);
        let table = format!("shedlock_conformance.t_{mode}{}", shedlock_conformance::run_id());
        let flavor = if mysql_path { Flavor::MySql } else { Flavor::Detect };
        let mut admin = MySqlLockProvider::builder(pool).table(&table).option(flavor);
        if compat {
            admin = admin.shedlock_compatible();
        }
        let admin = admin.build()?;
        admin.create_table().await?;
        let name = suite_name(compat, client_time, mysql_path);
        Ok(Self { service, name, base, addr, table, client_time, flavor, compat, admin })
    }
}

#[async_trait::async_trait]
impl ProviderFactory for Maria {
    fn name(&self) -> &str {
        self.name
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let mut opts = self.base.clone();
        if let Some(a) = options.address {
            opts = opts.host(&a.ip().to_string()).port(a.port());
        }
        // Short limits so that a cut connection fails fast instead of hanging (C24).
        let pool = recommended_pool_options()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(2))
            .connect_lazy_with(opts);
        let mut b = MySqlLockProvider::builder(pool)
            // Every instance gets its (possibly skewed) clock; with database time it must not
            // be consulted (C18).
            .clock(options.clock_or_system())
            .table(&self.table)
            .option(self.flavor)
            .operation_timeout(Some(Duration::from_secs(3)));
        if self.client_time {
            b = b.time_source(TimeSource::Client);
        }
        if self.compat {
            b = b.shedlock_compatible();
        }
        Ok(Arc::new(b.build()?))
    }

    fn hooks(&self) -> Hooks {
        testing::server_hooks(testing::Records(self.admin.records()), self.addr, self.service)
    }
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
    let mut options = testing::server_options(Backend::MariaDb);
    if compat {
        options = testing::expect_no_fencing(
            options,
            "no fencing in the ShedLock-compatible mode: ShedLock's table (name, \
                 lock_until, locked_at, locked_by) has no column for a token",
        );
    }
    let name = suite_name(compat, client_time, mysql_path);
    testing::suite(Backend::MariaDb, name, options, move || {
        Maria::new(compat, client_time, mysql_path)
    })
}

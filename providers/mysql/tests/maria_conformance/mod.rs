//! The MariaDB conformance factory, shared by `conformance.rs` (provider name `mariadb`:
//! database time, one-statement `RETURNING` acquire) and `conformance_shedlock_compat.rs` (the
//! ShedLock-compatible mode, `mariadb-shedlock-compat`).
//!
//! - `SHEDLOCK_SQL_TIME=client` runs the client-time mode instead (`mariadb-client-time`), to
//!   show what the skew checks detect.
//! - `SHEDLOCK_MYSQL_FLAVOR=mysql` runs the MySQL code path (upsert, then a primary-key
//!   `SELECT`; no `RETURNING`) against MariaDB (`mariadb-mysql-flavor`).
//!
//! Each instance has its own pool (like a separate node). The hooks give the kit raw row access
//! (C14), the server address for its fault proxy (C24) and a restart of the server (C25) —
//! unless the server comes from `SHEDLOCK_MARIADB_URL` (as under `cargo xtask test`): a server this
//! process does not own cannot be restarted, so C25 is then expected to be "not applicable".
//! Every other check must pass.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

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
    async fn new(compat: bool) -> Result<Self, BoxError> {
        let service = testing::service(Backend::MariaDb, "MariaDB").await?;
        let url = service.url().to_owned();
        let base: MySqlConnectOptions = url.parse()?;
        let addr = (base.get_host(), base.get_port())
            .to_socket_addrs()?
            .next()
            .ok_or("the server host does not resolve")?;
        let client_time = std::env::var("SHEDLOCK_SQL_TIME").is_ok_and(|v| v == "client");
        let mysql_path = std::env::var("SHEDLOCK_MYSQL_FLAVOR").is_ok_and(|v| v == "mysql");
        let pool = recommended_pool_options().connect_with(base.clone()).await?;
        sqlx::raw_sql("CREATE DATABASE IF NOT EXISTS shedlock_conformance").execute(&pool).await?;
        let table = format!("shedlock_conformance.t_{}", shedlock_conformance::run_id());
        let flavor = if mysql_path { Flavor::MySql } else { Flavor::Detect };
        let mut admin = MySqlLockProvider::builder(pool).table(&table).flavor(flavor);
        if compat {
            admin = admin.shedlock_compatible();
        }
        let admin = admin.build()?;
        admin.create_table().await?;
        let name = match (client_time, mysql_path) {
            _ if compat && (client_time || mysql_path) => {
                return Err("the ShedLock-compatible suite runs alone: unset \
                            SHEDLOCK_SQL_TIME and SHEDLOCK_MYSQL_FLAVOR"
                    .into());
            }
            _ if compat => "mariadb-shedlock-compat",
            (false, false) => "mariadb",
            (true, false) => "mariadb-client-time",
            (false, true) => "mariadb-mysql-flavor",
            (true, true) => "mariadb-mysql-flavor-client-time",
        };
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
            .flavor(self.flavor)
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

/// Runs the suite in the native mode, or in the ShedLock-compatible one (`compat`), whose
/// table has no column for a fencing token: C20 and C21 are then expected "unsupported".
pub fn main(compat: bool) -> std::process::ExitCode {
    let mut options = testing::server_options(Backend::MariaDb);
    if compat {
        options = shedlock_test_support::expect_no_fencing(
            options,
            "no fencing in the ShedLock-compatible mode: ShedLock's table (name, \
                 lock_until, locked_at, locked_by) has no column for a token",
        );
    }
    shedlock_conformance::harness(options, move || async move { Maria::new(compat).await })
}

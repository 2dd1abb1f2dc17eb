//! The conformance factory of the PostgreSQL suites of `conformance.rs`: the native mode
//! (provider `postgres`), client time (`postgres-client-time`) and the ShedLock-compatible mode
//! (`postgres-shedlock-compat`). Each suite has its own table.
//!
//! Each instance has its own pool (like a separate node). The hooks give the kit raw row access
//! (C14), the server address for its fault proxy (C24) and a restart of the server (C25) —
//! unless the server comes from `SHEDLOCK_POSTGRES_URL` (as under `cargo xtask test`): a server this
//! process does not own cannot be restarted, so C25 is then expected to be "not applicable".
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
use shedlock_postgres::{PostgresLockProvider, TimeSource, recommended_pool_options};
use shedlock_test_support as testing;
use sqlx::postgres::PgConnectOptions;

struct Pg {
    service: &'static Service,
    name: &'static str,
    base: PgConnectOptions,
    addr: SocketAddr,
    table: String,
    client_time: bool,
    compat: bool,
    admin: PostgresLockProvider,
}

impl Pg {
    async fn new(compat: bool, client_time: bool) -> Result<Self, BoxError> {
        let service = testing::service(Backend::Postgres, "PostgreSQL").await?;
        let url = service.url().to_owned();
        let base: PgConnectOptions = url.parse()?;
        let addr = (base.get_host(), base.get_port())
            .to_socket_addrs()?
            .next()
            .ok_or("the server host does not resolve")?;
        let mode = match (compat, client_time) {
            (true, _) => "sc_",
            (false, true) => "ct_",
            (false, false) => "",
        };
        // C28's node processes (this binary, re-executed) share the run id: the same table.
        let table = format!("shedlock_conformance_{mode}{}", shedlock_conformance::run_id());
        let mut admin = PostgresLockProvider::builder(
            recommended_pool_options().connect_with(base.clone()).await?,
        )
        .table(&table);
        if compat {
            admin = admin.shedlock_compatible();
        }
        let admin = admin.build()?;
        admin.create_table().await?;
        Ok(Self {
            service,
            name: match (compat, client_time) {
                (true, _) => "postgres-shedlock-compat",
                (false, true) => "postgres-client-time",
                (false, false) => "postgres",
            },
            base,
            addr,
            table,
            client_time,
            compat,
            admin,
        })
    }
}

#[async_trait::async_trait]
impl ProviderFactory for Pg {
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
        let mut b = PostgresLockProvider::builder(pool)
            // Every instance gets its (possibly skewed) clock; with database time it must not
            // be consulted (C18).
            .clock(options.clock_or_system())
            .table(&self.table)
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

/// The suite of one mode: native (`postgres`), client time (`postgres-client-time`), or the
/// ShedLock-compatible one (`compat`), whose table has no column for a fencing token: C20 and
/// C21 are then expected "unsupported".
pub fn suite(compat: bool, client_time: bool) -> shedlock_conformance::SuiteSpec {
    let mut options = testing::server_options(Backend::Postgres);
    if compat {
        options = testing::expect_no_fencing(
            options,
            "no fencing in the ShedLock-compatible mode: ShedLock's table (name, \
                 lock_until, locked_at, locked_by) has no column for a token",
        );
    }
    let name = match (compat, client_time) {
        (true, _) => "postgres-shedlock-compat",
        (false, true) => "postgres-client-time",
        (false, false) => "postgres",
    };
    testing::suite(Backend::Postgres, name, options, move || Pg::new(compat, client_time))
}

//! The conformance factory of a SQL provider's suites on a server ([`SqlSuite`]): one table per
//! suite, an own pool per instance (like a separate node), the server's hooks ([`server_hooks`]:
//! raw row access, the fault proxy's address and, for a server the launcher started, a restart).

use std::{net::SocketAddr, sync::Arc};

use shedlock::{BoxError, LockProvider, TimeSource};
use shedlock_conformance::{Hooks, InstanceOptions, Options, ProviderFactory};
use shedlock_launcher::{Backend, Service};
use shedlock_sql::{ShedlockTable, SqlLockProvider, SqlLockProviderBuilder};

use crate::{Records, server_hooks};

/// The builder of a SQL provider on dialect `D`.
pub type Builder<D> = SqlLockProviderBuilder<D>;

/// Which mode a suite runs the provider in.
#[derive(Clone, Copy, Debug)]
pub struct Mode {
    /// ShedLock's table (`shedlock_compatible()`).
    pub compat: bool,
    /// The instances' own clocks (`TimeSource::Client`) instead of the database's.
    pub client_time: bool,
}

/// The conformance options of a SQL provider's suite on `backend`'s server
/// ([`server_options`](crate::server_options)); in the compatible mode, C20 and C21 expected
/// "unsupported", since ShedLock's table has no column for a fencing token.
pub fn options(backend: Backend, mode: Mode) -> Options {
    let options = crate::server_options(backend);
    if !mode.compat {
        return options;
    }
    crate::expect_no_fencing(
        options,
        "no fencing in the ShedLock-compatible mode: ShedLock's table (name, lock_until, \
         locked_at, locked_by) has no column for a token",
    )
}

/// A SQL provider's conformance factory: each instance a provider on `table` with its own
/// pool, its clock, a 3 s operation timeout, and the suite's [`Mode`].
pub struct SqlSuite<D: ShedlockTable> {
    name: &'static str,
    service: &'static Service,
    addr: SocketAddr,
    table: String,
    mode: Mode,
    admin: SqlLockProvider<D>,
    pool: Box<dyn Fn(Option<SocketAddr>) -> D::Pool + Send + Sync>,
    configure: fn(Builder<D>) -> Builder<D>,
}

impl<D: ShedlockTable> SqlSuite<D> {
    /// The suite `name` on `service` (at `addr`) in `mode`: creates `table` with a provider on
    /// `admin_pool` (also the hooks' row access). `pool(address)` makes an instance's pool
    /// (lazily connected, through `address` when the kit gives one: its fault proxy, C24);
    /// `configure` sets what every provider of the suite has (e.g. a dialect option).
    pub async fn new(
        name: &'static str,
        (service, addr): (&'static Service, SocketAddr),
        table: String,
        mode: Mode,
        admin_pool: D::Pool,
        pool: impl Fn(Option<SocketAddr>) -> D::Pool + Send + Sync + 'static,
        configure: fn(Builder<D>) -> Builder<D>,
    ) -> Result<Self, BoxError> {
        let mut admin = configure(SqlLockProvider::<D>::builder(admin_pool).table(&table));
        if mode.compat {
            admin = admin.shedlock_compatible();
        }
        let admin = admin.build()?;
        admin.create_table().await?;
        Ok(Self { name, service, addr, table, mode, admin, pool: Box::new(pool), configure })
    }
}

#[async_trait::async_trait]
impl<D: ShedlockTable> ProviderFactory for SqlSuite<D> {
    fn name(&self) -> &str {
        self.name
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let builder = SqlLockProvider::<D>::builder((self.pool)(options.address));
        let mut b = (self.configure)(crate::instance(builder, &options).table(&self.table));
        if self.mode.client_time {
            b = b.time_source(TimeSource::Client);
        }
        if self.mode.compat {
            b = b.shedlock_compatible();
        }
        Ok(Arc::new(b.build()?))
    }

    fn hooks(&self) -> Hooks {
        server_hooks(Records(self.admin.records()), self.addr, self.service)
    }
}

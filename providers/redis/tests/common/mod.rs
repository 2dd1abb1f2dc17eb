//! What the Redis test binaries share: a server from the launcher, connections, and the
//! conformance factory with its record hooks.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::ProviderBuilder as _;
use std::{net::SocketAddr, sync::Arc, time::Duration};

use redis::{AsyncCommands, aio::ConnectionManager};
use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{Hooks, InstanceOptions, ProviderFactory, RecordHooks};
use shedlock_launcher::{Backend, Service};
use shedlock_redis::RedisLockProvider;
use shedlock_test_support as testing;

pub mod secure;

/// The first address of a `redis://host:port` URL.
pub fn addr_of(service: &Service) -> Result<SocketAddr, BoxError> {
    service.addr().ok_or_else(|| format!("no address in {}", service.url()).into())
}

/// A reconnecting connection with short limits, so that a cut connection fails fast (C24)
/// and the next call reconnects.
pub async fn manager(url: &str) -> Result<ConnectionManager, BoxError> {
    let client = redis::Client::open(url)?;
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_secs(2)))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(200));
    Ok(ConnectionManager::new_with_config(client, config).await?)
}

/// A provider on its own connection to `url`, with the given key prefix.
pub async fn provider(url: &str, prefix: &str) -> RedisLockProvider {
    RedisLockProvider::builder(manager(url).await.unwrap())
        .key_prefix(prefix)
        .operation_timeout(Some(Duration::from_secs(3)))
        .build()
        .await
        .unwrap()
}

/// Raw access to the lock keys, through the provider's own key mapping (C14).
pub struct Records<C: shedlock_redis::RedisConnection>(pub RedisLockProvider<C>);

#[async_trait::async_trait]
impl<C: shedlock_redis::RedisConnection> RecordHooks for Records<C> {
    /// A key's `PX` expiry: Redis drops an expired lock's key itself.
    fn expired_records_vanish(&self) -> bool {
        true
    }

    async fn record_exists(&self, name: &str) -> Result<bool, BoxError> {
        let mut c = self.0.connection();
        Ok(c.exists(self.0.key(name)).await?)
    }

    async fn delete_record(&self, name: &str) -> Result<(), BoxError> {
        let mut c = self.0.connection();
        let _: i64 = c.del(self.0.key(name)).await?;
        Ok(())
    }

    /// In Redis an expired key is gone: write one as a crashed holder would have, with a 1 ms
    /// expiry, and wait until the server no longer has it.
    async fn plant_expired_record(&self, name: &str) -> Result<(), BoxError> {
        let mut c = self.0.connection();
        let key = self.0.key(name);
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("00000000deadbeef|crashed-host/1|1|1")
            .arg("PX")
            .arg(1)
            .query_async(&mut c)
            .await?;
        for _ in 0..1000 {
            let ttl: i64 = c.pttl(&key).await?;
            if ttl == -2 {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Err(format!("the planted key {key} did not expire").into())
    }
}

/// The conformance factory for one Redis-protocol server (Redis or Valkey).
pub struct Single {
    pub service: &'static Service,
    pub name: &'static str,
    pub addr: SocketAddr,
    pub prefix: String,
    /// The ShedLock-compatible mode (keys `<prefix>:default:<name>`).
    pub compat: bool,
    pub admin: RedisLockProvider,
}

impl Single {
    pub async fn new(backend: Backend, label: &str, name: &'static str) -> Result<Self, BoxError> {
        Self::new_with(backend, label, name, false).await
    }

    /// In the native mode, or in the ShedLock-compatible one (`compat`).
    pub async fn new_with(
        backend: Backend,
        label: &str,
        name: &'static str,
        compat: bool,
    ) -> Result<Self, BoxError> {
        let service = testing::service(backend, label).await?;
        let addr = addr_of(service)?;
        let prefix = if compat {
            format!("conformance-{}", shedlock_conformance::run_id())
        } else {
            format!("conformance:{}:", shedlock_conformance::run_id())
        };
        let mut admin =
            RedisLockProvider::builder(manager(service.url()).await?).key_prefix(&prefix);
        if compat {
            admin = admin.shedlock_compatible();
        }
        let admin = admin.build().await?;
        Ok(Self { service, name, addr, prefix, compat, admin })
    }
}

#[async_trait::async_trait]
impl ProviderFactory for Single {
    fn name(&self) -> &str {
        self.name
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let url = match options.address {
            Some(a) => format!("redis://{a}"),
            None => self.service.url().to_owned(),
        };
        // The clock is not given: the server's clock judges expiry (C18 proves it).
        let mut b = RedisLockProvider::builder(manager(&url).await?)
            .key_prefix(&self.prefix)
            .operation_timeout(Some(Duration::from_secs(3)));
        if self.compat {
            b = b.shedlock_compatible();
        }
        Ok(Arc::new(b.build().await?))
    }

    fn hooks(&self) -> Hooks {
        testing::server_hooks(Records(self.admin.clone()), self.addr, self.service)
    }
}

/// A connection to the Redis Cluster at `urls` (comma-separated node URLs), with short limits.
pub async fn cluster_connection(
    urls: &str,
) -> Result<redis::cluster_async::ClusterConnection, BoxError> {
    let nodes: Vec<&str> = urls.split(',').map(str::trim).filter(|u| !u.is_empty()).collect();
    let client = redis::cluster::ClusterClientBuilder::new(nodes)
        .connection_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(2))
        .build()?;
    Ok(client.get_async_connection().await?)
}

/// Set in a fault scenario's node processes: the `redis-cluster` factory's instances wait for
/// this many replicas to acknowledge each grant (the builder's `wait_for_replicas`).
pub const WAIT_REPLICAS_ENV: &str = "SHEDLOCK_TEST_REDIS_WAIT_REPLICAS";

/// The conformance factory for the Redis Cluster (3 masters, 3 replicas): every instance has
/// its own cluster connection. No backend address: a cluster client follows the nodes' own
/// addresses (MOVED/ASK), which one proxy cannot stand in front of.
pub struct Cluster {
    pub service: &'static Service,
    pub prefix: String,
    pub admin: RedisLockProvider<redis::cluster_async::ClusterConnection>,
}

impl Cluster {
    pub async fn new() -> Result<Self, BoxError> {
        let service = testing::service(Backend::RedisCluster, "Redis Cluster").await?;
        let prefix = format!("conformance:{}:", shedlock_conformance::run_id());
        let admin = RedisLockProvider::builder(cluster_connection(service.url()).await?)
            .key_prefix(&prefix)
            .build()
            .await?;
        Ok(Self { service, prefix, admin })
    }
}

#[async_trait::async_trait]
impl ProviderFactory for Cluster {
    fn name(&self) -> &str {
        "redis-cluster"
    }

    async fn create(&self, _options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let mut b = RedisLockProvider::builder(cluster_connection(self.service.url()).await?)
            .key_prefix(&self.prefix)
            .operation_timeout(Some(Duration::from_secs(3)));
        // The fault scenario `redis-cluster-wait` turns the WAIT mitigation on in its nodes.
        if let Some(n) = std::env::var(WAIT_REPLICAS_ENV).ok().and_then(|v| v.parse().ok()) {
            b = b.wait_for_replicas(n, Duration::from_millis(500));
        }
        Ok(Arc::new(b.build().await?))
    }

    fn hooks(&self) -> Hooks {
        let hooks = Hooks::new()
            .with_records(Records(self.admin.clone()))
            .with_node_env([(self.service.backend().env_var(), self.service.url())]);
        if self.service.mode() == shedlock_launcher::Mode::External {
            hooks
        } else {
            hooks.with_restart(testing::Restart(self.service))
        }
    }
}

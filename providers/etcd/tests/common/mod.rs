//! What the etcd test binaries share: a server from the launcher, clients with short limits, and
//! the conformance factory with its record hooks.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::ProviderBuilder as _;
use std::{net::SocketAddr, sync::Arc, time::Duration};

use etcd_client::{Client, ConnectOptions, PutOptions};
use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{Hooks, InstanceOptions, ProviderFactory, RecordHooks};
use shedlock_etcd::EtcdLockProvider;
use shedlock_launcher::{Backend, Service};
use shedlock_test_support as testing;

/// The operation timeout of the test providers: 5 s, half of C24's 10 s bound on a failing call.
/// An acquire on a fresh lease is two round trips (grant, transaction), about 3 s on C24's slow
/// link (500 ms each way, HTTP/2 frames delayed one after another).
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(5);

/// Client options: short limits, so that a cut or stalled connection fails fast (C24) and the
/// next call reconnects. HTTP/2 keep-alive pings find a silently dead connection; their timeout
/// stays above the round trip of C24's slow link (1 s), or they would cut a working connection.
pub fn connect_options() -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(3))
        .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5))
}

/// A client on the endpoints of `urls` (comma-separated, as the launcher gives a cluster's).
pub async fn client(urls: &str) -> Result<Client, BoxError> {
    let endpoints: Vec<&str> = urls.split(',').map(str::trim).filter(|u| !u.is_empty()).collect();
    Ok(Client::connect(endpoints, Some(connect_options())).await?)
}

/// A provider on its own client to `urls`, with the given key prefix.
pub async fn provider(urls: &str, prefix: &str) -> EtcdLockProvider {
    EtcdLockProvider::builder(client(urls).await.unwrap())
        .key_prefix(prefix)
        .operation_timeout(Some(OPERATION_TIMEOUT))
        .build()
        .unwrap()
}

/// Raw access to the lock keys, through the provider's own key mapping (C14).
pub struct Records(pub EtcdLockProvider);

#[async_trait::async_trait]
impl RecordHooks for Records {
    /// A lease: etcd deletes an expired lock's key itself.
    fn expired_records_vanish(&self) -> bool {
        true
    }

    async fn record_exists(&self, name: &str) -> Result<bool, BoxError> {
        let mut c = self.0.client();
        Ok(c.get(self.0.key(name), None).await?.count() > 0)
    }

    async fn delete_record(&self, name: &str) -> Result<(), BoxError> {
        let mut c = self.0.client();
        c.delete(self.0.key(name), None).await?;
        Ok(())
    }

    /// In etcd an expired key is gone: write one as a crashed holder would have left it, on a
    /// lease of 1 s (the launcher's etcd grants 1 s), and wait until the server deleted it.
    async fn plant_expired_record(&self, name: &str) -> Result<(), BoxError> {
        let mut c = self.0.client();
        let key = self.0.key(name);
        let lease = c.lease_grant(1, None).await?.id();
        c.put(key.clone(), "crashed-host/1", Some(PutOptions::new().with_lease(lease))).await?;
        for _ in 0..200 {
            if c.get(key.clone(), None).await?.count() == 0 {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!("the planted key {} did not expire", String::from_utf8_lossy(&key)).into())
    }
}

/// The conformance factory for one etcd server.
pub struct Single {
    pub service: &'static Service,
    pub addr: SocketAddr,
    pub prefix: String,
    pub admin: EtcdLockProvider,
}

impl Single {
    pub async fn new() -> Result<Self, BoxError> {
        let service = testing::service(Backend::Etcd, "etcd").await?;
        let addr = service.addr().ok_or_else(|| format!("no address in {}", service.url()))?;
        // C28's node processes share the run id, so they address the same keys.
        let prefix = format!("conformance/{}/", shedlock_conformance::run_id());
        let admin =
            EtcdLockProvider::builder(client(service.url()).await?).key_prefix(&prefix).build()?;
        Ok(Self { service, addr, prefix, admin })
    }
}

#[async_trait::async_trait]
impl ProviderFactory for Single {
    fn name(&self) -> &str {
        "etcd"
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let url = match options.address {
            Some(a) => format!("http://{a}"),
            None => self.service.url().to_owned(),
        };
        // The clock is not given: the server's leases judge expiry (C18 proves it).
        let p = EtcdLockProvider::builder(client(&url).await?)
            .key_prefix(&self.prefix)
            .operation_timeout(Some(OPERATION_TIMEOUT))
            .build()?;
        Ok(Arc::new(p))
    }

    fn hooks(&self) -> Hooks {
        testing::server_hooks(Records(self.admin.clone()), self.addr, self.service)
    }
}

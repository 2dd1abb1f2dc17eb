//! What the ZooKeeper test binaries share: the server from the launcher, providers, and the
//! conformance factory with its record hooks.
//!
//! Each conformance instance has its own session (like a separate node). The hooks give the kit
//! raw node access through a separate admin session (C14), the server address for its fault
//! proxy (C24) and a restart of the server (C25) — unless the server comes from
//! `SHEDLOCK_ZOOKEEPER_URL`, which is not ours to restart: C25 is then expected to be "not
//! applicable". Every other check must pass.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::ProviderBuilder as _;
use std::{net::SocketAddr, sync::Arc, time::Duration};

use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{Hooks, InstanceOptions, ProviderFactory, RecordHooks};
use shedlock_launcher::{Backend, Service};
use shedlock_test_support as testing;
use shedlock_zookeeper::ZooKeeperLockProvider;
use zookeeper_client::{Acls, Client, CreateMode};

/// A provider on its own session, with short limits so that a cut connection fails fast.
pub fn provider(connect: &str, root: &str) -> ZooKeeperLockProvider {
    ZooKeeperLockProvider::builder(connect)
        .root(root)
        .session_timeout(Duration::from_secs(4))
        .operation_timeout(Some(Duration::from_secs(3)))
        .build()
        .unwrap()
}

/// A raw session, as an operator with `zkCli.sh` would have it.
pub async fn admin(connect: &str) -> Client {
    Client::connector()
        .with_session_timeout(Duration::from_secs(4))
        .connect(connect)
        .await
        .expect("connect to ZooKeeper")
}

/// The conformance factory on one ZooKeeper server.
pub struct Zk {
    name: &'static str,
    service: &'static Service,
    connect: String,
    addr: SocketAddr,
    root: String,
    admin: Client,
    paths: ZooKeeperLockProvider,
}

impl Zk {
    /// One server (`zookeeper`), or the 3-node ensemble (`zookeeper-ensemble`: instances get
    /// the whole connect string, the fault proxy and C14's records the first node).
    pub async fn new(backend: Backend) -> Result<Self, BoxError> {
        let (label, name) = match backend {
            Backend::ZooKeeperEnsemble => ("the ZooKeeper ensemble", "zookeeper-ensemble"),
            _ => ("ZooKeeper", "zookeeper"),
        };
        let service = testing::service(backend, label).await?;
        let connect = service.url().to_owned();
        let addr = service.addr().ok_or("no server address")?;
        // C28's node processes (this binary, re-executed) share the run id, so they use the
        // same root.
        let run: String = shedlock_conformance::run_id()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
            .collect();
        let root = format!("/shedlock-conformance/{run}");
        let paths = provider(&connect, &root);
        paths.connect().await?;
        let admin = admin(&connect).await;
        Ok(Self { name, service, connect, addr, root, admin, paths })
    }
}

#[async_trait::async_trait]
impl ProviderFactory for Zk {
    fn name(&self) -> &str {
        self.name
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        // The clock is ignored: expiry is judged by the server (C18 gives skewed clocks here).
        let connect = match options.address {
            Some(a) => a.to_string(),
            None => self.connect.clone(),
        };
        Ok(Arc::new(provider(&connect, &self.root)))
    }

    fn hooks(&self) -> Hooks {
        let records = Records { admin: self.admin.clone(), paths: self.paths.clone() };
        testing::server_hooks(records, self.addr, self.service)
    }
}

/// Raw node access on the provider's path mapping.
pub struct Records {
    pub admin: Client,
    pub paths: ZooKeeperLockProvider,
}

#[async_trait::async_trait]
impl RecordHooks for Records {
    /// The ephemeral lock node exists.
    async fn record_exists(&self, name: &str) -> Result<bool, BoxError> {
        Ok(self.admin.check_stat(&self.paths.lock_path(name)).await?.is_some())
    }

    /// `delete <root>/<key>/lock`, as an operator would.
    async fn delete_record(&self, name: &str) -> Result<(), BoxError> {
        match self.admin.delete(&self.paths.lock_path(name), None).await {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// A lock node as a crashed holder's live session would have left it: `hold_ms` 1, written
    /// by the admin session (which stays open), and already past its hold.
    async fn plant_expired_record(&self, name: &str) -> Result<(), BoxError> {
        let opts = CreateMode::Persistent.with_acls(Acls::anyone_all());
        match self.admin.create(&self.paths.name_path(name), b"", &opts).await {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => return Err(e.into()),
        }
        let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        self.admin.create(&self.paths.lock_path(name), b"1\ncrashed/1", &eph).await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(())
    }
}

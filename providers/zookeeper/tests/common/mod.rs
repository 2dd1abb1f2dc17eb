//! What the ZooKeeper test binaries share: the server from the launcher, providers, and the
//! conformance factory with its record hooks.
//!
//! Each conformance instance has its own session (like a separate node). The hooks give the kit
//! raw node access through a separate admin session (C14), the server address for its fault
//! proxy (C24) and a restart of the server (C25) — unless the server comes from
//! `SHEDLOCK_ZOOKEEPER_URL`, which is not ours to restart: C25 is then expected to be "not
//! applicable". Every other check must pass.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod secure;

use shedlock::ProviderBuilder as _;
use std::{net::SocketAddr, sync::Arc, time::Duration};

use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{Hooks, InstanceOptions, ProviderFactory, RecordHooks};
use shedlock_launcher::{Backend, Service};
use shedlock_test_support as testing;
use shedlock_zookeeper::{ZooKeeperLockProvider, ZooKeeperLockProviderBuilder};
use zookeeper_client::{Acls, Client, CreateMode};

/// A provider on its own session, with short limits so that a cut connection fails fast.
pub fn provider(connect: &str, root: &str) -> ZooKeeperLockProvider {
    Access::default().builder(connect, root).build().unwrap()
}

/// A raw session, as an operator with `zkCli.sh` would have it.
pub async fn admin(connect: &str) -> Client {
    Access::default().raw(connect).await
}

/// How a test reaches its server: in plaintext and unauthenticated (the plain suites), or over
/// TLS trusting `ca_pem` and authenticated as a digest identity (`zookeeper-secure`).
#[derive(Clone, Default)]
pub struct Access {
    pub ca_pem: Option<String>,
    pub digest: Option<(String, String)>,
}

impl Access {
    /// A provider's builder on `connect` and `root`, with short limits so that a cut connection
    /// fails fast, and this TLS and identity.
    pub fn builder(&self, connect: &str, root: &str) -> ZooKeeperLockProviderBuilder {
        let mut b = ZooKeeperLockProvider::builder(connect)
            .root(root)
            .session_timeout(Duration::from_secs(4))
            .operation_timeout(Some(Duration::from_secs(3)));
        if let Some(ca) = &self.ca_pem {
            b = b.tls_ca_pem(ca);
        }
        if let Some((user, password)) = &self.digest {
            b = b.digest_auth(user, password);
        }
        b
    }

    /// A raw session with this TLS (through a test forwarder: zookeeper-client's own TLS is not
    /// built) and identity (`addauth digest`), as an operator with `zkCli.sh` would have it.
    pub async fn raw(&self, connect: &str) -> Client {
        let connect = match &self.ca_pem {
            Some(ca) => secure::tunnel(connect.parse().expect("one host:port"), ca)
                .await
                .expect("start the test's TLS forwarder")
                .to_string(),
            None => connect.to_owned(),
        };
        let mut c = Client::connector().with_session_timeout(Duration::from_secs(4));
        if let Some((user, password)) = &self.digest {
            c = c.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        c.connect(&connect).await.expect("connect to ZooKeeper")
    }
}

/// The conformance factory on one ZooKeeper server.
pub struct Zk {
    name: &'static str,
    service: &'static Service,
    connect: String,
    addr: SocketAddr,
    root: String,
    access: Access,
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
        let root = format!("/shedlock-conformance/{}", run_segment());
        Self::on(name, service, root, Access::default()).await
    }

    /// The factory `name` on `service`'s server, its instances and record hooks reaching it with
    /// `access`, locking under `root` (created here).
    pub async fn on(
        name: &'static str,
        service: &'static Service,
        root: String,
        access: Access,
    ) -> Result<Self, BoxError> {
        let connect = service.url().to_owned();
        let addr = service.addr().ok_or("no server address")?;
        let paths = access.builder(&connect, &root).build()?;
        paths.connect().await?;
        let admin = access.raw(&connect).await;
        Ok(Self { name, service, connect, addr, root, access, admin, paths })
    }

    /// The raw session of the record hooks (with the instances' TLS and identity).
    pub fn admin(&self) -> &Client {
        &self.admin
    }

    /// The root the instances lock under.
    pub fn root(&self) -> &str {
        &self.root
    }
}

/// The run id as a node name: C28's node processes (this binary, re-executed) share it, so they
/// use the same root.
pub fn run_segment() -> String {
    shedlock_conformance::run_id()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
        .collect()
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
        Ok(Arc::new(self.access.builder(&connect, &self.root).build()?))
    }

    fn hooks(&self) -> Hooks {
        let records = Records {
            admin: self.admin.clone(),
            paths: self.paths.clone(),
            creator_only: self.access.digest.is_some(),
        };
        testing::server_hooks(records, self.addr, self.service)
    }
}

/// Raw node access on the provider's path mapping.
pub struct Records {
    pub admin: Client,
    pub paths: ZooKeeperLockProvider,
    /// The nodes planted get the instances' ACL: creator-only when authenticated, else open.
    pub creator_only: bool,
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
        let acls = if self.creator_only { Acls::creator_all() } else { Acls::anyone_all() };
        let opts = CreateMode::Persistent.with_acls(acls);
        match self.admin.create(&self.paths.name_path(name), b"", &opts).await {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => return Err(e.into()),
        }
        let eph = CreateMode::Ephemeral.with_acls(acls);
        self.admin.create(&self.paths.lock_path(name), b"1\ncrashed/1", &eph).await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(())
    }
}

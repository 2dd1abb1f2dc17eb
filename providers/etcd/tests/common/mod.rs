//! What the etcd test binaries share: a server from the launcher, clients with short limits, and
//! the conformance factory with its record hooks.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::ProviderBuilder as _;
use std::{net::SocketAddr, sync::Arc, time::Duration};

use etcd_client::{Client, PutOptions};
use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{Hooks, InstanceOptions, ProviderFactory, RecordHooks};
use shedlock_etcd::{EtcdClientBuilder, EtcdLockProvider};
use shedlock_launcher::{Backend, Service};
use shedlock_test_support as testing;

/// The operation timeout of the test providers: 5 s, half of C24's 10 s bound on a failing call.
/// An acquire on a fresh lease is two round trips (grant, transaction), about 3 s on C24's slow
/// link (500 ms each way, HTTP/2 frames delayed one after another).
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(5);

/// Client settings: short limits, so that a cut or stalled connection fails fast (C24) and the
/// next call reconnects. HTTP/2 keep-alive pings find a silently dead connection; their timeout
/// stays above the round trip of C24's slow link (1 s), or they would cut a working connection.
pub fn builder(urls: &str) -> EtcdClientBuilder {
    let endpoints: Vec<&str> = urls.split(',').map(str::trim).filter(|u| !u.is_empty()).collect();
    EtcdClientBuilder::new(endpoints)
        .connect_timeout(Duration::from_secs(1))
        .request_timeout(Duration::from_secs(3))
        .keep_alive(Duration::from_secs(5), Duration::from_secs(5))
}

/// A client on the endpoints of `urls` (comma-separated, as the launcher gives a cluster's).
pub async fn client(urls: &str) -> Result<Client, BoxError> {
    Ok(builder(urls).connect().await?)
}

/// Who a client of the secure server logs in as, trusting the launcher's CA.
#[derive(Clone)]
pub struct Login {
    pub ca_pem: String,
    pub user: String,
    pub password: String,
}

impl Login {
    /// The administrator (`root`) of the secure `service`.
    pub fn root(service: &Service) -> Login {
        let s = service.secure().expect("a secure service");
        Login {
            ca_pem: s.ca_pem().to_owned(),
            user: s.admin_user().to_owned(),
            password: s.admin_password().to_owned(),
        }
    }

    /// The application user (`shedlock_app`, no role of its own) of the secure `service`.
    pub fn app(service: &Service) -> Login {
        let s = service.secure().expect("a secure service");
        Login {
            ca_pem: s.ca_pem().to_owned(),
            user: s.app_user().to_owned(),
            password: s.app_password().to_owned(),
        }
    }

    /// `user` with `password`, trusting the same CA.
    pub fn other(&self, user: &str, password: &str) -> Login {
        Login { ca_pem: self.ca_pem.clone(), user: user.to_owned(), password: password.to_owned() }
    }

    /// A client of `urls` (https://) logged in as this user, over TLS.
    pub async fn client(&self, urls: &str) -> shedlock::Result<Client> {
        builder(urls).tls_ca_pem(&self.ca_pem).user(&self.user, &self.password).connect().await
    }
}

/// A role `role` holding `permission` (`read`, `write` or `readwrite`) on the keys that start
/// with `prefix`, granted to `user` (created with `password` unless it exists), through
/// `root`'s client: `etcdctl role add <role>; role grant-permission <role> --prefix=true
/// <permission> <prefix>; user add <user>; user grant-role <user> <role>`.
pub async fn grant(
    root: &Client,
    role: &str,
    permission: etcd_client::PermissionType,
    prefix: &str,
    user: &str,
    password: &str,
) -> Result<(), BoxError> {
    use etcd_client::Permission;
    let mut auth = root.auth_client();
    // A node process of the conformance kit (the same setup, again) finds them made.
    if let Err(e) = auth.role_add(role).await
        && !e.to_string().contains("already exists")
    {
        return Err(e.into());
    }
    let perm = Permission::new(permission, prefix).with_prefix();
    auth.role_grant_permission(role, perm).await?;
    if let Err(e) = auth.user_add(user, password, None).await
        && !e.to_string().contains("already exists")
    {
        return Err(e.into());
    }
    auth.user_grant_role(user, role).await?;
    Ok(())
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
    /// Whom the instances log in as, over TLS (the secure suite); `None`: plaintext, no login.
    pub login: Option<Login>,
    pub name: &'static str,
}

impl Single {
    pub async fn new() -> Result<Self, BoxError> {
        let service = testing::service(Backend::Etcd, "etcd").await?;
        let addr = service.addr().ok_or_else(|| format!("no address in {}", service.url()))?;
        // C28's node processes share the run id, so they address the same keys.
        let prefix = format!("conformance/{}/", shedlock_conformance::run_id());
        let admin =
            EtcdLockProvider::builder(client(service.url()).await?).key_prefix(&prefix).build()?;
        Ok(Self { service, addr, prefix, admin, login: None, name: "etcd" })
    }

    /// The secure suite's factory: the launcher's secure etcd (https, `auth enable`), the
    /// instances logged in as `shedlock_app` over TLS, holding only the role `role`, which grants
    /// `readwrite` on `prefix` (the README's "Permissions"). The record hooks run as `root`.
    pub async fn secure(
        service: &'static Service,
        prefix: String,
        role: &str,
    ) -> Result<Self, BoxError> {
        let addr = service.addr().ok_or_else(|| format!("no address in {}", service.url()))?;
        let root = Login::root(service);
        let app = Login::app(service);
        let root_client = root.client(service.url()).await?;
        let rw = etcd_client::PermissionType::Readwrite;
        grant(&root_client, role, rw, &prefix, &app.user, &app.password).await?;
        let admin = EtcdLockProvider::builder(root_client).key_prefix(&prefix).build()?;
        Ok(Self { service, addr, prefix, admin, login: Some(app), name: "etcd-secure" })
    }
}

#[async_trait::async_trait]
impl ProviderFactory for Single {
    fn name(&self) -> &str {
        self.name
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let scheme = if self.login.is_some() { "https" } else { "http" };
        let url = match options.address {
            // The kit's fault proxy, on 127.0.0.1: a name the server's certificate holds.
            Some(a) => format!("{scheme}://{a}"),
            None => self.service.url().to_owned(),
        };
        let client = match &self.login {
            Some(login) => login.client(&url).await?,
            None => client(&url).await?,
        };
        // The clock is not given: the server's leases judge expiry (C18 proves it).
        let p = EtcdLockProvider::builder(client)
            .key_prefix(&self.prefix)
            .operation_timeout(Some(OPERATION_TIMEOUT))
            .build()?;
        Ok(Arc::new(p))
    }

    fn hooks(&self) -> Hooks {
        testing::server_hooks(Records(self.admin.clone()), self.addr, self.service)
    }
}

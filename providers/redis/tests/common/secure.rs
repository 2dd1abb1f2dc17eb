//! The `redis-secure` suite's factory: a Redis server that listens only on TLS and whose default
//! user is off ([`shedlock_launcher::LaunchOptions::secure`]); every instance logs in as an ACL
//! user holding exactly the README's "Permissions" rules for locking and listing on the suite's
//! prefix.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use redis::aio::ConnectionManager;
use shedlock::{BoxError, LockProvider, ProviderBuilder as _};
use shedlock_conformance::{Hooks, InstanceOptions, ProviderFactory, Security};
use shedlock_launcher::{Backend, Service};
use shedlock_redis::RedisLockProvider;
use shedlock_test_support as testing;

use super::{Records, addr_of};

/// The README's rules for locking, `inspect` and `force_release` (its first line), after the
/// user's name, password and key pattern.
pub const LOCKING_RULES: &str =
    "resetchannels -@all +evalsha +eval +script|load +get +set +time +pttl +pexpire +del";
/// The README's addition for `list` (its second line).
pub const LIST_RULES: &str = "+scan +type +cluster|slots";

/// A reconnecting connection over TLS to `url` (`rediss://user:password@host:port`), trusting
/// only `ca_pem`, with the suite's short limits.
pub async fn tls_manager(url: &str, ca_pem: &str) -> Result<ConnectionManager, BoxError> {
    let client = redis::Client::build_with_tls(url, only_ca(ca_pem))?;
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_secs(2)))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(200));
    Ok(ConnectionManager::new_with_config(client, config).await?)
}

/// The launcher's CA as the only root a client trusts.
pub fn only_ca(ca_pem: &str) -> redis::TlsCertificates {
    redis::TlsCertificates { client_tls: None, root_cert: Some(ca_pem.as_bytes().to_vec()) }
}

/// A connection over TLS to the Redis Cluster whose nodes are `urls`
/// (`rediss://user:password@host:port` each), trusting only `ca_pem`, with short limits. The
/// client logs in to every node it meets (also those `CLUSTER SLOTS` names) as that user.
pub async fn tls_cluster_connection(
    urls: &[String],
    ca_pem: &str,
) -> Result<redis::cluster_async::ClusterConnection, BoxError> {
    let client = redis::cluster::ClusterClientBuilder::new(urls.to_vec())
        .certs(only_ca(ca_pem))
        .connection_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(2))
        .build()?;
    Ok(client.get_async_connection().await?)
}

/// The factory of `redis-secure`.
pub struct SecureSingle {
    service: &'static Service,
    addr: SocketAddr,
    prefix: String,
    admin: RedisLockProvider,
}

impl SecureSingle {
    /// Creates the suite's ACL user (saved to the server's ACL file, so that C25's restart keeps
    /// it) and the administrator's provider for the record hooks.
    pub async fn new() -> Result<testing::secure::Secured<Self>, BoxError> {
        let service = testing::secure::service(Backend::Redis, "Redis").await?;
        let secure = service.secure().ok_or("the secure launch says nothing of its credentials")?;
        let addr = addr_of(service)?;
        let prefix = format!("conformance:{}:", shedlock_conformance::run_id());
        let admin_url = secure.url_for(addr, secure.admin_user(), secure.admin_password());
        let mut admin_conn = tls_manager(&admin_url, secure.ca_pem()).await?;
        let mut setuser = redis::cmd("ACL");
        setuser
            .arg("SETUSER")
            .arg(secure.app_user())
            .arg("reset")
            .arg("on")
            .arg(format!(">{}", secure.app_password()))
            .arg(format!("~{prefix}*"));
        for rule in LOCKING_RULES.split_whitespace().chain(LIST_RULES.split_whitespace()) {
            setuser.arg(rule);
        }
        let () = setuser.query_async(&mut admin_conn).await?;
        let () = redis::cmd("ACL").arg("SAVE").query_async(&mut admin_conn).await?;
        let admin = RedisLockProvider::builder(admin_conn).key_prefix(&prefix).build().await?;
        let security = Security::new(
            secure.app_user(),
            format!(
                "{} (tls-protocols TLSv1.3; server certificate verified against the launcher's \
                 throwaway CA); the default user is off",
                secure.tls_version()
            ),
        )
        .grant(format!("ACL SETUSER {} on >*** ~{prefix}* {LOCKING_RULES}", secure.app_user()))
        .grant(format!("ACL SETUSER {} {LIST_RULES}", secure.app_user()))
        .secret(secure.app_password())
        .secret(secure.admin_password());
        Ok(testing::secure::Secured::new(Self { service, addr, prefix, admin }, security, service))
    }
}

#[async_trait::async_trait]
impl ProviderFactory for SecureSingle {
    fn name(&self) -> &str {
        "redis-secure"
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let secure = self.service.secure().ok_or("not a secure service")?;
        let addr = options.address.unwrap_or(self.addr);
        let url = secure.url_for(addr, secure.app_user(), secure.app_password());
        let b = RedisLockProvider::builder(tls_manager(&url, secure.ca_pem()).await?)
            .key_prefix(&self.prefix)
            .operation_timeout(Some(Duration::from_secs(3)));
        Ok(Arc::new(b.build().await?))
    }

    fn hooks(&self) -> Hooks {
        testing::server_hooks(Records(self.admin.clone()), self.addr, self.service)
    }
}

//! The `nats-secure` suite's factory: the launcher's secure NATS (TLS required, its certificate
//! signed by a throwaway CA; users with passwords). The bucket is made by the administrator;
//! every instance logs in over TLS as the application user, which holds exactly the README's
//! "Permissions" blocks for locking, inspection and force_release (read from the README,
//! written to the user's permissions file and reloaded before the first instance connects), and
//! connects with [`NatsLockProvider::connect`] (a permission watch installed). The hooks are
//! the plain suite's, as the administrator.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use async_nats::{Client, ConnectOptions};
use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{Hooks, InstanceOptions, ProviderFactory, Security};
use shedlock_launcher::{Backend, Service};
use shedlock_nats::NatsLockProvider;
use shedlock_test_support as testing;
use tokio::time::Instant;

use super::{
    Records, connect_options,
    permissions::{app_permissions, block},
};

/// The factory of `nats-secure`.
pub struct SecureNats {
    service: &'static Service,
    addr: SocketAddr,
    bucket: String,
    admin: NatsLockProvider,
    admin_client: Client,
}

/// `tls://<addr>`: the credentials go in the options, not in the URL.
fn url(addr: SocketAddr) -> String {
    format!("tls://{addr}")
}

/// The suite's client options over TLS as `user`, trusting only the launcher's CA.
fn tls_options(service: &Service, user: &str, password: &str) -> Result<ConnectOptions, BoxError> {
    let secure = service.secure().ok_or("not a secure service")?;
    Ok(connect_options()
        .require_tls(true)
        .add_root_certificates(secure.ca_path())
        .user_and_password(user.to_owned(), password.to_owned()))
}

/// Retries `attempt` for up to 10 s: a connection made while the server reloads its
/// configuration can be refused, and a reload applies asynchronously.
async fn eventually<T, Fut>(mut attempt: impl FnMut() -> Fut) -> Result<T, BoxError>
where
    Fut: Future<Output = Result<T, BoxError>>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match attempt().await {
            Ok(t) => return Ok(t),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

impl SecureNats {
    /// Creates the bucket as the administrator and gives the application user exactly the
    /// README's permissions on it.
    pub async fn new() -> Result<testing::secure::Secured<Self>, BoxError> {
        let service = testing::secure::service(Backend::Nats, "NATS").await?;
        let secure = service.secure().ok_or("the secure launch says nothing of its credentials")?;
        let addr = service.addr().ok_or("the secure NATS has no address")?;
        // C28's node processes (this binary, re-executed) share the run id, so they address
        // the same bucket.
        let run: String = shedlock_conformance::run_id()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
            .collect();
        let bucket = format!("conformance_sec_{run}");
        let admin_client = eventually(|| async {
            let options = tls_options(service, secure.admin_user(), secure.admin_password())?;
            Ok(options.connect(url(addr)).await?)
        })
        .await?;
        let admin = NatsLockProvider::builder(admin_client.clone()).bucket(&bucket).build()?;
        admin.create_bucket().await?;

        let (publish, subscribe) = app_permissions(&bucket);
        let text = block(&publish, &subscribe);
        let path = secure.app_permissions_path().ok_or("no permissions file")?;
        // A node process finds the file written by its parent (and may not reload a server it
        // did not start).
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            std::fs::write(&path, &text)?;
            service.reload()?;
        }
        // Applied: the application user can list the bucket (check and list need the newest
        // grants of the blocks).
        eventually(|| async {
            let options = tls_options(service, secure.app_user(), secure.app_password())?;
            let p =
                NatsLockProvider::connect(&url(addr), options).await?.bucket(&bucket).build()?;
            p.check().await?;
            p.list("", None, 1).await?;
            Ok(())
        })
        .await?;

        let (publish, subscribe) = app_permissions("<bucket>");
        let list = |l: &[String]| l.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
        let security = Security::new(
            secure.app_user(),
            format!(
                "{} (tls_required; server certificate verified against the launcher's throwaway \
                 CA only), user and password",
                secure.tls_version()
            ),
        )
        .grant(format!("publish: {{ allow: [{}] }}", list(&publish)))
        .grant(format!("subscribe: {{ allow: [{}] }}", list(&subscribe)))
        .secret(secure.app_password())
        .secret(secure.admin_password());
        let inner = Self { service, addr, bucket, admin, admin_client };
        Ok(testing::secure::Secured::new(inner, security, service))
    }
}

#[async_trait::async_trait]
impl ProviderFactory for SecureNats {
    fn name(&self) -> &str {
        "nats-secure"
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let secure = self.service.secure().ok_or("not a secure service")?;
        let addr = options.address.unwrap_or(self.addr);
        let tls = tls_options(self.service, secure.app_user(), secure.app_password())?;
        let b = NatsLockProvider::connect(&url(addr), tls).await?;
        Ok(Arc::new(testing::instance(b, &options).bucket(&self.bucket).build()?))
    }

    fn hooks(&self) -> Hooks {
        let records = Records {
            client: self.admin_client.clone(),
            admin: self.admin.clone(),
            client_time: false,
        };
        testing::server_hooks(records, self.addr, self.service)
    }
}

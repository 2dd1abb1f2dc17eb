//! The secure suites (`<provider>-secure`): the provider's conformance run against a server the
//! launcher started with authentication and TLS enforced
//! ([`shedlock_launcher::LaunchOptions::secure`]), its instances logged in as the application
//! user holding exactly the grants its README's "Permissions" section lists.

use std::sync::Arc;

use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{Hooks, InstanceOptions, Options, ProviderFactory, Security, SuiteSpec};
use shedlock_launcher::{Backend, Service};

/// The secure server of `backend` for this process ([`shedlock_launcher::shared_secure`]);
/// `label` names it in messages. A server that cannot be started is an error, never a skip.
pub async fn service(backend: Backend, label: &str) -> Result<&'static Service, BoxError> {
    let r = tokio::task::spawn_blocking(move || shedlock_launcher::shared_secure(backend)).await?;
    r.map_err(|e| format!("a secure {label} is not available: {e}").into())
}

/// The conformance options of a secure suite: from the environment. The server is always this
/// process's own (never one given by URL), so C25 can restart it.
pub fn options() -> Options {
    Options::from_env()
}

/// One secure suite (`name`, e.g. `postgres-secure`) of a provider's conformance binary:
/// `setup` builds the factory, whose report states `security` (see [`Secured`]). Shown as
/// skipped, with the reason, when `SHEDLOCK_SKIP_BACKENDS` names the backend.
pub fn suite<P, F, Fut>(backend: Backend, name: &str, options: Options, setup: F) -> SuiteSpec
where
    P: ProviderFactory,
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Secured<P>, BoxError>> + 'static,
{
    crate::suite(backend, name, options, setup)
}

/// A factory that also states the posture its instances run in ([`ProviderFactory::security`]);
/// everything else is `inner`'s.
pub struct Secured<P> {
    inner: P,
    security: Security,
    server: String,
}

impl<P> Secured<P> {
    /// `inner`, run as `security` says, against `service` (named in the report).
    pub fn new(inner: P, security: Security, service: &Service) -> Self {
        Secured {
            inner,
            security,
            server: format!("{}, secured by the launcher", service.server()),
        }
    }
}

#[async_trait::async_trait]
impl<P: ProviderFactory> ProviderFactory for Secured<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// `inner`'s instance, with its connection opened before the kit uses it (unless it goes
    /// through the kit's fault proxy): a TLS handshake plus a SCRAM login costs sqlx ~0.1 s of
    /// client time (4 096 HMAC rounds, yielding every 5), which a check that times its first
    /// call against a 200 ms lease would otherwise count against the backend. A service keeps
    /// its pool warm the same way; a failure here is left for the check itself to see.
    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let direct = options.address.is_none();
        let p = self.inner.create(options).await?;
        if direct {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(3), p.check()).await;
        }
        Ok(p)
    }

    fn hooks(&self) -> Hooks {
        self.inner.hooks()
    }

    async fn teardown(&self) {
        self.inner.teardown().await;
    }

    fn server(&self) -> Option<String> {
        Some(self.server.clone())
    }

    fn security(&self) -> Option<Security> {
        Some(self.security.clone())
    }
}

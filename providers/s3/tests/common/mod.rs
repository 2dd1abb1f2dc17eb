//! Test helpers shared by the S3 test targets: a plain-HTTP SDK client for the local server (no
//! TLS stack, path-style addressing), the conformance factory and its hooks.
//!
//! Each conformance instance has its own client (its own connection pool, like a separate node).
//! The hooks give the kit raw object access (C14), the server address for its fault proxy (C24)
//! and a restart of the server (C25) — unless the server comes from `SHEDLOCK_S3_URL`: a server
//! this process does not own cannot be restarted, so C25 is then expected to be "not
//! applicable". moto keeps nothing across a restart, so the restart hook creates the bucket
//! again afterwards (what an operator restoring the bucket would do): the provider itself must
//! then recover from a bucket without its lock objects.
#![allow(dead_code)]

use shedlock::ProviderBuilder as _;
use std::{
    net::{SocketAddr, ToSocketAddrs},
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use aws_sdk_s3::{Client, primitives::ByteStream};
use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{Hooks, InstanceOptions, ProviderFactory, RecordHooks, RestartHook};
use shedlock_launcher::{Backend, Mode, Service};
use shedlock_s3::S3LockProvider;
use shedlock_test_support::{self as testing, aws};

pub use shedlock_test_support::host_port;

/// The socket address of an endpoint URL.
pub fn addr_of(url: &str) -> SocketAddr {
    host_port(url).to_socket_addrs().unwrap().next().unwrap()
}

/// An SDK client for a local endpoint over plain HTTP, path-style, with the test
/// credentials, short timeouts (a cut connection fails fast: C24) and one retry
/// ([`aws::sdk_config`]).
pub fn client(endpoint: &str) -> Client {
    let conf = aws_sdk_s3::config::Builder::from(&aws::sdk_config(endpoint))
        .force_path_style(true)
        .build();
    Client::from_conf(conf)
}

/// The local server: the launcher's (or `SHEDLOCK_S3_URL`).
pub async fn service() -> Result<&'static Service, BoxError> {
    testing::service(Backend::S3, "S3").await
}

/// The server's endpoint URL, without a trailing slash.
pub fn endpoint(service: &Service) -> String {
    service.url().trim_end_matches('/').to_owned()
}

/// A provider on `bucket` through `endpoint`.
pub fn provider(endpoint: &str, bucket: &str) -> S3LockProvider {
    S3LockProvider::builder(client(endpoint), bucket)
        .operation_timeout(Some(Duration::from_secs(3)))
        .build()
        .unwrap()
}

/// Raw object access, as an operator with the AWS CLI would have it.
pub struct Records {
    pub client: Client,
    pub bucket: String,
    pub admin: S3LockProvider,
}

impl Records {
    /// The body of `name`'s object, if there is one.
    pub async fn body(&self, name: &str) -> Result<Option<serde_json::Value>, BoxError> {
        let r = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(self.admin.key_for(name))
            .send()
            .await;
        match r {
            Ok(out) => {
                let bytes = out.body.collect().await?.into_bytes();
                Ok(Some(serde_json::from_slice(&bytes)?))
            }
            Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 404) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

#[async_trait::async_trait]
impl RecordHooks for Records {
    async fn record_exists(&self, name: &str) -> Result<bool, BoxError> {
        Ok(self.body(name).await?.is_some())
    }

    /// `aws s3 rm`.
    async fn delete_record(&self, name: &str) -> Result<(), BoxError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(self.admin.key_for(name))
            .send()
            .await?;
        Ok(())
    }

    /// A lock object as the provider writes it, whose lease ended an hour ago, owned by a
    /// process that is gone.
    async fn plant_expired_record(&self, name: &str) -> Result<(), BoxError> {
        let ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
        let hour = 3_600_000i64;
        let body = serde_json::json!({
            "v": 1,
            "acquisition_id": "00000000deadbeef",
            "lock_until_ms": ms - hour,
            "locked_at_ms": ms - 2 * hour,
            "fencing_token": (ms - 2 * hour) * 1000 + 1,
            "locked_by": "crashed/1",
        });
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(self.admin.key_for(name))
            .body(ByteStream::from(body.to_string().into_bytes()))
            .send()
            .await?;
        Ok(())
    }
}

/// Restarts moto, then creates the bucket again (moto keeps no data across a restart).
struct RestartAndRestore {
    service: &'static Service,
    admin: S3LockProvider,
}

#[async_trait::async_trait]
impl RestartHook for RestartAndRestore {
    async fn restart(&self) -> Result<(), BoxError> {
        let service = self.service;
        tokio::task::spawn_blocking(move || service.restart()).await??;
        self.admin.create_bucket().await?;
        Ok(())
    }
}

struct S3 {
    service: &'static Service,
    url: String,
    addr: SocketAddr,
    bucket: String,
    admin: S3LockProvider,
}

impl S3 {
    async fn new() -> Result<Self, BoxError> {
        let service = service().await?;
        let url = endpoint(service);
        let addr = addr_of(&url);
        // C28's node processes (this binary, re-executed) share the run id, so they address
        // the same bucket; repeated runs against one server never share objects.
        let run: String = shedlock_conformance::run_id()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .map(|c| c.to_ascii_lowercase())
            .collect();
        let bucket = format!("conformance-{run}");
        let admin = provider(&url, &bucket);
        admin.create_bucket().await?;
        Ok(Self { service, url, addr, bucket, admin })
    }
}

#[async_trait::async_trait]
impl ProviderFactory for S3 {
    fn name(&self) -> &str {
        "s3"
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let endpoint = aws::endpoint_for(options.address, &self.url);
        // Client time: every instance's (possibly skewed) clock computes its leases (C18).
        let b = S3LockProvider::builder(client(&endpoint), &self.bucket);
        Ok(Arc::new(testing::instance(b, &options).build()?))
    }

    fn hooks(&self) -> Hooks {
        let records = Records {
            client: client(&self.url),
            bucket: self.bucket.clone(),
            admin: self.admin.clone(),
        };
        let hooks = Hooks::new()
            .with_records(records)
            .with_backend_address(self.addr)
            .with_node_env([(self.service.backend().env_var(), self.service.url())]);
        if self.service.mode() == Mode::External {
            hooks
        } else {
            hooks.with_restart(RestartAndRestore {
                service: self.service,
                admin: self.admin.clone(),
            })
        }
    }
}

/// Runs the conformance suite.
pub fn suite() -> shedlock_conformance::SuiteSpec {
    testing::suite(Backend::S3, "s3", testing::server_options(Backend::S3), S3::new)
}

//! Test helpers shared by the DynamoDB test targets: a plain-HTTP SDK client for the local
//! server (no TLS stack), the conformance factory and its hooks.
//!
//! Each conformance instance has its own client (its own connection pool, like a separate node).
//! The hooks give the kit raw item access (C14), the server address for its fault proxy (C24)
//! and a restart of the server (C25) — unless the server comes from `SHEDLOCK_DYNAMODB_URL`: a
//! server this process does not own cannot be restarted, so C25 is then expected to be "not
//! applicable". Every other check must pass.
#![allow(dead_code)]

use shedlock::{ClockBuilder as _, ProviderBuilder as _};
use std::{
    net::{SocketAddr, ToSocketAddrs},
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use aws_sdk_dynamodb::{
    Client,
    config::{BehaviorVersion, Credentials, Region, retry::RetryConfig, timeout::TimeoutConfig},
    types::AttributeValue,
};
use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{Hooks, InstanceOptions, ProviderFactory, RecordHooks};
use shedlock_dynamodb::{
    ATTR_ACQUISITION_ID, ATTR_FENCING_TOKEN, ATTR_ID, ATTR_LOCK_UNTIL, ATTR_LOCKED_AT,
    ATTR_LOCKED_BY, DynamoDbLockProvider,
};
use shedlock_launcher::{Backend, Service};
use shedlock_test_support as testing;

/// The secret key of the test clients when the environment names none: tests check that the
/// secret in use never shows in `Debug` or errors.
pub const DEFAULT_SECRET: &str = "shedlock-test-secret-key-0123456789";

/// The credentials of the test clients: `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` when set
/// (CI's compose services need MinIO's), else dummy ones (dynalite, moto and DynamoDB Local
/// accept any).
pub fn credentials() -> (String, String) {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
        (Some(id), Some(secret)) => (id, secret),
        _ => ("shedlock".to_owned(), DEFAULT_SECRET.to_owned()),
    }
}

pub use shedlock_test_support::host_port;

/// The socket address of an endpoint URL.
pub fn addr_of(url: &str) -> SocketAddr {
    host_port(url).to_socket_addrs().unwrap().next().unwrap()
}

/// An SDK client for a local endpoint over plain HTTP (the SDK's hyper client without TLS),
/// with dummy credentials, short timeouts (a cut connection fails fast: C24) and one retry.
pub fn client(endpoint: &str) -> Client {
    let http = aws_smithy_http_client::Builder::new().build_http();
    let conf = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider({
            let (id, secret) = credentials();
            Credentials::new(id, secret, None, None, "tests")
        })
        .http_client(http)
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(2))
                .operation_attempt_timeout(Duration::from_secs(3))
                .build(),
        )
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(2)
                .with_initial_backoff(Duration::from_millis(20)),
        )
        .build();
    Client::from_conf(conf)
}

/// The local server: the launcher's (or `SHEDLOCK_DYNAMODB_URL`).
pub async fn service() -> Result<&'static Service, BoxError> {
    testing::service(Backend::DynamoDb, "DynamoDB").await
}

/// A provider on `table` through `endpoint`.
pub fn provider(endpoint: &str, table: &str) -> DynamoDbLockProvider {
    DynamoDbLockProvider::builder(client(endpoint))
        .table(table)
        .operation_timeout(Some(Duration::from_secs(3)))
        .build()
        .unwrap()
}

/// Raw item access, as an operator with the AWS CLI would have it.
pub struct Records {
    pub client: Client,
    pub table: String,
    /// Planted items in ShedLock's layout (the ShedLock-compatible mode).
    pub compat: bool,
}

impl Records {
    fn key(name: &str) -> AttributeValue {
        AttributeValue::S(name.to_owned())
    }

    /// The item of `name`, read consistently.
    pub async fn item(
        &self,
        name: &str,
    ) -> Result<Option<std::collections::HashMap<String, AttributeValue>>, BoxError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(ATTR_ID, Self::key(name))
            .consistent_read(true)
            .send()
            .await?;
        Ok(out.item)
    }

    /// A number attribute of `name`'s item.
    pub async fn number(&self, name: &str, attr: &str) -> Result<Option<i64>, BoxError> {
        Ok(self.item(name).await?.and_then(|i| match i.get(attr) {
            Some(AttributeValue::N(n)) => n.parse().ok(),
            _ => None,
        }))
    }
}

#[async_trait::async_trait]
impl RecordHooks for Records {
    async fn record_exists(&self, name: &str) -> Result<bool, BoxError> {
        Ok(self.item(name).await?.is_some())
    }

    /// `aws dynamodb delete-item`.
    async fn delete_record(&self, name: &str) -> Result<(), BoxError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key(ATTR_ID, Self::key(name))
            .send()
            .await?;
        Ok(())
    }

    /// An item as the provider writes it, whose lease ended an hour ago, owned by a process
    /// that is gone.
    async fn plant_expired_record(&self, name: &str) -> Result<(), BoxError> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
        let ms = now.as_millis() as i64;
        let hour = 3_600_000i64;
        let n = |v: i64| AttributeValue::N(v.to_string());
        if self.compat {
            let iso = |v: i64| {
                let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(v).unwrap_or(0));
                AttributeValue::S(shedlock::support::iso8601_millis(t))
            };
            self.client
                .put_item()
                .table_name(&self.table)
                .item(ATTR_ID, Self::key(name))
                .item(ATTR_LOCK_UNTIL, iso(ms - hour))
                .item(ATTR_LOCKED_AT, iso(ms - 2 * hour))
                .item(ATTR_LOCKED_BY, AttributeValue::S("crashed-host".to_owned()))
                .send()
                .await?;
            return Ok(());
        }
        self.client
            .put_item()
            .table_name(&self.table)
            .item(ATTR_ID, Self::key(name))
            .item(ATTR_LOCK_UNTIL, n(ms - hour))
            .item(ATTR_LOCKED_AT, n(ms - 2 * hour))
            .item(ATTR_LOCKED_BY, AttributeValue::S("crashed/1".to_owned()))
            .item(ATTR_ACQUISITION_ID, AttributeValue::S("00000000deadbeef".to_owned()))
            .item(ATTR_FENCING_TOKEN, n((ms - 2 * hour) * 1000 + 1))
            .send()
            .await?;
        Ok(())
    }
}

struct Dynamo {
    service: &'static Service,
    url: String,
    addr: SocketAddr,
    table: String,
    admin: Client,
    compat: bool,
}

impl Dynamo {
    async fn new(compat: bool) -> Result<Self, BoxError> {
        let service = service().await?;
        let url = service.url().trim_end_matches('/').to_owned();
        let addr = addr_of(&url);
        // C28's node processes (this binary, re-executed) share the run id, so they address
        // the same table; repeated runs against one server never share items.
        let run: String = shedlock_conformance::run_id()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
            .collect();
        let table = format!("conformance_{}{run}", if compat { "sc_" } else { "" });
        let p = provider(&url, &table);
        p.create_table().await?;
        Ok(Self { service, admin: client(&url), url, addr, table, compat })
    }
}

#[async_trait::async_trait]
impl ProviderFactory for Dynamo {
    fn name(&self) -> &str {
        if self.compat { "dynamodb-shedlock-compat" } else { "dynamodb" }
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let endpoint = match options.address {
            Some(a) => format!("http://{a}"),
            None => self.url.clone(),
        };
        let mut b = DynamoDbLockProvider::builder(client(&endpoint))
            .table(&self.table)
            // Client time: every instance's (possibly skewed) clock computes its leases (C18).
            .clock(options.clock_or_system())
            .operation_timeout(Some(Duration::from_secs(3)));
        if self.compat {
            b = b.shedlock_compatible();
        }
        Ok(Arc::new(b.build()?))
    }

    fn hooks(&self) -> Hooks {
        let records =
            Records { client: self.admin.clone(), table: self.table.clone(), compat: self.compat };
        testing::server_hooks(records, self.addr, self.service)
    }
}

/// Runs the conformance suite.
pub fn suite() -> shedlock_conformance::SuiteSpec {
    let options = testing::server_options(Backend::DynamoDb);
    testing::suite(Backend::DynamoDb, "dynamodb", options, || Dynamo::new(false))
}

/// Runs the conformance suite in the ShedLock-compatible mode, whose items have no attribute
/// for a fencing token: C20 and C21 are then expected "unsupported".
pub fn suite_compat() -> shedlock_conformance::SuiteSpec {
    let options = shedlock_test_support::expect_no_fencing(
        testing::server_options(Backend::DynamoDb),
        "no fencing in the ShedLock-compatible mode: ShedLock's item (_id, lockUntil, \
             lockedAt, lockedBy) has no attribute for a token",
    );
    testing::suite(Backend::DynamoDb, "dynamodb-shedlock-compat", options, || Dynamo::new(true))
}

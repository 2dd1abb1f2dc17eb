//! Test helpers shared by the DynamoDB test targets: a plain-HTTP SDK client for the local
//! server (no TLS stack), the conformance factory and its hooks.
//!
//! Each conformance instance has its own client (its own connection pool, like a separate node).
//! The hooks give the kit raw item access (C14), the server address for its fault proxy (C24)
//! and a restart of the server (C25) — unless the server comes from `SHEDLOCK_DYNAMODB_URL`: a
//! server this process does not own cannot be restarted, so C25 is then expected to be "not
//! applicable". Every other check must pass.
#![allow(dead_code)]

use shedlock::ProviderBuilder as _;
use std::{
    net::{SocketAddr, ToSocketAddrs},
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use aws_sdk_dynamodb::{Client, types::AttributeValue};
use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{Hooks, InstanceOptions, ProviderFactory, RecordHooks};
use shedlock_dynamodb::{
    ATTR_ACQUISITION_ID, ATTR_FENCING_TOKEN, ATTR_ID, ATTR_LOCK_UNTIL, ATTR_LOCKED_AT,
    ATTR_LOCKED_BY, DynamoDbLockProvider,
};
use shedlock_launcher::{Backend, Service};
use shedlock_test_support::{self as testing, aws};

pub use shedlock_test_support::host_port;

/// The socket address of an endpoint URL.
pub fn addr_of(url: &str) -> SocketAddr {
    host_port(url).to_socket_addrs().unwrap().next().unwrap()
}

/// An SDK client for a local endpoint over plain HTTP, with the test credentials, short
/// timeouts (a cut connection fails fast: C24) and one retry ([`aws::sdk_config`]).
pub fn client(endpoint: &str) -> Client {
    Client::new(&aws::sdk_config(endpoint))
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
        // The same table in C28's node processes, never one of an earlier run.
        let table = format!("conformance_{}{}", if compat { "sc_" } else { "" }, aws::run_tag());
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
        let endpoint = aws::endpoint_for(options.address, &self.url);
        // Client time: every instance's (possibly skewed) clock computes its leases (C18).
        let b = DynamoDbLockProvider::builder(client(&endpoint)).table(&self.table);
        let mut b = testing::instance(b, &options);
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

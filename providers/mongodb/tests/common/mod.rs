//! The conformance factory and hooks of `conformance.rs`'s three suites: server time (the
//! default, provider `mongodb`), client time (`mongodb-client-time`) and the ShedLock-compatible
//! mode (`mongodb-shedlock-compat`).
//!
//! Each instance has its own `mongodb::Client` (its own connection pool and server monitor, like
//! a separate node). The hooks give the kit raw document access through the driver (C14), the
//! server address for its fault proxy (C24) and a restart of the server (C25) — unless the
//! server comes from `SHEDLOCK_MONGODB_URL`: a server this process does not own cannot be
//! restarted, so C25 is then expected to be "not applicable". Every other check must pass.

// `tests/it` uses a part of it.
#![allow(dead_code)]

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, SystemTime},
};

use mongodb::{
    Client, Collection,
    bson::{DateTime, Document, doc},
    options::ClientOptions,
};
use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{Hooks, InstanceOptions, ProviderFactory, RecordHooks};
use shedlock_launcher::{Backend, Service};
use shedlock_mongodb::{MongoLockProvider, TimeSource};
use shedlock_test_support as testing;

/// The database the conformance runs use.
pub const DATABASE: &str = "shedlock_conformance";

pub use shedlock_test_support::host_port;

/// A client with short timeouts, so that a cut connection fails fast (C24) and a restarted
/// server is found again quickly (C25).
pub async fn client(url: &str) -> Result<Client, BoxError> {
    let mut o = ClientOptions::parse(url).await?;
    o.server_selection_timeout = Some(Duration::from_secs(2));
    o.connect_timeout = Some(Duration::from_secs(2));
    o.app_name = Some("shedlock-conformance".to_owned());
    Ok(Client::with_options(o)?)
}

struct Mongo {
    service: &'static Service,
    name: &'static str,
    url: String,
    addr: SocketAddr,
    collection: String,
    client_time: bool,
    compat: bool,
    records: Collection<Document>,
}

impl Mongo {
    async fn new(client_time: bool, compat: bool) -> Result<Self, BoxError> {
        let service = testing::service(Backend::MongoDb, "MongoDB").await?;
        let url = service.url().to_owned();
        let addr = testing::resolve(host_port(&url))?;
        // C28's node processes (this binary, re-executed) share the run id, so they address the
        // same collection.
        let run: String = shedlock_conformance::run_id()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let mode = match (client_time, compat) {
            (_, true) => "sc_",
            (true, false) => "ct_",
            (false, false) => "",
        };
        let collection = format!("conformance_{mode}{run}");
        let admin = MongoLockProvider::builder(client(&url).await?.database(DATABASE))
            .collection(&collection)
            .build()?;
        admin.create_collection().await?;
        Ok(Self {
            service,
            name: match (client_time, compat) {
                (false, true) => "mongodb-shedlock-compat",
                (true, true) => "mongodb-shedlock-compat-client-time",
                (true, false) => "mongodb-client-time",
                (false, false) => "mongodb",
            },
            url,
            addr,
            collection,
            client_time,
            compat,
            records: admin.collection().clone(),
        })
    }
}

#[async_trait::async_trait]
impl ProviderFactory for Mongo {
    fn name(&self) -> &str {
        self.name
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let url = testing::instance_url(options.address, &self.url);
        let b = MongoLockProvider::builder(client(&url).await?.database(DATABASE));
        let mut b = testing::instance(b, &options).collection(&self.collection);
        if self.client_time {
            b = b.time_source(TimeSource::Client);
        }
        if self.compat {
            b = b.shedlock_compatible();
        }
        Ok(Arc::new(b.build()?))
    }

    fn hooks(&self) -> Hooks {
        let records = Records(self.records.clone(), self.compat);
        testing::server_hooks(records, self.addr, self.service)
    }
}

/// Raw document access, as an operator with mongosh would have it; planted documents in
/// ShedLock's layout when the flag is set.
struct Records(Collection<Document>, bool);

#[async_trait::async_trait]
impl RecordHooks for Records {
    async fn record_exists(&self, name: &str) -> Result<bool, BoxError> {
        Ok(self.0.find_one(doc! { "_id": name }).await?.is_some())
    }

    async fn delete_record(&self, name: &str) -> Result<(), BoxError> {
        self.0.delete_one(doc! { "_id": name }).await?;
        Ok(())
    }

    /// A document as the provider writes it, whose `lockUntil` passed an hour ago, owned by an
    /// acquisition nobody holds.
    async fn plant_expired_record(&self, name: &str) -> Result<(), BoxError> {
        let hour = Duration::from_secs(3600);
        let now = SystemTime::now();
        let mut record = doc! {
            "lockUntil": DateTime::from_system_time(now - hour),
            "lockedAt": DateTime::from_system_time(now - 2 * hour),
            "lockedBy": "crashed/1",
        };
        if !self.1 {
            record.insert("owner", 0x5eed_i64);
            record.insert("token", 1_i64);
        }
        self.0.replace_one(doc! { "_id": name }, record).upsert(true).await?;
        Ok(())
    }
}

/// Runs the suite: server time (`mongodb`) or client time (`mongodb-client-time`).
pub fn suite(client_time: bool) -> shedlock_conformance::SuiteSpec {
    let options = testing::server_options(Backend::MongoDb);
    let name = if client_time { "mongodb-client-time" } else { "mongodb" };
    testing::suite(Backend::MongoDb, name, options, move || Mongo::new(client_time, false))
}

/// Runs the suite in the ShedLock-compatible mode (server time), whose documents have no field
/// for a fencing token: C20 and C21 are then expected "unsupported".
pub fn suite_compat() -> shedlock_conformance::SuiteSpec {
    let options = shedlock_test_support::expect_no_fencing(
        testing::server_options(Backend::MongoDb),
        "no fencing in the ShedLock-compatible mode: ShedLock's document (_id, lockUntil, \
             lockedAt, lockedBy) has no field for a token",
    );
    testing::suite(Backend::MongoDb, "mongodb-shedlock-compat", options, || Mongo::new(false, true))
}

//! The conformance factory and hooks of `conformance.rs`'s two suites: server time (provider
//! `nats`) and client time on a bucket without per-message TTL, as a server before 2.11 offers
//! (`nats-client-time`).
//!
//! Each instance has its own client (like a separate node). The hooks give the kit raw record
//! access through JetStream requests on the provider's key mapping (C14), the server address for
//! its fault proxy (C24) and a restart of the server (C25) — unless the server comes from
//! `SHEDLOCK_NATS_URL`: a server this process does not own cannot be restarted, so C25 is then
//! expected to be "not applicable". Every other check must pass.
//!
//! `secure.rs` is the `nats-secure` suite's factory (TLS, users, the README's permissions);
//! `permissions.rs` reads those permissions from the README.

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use async_nats::{Client, ConnectOptions, HeaderMap, Request};
use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{Hooks, InstanceOptions, ProviderFactory, RecordHooks};
use shedlock_launcher::{Backend, Service};
use shedlock_nats::{NatsLockProvider, TimeSource};
use shedlock_test_support as testing;

pub mod permissions;
pub mod secure;

/// Client options for one instance: short timeouts so that a cut connection fails fast (C24),
/// quick reconnection (C24, C25).
fn connect_options() -> ConnectOptions {
    ConnectOptions::new()
        .connection_timeout(Duration::from_secs(2))
        .request_timeout(Some(Duration::from_secs(3)))
        .reconnect_delay_callback(|n| Duration::from_millis((n as u64 * 50).min(500)))
}

use shedlock_test_support::host_port;

struct Nats {
    service: &'static Service,
    name: &'static str,
    url: String,
    addr: SocketAddr,
    bucket: String,
    client_time: bool,
    admin: NatsLockProvider,
    client: Client,
}

impl Nats {
    async fn new(client_time: bool) -> Result<Self, BoxError> {
        let service = testing::service(Backend::Nats, "NATS").await?;
        let url = service.url().to_owned();
        let addr = testing::resolve(host_port(&url))?;
        // C28's node processes (this binary, re-executed) share the run id, so they address
        // the same bucket.
        let run: String = shedlock_conformance::run_id()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
            .collect();
        let bucket = format!("conformance_{}{run}", if client_time { "ct_" } else { "" });
        let client = connect_options().connect(url.as_str()).await?;
        let mut b = NatsLockProvider::builder(client.clone()).bucket(&bucket);
        if client_time {
            // The bucket has no per-message TTL, as on a server before 2.11.
            b = b.time_source(TimeSource::Client);
        }
        let admin = b.build()?;
        admin.create_bucket().await?;
        Ok(Self {
            service,
            name: if client_time { "nats-client-time" } else { "nats" },
            url,
            addr,
            bucket,
            client_time,
            admin,
            client,
        })
    }
}

#[async_trait::async_trait]
impl ProviderFactory for Nats {
    fn name(&self) -> &str {
        self.name
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let url = testing::instance_url(options.address, &self.url);
        let client = connect_options().connect(url.as_str()).await?;
        let b = NatsLockProvider::builder(client);
        let mut b = testing::instance(b, &options).bucket(&self.bucket);
        if self.client_time {
            b = b.time_source(TimeSource::Client);
        }
        Ok(Arc::new(b.build()?))
    }

    fn hooks(&self) -> Hooks {
        let records = Records {
            client: self.client.clone(),
            admin: self.admin.clone(),
            client_time: self.client_time,
        };
        testing::server_hooks(records, self.addr, self.service)
    }
}

/// Raw record access on the provider's key mapping, as an operator with the `nats` CLI would
/// have it.
struct Records {
    client: Client,
    admin: NatsLockProvider,
    client_time: bool,
}

impl Records {
    async fn request(
        &self,
        subject: String,
        headers: HeaderMap,
        payload: String,
    ) -> Result<async_nats::Message, BoxError> {
        let req = Request::new()
            .headers(headers)
            .payload(payload.into())
            .timeout(Some(Duration::from_secs(5)));
        Ok(self.client.send_request(subject, req).await?)
    }

    /// The last message on the name's subject: `None` if there is none.
    async fn last(&self, name: &str) -> Result<Option<async_nats::Message>, BoxError> {
        let subject =
            format!("$JS.API.DIRECT.GET.{}.{}", self.admin.stream(), self.admin.subject_for(name));
        let m = self.request(subject, HeaderMap::new(), String::new()).await?;
        Ok(if m.status.is_some_and(|s| s.as_u16() == 404) { None } else { Some(m) })
    }
}

fn header<'a>(m: &'a async_nats::Message, name: &str) -> Option<&'a str> {
    m.headers.as_ref()?.get(name).map(|v| v.as_str())
}

#[async_trait::async_trait]
impl RecordHooks for Records {
    /// In server time a message TTL: the store forgets an expired lock's message itself. In
    /// client time the record stays.
    fn expired_records_vanish(&self) -> bool {
        !self.client_time
    }

    /// A lock message (not a tombstone) is the name's last message.
    async fn record_exists(&self, name: &str) -> Result<bool, BoxError> {
        Ok(self.last(name).await?.is_some_and(|m| {
            header(&m, "KV-Operation").is_none() && header(&m, "Nats-Marker-Reason").is_none()
        }))
    }

    /// `nats kv del`: a `KV-Operation: DEL` tombstone becomes the key's last message.
    async fn delete_record(&self, name: &str) -> Result<(), BoxError> {
        let mut h = HeaderMap::new();
        h.insert("KV-Operation", "DEL");
        let m = self.request(self.admin.subject_for(name), h, String::new()).await?;
        let body = String::from_utf8_lossy(&m.payload);
        if body.contains("\"error\"") {
            return Err(format!("delete: {body}").into());
        }
        Ok(())
    }

    /// A lock message as the provider writes it, already expired. In server time that is a
    /// message with a 1 s TTL that the server has since expired (the store forgets it: an expired
    /// record is no record). In client time it is a message whose `lock_until_us` lies an hour in
    /// the past, which stays in the store.
    async fn plant_expired_record(&self, name: &str) -> Result<(), BoxError> {
        let subject = self.admin.subject_for(name);
        let mut h = HeaderMap::new();
        let body = if self.client_time {
            let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros() as i64;
            let hour = 3_600_000_000i64;
            format!(
                r#"{{"locked_by":"crashed/1","lock_until_us":{},"locked_at_us":{}}}"#,
                now - hour,
                now - 2 * hour
            )
        } else {
            h.insert("Nats-TTL", "1");
            r#"{"locked_by":"crashed/1"}"#.to_owned()
        };
        let m = self.request(subject, h, body).await?;
        let answer = String::from_utf8_lossy(&m.payload);
        if answer.contains("\"error\"") {
            return Err(format!("plant: {answer}").into());
        }
        if !self.client_time {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while self.last(name).await?.is_some() {
                if tokio::time::Instant::now() > deadline {
                    return Err("the planted record did not expire within 10 s".into());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }
}

/// Runs the suite: server time (`nats`), or client time on a bucket without per-message TTL
/// (`nats-client-time`).
pub fn suite(client_time: bool) -> shedlock_conformance::SuiteSpec {
    let options = testing::server_options(Backend::Nats);
    let name = if client_time { "nats-client-time" } else { "nats" };
    testing::suite(Backend::Nats, name, options, move || Nats::new(client_time))
}

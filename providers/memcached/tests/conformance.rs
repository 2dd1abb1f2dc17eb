//! The shedlock conformance suite (C01–C32) against a real memcached server, provider name
//! `memcached`, and again over TLS as `memcached-secure`: the launcher's secure memcached (`-Z`
//! on its only listener, a certificate of a throwaway CA; no credentials, since the meta
//! protocol has no authentication), every instance and the record hooks connecting over TLS
//! and trusting exactly that CA.
//!
//! Each instance is a provider of its own (its own connections, like a separate node). The hooks
//! give the kit raw record access through meta commands on the provider's own key mapping (C14),
//! the server address for its fault proxy (C24) and a restart of the server (C25) — unless the
//! server comes from `SHEDLOCK_MEMCACHED_URL` (as under `cargo xtask test`): a server this
//! process does not own cannot be restarted, so C25 is then expected to be "not applicable".
//!
//! Expected non-pass outcomes, in both suites: C20 and C21 are "unsupported", because the
//! provider declares no fencing (memcached's CAS values start again from 1 when the server
//! restarts). Every other check must pass. The secure server is always this process's own, so
//! `memcached-secure` runs C25 (a restart: the server comes back with the same certificate).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::ProviderBuilder as _;
use std::{
    net::{SocketAddr, ToSocketAddrs},
    sync::Arc,
    time::Duration,
};

use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{
    Hooks, InstanceOptions, Options, ProviderFactory, RecordHooks, Security,
};
use shedlock_launcher::{Backend, Service};
use shedlock_memcached::MemcachedLockProvider;
use shedlock_test_support as testing;

struct Memcached {
    service: &'static Service,
    addr: SocketAddr,
    prefix: String,
}

impl Memcached {
    async fn new() -> Result<Self, BoxError> {
        let service = testing::service(Backend::Memcached, "memcached").await?;
        let url = service.url();
        let hostport = url.trim_start_matches("memcache://").trim_end_matches('/');
        let addr =
            hostport.to_socket_addrs()?.next().ok_or("the memcached host does not resolve")?;
        // A prefix of this run's own (shared with C28's node processes through the run id), so
        // repeated runs against one server never share keys.
        let prefix = format!("shedlock-conformance-{}:", shedlock_conformance::run_id());
        Ok(Self { service, addr, prefix })
    }

    fn builder(&self, addr: SocketAddr) -> shedlock_memcached::MemcachedLockProviderBuilder {
        MemcachedLockProvider::builder(addr.to_string()).key_prefix(&self.prefix)
    }
}

#[async_trait::async_trait]
impl ProviderFactory for Memcached {
    fn name(&self) -> &str {
        "memcached"
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        // Server time: the (possibly skewed) clock in `options` is not consulted (C18).
        let addr = options.address.unwrap_or(self.addr);
        // A short limit so that a cut connection fails fast instead of hanging (C24).
        let p = self.builder(addr).operation_timeout(Some(Duration::from_secs(3))).build()?;
        Ok(Arc::new(p))
    }

    fn hooks(&self) -> Hooks {
        let admin = self.builder(self.addr).build().expect("the admin provider builds");
        testing::server_hooks(Records { admin }, self.addr, self.service)
    }
}

/// The `memcached-secure` suite's factory: the launcher's secure memcached, reached over TLS
/// (trusting exactly its CA) by every instance and by the record hooks.
struct SecureMemcached {
    service: &'static Service,
    addr: SocketAddr,
    ca_pem: String,
    prefix: String,
}

impl SecureMemcached {
    async fn new() -> Result<testing::secure::Secured<Self>, BoxError> {
        let service = testing::secure::service(Backend::Memcached, "memcached").await?;
        let secure = service.secure().ok_or("the secure launch says nothing of its TLS")?;
        let addr = service.addr().ok_or_else(|| format!("no address in {}", service.url()))?;
        let prefix = format!("shedlock-conformance-secure-{}:", shedlock_conformance::run_id());
        let security = Security::new(
            "none: the provider sends no login, and the server enables none",
            format!(
                "{} (ssl_min_version=3, rustls on ring); server certificate verified against the \
                 launcher's throwaway CA; no client certificate (ssl_verify_mode 0)",
                secure.tls_version()
            ),
        )
        .grant(
            "none: memcached has no access control: any client that reaches the port may read, \
             write and delete every key",
        );
        let factory = Self { service, addr, ca_pem: secure.ca_pem().to_owned(), prefix };
        Ok(testing::secure::Secured::new(factory, security, service))
    }

    /// A TLS builder on `addr` (the server's, or the kit's fault proxy in front of it: both
    /// 127.0.0.1, which the certificate names).
    fn builder(&self, addr: SocketAddr) -> shedlock_memcached::MemcachedLockProviderBuilder {
        MemcachedLockProvider::builder(addr.to_string())
            .tls_ca_pem(&self.ca_pem)
            .key_prefix(&self.prefix)
    }
}

#[async_trait::async_trait]
impl ProviderFactory for SecureMemcached {
    fn name(&self) -> &str {
        "memcached-secure"
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let addr = options.address.unwrap_or(self.addr);
        let p = self.builder(addr).operation_timeout(Some(Duration::from_secs(3))).build()?;
        Ok(Arc::new(p))
    }

    fn hooks(&self) -> Hooks {
        let admin = self.builder(self.addr).build().expect("the admin provider builds");
        testing::server_hooks(Records { admin }, self.addr, self.service)
    }
}

/// Raw record access with meta commands, on the provider's own key mapping, over connections
/// opened as the admin provider opens its own (TLS for the secure suite).
struct Records {
    admin: MemcachedLockProvider,
}

impl Records {
    async fn request(&self, request: String, value: Option<&[u8]>) -> Result<String, BoxError> {
        let mut c = self.admin.raw_connection().await?;
        let mut bytes = request.into_bytes();
        if let Some(v) = value {
            bytes.extend_from_slice(v);
            bytes.extend_from_slice(b"\r\n");
        }
        Ok(c.request(&bytes).await?.code)
    }
}

#[async_trait::async_trait]
impl RecordHooks for Records {
    /// An item's expiry: memcached drops an expired lock's item itself.
    fn expired_records_vanish(&self) -> bool {
        true
    }

    async fn record_exists(&self, name: &str) -> Result<bool, BoxError> {
        let key = self.admin.key(name)?;
        match self.request(format!("mg {key} b\r\n"), None).await?.as_str() {
            "HD" => Ok(true),
            "EN" => Ok(false),
            other => Err(format!("mg answered {other}").into()),
        }
    }

    async fn delete_record(&self, name: &str) -> Result<(), BoxError> {
        let key = self.admin.key(name)?;
        match self.request(format!("md {key} b\r\n"), None).await?.as_str() {
            "HD" | "NF" => Ok(()),
            other => Err(format!("md answered {other}").into()),
        }
    }

    /// A record in the provider's own format (`<acquisition id> <locked_by>`) stored with TTL
    /// -1: memcached keeps it in memory with an expiry time already past, as it keeps the
    /// record of a crashed holder until its TTL ran out and nothing has reclaimed it yet.
    async fn plant_expired_record(&self, name: &str) -> Result<(), BoxError> {
        let key = self.admin.key(name)?;
        let value = b"00000000deadbeef crashed-host/1";
        let request = format!("ms {key} {} b T-1\r\n", value.len());
        match self.request(request, Some(value)).await?.as_str() {
            "HD" => Ok(()),
            other => Err(format!("ms answered {other}").into()),
        }
    }
}

/// `options` with the expectations of both suites: no fencing.
fn no_fencing(options: Options) -> Options {
    options
        .expect_unsupported(
            "C20",
            "no fencing: memcached's CAS values, the only per-record counter it has, start again \
             from 1 when the server restarts (which loses every record), so a token handed out \
             after a restart can be smaller than one handed out before it",
        )
        .expect_unsupported(
            "C21",
            "no fencing (see C20): memcached's CAS counter is not monotonic across restarts",
        )
}

fn main() -> std::process::ExitCode {
    shedlock_conformance::harness_suites(vec![
        testing::suite(
            Backend::Memcached,
            "memcached",
            no_fencing(testing::server_options(Backend::Memcached)),
            Memcached::new,
        ),
        testing::secure::suite(
            Backend::Memcached,
            "memcached-secure",
            no_fencing(testing::secure::options()),
            SecureMemcached::new,
        ),
    ])
}

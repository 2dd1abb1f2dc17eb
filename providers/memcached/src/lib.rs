//! memcached lock provider for [`shedlock`], speaking the memcached **meta protocol**
//! (memcached ≥ 1.6) directly over tokio TCP connections, or TLS over them with the `tls`
//! feature ([TLS](#tls)). No client library: tokio, `tracing` and `thiserror` only (and
//! tokio-rustls with `tls`).
//!
//! - **Acquire: one round trip.** A meta set in add mode with a relative TTL, returning the
//!   item's CAS value: `ms <key> <len> b T<ttl> ME c`. `HD c<cas>` means the lock is ours, `NS`
//!   that it is held.
//! - **Owner-checked unlock and extend** by CAS: `md <key> b C<cas>` deletes the record only if
//!   it is still the one this acquisition stored; extend rewrites it with `ms … C<cas> T<ttl> c`
//!   and keeps the new CAS. A stale holder's call changes nothing.
//! - **Server time**: memcached judges expiry by its own clock (a relative TTL), so clock skew
//!   between nodes cannot break exclusion. Its clock ticks in whole seconds; see
//!   [Time](#time) for the TTLs and the declared 2 s granularity.
//! - **No fencing tokens**: CAS values restart from 1 when memcached restarts. See
//!   [Restarts](#restarts-and-fencing).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_memcached::MemcachedLockProvider;
//!
//! let provider = MemcachedLockProvider::builder("127.0.0.1:11211")
//!     .key_prefix("myapp:lock:")
//!     .build()?; // no I/O: connections open on first use
//!
//! let cfg = LockConfig::new("nightly-report", Duration::from_secs(600), Duration::from_secs(30))?;
//! if let Some(lock) = provider.try_lock(&cfg).await? {
//!     // ... run the task ...
//!     lock.unlock().await?;
//! }
//! # Ok(()) }
//! ```
//!
//! # Keys
//!
//! A lock's key is the configured prefix (default [`DEFAULT_KEY_PREFIX`], `shedlock:`) followed
//! by the lock name, as bytes (each `:` as `0xFF`, below), sent base64-encoded with the meta
//! `b` flag ([`MemcachedLockProvider::key`] shows it). Any name is therefore a valid key —
//! spaces, newlines, NUL, any UTF-8 — and no two names share a key. memcached limits the
//! encoded key to 250 characters, which is [`MAX_KEY_LEN`] (186) bytes of prefix and name
//! together; a longer name is refused with [`Error::InvalidName`], never truncated.
//! [`Capabilities::max_name_len`](shedlock::Capabilities::max_name_len) is 186 minus the
//! prefix length, its `:` included (177 with the default prefix).
//!
//! **Prefixes never collide.** A non-empty prefix ends with [`KEY_DELIMITER`] (`:`): the
//! builder appends one when it is missing (`app` becomes `app:`), and in the name every `:` is
//! stored as the byte `0xFF`, which no UTF-8 text contains (one byte for one byte, so the
//! longest name does not change). A key therefore never holds a `:` after its prefix, and
//! providers with different prefixes — `app` and `app2`, or `app:` and `app:2:` — never share
//! a key, whatever their lock names (`app` + `2x` is not `app2` + `x`).
//!
//! The value of the record is `<acquisition id, 16 hex digits> <locked_by>` (informational:
//! ownership rests on the CAS value).
//!
//! # Time
//!
//! memcached keeps time in whole seconds: a timer sets its clock once a second, and an item
//! with TTL `n` expires at the first tick at which that clock has advanced by `n`. The clock may
//! be a tick stale when the item is stored, and the timer drifts (it is re-armed after each
//! tick), so every fifteen minutes or so the clock advances by two seconds in one tick. An item
//! with TTL `n` therefore lives between `n - 2` and `n` seconds. Hence:
//!
//! - acquire and extend use **TTL = ⌈lock_at_most_for⌉ + 2 s**, the smallest TTL that surely
//!   outlives `lock_at_most_for` (and so the lock's lease, which ends `lock_at_most_for`, less
//!   the 1 ms clock step, after the request was sent). A lock frees between `lock_at_most_for` and
//!   `⌈lock_at_most_for⌉ + 2 s` after it was taken;
//! - an unlock with `lock_at_least_for` time left (counted from when the acquire or the last
//!   extend was answered) rewrites the record, CAS-checked, with **TTL = ⌈remaining⌉ + 1 s**, and
//!   otherwise deletes it. The lock then frees within a second after at least — up to a second
//!   earlier when memcached's clock skips a second;
//! - so the declared [`GRANULARITY`] is **2 s**, the width of memcached's expiry window;
//! - a TTL above 30 days is read by memcached as an absolute Unix time, so a `lock_at_most_for`
//!   above [`MAX_LOCK_DURATION`] (30 days less 2 s) is refused with
//!   [`Error::Unsupported`] before anything is sent. TTL 0
//!   ("never expire") is never sent.
//!
//! # Restarts and fencing
//!
//! memcached keeps nothing across a restart, and its CAS counter starts again from 1. A CAS
//! value therefore identifies a record only within one server process: each connection learns
//! its server's process id and start time (`stats`, once per connection), every lock remembers
//! those of the server that granted it, and an unlock or extend that reaches another process
//! changes nothing (unlock: `Ok`, the lock is gone anyway; extend:
//! [`Error::LockLost`]) instead of comparing a CAS value that may now
//! belong to another holder. For the same reason the provider declares **no fencing**: the CAS
//! values handed out after a restart are smaller than those before it.
//!
//! # Connections
//!
//! The provider opens up to [`max_connections`](MemcachedLockProviderBuilder::max_connections)
//! TCP connections (default 4) to one server, lazily, and keeps idle ones for reuse. Each call
//! takes one connection for one request and its reply. A connection whose exchange failed or was
//! cancelled (a timeout, a dropped future) is closed, never reused, so no reply is ever read by
//! the wrong call; an idle connection the server has closed is noticed and replaced before use.
//! A connection lost during a call fails that call with the retryable
//! [`Error::Unavailable`] (the command may or may not have run);
//! the next call opens a fresh one. Every call runs under
//! [`operation_timeout`](MemcachedLockProviderBuilder::operation_timeout) (default 10 s),
//! connecting included.
//!
//! Nothing the server sends is trusted for a size: a value block over [`MAX_VALUE_LEN`] (four
//! times the longest record the provider writes), a line over [`MAX_LINE_LEN`] or a `stats`
//! reply that never ends fails the call with [`Error::Backend`] saying what the server sent,
//! after reading at most that much and allocating nothing for the announced size, and the
//! connection is closed.
//!
//! # Eviction
//!
//! memcached is a cache: under memory pressure it may evict any item, a held lock included,
//! which frees the lock early. Give the server memory to spare (`-m`), or run it with `-M`
//! (return errors instead of evicting), or use a memcached instance of its own for locks.
//!
//! # TLS
//!
//! With the **`tls`** feature (tokio-rustls, rustls on the *ring* provider, named explicitly),
//! [`tls_ca_pem`](MemcachedLockProviderBuilder::tls_ca_pem) connects every connection of the
//! pool, reconnects included, to memcached's TLS listener (`-Z`), trusting exactly the CAs in
//! that PEM text (no system roots).
//! [`tls_server_name`](MemcachedLockProviderBuilder::tls_server_name) changes the name the
//! certificate is verified against (default: the host of the address) and
//! [`tls_identity`](MemcachedLockProviderBuilder::tls_identity) presents a client certificate
//! (memcached's `ssl_verify_mode=2`). The reply caps above hold on the decrypted stream.
//!
//! Settings that cannot work (no CA, PEM that does not parse, a bad name, TLS without the
//! feature) are [`Error::Setup`] at build, before any I/O. A TLS failure at connection time that a
//! retry would not change — a certificate not accepted, a session refused by the server (a
//! client certificate required), a port that does not answer TLS — is [`Error::Setup`] too,
//! saying what to change; a handshake cut by the network is the retryable
//! [`Error::Unavailable`], and one that never completes ends at the operation timeout.
//!
//! # Security
//!
//! memcached has **no access control**, and this client sends no login (memcached's SASL is
//! binary-protocol only; its experimental `-Y` text-protocol login is not supported): anyone
//! who reaches the port can take, release or forge any lock. Bind memcached to a private
//! network; on a shared one, use TLS with client certificates
//! ([`tls_identity`](MemcachedLockProviderBuilder::tls_identity), `ssl_verify_mode=2`). See the
//! README's "Permissions".

mod conn;
mod proto;
mod tls;

use std::{
    fmt,
    time::{Duration, SystemTime},
};

use async_trait::async_trait;
use shedlock::{
    Capabilities, Error, LockConfig, LockProvider, Result, TimeSource,
    inspect::{ForceRelease, LockInfo},
    store::{
        DelegatingProvider, Extension, Granted, LeaseStore, Operation, ProviderSettings, Request,
        Settings, StoreProvider,
    },
    support::check_lock_name,
};
use tokio::time::Instant;

use crate::{
    conn::{Checkout, Conn, ConnError, Epoch, Pool},
    proto::{Reply, at_least_ttl, at_most_ttl, base64, meta_delete, meta_get, meta_set},
    tls::TlsSettings,
};

pub use crate::proto::{MAX_KEY_LEN, MAX_LINE_LEN, MAX_LOCK_DURATION, MAX_VALUE_LEN};
/// The builder setters every provider shares (`operation_timeout`, `locked_by`).
pub use shedlock::ProviderBuilder;
/// The default time limit of each operation, connecting included: 10 s, as for every provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT;

const BACKEND: &str = "memcached";

/// The default start of every key: `shedlock:`.
pub const DEFAULT_KEY_PREFIX: &str = "shedlock:";

/// The byte that ends every non-empty key prefix: `:`. The builder appends it to a prefix that
/// does not end with it, and a `:` in a lock name is stored as `0xFF` ([`ESCAPED_DELIMITER`]), so
/// no key holds a `:` after its prefix and two different prefixes never share a key.
pub const KEY_DELIMITER: u8 = b':';

/// What a `:` ([`KEY_DELIMITER`]) of a lock name becomes in its key: the byte `0xFF`, which
/// never occurs in UTF-8 text, so the mapping is one-to-one and keeps the name's length.
pub const ESCAPED_DELIMITER: u8 = 0xFF;

/// The default number of connections a provider opens at most: 4.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4;

/// The declared time granularity: 2 s, the width of memcached's expiry window (an item with TTL
/// `n` lives between `n - 2` and `n` seconds; see [Time](crate#time)).
pub const GRANULARITY: Duration = Duration::from_secs(2);

/// Builds a [`MemcachedLockProvider`].
///
/// The shared setters (`operation_timeout`, `locked_by`) come from [`ProviderBuilder`], in scope
/// with `use shedlock_memcached::ProviderBuilder;`. Here the time limit includes waiting for a
/// connection and connecting; ownership rests on the record's CAS value, never on `locked_by`.
#[must_use]
#[derive(Debug)]
pub struct MemcachedLockProviderBuilder {
    address: String,
    prefix: Vec<u8>,
    settings: ProviderSettings,
    max_connections: usize,
    tls: TlsSettings,
}

impl ProviderBuilder for MemcachedLockProviderBuilder {
    fn settings_mut(&mut self) -> &mut ProviderSettings {
        &mut self.settings
    }
}

impl MemcachedLockProviderBuilder {
    /// The start of every key (default [`DEFAULT_KEY_PREFIX`]): any bytes, since keys are sent
    /// base64-encoded. A non-empty prefix that does not end with [`KEY_DELIMITER`] (`:`) gets
    /// one appended (`myapp` is `myapp:`; `myapp:lock:` stays as it is), so that providers with
    /// different prefixes never share a key (see [Keys](crate#keys)); the empty prefix stays
    /// empty. It shortens the longest lock name: prefix (with its `:`) and name together hold at
    /// most [`MAX_KEY_LEN`] bytes.
    pub fn key_prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.prefix = prefix.as_ref().to_vec();
        self
    }

    /// How many connections the provider opens at most (default [`DEFAULT_MAX_CONNECTIONS`],
    /// at least 1). Calls beyond that wait for a free connection (within the operation timeout).
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n;
        self
    }

    /// Connect over TLS, trusting exactly the certificate authorities in `pem` (PEM text: one
    /// CA, or a bundle of several, each trusted): memcached's certificate (`-o
    /// ssl_chain_cert=…`) must be signed by one of them. The client trusts no system roots, so
    /// TLS needs this setting; any TLS setting turns TLS on for every connection of the
    /// provider, reconnects included. Needs the `tls` feature (without it [`build`](Self::build)
    /// fails with [`Error::Setup`]). See [TLS](crate#tls).
    pub fn tls_ca_pem(mut self, pem: impl Into<String>) -> Self {
        self.tls.ca_pem = Some(pem.into());
        self
    }

    /// The name memcached's certificate is verified against (a DNS name or an IP address),
    /// when it is not the host of the address (default): e.g. an address given as an IP, a
    /// certificate issued for `cache.internal`. Turns TLS on (see [`tls_ca_pem`](Self::tls_ca_pem)).
    pub fn tls_server_name(mut self, name: impl Into<String>) -> Self {
        self.tls.server_name = Some(name.into());
        self
    }

    /// A client certificate (PEM; its chain may follow it) and its private key (PEM: PKCS#8,
    /// RSA or SEC1), presented to a memcached that asks for one (`-o ssl_verify_mode=2` with
    /// `ssl_ca_cert=…`): with this client, the only way memcached can keep clients out (see
    /// [Security](crate#security)). The key is never printed. Turns TLS on (see [`tls_ca_pem`](Self::tls_ca_pem)).
    pub fn tls_identity(mut self, cert_pem: impl Into<String>, key_pem: impl Into<String>) -> Self {
        self.tls.identity = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Validates the configuration and builds the provider. An address that is not
    /// `host:port` (optionally `memcache://host:port`), a prefix that leaves no room for a name,
    /// a `locked_by` over 255 bytes, zero connections, or TLS settings that are not usable (no
    /// CA, PEM text that does not parse, a server name that is neither a DNS name nor an IP
    /// address, TLS asked for without the `tls` feature) give [`Error::Setup`]. Does no I/O.
    pub fn build(self) -> Result<MemcachedLockProvider> {
        let address = parse_address(&self.address)?;
        let tls = self.tls.connector(host_of(&address))?;
        let prefix = delimited(self.prefix);
        if prefix.len() >= MAX_KEY_LEN {
            return Err(setup(format!(
                "the key prefix is {} bytes long (its final ':' included); prefix and lock name \
                 together hold at most {MAX_KEY_LEN} bytes",
                prefix.len()
            )));
        }
        let settings = self.settings.validate(BACKEND)?;
        if self.max_connections == 0 {
            return Err(setup("max_connections must be at least 1".into()));
        }
        let store = MemcachedStore {
            pool: Pool::new(address, tls, self.max_connections),
            max_name_len: MAX_KEY_LEN - prefix.len(),
            prefix,
        };
        Ok(MemcachedLockProvider { inner: StoreProvider::new(store, settings) })
    }
}

/// `prefix` ending with [`KEY_DELIMITER`]: as it is when it already does (or is empty), else
/// with one appended.
fn delimited(mut prefix: Vec<u8>) -> Vec<u8> {
    if prefix.last().is_some_and(|b| *b != KEY_DELIMITER) {
        prefix.push(KEY_DELIMITER);
    }
    prefix
}

fn setup(message: String) -> Error {
    Error::Setup { backend: BACKEND, message }
}

/// The host of a checked `host:port` (an IPv6 address keeps its brackets).
fn host_of(address: &str) -> &str {
    address.rsplit_once(':').map_or(address, |(host, _)| host)
}

/// `host:port` from `host:port`, `memcache://host:port` or `memcached://host:port` (a trailing
/// `/` allowed).
fn parse_address(address: &str) -> Result<String> {
    let a = address.trim();
    let a = a
        .strip_prefix("memcache://")
        .or_else(|| a.strip_prefix("memcached://"))
        .unwrap_or(a)
        .trim_end_matches('/');
    let valid = match a.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty()
                && port.parse::<u16>().is_ok_and(|p| p != 0)
                && !host.contains(|c: char| c.is_whitespace() || c == '/' || c == '@')
        }
        None => false,
    };
    if valid {
        Ok(a.to_owned())
    } else {
        Err(setup(format!(
            "address {address:?} is not host:port (e.g. 127.0.0.1:11211 or memcache://host:11211)"
        )))
    }
}

fn map_err(e: ConnError) -> Error {
    match e {
        ConnError::Io(e) => Error::unavailable(BACKEND, e),
        // A certificate not accepted, a server that does not speak TLS: the settings (or the
        // server's) must change; a retry would fail the same way.
        ConnError::Tls(what) => setup(what),
        e @ (ConnError::Server(_)
        | ConnError::Protocol(_)
        | ConnError::Oversized(_)
        | ConnError::TimedOut) => Error::backend(BACKEND, e),
    }
}

/// [`map_err`], with an expired deadline as the request's [`Error::Timeout`]. The store
/// enforces the deadline with the connection's own re-armed timer (see `conn::Conn::request`).
fn call_error(req: &Request<'_>, e: ConnError) -> Error {
    match e {
        ConnError::TimedOut => req.timed_out(),
        e => map_err(e),
    }
}

fn unexpected(what: &str, reply: &Reply) -> Error {
    Error::backend(
        BACKEND,
        ConnError::Protocol(format!("{what}: {} {}", reply.code_str(), reply.flags.join(" "))),
    )
}

fn too_long(config: &LockConfig) -> Error {
    tracing::debug!(
        lock = config.name(),
        lock_at_most_for = ?config.lock_at_most_for(),
        max = ?MAX_LOCK_DURATION,
        "lock_at_most_for too long for memcached"
    );
    Error::Unsupported {
        backend: BACKEND,
        operation: "a lock_at_most_for over 30 days less 2 s (MAX_LOCK_DURATION): memcached reads \
                    such a TTL as an absolute time",
    }
}

/// The records on one memcached server: a key per lock, CAS-checked.
struct MemcachedStore {
    pool: Pool,
    prefix: Vec<u8>,
    max_name_len: usize,
}

impl fmt::Debug for MemcachedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemcachedStore")
            .field("address", &self.pool.address())
            .field("key_prefix", &String::from_utf8_lossy(&self.prefix))
            .field("max_name_len", &self.max_name_len)
            .field("max_connections", &self.pool.max())
            .field("tls", &self.pool.tls())
            .finish()
    }
}

impl MemcachedStore {
    /// The wire key of `name` (already checked): base64 of [`key_bytes`].
    fn encode_key(&self, name: &str) -> String {
        base64(&key_bytes(&self.prefix, name))
    }

    fn key(&self, name: &str) -> Result<String> {
        check_lock_name(BACKEND, name, Some(self.max_name_len), false)?;
        Ok(self.encode_key(name))
    }
}

/// The key of `name` under `prefix` (which is empty or ends with [`KEY_DELIMITER`]), before
/// base64: the prefix, then the name with each `:` as [`ESCAPED_DELIMITER`]. So the key holds no
/// `:` after its prefix, and (prefix, name) pairs map to keys one-to-one.
fn key_bytes(prefix: &[u8], name: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + name.len());
    key.extend_from_slice(prefix);
    key.extend(name.bytes().map(|b| if b == KEY_DELIMITER { ESCAPED_DELIMITER } else { b }));
    key
}

/// A held lock: the record's key, value and CAS, and the server process that stored it.
struct Held {
    key: String,
    value: Vec<u8>,
    cas: u64,
    epoch: Epoch,
    /// When the acquire or the last extend was answered: `lock_at_least_for` counts from here
    /// (no earlier than the server stored the record).
    since: Instant,
}

#[async_trait]
impl LeaseStore for MemcachedStore {
    type Held = Held;

    fn capabilities(&self, _: &Settings) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(false)
            .with_server_time(true)
            .with_owner_checked(true)
            .with_granularity(GRANULARITY)
            .with_max_name_len(Some(self.max_name_len))
            .with_check(true)
            // memcached cannot enumerate its keys (no SCAN; `lru_crawler metadump` walks the
            // whole cache and is not a paged listing), so no `list`.
            .with_inspect(true)
            .with_list(false)
            .with_force_release(true)
    }

    fn enforces_deadline(&self) -> bool {
        true
    }

    /// One meta no-op (`mn`, answered `MN`) on a pooled connection: the server is reachable
    /// and speaks the meta protocol (memcached 1.6 or newer).
    async fn check(&self, _: &Settings) -> Result<()> {
        let mut c = self.pool.checkout(None).await.map_err(map_err)?;
        let reply = c.conn().request(b"mn\r\n", None).await.map_err(map_err)?;
        if reply.is("MN") {
            c.done();
            Ok(())
        } else {
            Err(unexpected("check", &reply))
        }
    }

    async fn acquire(&self, req: &Request<'_>) -> Result<Option<Granted<Held>>> {
        let key = self.encode_key(req.name());
        let ttl = at_most_ttl(req.lock_at_most_for()).ok_or_else(|| too_long(req.config()))?;
        let value = format!("{} {}", req.owner().hex(), req.owner().locked_by()).into_bytes();
        let request = meta_set(&key, &value, &format!("T{ttl} ME c"));
        let deadline = req.deadline();
        let err = |e| call_error(req, e);
        let mut c = self.pool.checkout(deadline).await.map_err(err)?;
        let reply = c.conn().request(&request, deadline).await.map_err(err)?;
        let epoch = c.conn().epoch();
        let (cas, epoch) = match (reply.code_str().as_str(), reply.cas(), epoch) {
            ("NS", _, _) => {
                c.done();
                return Ok(None);
            }
            ("HD", Some(cas), Some(epoch)) => {
                c.done();
                (cas, epoch)
            }
            _ => return Err(unexpected("acquire", &reply)),
        };
        Ok(Some(Granted::new(Held { key, value, cas, epoch, since: Instant::now() })))
    }

    async fn release(&self, req: &Request<'_>, held: &mut Held) -> Result<()> {
        let remaining = req.lock_at_least_for().saturating_sub(held.since.elapsed());
        let cas = held.cas;
        let request = if remaining.is_zero() {
            meta_delete(&held.key, &format!("C{cas}"))
        } else {
            meta_set(&held.key, &held.value, &format!("C{cas} T{}", at_least_ttl(remaining)))
        };
        let deadline = req.deadline();
        let err = |e| call_error(req, e);
        let mut c = self.pool.checkout(deadline).await.map_err(err)?;
        if c.conn().epoch() != Some(held.epoch) {
            // Another server process: it lost every record, this lock's included.
            c.done();
            return Ok(());
        }
        let reply = c.conn().request(&request, deadline).await.map_err(err)?;
        // HD: released (or kept for at least); EX: another holder's record; NF: gone.
        if reply.is("HD") || reply.is("EX") || reply.is("NF") {
            c.done();
            Ok(())
        } else {
            Err(unexpected("unlock", &reply))
        }
    }

    async fn extend(&self, req: &Request<'_>, held: &mut Held) -> Result<Extension> {
        let ttl = at_most_ttl(req.lock_at_most_for()).ok_or_else(|| too_long(req.config()))?;
        let request = meta_set(&held.key, &held.value, &format!("C{} T{ttl} c", held.cas));
        let deadline = req.deadline();
        let err = |e| call_error(req, e);
        let mut c = self.pool.checkout(deadline).await.map_err(err)?;
        if c.conn().epoch() != Some(held.epoch) {
            c.done();
            return Ok(Extension::Lost);
        }
        let reply = c.conn().request(&request, deadline).await.map_err(err)?;
        if reply.is("EX") || reply.is("NF") {
            c.done();
            return Ok(Extension::Lost);
        }
        let cas = match (reply.is("HD"), reply.cas()) {
            (true, Some(cas)) => {
                c.done();
                cas
            }
            _ => return Err(unexpected("extend", &reply)),
        };
        held.cas = cas;
        held.since = Instant::now();
        Ok(Extension::Extended)
    }

    /// One meta get (`mg <key> b v t c`): held while the record exists, since memcached expires
    /// it by its own clock.
    async fn inspect(&self, name: &str, settings: &Settings) -> Result<Option<LockInfo>> {
        let key = self.encode_key(name);
        let err = |e| read_error(Operation::Inspect, settings, e);
        let mut c = self.pool.checkout(settings.deadline()).await.map_err(err)?;
        let read = self.read(&mut c, name, &key, settings, Operation::Inspect).await?;
        c.done();
        Ok(read.map(|(info, _)| info))
    }

    /// A meta get, and if the record is still the acquisition seen a meta delete conditioned on
    /// the CAS just read (`md <key> b C<cas>`), on one connection (so on one server process).
    async fn force_release(&self, seen: &LockInfo, settings: &Settings) -> Result<ForceRelease> {
        let key = self.encode_key(&seen.name);
        let op = Operation::ForceRelease;
        let err = |e| read_error(op, settings, e);
        let mut c = self.pool.checkout(settings.deadline()).await.map_err(err)?;
        let Some((current, cas)) = self.read(&mut c, &seen.name, &key, settings, op).await? else {
            c.done();
            return Ok(ForceRelease::Changed(None));
        };
        if current.acquisition != seen.acquisition {
            c.done();
            return Ok(ForceRelease::Changed(Some(current)));
        }
        let reply = c
            .conn()
            .request(&meta_delete(&key, &format!("C{cas}")), settings.deadline())
            .await
            .map_err(err)?;
        if reply.is("HD") {
            c.done();
            return Ok(ForceRelease::Released(current));
        }
        if !(reply.is("EX") || reply.is("NF")) {
            return Err(unexpected("force_release", &reply));
        }
        // Changed between the two requests: what is there now.
        let now = self.read(&mut c, &seen.name, &key, settings, op).await?;
        c.done();
        Ok(ForceRelease::Changed(now.map(|(info, _)| info)))
    }
}

impl MemcachedStore {
    /// `mg <key> b v t c` on `c`: lock `name`'s record (value, remaining TTL) and its CAS, or
    /// `None` (`EN`).
    async fn read(
        &self,
        c: &mut Checkout<'_>,
        name: &str,
        key: &str,
        settings: &Settings,
        operation: Operation,
    ) -> Result<Option<(LockInfo, u64)>> {
        let deadline = settings.deadline();
        let err = |e| read_error(operation, settings, e);
        let reply = c.conn().request(&meta_get(key, "v t c"), deadline).await.map_err(err)?;
        if reply.is("EN") {
            return Ok(None);
        }
        let (Some(value), Some(cas), true) = (reply.value.as_deref(), reply.cas(), reply.is("VA"))
        else {
            return Err(unexpected("inspect", &reply));
        };
        let text = String::from_utf8_lossy(value);
        let (owner, locked_by) = text.split_once(' ').unwrap_or((&text, ""));
        let mut info =
            LockInfo::new(name, owner, true, TimeSource::Server).with_locked_by(locked_by);
        // `t`: the seconds the server still keeps the record (-1: no expiry).
        if let Some(ttl) = reply.flag('t').and_then(|t| t.parse::<u64>().ok())
            && let Some(until) = SystemTime::now().checked_add(Duration::from_secs(ttl))
        {
            info = info.with_lock_until(until);
        }
        Ok(Some((info, cas)))
    }
}

/// [`map_err`], with an expired deadline as `operation`'s [`Error::Timeout`].
fn read_error(operation: Operation, settings: &Settings, e: ConnError) -> Error {
    match (e, settings.timeout()) {
        (ConnError::TimedOut, Some(after)) => operation.timed_out(after),
        (e, _) => map_err(e),
    }
}

/// A [`LockProvider`] on one memcached server. Cheap to clone (clones share connections).
#[derive(Clone, Debug)]
pub struct MemcachedLockProvider {
    inner: StoreProvider<MemcachedStore>,
}

impl MemcachedLockProvider {
    /// Starts a builder for the server at `address`: `host:port`, or `memcache://host:port`.
    pub fn builder(address: impl Into<String>) -> MemcachedLockProviderBuilder {
        MemcachedLockProviderBuilder {
            address: address.into(),
            prefix: DEFAULT_KEY_PREFIX.as_bytes().to_vec(),
            settings: ProviderSettings::new(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            tls: TlsSettings::default(),
        }
    }

    /// The key of lock `name` as sent on the wire: prefix and name (each `:` of the name as
    /// the byte `0xFF`), base64-encoded, for meta commands with the `b` flag (e.g.
    /// `mg <key> b t v` shows the record and its TTL). [`Error::InvalidName`] when the name is
    /// too long.
    pub fn key(&self, name: &str) -> Result<String> {
        self.inner.store().key(name)
    }

    /// The key prefix in use: the configured one, with the `:` the builder appended if it had
    /// none (empty when configured empty).
    pub fn key_prefix(&self) -> &[u8] {
        &self.inner.store().prefix
    }

    /// The longest lock name accepted, in bytes: [`MAX_KEY_LEN`] less the prefix length.
    pub fn max_name_len(&self) -> usize {
        self.inner.store().max_name_len
    }

    /// The server address, `host:port`.
    pub fn address(&self) -> &str {
        self.inner.store().pool.address()
    }

    /// Whether the provider's connections use TLS.
    pub fn uses_tls(&self) -> bool {
        self.inner.store().pool.tls().is_some()
    }

    /// A new [`RawConnection`] to this provider's server, opened as the provider opens its
    /// own (over TLS when it uses TLS) but outside its pool, with no time limit. A TLS failure
    /// is [`Error::Setup`], as for the provider's calls.
    pub async fn raw_connection(&self) -> Result<RawConnection> {
        let pool = &self.inner.store().pool;
        Ok(RawConnection {
            conn: Some(Conn::open(pool.address(), pool.tls()).await.map_err(map_err)?),
        })
    }
}

impl DelegatingProvider for MemcachedLockProvider {
    fn delegate(&self) -> &dyn LockProvider {
        &self.inner
    }
}

/// A bare meta-protocol connection, for tests, benchmarks and operators: it sends the bytes it
/// is given and reads one reply, with none of the provider's logic (no key encoding, no pool,
/// no time limit). Combine it with [`MemcachedLockProvider::key`] to inspect or remove a lock's
/// record (`mg <key> b t v`, `md <key> b`). It reads what the provider reads: values up to
/// [`MAX_VALUE_LEN`] bytes and lines up to [`MAX_LINE_LEN`]. After an error other than an error
/// line from the server the connection is closed, and every later request fails with
/// [`Error::Unavailable`]: open a new one.
pub struct RawConnection {
    /// `None` once an exchange failed and the connection was closed.
    conn: Option<Conn>,
}

impl fmt::Debug for RawConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawConnection").field("conn", &self.conn).finish()
    }
}

/// The reply to one meta command.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RawReply {
    /// The two-letter return code: `HD`, `VA`, `EN`, `NS`, `EX`, `NF`, `MN`.
    pub code: String,
    /// The returned flags, e.g. `c42` (CAS) or `t10` (TTL left).
    pub flags: Vec<String>,
    /// The value, for a `VA` reply.
    pub value: Option<Vec<u8>>,
}

impl RawReply {
    /// The token of flag `f`, e.g. `Some("42")` for `c42` and `f = 'c'`.
    pub fn flag(&self, f: char) -> Option<&str> {
        self.flags.iter().find_map(|t| t.strip_prefix(f))
    }
}

impl RawConnection {
    /// Connects to `address` (`host:port` or `memcache://host:port`), in plaintext. For TLS,
    /// open one with [`MemcachedLockProvider::raw_connection`] on a provider built with the TLS
    /// settings.
    pub async fn connect(address: &str) -> Result<Self> {
        let address = parse_address(address)?;
        Ok(Self { conn: Some(Conn::open(&address, None).await.map_err(map_err)?) })
    }

    /// Sends `request` — a meta command line and, for `ms`, its data block, each ending in
    /// `\r\n` — and reads the reply. An error line (`ERROR`, `CLIENT_ERROR …`,
    /// `SERVER_ERROR …`) is [`Error::Backend`]; a broken connection
    /// [`Error::Unavailable`]; a reply over this client's limits (a value over
    /// [`MAX_VALUE_LEN`], a line over [`MAX_LINE_LEN`]) [`Error::Backend`], read no further.
    /// After any error but an error line the connection is closed.
    pub async fn request(&mut self, request: &[u8]) -> Result<RawReply> {
        let conn = self.conn.as_mut().ok_or_else(|| {
            Error::unavailable(
                BACKEND,
                ConnError::Io(std::io::Error::other(
                    "this connection was closed after an earlier error; open a new one",
                )),
            )
        })?;
        match conn.request(request, None).await {
            Ok(r) => Ok(RawReply { code: r.code_str(), flags: r.flags, value: r.value }),
            Err(e @ ConnError::Server(_)) => Err(map_err(e)),
            Err(e) => {
                // Out of step with the server (or broken): never read from it again.
                self.conn = None;
                Err(map_err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    #[test]
    fn addresses_are_host_and_port() {
        assert_eq!(parse_address("127.0.0.1:11211").unwrap(), "127.0.0.1:11211");
        assert_eq!(parse_address("memcache://127.0.0.1:11311/").unwrap(), "127.0.0.1:11311");
        assert_eq!(parse_address("memcached://cache.local:1").unwrap(), "cache.local:1");
        assert_eq!(parse_address("[::1]:11211").unwrap(), "[::1]:11211");
        for bad in ["", "127.0.0.1", ":11211", "host:0", "host:x", "a b:1", "memcache://"] {
            assert!(matches!(parse_address(bad), Err(Error::Setup { .. })), "{bad:?}");
        }
    }

    #[test]
    fn build_checks_prefix_locked_by_and_connections_without_io() {
        let b = || MemcachedLockProvider::builder("127.0.0.1:1");
        let p = b().build().unwrap();
        assert_eq!(p.max_name_len(), MAX_KEY_LEN - DEFAULT_KEY_PREFIX.len());
        assert_eq!(p.capabilities().max_name_len, Some(177));
        assert_eq!(p.key("a").unwrap(), base64(b"shedlock:a"));
        let p = b().key_prefix("").build().unwrap();
        assert_eq!(p.max_name_len(), MAX_KEY_LEN);
        // The appended ':' counts: 184 bytes and ':' leave one byte of name, 185 none.
        let p = b().key_prefix(vec![b'p'; MAX_KEY_LEN - 2]).build().unwrap();
        assert_eq!(p.max_name_len(), 1);
        assert!(b().key_prefix(vec![b':'; MAX_KEY_LEN - 1]).build().is_ok());
        assert!(matches!(
            b().key_prefix(vec![b'p'; MAX_KEY_LEN - 1]).build(),
            Err(Error::Setup { .. })
        ));
        assert!(matches!(b().locked_by("x".repeat(256)).build(), Err(Error::Setup { .. })));
        assert!(matches!(b().max_connections(0).build(), Err(Error::Setup { .. })));
    }

    #[test]
    fn a_prefix_gets_a_final_colon_unless_it_has_one_or_is_empty() {
        let prefix = |p: &str| {
            MemcachedLockProvider::builder("127.0.0.1:1")
                .key_prefix(p)
                .build()
                .unwrap()
                .key_prefix()
                .to_vec()
        };
        assert_eq!(prefix("app"), b"app:");
        assert_eq!(prefix("app:"), b"app:");
        assert_eq!(prefix("myapp:lock:"), b"myapp:lock:");
        assert_eq!(prefix("a/"), b"a/:");
        assert_eq!(prefix(""), b"");
        assert_eq!(prefix(DEFAULT_KEY_PREFIX), DEFAULT_KEY_PREFIX.as_bytes());
        let p = MemcachedLockProvider::builder("127.0.0.1:1").key_prefix("app").build().unwrap();
        assert_eq!(p.max_name_len(), MAX_KEY_LEN - 4);
        assert_eq!(p.key("x").unwrap(), base64(b"app:x"));
    }

    #[test]
    fn key_bytes_escape_colons_so_different_prefixes_never_share_a_key() {
        // Names without ':' keep the keys they always had.
        assert_eq!(key_bytes(b"shedlock:", "nightly-report"), b"shedlock:nightly-report");
        assert_eq!(key_bytes(b"", "a b"), b"a b");
        // A ':' of a name is 0xFF, one byte for one byte.
        assert_eq!(key_bytes(b"app:", "a:b"), b"app:a\xffb");
        assert_eq!(key_bytes(b"app:", "ü:").len(), 4 + "ü:".len());
        // The tenants of the issue: `app` + `2x` and `app2` + `x`, and nested ones.
        let prefixes: [&[u8]; 5] = [b"", b"app:", b"app2:", b"app:2:", b"app:2x:"];
        let names = ["x", "2x", "2:x", "2x:", ":", "", "2", "app:2:x", "\u{ff}"];
        let mut seen = std::collections::HashMap::new();
        for p in prefixes {
            for n in names {
                let key = key_bytes(p, n);
                // No ':' after the prefix.
                assert!(!key[p.len()..].contains(&KEY_DELIMITER), "{p:?} {n:?}");
                if let Some(other) = seen.insert(key, (p, n)) {
                    panic!("{p:?} + {n:?} shares a key with {other:?}");
                }
            }
        }
    }

    #[test]
    fn capabilities_are_the_documented_ones() {
        let c = MemcachedLockProvider::builder("127.0.0.1:1").build().unwrap().capabilities();
        assert!(c.extend && c.server_time && c.owner_checked && !c.fencing);
        assert_eq!(c.granularity, Duration::from_secs(2));
    }
}

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

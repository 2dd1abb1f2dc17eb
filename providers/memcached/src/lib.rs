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

mod builder;
mod conn;
mod error;
mod inspect;
mod keys;
mod proto;
mod provider;
mod raw;
mod store;
mod tls;

use std::time::Duration;

pub use crate::{
    builder::MemcachedLockProviderBuilder,
    provider::MemcachedLockProvider,
    raw::{RawConnection, RawReply},
};

pub use crate::proto::{MAX_KEY_LEN, MAX_LINE_LEN, MAX_LOCK_DURATION, MAX_VALUE_LEN};
/// The builder setters every provider shares (`operation_timeout`, `locked_by`).
pub use shedlock::ProviderBuilder;
/// The default time limit of each operation, connecting included: 10 s, as for every provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT;

// Named only in doc links.
#[cfg(doc)]
use shedlock::{Capabilities, Error};

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

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

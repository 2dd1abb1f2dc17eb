//! NATS JetStream lock provider for [`shedlock`], on the caller's [`async_nats::Client`].
//!
//! Locks live in a key-value bucket (the JetStream stream `KV_<bucket>`, subjects
//! `$KV.<bucket>.>`): one message per held lock, on the subject of the lock's key.
//!
//! - **Acquire is one round trip** whenever the key is free: a publish to the key's subject with
//!   `Nats-Expected-Last-Subject-Sequence: 0` (only an empty subject accepts it; a second writer
//!   gets error 10071) and `Nats-TTL: <lock_at_most_for>` (the server removes the message when it
//!   expires). Unlock purges the message, so a fresh key, a released one and an expired one are
//!   all an empty subject. A key held elsewhere costs one more round trip the first time this
//!   instance meets that holder (a direct get tells a live lock from a tombstone an operator left
//!   with `nats kv del`; taking the key over a tombstone is one more publish).
//! - **Server time**: expiry is judged by the NATS server's per-message TTL (nats-server 2.11 or
//!   newer, stream option `allow_msg_ttl`), so client clock skew cannot break exclusion.
//!   [`TimeSource::Client`] keeps `lock_until` in the message instead, judged by each instance's
//!   own [`Clock`](shedlock::Clock), for servers or buckets without per-message TTL.
//! - **Owner-checked** unlock and extend by sequence: unlock purges the subject only up to this
//!   acquisition's message (`STREAM.PURGE` with `filter` and `seq`), extend republishes with
//!   `Nats-Expected-Last-Subject-Sequence` = this holder's last sequence. A stale holder changes
//!   nothing.
//! - **Fencing tokens**: the stream sequence of the acquiring message, strictly increasing per
//!   name (stream sequences never repeat while the stream exists; see the README for restarts).
//!
//!
//! **Production posture.** TLS and credentials are async-nats's
//! [`ConnectOptions`](async_nats::ConnectOptions) (a CA file with `add_root_certificates`, a CA as
//! PEM text with [`tls::client_config`], user and password, token);
//! [`NatsLockProvider::connect`] connects with them, reports refused credentials and failed TLS
//! handshakes as [`Error::Setup`] (never quoting a secret) and installs a [`PermissionWatch`], so
//! that a request the server refuses for a missing subject permission fails at once with
//! [`Error::Setup`] naming it. The README's "Permissions" section lists every subject each call
//! publishes to and the nats-server `permissions` blocks for locking, inspection,
//! `force_release` and set-up.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_nats::NatsLockProvider;
//!
//! let client = async_nats::connect("nats://127.0.0.1:4222").await?;
//! let provider = NatsLockProvider::builder(client).bucket("shedlock").build()?;
//! provider.create_bucket().await?; // or create it with provider.bucket_config()
//!
//! let cfg = LockConfig::new("nightly-report", Duration::from_secs(600), Duration::from_secs(30))?;
//! if let Some(lock) = provider.try_lock(&cfg).await? {
//!     // ... run the task ...
//!     lock.unlock().await?;
//! }
//! # Ok(()) }
//! ```

mod acquire;
mod bucket;
mod builder;
mod connect;
mod error;
mod handle;
mod inner;
mod inspect;
mod jetstream;
mod keys;
mod list;
mod parse;
mod permissions;
mod provider;
mod request;
pub mod tls;

pub use permissions::PermissionWatch;
pub use shedlock::TimeSource;

pub use crate::{builder::NatsLockProviderBuilder, keys::key_for, provider::NatsLockProvider};

// Named only in doc links.
#[cfg(doc)]
use shedlock::Error;

const BACKEND: &str = "nats";

/// The longest lock name, in bytes. An escaped name is at most three times as long (see
/// [key mapping](crate#key-mapping)), which keeps the subject of the longest name, with a
/// 64-byte bucket name, well inside nats-server's default 4 KiB protocol control line.
pub const MAX_NAME_LEN: usize = 1024;

/// The longest bucket name accepted, in bytes.
pub const MAX_BUCKET_LEN: usize = 64;

/// The default time limit of each lock operation: 10 s, as for every provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT;
/// The builder setters every provider shares (`operation_timeout`, `locked_by`, `clock`).
pub use shedlock::{ClockBuilder, ProviderBuilder};

/// The default bucket name.
pub const DEFAULT_BUCKET: &str = "shedlock";

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

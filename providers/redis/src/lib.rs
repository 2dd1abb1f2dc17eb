//! Redis lock provider for [`shedlock`], on the caller's own `redis` connection: a
//! [`ConnectionManager`](redis::aio::ConnectionManager) (recommended: it reconnects), a
//! [`MultiplexedConnection`](redis::aio::MultiplexedConnection), or a Redis Cluster connection
//! (feature `cluster`, on by default). Works unchanged on Redis ≥ 6.2, Valkey and Redis Cluster.
//!
//! - **One round trip per acquire**: one Lua script (`EVALSHA`) checks the key, reads the server
//!   clock (`TIME`), issues the fencing token and sets the key with a relative expiry (`PX`).
//! - **Server time**: the key expires by the server's own clock, relative to when the server ran
//!   the script, so client clock skew cannot break exclusion. `lock_at_least_for` is counted from
//!   the server time stored at acquisition (or at the last extension).
//! - **Owner-checked** unlock and extend: compare-and-`DEL` / compare-and-`PEXPIRE` in Lua
//!   against a value unique to the acquisition, so a stale holder changes nothing.
//! - **Fencing tokens**: `max(previous + 1, server time in µs)`, kept under a second key in the
//!   same hash slot, so tokens keep increasing across unlocks, expiries, deletion of the lock key
//!   and — through the clock term — restarts that lost the data.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_redis::RedisLockProvider;
//!
//! let client = redis::Client::open("redis://127.0.0.1:6379")?;
//! let conn = redis::aio::ConnectionManager::new(client).await?;
//! let provider = RedisLockProvider::builder(conn).environment("prod").build().await?;
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
//! A lock named `N` lives under `<prefix>[<environment>:]{N'}`, where `N'` is `N` with `%`, `{`
//! and `}` percent-encoded (`%25`, `%7B`, `%7D`), so every name maps to its own key and the braces
//! are always the key's hash tag. Its fencing counter is the same key plus `:fence`: both share a
//! hash slot, which is what lets one script touch both on Redis Cluster. The default prefix is
//! `shedlock:`. The value is `<acquisition id>|<locked_by>|<token>|<server µs>`.
//!
//! # Permissions
//!
//! The README's "Permissions" lists every command the provider sends and the exact ACL rules
//! (`ACL SETUSER … ~<prefix>* -@all +evalsha …`) for locking, `list`, `wait_for_replicas` and
//! Redis Cluster. A denied command or key, or a refused login, is an [`Error::Setup`] naming
//! what to grant.
//!
//! # Redis Cluster and replication
//!
//! Writes are acknowledged by the master before they reach its replicas. If a master fails
//! after granting a lock and before replicating it, the promoted replica does not know the lock
//! and may grant it again: a lock can be lost on fail-over (see the README for what was measured).
//! Fencing tokens are not safe across such a fail-over either, unless `WAIT` is used; the clock
//! term keeps them increasing as long as the new master's clock is not behind.

mod acquire;
mod builder;
mod cluster;
mod compat;
mod connection;
mod error;
mod inspect;
mod keys;
mod provider;
mod scripts;
mod store;

pub use crate::{
    builder::RedisLockProviderBuilder, connection::RedisConnection, provider::RedisLockProvider,
};

// Named only in doc links.
#[cfg(doc)]
use shedlock::Error;

const BACKEND: &str = "redis";

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "shedlock:";

/// The builder setters every provider shares (`operation_timeout`, `locked_by`).
pub use shedlock::ProviderBuilder;
/// The default time limit of one operation (acquire, unlock, extend): 10 s, as for every
/// provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT;

/// The largest lock name accepted, in bytes (names are keys; Redis allows far more, but a name
/// this long is a bug, not a job).
pub const MAX_NAME_LEN: usize = 4096;

/// ShedLock's default key prefix (`job-lock:<environment>:<name>`).
pub const SHEDLOCK_PREFIX: &str = "job-lock";

/// ShedLock's default environment.
pub const SHEDLOCK_ENVIRONMENT: &str = "default";

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

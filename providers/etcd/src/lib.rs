//! etcd lock provider for [`shedlock`], on an etcd-client [`Client`] (etcd v3 API; tested
//! against etcd 3.4: one node, a 3-node cluster, and a node serving only `https://` with
//! authentication enabled).
//!
//! A held lock is one key, `<prefix>/<name>` (the name with `%` and `/` escaped, so no two
//! prefixes share a key; see [`EtcdLockProviderBuilder::key_prefix`]), attached to an etcd
//! **lease** whose TTL is `lock_at_most_for` rounded up to whole seconds. The etcd leader deletes
//! the key when the lease expires, judged by its own clock: no client clock is read.
//!
//! - **Acquire**: a transaction `version(key) = 0 → put(key, locked_by, lease)`. The lease is a
//!   fresh grant (2 round trips), or, by default, a lease this instance granted earlier for the
//!   same TTL and no longer uses (a lock it released, an attempt that found the name held): then
//!   the transaction and a keep-alive of that lease are sent together, so the acquire costs **one
//!   round trip** and the key lives for the full TTL from the keep-alive (see
//!   [`EtcdLockProviderBuilder::reuse_leases`]).
//! - **Owner-checked** unlock and extend: every write compares the key's `create_revision` (this
//!   acquisition's revision) and its lease, so a stale holder changes nothing.
//! - **Unlock** deletes the key (owner-checked) and keeps the lease for the next acquire; inside
//!   `lock_at_least_for` it re-puts the key under a short lease of the remaining time instead.
//! - **Extend**: a keep-alive of the lock's lease beside an owner-checking read (one round trip)
//!   when `lock_at_most_for` keeps its TTL; else the key moves to a freshly granted lease.
//! - **Fencing tokens**: the revision of the acquiring put (the key's `create_revision`): etcd
//!   revisions only grow, across deletes, restarts, compaction and leader changes.
//!
//! **Production posture.** [`EtcdClientBuilder`] makes the client: `https://` endpoints with the
//! **`tls`** feature (rustls on ring; `tls_ca_pem`, client
//! certificates, the name to verify), a user whose password is refused over plaintext unless
//! allowed, an auth token renewed when it lapses. The user's role needs `readwrite` on the prefix
//! (`read` for `inspect` and `list` alone); a missing permission, a refused login or a
//! certificate not accepted is [`Error::Setup`] saying what to change. The README's "TLS and
//! logins" and "Permissions" give the details and the `etcdctl` commands.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_etcd::{EtcdClientBuilder, EtcdLockProvider};
//!
//! let client = EtcdClientBuilder::new(["http://127.0.0.1:2379"]).connect().await?;
//! let provider = EtcdLockProvider::builder(client).key_prefix("shedlock/").build()?;
//!
//! let cfg = LockConfig::new("nightly-report", Duration::from_secs(600), Duration::from_secs(30))?;
//! if let Some(lock) = provider.try_lock(&cfg).await? {
//!     // ... run the task ...
//!     lock.unlock().await?;
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod acquire;
mod builder;
mod connect;
mod error;
mod handle;
mod inspect;
mod keeper;
mod keys;
mod lease;
mod provider;
#[cfg(feature = "tls")]
mod tls;
mod watch;

pub use builder::{DEFAULT_PREFIX, EtcdLockProviderBuilder};
pub use connect::EtcdClientBuilder;
pub use keys::{MAX_NAME_LEN, MAX_PREFIX_LEN};
pub use provider::EtcdLockProvider;

#[cfg(doc)]
use etcd_client::Client;
#[cfg(doc)]
use shedlock::Error;

const BACKEND: &str = "etcd";

/// The builder setters every provider shares (`operation_timeout`, `locked_by`).
pub use shedlock::ProviderBuilder;

/// The default time limit of one operation (acquire, unlock, extend): 10 s, as for every
/// provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

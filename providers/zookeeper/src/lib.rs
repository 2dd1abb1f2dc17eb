//! ZooKeeper lock provider for [`shedlock`], on [`zookeeper_client`] (with its `tokio` runtime).
//!
//! Each lock name `N` owns two znodes under the provider's root (default `/shedlock`):
//!
//! - the **name node** `<root>/<key_for(N)>`, persistent and empty. Every acquisition bumps its
//!   data version in the same transaction that creates the lock node, so the version it returns
//!   identifies that acquisition: it is the owner check of unlock and extend (the lock node's
//!   own version restarts at 0 each time it is recreated, so it alone could not tell a stale
//!   holder from a new one).
//! - the **lock node** `<root>/<key_for(N)>/lock`, **ephemeral**: it holds `hold_ms` and
//!   `locked_by`. It vanishes with its holder's session, so a holder whose process or session
//!   dies frees the name at once.
//!
//! Expiry is judged by **server time**: the lock node's `mtime`, stamped by the ZooKeeper leader
//! when it created (or last extended) the node, plus `hold_ms`. ZooKeeper has no "now" to read,
//! so a contender that finds the name held writes the provider's clock node `<root>/.clock` (its
//! new `mtime` is the leader's now) pipelined with a consistent multi-read of the name and lock
//! nodes, and takes over an expired lock in one transaction that checks the name node's version
//! (so nobody acquired in between) and the lock node's version (so the holder did not extend).
//! No client clock is read.
//!
//! - **Acquire**: one transaction (`setData` on the name node + `create` of the ephemeral lock
//!   node), one round trip on a free name. A held name costs one more (the pipelined clock write
//!   and read), an expired one a third (the takeover transaction).
//! - **Fencing token**: the zxid of the acquiring transaction (the lock node's `czxid`), strictly
//!   increasing across the whole ensemble and its restarts.
//! - **Unlock / extend**: one transaction each, owner-checked by the name node's version.
//!
//! **Authentication and ACLs.** [`digest_auth`](ZooKeeperLockProviderBuilder::digest_auth) (or
//! [`auth`](ZooKeeperLockProviderBuilder::auth) for another scheme) authenticates every session
//! the provider opens; the nodes it creates (root, name nodes, clock node, lock nodes) then get
//! [`NodeAcl::CreatorAll`] (`auth::cdrwa`) by default, so that only that identity can read,
//! take, release or change them, and every instance of the application must authenticate as the
//! same identity. Without credentials they are [`NodeAcl::Open`] (`world:anyone:cdrwa`): open to
//! anyone who reaches the ensemble. [`node_acl`](ZooKeeperLockProviderBuilder::node_acl) chooses
//! another ACL. A request the server refuses for want of a right (`NoAuth`), rejected credentials
//! (`AuthFailed`) and a refused ACL (`InvalidAcl`) are [`Error::Setup`] naming what is missing.
//! Credentials are never printed. See the README's "Authentication" and "Permissions" sections,
//! which also say how to close an existing open tree.
//!
//! **TLS** (cargo feature `tls`). [`tls_ca_pem`](ZooKeeperLockProviderBuilder::tls_ca_pem)
//! makes every connection of the provider, reconnections included, TLS verified against exactly
//! that CA (rustls on ring; [`tls_identity_pem`](ZooKeeperLockProviderBuilder::tls_identity_pem)
//! adds a client certificate, [`tls_server_name`](ZooKeeperLockProviderBuilder::tls_server_name)
//! the name to verify). The client reaches the servers through a loopback forwarder of the
//! provider that accepts only this process's connections: see the README's "TLS" section for why
//! and how. An untrusted or misnamed certificate is [`Error::Setup`]; asking for TLS without the
//! feature is [`Error::Setup`] from `build()`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_zookeeper::ZooKeeperLockProvider;
//!
//! let provider = ZooKeeperLockProvider::builder("127.0.0.1:2181").root("/shedlock").build()?;
//! let cfg = LockConfig::new("nightly-report", Duration::from_secs(600), Duration::from_secs(30))?;
//! if let Some(lock) = provider.try_lock(&cfg).await? {
//!     // ... run the task ...
//!     lock.unlock().await?;
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod acquire;
mod auth;
mod builder;
mod error;
mod handle;
mod inspect;
mod keys;
mod provider;
mod record;
mod session;
mod snapshot;
mod tls;
mod watch;

pub use auth::{AclEntry, NodeAcl};
pub use builder::{DEFAULT_ROOT, DEFAULT_SESSION_TIMEOUT, ZooKeeperLockProviderBuilder};
pub use keys::{MAX_NAME_LEN, key_for};
pub use provider::ZooKeeperLockProvider;

#[cfg(doc)]
use shedlock::Error;

const BACKEND: &str = "zookeeper";

/// The builder setters every provider shares (`operation_timeout`, `locked_by`).
pub use shedlock::ProviderBuilder;

/// The default time limit of each lock operation: 10 s, as for every provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT;

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

//! MongoDB lock provider for [`shedlock`], on the caller's [`mongodb::Database`] (driver 3).
//!
//! One document per lock name in a collection (default `shedLock`, ShedLock's name):
//! `{_id: <name>, lockUntil: Date, lockedAt: Date, lockedBy: String, owner: Int64, token: Int64}`.
//!
//! - **Acquire is one request**: `findAndModify` with `upsert`, returning the stored `owner` and
//!   `token`. In server time the filter is `{_id: name}` and the update pipeline itself gives
//!   the document to this acquisition's fresh `owner` id only where `lockUntil <= $$NOW` (or the
//!   document is new), leaving a live lock untouched. In client time the filter is
//!   `{_id: name, lockUntil: {$lte: now}}`: a held name makes the upsert collide with the
//!   existing `_id` (duplicate key error 11000, "held elsewhere").
//! - **Server time** ([`TimeSource::Server`], the default): `now` is the server's `$$NOW`, and
//!   `lockUntil` is computed on the server by an update pipeline, so client clock skew cannot
//!   break exclusion. Needs MongoDB 4.2 or newer. [`TimeSource::Client`] computes `lockUntil`
//!   from each instance's [`Clock`](shedlock::Clock) instead, as ShedLock does by default.
//! - **Owner-checked** unlock and extend: each filters on this acquisition's `owner` id, so a
//!   stale holder changes nothing. Unlock deletes the document once `lock_at_least_for` has
//!   passed (before, it moves `lockUntil` back to `lockedAt + lock_at_least_for`); extend only
//!   moves a lock that is still live by the clock that judges expiry.
//! - **Fencing tokens** in the same update: `token = max(token + 1, server time in µs)`, so they
//!   increase per name even across a deleted document.
//! - **Write concern** `majority` by default ([`MongoLockProviderBuilder::write_concern`]).
//! - **Inspection**: `inspect` and `list` are one `aggregate` each, which reads the server's
//!   clock with the documents (`list` pages by `_id`, the prefix a range of values, never a
//!   regular expression); `force_release` is one `delete_one` filtered on the acquisition seen.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_mongodb::MongoLockProvider;
//!
//! let client = mongodb::Client::with_uri_str("mongodb://127.0.0.1:27017").await?;
//! let provider = MongoLockProvider::builder(client.database("app")).build()?;
//!
//! let cfg = LockConfig::new("nightly-report", Duration::from_secs(600), Duration::from_secs(30))?;
//! if let Some(lock) = provider.try_lock(&cfg).await? {
//!     // ... run the task ...
//!     lock.unlock().await?;
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod batch;
mod builder;
mod collection;
mod compat;
mod documents;
mod error;
mod inspect;
mod provider;
mod record;
mod refusal;
mod store;

pub use builder::MongoLockProviderBuilder;
pub use collection::{DEFAULT_COLLECTION, MAX_NAMESPACE_LEN};
pub use provider::MongoLockProvider;

pub use shedlock::TimeSource;

const BACKEND: &str = "mongodb";

/// The longest lock name, in bytes (the document's `_id`).
pub const MAX_NAME_LEN: usize = 1024;

/// The default time limit of each lock operation: 10 s, as for every provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT;
/// The builder setters every provider shares (`operation_timeout`, `locked_by`, `clock`).
pub use shedlock::{ClockBuilder, ProviderBuilder};

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

//! Amazon S3 lock provider for [`shedlock`], on the caller's [`aws_sdk_s3::Client`] (or an
//! [`SdkConfig`](aws_types::SdkConfig)), with S3's conditional writes.
//!
//! One object per lock name, `<prefix><key_for(name)>`, whose small JSON body holds the lease
//! (`lock_until_ms`, client time), the owner (a random acquisition id) and the fencing token.
//! A non-empty prefix ends with `/` (or `.`), characters [`key_for`] never produces, so
//! providers with different prefixes never share an object (see
//! [`prefix`](S3LockProviderBuilder::prefix)).
//!
//!
//! - **Create**: `PutObject` with `If-None-Match: *` — only a missing object accepts it.
//! - **Take over** (the lease ended, or the lock was released), **extend** and **unlock**:
//!   `PutObject` with `If-Match: <ETag>` — only the object as it was read (or as this holder
//!   last wrote it) accepts it. Every body carries a fresh acquisition id, so every write has a
//!   new ETag, and a stale holder's `If-Match` fails (`412 Precondition Failed`): unlock and
//!   extend are owner-checked.
//! - **Client time**: S3 conditions cannot read a server clock, so the lease is milliseconds
//!   since the Unix epoch from the instance's [`Clock`](shedlock::Clock).
//! - **Fencing tokens**: the body's `fencing_token` + 1 on every takeover, seeded from the clock
//!   (in microseconds) when the object is created.
//! - **Inspection**: `inspect` is one `GetObject`; `list` is one `ListObjectsV2` under the
//!   escaped prefix and one `GetObject` per object of the page; `force_release` is one
//!   `DeleteObject` with `If-Match` on the ETag of the acquisition seen.
//!
//! ```no_run
//! # async fn demo(client: aws_sdk_s3::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_s3::S3LockProvider;
//!
//! let provider = S3LockProvider::builder(client, "my-locks-bucket").build()?;
//! let cfg = LockConfig::new("nightly-report", Duration::from_secs(600), Duration::from_secs(30))?;
//! if let Some(lock) = provider.try_lock(&cfg).await? {
//!     // ... run the task ...
//!     lock.unlock().await?;
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod bucket;
mod builder;
mod error;
mod inspect;
mod keys;
mod object;
mod provider;
mod refusal;
mod seen;
mod store;

pub use builder::S3LockProviderBuilder;
pub use error::S3Error;
pub use keys::{DEFAULT_PREFIX, MAX_PREFIX_LEN, key_for, name_for};
pub use provider::S3LockProvider;

const BACKEND: &str = "s3";

/// The longest lock name, in bytes. An escaped name is at most three times as long
/// ([`key_for`]), which with the longest prefix stays inside S3's 1 024-byte key limit.
pub const MAX_NAME_LEN: usize = 256;

/// The default time limit of each lock operation: 10 s, as for every provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT;
/// The builder setters every provider shares (`operation_timeout`, `locked_by`, `clock`).
pub use shedlock::{ClockBuilder, ProviderBuilder};

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

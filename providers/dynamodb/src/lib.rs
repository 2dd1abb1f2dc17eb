//! Amazon DynamoDB lock provider for [`shedlock`], on the caller's [`aws_sdk_dynamodb::Client`]
//! (or an [`SdkConfig`](aws_types::SdkConfig)).
//!
//! One item per lock name in a table whose partition key is `_id` (a string):
//!
//! - **Acquire is one request**: a conditional `UpdateItem` that creates the item when it is
//!   missing and takes it over when its lease has passed
//!   (`attribute_not_exists(lockUntil) OR lockUntil <= :now`). A held lock fails the condition
//!   (`ConditionalCheckFailedException`): `Ok(None)`.
//! - **Client time**: DynamoDB has no server clock in condition expressions, so `lockUntil` and
//!   `lockedAt` are numbers, milliseconds since the Unix epoch, from the instance's
//!   [`Clock`](shedlock::Clock). Exclusion holds while the clocks of the instances differ by less
//!   than the margin the README documents (measured by the conformance kit). Expiry never rests
//!   on DynamoDB's TTL feature (which deletes items up to days late).
//! - **Owner-checked** unlock and extend: both are conditioned on this acquisition's random
//!   `acquisitionId`, so a stale holder changes nothing.
//! - **Fencing tokens**: `fencingToken` is incremented in the acquiring update itself, and
//!   seeded from the clock (in microseconds) when the item is created, so tokens keep rising when
//!   an operator deletes an item (see the README for the bound).
//! - **Inspection**: `inspect` is one strongly consistent `GetItem`, `list` pages through
//!   `Scan`s filtered by `begins_with(_id, :prefix)`, and `force_release` is one `DeleteItem`
//!   conditioned on the acquisition seen.
//!
//! ```no_run
//! # async fn demo(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_dynamodb::DynamoDbLockProvider;
//!
//! // client = aws_sdk_dynamodb::Client::new(&aws_config::load_from_env().await);
//! let provider = DynamoDbLockProvider::builder(client).table("shedlock").build()?;
//! provider.create_table().await?; // once, or create it yourself (see the README)
//!
//! let cfg = LockConfig::new("nightly-report", Duration::from_secs(600), Duration::from_secs(30))?;
//! if let Some(lock) = provider.try_lock(&cfg).await? {
//!     // ... run the task ...
//!     lock.unlock().await?;
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod builder;
mod compat;
mod conditions;
mod error;
mod inspect;
mod item;
mod provider;
mod refusal;
mod store;
mod table;

pub use builder::{DEFAULT_TABLE, DynamoDbLockProviderBuilder};
pub use conditions::CHECK_NAME;
pub use error::DynamoDbError;
pub use item::{
    ATTR_ACQUISITION_ID, ATTR_FENCING_TOKEN, ATTR_ID, ATTR_LOCK_UNTIL, ATTR_LOCKED_AT,
    ATTR_LOCKED_BY,
};
pub use provider::DynamoDbLockProvider;
pub use table::CREATE_TABLE_TIMEOUT;

const BACKEND: &str = "dynamodb";

/// The longest lock name, in bytes: DynamoDB's limit for a partition key value.
pub const MAX_NAME_LEN: usize = 2048;

/// The default time limit of each lock operation: 10 s, as for every provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT;
/// The builder setters every provider shares (`operation_timeout`, `locked_by`, `clock`).
pub use shedlock::{ClockBuilder, ProviderBuilder};

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

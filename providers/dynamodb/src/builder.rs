//! [`DynamoDbLockProviderBuilder`]: the table, the ShedLock-compatible mode and the shared
//! settings, validated by `build`.

use std::fmt;

use aws_sdk_dynamodb::{Client, types::AttributeValue};
use shedlock::{
    Result, TimeSource,
    store::{ProviderSettings, StoreProvider},
};

use crate::{BACKEND, ClockBuilder, DynamoDbLockProvider, ProviderBuilder, store::DynamoStore};
use shedlock::Error;

/// The default table name.
pub const DEFAULT_TABLE: &str = "shedlock";

/// Builds a [`DynamoDbLockProvider`].
///
/// The shared setters (`operation_timeout`, `locked_by`, `clock`) come from [`ProviderBuilder`]
/// (and [`ClockBuilder`]), in scope with `use shedlock_dynamodb::ProviderBuilder;`. Here the time
/// limit includes the SDK's retries (`None`: the SDK's own timeouts only); the clock computes
/// `lockUntil` (client time is this provider's only mode); `locked_by` is stored as `lockedBy`.
#[must_use]
pub struct DynamoDbLockProviderBuilder {
    pub(crate) client: Client,
    pub(crate) table: String,
    pub(crate) settings: ProviderSettings,
}

impl fmt::Debug for DynamoDbLockProviderBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client is left out on purpose: its configuration holds the credentials provider.
        f.debug_struct("DynamoDbLockProviderBuilder")
            .field("table", &self.table)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ProviderBuilder for DynamoDbLockProviderBuilder {
    fn settings_mut(&mut self) -> &mut ProviderSettings {
        &mut self.settings
    }
}

impl ClockBuilder for DynamoDbLockProviderBuilder {}

impl DynamoDbLockProviderBuilder {
    /// The table (default `shedlock`): 3 to 255 ASCII letters, digits, `_`, `-` or `.`, with the
    /// string partition key `_id`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// ShedLock-compatible mode: exactly the items of ShedLock's `DynamoDBLockProvider` (SDK v2):
    /// partition key `_id`, and `lockUntil`, `lockedAt`, `lockedBy` as strings, the times in
    /// ShedLock's ISO form (`2018-12-07T12:30:37.810Z`, compared as strings as ShedLock compares
    /// them), so that this provider and Java ShedLock nodes lock the same jobs in the same
    /// table. See the README's "Joining a ShedLock fleet".
    ///
    /// - Each acquisition writes `lockedBy` = the configured value, ` #` and its own 16 hex
    ///   digits (so `locked_by` may be at most 237 bytes); unlock and extend are conditioned on
    ///   it. No `acquisitionId` or `fencingToken`: no fencing.
    /// - Client time, as in the native mode and in ShedLock.
    /// - A released lock has no `lockUntil` (ShedLock's acquire condition accepts that).
    pub fn shedlock_compatible(mut self) -> Self {
        self.settings.set_shedlock_compatible(true);
        self
    }

    /// Validates the configuration and builds the provider. An invalid table name or
    /// `locked_by` gives [`Error::Setup`](shedlock::Error::Setup). Does no I/O: a missing table is
    /// reported by the first lock call (or checked up front with
    /// [`DynamoDbLockProvider::check_table`]).
    pub fn build(self) -> Result<DynamoDbLockProvider> {
        let t = &self.table;
        let valid = (3..=255).contains(&t.len())
            && t.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !valid {
            return Err(Error::setup(
                BACKEND,
                format!(
                    "table name {t:?} is invalid: DynamoDB table names are 3 to 255 ASCII letters, \
                 digits, '_', '-' or '.'"
                ),
            ));
        }
        // DynamoDB conditions cannot read a server clock: lockUntil is always client time.
        let mut settings = self.settings;
        let settings = settings.set_time_source(TimeSource::Client).clone().validate(BACKEND)?;
        let store = DynamoStore {
            client: self.client,
            table: self.table,
            locked_by: AttributeValue::S(settings.locked_by().to_owned()),
            compat: settings.is_shedlock_compatible(),
        };
        Ok(DynamoDbLockProvider { inner: StoreProvider::new(store, settings) })
    }
}

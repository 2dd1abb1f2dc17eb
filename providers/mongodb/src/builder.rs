//! [`MongoLockProviderBuilder`]: the collection, the write concern, the time source, the
//! ShedLock-compatible mode and the shared settings, validated by `build`.

use std::fmt;

use mongodb::{
    Database,
    bson::Document,
    options::{Acknowledgment, WriteConcern},
};
use shedlock::{
    Result,
    store::{ProviderSettings, StoreProvider},
};

use crate::{
    BACKEND, ClockBuilder, MongoLockProvider, ProviderBuilder, TimeSource,
    collection::check_collection_name, store::MongoStore,
};
use shedlock::Error;

/// Builds a [`MongoLockProvider`].
///
/// The shared setters (`operation_timeout`, `locked_by`, `clock`) come from [`ProviderBuilder`]
/// (and [`ClockBuilder`]), in scope with `use shedlock_mongodb::ProviderBuilder;`. Here with the
/// time limit `None` only the driver's own limits apply (e.g. 30 s of server selection); the clock
/// is read only with [`TimeSource::Client`]; `locked_by` is stored as `lockedBy`.
#[must_use]
pub struct MongoLockProviderBuilder {
    pub(crate) database: Database,
    pub(crate) collection: String,
    pub(crate) write_concern: WriteConcern,
    pub(crate) settings: ProviderSettings,
}

impl fmt::Debug for MongoLockProviderBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The database handle is left out on purpose: its client options may carry
        // credentials.
        f.debug_struct("MongoLockProviderBuilder")
            .field("database", &self.database.name())
            .field("collection", &self.collection)
            .field("write_concern", &self.write_concern)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ProviderBuilder for MongoLockProviderBuilder {
    fn settings_mut(&mut self) -> &mut ProviderSettings {
        &mut self.settings
    }
}

impl ClockBuilder for MongoLockProviderBuilder {}

impl MongoLockProviderBuilder {
    /// The collection holding the locks (default [`DEFAULT_COLLECTION`], `shedLock`). MongoDB
    /// creates it on the first lock; see [`MongoLockProvider::create_collection`].
    ///
    /// [`DEFAULT_COLLECTION`]: crate::DEFAULT_COLLECTION
    pub fn collection(mut self, name: impl Into<String>) -> Self {
        self.collection = name.into();
        self
    }

    /// The write concern of every lock write (default `majority`: a lock survives the failover
    /// of a replica set's primary once acquired). `w: 0` (unacknowledged) is refused by
    /// [`build`](Self::build): a lock needs the server's answer.
    pub fn write_concern(mut self, write_concern: WriteConcern) -> Self {
        self.write_concern = write_concern;
        self
    }

    /// Whose clock judges expiry (default [`TimeSource::Server`]: the server's `$$NOW`, MongoDB
    /// 4.2 or newer). [`TimeSource::Client`] computes `lockUntil` from this instance's
    /// [`clock`](Self::clock): unsafe beyond the clock skew between nodes.
    pub fn time_source(mut self, source: TimeSource) -> Self {
        self.settings.set_time_source(source);
        self
    }

    /// ShedLock-compatible mode: exactly the documents of ShedLock's `MongoLockProvider` (`_id`,
    /// `lockUntil`, `lockedAt`, `lockedBy`; no `owner` or `token`), so that this provider and
    /// Java ShedLock nodes lock the same jobs in the same collection. See the README's "Joining
    /// a ShedLock fleet".
    ///
    /// - Each acquisition writes `lockedBy` = the configured value, ` #` and its own 16 hex
    ///   digits (so `locked_by` may be at most 237 bytes); the acquire knows it won by that
    ///   value, and unlock and extend match it.
    /// - No fencing: [`Lock::fencing_token`](shedlock::Lock::fencing_token) is `None`.
    /// - The time source is unchanged: server time (`$$NOW`) by default, where ShedLock judges
    ///   by each JVM's clock, which must then agree with the server's.
    pub fn shedlock_compatible(mut self) -> Self {
        self.settings.set_shedlock_compatible(true);
        self
    }

    /// Validates the configuration and builds the provider. An invalid collection name, an
    /// unacknowledged write concern or a too long `locked_by` gives
    /// [`Error::Setup`]. Does no I/O.
    ///
    /// [`Error::Setup`]: shedlock::Error::Setup
    pub fn build(self) -> Result<MongoLockProvider> {
        check_collection_name(self.database.name(), &self.collection)
            .map_err(|m| Error::setup(BACKEND, m))?;
        if self.write_concern.w == Some(Acknowledgment::Nodes(0))
            && self.write_concern.journal != Some(true)
        {
            return Err(Error::setup(
                BACKEND,
                "write concern w: 0 is unacknowledged: a lock needs the server's answer (use \
                 majority, the default, or w: 1)",
            ));
        }
        let settings = self.settings.validate(BACKEND)?;
        let collection = self.database.collection::<Document>(&self.collection);
        let store = MongoStore {
            database: self.database,
            collection,
            write_concern: self.write_concern,
            compat: settings.is_shedlock_compatible(),
        };
        Ok(MongoLockProvider { inner: StoreProvider::new(store, settings) })
    }
}

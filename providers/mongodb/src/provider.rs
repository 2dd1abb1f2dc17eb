//! [`MongoLockProvider`], the public face of the store: construction and accessors; the lock
//! calls are forwarded to core's `StoreProvider` (see `store.rs`).

use std::fmt;

use mongodb::{Collection, Database, bson::Document, options::WriteConcern};
use shedlock::{
    LockProvider,
    store::{DelegatingProvider, ProviderSettings, StoreProvider},
};

use crate::{DEFAULT_COLLECTION, MongoLockProviderBuilder, store::MongoStore};

/// A [`LockProvider`] on a MongoDB collection. Cheap to clone; clones share the driver's
/// client (and its connection pool).
#[derive(Clone)]
pub struct MongoLockProvider {
    pub(crate) inner: StoreProvider<MongoStore>,
}

impl fmt::Debug for MongoLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No client and no connection string: it may carry user:password.
        let i = self.inner.store();
        f.debug_struct("MongoLockProvider")
            .field("database", &i.database.name())
            .field("collection", &i.collection.name())
            .field("write_concern", &i.write_concern)
            .field("settings", self.inner.settings())
            .finish_non_exhaustive()
    }
}

impl DelegatingProvider for MongoLockProvider {
    fn delegate(&self) -> &dyn LockProvider {
        &self.inner
    }
}

impl MongoLockProvider {
    /// Starts a builder on the caller's database (collection `shedLock`, server time, majority
    /// write concern, 10 s operation timeout).
    pub fn builder(database: Database) -> MongoLockProviderBuilder {
        MongoLockProviderBuilder {
            database,
            collection: DEFAULT_COLLECTION.to_owned(),
            write_concern: WriteConcern::majority(),
            settings: ProviderSettings::new(),
        }
    }

    /// The collection holding the locks, on the caller's client (for inspection and tests; the
    /// lock documents are described in the [crate docs](crate)).
    pub fn collection(&self) -> &Collection<Document> {
        &self.inner.store().collection
    }
}

//! [`RedisLockProvider`], the public type: a [`StoreProvider`] over the [`RedisStore`].

use std::fmt;

use shedlock::{
    LockProvider,
    store::{DelegatingProvider, StoreProvider},
};

use crate::{RedisConnection, store::RedisStore};

// Named only in doc links.
#[cfg(doc)]
use crate::RedisLockProviderBuilder;

/// Locks in Redis, Valkey or Redis Cluster. Cheap to clone; clones share the connection.
pub struct RedisLockProvider<C = redis::aio::ConnectionManager> {
    pub(crate) inner: StoreProvider<RedisStore<C>>,
}

impl<C> Clone for RedisLockProvider<C> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone() }
    }
}

impl<C> fmt::Debug for RedisLockProvider<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The connection (which may carry credentials) is deliberately left out.
        let store = self.inner.store();
        f.debug_struct("RedisLockProvider")
            .field("prefix", &store.prefix)
            .field("shedlock_compatible", &store.compat)
            .field("settings", self.inner.settings())
            .finish_non_exhaustive()
    }
}
impl<C: RedisConnection> RedisLockProvider<C> {
    /// The key that holds lock `name`.
    pub fn key(&self, name: &str) -> String {
        self.inner.store().key(name)
    }

    /// Whether this provider runs in the [ShedLock-compatible mode](RedisLockProviderBuilder::shedlock_compatible).
    pub fn is_shedlock_compatible(&self) -> bool {
        self.inner.store().compat
    }

    /// The key that holds the fencing counter of lock `name` (same hash slot as [`key`](Self::key);
    /// not used in the ShedLock-compatible mode).
    pub fn fence_key(&self, name: &str) -> String {
        self.inner.store().fence_key(name)
    }

    /// The `locked_by` this provider writes.
    pub fn locked_by(&self) -> &str {
        self.inner.settings().locked_by()
    }

    /// A clone of the connection, for reading the keys (e.g. in tests or tools).
    pub fn connection(&self) -> C {
        self.inner.store().conn.clone()
    }
}
impl<C: RedisConnection> DelegatingProvider for RedisLockProvider<C> {
    fn delegate(&self) -> &dyn LockProvider {
        &self.inner
    }
}

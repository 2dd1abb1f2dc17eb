//! [`MemcachedLockProvider`], the public type: a [`StoreProvider`] over the [`MemcachedStore`].

use shedlock::{
    LockProvider, Result,
    store::{DelegatingProvider, StoreProvider},
};

use crate::{RawConnection, conn::Conn, error::map_err, store::MemcachedStore};

// Named only in doc links.
#[cfg(doc)]
use crate::MAX_KEY_LEN;
#[cfg(doc)]
use shedlock::Error;

/// A [`LockProvider`] on one memcached server. Cheap to clone (clones share connections).
#[derive(Clone, Debug)]
pub struct MemcachedLockProvider {
    pub(crate) inner: StoreProvider<MemcachedStore>,
}

impl MemcachedLockProvider {
    /// The key of lock `name` as sent on the wire: prefix and name (each `:` of the name as
    /// the byte `0xFF`), base64-encoded, for meta commands with the `b` flag (e.g.
    /// `mg <key> b t v` shows the record and its TTL). [`Error::InvalidName`] when the name is
    /// too long.
    pub fn key(&self, name: &str) -> Result<String> {
        self.inner.store().key(name)
    }

    /// The key prefix in use: the configured one, with the `:` the builder appended if it had
    /// none (empty when configured empty).
    pub fn key_prefix(&self) -> &[u8] {
        &self.inner.store().prefix
    }

    /// The longest lock name accepted, in bytes: [`MAX_KEY_LEN`] less the prefix length.
    pub fn max_name_len(&self) -> usize {
        self.inner.store().max_name_len
    }

    /// The server address, `host:port`.
    pub fn address(&self) -> &str {
        self.inner.store().pool.address()
    }

    /// Whether the provider's connections use TLS.
    pub fn uses_tls(&self) -> bool {
        self.inner.store().pool.tls().is_some()
    }

    /// A new [`RawConnection`] to this provider's server, opened as the provider opens its
    /// own (over TLS when it uses TLS) but outside its pool, with no time limit. A TLS failure
    /// is [`Error::Setup`], as for the provider's calls.
    pub async fn raw_connection(&self) -> Result<RawConnection> {
        let pool = &self.inner.store().pool;
        Ok(RawConnection {
            conn: Some(Conn::open(pool.address(), pool.tls()).await.map_err(map_err)?),
        })
    }
}

impl DelegatingProvider for MemcachedLockProvider {
    fn delegate(&self) -> &dyn LockProvider {
        &self.inner
    }
}

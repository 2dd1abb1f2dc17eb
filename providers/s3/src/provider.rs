//! [`S3LockProvider`], the public face of the store: construction and accessors; the lock calls
//! are forwarded to core's `StoreProvider` (see `store.rs`).

use std::fmt;

use aws_sdk_s3::Client;
use shedlock::{
    LockProvider,
    store::{DelegatingProvider, ProviderSettings, StoreProvider},
};

use crate::{DEFAULT_PREFIX, S3LockProviderBuilder, store::S3Store};

/// A [`LockProvider`] on an S3 bucket with conditional writes. Cheap to clone; clones share the
/// client and what the provider last saw of each object.
#[derive(Clone)]
pub struct S3LockProvider {
    pub(crate) inner: StoreProvider<S3Store>,
}

impl fmt::Debug for S3LockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No client: its configuration holds the credentials provider.
        let store = self.inner.store();
        f.debug_struct("S3LockProvider")
            .field("bucket", &store.bucket)
            .field("prefix", &store.prefix)
            .field("settings", self.inner.settings())
            .finish_non_exhaustive()
    }
}

impl DelegatingProvider for S3LockProvider {
    fn delegate(&self) -> &dyn LockProvider {
        &self.inner
    }
}

impl S3LockProvider {
    /// Starts a builder on the caller's client and bucket (prefix `shedlock/`, 10 s operation
    /// timeout, the system clock). The client brings its HTTP stack, credentials, region,
    /// addressing style, retries and timeouts.
    pub fn builder(client: Client, bucket: impl Into<String>) -> S3LockProviderBuilder {
        S3LockProviderBuilder {
            client,
            bucket: bucket.into(),
            prefix: DEFAULT_PREFIX.to_owned(),
            settings: ProviderSettings::new(),
        }
    }

    /// Starts a builder on a client made from the caller's shared AWS configuration (what
    /// `aws_config::load_from_env()` returns).
    pub fn builder_from_config(
        config: &aws_types::SdkConfig,
        bucket: impl Into<String>,
    ) -> S3LockProviderBuilder {
        Self::builder(Client::new(config), bucket)
    }

    /// The bucket name.
    pub fn bucket(&self) -> &str {
        &self.inner.store().bucket
    }

    /// The key prefix in use: the configured one, with the `/` the builder appended if it did
    /// not end with `/` or `.` (empty when configured empty).
    pub fn prefix(&self) -> &str {
        &self.inner.store().prefix
    }

    /// The object key a lock name maps to: `<prefix><key_for(name)>`.
    pub fn key_for(&self, name: &str) -> String {
        self.inner.store().key(name)
    }
}

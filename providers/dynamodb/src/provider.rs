//! [`DynamoDbLockProvider`], the public face of the store: construction and accessors; the
//! lock calls are forwarded to core's `StoreProvider` (see `store.rs`).

use std::fmt;

use aws_sdk_dynamodb::Client;
use shedlock::{
    LockProvider,
    store::{DelegatingProvider, ProviderSettings, StoreProvider},
};

use crate::{DEFAULT_TABLE, DynamoDbLockProviderBuilder, store::DynamoStore};

/// A [`LockProvider`] on a DynamoDB table. Cheap to clone; clones share the client.
#[derive(Clone)]
pub struct DynamoDbLockProvider {
    pub(crate) inner: StoreProvider<DynamoStore>,
}

impl fmt::Debug for DynamoDbLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No client: its configuration holds the credentials provider.
        f.debug_struct("DynamoDbLockProvider")
            .field("table", &self.inner.store().table)
            .field("settings", self.inner.settings())
            .finish_non_exhaustive()
    }
}

impl DelegatingProvider for DynamoDbLockProvider {
    fn delegate(&self) -> &dyn LockProvider {
        &self.inner
    }
}

impl DynamoDbLockProvider {
    /// Starts a builder on the caller's client (table `shedlock`, 10 s operation timeout, the
    /// system clock). The client brings its HTTP stack, credentials, region, retries and
    /// timeouts.
    pub fn builder(client: Client) -> DynamoDbLockProviderBuilder {
        DynamoDbLockProviderBuilder {
            client,
            table: DEFAULT_TABLE.to_owned(),
            settings: ProviderSettings::new(),
        }
    }

    /// Starts a builder on a client made from the caller's shared AWS configuration (what
    /// `aws_config::load_from_env()` returns).
    pub fn builder_from_config(config: &aws_types::SdkConfig) -> DynamoDbLockProviderBuilder {
        Self::builder(Client::new(config))
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.inner.store().table
    }

    /// The client the provider sends its requests through.
    pub fn client(&self) -> &Client {
        &self.inner.store().client
    }
}

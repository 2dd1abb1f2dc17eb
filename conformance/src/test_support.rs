//! Shared fixtures of the kit's unit tests.

use std::sync::Arc;

use shedlock::{BoxError, LockProvider};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

use crate::{
    factory::{InstanceOptions, ProviderFactory},
    options::Options,
    suite::Suite,
};

/// The memory provider with no hooks (so C14, C24 and C25 are not applicable).
pub(crate) struct MemoryFactory(pub(crate) MemoryServer);

impl MemoryFactory {
    pub(crate) fn new() -> Self {
        Self(MemoryServer::new())
    }
}

#[async_trait::async_trait]
impl ProviderFactory for MemoryFactory {
    fn name(&self) -> &str {
        "kit-unit-test"
    }

    async fn create(&self, _: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        Ok(Arc::new(MemoryLockProvider::new(&self.0)))
    }
}

/// A suite on a fresh [`MemoryFactory`].
pub(crate) async fn memory_suite(options: Options) -> Suite {
    Suite::new(MemoryFactory::new(), options).await.expect("the memory factory builds instances")
}

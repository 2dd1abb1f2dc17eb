//! The full conformance suite against the in-memory reference provider (server time). Writes the
//! report as provider "memory". `harness = false`: this is the convention for every provider crate
//! (`tests/conformance.rs` calling [`shedlock_conformance::harness`]).

use std::sync::Arc;

use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{Hooks, InstanceOptions, Options, ProviderFactory};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

struct Memory {
    server: MemoryServer,
}

#[async_trait::async_trait]
impl ProviderFactory for Memory {
    fn name(&self) -> &str {
        "memory"
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let mut p = MemoryLockProvider::new(&self.server);
        if let Some(clock) = options.clock {
            p = p.with_clock(clock);
        }
        Ok(Arc::new(p))
    }

    fn hooks(&self) -> Hooks {
        Hooks::new()
    }
}

fn main() -> std::process::ExitCode {
    shedlock_conformance::harness(Options::from_env(), || async { Ok(Memory { server: MemoryServer::new() }) })
}

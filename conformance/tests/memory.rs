//! The full conformance suite against the in-memory reference provider (server time). Writes the
//! report as provider "memory". `harness = false`: this is the convention for every provider crate
//! (`tests/conformance.rs` calling [`shedlock_conformance::harness`]).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{
    Hooks, InstanceOptions, Options, ProviderFactory, RecordHooks, RestartHook,
};
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
        // Server time: the instance's (skewed) clock is given, and must not be consulted.
        // A name limit, so that C27's "max length accepted, +1 refused" exercises the model's
        // check (cargo-mutants found it untested with the default, unlimited names).
        Ok(Arc::new(
            MemoryLockProvider::new(&self.server)
                .with_clock(options.clock_or_system())
                .with_max_name_len(Some(255)),
        ))
    }

    fn hooks(&self) -> Hooks {
        Hooks::new()
            .with_records(Records(self.server.clone()))
            .with_restart(Restart(self.server.clone()))
    }

    fn server(&self) -> Option<String> {
        Some("shedlock-memory's MemoryServer, the in-process reference model (no backend)".into())
    }
}

/// Raw record access: the memory server exposes its records like a table.
struct Records(MemoryServer);

#[async_trait::async_trait]
impl RecordHooks for Records {
    async fn record_exists(&self, name: &str) -> Result<bool, BoxError> {
        Ok(self.0.record(name).is_some())
    }

    async fn delete_record(&self, name: &str) -> Result<(), BoxError> {
        self.0.delete_record(name);
        Ok(())
    }

    async fn plant_expired_record(&self, name: &str) -> Result<(), BoxError> {
        let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
        self.0.insert_record(name, an_hour_ago);
        Ok(())
    }
}

/// A restart of the memory "backend" forgets every record (like a non-durable server).
struct Restart(MemoryServer);

#[async_trait::async_trait]
impl RestartHook for Restart {
    async fn restart(&self) -> Result<(), BoxError> {
        self.0.restart();
        Ok(())
    }

    async fn identity(&self) -> Result<Option<String>, BoxError> {
        Ok(Some(format!("restarted {} times", self.0.restarts())))
    }
}

fn main() -> std::process::ExitCode {
    let options = Options::from_env()
        .expect_not_applicable(
            "C24",
            "the memory backend lives in the test process: no network address to cut",
        )
        .expect_not_applicable(
            "C28",
            "the memory backend lives in the test process: node processes cannot share it (the \
             toy, the memory model behind a TCP server, runs C28)",
        )
        .expect_not_applicable(
            "C29",
            "the memory backend lives in the test process: a node process to freeze cannot \
             share it (the toy runs C29)",
        );
    shedlock_conformance::harness(options, || async { Ok(Memory { server: MemoryServer::new() }) })
}

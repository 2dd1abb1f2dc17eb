// The conformance suite for the toy provider: `cargo test --test conformance`.
//
// The factory starts a toy server once, builds one provider (one connection) per instance,
// connects through the kit's fault proxy when asked (`InstanceOptions::address`), and offers
// the record, restart and backend-address hooks, so every check applies.

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{
    Hooks, InstanceOptions, Options, ProviderFactory, RecordHooks, RestartHook,
};
use shedlock_toy::{ToyLockProvider, ToyServer};

struct ToyFactory {
    /// The server this process started; `None` in a node process of C28, which uses the
    /// parent's server at `addr`.
    server: Option<Arc<ToyServer>>,
    addr: std::net::SocketAddr,
}

/// How a node process of C28 finds the parent's server.
const TOY_ADDR: &str = "SHEDLOCK_TOY_ADDR";

#[async_trait::async_trait]
impl ProviderFactory for ToyFactory {
    fn name(&self) -> &str {
        "toy"
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        // The toy judges time on the server, so the instance clock is not needed; a client-time
        // provider must use `options.clock_or_system()` for every time it reads.
        let addr = options.address.unwrap_or(self.addr);
        Ok(Arc::new(ToyLockProvider::new(addr).with_timeout(Duration::from_secs(2))))
    }

    fn hooks(&self) -> Hooks {
        let hooks = Hooks::new()
            .with_backend_address(self.addr)
            // C28 runs node processes of this binary: they reach this server through TOY_ADDR.
            .with_node_env([(TOY_ADDR, self.addr.to_string())]);
        match &self.server {
            Some(server) => {
                hooks.with_records(Records(server.clone())).with_restart(Restart(server.clone()))
            }
            None => hooks,
        }
    }

    fn server(&self) -> Option<String> {
        Some("the toy server of this example, in the test process, on loopback".into())
    }
}

struct Records(Arc<ToyServer>);

#[async_trait::async_trait]
impl RecordHooks for Records {
    async fn record_exists(&self, name: &str) -> Result<bool, BoxError> {
        Ok(self.0.memory().record(name).is_some())
    }

    async fn delete_record(&self, name: &str) -> Result<(), BoxError> {
        self.0.memory().delete_record(name);
        Ok(())
    }

    async fn plant_expired_record(&self, name: &str) -> Result<(), BoxError> {
        self.0.memory().insert_record(name, SystemTime::now() - Duration::from_secs(3600));
        Ok(())
    }
}

struct Restart(Arc<ToyServer>);

#[async_trait::async_trait]
impl RestartHook for Restart {
    async fn restart(&self) -> Result<(), BoxError> {
        Ok(self.0.restart().await?)
    }
}

fn main() -> std::process::ExitCode {
    // Every other check applies to the toy, so it must pass. A provider that cannot offer a
    // hook or does not declare a capability declares the outcome it expects instead, with the
    // reason, e.g. `.expect_not_applicable("C24", "embedded: no network address to cut")`; any
    // other outcome than pass or the declared one fails its test. The toy's protocol has no
    // read command, so it declares no inspection (C30, C31).
    let options = Options::from_env()
        .expect_unsupported("C30", "the toy protocol has no command to read a lock")
        .expect_unsupported("C31", "the toy protocol has no command to read a lock");
    shedlock_conformance::harness(options, || async {
        if let Ok(addr) = std::env::var(TOY_ADDR) {
            return Ok(ToyFactory { server: None, addr: addr.parse()? });
        }
        let server = Arc::new(ToyServer::start().await?);
        Ok(ToyFactory { addr: server.addr(), server: Some(server) })
    })
}

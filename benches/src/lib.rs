//! Criterion benchmarks for shedlock providers live in `benches/`: run them with
//! `cargo xtask bench` or `cargo bench -p shedlock-benches`. Each provider's benchmark sits beside
//! the raw backend operation its acquire builds on, so the provider's overhead is visible.
//!
//! This library holds what the benchmarks share: the measured cycle and the [`zoo`] (B1–B3 and
//! the round trips, one summary row per provider) and the [`herd`] (B4's paths, census and share).

use shedlock::{LockConfig, LockProvider};
use shedlock_launcher::{Backend, Service};

pub mod herd;
pub mod zoo;

/// The runtime every benchmark measures on: multi-threaded, two workers (this machine's cores).
///
/// # Panics
/// If tokio cannot start it.
#[allow(clippy::expect_used)]
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The server of `backend`, from the launcher (its `SHEDLOCK_<BACKEND>_URL` wins).
///
/// # Panics
/// With the launcher's message (its install hint) when the server cannot be started: a
/// benchmark never reports a number for a run that did not happen.
#[allow(clippy::panic)]
pub fn server(backend: Backend) -> &'static Service {
    shedlock_launcher::shared(backend)
        .unwrap_or_else(|e| panic!("no {} server for the benchmark: {e}", backend.name()))
}

/// One uncontended cycle: `try_lock` on a free name, then `unlock`.
///
/// # Panics
/// If the provider fails or the name is held: a benchmark must not measure a broken cycle.
#[allow(clippy::expect_used, clippy::panic)]
pub async fn cycle(p: &dyn LockProvider, c: &LockConfig) {
    let lock = p.try_lock(c).await.expect("try_lock").expect("the name is free");
    lock.unlock().await.expect("unlock");
}

//! Criterion benchmarks for shedlock providers live in `benches/`: run them with
//! `cargo xtask bench` or `cargo bench -p shedlock-benches`. Each provider's benchmark sits beside
//! the raw backend operation its acquire builds on, so the provider's overhead is visible.
//!
//! This library holds the measured operations the benchmarks share.

use std::sync::Arc;

use shedlock::{LockConfig, LockProvider};

/// One uncontended cycle: `try_lock` on a free name, then `unlock`.
///
/// # Panics
/// If the provider fails or the name is held: a benchmark must not measure a broken cycle.
#[allow(clippy::expect_used, clippy::panic)]
pub async fn cycle(p: &dyn LockProvider, c: &LockConfig) {
    let lock = p.try_lock(c).await.expect("try_lock").expect("the name is free");
    lock.unlock().await.expect("unlock");
}

/// One contended round: every node races for `c` at once (each on its own tokio task); the
/// single winner then releases.
///
/// # Panics
/// If a provider fails or the round does not have exactly one winner.
#[allow(clippy::expect_used, clippy::panic)]
pub async fn contended_round(nodes: &[Arc<dyn LockProvider>], c: &LockConfig) {
    let mut tasks = Vec::with_capacity(nodes.len());
    for p in nodes {
        let (p, c) = (p.clone(), c.clone());
        tasks.push(tokio::spawn(async move { p.try_lock(&c).await.expect("try_lock") }));
    }
    let mut won = Vec::new();
    for t in tasks {
        won.extend(t.await.expect("racing task"));
    }
    assert_eq!(won.len(), 1, "exactly one winner");
    for lock in won {
        lock.unlock().await.expect("unlock");
    }
}

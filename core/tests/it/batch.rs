//! `LockProvider::try_lock_many`: per-name answers, duplicates refused, fencing per name, on
//! the memory provider's native batch and on the default (one `try_lock` per name) alike.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use shedlock::{
    BatchOptions, Capabilities, ConfigError, Error, Lock, LockConfig, LockProvider, Result,
};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

fn cfg(name: &str) -> LockConfig {
    LockConfig::new(name, Duration::from_secs(30), Duration::ZERO).unwrap()
}

/// The memory provider without its native batch: the trait's default answers, one `try_lock`
/// per name, and it counts how many are in flight at once.
struct OneByOne {
    inner: MemoryLockProvider,
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl OneByOne {
    fn new(server: &MemoryServer) -> Self {
        Self {
            inner: MemoryLockProvider::new(server),
            now: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }
}

#[async_trait]
impl LockProvider for OneByOne {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(n, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(2)).await;
        let r = self.inner.try_lock(config).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        r
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().with_native_batch(false)
    }
}

/// Both kinds of batch over one server: the native one and the default one.
fn providers(server: &MemoryServer) -> Vec<(&'static str, Arc<dyn LockProvider>)> {
    vec![
        ("native", Arc::new(MemoryLockProvider::new(server))),
        ("default", Arc::new(OneByOne::new(server))),
    ]
}

#[tokio::test]
async fn a_batch_grants_the_free_names_and_refuses_the_held_one_in_the_order_asked() {
    let server = MemoryServer::new();
    for (kind, p) in providers(&server) {
        let other = MemoryLockProvider::new(&server);
        let held = other.try_lock(&cfg(&format!("{kind}-b"))).await.unwrap().unwrap();
        let names = ["a", "b", "c"].map(|n| cfg(&format!("{kind}-{n}")));
        let out = p.try_lock_many(&names, BatchOptions::new()).await.unwrap();
        assert_eq!(out.len(), 3, "{kind}");
        let won: Vec<Option<String>> =
            out.iter().map(|r| r.as_ref().unwrap().as_ref().map(|l| l.name().to_owned())).collect();
        assert_eq!(won, [Some(format!("{kind}-a")), None, Some(format!("{kind}-c"))], "{kind}");
        // What was granted is held: another instance is refused it.
        assert!(other.try_lock(&names[0]).await.unwrap().is_none(), "{kind}");
        for r in out {
            if let Some(l) = r.unwrap() {
                l.unlock().await.unwrap();
            }
        }
        held.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn a_batch_naming_a_lock_twice_is_refused_and_holds_nothing() {
    let server = MemoryServer::new();
    for (kind, p) in providers(&server) {
        let names = ["x", "y", "x"].map(|n| cfg(&format!("{kind}-dup-{n}")));
        match p.try_lock_many(&names, BatchOptions::new()).await {
            Err(Error::InvalidConfig(ConfigError::DuplicateInBatch { name })) => {
                assert_eq!(name, format!("{kind}-dup-x"));
            }
            other => panic!("{kind}: expected DuplicateInBatch, got {other:?}"),
        }
        for n in &names[..2] {
            assert!(server.record(n.name()).is_none(), "{kind}: {} was written", n.name());
        }
    }
}

#[tokio::test]
async fn fencing_tokens_rise_per_name_across_batches() {
    let server = MemoryServer::new();
    for (kind, p) in providers(&server) {
        let names = ["f1", "f2"].map(|n| cfg(&format!("{kind}-{n}")));
        let mut last = [0u64; 2];
        for round in 0..3 {
            let out = p.try_lock_many(&names, BatchOptions::new()).await.unwrap();
            for (i, r) in out.into_iter().enumerate() {
                let l = r.unwrap().expect("free name granted");
                let t = l.fencing_token().unwrap();
                assert!(t > last[i], "{kind} round {round}: token {t} not above {}", last[i]);
                last[i] = t;
                l.unlock().await.unwrap();
            }
        }
    }
}

#[tokio::test]
async fn an_invalid_name_answers_its_own_error_and_the_others_are_still_granted() {
    let server = MemoryServer::new();
    let p = MemoryLockProvider::new(&server).with_max_name_len(Some(8));
    let names = [cfg("ok-1"), cfg("far-too-long-a-name"), cfg("ok-2")];
    let mut out = p.try_lock_many(&names, BatchOptions::new()).await.unwrap();
    assert!(matches!(out[1], Err(Error::InvalidName { .. })), "{:?}", out[1]);
    for i in [2, 0] {
        out.remove(i).unwrap().expect("valid free name granted").unlock().await.unwrap();
    }
}

#[tokio::test]
async fn the_default_batch_keeps_at_most_the_asked_number_of_calls_in_flight() {
    let server = MemoryServer::new();
    for limit in [1, 2, 5] {
        let p = OneByOne::new(&server);
        let names: Vec<LockConfig> = (0..20).map(|i| cfg(&format!("c{limit}-{i}"))).collect();
        let out =
            p.try_lock_many(&names, BatchOptions::new().with_concurrency(limit)).await.unwrap();
        assert!(out.iter().all(|r| matches!(r, Ok(Some(_)))));
        assert_eq!(p.peak.load(Ordering::SeqCst), limit, "limit {limit}");
    }
}

#[tokio::test]
async fn a_pipelined_batch_keeps_up_to_its_depth_in_flight_and_answers_in_order() {
    let server = MemoryServer::new();
    let p = OneByOne::new(&server);
    let held = p.try_lock(&cfg("p-3")).await.unwrap().unwrap();
    let names: Vec<LockConfig> = (0..40).map(|i| cfg(&format!("p-{i}"))).collect();
    let out = shedlock::batch::try_lock_pipelined(&p, &names, BatchOptions::new()).await.unwrap();
    // All 40 start within the 2 ms each call takes: the depth is what bounds them.
    assert_eq!(p.peak.load(Ordering::SeqCst), shedlock::batch::PIPELINED_REQUESTS);
    for (i, r) in out.iter().enumerate() {
        assert_eq!(matches!(r, Ok(Some(_))), i != 3, "name {i}: {r:?}");
    }
    held.unlock().await.unwrap();
    // A deeper concurrency asked for is kept.
    let q = OneByOne::new(&server);
    let more: Vec<LockConfig> = (0..40).map(|i| cfg(&format!("q-{i}"))).collect();
    shedlock::batch::try_lock_pipelined(&q, &more, BatchOptions::new().with_concurrency(32))
        .await
        .unwrap();
    assert_eq!(q.peak.load(Ordering::SeqCst), 32);
}

#[tokio::test]
async fn a_batch_granted_lease_runs_lock_at_most_for_from_a_moment_within_the_call() {
    let server = MemoryServer::new();
    for (kind, p) in providers(&server) {
        let names = [cfg(&format!("{kind}-lease"))];
        let before = tokio::time::Instant::now();
        let out = p.try_lock_many(&names, BatchOptions::new()).await.unwrap();
        let after = tokio::time::Instant::now();
        let l = out.into_iter().next().unwrap().unwrap().unwrap();
        assert!(l.valid_until() >= before + Duration::from_secs(30) - Duration::from_millis(1));
        assert!(l.valid_until() <= after + Duration::from_secs(30), "{kind}");
        l.unlock().await.unwrap();
    }
}

//! Fail-over on a 3-node etcd cluster started by this test (it must own the nodes to kill them),
//! in three scenarios, each on its own cluster:
//!
//! 1. the leader is killed (SIGKILL) while a lock is held;
//! 2. the one node a holder's client is connected to is killed while it holds a lock;
//! 3. a node is restarted (stopped, then started) while nodes keep locking.
//!
//! Contenders poll (and take, hold briefly and release) the name throughout; every acquisition
//! and release is recorded in the conformance kit's history, and its overlap checker (C16) must
//! find no two holders at once. Each scenario measures how long locking was unavailable (errors
//! instead of answers) and prints it; the README states these figures.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use shedlock::{LockConfig, LockProvider};
use shedlock_conformance::tools::history::History;
use shedlock_etcd::EtcdLockProvider;
use shedlock_launcher::{Backend, LaunchOptions, Service};
use shedlock_test_support::cfg;

/// One scenario at a time: each starts three etcd processes on a 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The overlap the history check tolerates: the provider's declared granularity (as in C16).
const TOLERANCE: Duration = Duration::from_secs(1);

async fn own_cluster() -> Arc<Service> {
    let opts = LaunchOptions::new().ignore_env(true);
    let s = tokio::task::spawn_blocking(move || Service::start(Backend::EtcdCluster, &opts))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("the etcd cluster is not available: {e}"));
    Arc::new(s)
}

fn url_of(service: &Service, i: usize) -> String {
    format!("http://{}", service.addrs()[i])
}

async fn provider_on(urls: &str) -> EtcdLockProvider {
    common::provider(urls, "failover/").await
}

/// The index (in the service's node order) of the current leader, asked of the live nodes.
async fn find_leader(service: &Service, skip: &[usize]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for i in (0..service.addrs().len()).filter(|i| !skip.contains(i)) {
            let Ok(mut c) = common::client(&url_of(service, i)).await else { continue };
            let Ok(Ok(s)) = tokio::time::timeout(Duration::from_secs(2), c.status()).await else {
                continue;
            };
            if s.header().is_some_and(|h| h.member_id() == s.leader()) {
                return i;
            }
        }
        assert!(Instant::now() < deadline, "no leader among the live nodes within 20 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the contenders saw, relative to the scenario's start.
#[derive(Default)]
struct Seen {
    acquired: Vec<Duration>,
    refused: Vec<Duration>,
    errors: Vec<Duration>,
    /// The last error, for the messages.
    last_error: Option<String>,
}

/// Contenders polling one name every 20 ms; an acquired lock is held 50 ms, then released. All
/// recorded in `history`.
struct Contenders {
    t0: Instant,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Contenders {
    fn start(
        providers: Vec<EtcdLockProvider>,
        config: &LockConfig,
        history: &Arc<History>,
        t0: Instant,
    ) -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = providers
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let (seen, stop, config, history) =
                    (seen.clone(), stop.clone(), config.clone(), history.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let start = Instant::now();
                        match p.try_lock(&config).await {
                            Ok(Some(l)) => {
                                let id = history.acquired(
                                    format!("contender {i}"),
                                    &config,
                                    start,
                                    Instant::now(),
                                );
                                seen.lock().unwrap().acquired.push(t0.elapsed());
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                history.released(id, Instant::now());
                                let _ = l.unlock().await;
                            }
                            Ok(None) => seen.lock().unwrap().refused.push(t0.elapsed()),
                            Err(e) => {
                                let mut seen = seen.lock().unwrap();
                                seen.errors.push(t0.elapsed());
                                seen.last_error = Some(e.to_string());
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
            })
            .collect();
        Self { t0, seen, stop, tasks }
    }

    /// Waits until, after `since`, the contenders have been answered (held or acquired, no
    /// error) for 500 ms on end; returns when that run of answers began (relative to t0).
    async fn answered_after(&self, since: Duration, limit: Duration) -> Duration {
        let deadline = Instant::now() + limit;
        loop {
            let failure = {
                let seen = self.seen.lock().unwrap();
                let last_error = seen.errors.iter().copied().filter(|t| *t > since).max();
                let after = last_error.unwrap_or(since);
                let answers: Vec<Duration> = seen
                    .refused
                    .iter()
                    .chain(&seen.acquired)
                    .copied()
                    .filter(|t| *t > after)
                    .collect();
                let first = answers.iter().min().copied();
                let last = answers.iter().max().copied();
                if let (Some(a), Some(b)) = (first, last)
                    && b - a > Duration::from_millis(500)
                {
                    return a;
                }
                (Instant::now() > deadline).then(|| {
                    format!(
                        "locking did not resume within {limit:?} after +{since:?}: {} errors \
                         (last at {last_error:?}: {:?}), {} refusals, {} acquisitions",
                        seen.errors.len(),
                        seen.last_error,
                        seen.refused.len(),
                        seen.acquired.len()
                    )
                })
            };
            if let Some(message) = failure {
                panic!("{message}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The first acquisition after `since`, waiting up to `limit`.
    async fn first_acquisition_after(&self, since: Duration, limit: Duration) -> Duration {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(t) = self.seen.lock().unwrap().acquired.iter().copied().find(|t| *t > since)
            {
                return t;
            }
            assert!(Instant::now() < deadline, "no contender acquired within {limit:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        let _ = self.t0;
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

fn check(history: &History) {
    if let Err(o) = history.check(TOLERANCE) {
        panic!("two holders at once: {o}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_mid_hold_keeps_the_lock_and_locking_resumes() {
    let _serial = SERIAL.lock().await;
    let service = own_cluster().await;
    let urls = service.url().to_owned();
    let holder = provider_on(&urls).await;
    let config = cfg("s1-leader", 30_000, 0);
    let history = Arc::new(History::new());

    let start = Instant::now();
    let lock = holder.try_lock(&config).await.unwrap().expect("the name is free");
    let held = history.acquired("holder", &config, start, Instant::now());
    let token = lock.fencing_token().unwrap();

    let t0 = Instant::now();
    let contenders = Contenders::start(
        vec![provider_on(&urls).await, provider_on(&urls).await],
        &config,
        &history,
        t0,
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let leader = find_leader(&service, &[]).await;
    let s = service.clone();
    tokio::task::spawn_blocking(move || s.kill_node(leader)).await.unwrap().unwrap();
    let killed = t0.elapsed();
    let resumed = contenders.answered_after(killed, Duration::from_secs(30)).await;
    let new_leader = find_leader(&service, &[leader]).await;

    // The holder still holds it through the new leader (the lease survived the election), and
    // releases it; a contender takes it soon after.
    assert!(!lock.is_lost());
    let released = Instant::now();
    history.released(held, released);
    lock.unlock().await.unwrap();
    // The unlock call deletes the key somewhere inside it, so a contender may have the name
    // before the unlock's answer is back: only an acquisition that ended before the unlock call
    // began is a violation (the history check, above all, decides).
    let since = released.duration_since(t0);
    let taken = contenders.first_acquisition_after(since, Duration::from_secs(10)).await;
    let seen = contenders.stop().await;
    check(&history);
    let before_release: Vec<_> = seen.acquired.iter().filter(|t| **t < since).collect();
    assert!(
        before_release.is_empty(),
        "a contender took the held lock at {before_release:?}, before the unlock began at +{since:?}"
    );
    eprintln!(
        "scenario 1: leader {leader} killed at +{killed:?}; new leader {new_leader}; answered \
         again from +{resumed:?} (unavailable for {:?}); {} errors, {} refusals; after the \
         holder's unlock a contender had it in {:?}; {} acquisitions checked, no overlap",
        resumed.saturating_sub(killed),
        seen.errors.len(),
        seen.refused.len(),
        taken.saturating_sub(since),
        history.len()
    );

    // Tokens keep growing across the election.
    let next = holder.try_lock(&cfg("s1-after", 10_000, 0)).await.unwrap().expect("free");
    assert!(next.fencing_token().unwrap() > token);
    next.unlock().await.unwrap();
    let s = service.clone();
    tokio::task::spawn_blocking(move || s.start_node(leader)).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_holders_node_frees_the_lock_at_its_lease_and_not_before() {
    let _serial = SERIAL.lock().await;
    let service = own_cluster().await;
    let urls = service.url().to_owned();
    // The holder's client knows one node only: a follower, so that this differs from scenario 1.
    let leader = find_leader(&service, &[]).await;
    let node = (leader + 1) % 3;
    let holder = provider_on(&url_of(&service, node)).await;
    let at_most = Duration::from_secs(5);
    let config = LockConfig::new("s2-node", at_most, Duration::ZERO).unwrap();
    let history = Arc::new(History::new());

    let start = Instant::now();
    let lock = holder.try_lock(&config).await.unwrap().expect("the name is free");
    let held = history.acquired("holder", &config, start, Instant::now());
    let lost = lock.lost_signal();

    let t0 = Instant::now();
    let contenders = Contenders::start(
        vec![provider_on(&urls).await, provider_on(&urls).await],
        &config,
        &history,
        t0,
    );
    let s = service.clone();
    tokio::task::spawn_blocking(move || s.kill_node(node)).await.unwrap().unwrap();
    let killed = t0.elapsed();
    let resumed = contenders.answered_after(killed, Duration::from_secs(30)).await;

    // The holder can no longer reach the cluster: its lease ends on the server after
    // lock_at_most_for, and its lock's lost signal fires at its deadline.
    let deadline = lock.valid_until().into_std();
    tokio::time::timeout(at_most * 2, lost.lost()).await.expect("the lost signal fired");
    let signalled = Instant::now();
    assert!(signalled + Duration::from_millis(50) >= deadline, "fired before the deadline");
    let taken = contenders.first_acquisition_after(killed, Duration::from_secs(20)).await;
    let err = tokio::time::timeout(Duration::from_secs(10), lock.unlock())
        .await
        .expect("unlock answers within its operation timeout");
    let seen = contenders.stop().await;
    check(&history);
    let _ = held;
    eprintln!(
        "scenario 2: node {node} (the holder's only endpoint; leader {leader}) killed at \
         +{killed:?}; the other clients answered again from +{resumed:?} (unavailable for \
         {:?}); the holder's lost signal fired {:?} after its deadline; a contender took the \
         lock at +{taken:?}, {:?} after the acquire began (lock_at_most_for {at_most:?}); the \
         holder's unlock: {err:?}; {} errors, {} refusals; {} acquisitions checked, no overlap",
        resumed.saturating_sub(killed),
        signalled.saturating_duration_since(deadline),
        (t0 + taken).saturating_duration_since(start),
        seen.errors.len(),
        seen.refused.len(),
        history.len()
    );
    assert!(err.is_err(), "the holder's node is down: its unlock cannot succeed");
    let s = service.clone();
    tokio::task::spawn_blocking(move || s.start_node(node)).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_a_node_while_nodes_lock_keeps_exclusion_and_locking_resumes() {
    let _serial = SERIAL.lock().await;
    let service = own_cluster().await;
    let urls = service.url().to_owned();
    let config = cfg("s3-restart", 10_000, 0);
    let history = Arc::new(History::new());
    let t0 = Instant::now();
    let contenders = Contenders::start(
        vec![provider_on(&urls).await, provider_on(&urls).await, provider_on(&urls).await],
        &config,
        &history,
        t0,
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let node = find_leader(&service, &[]).await;
    let s = service.clone();
    tokio::task::spawn_blocking(move || s.stop_node(node)).await.unwrap().unwrap();
    let stopped = t0.elapsed();
    let resumed = contenders.answered_after(stopped, Duration::from_secs(30)).await;
    let s = service.clone();
    tokio::task::spawn_blocking(move || s.start_node(node)).await.unwrap().unwrap();
    let started = t0.elapsed();
    let back = contenders.answered_after(started, Duration::from_secs(30)).await;
    let taken = contenders.first_acquisition_after(back, Duration::from_secs(10)).await;
    let seen = contenders.stop().await;
    check(&history);
    assert!(history.len() >= 3, "locking went on: {} acquisitions", history.len());
    eprintln!(
        "scenario 3: node {node} (the leader) stopped at +{stopped:?}, answered again from \
         +{resumed:?} (unavailable for {:?}); started again at +{started:?}, answered from \
         +{back:?} ({:?}), acquired at +{taken:?}; {} errors, {} refusals; {} acquisitions \
         checked, no overlap",
        resumed.saturating_sub(stopped),
        back.saturating_sub(started),
        seen.errors.len(),
        seen.refused.len(),
        history.len()
    );
}

//! Fail-over on a 3-node ZooKeeper ensemble started by this test (it must own the nodes to kill
//! them). While a holder holds one name, three workers keep locking and releasing another name
//! (and keep trying the held one), every acquisition recorded in the conformance kit's history.
//! Three faults, one after the other:
//!
//! 1. the **leader** is killed (SIGKILL) mid-hold;
//! 2. the node the **holder's session is connected to** is killed (a follower, so that this is a
//!    different fault from 1);
//! 3. a node (the current leader) is **restarted** (graceful stop, then start).
//!
//! After each fault the holder still holds its lock (its session moves to a live node within the
//! session timeout, so its ephemeral node survives): no worker may get it, and the holder's
//! owner-checked extend still works. The history check (C16's checker) finds no two holders
//! overlapping, and the test prints how long locking was unavailable after each fault (the time
//! from the fault to the first successful acquisition of a call that started after it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::ProviderBuilder as _;
use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use shedlock::{Lock, LockConfig, LockProvider};
use shedlock_conformance::tools::history::History;
use shedlock_launcher::{Backend, LaunchOptions, Service};
use shedlock_test_support::cfg;
use shedlock_zookeeper::ZooKeeperLockProvider;

/// Longer than any fail-over here (elections take about a second with the launcher's 500 ms
/// ticks), and within the server's limit (20 ticks = 10 s).
const SESSION_TIMEOUT: Duration = Duration::from_secs(8);

fn provider(connect: &str) -> ZooKeeperLockProvider {
    ZooKeeperLockProvider::builder(connect)
        .root("/failover")
        .session_timeout(SESSION_TIMEOUT)
        .operation_timeout(Some(Duration::from_secs(3)))
        .build()
        .unwrap()
}

/// A four-letter word's answer, `None` when the node does not answer.
fn four_letter(addr: SocketAddr, word: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(word.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// The index of the node whose `srvr` says `Mode: leader`.
fn leader(addrs: &[SocketAddr]) -> Option<usize> {
    addrs.iter().position(|a| four_letter(*a, "srvr").is_some_and(|o| o.contains("Mode: leader")))
}

/// `zk_num_alive_connections` of each node (0 for a node that does not answer).
fn connections(addrs: &[SocketAddr]) -> Vec<i64> {
    addrs
        .iter()
        .map(|a| {
            four_letter(*a, "mntr")
                .and_then(|o| {
                    o.lines()
                        .find_map(|l| l.strip_prefix("zk_num_alive_connections"))
                        .and_then(|v| v.trim().parse().ok())
                })
                .unwrap_or(0)
        })
        .collect()
}

/// Waits until every node answers `srvr` with a mode and one of them leads.
async fn wait_quorum(addrs: &[SocketAddr]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let a = addrs.to_vec();
        let ok = tokio::task::spawn_blocking(move || {
            a.iter().all(|x| four_letter(*x, "srvr").is_some_and(|o| o.contains("Mode: ")))
                && leader(&a).is_some()
        })
        .await
        .unwrap();
        if ok {
            return;
        }
        assert!(Instant::now() < deadline, "the ensemble did not form a quorum within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the workers share. Workers also try the name the holder holds: an acquisition of it
/// before the holder released it is an overlap the history check reports.
struct Workload {
    history: History,
    stop: AtomicBool,
    /// Successful churn acquisitions: (call start, call end).
    churn_ok: std::sync::Mutex<Vec<(Instant, Instant)>>,
    /// Every call the ensemble answered (acquired or refused: both need the leader), as (call
    /// start, call end).
    answered: std::sync::Mutex<Vec<(Instant, Instant)>>,
    errors: std::sync::Mutex<Vec<(Instant, String)>>,
}

async fn worker(
    id: usize,
    p: ZooKeeperLockProvider,
    w: Arc<Workload>,
    held: Arc<std::sync::Mutex<Option<String>>>,
) {
    let churn = cfg("churn", 2_000, 0);
    while !w.stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        match p.try_lock(&churn).await {
            Ok(Some(lock)) => {
                let end = Instant::now();
                let acq = w.history.acquired(format!("worker {id}"), &churn, start, end);
                w.churn_ok.lock().unwrap().push((start, end));
                w.answered.lock().unwrap().push((start, end));
                tokio::time::sleep(Duration::from_millis(30)).await;
                w.history.released(acq, Instant::now());
                let _ = lock.unlock().await;
            }
            Ok(None) => w.answered.lock().unwrap().push((start, Instant::now())),
            Err(e) => w.errors.lock().unwrap().push((start, e.to_string())),
        }
        // The holder's name is published only once the holder has it, so that a worker's brief
        // hold cannot make the holder's own acquisition fail.
        let name = held.lock().unwrap().clone();
        if let Some(name) = name {
            let c = cfg(&name, 2_000, 0);
            let start = Instant::now();
            if let Ok(Some(lock)) = p.try_lock(&c).await {
                // Legitimate only after the holder released it: the history check decides.
                let acq = w.history.acquired(format!("worker {id}"), &c, start, Instant::now());
                w.history.released(acq, Instant::now());
                let _ = lock.unlock().await;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Takes `name` (a name no worker has tried yet) with a 30 s lock, recorded in the history,
/// then publishes it in `held` so that the workers keep trying it.
async fn hold(
    p: &ZooKeeperLockProvider,
    w: &Workload,
    held: &std::sync::Mutex<Option<String>>,
    name: &str,
) -> (Lock, LockConfig, shedlock_conformance::tools::history::AcqId) {
    let c = cfg(name, 30_000, 0);
    let start = Instant::now();
    let lock = p.try_lock(&c).await.unwrap().expect("a name no worker has tried is free");
    let id = w.history.acquired("holder", &c, start, Instant::now());
    *held.lock().unwrap() = Some(name.to_owned());
    (lock, c, id)
}

/// Waits until a call in `calls` that started after `fault` completed; returns the time from
/// the fault to the end of that call.
async fn first_after(
    calls: &std::sync::Mutex<Vec<(Instant, Instant)>>,
    fault: Instant,
    what: &str,
) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((_, end)) = calls.lock().unwrap().iter().find(|(start, _)| *start >= fault) {
            return end.duration_since(fault);
        }
        assert!(Instant::now() < deadline, "{what} did not resume within 30 s of the fault");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// (answered, acquired): how long after `fault` the workers' calls were answered again, and
/// how long until one acquired the churn name (which includes waiting out, for its 2 s
/// `lock_at_most_for`, a churn lock whose unlock the fault made fail).
async fn resumed_after(w: &Workload, fault: Instant) -> (Duration, Duration) {
    let answered = first_after(&w.answered, fault, "answers").await;
    let acquired = first_after(&w.churn_ok, fault, "locking").await;
    (answered, acquired)
}

/// After a fault: the holder's lock is intact (not lost, extend works), then it is released.
/// Returns the time from the fault to the holder's first successful extend.
async fn holder_survived(
    mut lock: Lock,
    c: &LockConfig,
    w: &Workload,
    id: shedlock_conformance::tools::history::AcqId,
    what: &str,
    fault: Instant,
) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let start = Instant::now();
        match lock.extend(c.lock_at_most_for(), Duration::ZERO).await {
            Ok(()) => {
                w.history.extended(id, c, start);
                break;
            }
            // Not connected yet (its session is moving to a live node): retry.
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{what}: the holder's extend failed after the fail-over: {e}"),
        }
    }
    let extended = fault.elapsed();
    assert!(!lock.is_lost(), "{what}: the holder's lock is lost");
    w.history.released(id, Instant::now());
    lock.unlock().await.unwrap();
    extended
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_two_holders_and_locking_resumes_across_leader_kill_holder_node_kill_and_restart() {
    let opts = LaunchOptions::new().ignore_env(true);
    let service =
        tokio::task::spawn_blocking(move || Service::start(Backend::ZooKeeperEnsemble, &opts))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("the ZooKeeper ensemble is not available: {e}"));
    let service = Arc::new(service);
    let addrs = service.addrs();
    let connect = service.url().to_owned();
    wait_quorum(&addrs).await;

    let w = Arc::new(Workload {
        history: History::new(),
        stop: AtomicBool::new(false),
        churn_ok: Default::default(),
        answered: Default::default(),
        errors: Default::default(),
    });
    let held = Arc::new(std::sync::Mutex::new(None));
    // Warm up (root, name nodes) before the workers start.
    let first = provider(&connect);
    first.connect().await.unwrap();
    let mut tasks = Vec::new();
    for id in 0..3 {
        let p = provider(&connect);
        p.connect().await.unwrap();
        tasks.push(tokio::spawn(worker(id, p, w.clone(), held.clone())));
    }
    let mut report = Vec::new();

    // 1. Kill the leader mid-hold.
    let holder = provider(&connect);
    let (lock, c, id) = hold(&holder, &w, &held, "held-1").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let a = addrs.clone();
    let lead = tokio::task::spawn_blocking(move || leader(&a)).await.unwrap().expect("a leader");
    let fault = Instant::now();
    let s = service.clone();
    tokio::task::spawn_blocking(move || s.kill_node(lead)).await.unwrap().unwrap();
    let extended = holder_survived(lock, &c, &w, id, "leader kill", fault).await;
    let (answered, acquired) = resumed_after(&w, fault).await;
    report.push(format!(
        "leader (node {lead}) killed: workers answered again after {answered:?}, churn acquired \
         after {acquired:?}, the holder extended after {extended:?}"
    ));
    let s = service.clone();
    tokio::task::spawn_blocking(move || s.start_node(lead)).await.unwrap().unwrap();
    wait_quorum(&addrs).await;

    // 2. Kill the node the holder is connected to (a follower: a new holder until one is).
    let (holder, node) = {
        let mut found = None;
        for _ in 0..10 {
            let a = addrs.clone();
            let before = tokio::task::spawn_blocking(move || connections(&a)).await.unwrap();
            let p = provider(&connect);
            p.connect().await.unwrap();
            let a = addrs.clone();
            let (after, lead) =
                tokio::task::spawn_blocking(move || (connections(&a), leader(&a))).await.unwrap();
            let grew: Vec<usize> = (0..addrs.len()).filter(|i| after[*i] > before[*i]).collect();
            if let [n] = grew[..]
                && Some(n) != lead
            {
                found = Some((p, n));
                break;
            }
        }
        found.expect("no holder session landed on a follower in 10 tries")
    };
    let (lock, c, id) = hold(&holder, &w, &held, "held-2").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fault = Instant::now();
    let s = service.clone();
    tokio::task::spawn_blocking(move || s.kill_node(node)).await.unwrap().unwrap();
    let extended = holder_survived(lock, &c, &w, id, "holder's node kill", fault).await;
    let (answered, acquired) = resumed_after(&w, fault).await;
    report.push(format!(
        "holder's node {node} killed: workers answered again after {answered:?}, churn acquired \
         after {acquired:?}, the holder (its session moved) extended after {extended:?}"
    ));
    let s = service.clone();
    tokio::task::spawn_blocking(move || s.start_node(node)).await.unwrap().unwrap();
    wait_quorum(&addrs).await;

    // 3. Restart a node (the current leader) mid-hold.
    let (lock, c, id) = hold(&holder, &w, &held, "held-3").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let a = addrs.clone();
    let lead = tokio::task::spawn_blocking(move || leader(&a)).await.unwrap().expect("a leader");
    let fault = Instant::now();
    let s = service.clone();
    tokio::task::spawn_blocking(move || {
        s.stop_node(lead)?;
        s.start_node(lead)
    })
    .await
    .unwrap()
    .unwrap();
    let restarted = fault.elapsed();
    let extended = holder_survived(lock, &c, &w, id, "restart", fault).await;
    let (answered, acquired) = resumed_after(&w, fault).await;
    report.push(format!(
        "leader (node {lead}) restarted (down and back up in {restarted:?}): workers answered \
         again after {answered:?}, churn acquired after {acquired:?}, the holder extended after \
         {extended:?}"
    ));

    // Locking keeps going for a while after the last fault.
    tokio::time::sleep(Duration::from_secs(1)).await;
    w.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let errors = w.errors.lock().unwrap().len();
    let churn = w.churn_ok.lock().unwrap().len();
    for line in &report {
        eprintln!("{line}");
    }
    eprintln!(
        "{} acquisitions recorded ({churn} churn), {errors} worker errors during the faults",
        w.history.len()
    );
    // The tolerance of C16 for a 1 ms provider: the granularity plus 10 ms.
    if let Err(overlap) = w.history.check(Duration::from_millis(11)) {
        panic!("two holders at once: {overlap}");
    }
    assert!(churn > 30, "too few acquisitions to prove anything: {churn}");
}

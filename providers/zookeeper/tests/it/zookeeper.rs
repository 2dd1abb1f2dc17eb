//! Provider-level tests against a real ZooKeeper server: what the conformance catalogue does not
//! already cover (session expiry, round trips per path, unreachable ensembles, the node layout).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use shedlock::ProviderBuilder as _;

use std::time::Duration;

use shedlock::{Error, LockProvider};
use shedlock_launcher::Backend;
use shedlock_test_support::{FaultProxy, cfg, unique, unreachable};
use shedlock_zookeeper::ZooKeeperLockProvider;
use tokio::time::Instant;

async fn connect_string() -> String {
    shedlock_test_support::url(Backend::ZooKeeper, "ZooKeeper").await
}

fn root() -> String {
    format!("/{}", unique("t"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_whose_session_expired_is_reported_lost_and_freed_and_the_provider_recovers() {
    let cs = connect_string().await;
    let addr: std::net::SocketAddr = cs.parse().unwrap();
    let proxy = FaultProxy::start(addr).await.unwrap();
    let root = root();
    // The shortest session the launcher's server allows (2 ticks of 500 ms is 1 s).
    let holder = ZooKeeperLockProvider::builder(proxy.addr().to_string())
        .root(&root)
        .session_timeout(Duration::from_millis(1500))
        .operation_timeout(Some(Duration::from_secs(3)))
        .build()
        .unwrap();
    let other = common::provider(&cs, &root);
    let c = cfg("job", 60_000, 0);
    let mut lock = holder.try_lock(&c).await.unwrap().expect("free");
    let lost = lock.lost_signal();
    // When the holder learnt it lost the lock, on the clock the takeover is timed by.
    let lost_at = tokio::spawn({
        let lost = lost.clone();
        async move {
            lost.lost().await;
            Instant::now()
        }
    });
    assert!(other.try_lock(&c).await.unwrap().is_none(), "held");

    // The holder is cut off from the server: its session expires there (no heartbeats), and
    // the ephemeral lock node goes with it, long before lock_at_most_for.
    proxy.set_refusing(true).await.unwrap();
    proxy.cut_all();
    let start = Instant::now();
    let (taken, taken_call) = loop {
        let call = Instant::now();
        if let Some(l) = other.try_lock(&c).await.unwrap() {
            break (l, call);
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the expired session kept its lock");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let freed_after = start.elapsed();
    eprintln!("the cut-off holder's lock was freed by its session expiry after {freed_after:?}");
    assert!(freed_after < Duration::from_secs(5), "{freed_after:?}");
    // Still cut off, the holder knows, without any call and long before lock_at_most_for
    // (60 s): its lost signal fired before the server could expire its session, so before the
    // other node's successful try_lock even started (the server expires it 1.5 s after it last
    // heard the holder; the signal fires half-way through what is left of that once the client
    // notices the cut, here at once).
    let lost_at = tokio::time::timeout(Duration::from_secs(5), lost_at)
        .await
        .expect("the lost signal fired while cut off, without an extend")
        .unwrap();
    assert!(lock.is_lost());
    eprintln!(
        "the holder's lost signal fired after {:?}, {:?} before the takeover call started",
        lost_at - start,
        taken_call.saturating_duration_since(lost_at)
    );
    assert!(
        lost_at <= taken_call,
        "the holder learnt of its loss {:?} after the other node's successful call started",
        lost_at - taken_call
    );

    // Back on line: the extend reports the loss too (the lock is known lost; nothing is sent),
    // unlock is a no-op, and the new holder keeps the lock.
    proxy.set_refusing(false).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let e = loop {
        match lock.extend(Duration::from_secs(60), Duration::ZERO).await {
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => break other,
        }
    };
    assert!(matches!(e, Err(Error::LockLost { .. })), "{e:?}");
    assert!(lock.is_lost());
    tokio::time::timeout(Duration::from_millis(100), lost.lost()).await.expect("signal fired");
    lock.unlock().await.unwrap();
    // The holder's provider is usable again once its client reconnects (it then learns that the
    // old session expired and opens a new one); until then its calls are retryable errors.
    let held_elsewhere = loop {
        match holder.try_lock(&c).await {
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => break other,
        }
    };
    assert!(held_elsewhere.unwrap().is_none(), "the new holder keeps it");

    // The provider opened a new session: locking works again.
    let l = holder.try_lock(&cfg("after", 60_000, 0)).await.unwrap().expect("free");
    l.unlock().await.unwrap();
    taken.unlock().await.unwrap();
}

/// A silent partition (the holder's traffic held, nothing reset): the client notices only
/// through its own timeouts, after 2/5 of the session timeout and a tick; its lost signal must
/// still fire before the server can expire the session, so before another node's successful
/// `try_lock` starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silently_partitioned_holder_learns_its_loss_before_anyone_can_take_the_lock() {
    let cs = connect_string().await;
    let proxy = FaultProxy::start(cs.parse().unwrap()).await.unwrap();
    let root = root();
    let holder = ZooKeeperLockProvider::builder(proxy.addr().to_string())
        .root(&root)
        .session_timeout(Duration::from_millis(1500))
        .operation_timeout(Some(Duration::from_secs(3)))
        .build()
        .unwrap();
    let other = common::provider(&cs, &root);
    let c = cfg("job", 60_000, 0);
    let lock = holder.try_lock(&c).await.unwrap().expect("free");
    let lost_at = tokio::spawn({
        let lost = lock.lost_signal();
        async move {
            lost.lost().await;
            Instant::now()
        }
    });
    proxy.set_stalled(true);
    let start = Instant::now();
    let taken_call = loop {
        let call = Instant::now();
        if let Some(l) = other.try_lock(&c).await.unwrap() {
            l.unlock().await.unwrap();
            break call;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the partitioned session kept it");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let lost_at = tokio::time::timeout(Duration::from_secs(5), lost_at).await.unwrap().unwrap();
    eprintln!(
        "silent partition: lost signal after {:?}, takeover call started after {:?}",
        lost_at - start,
        taken_call - start
    );
    assert!(
        lost_at <= taken_call,
        "the partitioned holder learnt of its loss {:?} after the other node's successful call \
         started",
        lost_at - taken_call
    );
    proxy.set_stalled(false);
    drop(lock);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_are_one_on_a_free_name_two_when_held_three_for_a_takeover_one_per_release() {
    let cs = connect_string().await;
    let proxy = FaultProxy::start(cs.parse().unwrap()).await.unwrap();
    let root = root();
    let p = common::provider(&proxy.addr().to_string(), &root);
    let other = common::provider(&cs, &root);
    p.connect().await.unwrap();
    let c = cfg("job", 300, 0);
    // The first acquire of a name never locked before: the acquire transaction finds no name
    // node, and a second one creates it along with the lock node.
    let count = |f: u64| proxy.round_trips() - f;
    let r = proxy.round_trips();
    let l = p.try_lock(&c).await.unwrap().expect("free");
    assert_eq!(count(r), 2, "first acquire of a fresh name (root and clock node exist)");
    let r = proxy.round_trips();
    l.unlock().await.unwrap();
    assert_eq!(count(r), 1, "release");
    let r = proxy.round_trips();
    let l = p.try_lock(&c).await.unwrap().expect("free");
    assert_eq!(count(r), 1, "acquire of a known name");
    l.unlock().await.unwrap();

    let held = other.try_lock(&c).await.unwrap().expect("free");
    let r = proxy.round_trips();
    assert!(p.try_lock(&c).await.unwrap().is_none());
    let held_rt = count(r);
    // The failed transaction, then the clock write and the consistent read, pipelined (one or
    // two turnarounds).
    assert!((2..=3).contains(&held_rt), "held: {held_rt}");
    // Asked again while the lock is surely live: a read alone, no clock write.
    let admin = common::admin(&cs).await;
    let clock = format!("{root}/.clock");
    let (_, before) = admin.get_data(&clock).await.unwrap();
    let r = proxy.round_trips();
    assert!(p.try_lock(&c).await.unwrap().is_none());
    assert_eq!(count(r), 2, "held again");
    let (_, after) = admin.get_data(&clock).await.unwrap();
    assert_eq!(after.version, before.version, "the clock node was written again");
    tokio::time::sleep(Duration::from_millis(350)).await;
    let r = proxy.round_trips();
    let l = p.try_lock(&c).await.unwrap().expect("expired: taken over");
    let takeover_rt = count(r);
    // 3 requests in turn; the pipelined clock write and read may count as two turnarounds when
    // the first answer leaves before the second request arrives.
    assert!((3..=4).contains(&takeover_rt), "takeover: {takeover_rt}");
    eprintln!("round trips: held {held_rt}, takeover {takeover_rt}");
    held.unlock().await.unwrap(); // stale: changes nothing
    assert!(other.try_lock(&c).await.unwrap().is_none(), "the stale unlock freed the new holder");
    l.unlock().await.unwrap();
}

#[tokio::test]
async fn an_ensemble_with_every_member_down_gives_a_typed_error_saying_why_within_the_operation_timeout()
 {
    // Three ports nobody listens on.
    let ports: Vec<u16> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port())
        .collect();
    let cs = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
    let p = ZooKeeperLockProvider::builder(cs)
        .operation_timeout(Some(Duration::from_secs(2)))
        .build()
        .unwrap();
    let start = Instant::now();
    let e = p.try_lock(&cfg("job", 1_000, 0)).await.unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e, Error::Unavailable { .. } | Error::Timeout { .. }), "{e:?}");
    assert!(e.is_retryable());
    assert!(took <= Duration::from_millis(2_200), "{took:?}");
    // The message says why.
    unreachable::assert_named(&p, "every member refusing", unreachable::REFUSED).await;
    let p = ZooKeeperLockProvider::builder(format!("{}:2181", unreachable::UNRESOLVABLE_HOST))
        .operation_timeout(Some(Duration::from_secs(2)))
        .build()
        .unwrap();
    unreachable::assert_named(&p, "an unresolvable host", unreachable::UNRESOLVED).await;
}

#[tokio::test]
async fn a_name_node_holds_an_ephemeral_lock_node_owned_by_the_session() {
    let cs = connect_string().await;
    let root = root();
    let p = common::provider(&cs, &root);
    let admin = common::admin(&cs).await;
    let lock = p.try_lock(&cfg("a/b c", 60_000, 0)).await.unwrap().expect("free");
    assert_eq!(p.lock_path("a/b c"), format!("{root}/a%2Fb%20c/lock"));
    let (data, stat) = admin.get_data(&p.lock_path("a/b c")).await.unwrap();
    assert_eq!(stat.ephemeral_owner, p.session_id().await.unwrap());
    assert!(String::from_utf8(data).unwrap().starts_with("60001\n"));
    assert_eq!(lock.fencing_token(), Some(u64::try_from(stat.czxid).unwrap()));
    lock.unlock().await.unwrap();
    assert!(admin.check_stat(&p.lock_path("a/b c")).await.unwrap().is_none());
    // The name node stays (its version counts acquisitions).
    let (_, name) = admin.get_data(&p.name_path("a/b c")).await.unwrap();
    assert_eq!(name.version, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_server_gives_a_retryable_error() {
    let cs = connect_string().await;
    let proxy = FaultProxy::start(cs.parse().unwrap()).await.unwrap();
    let p = common::provider(&proxy.addr().to_string(), &root());
    p.connect().await.unwrap();
    proxy.set_stalled(true);
    let e = p.try_lock(&cfg("job", 60_000, 0)).await.unwrap_err();
    eprintln!("stalled: {e:?}");
    assert!(e.is_retryable(), "{e:?}");
    proxy.set_stalled(false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_dropped_in_flight_does_not_stop_the_unlock_from_freeing_the_name() {
    let cs = connect_string().await;
    let proxy = FaultProxy::start(cs.parse().unwrap()).await.unwrap();
    let root = root();
    let p = common::provider(&proxy.addr().to_string(), &root);
    let other = common::provider(&cs, &root);
    let c = cfg("job", 60_000, 0);
    let mut lock = p.try_lock(&c).await.unwrap().expect("free");
    // The extension reaches the server (which applies it), but its answer is held back and the
    // caller gives up.
    proxy.set_holding_answers(true);
    let r = tokio::time::timeout(
        Duration::from_millis(300),
        lock.extend(Duration::from_secs(60), Duration::ZERO),
    )
    .await;
    assert!(r.is_err(), "the extend answered through held answers: {r:?}");
    assert!(proxy.held_chunks() > 0, "nothing was held: the extend was never sent");
    proxy.set_holding_answers(false);
    lock.unlock().await.unwrap();
    assert!(other.try_lock(&c).await.unwrap().is_some(), "the unlock left the name held");
}

#[tokio::test]
async fn list_skips_released_names_and_foreign_nodes_and_pages_past_many_stale_names() {
    let cs = connect_string().await;
    let root = root();
    let p = common::provider(&cs, &root);
    let admin = common::admin(&cs).await;
    // 140 released names (their name nodes stay, without lock nodes): more than one read batch
    // of lock nodes, before and between the held ones.
    for i in 0..140 {
        let l = p.try_lock(&cfg(&format!("job/{i:03}"), 60_000, 0)).await.unwrap().expect("free");
        l.unlock().await.unwrap();
    }
    let held_names = ["job/000x", "job/139x", "job%", "job.a"];
    let mut held = Vec::new();
    for n in held_names {
        held.push(p.try_lock(&cfg(n, 60_000, 0)).await.unwrap().expect("free"));
    }
    // Nodes no lock name maps to (the clock node is one): not listed, no error.
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    admin.create(&format!("{root}/foreign.node"), b"", &open).await.unwrap();
    admin.create(&format!("{root}/job%2f"), b"", &open).await.unwrap();

    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10 {
        let page = p.list("job", cursor.as_deref(), 3).await.unwrap();
        assert!(page.records.len() <= 3 && page.records.iter().all(|r| r.held), "{page:?}");
        listed.extend(page.records.into_iter().map(|r| r.name));
        match page.next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    let mut expected = held_names.to_vec();
    expected.sort_unstable();
    assert_eq!(listed, expected);
    // The prefix is a value: `job%` is one name, not a pattern (its node is `job%25`).
    let only = p.list("job%", None, 10).await.unwrap();
    assert_eq!(only.records.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["job%"]);
    assert_eq!(only.next, None);
    for l in held {
        l.unlock().await.unwrap();
    }
    assert!(p.list("", None, 1000).await.unwrap().records.is_empty(), "all released");
}

#[tokio::test]
async fn inspection_reports_the_leaders_times_and_the_at_least_remainder_as_the_same_acquisition() {
    let cs = connect_string().await;
    let root = root();
    let (p, other) = (common::provider(&cs, &root), common::provider(&cs, &root));
    let lock = p.try_lock(&cfg("least", 60_000, 20_000)).await.unwrap().expect("free");
    let seen = other.inspect("least").await.unwrap().expect("held");
    let (at, until) = (seen.locked_at.unwrap(), seen.lock_until.unwrap());
    assert_eq!(until.duration_since(at).unwrap(), Duration::from_millis(60_001), "mtime + hold_ms");
    lock.unlock().await.unwrap();
    let rest = other.inspect("least").await.unwrap().expect("kept for at-least");
    assert!(rest.held);
    assert_eq!((&rest.acquisition, rest.fencing_token), (&seen.acquisition, seen.fencing_token));
    assert!(rest.lock_until.unwrap() < until, "the rest of at-least, not at-most");
    match other.force_release(&rest).await.unwrap() {
        shedlock::ForceRelease::Released(r) => assert_eq!(r.acquisition, seen.acquisition),
        x => panic!("{x:?}"),
    }
    assert_eq!(other.inspect("least").await.unwrap(), None);
    other.try_lock(&cfg("least", 60_000, 0)).await.unwrap().expect("free").unlock().await.unwrap();
}

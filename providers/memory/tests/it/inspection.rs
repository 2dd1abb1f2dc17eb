//! Inspection and the administrative release on the reference provider: what an operator sees
//! of a lock, judged by whose clock, and a release that cannot hit a lock taken again.

use std::{sync::Arc, time::Duration};

use shedlock::{
    Clock, Error, ForceRelease, LockInfo, LockProvider, SkewedClock, inspect::MAX_PAGE,
};
use shedlock_memory::{MemoryLockProvider, TimeSource};

use crate::reference::{S, cfg, setup};

async fn seen(p: &MemoryLockProvider, name: &str) -> LockInfo {
    p.inspect(name).await.unwrap().expect("a record")
}

#[tokio::test]
async fn inspect_shows_a_held_lock_with_its_holder_token_and_lease() {
    let (clock, _server, a, b) = setup();
    let lock = a.try_lock(&cfg("job", 10 * S, S)).await.unwrap().unwrap();
    let caps = b.capabilities();
    assert!(caps.inspect && caps.list && caps.force_release);

    let info = seen(&b, "job").await;
    assert_eq!(info.name, "job");
    assert!(info.held);
    assert_eq!(info.judged_by, TimeSource::Server);
    assert_eq!(info.fencing_token, lock.fencing_token());
    assert_eq!(info.locked_at, Some(clock.now()));
    assert_eq!(info.lock_until, Some(clock.now() + 10 * S));
    let by = info.locked_by.as_deref().unwrap();
    assert!(by.contains('/'), "the default locked_by is hostname/pid, got {by:?}");
    assert!(!info.acquisition.is_empty());
    drop(lock);
}

#[tokio::test]
async fn inspect_shows_a_released_lock_as_free_and_no_record_as_none() {
    let (clock, _server, a, b) = setup();
    assert_eq!(b.inspect("never").await.unwrap(), None);
    let lock = a.try_lock(&cfg("job", 10 * S, 2 * S)).await.unwrap().unwrap();
    lock.unlock().await.unwrap();
    assert!(seen(&b, "job").await.held, "kept until lock_at_least_for");
    clock.advance(2 * S);
    let info = seen(&b, "job").await;
    assert!(!info.held, "free once at-least has passed; the record stays");
    assert!(b.try_lock(&cfg("job", S, Duration::ZERO)).await.unwrap().is_some());
}

#[tokio::test]
async fn inspect_judges_by_the_server_clock_whatever_the_callers_clock() {
    let (clock, server, a, _) = setup();
    let _lock = a.try_lock(&cfg("job", 10 * S, Duration::ZERO)).await.unwrap().unwrap();
    // An operator whose clock is an hour ahead: in server time its clock is never read.
    let skewed = Arc::new(SkewedClock::ahead(Arc::new(clock.clone()), 3600 * S));
    let operator = MemoryLockProvider::new(&server).with_clock(skewed.clone());
    assert!(seen(&operator, "job").await.held);
    // The same operator on client time judges by its own clock, and says so.
    let client = operator.with_time_source(TimeSource::Client);
    let info = seen(&client, "job").await;
    assert_eq!((info.held, info.judged_by), (false, TimeSource::Client));
    clock.advance(10 * S);
    assert!(!seen(&a, "job").await.held, "the server's clock reached lock_until");
}

#[tokio::test]
async fn list_returns_every_record_under_the_prefix_once_across_pages() {
    let (_clock, _server, a, b) = setup();
    let mut held = Vec::new();
    for i in 0..23 {
        held.push(a.try_lock(&cfg(&format!("app/{i:02}"), 10 * S, S)).await.unwrap().unwrap());
    }
    for name in ["apq", "ap", "other/1"] {
        held.push(a.try_lock(&cfg(name, 10 * S, S)).await.unwrap().unwrap());
    }
    let mut names = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = b.list("app/", cursor.as_deref(), 7).await.unwrap();
        assert!(page.records.len() <= 7);
        assert!(page.records.iter().all(|r| r.held));
        names.extend(page.records.into_iter().map(|r| r.name));
        pages += 1;
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let expected: Vec<String> = (0..23).map(|i| format!("app/{i:02}")).collect();
    assert_eq!(names, expected);
    assert_eq!(pages, 4, "23 records in pages of 7");
    let all = b.list("", None, 100).await.unwrap();
    assert_eq!((all.records.len(), all.next), (26, None));
    let capped = b.list("", None, usize::MAX).await.unwrap();
    assert!(capped.records.len() <= MAX_PAGE);
}

#[tokio::test]
async fn inspection_changes_nothing_and_blocks_no_one() {
    let (_clock, server, a, b) = setup();
    let mut lock = a.try_lock(&cfg("job", 10 * S, Duration::ZERO)).await.unwrap().unwrap();
    let before = server.record("job").unwrap();
    for _ in 0..3 {
        seen(&b, "job").await;
        b.list("", None, 10).await.unwrap();
    }
    assert_eq!(server.record("job").unwrap(), before);
    assert!(b.try_lock(&cfg("job", S, Duration::ZERO)).await.unwrap().is_none());
    lock.extend(10 * S, Duration::ZERO).await.unwrap();
    lock.unlock().await.unwrap();
    assert!(b.try_lock(&cfg("job", S, Duration::ZERO)).await.unwrap().is_some());
}

#[tokio::test]
async fn force_release_frees_the_seen_lock_and_its_holder_loses_it() {
    let (_clock, _server, a, b) = setup();
    let mut stuck = a.try_lock(&cfg("job", 3600 * S, Duration::ZERO)).await.unwrap().unwrap();
    let info = seen(&b, "job").await;
    assert_eq!(b.force_release(&info).await.unwrap(), ForceRelease::Released(info.clone()));
    let next = b.try_lock(&cfg("job", 10 * S, Duration::ZERO)).await.unwrap().unwrap();
    assert!(next.fencing_token() > stuck.fencing_token());
    let lost = stuck.extend(3600 * S, Duration::ZERO).await.unwrap_err();
    assert!(matches!(lost, Error::LockLost { .. }), "{lost:?}");
    drop(stuck);
    let now = seen(&a, "job").await;
    assert!(now.held, "the stale holder changed nothing");
    assert_eq!(now.fencing_token, next.fencing_token());
    drop(next);
}

#[tokio::test]
async fn a_stale_holders_unlock_after_a_force_release_changes_nothing() {
    let (_clock, _server, a, b) = setup();
    let stuck = a.try_lock(&cfg("job", 3600 * S, 60 * S)).await.unwrap().unwrap();
    let info = seen(&b, "job").await;
    b.force_release(&info).await.unwrap();
    let next = b.try_lock(&cfg("job", 10 * S, Duration::ZERO)).await.unwrap().unwrap();
    stuck.unlock().await.unwrap();
    let now = seen(&a, "job").await;
    assert_eq!((now.held, now.fencing_token), (true, next.fencing_token()));
    next.unlock().await.unwrap();
    assert!(!seen(&a, "job").await.held, "the new holder's unlock still works");
}

#[tokio::test]
async fn force_release_never_touches_a_lock_taken_again_since_it_was_seen() {
    let (_clock, _server, a, b) = setup();
    let first = a.try_lock(&cfg("job", 10 * S, Duration::ZERO)).await.unwrap().unwrap();
    let old = seen(&b, "job").await;
    first.unlock().await.unwrap();
    let again = a.try_lock(&cfg("job", 10 * S, Duration::ZERO)).await.unwrap().unwrap();
    let now = seen(&b, "job").await;
    assert_eq!(b.force_release(&old).await.unwrap(), ForceRelease::Changed(Some(now.clone())));
    assert_eq!(seen(&b, "job").await, now, "the new acquisition is untouched");
    assert!(b.try_lock(&cfg("job", S, Duration::ZERO)).await.unwrap().is_none());
    drop(again);
}

#[tokio::test]
async fn force_release_of_a_record_gone_since_it_was_seen_changes_nothing() {
    let (_clock, server, a, b) = setup();
    let _lock = a.try_lock(&cfg("job", 10 * S, Duration::ZERO)).await.unwrap().unwrap();
    let info = seen(&b, "job").await;
    assert!(server.delete_record("job"));
    assert_eq!(b.force_release(&info).await.unwrap(), ForceRelease::Changed(None));
}

#[tokio::test]
async fn inspection_checks_names_like_try_lock() {
    let (_clock, _server, a, _) = setup();
    let short = a.with_max_name_len(Some(4));
    assert_eq!(short.inspect("").await.unwrap(), None, "no lock can have the empty name");
    assert!(matches!(short.inspect("toolong").await, Err(Error::InvalidName { .. })));
    assert!(matches!(short.list("toolong", None, 1).await, Err(Error::InvalidName { .. })));
    assert!(short.list("", None, 1).await.unwrap().records.is_empty());
}

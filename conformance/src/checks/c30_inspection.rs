//! C30 `inspection`: what `inspect` and `list` say is the backend's truth, judged by the
//! provider's own clock, and reading changes nothing.

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use shedlock::{LockInfo, LockProvider, TimeSource};

use super::common::{LONG, skewed_instances};
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{
        R, at, bounded, finish, inspect, inspect_held, instances, ms, must_lock, must_not_lock,
        poll_acquire, timed_try_lock, unlock,
    },
};

/// C30: `inspect` shows a held lock as held with its fencing token and a lease in the future,
/// by the backend's judgement (an instance whose clock is an hour ahead still sees it held on a
/// server-time provider); a released lock as free or gone; a lock taken again as another
/// acquisition. Reads change nothing: over a whole lease, every `inspect` and `list` shows the
/// same `locked_by`, `locked_at`, `lock_until`, token and acquisition, the lock frees when its
/// lease ends, and a read of a name never locked leaves no record. `list` returns every record under a prefix exactly once, page by page, never
/// one outside it (`%` and `_` in the prefix are plain characters). Inspecting changes nothing:
/// the holder still holds and extends, contenders are still refused.
pub async fn c30_inspection(suite: &Suite) -> Verdict {
    finish(c30(suite).await)
}

async fn c30(suite: &Suite) -> R {
    let caps = suite.capabilities().clone();
    if !caps.inspect {
        return Err(Verdict::unsupported("capability `inspect` not declared"));
    }
    let judge = if caps.server_time { TimeSource::Server } else { TimeSource::Client };
    let p = instances(suite, 2).await?;
    let name = suite.lock_name("c30");
    let cfg = suite.config(&name, LONG, Duration::ZERO)?;

    if let Some(info) = inspect(suite, &p[1], &name, "before any lock").await?
        && info.held
    {
        return Err(Verdict::fail(format!("a name never locked was inspected as held: {info:?}")));
    }
    let mut lock = must_lock(suite, &p[0], &cfg, "first acquisition").await?;
    let seen = inspect_held(suite, &p[1], &name, "while held").await?;
    if seen.name != name || seen.judged_by != judge || seen.acquisition.is_empty() {
        return Err(Verdict::fail(format!(
            "inspect({name:?}) gave name {:?}, judged by {:?} (expected {judge:?}), acquisition {:?}",
            seen.name, seen.judged_by, seen.acquisition
        )));
    }
    if caps.fencing && seen.fencing_token != lock.fencing_token() {
        return Err(Verdict::fail(format!(
            "inspect shows fencing token {:?}, the holder has {:?}",
            seen.fencing_token,
            lock.fencing_token()
        )));
    }
    if let (Some(at), Some(until)) = (seen.locked_at, seen.lock_until)
        && until <= at
    {
        return Err(Verdict::fail(format!(
            "a held record's lock_until {until:?} is not after its locked_at {at:?}"
        )));
    }

    // The backend's judgement: an instance an hour ahead sees the lock held on server time.
    if caps.server_time {
        let ahead = skewed_instances(suite, &[3_600_000]).await?;
        let (p_ahead, _) = &ahead[0];
        inspect_held(suite, p_ahead, &name, "by an instance whose clock is an hour ahead").await?;
    }

    // Reading changes nothing.
    for _ in 0..3 {
        inspect_held(suite, &p[1], &name, "inspected again").await?;
    }
    must_not_lock(suite, &p[1], &cfg, "after inspection").await?;
    if caps.extend {
        bounded(suite, "extend", lock.extend(LONG, Duration::ZERO)).await?.map_err(|e| {
            Verdict::fail(format!("the holder's extend after inspection failed: {e}"))
        })?;
    }
    let again = inspect_held(suite, &p[1], &name, "after the holder's extend").await?;
    if again.acquisition != seen.acquisition || again.fencing_token != seen.fencing_token {
        return Err(Verdict::fail(format!(
            "the same acquisition was inspected as {seen:?}, then {again:?}"
        )));
    }
    unlock(suite, lock).await?;
    if let Some(info) = inspect(suite, &p[1], &name, "after unlock").await?
        && info.held
    {
        return Err(Verdict::fail(format!(
            "a released lock (no lock_at_least_for) was inspected as held: {info:?}"
        )));
    }
    let next = must_lock(suite, &p[1], &cfg, "after unlock").await?;
    let taken = inspect_held(suite, &p[0], &name, "taken again").await?;
    if taken.acquisition == seen.acquisition {
        return Err(Verdict::fail(format!(
            "two acquisitions were inspected as the same one, {:?}",
            seen.acquisition
        )));
    }
    unlock(suite, next).await?;

    let unchanged = reads_change_nothing(suite, &p).await?;
    let listed =
        if caps.list { list(suite, &p).await? } else { list_refused(suite, &p[1]).await? };
    Ok(format!(
        "a held lock inspected as held by {judge:?} time, released as free; {unchanged}; {listed}"
    ))
}

/// Whether `b` shows the record of `a` as it was: the same holder, acquisition, token and
/// judgement, and times within `tolerance` (the declared granularity: a provider that reports
/// `lock_until` from a remaining TTL reads it anew each time).
fn unchanged(a: &LockInfo, b: &LockInfo, tolerance: Duration) -> bool {
    let near = |x: Option<SystemTime>, y: Option<SystemTime>| match (x, y) {
        (Some(x), Some(y)) => {
            x.duration_since(y).or_else(|_| y.duration_since(x)).is_ok_and(|d| d <= tolerance)
        }
        (x, y) => x == y,
    };
    a.held == b.held
        && a.locked_by == b.locked_by
        && a.fencing_token == b.fencing_token
        && a.acquisition == b.acquisition
        && near(a.locked_at, b.locked_at)
        && near(a.lock_until, b.lock_until)
}

/// Reads change nothing, over a whole lease: a lock of the short `lock_at_most_for` is read by
/// `inspect` (and `list`, when declared) again and again until its lease ends; every read
/// shows the same `locked_by`, `locked_at`, `lock_until`, token and acquisition as the first,
/// and the lock is free for another instance by the time its first reading said, not later (a
/// read that refreshes the lease keeps a dead holder's lock alive). A read of a name never
/// locked leaves no record behind (by the record hooks, when given).
async fn reads_change_nothing(suite: &Suite, p: &[Arc<dyn LockProvider>]) -> R {
    let t = suite.timing();
    let caps = suite.capabilities().clone();
    let name = suite.lock_name("c30-reads");
    let cfg = suite.config(&name, t.at_most, Duration::ZERO)?;
    let (lock, a0, a1) = timed_try_lock(suite, &p[0], &cfg).await?;
    let Some(lock) = lock else { bail!("a fresh name was found held") };
    let first = inspect_held(suite, &p[1], &name, "reads: the first").await?;
    let valid_until = lock.valid_until().into_std();
    let mut reads = 0u32;
    // Reads until the holder's lease ends (at least twice, whatever the machine's pace).
    loop {
        let again = inspect(suite, &p[1], &name, "reads: again").await?;
        if let Some(info) = &again
            && Instant::now() < valid_until
            && !unchanged(&first, info, t.granularity)
        {
            bail!("inspect changed the record it read: first {first:?}, then {info:?}");
        }
        if caps.list {
            let page = bounded(suite, "list", p[1].list(&name, None, 10))
                .await?
                .map_err(|e| Verdict::fail(format!("list({name:?}) failed: {e}")))?;
            if let Some(info) = page.records.iter().find(|r| r.name == name)
                && Instant::now() < valid_until
                && !unchanged(&first, info, t.granularity)
            {
                bail!("list changed the record it read: inspected {first:?}, listed {info:?}");
            }
        }
        reads += 1;
        if reads >= 2 && Instant::now() + t.poll >= valid_until {
            break;
        }
        tokio::time::sleep(t.poll).await;
    }
    // Still ending when it did: free for another instance within the usual slack.
    let deadline = t.at_most + a1.duration_since(a0) + t.slack;
    let (next, got) =
        poll_acquire(suite, &p[1], &cfg, a0, t.at_most, deadline, "after the reads").await?;
    drop(lock);
    unlock(suite, next).await?;

    // A read of a name never locked creates nothing.
    let never = suite.lock_name("c30-never");
    if let Some(info) = inspect(suite, &p[1], &never, "reads: a name never locked").await?
        && info.held
    {
        bail!("a name never locked was inspected as held: {info:?}");
    }
    if caps.list {
        bounded(suite, "list", p[1].list(&never, None, 10))
            .await?
            .map_err(|e| Verdict::fail(format!("list({never:?}) failed: {e}")))?;
    }
    let leftover = match suite.hooks().records().cloned() {
        Some(hooks) => {
            // The hook's own connection may have been cut by C25's restart: it gets three tries.
            let mut tries = 0;
            let exists = loop {
                tries += 1;
                match bounded(suite, "record_exists", hooks.record_exists(&never)).await? {
                    Ok(exists) => break exists,
                    Err(e) if tries >= 3 => {
                        bail!("the record_exists hook failed {tries} times, lastly: {e}")
                    }
                    Err(_) => tokio::time::sleep(t.poll).await,
                }
            };
            if exists {
                bail!("reading {never:?}, a name never locked, left a record behind");
            }
            "; reading a name never locked left no record"
        }
        None => "",
    };
    Ok(format!(
        "{reads} reads over a {} ms lease changed nothing, and the lock was free for another \
         instance at +{} ms{leftover}",
        ms(t.at_most),
        at(a0, got)
    ))
}

/// A provider that does not declare `list` says so when asked: `Error::Unsupported`, never an
/// empty page that would read as "no locks".
async fn list_refused(suite: &Suite, p: &Arc<dyn LockProvider>) -> R {
    match bounded(suite, "list", p.list("", None, 10)).await? {
        Err(shedlock::Error::Unsupported { .. }) => {
            Ok("list not declared, and refused as unsupported".to_owned())
        }
        other => Err(Verdict::fail(format!(
            "list is not declared, but list(\"\") answered {other:?} instead of Unsupported"
        ))),
    }
}

/// Five locks under a prefix with `%` and `_` in it, beside names a pattern would match: the
/// listing in pages of two returns exactly the five, each once.
async fn list(suite: &Suite, p: &[Arc<dyn LockProvider>]) -> R {
    let prefix = suite.lock_name("c30_%/");
    let mut inside: Vec<String> = (0..5).map(|i| format!("{prefix}{i}")).collect();
    inside.sort();
    let outside =
        [prefix.replace('_', "x").replace('%', "y") + "0", prefix[..prefix.len() - 1].to_owned()];
    let mut held = Vec::new();
    for name in inside.iter().chain(outside.iter()) {
        let cfg = suite.config(name, LONG, Duration::ZERO)?;
        held.push(must_lock(suite, &p[0], &cfg, "a lock to list").await?);
    }
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    for page_no in 1..=10 {
        let page = bounded(suite, "list", p[1].list(&prefix, cursor.as_deref(), 2))
            .await?
            .map_err(|e| Verdict::fail(format!("list({prefix:?}) failed: {e}")))?;
        if page.records.len() > 2 {
            return Err(Verdict::fail(format!(
                "list with limit 2 returned {} records",
                page.records.len()
            )));
        }
        if let Some(r) = page.records.iter().find(|r| !r.held) {
            return Err(Verdict::fail(format!("a held lock was listed as free: {r:?}")));
        }
        names.extend(page.records.into_iter().map(|r| r.name));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
        if page_no == 10 {
            return Err(Verdict::fail(
                "list of 5 records in pages of 2 did not end within 10 pages",
            ));
        }
    }
    names.sort();
    for lock in held {
        unlock(suite, lock).await?;
    }
    if names != inside {
        return Err(Verdict::fail(format!(
            "list({prefix:?}) returned {names:?}, expected {inside:?}"
        )));
    }
    Ok("list returned the 5 records under a prefix with % and _ once each, in pages of 2"
        .to_owned())
}

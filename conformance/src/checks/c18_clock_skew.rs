//! C18 `clock_skew`: skewed instance clocks: server time stays safe, client time bound measured.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use shedlock::LockProvider;

use super::common::{LONG, skew_ms, skewed_instances};
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::{
        calls::{
            R, bounded, finish, ms, must_lock, must_not_lock, poll_acquire, timed_try_lock, unlock,
        },
        clocks,
        history::History,
        workload::{Workload, run_workload},
    },
};

/// C02, C05, C07, C15 and C16 in small, on instances skewed by `+S, -S, 0, +S/2`.
async fn intact_under_skew(suite: &Suite, skew: Duration) -> R {
    let t = suite.timing();
    let s = skew_ms(skew);
    let p: Vec<_> =
        skewed_instances(suite, &[s, -s, 0, s / 2]).await?.into_iter().map(|(p, _)| p).collect();
    let tag = format!("skew {} ms", skew.as_millis());
    // C02
    let cfg = suite.config(&suite.lock_name("c18-02"), LONG, Duration::ZERO)?;
    let l = must_lock(suite, &p[0], &cfg, &format!("{tag}: C02 first lock")).await?;
    for (i, inst) in p.iter().enumerate() {
        must_not_lock(suite, inst, &cfg, &format!("{tag}: C02 instance {i} while held")).await?;
    }
    unlock(suite, l).await?;
    // C05 both ways
    for (a, b) in [(0usize, 1usize), (1, 0)] {
        let cfg = suite.config(&suite.lock_name("c18-05"), t.at_most, Duration::ZERO)?;
        let (l, a0, a1) = timed_try_lock(suite, &p[a], &cfg).await?;
        let Some(l) = l else { return Err(Verdict::fail(format!("{tag}: C05 fresh name held"))) };
        let deadline = t.at_most + a1.duration_since(a0) + t.slack;
        let what = format!("{tag}: C05 expiry, taken by instance {b} from {a}");
        let (l2, _) = poll_acquire(suite, &p[b], &cfg, a0, t.at_most, deadline, &what).await?;
        drop(l);
        unlock(suite, l2).await?;
    }
    // C07
    let cfg = suite.config(&suite.lock_name("c18-07"), (t.at_most + t.slack) * 4, t.at_most)?;
    let (l, a0, a1) = timed_try_lock(suite, &p[1], &cfg).await?;
    let Some(l) = l else { return Err(Verdict::fail(format!("{tag}: C07 fresh name held"))) };
    unlock(suite, l).await?;
    let deadline = t.at_most + a1.duration_since(a0) + t.slack;
    let (l2, _) =
        poll_acquire(suite, &p[0], &cfg, a0, t.at_most, deadline, &format!("{tag}: C07")).await?;
    unlock(suite, l2).await?;
    // C15
    for round in 0..10 {
        let cfg = suite.config(&suite.lock_name("c18-15"), LONG, Duration::ZERO)?;
        let mut set = tokio::task::JoinSet::new();
        let barrier = Arc::new(tokio::sync::Barrier::new(p.len()));
        for inst in &p {
            let (inst, cfg, barrier) = (inst.clone(), cfg.clone(), barrier.clone());
            set.spawn(async move {
                barrier.wait().await;
                inst.try_lock(&cfg).await
            });
        }
        let mut winners = Vec::new();
        while let Some(r) = set.join_next().await {
            match r {
                Ok(Ok(Some(l))) => winners.push(l),
                Ok(Ok(None)) => {}
                Ok(Err(e)) => bail!("{tag}: C15 try_lock failed: {e}"),
                Err(e) => bail!("{tag}: C15 task panicked: {e}"),
            }
        }
        let n = winners.len();
        for l in winners {
            let _ = bounded(suite, "unlock", l.unlock()).await?;
        }
        if n != 1 {
            bail!("{tag}: C15 round {round}: {n} winners");
        }
    }
    // C16
    let w = Workload {
        names: vec![suite.lock_name("c18-16a"), suite.lock_name("c18-16b")],
        ops_per_instance: (suite.options().history_ops / 2).max(10),
        at_most: t.at_most,
        extend: suite.capabilities().extend,
        tolerate_faults: false,
        owner_checked: suite.capabilities().owner_checked,
    };
    let history = Arc::new(History::new());
    run_workload(suite, &p, &w, &history).await?;
    history
        .check(t.early)
        .map_err(|o| Verdict::fail(format!("{tag}: C16 two holders at once: {o}")))?;
    Ok(tag)
}

/// Instance A on the true clock takes a lock; instance B, whose clock is `skew` ahead, polls for
/// it. Returns by how much B's acquisition overlapped A's certain holding interval, when it did
/// so beyond the tolerance.
async fn probe(suite: &Suite, skew: Duration) -> Result<Option<Duration>, Verdict> {
    let t = suite.timing();
    let p = skewed_instances(suite, &[0, skew_ms(skew)]).await?;
    let cfg = suite.config(&suite.lock_name("c18-probe"), t.at_most, Duration::ZERO)?;
    let (l, a0, a1) = timed_try_lock(suite, &p[0].0, &cfg).await?;
    let Some(l) = l else { return Err(Verdict::fail("C18 probe: fresh name held")) };
    let deadline = a1 + t.at_most + t.slack;
    loop {
        let (r, _b0, b1) = timed_try_lock(suite, &p[1].0, &cfg).await?;
        if let Some(l2) = r {
            drop(l);
            unlock(suite, l2).await?;
            let end = a0 + t.at_most;
            if b1 + t.early < end {
                return Ok(Some(end - b1));
            }
            return Ok(None);
        }
        if Instant::now() > deadline {
            drop(l);
            bail!(
                "C18 probe at skew {} ms: the skewed instance could not take the lock by +{} ms",
                skew.as_millis(),
                ms(t.at_most + t.slack)
            );
        }
        tokio::time::sleep(t.poll).await;
    }
}

/// C18: clock skew injection. Server-time providers keep C02, C05, C07, C15 and C16 intact at
/// any skew (up to an hour). For client-time providers the kit measures the largest skew at
/// which exclusion still holds (reported as the skew bound); a violation is expected beyond it
/// and must be detected, and none may occur below [`Options::documented_skew_bound`].
///
/// [`Options::documented_skew_bound`]: crate::Options::documented_skew_bound
pub async fn c18_clock_skew(suite: &Suite) -> Verdict {
    finish(c18(suite).await)
}

async fn c18(suite: &Suite) -> R {
    let t = suite.timing();
    if suite.capabilities().server_time {
        suite.set_skew_bound(None);
        let skews = suite
            .options()
            .skews
            .clone()
            .unwrap_or_else(|| vec![Duration::from_secs(1), Duration::from_secs(3600)]);
        let mut done = Vec::new();
        for s in &skews {
            done.push(intact_under_skew(suite, *s).await?);
            if let Some(overlap) = probe(suite, *s).await? {
                bail!(
                    "server time declared, but an instance {} ms ahead took a held lock {} ms early",
                    s.as_millis(),
                    overlap.as_millis()
                );
            }
        }
        return Ok(format!("server time: C02, C05, C07, C15, C16 intact at {}", done.join(", ")));
    }
    let ladder =
        suite.options().skews.clone().unwrap_or_else(|| clocks::ladder(t.granularity, t.at_most));
    let mut safe: Option<Duration> = None;
    let mut violation: Option<(Duration, Duration)> = None;
    for s in &ladder {
        match probe(suite, *s).await? {
            None => {
                if violation.is_none() {
                    safe = Some(*s);
                }
            }
            Some(overlap) => {
                if violation.is_none() {
                    violation = Some((*s, overlap));
                }
            }
        }
    }
    let Some((vs, overlap)) = violation else {
        suite.set_skew_bound(None);
        bail!(
            "client time declared, but no violation even with an instance one hour ahead: does the factory give \
             InstanceOptions::clock to the provider?"
        );
    };
    if vs.is_zero() {
        bail!("exclusion broken without any skew: overlap {} ms", overlap.as_millis());
    }
    let bound = safe.unwrap_or(Duration::ZERO);
    suite.set_skew_bound(Some(bound.as_secs_f64() * 1000.0));
    let mut detail = format!(
        "client time: safe up to {} ms skew; violation detected at {} ms skew (holders overlapped {} ms)",
        bound.as_millis(),
        vs.as_millis(),
        overlap.as_millis()
    );
    if let Some(doc) = suite.options().documented_skew_bound {
        if vs < doc {
            bail!(
                "documented skew bound {} ms, but exclusion broke at {} ms skew (overlap {} ms)",
                doc.as_millis(),
                vs.as_millis(),
                overlap.as_millis()
            );
        }
        let tag = intact_under_skew(suite, doc / 2).await?;
        detail.push_str(&format!(
            "; C02, C05, C07, C15, C16 intact at {tag} (documented bound {} ms)",
            doc.as_millis()
        ));
    }
    Ok(detail)
}

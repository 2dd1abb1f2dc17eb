//! C18–C19: time and clocks.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant, UNIX_EPOCH},
};

use shedlock::{LockConfig, LockProvider, LockingExecutor, Schedule, Scheduler, SharedClock};

use super::{
    basic::LONG,
    contention::{Workload, run_workload},
    util::{
        R, bounded, finish, ms, must_lock, must_not_lock, poll_acquire, timed_try_lock, unlock,
    },
};
use crate::{
    factory::InstanceOptions,
    report::Verdict,
    suite::Suite,
    tools::{clocks, history::History},
};

/// Builds instances whose clocks are skewed by `offsets_ms` (one instance per offset).
pub(crate) async fn skewed_instances(
    suite: &Suite,
    offsets_ms: &[i64],
) -> Result<Vec<(Arc<dyn LockProvider>, SharedClock)>, Verdict> {
    let mut v = Vec::new();
    for (i, off) in offsets_ms.iter().enumerate() {
        let clock = clocks::skewed_system_clock(*off);
        let opts = InstanceOptions::new(i).with_clock(clock.clone());
        let p = bounded(suite, "the factory", suite.instance_with(opts)).await?.map_err(|e| {
            Verdict::fail(format!("the factory could not build a skewed instance: {e}"))
        })?;
        v.push((p, clock));
    }
    Ok(v)
}

fn skew_ms(s: Duration) -> i64 {
    i64::try_from(s.as_millis()).unwrap_or(i64::MAX / 4)
}

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

/// The period and cron expression of C19 for granularity `g`: 1 s for `g <= 250 ms`, else
/// the smallest divisor of 60 seconds that is at least `4 g`.
fn scheduler_period(g: Duration) -> (Duration, String) {
    if g <= Duration::from_millis(250) {
        return (Duration::from_secs(1), "* * * * * *".to_owned());
    }
    let want = (g * 4).as_secs().max(2);
    let p = [2u64, 3, 4, 5, 6, 10, 12, 15, 20, 30].into_iter().find(|p| *p >= want).unwrap_or(30);
    (Duration::from_secs(p), format!("*/{p} * * * * *"))
}

type Fires = Arc<Mutex<Vec<(usize, i64)>>>;

/// Runs K schedulers (instance clocks offset by `offsets_ms`) on one name; returns the
/// `(instance, fire label)` of every run.
async fn scheduler_run(
    suite: &Suite,
    offsets_ms: &[i64],
    period: Duration,
    expr: &str,
    run_for: Duration,
) -> Result<Vec<(usize, i64)>, Verdict> {
    let t = suite.timing();
    let at_least = period - (t.granularity * 2).max(Duration::from_millis(200)).min(period / 4);
    let cfg = LockConfig::new(suite.lock_name("c19"), period * 5, at_least)
        .map_err(|e| Verdict::fail(format!("kit config: {e}")))?;
    let insts = skewed_instances(suite, offsets_ms).await?;
    let fires: Fires = Arc::new(Mutex::new(Vec::new()));
    let period_ms = i64::try_from(period.as_millis()).unwrap_or(1000).max(1);
    let mut schedulers = Vec::new();
    for (i, (p, clock)) in insts.into_iter().enumerate() {
        let sched = Scheduler::new(LockingExecutor::new(p)).with_clock(clock.clone());
        let schedule = Schedule::cron(expr).map_err(|e| Verdict::fail(format!("kit cron: {e}")))?;
        let fires = fires.clone();
        sched
            .schedule(schedule, cfg.clone(), move || {
                let now = clock.now();
                let fires = fires.clone();
                async move {
                    let ms =
                        now.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
                    // The fire time this run belongs to: the instance's scheduler fires a tick when
                    // its own clock reaches it (never before, bar a few ms of timer slack), and the
                    // run may start late (acquiring the lock under load), by up to almost a period.
                    // Rounding to the nearest tick instead mislabelled a run started more than half
                    // a period late as the next tick's, a false "ran 2 times".
                    let label = (ms + 50).div_euclid(period_ms);
                    fires.lock().unwrap_or_else(PoisonError::into_inner).push((i, label));
                }
            })
            .map_err(|e| Verdict::fail(format!("scheduling: {e}")))?;
        schedulers.push(sched);
    }
    tokio::time::sleep(run_for).await;
    for s in schedulers {
        s.shutdown().await;
    }
    let v = fires.lock().unwrap_or_else(PoisonError::into_inner).clone();
    Ok(v)
}

fn judge_fires(what: &str, fires: &[(usize, i64)], want: u32) -> Result<String, Verdict> {
    let mut per: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, label) in fires {
        per.entry(*label).or_default().push(*i);
    }
    let (Some((&first, _)), Some((&last, _))) = (per.first_key_value(), per.last_key_value())
    else {
        bail!("{what}: no fire ran at all");
    };
    for (label, who) in &per {
        if who.len() > 1 {
            bail!(
                "{what}: fire time #{} ran {} times (instances {who:?})",
                label - first,
                who.len()
            );
        }
    }
    let missing: Vec<i64> =
        (first..=last).filter(|l| !per.contains_key(l)).map(|l| l - first).collect();
    if !missing.is_empty() {
        bail!("{what}: fire times {missing:?} (counted from the first) never ran");
    }
    let n = per.len() as u32;
    if n < want {
        bail!("{what}: only {n} fire times ran, expected at least {want}");
    }
    let mut by_instance = BTreeMap::new();
    for (i, _) in fires {
        *by_instance.entry(*i).or_insert(0) += 1;
    }
    Ok(format!("{what}: {n} fire times, each once (runs per instance {by_instance:?})"))
}

/// C19: the scheduler case: K instances fire the same cron task every period with
/// `lock_at_least_for` just under the period; every fire time runs exactly once across the fleet
/// (no double run, no gap), without and with injected skew (instance and scheduler clocks both
/// skewed, by less than `lock_at_least_for / 3`). Both runs go concurrently on different names.
pub async fn c19_scheduler_once(suite: &Suite) -> Verdict {
    finish(c19(suite).await)
}

async fn c19(suite: &Suite) -> R {
    let (period, expr) = scheduler_period(suite.capabilities().granularity);
    let k = suite.options().scheduler_instances.max(2);
    let fires = suite.options().scheduler_fires.max(2);
    let run_for = period * fires + period / 2 + period / 4;
    let skew = (period / 4).min(Duration::from_millis(300));
    let s = skew_ms(skew);
    let plain: Vec<i64> = vec![0; k];
    let skewed: Vec<i64> = (0..k).map(|i| [0, s, -s][i % 3]).collect();
    let started = Instant::now();
    let (a, b) = tokio::join!(
        scheduler_run(suite, &plain, period, &expr, run_for),
        scheduler_run(suite, &skewed, period, &expr, run_for)
    );
    let a = judge_fires("no skew", &a?, fires - 1)?;
    let b = judge_fires(&format!("skew ±{} ms", skew.as_millis()), &b?, fires - 1)?;
    Ok(format!("{k} schedulers, cron `{expr}`, {} ms: {a}; {b}", started.elapsed().as_millis()))
}

//! C19 `scheduler_once`: K schedulers: every fire time runs exactly once, with and without skew.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant, UNIX_EPOCH},
};

use shedlock::{LockConfig, LockingExecutor, Schedule, Scheduler};

use super::common::{skew_ms, skewed_instances};
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, finish},
};

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

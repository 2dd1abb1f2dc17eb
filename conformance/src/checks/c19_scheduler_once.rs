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

/// One run: the instance, the fire time it belongs to (as a count of periods since the epoch),
/// and how late it started after that fire time, on its instance's clock.
type Run = (usize, i64, Duration);
type Fires = Arc<Mutex<Vec<Run>>>;

/// C19's `lock_at_least_for`: just under the period (by twice the granularity, at least 200 ms,
/// at most a quarter of the period).
fn scheduler_at_least(suite: &Suite, period: Duration) -> Duration {
    let g = suite.timing().granularity;
    period - (g * 2).max(Duration::from_millis(200)).min(period / 4)
}

/// Runs K schedulers (instance clocks offset by `offsets_ms`) on one name; returns every run.
async fn scheduler_run(
    suite: &Suite,
    offsets_ms: &[i64],
    period: Duration,
    expr: &str,
    run_for: Duration,
) -> Result<Vec<Run>, Verdict> {
    let at_least = scheduler_at_least(suite, period);
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
                // The fire time this run belongs to, as the scheduler says: a run that starts
                // late (acquiring the lock under load) keeps its own fire time. Labelling runs by
                // their start instead mislabelled late ones as the next fire time's.
                let due = shedlock::scheduled_fire_time().unwrap_or(now);
                let late = now.duration_since(due).unwrap_or(Duration::ZERO);
                let fires = fires.clone();
                async move {
                    let ms =
                        due.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
                    let label = (ms + period_ms / 2).div_euclid(period_ms);
                    fires.lock().unwrap_or_else(PoisonError::into_inner).push((i, label, late));
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

fn judge_fires(what: &str, fires: &[Run], want: u32) -> Result<String, Verdict> {
    let mut per: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, label, _) in fires {
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
    for (i, _, _) in fires {
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

/// How many times C19 runs when the machine delays runs too much to judge.
const ATTEMPTS: usize = 3;

async fn c19(suite: &Suite) -> R {
    let (period, expr) = scheduler_period(suite.capabilities().granularity);
    let k = suite.options().scheduler_instances.max(2);
    let fires = suite.options().scheduler_fires.max(2);
    let run_for = period * fires + period / 2 + period / 4;
    let skew = (period / 4).min(Duration::from_millis(300));
    let s = skew_ms(skew);
    let plain: Vec<i64> = vec![0; k];
    let skewed: Vec<i64> = (0..k).map(|i| [0, s, -s][i % 3]).collect();
    let at_least = scheduler_at_least(suite, period);
    // A correct provider can run a fire time twice, or skip one, only when runs start later than
    // this after their fire time: the time lock_at_least_for leaves after the clocks' spread, or
    // before the next fire time. Beyond it the machine, not the provider, may be at fault.
    let slack =
        |spread: Duration| at_least.saturating_sub(spread).min(period.saturating_sub(at_least));
    let started = Instant::now();
    let mut lagged = Vec::new();
    for attempt in 1..=ATTEMPTS {
        let (a, b) = tokio::join!(
            scheduler_run(suite, &plain, period, &expr, run_for),
            scheduler_run(suite, &skewed, period, &expr, run_for)
        );
        let (a, b) = (a?, b?);
        let judged = [
            ("no skew".to_owned(), &a, slack(Duration::ZERO)),
            (format!("skew ±{} ms", skew.as_millis()), &b, slack(skew * 2)),
        ]
        .map(|(what, runs, slack)| {
            let latest = runs.iter().map(|r| r.2).max().unwrap_or_default();
            (judge_fires(&what, runs, fires - 1), latest, slack)
        });
        let failed = judged.iter().find_map(|(verdict, latest, slack)| {
            verdict.as_ref().err().map(|v| (v.clone(), *latest, *slack))
        });
        match failed {
            None => {
                let [(a, ..), (b, ..)] = judged;
                let retried = if attempt > 1 {
                    format!(
                        " (attempt {attempt}: before it, runs started up to {} late)",
                        lagged.join(", ")
                    )
                } else {
                    String::new()
                };
                return Ok(format!(
                    "{k} schedulers, cron `{expr}`, {} ms: {}; {}{retried}",
                    started.elapsed().as_millis(),
                    a?,
                    b?
                ));
            }
            Some((_, latest, slack)) if latest > slack => {
                lagged.push(format!("{} ms (slack {} ms)", latest.as_millis(), slack.as_millis()));
            }
            Some((v, ..)) => return Err(v),
        }
    }
    bail!(
        "inconclusive in all {ATTEMPTS} attempts: the machine started runs up to {} after their \
         fire times, beyond the slack in which a correct provider keeps every fire time once",
        lagged.join(", ")
    )
}

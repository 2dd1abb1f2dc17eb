//! C15 `race_one_winner`: N instances racing for a fresh name: exactly one winner per round.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use shedlock::LockProvider;

use super::common::LONG;
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::{
        calls::{R, bounded, finish, instances, ms},
        history::History,
    },
};

/// C15: rounds of N instances racing for one fresh name: exactly one winner per round.
///
/// In a soak run the rounds race for one reused name instead (each winner releases it before
/// the next round), and every win is recorded in a [`History`] that the history checker
/// examines at the end: the soak figure `acquisitions_checked` then counts only acquisitions the
/// checker really saw, and a release that did not free the name shows as an overlap or a round
/// without a winner.
pub async fn c15_race_one_winner(suite: &Suite) -> Verdict {
    finish(c15(suite).await)
}

async fn c15(suite: &Suite) -> R {
    let o = suite.options();
    let n = o.instances.max(2);
    let p = instances(suite, n).await?;
    let started = Instant::now();
    let soak = suite.soaking();
    let reused = suite.lock_name("c15-soak");
    let history = History::new();
    let mut zero = 0;
    for round in 0..o.race_rounds {
        let name = if soak { reused.clone() } else { suite.lock_name("c15") };
        let cfg = suite.config(&name, LONG, Duration::ZERO)?;
        let barrier = Arc::new(tokio::sync::Barrier::new(n));
        let mut set = tokio::task::JoinSet::new();
        for (i, inst) in p.iter().enumerate() {
            let inst = inst.clone();
            let cfg = cfg.clone();
            let barrier = barrier.clone();
            set.spawn(async move {
                barrier.wait().await;
                let call_start = Instant::now();
                let r = inst.try_lock(&cfg).await;
                (i, r, call_start, Instant::now())
            });
        }
        let joined = bounded(suite, "a race round", async {
            let mut v = Vec::new();
            while let Some(r) = set.join_next().await {
                v.push(r);
            }
            v
        })
        .await?;
        let mut winners = Vec::new();
        for r in joined {
            match r {
                Ok((i, Ok(Some(l)), s, e)) => {
                    let id = history.acquired(format!("instance {i} round {round}"), &cfg, s, e);
                    winners.push((i, l, id));
                }
                Ok((_, Ok(None), _, _)) => {}
                Ok((i, Err(e), _, _)) => {
                    bail!("round {round}: try_lock on instance {i} failed: {e}")
                }
                Err(e) => bail!("round {round}: a racing task panicked: {e}"),
            }
        }
        let who: Vec<usize> = winners.iter().map(|(i, _, _)| *i).collect();
        if who.len() > 1 {
            suite.count_overlap();
        }
        for (_, l, id) in winners {
            let call_start = Instant::now();
            let _ = bounded(suite, "unlock", l.unlock()).await?;
            history.released(id, call_start);
        }
        if who.is_empty() {
            zero += 1;
        }
        ensure!(
            who.len() <= 1,
            "round {round}: {} winners (instances {who:?}) for one {} name",
            who.len(),
            if soak { "released" } else { "fresh" }
        );
    }
    ensure!(
        zero == 0,
        "{zero} of {} rounds had no winner although the name was {}",
        o.race_rounds,
        if soak { "released by the previous round's winner" } else { "fresh" }
    );
    if soak {
        let tol = suite.timing().early;
        history.check(tol).map_err(|o| {
            suite.count_overlap();
            Verdict::fail(format!("two holders of the reused name at once: {o}"))
        })?;
        suite.count_checked(history.len());
        return Ok(format!(
            "{} rounds of {n} instances on one reused name: exactly one winner each, {} \
             acquisitions history-checked with no overlap beyond {} ms ({} ms)",
            o.race_rounds,
            history.len(),
            ms(tol),
            started.elapsed().as_millis()
        ));
    }
    Ok(format!(
        "{} rounds of {n} instances: exactly one winner each ({} ms)",
        o.race_rounds,
        started.elapsed().as_millis()
    ))
}

//! C20 `fencing_monotonic`: fencing tokens strictly increase, across expiry and takeover, and
//! across instances whose clocks disagree.

use std::{sync::Arc, time::Duration};

use shedlock::{Lock, LockConfig, LockProvider};

use super::common::{LONG, fencing_skew, need_fencing, token};
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, finish, instances, must_lock, poll_acquire, timed_try_lock, unlock},
};

/// C20: each successful acquisition carries a token strictly greater than every earlier token
/// for that name, including after expiry and takeover, and when the instances taking turns have
/// clocks an hour ahead and an hour behind (a quarter of `lock_at_most_for` for client-time
/// providers): a token drawn from the acquiring client's clock goes backwards there.
pub async fn c20_fencing_monotonic(suite: &Suite) -> Verdict {
    finish(c20(suite).await)
}

async fn c20(suite: &Suite) -> R {
    need_fencing(suite)?;
    let t = suite.timing();
    let p = instances(suite, 3).await?;
    let name = suite.lock_name("c20");
    let long = suite.config(&name, LONG, Duration::ZERO)?;
    let short = suite.config(&name, t.at_most, Duration::ZERO)?;
    let mut tokens: Vec<(String, u64)> = Vec::new();
    let mut push = |step: &str, tok: u64| -> Result<(), Verdict> {
        if let Some((prev_step, prev)) = tokens.last()
            && tok <= *prev
        {
            return Err(Verdict::fail(format!(
                "token {tok} at '{step}' is not greater than token {prev} at '{prev_step}'"
            )));
        }
        tokens.push((step.to_owned(), tok));
        Ok(())
    };
    // Unlock and relock, on one and on different instances.
    for (i, inst) in [0usize, 0, 1, 2, 1].iter().enumerate() {
        let l = must_lock(suite, &p[*inst], &long, &format!("relock {i}")).await?;
        push(&format!("relock {i} on instance {inst}"), token(&l, "relock")?)?;
        unlock(suite, l).await?;
    }
    // Expiry and takeover.
    let (l, a0, a1) = timed_try_lock(suite, &p[0], &short).await?;
    let Some(l) = l else { return Err(Verdict::fail("try_lock found a free name held")) };
    push("short lock on instance 0", token(&l, "short lock")?)?;
    let deadline = t.at_most + a1.duration_since(a0) + t.slack;
    let (l2, _) = poll_acquire(suite, &p[1], &long, a0, t.at_most, deadline, "takeover").await?;
    push("takeover after expiry on instance 1", token(&l2, "takeover")?)?;
    drop(l);
    unlock(suite, l2).await?;
    // Racing instances.
    for round in 0..5 {
        let winners = race(&p, &long).await?;
        for l in winners {
            push(&format!("race round {round}"), token(&l, "race")?)?;
            unlock(suite, l).await?;
        }
    }
    // Turns and a takeover between an instance ahead and one behind.
    let (skewed, skew, extra) = fencing_skew(suite).await?;
    let tag = format!("skew ±{} ms", skew.as_millis());
    for (i, inst) in [0usize, 1, 0, 1].iter().enumerate() {
        let what = format!("{tag}: turn {i} on the instance {}", ["ahead", "behind"][*inst]);
        let from = std::time::Instant::now();
        let (l, _) = poll_acquire(
            suite,
            &skewed[*inst],
            &long,
            from,
            Duration::ZERO,
            extra + t.slack,
            &what,
        )
        .await?;
        push(&what, token(&l, &what)?)?;
        unlock(suite, l).await?;
    }
    let (l, a0, a1) = timed_try_lock(suite, &skewed[0], &short).await?;
    let Some(l) = l else { bail!("{tag}: the instance ahead found a free name held") };
    push(&format!("{tag}: short lock on the instance ahead"), token(&l, "short lock")?)?;
    let deadline = t.at_most + a1.duration_since(a0) + t.slack + extra;
    let what = format!("{tag}: takeover after expiry by the instance behind");
    let (l2, _) = poll_acquire(suite, &skewed[1], &long, a0, t.at_most, deadline, &what).await?;
    push(&what, token(&l2, "takeover")?)?;
    drop(l);
    unlock(suite, l2).await?;
    let list: Vec<String> = tokens.iter().map(|(_, t)| t.to_string()).collect();
    Ok(format!(
        "{} acquisitions (the last 6 on instances {tag}), tokens strictly increasing: {}",
        tokens.len(),
        list.join(" < ")
    ))
}

/// All instances try at once; returns the winners.
async fn race(p: &[Arc<dyn LockProvider>], cfg: &LockConfig) -> Result<Vec<Lock>, Verdict> {
    let barrier = Arc::new(tokio::sync::Barrier::new(p.len()));
    let mut set = tokio::task::JoinSet::new();
    for inst in p {
        let inst = inst.clone();
        let cfg = cfg.clone();
        let barrier = barrier.clone();
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
            Ok(Err(e)) => return Err(Verdict::fail(format!("try_lock failed during a race: {e}"))),
            Err(e) => return Err(Verdict::fail(format!("try_lock panicked during a race: {e}"))),
        }
    }
    Ok(winners)
}

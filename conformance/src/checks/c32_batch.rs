//! C32 `batch`: `try_lock_many` answers per name what `try_lock` would.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use shedlock::{BatchOptions, ConfigError, Error, Lock, LockConfig, LockProvider};

use super::common::{LONG, token};
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, bounded, finish, instances, must_lock, must_not_lock, poll_acquire, unlock},
};

/// How long before a batch-granted lock's `Lock::valid_until` another instance probes without
/// pausing (as C05 does for `try_lock`): a lease begun at the answer outlives its record.
const DENSE: Duration = Duration::from_millis(5);

/// Instances and names of the concurrent rounds.
const RACERS: usize = 4;
const RACE_NAMES: usize = 8;
const RACE_ROUNDS: usize = 4;
/// Batches dropped mid-flight, at spread points.
const CANCELLED: usize = 8;

/// C32: [`try_lock_many`](shedlock::LockProvider::try_lock_many) answers per name, in the order
/// asked, exactly what `try_lock` of that name would:
///
/// - a batch of free names and a name held elsewhere grants the free ones (not all-or-nothing)
///   and refuses the held one, which stays its holder's; what it granted is held;
/// - a batch naming a lock twice is refused as a whole
///   ([`ConfigError::DuplicateInBatch`]) and takes nothing;
/// - with `fencing`, every name's token rises across batches and single `try_lock`s;
/// - concurrent batches of several instances over overlapping names grant each name exactly
///   once;
/// - a batch-granted lock's lease ends no later than its record (probed densely before
///   `Lock::valid_until`, as in C05: a lease begun at the answer outlives the record), and the
///   lock frees after `lock_at_most_for`;
/// - batches dropped mid-flight leave no name held beyond `lock_at_most_for`, and the provider
///   answers batches afterwards.
pub async fn c32_batch(suite: &Suite) -> Verdict {
    finish(c32(suite).await)
}

type Answers = Vec<shedlock::Result<Option<Lock>>>;

/// `try_lock_many` on `p`, where a hang or an error for the whole batch fails the check.
async fn batch(
    suite: &Suite,
    p: &Arc<dyn LockProvider>,
    configs: &[LockConfig],
    step: &str,
) -> Result<Answers, Verdict> {
    let answers = bounded(suite, "try_lock_many", p.try_lock_many(configs, BatchOptions::new()))
        .await?
        .map_err(|e| Verdict::fail(format!("{step}: try_lock_many failed as a whole: {e}")))?;
    if answers.len() != configs.len() {
        release(suite, answers).await;
        bail!("{step}: a batch of {} names was answered with a different count", configs.len());
    }
    Ok(answers)
}

/// Releases every lock won in `answers` (best effort).
async fn release(suite: &Suite, answers: Answers) {
    for l in answers.into_iter().flatten().flatten() {
        let _ = bounded(suite, "unlock", l.unlock()).await;
    }
}

async fn c32(suite: &Suite) -> R {
    let p = instances(suite, RACERS).await?;
    let parts = [
        partial(suite, &p).await?,
        duplicates(suite, &p).await?,
        fencing(suite, &p).await?,
        race(suite, &p).await?,
        lease(suite, &p).await?,
        cancelled(suite, &p).await?,
    ];
    Ok(parts.into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>().join("; "))
}

/// Free names granted, a held one refused, in order; the grants are held.
async fn partial(suite: &Suite, p: &[Arc<dyn LockProvider>]) -> R {
    let held = suite.config(&suite.lock_name("c32-held"), LONG, Duration::ZERO)?;
    let free_a = suite.config(&suite.lock_name("c32-free-a"), LONG, Duration::ZERO)?;
    let free_b = suite.config(&suite.lock_name("c32-free-b"), LONG, Duration::ZERO)?;
    let holder = must_lock(suite, &p[0], &held, "the holder").await?;
    let configs = [free_a.clone(), held.clone(), free_b.clone()];
    let mut answers = batch(suite, &p[1], &configs, "free, held, free").await?;
    let verdict = match (&answers[0], &answers[1], &answers[2]) {
        (Ok(Some(a)), Ok(None), Ok(Some(b))) if a.name() == free_a.name() && b.name() == free_b.name() => None,
        (_, Ok(Some(_)), _) => Some("granted a name held elsewhere".to_owned()),
        (Ok(None), Ok(None), _) | (_, Ok(None), Ok(None)) => Some(
            "refused a free name beside a held one (a batch must answer in part, never all-or-nothing)"
                .to_owned(),
        ),
        (a, h, b) => Some(format!(
            "answered {}, {}, {} (expected granted, held elsewhere, granted, in the order asked)",
            describe(a),
            describe(h),
            describe(b)
        )),
    };
    if let Some(why) = verdict {
        release(suite, answers).await;
        let _ = bounded(suite, "unlock", holder.unlock()).await;
        bail!("batch [free, held elsewhere, free]: {why}");
    }
    must_not_lock(suite, &p[2], &free_a, "a name the batch granted").await?;
    must_not_lock(suite, &p[2], &free_b, "the other name the batch granted").await?;
    must_not_lock(suite, &p[2], &held, "the held name after the batch").await?;
    for a in answers.drain(..) {
        if let Ok(Some(l)) = a {
            unlock(suite, l).await?;
        }
    }
    unlock(suite, holder).await?;
    Ok("a batch grants its free names and refuses the held one".into())
}

fn describe(a: &shedlock::Result<Option<Lock>>) -> String {
    match a {
        Ok(Some(l)) => format!("granted {:?}", l.name()),
        Ok(None) => "held elsewhere".into(),
        Err(e) => format!("error ({e})"),
    }
}

/// A duplicate name refuses the batch as a whole, holding nothing.
async fn duplicates(suite: &Suite, p: &[Arc<dyn LockProvider>]) -> R {
    let x = suite.config(&suite.lock_name("c32-dup-x"), LONG, Duration::ZERO)?;
    let y = suite.config(&suite.lock_name("c32-dup-y"), LONG, Duration::ZERO)?;
    let configs = [x.clone(), y.clone(), x.clone()];
    match bounded(suite, "try_lock_many", p[1].try_lock_many(&configs, BatchOptions::new())).await?
    {
        Err(Error::InvalidConfig(ConfigError::DuplicateInBatch { name })) if name == x.name() => {}
        Err(e) => bail!(
            "a batch naming a lock twice: expected DuplicateInBatch for {:?}, got {e}",
            x.name()
        ),
        Ok(answers) => {
            release(suite, answers).await;
            bail!("a batch naming a lock twice was answered instead of refused");
        }
    }
    for (cfg, what) in [(&x, "the duplicated name"), (&y, "the other name")] {
        let l = must_lock(suite, &p[2], cfg, &format!("{what} after the refused batch")).await?;
        unlock(suite, l).await?;
    }
    Ok("a duplicate name refuses the batch, which takes nothing".into())
}

/// With fencing: tokens rise per name across batches and single `try_lock`s.
async fn fencing(suite: &Suite, p: &[Arc<dyn LockProvider>]) -> R {
    if !suite.capabilities().fencing {
        return Ok(String::new());
    }
    let names = [suite.lock_name("c32-f1"), suite.lock_name("c32-f2")];
    let configs: Vec<LockConfig> =
        names.iter().map(|n| suite.config(n, LONG, Duration::ZERO)).collect::<Result<_, _>>()?;
    let mut last: HashMap<&str, (u64, String)> = HashMap::new();
    for round in 0..4 {
        let step = format!("round {round}");
        let mut locks = Vec::new();
        if round % 2 == 1 {
            // A single try_lock in between: one sequence per name, whatever the call.
            locks.push(must_lock(suite, &p[round % p.len()], &configs[0], &step).await?);
            locks.push(must_lock(suite, &p[round % p.len()], &configs[1], &step).await?);
        } else {
            for a in batch(suite, &p[round % p.len()], &configs, &step).await? {
                match a {
                    Ok(Some(l)) => locks.push(l),
                    other => bail!("{step}: a free name was answered {}", describe(&other)),
                }
            }
        }
        for l in locks {
            let tok = token(&l, &step)?;
            let name = names.iter().find(|n| n.as_str() == l.name()).map_or("", String::as_str);
            if let Some((prev, at)) = last.get(name)
                && tok <= *prev
            {
                let _ = bounded(suite, "unlock", l.unlock()).await;
                bail!("{step}: token {tok} of {name:?} is not above its token {prev} of {at}");
            }
            last.insert(name, (tok, step.clone()));
            unlock(suite, l).await?;
        }
    }
    Ok("tokens rise per name across batches and try_locks".into())
}

/// Concurrent batches of several instances over overlapping names: one winner per name.
async fn race(suite: &Suite, p: &[Arc<dyn LockProvider>]) -> R {
    let mut rng = suite.rng();
    for round in 0..RACE_ROUNDS {
        let names: Vec<String> =
            (0..RACE_NAMES).map(|i| suite.lock_name(&format!("c32-race{round}-{i}"))).collect();
        let mut tasks = Vec::new();
        let mut picked: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        for inst in p.iter().take(RACERS) {
            // Each asks for a random five of the eight, in a random order.
            let mut pick = names.clone();
            rng.shuffle(&mut pick);
            pick.truncate(5);
            picked.extend(pick.iter().cloned());
            let configs: Vec<LockConfig> = pick
                .iter()
                .map(|n| suite.config(n, LONG, Duration::ZERO))
                .collect::<Result<_, _>>()?;
            let inst = Arc::clone(inst);
            tasks.push(tokio::spawn(async move {
                inst.try_lock_many(&configs, BatchOptions::new()).await
            }));
        }
        let mut won: HashMap<String, usize> = HashMap::new();
        let mut locks = Vec::new();
        let mut failure = None;
        for task in tasks {
            match bounded(suite, "try_lock_many", task).await? {
                Ok(Ok(answers)) => {
                    for a in answers {
                        match a {
                            Ok(Some(l)) => {
                                *won.entry(l.name().to_owned()).or_default() += 1;
                                locks.push(l);
                            }
                            Ok(None) => {}
                            Err(e) => {
                                failure = Some(format!("a name was answered with an error: {e}"))
                            }
                        }
                    }
                }
                Ok(Err(e)) => failure = Some(format!("a batch failed as a whole: {e}")),
                Err(e) => failure = Some(format!("a batch task panicked: {e}")),
            }
        }
        for l in locks {
            let _ = bounded(suite, "unlock", l.unlock()).await;
        }
        if let Some(why) = failure {
            bail!("round {round} of concurrent batches: {why}");
        }
        let twice: Vec<&String> = won.iter().filter(|(_, n)| **n > 1).map(|(k, _)| k).collect();
        ensure!(
            twice.is_empty(),
            "round {round}: concurrent batches granted {twice:?} to more than one instance"
        );
        // Every name some batch asked for was free: someone must have won it.
        let unwon: Vec<&String> = picked.iter().filter(|n| !won.contains_key(*n)).collect();
        ensure!(
            unwon.is_empty(),
            "round {round}: free names {unwon:?} were asked for by concurrent batches and won by none"
        );
    }
    Ok(format!(
        "{RACE_ROUNDS} rounds of {RACERS} concurrent overlapping batches: one winner per name"
    ))
}

/// A batch-granted lease ends no later than its record, and the lock frees after at-most.
async fn lease(suite: &Suite, p: &[Arc<dyn LockProvider>]) -> R {
    let t = suite.timing();
    let first = suite.config(&suite.lock_name("c32-lease-1"), t.at_most, Duration::ZERO)?;
    let second = suite.config(&suite.lock_name("c32-lease-2"), t.at_most, Duration::ZERO)?;
    let a0 = Instant::now();
    let mut answers = batch(suite, &p[0], &[first.clone(), second.clone()], "lease").await?;
    let Some(Ok(Some(l))) = answers.drain(..1).next() else {
        release(suite, answers).await;
        bail!("lease: a free name was not granted");
    };
    let valid_until = l.valid_until().into_std();
    tokio::time::sleep_until(valid_until.checked_sub(DENSE).unwrap_or(valid_until).into()).await;
    while Instant::now() < valid_until {
        let r = bounded(suite, "try_lock", p[1].try_lock(&first))
            .await?
            .map_err(|e| Verdict::fail(format!("lease: try_lock failed: {e}")))?;
        let b1 = Instant::now();
        if let Some(taken) = r {
            let _ = bounded(suite, "unlock", taken.unlock()).await;
            if b1 < valid_until {
                release(suite, answers).await;
                bail!(
                    "another instance took a batch-granted name at +{} µs, before the holder's \
                     Lock::valid_until at +{} µs: its lease outlived its record (begun at the \
                     answer instead of before the request?)",
                    b1.duration_since(a0).as_micros(),
                    valid_until.duration_since(a0).as_micros()
                );
            }
            break;
        }
    }
    drop(l);
    drop(answers); // the second name expires on its own
    let (l2, _) = poll_acquire(
        suite,
        &p[1],
        &second,
        a0,
        t.at_most,
        t.at_most + t.slack + a0.elapsed().saturating_sub(t.at_most),
        "a batch-granted lock's expiry",
    )
    .await?;
    unlock(suite, l2).await?;
    Ok("batch leases end no later than their records".into())
}

/// Batches dropped mid-flight leave nothing held beyond at-most.
async fn cancelled(suite: &Suite, p: &[Arc<dyn LockProvider>]) -> R {
    let t = suite.timing();
    let mut rng = suite.rng();
    let mut names = Vec::new();
    let mut mid_flight = 0;
    // What a batch of four takes here: the drops are spread over up to one and a half of that,
    // two thirds of it after each batch that completed anyway (the first one opened
    // connections).
    let probe: Vec<LockConfig> = (0..4)
        .map(|k| {
            suite.config(&suite.lock_name(&format!("c32-time-{k}")), t.at_most, Duration::ZERO)
        })
        .collect::<Result<_, _>>()?;
    let began = Instant::now();
    release(suite, batch(suite, &p[0], &probe, "a timed batch").await?).await;
    let mut typical = u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX).max(20);
    for i in 0..CANCELLED {
        let configs: Vec<LockConfig> = (0..4)
            .map(|k| {
                suite.config(
                    &suite.lock_name(&format!("c32-cancel{i}-{k}")),
                    t.at_most,
                    Duration::ZERO,
                )
            })
            .collect::<Result<_, _>>()?;
        names.extend(configs.iter().cloned());
        let call = p[i % p.len()].try_lock_many(&configs, BatchOptions::new());
        // Half are dropped after a few polls (a loopback round trip takes less than tokio's
        // 1 ms timer), half after a time within what a batch takes.
        let polls = rng.u32(1..=12);
        let micros = rng.u64(0..=typical.saturating_mul(3) / 2);
        let answer = if i % 2 == 0 {
            tokio::select! {
                biased;
                () = async { for _ in 0..polls { tokio::task::yield_now().await; } } => None,
                r = call => Some(r),
            }
        } else {
            tokio::time::timeout(Duration::from_micros(micros), call).await.ok()
        };
        match answer {
            Some(Ok(answers)) => {
                // Completed: its locks are left to expire, and the next drop comes sooner.
                drop(answers);
                typical = (typical * 2 / 3).max(20);
            }
            Some(Err(e)) => bail!("a batch failed as a whole: {e}"),
            None => mid_flight += 1,
        }
    }
    let last = Instant::now();
    for cfg in &names {
        let (l, _) = poll_acquire(
            suite,
            &p[0],
            cfg,
            last,
            Duration::ZERO,
            t.at_most + t.slack,
            "after dropped batches",
        )
        .await?;
        unlock(suite, l).await?;
    }
    let after = batch(suite, &p[1], &names[..2], "a batch after dropped ones").await?;
    ensure!(
        after.iter().all(|a| matches!(a, Ok(Some(_)))),
        "a batch after dropped ones did not grant its free names"
    );
    release(suite, after).await;
    Ok(format!(
        "{CANCELLED} dropped batches ({mid_flight} mid-flight) left nothing held past lock_at_most_for"
    ))
}

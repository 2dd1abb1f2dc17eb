//! C27 `hostile_names`: hostile and edge names work or give InvalidName, never collide.

use std::time::Duration;

use shedlock::{Error, Lock, LockConfig, LockProvider};

use super::common::LONG;
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, bounded, finish, instances, must_not_lock, unlock},
};

/// C27: hostile and edge names: unicode, quotes, `;`, `--`, `%`, `_`, `*`, `/`, `..`, spaces,
/// newlines, NUL; the longest name the backend allows (accepted) and one past it (a typed
/// [`Error::InvalidName`], never truncation into a collision). Every accepted name must lock
/// independently of every other.
pub async fn c27_hostile_names(suite: &Suite) -> Verdict {
    finish(c27(suite).await)
}

async fn c27(suite: &Suite) -> R {
    let p = instances(suite, 2).await?;
    let base = suite.lock_name("c27");
    let suffixes = [
        "plain",
        "zürich-任务-🔒",
        "it's",
        "say \"hi\"",
        "a;b",
        "a; DROP TABLE shedlock; --",
        "--",
        "100%",
        "a",
        "a%",
        "a_",
        "a*",
        "a?",
        "a/b",
        "../..",
        "with space",
        "a ",
        "line\nbreak",
        "tab\there",
        "nul\0byte",
        "nul",
        "back\\slash",
        "{curly}[square]",
        "$dollar",
        "#hash",
        ":colon",
        "A%",
        "PLAIN",
    ];
    let mut names: Vec<String> = suffixes.iter().map(|s| format!("{base}-{s}")).collect();
    names.push(format!("{base}-"));
    let mut rejected = Vec::new();
    let mut held: Vec<(String, Lock)> = Vec::new();
    // Take every name at once: they must all be independent.
    for n in &names {
        let cfg = match LockConfig::new(n.clone(), LONG, Duration::ZERO) {
            Ok(c) => c,
            Err(e) => bail!("kit config for {n:?}: {e}"),
        };
        match bounded(suite, "try_lock", p[0].try_lock(&cfg)).await? {
            Ok(Some(l)) => held.push((n.clone(), l)),
            Ok(None) => {
                let others: Vec<&String> = held.iter().map(|(h, _)| h).collect();
                bail!(
                    "{n:?} was reported held while only these other names were: {others:?} (a collision)"
                );
            }
            Err(Error::InvalidName { .. }) => rejected.push(n.clone()),
            Err(e) => bail!("{n:?} gave an untyped error {e} (expected success or InvalidName)"),
        }
    }
    // Each held name excludes the other instance.
    for (n, _) in &held {
        let cfg = suite.config(n, LONG, Duration::ZERO)?;
        must_not_lock(suite, &p[1], &cfg, &format!("{n:?} from another instance")).await?;
    }
    let accepted = held.len();
    for (_, l) in held {
        unlock(suite, l).await?;
    }
    // Length limits.
    let max_detail = match suite.capabilities().max_name_len {
        Some(max) => {
            let exact = pad(&suite.lock_name("c27-max"), max);
            if exact.len() != max {
                bail!("the run's name prefix is longer than max_name_len {max}");
            }
            let cfg = suite.config(&exact, LONG, Duration::ZERO)?;
            let l = match bounded(suite, "try_lock", p[0].try_lock(&cfg)).await? {
                Ok(Some(l)) => l,
                Ok(None) => {
                    bail!("a fresh name of exactly max_name_len = {max} bytes was reported held")
                }
                Err(e) => bail!("a name of exactly max_name_len = {max} bytes was refused: {e}"),
            };
            must_not_lock(suite, &p[1], &cfg, "max-length name from another instance").await?;
            unlock(suite, l).await?;
            let over = format!("{exact}x");
            let cfg = suite.config(&over, LONG, Duration::ZERO)?;
            match bounded(suite, "try_lock", p[0].try_lock(&cfg)).await? {
                Err(Error::InvalidName { .. }) => {}
                Ok(Some(l)) => {
                    let _ = bounded(suite, "unlock", l.unlock()).await?;
                    bail!(
                        "a name of max_name_len + 1 = {} bytes was accepted (expected InvalidName)",
                        max + 1
                    );
                }
                Ok(None) => bail!(
                    "a fresh name of max_name_len + 1 bytes was reported held (truncated into a collision?)"
                ),
                Err(e) => bail!("a name of max_name_len + 1 bytes gave {e} (expected InvalidName)"),
            }
            format!("{max}-byte name accepted, {}-byte name refused with InvalidName", max + 1)
        }
        None => {
            // "Unlimited": two long names differing only in their last byte must not collide.
            let long = pad(&suite.lock_name("c27-long"), 2048);
            let a = suite.config(&format!("{long}a"), LONG, Duration::ZERO)?;
            let b = suite.config(&format!("{long}b"), LONG, Duration::ZERO)?;
            let la = match bounded(suite, "try_lock", p[0].try_lock(&a)).await? {
                Ok(Some(l)) => l,
                Ok(None) => bail!("a fresh 2049-byte name was reported held"),
                Err(e) => bail!("a 2049-byte name failed although max_name_len is unlimited: {e}"),
            };
            let lb = match bounded(suite, "try_lock", p[1].try_lock(&b)).await? {
                Ok(Some(l)) => l,
                Ok(None) => {
                    bail!("two 2049-byte names differing in the last byte collided (truncation)")
                }
                Err(e) => bail!("a 2049-byte name failed although max_name_len is unlimited: {e}"),
            };
            unlock(suite, la).await?;
            unlock(suite, lb).await?;
            "2049-byte names accepted and distinct (no truncation)".to_owned()
        }
    };
    let rej = if rejected.is_empty() {
        String::new()
    } else {
        format!("; rejected with InvalidName: {rejected:?}")
    };
    Ok(format!(
        "{accepted} of {} hostile names locked independently; {max_detail}{rej}",
        names.len()
    ))
}

/// `prefix` padded with `x` to `len` bytes (or `prefix` if longer).
fn pad(prefix: &str, len: usize) -> String {
    let mut s = prefix.to_owned();
    while s.len() < len {
        s.push('x');
    }
    s
}

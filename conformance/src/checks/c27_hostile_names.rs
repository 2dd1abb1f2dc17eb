//! C27 `hostile_names`: hostile and edge names work or give InvalidName, never collide; names
//! that a normalising, hashing or truncating provider would merge stay two locks.

use std::time::Duration;

use shedlock::{Error, Lock, LockConfig, LockProvider};

use super::common::LONG;
use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::{
        calls::{R, bounded, finish, instances, must_not_lock, unlock},
        names::{EQUIVALENT_SPELLINGS, Hash32, colliding_pair, escape_merges},
    },
};

/// C27: hostile and edge names: unicode, quotes, `;`, `--`, `%`, `_`, `*`, `/`, `..`, spaces,
/// newlines, NUL; the longest name the backend allows (accepted) and one past it (a typed
/// [`Error::InvalidName`], never truncation into a collision). Every accepted name must lock
/// independently of every other.
///
/// Keys are injective: for each pair of [`escape_merges`](crate::tools::names::escape_merges)
/// (`a/b` and `a%2Fb`, `a%2Fb` and `a%2fb`, a marker doubled and not, hex against raw, names a
/// delimiter joins, upper and lower case, a trailing marker; for every common escape marker),
/// both names are held at once, and a release of one leaves the other held.
///
/// Name identity, byte for byte: names that are one text under Unicode normalisation (NFC/NFD,
/// compatibility characters) or case folding, and pairs with equal 32-bit hashes under CRC-32,
/// FNV-1a, Java's `String.hashCode`, PostgreSQL's `hashtext` and MurmurHash3 (searched for this
/// run's prefix), must each be two locks. `max_name_len` counts bytes: a name of exactly that
/// many bytes ending in multi-byte characters is accepted and independent of one that differs in
/// its last character only, and one byte more is refused although it has fewer characters.
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
        match take(suite, &p[0], n).await? {
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
    let identity = identity(suite, &p, &base).await?;
    let escapes = escapes(suite, &p, &base).await?;
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
            let multi_byte = multi_byte_limit(suite, &p, max).await?;
            format!(
                "{max}-byte name accepted, {}-byte name refused with InvalidName; {multi_byte}",
                max + 1
            )
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
            // The same with multi-byte characters: a limit counted in characters and cut in
            // bytes (or the reverse) would merge these.
            let long =
                format!("{}{}", pad(&suite.lock_name("c27-long-mb"), 1024), "\u{e9}".repeat(512));
            let what = "two 2052-byte names of multi-byte characters differing in the last one";
            match apart(suite, &p, &format!("{long}\u{1f512}"), &format!("{long}\u{1f511}"), what)
                .await?
            {
                Apart::Held => {}
                Apart::Rejected(e) => {
                    bail!("{what}: refused although max_name_len is unlimited: {e}")
                }
            }
            "2049-byte names accepted and distinct (no truncation); so are 2052-byte names of \
             multi-byte characters"
                .to_owned()
        }
    };
    let rej = if rejected.is_empty() {
        String::new()
    } else {
        format!("; rejected with InvalidName: {rejected:?}")
    };
    Ok(format!(
        "{accepted} of {} hostile names locked independently; {identity}; {escapes}; \
         {max_detail}{rej}",
        names.len()
    ))
}

/// What [`apart`] found.
enum Apart {
    /// Both names were held at once, by two instances.
    Held,
    /// The provider refused one of them with InvalidName (allowed: it never merges them).
    Rejected(Error),
}

/// Takes `a` on one instance and then `b` on another: both must be granted (two locks), or
/// either refused with InvalidName. `b` reported held while only `a` is means the provider
/// made them one lock.
async fn apart(
    suite: &Suite,
    p: &[std::sync::Arc<dyn LockProvider>],
    a: &str,
    b: &str,
    what: &str,
) -> Result<Apart, Verdict> {
    let la = match take(suite, &p[0], a).await? {
        Ok(Some(l)) => l,
        Ok(None) => bail!("{what}: {a:?}, a fresh name, was reported held"),
        Err(e @ Error::InvalidName { .. }) => return Ok(Apart::Rejected(e)),
        Err(e) => {
            bail!("{what}: {a:?} gave an untyped error {e} (expected success or InvalidName)")
        }
    };
    let lb = match take(suite, &p[1], b).await? {
        Ok(Some(l)) => l,
        Ok(None) => {
            unlock(suite, la).await?;
            bail!(
                "{what}: {b:?} was reported held while only {a:?} was: the provider made two \
                 names one lock"
            )
        }
        Err(e @ Error::InvalidName { .. }) => {
            unlock(suite, la).await?;
            return Ok(Apart::Rejected(e));
        }
        Err(e) => {
            bail!("{what}: {b:?} gave an untyped error {e} (expected success or InvalidName)")
        }
    };
    // A release of one leaves the other held.
    unlock(suite, la).await?;
    let cfg = suite.config(b, LONG, Duration::ZERO)?;
    must_not_lock(suite, &p[0], &cfg, &format!("{what}: {b:?} after {a:?} was released")).await?;
    unlock(suite, lb).await?;
    Ok(Apart::Held)
}

/// The pairs of [`escape_merges`]: each two locks, and a release of one never frees the other.
async fn escapes(suite: &Suite, p: &[std::sync::Arc<dyn LockProvider>], base: &str) -> R {
    let pairs = escape_merges();
    let (mut kept, mut refused) = (0, 0);
    for (i, (why, a, b)) in pairs.iter().enumerate() {
        let (a, b) = (format!("{base}-e{i}-{a}"), format!("{base}-e{i}-{b}"));
        match apart(suite, p, &a, &b, why).await? {
            Apart::Held => kept += 1,
            Apart::Rejected(_) => refused += 1,
        }
    }
    let refused =
        if refused == 0 { String::new() } else { format!(" ({refused} refused with InvalidName)") };
    Ok(format!(
        "{kept} of {} pairs that a non-injective escaping merges kept apart, a release of one \
         leaving the other held{refused}",
        pairs.len()
    ))
}

/// `try_lock` of `name` (a long lease), bounded; the provider's answer as it is.
async fn take(
    suite: &Suite,
    p: &std::sync::Arc<dyn LockProvider>,
    name: &str,
) -> Result<shedlock::Result<Option<Lock>>, Verdict> {
    let cfg = LockConfig::new(name.to_owned(), LONG, Duration::ZERO)
        .map_err(|e| Verdict::fail(format!("kit config for {name:?}: {e}")))?;
    bounded(suite, "try_lock", p.try_lock(&cfg)).await
}

/// Names equal under normalisation or folding, and names with equal 32-bit hashes: each pair
/// two locks.
async fn identity(suite: &Suite, p: &[std::sync::Arc<dyn LockProvider>], base: &str) -> R {
    let mut kept = 0;
    let mut refused = Vec::new();
    for (i, (why, a, b)) in EQUIVALENT_SPELLINGS.iter().enumerate() {
        let (a, b) = (format!("{base}-u{i}-{a}"), format!("{base}-u{i}-{b}"));
        match apart(suite, p, &a, &b, why).await? {
            Apart::Held => kept += 1,
            Apart::Rejected(_) => refused.push(*why),
        }
    }
    let mut hashes = Vec::new();
    for hash in Hash32::ALL {
        let prefix = format!("{base}-h-");
        // About 80 000 names on average for a 32-bit hash; off the async threads.
        let search = tokio::task::spawn_blocking(move || colliding_pair(hash, &prefix, 4_000_000));
        let Ok(Some((a, b))) = search.await else {
            bail!("the kit found no {} collision for this run's prefix (a kit bug)", hash.label())
        };
        let what = format!("names with equal {} ({:#010x})", hash.label(), hash.of(&a));
        match apart(suite, p, &a, &b, &what).await? {
            Apart::Held => hashes.push(hash.label()),
            Apart::Rejected(e) => bail!("{what}: {a:?} / {b:?} refused ({e}), an ordinary name"),
        }
    }
    let refused = if refused.is_empty() {
        String::new()
    } else {
        format!(" ({} refused with InvalidName: {refused:?})", refused.len())
    };
    Ok(format!(
        "{kept} of {} pairs equal under Unicode normalisation or case folding kept apart{refused}; \
         names colliding under {} kept apart",
        EQUIVALENT_SPELLINGS.len(),
        hashes.join(", ")
    ))
}

/// `max_name_len` counted in bytes with multi-byte characters: exactly `max` bytes ending in a
/// 4-byte character accepted and independent of its sibling; `max + 1` bytes (fewer characters)
/// refused.
async fn multi_byte_limit(suite: &Suite, p: &[std::sync::Arc<dyn LockProvider>], max: usize) -> R {
    let prefix = suite.lock_name("c27-mb");
    if prefix.len() + 4 > max {
        return Ok("multi-byte limit not probed (max_name_len leaves no room)".to_owned());
    }
    let stem = pad(&prefix, max - 4);
    let what = format!("two {max}-byte names ending in different 4-byte characters");
    match apart(suite, p, &format!("{stem}\u{1f512}"), &format!("{stem}\u{1f511}"), &what).await? {
        Apart::Held => {}
        Apart::Rejected(e) => bail!("{what}: refused although within max_name_len = {max}: {e}"),
    }
    let over = format!("{}\u{1f512}", pad(&prefix, max - 3));
    let chars = over.chars().count();
    let cfg = suite.config(&over, LONG, Duration::ZERO)?;
    match bounded(suite, "try_lock", p[0].try_lock(&cfg)).await? {
        Err(Error::InvalidName { .. }) => {}
        Ok(Some(l)) => {
            unlock(suite, l).await?;
            bail!(
                "a name of {} bytes ({chars} characters) was accepted: max_name_len = {max} must \
                 count bytes, not characters",
                max + 1
            )
        }
        Ok(None) => bail!(
            "a fresh name of {} bytes ({chars} characters) was reported held: cut into a \
             collision?",
            max + 1
        ),
        Err(e) => bail!("a name of {} bytes gave {e} (expected InvalidName)", max + 1),
    }
    Ok(format!(
        "{max} bytes ending in a 4-byte character accepted and apart from its sibling, {} bytes \
         ({chars} characters) refused",
        max + 1
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

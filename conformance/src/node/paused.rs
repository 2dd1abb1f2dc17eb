//! C29's node: a holder that works under its lock, is frozen past its lease, and must find the
//! lease ended before any further write.

use std::{path::PathBuf, time::Duration};

use serde::{Deserialize, Serialize};
use shedlock::{BoxError, LockConfig};

use crate::factory::{InstanceOptions, ProviderFactory};

use super::{NodeSpec, monotonic_ns, on_monotonic};

/// What a C29 node does: takes [`name`](Self::name) for `at_most_ms`, tells the parent (the
/// file [`ready`](Self::ready), a [`HolderReady`]), then "writes to the fenced resource" every
/// few milliseconds for as long as its lock says the lease is valid (`Lock::valid_until` not
/// passed, its lost signal not fired), checking before each write. The parent freezes it
/// (SIGSTOP) beyond the lease, lets another instance take the name, and resumes it (SIGCONT).
/// Once the node finds its lease ended it makes one more write on purpose (which a fenced
/// resource must refuse), extends and unlocks, and reports a [`HolderLog`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PausedHolder {
    /// The name to hold.
    pub name: String,
    /// Where to write [`HolderReady`] once the lock is held.
    pub ready: PathBuf,
    /// How long the node works before it gives up waiting for its lease to end.
    pub give_up_ms: u64,
}

/// A C29 node holds its lock ([`PausedHolder::ready`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HolderReady {
    /// The fencing token of the acquisition.
    pub token: Option<u64>,
    /// The lease's end as the lock stated it, on the host's monotonic clock.
    pub valid_until_ns: u64,
}

/// One write of a C29 node: when it checked its lease (and found it valid) and when the write
/// was made, on the host's monotonic clock. A pause between the two is the race fencing
/// tokens exist for.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct HolderWrite {
    /// When the node checked its lease.
    pub checked_ns: u64,
    /// When it wrote.
    pub written_ns: u64,
}

/// What a C29 node reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HolderLog {
    /// The fencing token of its acquisition.
    pub token: Option<u64>,
    /// Its writes while it believed it held the lock.
    pub writes: Vec<HolderWrite>,
    /// When it found its lease ended (`None`: it never did, within `give_up_ms`).
    pub saw_end_ns: Option<u64>,
    /// Whether the lock's lost signal had fired by then.
    pub lost_signal: bool,
    /// When it made its one write after finding the lease ended (to be refused by fencing).
    pub stale_write_ns: Option<u64>,
    /// What its extend answered afterwards: `lost`, `extended` or the error.
    pub extend: String,
    /// What its unlock answered afterwards: `ok` or the error.
    pub unlock: String,
}

/// C29's node: see [`PausedHolder`].
pub(crate) async fn run_paused_holder(
    factory: &impl ProviderFactory,
    spec: &NodeSpec,
    holder: &PausedHolder,
) -> Result<HolderLog, BoxError> {
    let p = factory.create(InstanceOptions::new(spec.index)).await?;
    let at_most = Duration::from_millis(spec.at_most_ms);
    let cfg = LockConfig::new(holder.name.clone(), at_most, Duration::ZERO)?;
    let give_up = monotonic_ns() + holder.give_up_ms * 1_000_000;
    let lock = loop {
        if let Some(lock) = p.try_lock(&cfg).await? {
            break lock;
        }
        if monotonic_ns() > give_up {
            return Err(format!("{} stayed held by someone else", holder.name).into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let lost = lock.lost_signal();
    let mut log = HolderLog { token: lock.fencing_token(), ..HolderLog::default() };
    let ready = HolderReady {
        token: log.token,
        valid_until_ns: on_monotonic(lock.valid_until().into_std()),
    };
    // Written whole, then renamed: the parent never reads half a file.
    let partial = holder.ready.with_extension("partial");
    std::fs::write(&partial, serde_json::to_vec(&ready)?)?;
    std::fs::rename(&partial, &holder.ready)?;
    loop {
        let checked_ns = monotonic_ns();
        if tokio::time::Instant::now() >= lock.valid_until() || lost.is_lost() {
            log.saw_end_ns = Some(checked_ns);
            log.lost_signal = lost.is_lost();
            break;
        }
        log.writes.push(HolderWrite { checked_ns, written_ns: monotonic_ns() });
        if checked_ns > give_up {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    log.stale_write_ns = Some(monotonic_ns());
    let mut lock = lock;
    log.extend = match lock.extend(at_most, Duration::ZERO).await {
        Ok(()) => "extended".to_owned(),
        Err(shedlock::Error::LockLost { .. }) => "lost".to_owned(),
        Err(e) => format!("error: {e}"),
    };
    log.unlock = match lock.unlock().await {
        Ok(()) => "ok".to_owned(),
        Err(e) => format!("error: {e}"),
    };
    Ok(log)
}

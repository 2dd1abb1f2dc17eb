//! Clock helpers for skew injection: skewed clocks in one process (built on core's
//! [`SkewedClock`]), and real per-process skew with libfaketime, as C28 runs its node processes
//! ([`libfaketime`], [`skewed_process`]) — for an author who wants to show a skew case of their
//! own.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
    time::Duration,
};

use shedlock::{SharedClock, SkewedClock, system_clock};

use crate::node::{RUN_ID_ENV, run_id};

/// The environment variable that overrides where libfaketime's multi-threaded library is.
pub const LIBFAKETIME_ENV: &str = "SHEDLOCK_LIBFAKETIME";

const LIBFAKETIME_PATHS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
];

/// What to do when [`libfaketime`] finds nothing.
pub const LIBFAKETIME_INSTALL_HINT: &str = "libfaketime is not installed: `apt-get install \
    libfaketime` (Debian, Ubuntu; `cargo xtask provision` does it), or set SHEDLOCK_LIBFAKETIME \
    to libfaketimeMT.so.1";

/// libfaketime's multi-threaded library (`libfaketimeMT.so.1`), to preload into a process whose
/// wall clock should be skewed: [`LIBFAKETIME_ENV`] if set, else the first of the usual Debian,
/// Ubuntu and `/usr/local` paths that exists. `None`: not installed (see
/// [`LIBFAKETIME_INSTALL_HINT`]).
pub fn libfaketime() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(LIBFAKETIME_ENV).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    LIBFAKETIME_PATHS.iter().map(PathBuf::from).find(|p| p.is_file())
}

/// A command running `exe` with its wall clock skewed by libfaketime (`lib`, from
/// [`libfaketime`]) as `faketime` says, in libfaketime's `FAKETIME` syntax (`"+1h"`, `"-30s"`,
/// `"+0 x1.01"` for a clock running 1 % fast). The monotonic clock is left alone
/// (`FAKETIME_DONT_FAKE_MONOTONIC=1`), so [`monotonic_ns`](crate::node) stays comparable
/// across processes, and the child inherits this run's [`run_id`]. C28 starts its node
/// processes this way; add the node's own environment and spawn it.
pub fn skewed_process(exe: &Path, lib: &Path, faketime: &str) -> Command {
    let mut cmd = Command::new(exe);
    cmd.env(RUN_ID_ENV, run_id())
        .env("LD_PRELOAD", lib)
        .env("FAKETIME", faketime)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    cmd
}

/// A system clock `skew_ms` milliseconds ahead (positive) or behind (negative).
pub fn skewed_system_clock(skew_ms: i64) -> SharedClock {
    Arc::new(SkewedClock::by_millis(system_clock(), skew_ms))
}

/// A system clock `skew` ahead.
pub fn ahead(skew: Duration) -> SharedClock {
    Arc::new(SkewedClock::ahead(system_clock(), skew))
}

/// A system clock `skew` behind.
pub fn behind(skew: Duration) -> SharedClock {
    Arc::new(SkewedClock::behind(system_clock(), skew))
}

/// The skew ladder for granularity `g` and short lock `at_most`: zero, then values from a few
/// milliseconds up to several `at_most`, then one hour.
pub fn ladder(g: Duration, at_most: Duration) -> Vec<Duration> {
    let g = g.max(Duration::from_millis(1));
    let mut v = vec![
        Duration::ZERO,
        g * 2,
        g * 5 + Duration::from_millis(10),
        at_most / 8,
        at_most / 3,
        at_most,
        at_most * 3,
        Duration::from_secs(3600),
    ];
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    #[test]
    fn skewed_clocks_are_offset() {
        let now = SystemTime::now();
        let a = ahead(Duration::from_secs(3600)).now();
        let b = behind(Duration::from_secs(3600)).now();
        assert!(a.duration_since(now).unwrap() >= Duration::from_secs(3599));
        assert!(now.duration_since(b).unwrap() >= Duration::from_secs(3599));
        let c = skewed_system_clock(-500).now();
        assert!(now.duration_since(c).unwrap() >= Duration::from_millis(490));
    }

    #[test]
    fn ladder_is_sorted_and_starts_at_zero() {
        let l = ladder(Duration::from_millis(1), Duration::from_millis(300));
        assert_eq!(l[0], Duration::ZERO);
        assert!(l.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(*l.last().unwrap(), Duration::from_secs(3600));
    }
}

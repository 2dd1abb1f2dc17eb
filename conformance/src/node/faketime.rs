//! libfaketime: where its library is, and a node process started under a skewed clock.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use super::{RUN_ID_ENV, run_id};

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
/// (`FAKETIME_DONT_FAKE_MONOTONIC=1`), so [`monotonic_ns`](super::monotonic_ns) stays comparable
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

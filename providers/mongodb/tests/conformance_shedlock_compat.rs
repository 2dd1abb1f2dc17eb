//! The shedlock conformance suite (C01–C28) in the **ShedLock-compatible mode**
//! (`.shedlock_compatible()`: ShedLock's documents `_id, lockUntil, lockedAt, lockedBy`, the
//! owner in `lockedBy`), provider name `mongodb-shedlock-compat`, in server time. Expected
//! non-pass outcomes: C20 and C21 are "unsupported" (no field for a fencing token). See
//! `common/mod.rs` for the factory and hooks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

fn main() -> std::process::ExitCode {
    common::run_compat()
}

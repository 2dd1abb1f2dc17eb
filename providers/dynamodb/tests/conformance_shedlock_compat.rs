//! The shedlock conformance suite (C01–C28) in the **ShedLock-compatible mode**
//! (`.shedlock_compatible()`: ShedLock's items, times as its ISO strings, the owner in
//! `lockedBy`), provider name `dynamodb-shedlock-compat`. Expected non-pass outcomes: C20 and
//! C21 are "unsupported" (no attribute for a fencing token). See `common/mod.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

fn main() -> std::process::ExitCode {
    common::run_compat()
}

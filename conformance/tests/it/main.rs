//! The integration tests of this crate, one module per file, linked into one test binary
//! (`tests/it`); the conformance suites run as their own harness binaries.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod broken;
mod client_time;
mod coarse;
mod late_lease;
mod model_lag;

//! The integration tests of this crate, one module per file, linked into one test binary
//! (`tests/it`); the conformance suites run as their own harness binaries.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod batch;
mod coalesce;
mod defaults;
mod drain;
mod executor;
mod inspection;
mod keepalive;
mod lease;
mod metrics;
mod scheduler;
mod validation;
mod waiting;

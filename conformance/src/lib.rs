//! # shedlock-conformance
//!
//! The conformance kit for [`shedlock`] lock providers: it runs the checks C01–C27 of the
//! conformance catalogue against any provider and writes a report.
//!
//! A provider supplies a [`ProviderFactory`] (builds independent instances, one per simulated
//! node, optionally with a given [`Clock`](shedlock::Clock) or backend address) and optional
//! [`Hooks`]. The kit then offers two entry points:
//!
//! - [`harness`]: a libtest-compatible `main` for a `harness = false` test target, so
//!   `cargo test` lists one line per check (`C05_expires_after_at_most ... ok`);
//! - [`run`]: an async function returning a [`Report`].
//!
//! Every check is also a public async function in [`checks`], and the tools the checks use are
//! public in [`tools`].
#![forbid(unsafe_code)]

pub mod checks;
mod factory;
mod figures;
mod harness;
mod options;
mod report;
mod suite;
pub mod tools;

pub use factory::{Hooks, InstanceOptions, ProviderFactory, RecordHooks, RestartHook};
pub use harness::harness;
pub use options::Options;
pub use report::{CheckResult, Figures, Outcome, Report, Verdict, report_dir};
pub use suite::{Suite, Timing, run};

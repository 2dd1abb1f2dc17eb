//! # shedlock-conformance
//!
//! The conformance kit for [`shedlock`] lock providers. It runs the checks C01–C32 of the
//! conformance catalogue against any provider — in this workspace or written by a third party —
//! and writes a report (Markdown and JSON), so that "C13 pass" means the same thing for every
//! provider. Its [`faults`] module runs a provider's backend cluster and client processes in
//! network namespaces under partitions, pauses and kills, and counts the overlaps.
//!
//! ## Using it for a provider crate
//!
//! `Cargo.toml`:
//!
//! ```toml
//! [dev-dependencies]
//! shedlock-conformance = "0.1"
//! tokio = { version = "1", features = ["rt-multi-thread", "macros"] }
//! async-trait = "0.1"
//!
//! [[test]]
//! name = "conformance"
//! harness = false
//! ```
//!
//! `tests/conformance.rs`:
//!
//! ```no_run
//! use std::sync::Arc;
//! use shedlock::{BoxError, LockProvider};
//! use shedlock_conformance::{Hooks, InstanceOptions, Options, ProviderFactory};
//! # use shedlock_memory::{MemoryLockProvider as MyProvider, MemoryServer};
//!
//! struct MyFactory { /* connection settings, a handle on the test server... */ }
//!
//! #[async_trait::async_trait]
//! impl ProviderFactory for MyFactory {
//!     fn name(&self) -> &str {
//!         "mine" // the report is written to <dir>/mine.md and <dir>/mine.json
//!     }
//!
//!     async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
//!         // One independent instance: its own client/pool, as a separate node would have.
//!         // Client-time providers must use `options.clock_or_system()` for every time they read;
//!         // connect to `options.address` instead of the real address when it is set.
//!         # let _ = options; let server = MemoryServer::new();
//!         Ok(Arc::new(MyProvider::new(&server)))
//!     }
//!
//!     fn hooks(&self) -> Hooks {
//!         Hooks::new() // .with_backend_address(..).with_records(..).with_restart(..)
//!     }
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     // Declare every outcome other than pass you expect, with the reason; any other fails.
//!     let options = Options::from_env()
//!         .expect_not_applicable("C24", "no network address for the fault proxy");
//!     shedlock_conformance::harness(options, || async {
//!         // Start or connect to the backend here (runs on the kit's tokio runtime).
//!         Ok(MyFactory {})
//!     })
//! }
//! ```
//!
//! `cargo test --test conformance` then lists one test per check
//! (`test C05_expires_after_at_most ... ok`), prints the report and writes it to
//! [`report_dir`]: `$SHEDLOCK_CONFORMANCE_DIR`, else `<target dir>/conformance`. This is the
//! convention for every provider crate of this workspace (`cargo xtask conformance` runs
//! exactly that test and reads the JSON). A complete worked example of a provider written
//! outside the workspace is `conformance/examples/third_party` (a toy TCP lock server and its
//! provider, with every hook).
//!
//! ## The factory and its hooks
//!
//! A [`ProviderFactory`] builds N independent instances of the provider on one backend. The
//! kit reads the declared [`Capabilities`](shedlock::Capabilities) from an instance; checks that
//! need an undeclared capability are reported **unsupported**, never pass. Optional [`Hooks`]
//! enable more checks; a check whose hook is missing is **not applicable**, with the reason.
//! The provider's test declares which of these it expects ([`Options::expect_not_applicable`],
//! [`Options::expect_unsupported`], each with its reason); the harness fails any other outcome
//! than pass or the declared one, so the results guard against regressions:
//!
//! | hook | enables |
//! |---|---|
//! | [`RecordHooks`] (inspect / delete a record, plant an expired one) | C14 |
//! | [`RestartHook`] (restart the backend while the process runs) | C25 |
//! | backend address ([`Hooks::with_backend_address`]) | C24 (through the kit's fault proxy), the in-flight parts of C12 and C13, and the round-trip figures |
//!
//! ## The checks
//!
//! | id | check | needs |
//! |---|---|---|
//! | C01–C08 | held, no double hold, names independent, lock-unlock-lock, expiry after at-most, relock, at-least, fuzzed counters | — |
//! | C09–C11 | extend keeps the lock, extending an expired lock fails, at-least via a late extend counts from the extension | `extend` |
//! | C12–C13 | a stale holder's unlock / extend changes nothing, also in flight during the takeover (with a backend address) | `owner_checked` (+ `extend` for C13) |
//! | C14 | leftover or externally deleted records never block; fencing tokens keep increasing across a deletion | record hooks |
//! | C15–C17 | race rounds (one winner), history overlap check, proptest model vs `shedlock-memory` | — |
//! | C18 | clock skew: server time intact at ±1 h; client time: skew bound measured, violation detected | — |
//! | C19 | scheduler on K instances: every fire time once, with and without skew | — |
//! | C20–C21 | monotonic fencing tokens; a fenced resource refuses a paused stale holder | `fencing` |
//! | C22 | keep-alive: long task keeps the lock, dead holder frees it, failed extension signals loss | `extend` |
//! | C23 | executor: skip, release on return / error / panic / cancel, reentrancy, `assert_locked` | — |
//! | C24 | backend unreachable or stalled: typed errors in bounded time (`check` too, where declared), no false "held", recovery | backend address (+ `check`) |
//! | C25 | backend restart: recovery without a process restart; fencing tokens keep increasing | restart hook |
//! | C26 | futures dropped mid-flight at random await points never leave a name locked past at-most | — |
//! | C27 | hostile names, name identity (normalisation, case, 32-bit hashes), injective keys (`tools::names::escape_merges`), max length (+1 is `InvalidName`, never truncation) | — |
//! | C28 | real clock skew between node processes (libfaketime): server time intact, client-time bound measured | node environment, libfaketime |
//! | C29 | paused holder: a node process frozen (SIGSTOP) past its lease finds it ended before any further write; its late writes are refused by token where fencing is declared | node environment, Unix |
//! | C30 | inspection: a held lock inspected as held with its fencing token, by the provider's clock (an instance an hour ahead still sees it held on server time); released as free; `list` returns a prefix's records once each, page by page, `%` and `_` plain; reading changes nothing: over a whole lease, repeated `inspect` and `list` show the same `locked_by`, `locked_at`, `lock_until`, token and acquisition, the lock frees when its lease ends, and a read of a name never locked leaves no record | capabilities `inspect` (and `list`) |
//! | C31 | force release: frees exactly the acquisition seen (the holder's extend is `LockLost`, its unlock changes nothing); a release of an acquisition that ended never touches the lock taken again; with `fencing`, every token after the release is above every token handed out for the name before, and a resource fenced by them refuses the released holder's late write | capabilities `inspect`, `force_release` |
//! | C32 | batch: `try_lock_many` answers per name what `try_lock` would: free names granted beside a held one (never all-or-nothing), the held one refused and still its holder's; a name given twice refuses the batch, which takes nothing; with `fencing`, tokens rise per name across batches and `try_lock`s; 4 instances batching overlapping names at once: one winner per name; a batch lease ends no later than its record (probed densely before `valid_until`); batches dropped mid-flight leave nothing held past at-most | — |
//!
//! Each check is a public async function in [`checks`] (e.g.
//! [`checks::c05_expires_after_at_most`]), so a provider's own tests can run single checks
//! against a [`Suite`].
//!
//! ## Timing
//!
//! Margins derive from the declared granularity (see [`Timing`]): a 1 ms backend uses 300 ms
//! locks and a 250 ms lateness slack; a 1 s backend uses 3 s locks and 2 s of slack. Every call's
//! start and end are measured on one monotonic clock, and a check only fails when what it saw is
//! impossible for a correct provider even with these margins (e.g. a lock acquired by another
//! instance whose call *ended* more than `granularity + 10 ms` before the earlier lock could
//! expire). The default suite takes about 30 s for a 1 ms backend; [`Options`] sizes everything
//! for soak runs (`SHEDLOCK_CONFORMANCE_SOAK=10`).
//!
//! ## The report
//!
//! [`Report::to_json`] writes exactly:
//!
//! ```json
//! {"provider": "memory",
//!  "capabilities": {"extend": true, "fencing": true, "server_time": true, "owner_checked": true,
//!                   "granularity_ms": 1, "max_name_len": null, "check": false,
//!                   "clock_step_us": 0, "inspect": true, "list": true, "force_release": true},
//!  "results": [{"id": "C01", "name": "lock_is_held", "outcome": "pass", "detail": "...", "duration_ms": 0,
//!               "expected": null, "as_expected": true},
//!              {"id": "C24", "name": "backend_unreachable", "outcome": "not_applicable", "detail": "...",
//!               "duration_ms": 0, "expected": {"outcome": "not_applicable", "reason": "..."},
//!               "as_expected": true}],
//!  "figures": {"acquire_p50_us": 2.1, "acquire_p99_us": 3.4, "round_trips_acquire": null,
//!              "round_trips_release": null, "skew_bound_ms": null}}
//! ```
//!
//! `outcome` is one of `pass`, `fail`, `unsupported`, `not_applicable`. `expected` is the
//! declaration of [`Options::expect_not_applicable`] / [`Options::expect_unsupported`] for the
//! check (`null`: it must pass) and `as_expected` whether the outcome matched it (see
//! [`CheckResult::as_expected`]). Round trips are
//! measured through the fault proxy (client→server turnarounds, see [`tools::proxy`]) and are
//! `null` when the factory offers no backend address; where it does,
//! `round_trips_batch_100` (left out otherwise) gives the round trips of one `try_lock_many` of
//! 100 free names ([`tools::proxy::round_trips_per_batch`]); `skew_bound_ms` is set for client-time
//! providers only. [`Report::to_markdown`] has a title, a capabilities table, a results table and
//! the figures.
//!
//! ## Tools
//!
//! [`tools`] holds what the checks are built from, each tested on its own: the history recorder
//! and interval-overlap checker ([`tools::history`]), the fenced register
//! ([`tools::fenced`]), the TCP fault proxy ([`tools::proxy`]), skewed clocks
//! ([`tools::clocks`]) and the model-based property test ([`tools::model`]).
//!
//! ## Layers
//!
//! The kit is built in layers; a module imports only from layers below it, never from one that
//! imports it back (and no module imports this root's re-exports):
//!
//! 1. `location` ([`report_dir`]: where the kit writes) and `outcome`: [`Outcome`], [`Verdict`], [`Expectation`], [`CheckResult`], [`Figures`] and
//!    [`Report`] as data, with the verdict logic ([`CheckResult::as_expected`]). Imports nothing
//!    from the crate.
//! 2. `options` ([`Options`]) and `factory` ([`ProviderFactory`], [`Hooks`], ...); the
//!    self-contained [`tools`]: history, fenced register, fault proxy, clocks, the `Stalling`
//!    wrapper, percentiles.
//! 3. `suite`: [`Suite`] and [`Timing`].
//! 4. What works on a suite or a factory: the [`tools`] that call a provider on a suite
//!    (bounded calls and polling, the history workload, the model-based test), `node` (the node
//!    protocol of C28, C29 and the fault scenarios, re-exported in [`checks`]), `check` (the
//!    [`checks::Check`] type), `soak`, and [`faults`] (the fault scenarios, over `node`: `net`
//!    the namespace network, `plan` the scenario, `nemesis` the run, `judge` the history,
//!    `report` the findings, `signal` the process signals).
//! 5. [`checks`]: one file per check, `checks/c05_expires_after_at_most.rs` for
//!    [`checks::c05_expires_after_at_most`], helpers shared by several checks in
//!    `checks/common.rs` (which imports no check file; no check file imports another), and the
//!    catalogue in `checks/mod.rs`.
//! 6. `figures` (the measurements) and `runner` ([`Suite::run_check`], [`Suite::run_all`],
//!    [`Suite::report`], [`run`], [`Options::validate_expectations`]).
//! 7. `report`: rendering only ([`Report::to_json`], [`Report::to_markdown`],
//!    [`Report::to_text`], the report files).
//! 8. `harness`: [`harness()`], the libtest front end.
#![forbid(unsafe_code)]

#[macro_use]
pub mod tools;
mod check;
pub mod checks;
mod factory;
pub mod faults;
mod figures;
mod harness;
mod location;
mod node;
mod options;
mod outcome;
mod report;
mod runner;
mod security;
mod soak;
mod suite;
#[cfg(test)]
mod test_support;

pub use factory::{Hooks, InstanceOptions, ProviderFactory, RecordHooks, RestartHook};
pub use harness::{SuiteSpec, harness, harness_suites};
pub use location::report_dir;
pub use node::{
    LIBFAKETIME_ENV, LIBFAKETIME_INSTALL_HINT, libfaketime, node_main_if_requested, node_provider,
    run_id, skewed_process,
};
pub use options::Options;
pub use outcome::{CheckResult, Expectation, Figures, Outcome, Report, Verdict};
pub use runner::run;
pub use security::Security;
pub use suite::{Suite, Timing};

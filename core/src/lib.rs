//! # shedlock
//!
//! Make a scheduled task run at most once at a time across every instance of a service.
//!
//! This crate is the backend-free core: the [`LockProvider`] contract, [`LockConfig`], duration
//! parsing, injectable [`Clock`]s, the [`LockingExecutor`], [`KeepAliveProvider`],
//! [`assert_locked`] and a [`Scheduler`]. Backends live in their own crates
//! (`shedlock-memory`, `shedlock-postgres`, ...), and `shedlock-conformance` proves that a
//! backend is safe.
//!
//! Provider authors implement [`store::LeaseStore`] (acquire, release and extend on one backend
//! record) and get a [`LockProvider`] from [`store::StoreProvider`], which owns the plumbing every
//! provider shares: validated settings, name checks, owner ids, lease validity, time limits,
//! spans and error labels. Providers whose backend holds the lease itself build locks with
//! [`Acquisition`]. The backend-neutral helpers (time conversions, retries, [`TimeSource`]) are in
//! [`support`].
//!
//! The core does no I/O.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//!
//! use shedlock::{LockConfig, LockingExecutor, TaskResult};
//! use shedlock_memory::{MemoryLockProvider, MemoryServer};
//!
//! // Any provider: PostgreSQL, Redis, etcd, ... (in-memory here, to need no server).
//! let provider = MemoryLockProvider::new(&MemoryServer::new());
//! let executor = LockingExecutor::new(Arc::new(provider));
//!
//! // Held for the task, at most 10 minutes (if this instance dies), at least 1 minute (so that
//! // instances whose clocks or schedules differ a little do not run it again).
//! let config = LockConfig::builder("nightly-report")
//!     .lock_at_most_for_str("10m")
//!     .lock_at_least_for_str("1m")
//!     .build()?;
//! match executor.execute(&config, || async { "report sent" }).await? {
//!     TaskResult::Executed(outcome) => println!("ran here: {outcome}"),
//!     TaskResult::NotExecuted => println!("another instance holds the lock: skipped"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! To run it on a schedule, give the executor to a [`Scheduler`]; with the `macros` feature,
//! `#[shedlock::lock(...)]` locks an async function in one line.

pub mod batch;
mod clock;
mod config;
mod duration;
mod error;
mod executor;
mod held;
pub mod inspect;
mod keepalive;
mod lease;
pub mod metrics;
mod provider;
mod scheduler;
pub mod store;
pub mod support;

pub use batch::{BatchOptions, BatchOutcome};
pub use clock::{
    Clock, ManualClock, SharedClock, SkewedClock, SystemClock, TokioClock, system_clock,
};
pub use config::{LockConfig, LockConfigBuilder, LockDefaults, LockRequest, LockSpec};
pub use duration::{DurationError, parse_duration};
pub use error::{BoxError, ConfigError, Error, Result};
pub use executor::{
    ExecutionEvent, ExecutionListener, LockingExecutor, LockingExecutorBuilder, TaskResult, Wait,
    active_lock_lost_signal, active_lock_name, assert_locked, extend_active_lock,
};
pub use held::{DrainReport, DrainedLock, HeldLock};
pub use inspect::{ForceRelease, LockInfo, LockPage};
pub use keepalive::KeepAliveProvider;
pub use lease::{Acquisition, DEFAULT_CLOCK_STEP, Lease, LostSignal};
pub use provider::{Capabilities, Lock, LockHandle, LockProvider};
pub use scheduler::{
    DEFAULT_COALESCING_WINDOW, Schedule, ScheduleError, Scheduler, scheduled_fire_time,
};
#[cfg(feature = "macros")]
pub use shedlock_macros::{lock, lock_spec};
pub use store::{ClockBuilder, ProviderBuilder};
pub use support::TimeSource;

//! The executor's metrics, through the [`metrics`](https://docs.rs/metrics) facade (feature
//! `metrics`). Without the feature every function here is an empty inline function.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `shedlock_acquired_total` | counter | `lock`, `provider` |
//! | `shedlock_skipped_total` (held elsewhere) | counter | `lock`, `provider` |
//! | `shedlock_errors_total` | counter | `lock`, `provider`, `operation`, `kind` |
//! | `shedlock_lost_total` | counter | `lock`, `provider` |
//! | `shedlock_extended_total` | counter | `lock`, `provider` |
//! | `shedlock_acquire_duration_seconds` | histogram | `lock`, `provider` |
//! | `shedlock_hold_duration_seconds` | histogram | `lock`, `provider` |
//! | `shedlock_wait_duration_seconds` | histogram | `lock`, `provider` |

#![cfg_attr(not(feature = "metrics"), allow(unused_variables))]

use std::time::Duration;

use crate::error::Error;

/// Names of the metrics, for dashboards and tests.
pub mod names {
    /// Counter: locks won.
    pub const ACQUIRED: &str = "shedlock_acquired_total";
    /// Counter: fires skipped because the lock was held elsewhere.
    pub const SKIPPED: &str = "shedlock_skipped_total";
    /// Counter: failed operations, labelled `operation` (`try_lock`, `unlock`, `extend`) and
    /// `kind` ([`Error::kind`](crate::Error::kind)).
    pub const ERRORS: &str = "shedlock_errors_total";
    /// Counter: locks lost while their task ran.
    pub const LOST: &str = "shedlock_lost_total";
    /// Counter: successful extensions (by `extend_active_lock` or keep-alive).
    pub const EXTENDED: &str = "shedlock_extended_total";
    /// Histogram (seconds): how long `try_lock` took, whatever its outcome.
    pub const ACQUIRE_DURATION: &str = "shedlock_acquire_duration_seconds";
    /// Histogram (seconds): how long a task held its lock (from acquisition to the end of the
    /// task).
    pub const HOLD_DURATION: &str = "shedlock_hold_duration_seconds";
    /// Histogram (seconds): how long `execute_waiting` waited, from its first attempt to the
    /// one that won, to the deadline, or to an error.
    pub const WAIT_DURATION: &str = "shedlock_wait_duration_seconds";
}

#[cfg(feature = "metrics")]
fn labels(lock: &str, provider: &'static str) -> [(&'static str, String); 2] {
    [("lock", lock.to_owned()), ("provider", provider.to_owned())]
}

#[inline]
pub(crate) fn acquired(lock: &str, provider: &'static str, took: Duration) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(names::ACQUIRED, &labels(lock, provider)).increment(1);
        metrics::histogram!(names::ACQUIRE_DURATION, &labels(lock, provider)).record(took);
    }
}

#[inline]
pub(crate) fn skipped(lock: &str, provider: &'static str, took: Duration) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(names::SKIPPED, &labels(lock, provider)).increment(1);
        metrics::histogram!(names::ACQUIRE_DURATION, &labels(lock, provider)).record(took);
    }
}

#[inline]
pub(crate) fn waited(lock: &str, provider: &'static str, took: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(names::WAIT_DURATION, &labels(lock, provider)).record(took);
}

/// A `try_lock` that failed: its duration counts in the acquire histogram too.
#[inline]
pub(crate) fn acquire_failed(lock: &str, provider: &'static str, took: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(names::ACQUIRE_DURATION, &labels(lock, provider)).record(took);
}

#[inline]
pub(crate) fn error(lock: &str, provider: &'static str, operation: &'static str, error: &Error) {
    #[cfg(feature = "metrics")]
    {
        let [l, p] = labels(lock, provider);
        let labels = [l, p, ("operation", operation.to_owned()), ("kind", error.kind().to_owned())];
        metrics::counter!(names::ERRORS, &labels).increment(1);
    }
}

#[inline]
pub(crate) fn lost(lock: &str, provider: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(names::LOST, &labels(lock, provider)).increment(1);
}

#[inline]
pub(crate) fn extended(lock: &str, provider: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(names::EXTENDED, &labels(lock, provider)).increment(1);
}

#[inline]
pub(crate) fn held(lock: &str, provider: &'static str, held: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(names::HOLD_DURATION, &labels(lock, provider)).record(held);
}

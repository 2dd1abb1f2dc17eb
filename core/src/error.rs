//! The one error type of shedlock and its providers.

use std::{fmt, time::Duration};

use crate::duration::DurationError;

/// A lock name as errors quote it: in full up to 64 characters, else its first 48 characters and
/// its length, so that a huge name does not make a huge message.
fn quoted(name: &str) -> String {
    const FULL: usize = 64;
    const PREFIX: usize = 48;
    if name.chars().nth(FULL).is_none() {
        return format!("{name:?}");
    }
    let prefix: String = name.chars().take(PREFIX).collect();
    format!("{prefix:?}… ({} bytes)", name.len())
}

/// A boxed error from a backend client, kept as the [`std::error::Error::source`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a [`LockConfig`](crate::LockConfig) was rejected. Each variant names the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The lock name is empty.
    #[error("lock name must not be empty")]
    EmptyName,
    /// A batch ([`LockProvider::try_lock_many`](crate::LockProvider::try_lock_many)) names one
    /// lock twice: its two entries could not both be answered as a `try_lock` would.
    #[error(
        "lock {quoted_name} is named more than once in one batch: each name may appear once",
        quoted_name = quoted(.name)
    )]
    DuplicateInBatch {
        /// The lock name.
        name: String,
    },
    /// `lock_at_most_for` is zero: the lock would expire the moment it is taken.
    #[error(
        "lock_at_most_for of lock {quoted_name} must be greater than zero",
        quoted_name = quoted(.name)
    )]
    ZeroAtMost {
        /// The lock name.
        name: String,
    },
    /// A [`LockConfig`](crate::LockConfig) built without `lock_at_most_for` (zero is
    /// [`ZeroAtMost`](Self::ZeroAtMost)).
    #[error(
        "lock {quoted_name} has no lock_at_most_for: set it on the builder (lock_at_most_for or \
         lock_at_most_for_str(\"10m\")), longer than the task can ever take",
        quoted_name = quoted(.name)
    )]
    AtMostNotSet {
        /// The lock name.
        name: String,
    },
    /// `lock_at_least_for` is greater than `lock_at_most_for`.
    #[error(
        "lock_at_least_for ({at_least:?}) of lock {quoted_name} must not exceed lock_at_most_for ({at_most:?})",
        quoted_name = quoted(.name)
    )]
    AtLeastExceedsAtMost {
        /// The lock name.
        name: String,
        /// The requested `lock_at_most_for`.
        at_most: Duration,
        /// The requested `lock_at_least_for`.
        at_least: Duration,
    },
    /// A [`LockSpec`](crate::LockSpec) without `lock_at_most_for`, on an executor without a
    /// default one.
    #[error(
        "lock {quoted_name} has no lock_at_most_for: set it on the lock, or give the executor a \
         default_lock_at_most_for",
        quoted_name = quoted(.name)
    )]
    MissingAtMost {
        /// The lock name.
        name: String,
    },
    /// A name template (or prefix) is malformed.
    #[error("invalid lock name template {template:?}: {reason}")]
    NameTemplate {
        /// The template as given.
        template: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A [`Scheduler`](crate::Scheduler) already runs a task under this lock name: the two
    /// tasks would exclude each other, and whichever fires second would be skipped, silently.
    #[error(
        "lock {quoted_name} is already scheduled on this scheduler ({scheduled}); a second task under \
         it ({requested}) would be skipped whenever the first holds the lock: give it a lock name \
         of its own, or allow it with Scheduler::allow_shared_lock_names(true)",
        quoted_name = quoted(.name)
    )]
    AlreadyScheduled {
        /// The lock name.
        name: String,
        /// The schedule of the task registered first.
        scheduled: String,
        /// The schedule of the task that was refused.
        requested: String,
    },
    /// A duration given as text could not be parsed.
    #[error("{field} of lock {quoted_name}: {source}", quoted_name = quoted(.name))]
    Duration {
        /// The lock name.
        name: String,
        /// Which field (`lock_at_most_for` or `lock_at_least_for`).
        field: &'static str,
        /// The parse error, with the input.
        #[source]
        source: DurationError,
    },
}

/// Every failure of shedlock and its providers.
///
/// Use [`Error::is_retryable`] to decide whether trying again later may help.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock configuration is invalid.
    #[error("invalid lock configuration: {0}")]
    InvalidConfig(#[from] ConfigError),
    /// The lock name is not acceptable to this backend (too long, forbidden characters). Names are
    /// never truncated or rewritten, since that could make two names collide.
    #[error("invalid lock name {quoted_name} for {backend}: {reason}", quoted_name = quoted(.name))]
    InvalidName {
        /// Which backend rejected it.
        backend: &'static str,
        /// The name as given.
        name: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The provider's own setup is invalid (e.g. a table or column name that is not a valid
    /// identifier, or a missing table; the message says how to fix it).
    #[error("{backend} setup: {message}")]
    Setup {
        /// The backend.
        backend: &'static str,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The backend could not be reached (connection refused, reset, timed out). Retrying may help.
    ///
    /// The message quotes the client error and its causes (`dispatch failure: … tcp connect
    /// error: Connection refused`), each once, so a log line that prints only this error still
    /// says what happened.
    #[error("{backend} unavailable: {}", Causes(&**.source))]
    Unavailable {
        /// The backend.
        backend: &'static str,
        /// The client error.
        #[source]
        source: BoxError,
    },
    /// The backend answered with an error. The message quotes the client error and its causes,
    /// as for [`Unavailable`](Self::Unavailable).
    #[error("{backend} error: {}", Causes(&**.source))]
    Backend {
        /// The backend.
        backend: &'static str,
        /// The client error.
        #[source]
        source: BoxError,
    },
    /// The operation did not complete within the time allowed. Retrying may help; whether the
    /// operation took effect on the backend is unknown.
    #[error("{operation} timed out after {after:?}")]
    Timeout {
        /// The operation that timed out (e.g. `try_lock`).
        operation: &'static str,
        /// How long was waited.
        after: Duration,
    },
    /// This provider does not support the operation (see
    /// [`Capabilities`](crate::Capabilities)).
    #[error("{operation} is not supported by {backend}")]
    Unsupported {
        /// The backend.
        backend: &'static str,
        /// The operation (e.g. `extend`).
        operation: &'static str,
    },
    /// The lock is no longer held by this holder: it expired and may have been taken by another.
    #[error(
        "lock {quoted_name} was lost: it expired or is now held by another instance",
        quoted_name = quoted(.name)
    )]
    LockLost {
        /// The lock name.
        name: String,
    },
    /// The backend granted the lock, but its answer arrived after the lock's lease could have
    /// ended (an instant taken before the request was sent plus `lock_at_most_for`, less the
    /// backend's clock step): by then the
    /// backend may have expired the lock and handed it to another instance, so it is not reported
    /// as held. It was released (owner-checked, best effort). Retrying may help; a
    /// `lock_at_most_for` well above the backend's round-trip time avoids it.
    #[error(
        "lock {quoted_name} was granted after its lease could have ended: the answer took {elapsed:?}, \
         lock_at_most_for is {lock_at_most_for:?}; it was released and is not held",
        quoted_name = quoted(.name)
    )]
    LeaseExpiredInFlight {
        /// The lock name.
        name: String,
        /// How long the acquire took, from before the request was sent to the answer.
        elapsed: Duration,
        /// The configured `lock_at_most_for`.
        lock_at_most_for: Duration,
    },
    /// [`assert_locked`](crate::assert_locked) or
    /// [`extend_active_lock`](crate::extend_active_lock) was called outside a task that holds a
    /// lock.
    #[error("not running inside a locked task")]
    NotLocked,
    /// The executor is draining ([`LockingExecutor::drain`](crate::LockingExecutor::drain)): it
    /// takes no new locks, and the task was not run.
    #[error("the executor is draining: it takes no new locks")]
    Draining,
}

/// A client error shared by the copies of one [`Error`] ([`Error::fan_out`]): its message and
/// causes are the original's.
#[derive(Debug, Clone)]
struct SharedCause(std::sync::Arc<dyn std::error::Error + Send + Sync>);

impl fmt::Display for SharedCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl std::error::Error for SharedCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl Error {
    /// `n` copies of this error, for the `n` names of a batch request that failed as a whole
    /// (each name answers what its own `try_lock` would have). A client error is shared by the
    /// copies, with its message and causes; every other field is copied.
    pub fn fan_out(self, n: usize) -> Vec<Error> {
        let copy: Box<dyn Fn() -> Error + Send> = match self {
            Error::Unavailable { backend, source } => {
                let cause = SharedCause(std::sync::Arc::from(source));
                Box::new(move || Error::Unavailable { backend, source: Box::new(cause.clone()) })
            }
            Error::Backend { backend, source } => {
                let cause = SharedCause(std::sync::Arc::from(source));
                Box::new(move || Error::Backend { backend, source: Box::new(cause.clone()) })
            }
            Error::InvalidConfig(c) => Box::new(move || Error::InvalidConfig(c.clone())),
            Error::InvalidName { backend, name, reason } => Box::new(move || Error::InvalidName {
                backend,
                name: name.clone(),
                reason: reason.clone(),
            }),
            Error::Setup { backend, message } => {
                Box::new(move || Error::Setup { backend, message: message.clone() })
            }
            Error::Timeout { operation, after } => {
                Box::new(move || Error::Timeout { operation, after })
            }
            Error::Unsupported { backend, operation } => {
                Box::new(move || Error::Unsupported { backend, operation })
            }
            Error::LockLost { name } => Box::new(move || Error::LockLost { name: name.clone() }),
            Error::LeaseExpiredInFlight { name, elapsed, lock_at_most_for } => {
                Box::new(move || Error::LeaseExpiredInFlight {
                    name: name.clone(),
                    elapsed,
                    lock_at_most_for,
                })
            }
            Error::NotLocked => Box::new(|| Error::NotLocked),
            Error::Draining => Box::new(|| Error::Draining),
        };
        (0..n).map(|_| copy()).collect()
    }

    /// Whether trying the same call again later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Unavailable { .. } | Error::Timeout { .. } | Error::LeaseExpiredInFlight { .. }
        )
    }

    /// A stable, short name of the variant (`"timeout"`, `"unavailable"`, ...), for metrics
    /// labels and structured logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidConfig(_) => "invalid_config",
            Error::InvalidName { .. } => "invalid_name",
            Error::Setup { .. } => "setup",
            Error::Unavailable { .. } => "unavailable",
            Error::Backend { .. } => "backend",
            Error::Timeout { .. } => "timeout",
            Error::Unsupported { .. } => "unsupported",
            Error::LockLost { .. } => "lock_lost",
            Error::LeaseExpiredInFlight { .. } => "lease_expired_in_flight",
            Error::NotLocked => "not_locked",
            Error::Draining => "draining",
        }
    }

    /// Wraps a client error as [`Error::Unavailable`].
    pub fn unavailable(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Unavailable { backend, source: source.into() }
    }

    /// Wraps a client error as [`Error::Backend`].
    pub fn backend(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Backend { backend, source: source.into() }
    }

    /// [`Error::Setup`] of `backend`: what is missing or wrong, and how to fix it.
    pub fn setup(backend: &'static str, message: impl Into<String>) -> Self {
        Error::Setup { backend, message: message.into() }
    }
}

/// An error and its causes (`source()` chain) on one line, `: `-separated; a cause whose text
/// the line already contains (clients often repeat their source in their own message) is left
/// out. At most eight levels.
struct Causes<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for Causes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = self.0.to_string();
        let mut next = self.0.source();
        for _ in 0..8 {
            let Some(cause) = next else { break };
            let text = cause.to_string();
            if !text.is_empty() && !line.contains(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
            next = cause.source();
        }
        f.write_str(&line)
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A client error with an optional cause, as HTTP and database clients nest them.
    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn unavailable_and_backend_errors_quote_every_cause_once() {
        let refused = Layer("Connection refused (os error 111)", None);
        let connect = Layer("tcp connect error", Some(Box::new(refused)));
        let dispatch = Layer("dispatch failure", Some(Box::new(connect)));
        assert_eq!(
            Error::unavailable("s3", dispatch).to_string(),
            "s3 unavailable: dispatch failure: tcp connect error: Connection refused (os error 111)"
        );
        // A client that repeats its cause in its own message is not repeated.
        let io = Layer("Connection refused (os error 111)", None);
        let sqlx = Layer(
            "error communicating with database: Connection refused (os error 111)",
            Some(Box::new(io)),
        );
        assert_eq!(
            Error::backend("postgres", sqlx).to_string(),
            "postgres error: error communicating with database: Connection refused (os error 111)"
        );
        // The chain stays reachable through `source()`.
        let e = Error::unavailable("x", Layer("outer", Some(Box::new(Layer("inner", None)))));
        let first = std::error::Error::source(&e).map(ToString::to_string);
        assert_eq!(first.as_deref(), Some("outer"));
    }
}

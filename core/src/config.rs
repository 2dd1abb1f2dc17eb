//! [`LockConfig`]: what to lock and for how long.

use std::{fmt, sync::Arc, time::Duration};

use crate::{
    duration::{fmt_duration, parse_duration},
    error::ConfigError,
};

/// What to lock and for how long. Always valid once built: the name is not empty,
/// `lock_at_most_for` is positive and `lock_at_least_for <= lock_at_most_for`.
///
/// - `lock_at_most_for`: how long the lock is held if its holder dies without releasing it. Set it
///   well above the task's normal run time.
/// - `lock_at_least_for`: the minimum time the lock is held even if the task finishes sooner, so
///   that nodes whose clocks differ slightly do not run the same fire time twice.
///
/// ```
/// use std::time::Duration;
/// use shedlock::LockConfig;
/// let cfg = LockConfig::builder("report")
///     .lock_at_most_for_str("10m")
///     .lock_at_least_for(Duration::from_secs(30))
///     .build()
///     .unwrap();
/// assert_eq!(cfg.lock_at_most_for(), Duration::from_secs(600));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LockConfig {
    name: Arc<str>,
    lock_at_most_for: Duration,
    lock_at_least_for: Duration,
}

impl LockConfig {
    /// Builds and validates a configuration.
    pub fn new(
        name: impl Into<String>,
        lock_at_most_for: Duration,
        lock_at_least_for: Duration,
    ) -> Result<Self, ConfigError> {
        Self::builder(name)
            .lock_at_most_for(lock_at_most_for)
            .lock_at_least_for(lock_at_least_for)
            .build()
    }

    /// Starts a builder. `lock_at_most_for` must be set; `lock_at_least_for` defaults to zero.
    pub fn builder(name: impl Into<String>) -> LockConfigBuilder {
        LockConfigBuilder {
            name: name.into(),
            lock_at_most_for: None,
            lock_at_least_for: Duration::ZERO,
            error: None,
        }
    }

    /// The lock name: locks with equal names exclude each other.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How long the lock is held at most if never released.
    pub fn lock_at_most_for(&self) -> Duration {
        self.lock_at_most_for
    }

    /// How long the lock is held at least, even after an early release.
    pub fn lock_at_least_for(&self) -> Duration {
        self.lock_at_least_for
    }

    /// A copy with other durations (validated), for extensions.
    pub fn with_durations(
        &self,
        lock_at_most_for: Duration,
        lock_at_least_for: Duration,
    ) -> Result<Self, ConfigError> {
        validate(&self.name, lock_at_most_for, lock_at_least_for)?;
        Ok(Self { name: self.name.clone(), lock_at_most_for, lock_at_least_for })
    }
}

impl fmt::Debug for LockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockConfig")
            .field("name", &self.name)
            .field("lock_at_most_for", &fmt_duration(self.lock_at_most_for))
            .field("lock_at_least_for", &fmt_duration(self.lock_at_least_for))
            .finish()
    }
}

fn validate(name: &str, at_most: Duration, at_least: Duration) -> Result<(), ConfigError> {
    if name.is_empty() {
        return Err(ConfigError::EmptyName);
    }
    if at_most.is_zero() {
        return Err(ConfigError::ZeroAtMost { name: name.to_owned() });
    }
    if at_least > at_most {
        return Err(ConfigError::AtLeastExceedsAtMost { name: name.to_owned(), at_most, at_least });
    }
    Ok(())
}

/// Builder for [`LockConfig`]. Errors (including unparsable duration strings) are reported by
/// [`build`](LockConfigBuilder::build).
#[derive(Debug, Clone)]
#[must_use]
pub struct LockConfigBuilder {
    name: String,
    lock_at_most_for: Option<Duration>,
    lock_at_least_for: Duration,
    error: Option<ConfigError>,
}

impl LockConfigBuilder {
    /// Sets `lock_at_most_for`.
    pub fn lock_at_most_for(mut self, d: Duration) -> Self {
        self.lock_at_most_for = Some(d);
        self
    }

    /// Sets `lock_at_least_for`.
    pub fn lock_at_least_for(mut self, d: Duration) -> Self {
        self.lock_at_least_for = d;
        self
    }

    /// Sets `lock_at_most_for` from text such as `10m` or `PT10M` (see
    /// [`parse_duration`](crate::parse_duration)).
    pub fn lock_at_most_for_str(mut self, s: &str) -> Self {
        match parse_duration(s) {
            Ok(d) => self.lock_at_most_for = Some(d),
            Err(source) => self.fail("lock_at_most_for", source),
        }
        self
    }

    /// Sets `lock_at_least_for` from text such as `30s` or `PT30S`.
    pub fn lock_at_least_for_str(mut self, s: &str) -> Self {
        match parse_duration(s) {
            Ok(d) => self.lock_at_least_for = d,
            Err(source) => self.fail("lock_at_least_for", source),
        }
        self
    }

    fn fail(&mut self, field: &'static str, source: crate::duration::DurationError) {
        if self.error.is_none() {
            self.error = Some(ConfigError::Duration { name: self.name.clone(), field, source });
        }
    }

    /// Validates and builds. A missing `lock_at_most_for` is reported as
    /// [`ConfigError::ZeroAtMost`].
    pub fn build(self) -> Result<LockConfig, ConfigError> {
        if self.name.is_empty() {
            return Err(ConfigError::EmptyName);
        }
        if let Some(e) = self.error {
            return Err(e);
        }
        let at_most = self.lock_at_most_for.unwrap_or(Duration::ZERO);
        validate(&self.name, at_most, self.lock_at_least_for)?;
        Ok(LockConfig {
            name: self.name.into(),
            lock_at_most_for: at_most,
            lock_at_least_for: self.lock_at_least_for,
        })
    }
}

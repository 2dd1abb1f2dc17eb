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
    /// [`ConfigError::AtMostNotSet`], a zero one as [`ConfigError::ZeroAtMost`].
    pub fn build(self) -> Result<LockConfig, ConfigError> {
        if self.name.is_empty() {
            return Err(ConfigError::EmptyName);
        }
        if let Some(e) = self.error {
            return Err(e);
        }
        let Some(at_most) = self.lock_at_most_for else {
            return Err(ConfigError::AtMostNotSet { name: self.name });
        };
        validate(&self.name, at_most, self.lock_at_least_for)?;
        Ok(LockConfig {
            name: self.name.into(),
            lock_at_most_for: at_most,
            lock_at_least_for: self.lock_at_least_for,
        })
    }
}

/// A lock named by the application whose durations may be left to the executor's defaults (see
/// [`LockingExecutor::builder`](crate::LockingExecutor::builder)). Its name is also completed by
/// the executor's name template, if one is set.
///
/// Where a [`LockConfig`] is complete and final (an executor uses it exactly as given), a
/// `LockSpec` is the ShedLock habit: `@SchedulerLock(name = "report")` with
/// `@EnableSchedulerLock(defaultLockAtMostFor = "10m")` once per application.
///
/// ```
/// use std::time::Duration;
/// use shedlock::{LockDefaults, LockSpec};
/// let defaults = LockDefaults::new()
///     .lock_at_most_for(Duration::from_secs(600))
///     .name_template("billing-{name}")?;
/// let cfg = defaults.resolve(&LockSpec::new("report").lock_at_least_for(Duration::from_secs(30)))?;
/// assert_eq!(cfg.name(), "billing-report");
/// assert_eq!(cfg.lock_at_most_for(), Duration::from_secs(600));
/// assert_eq!(cfg.lock_at_least_for(), Duration::from_secs(30));
/// # Ok::<(), shedlock::ConfigError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
#[must_use]
pub struct LockSpec {
    name: Arc<str>,
    lock_at_most_for: Option<Duration>,
    lock_at_least_for: Option<Duration>,
}

impl LockSpec {
    /// A spec with only a name: both durations come from the executor's defaults.
    pub fn new(name: impl Into<String>) -> Self {
        let name: String = name.into();
        Self { name: name.into(), lock_at_most_for: None, lock_at_least_for: None }
    }

    /// Sets `lock_at_most_for`, overriding the default.
    pub fn lock_at_most_for(mut self, d: Duration) -> Self {
        self.lock_at_most_for = Some(d);
        self
    }

    /// Sets `lock_at_least_for`, overriding the default.
    pub fn lock_at_least_for(mut self, d: Duration) -> Self {
        self.lock_at_least_for = Some(d);
        self
    }

    /// The name as given (before any name template).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `lock_at_most_for`, if set here.
    pub fn get_lock_at_most_for(&self) -> Option<Duration> {
        self.lock_at_most_for
    }

    /// `lock_at_least_for`, if set here.
    pub fn get_lock_at_least_for(&self) -> Option<Duration> {
        self.lock_at_least_for
    }
}

impl fmt::Debug for LockSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockSpec")
            .field("name", &self.name)
            .field("lock_at_most_for", &self.lock_at_most_for.map(fmt_duration))
            .field("lock_at_least_for", &self.lock_at_least_for.map(fmt_duration))
            .finish()
    }
}

/// Application-wide lock defaults: durations for [`LockSpec`]s that leave them out, and a name
/// template (`"{name}"` by default) that turns a spec's name into the lock name, e.g.
/// `"billing-{name}"` or `"{name}@staging"`. A [`LockConfig`] is never changed by them.
#[derive(Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct LockDefaults {
    lock_at_most_for: Option<Duration>,
    lock_at_least_for: Option<Duration>,
    /// The template split around its one `{name}`.
    template: Option<(String, String)>,
}

impl LockDefaults {
    /// No defaults: every spec must set `lock_at_most_for`; names are used as given.
    pub fn new() -> Self {
        Self::default()
    }

    /// The default `lock_at_most_for`.
    pub fn lock_at_most_for(mut self, d: Duration) -> Self {
        self.lock_at_most_for = Some(d);
        self
    }

    /// The default `lock_at_least_for` (zero if never set).
    pub fn lock_at_least_for(mut self, d: Duration) -> Self {
        self.lock_at_least_for = Some(d);
        self
    }

    /// Sets the name template: text with exactly one `{name}` placeholder and no other braces,
    /// e.g. `"billing-{name}"`. Fails with [`ConfigError::NameTemplate`] otherwise.
    pub fn name_template(mut self, template: &str) -> Result<Self, ConfigError> {
        let bad = |reason: &str| ConfigError::NameTemplate {
            template: template.to_owned(),
            reason: reason.to_owned(),
        };
        let Some((prefix, suffix)) = template.split_once("{name}") else {
            return Err(bad("it must contain the placeholder {name}"));
        };
        if suffix.contains("{name}") {
            return Err(bad("{name} may appear only once"));
        }
        if prefix.contains(['{', '}']) || suffix.contains(['{', '}']) {
            return Err(bad("the only placeholder is {name}; no other braces are allowed"));
        }
        self.template = Some((prefix.to_owned(), suffix.to_owned()));
        Ok(self)
    }

    /// Sets a name prefix: the same as the template `"<prefix>{name}"`.
    pub fn name_prefix(self, prefix: &str) -> Result<Self, ConfigError> {
        let template = format!("{prefix}{{name}}");
        self.name_template(&template).map_err(|e| match e {
            ConfigError::NameTemplate { reason, .. } => {
                ConfigError::NameTemplate { template: prefix.to_owned(), reason }
            }
            other => other,
        })
    }

    /// The default `lock_at_most_for`, if set.
    pub fn get_lock_at_most_for(&self) -> Option<Duration> {
        self.lock_at_most_for
    }

    /// The default `lock_at_least_for`, if set.
    pub fn get_lock_at_least_for(&self) -> Option<Duration> {
        self.lock_at_least_for
    }

    /// The lock name `name` becomes under the template.
    pub fn lock_name(&self, name: &str) -> String {
        match &self.template {
            Some((prefix, suffix)) => format!("{prefix}{name}{suffix}"),
            None => name.to_owned(),
        }
    }

    /// Checks the defaults themselves: a default `lock_at_most_for` must be positive and not
    /// below the default `lock_at_least_for`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.lock_at_most_for.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::ZeroAtMost { name: "<default>".into() });
        }
        if let (Some(at_most), Some(at_least)) = (self.lock_at_most_for, self.lock_at_least_for)
            && at_least > at_most
        {
            return Err(ConfigError::AtLeastExceedsAtMost {
                name: "<default>".into(),
                at_most,
                at_least,
            });
        }
        Ok(())
    }

    /// Completes `spec` into a [`LockConfig`]: the name through the template, each missing
    /// duration from the defaults. A spec without `lock_at_most_for` under defaults without one is
    /// [`ConfigError::MissingAtMost`].
    pub fn resolve(&self, spec: &LockSpec) -> Result<LockConfig, ConfigError> {
        let name = self.lock_name(&spec.name);
        let Some(at_most) = spec.lock_at_most_for.or(self.lock_at_most_for) else {
            return Err(ConfigError::MissingAtMost { name });
        };
        let at_least = spec.lock_at_least_for.or(self.lock_at_least_for).unwrap_or_default();
        validate(&name, at_most, at_least)?;
        Ok(LockConfig { name: name.into(), lock_at_most_for: at_most, lock_at_least_for: at_least })
    }
}

impl fmt::Debug for LockDefaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let template = self.template.as_ref().map(|(p, s)| format!("{p}{{name}}{s}"));
        f.debug_struct("LockDefaults")
            .field("lock_at_most_for", &self.lock_at_most_for.map(fmt_duration))
            .field("lock_at_least_for", &self.lock_at_least_for.map(fmt_duration))
            .field("name_template", &template)
            .finish()
    }
}

/// What names a lock for [`LockingExecutor::execute`](crate::LockingExecutor::execute) and
/// [`Scheduler::schedule`](crate::Scheduler::schedule): a complete [`LockConfig`] (used as is), a
/// [`LockSpec`], or a bare name (`&str`, `String`: a spec with no durations), both completed by the
/// executor's [`LockDefaults`].
pub trait LockRequest {
    /// The configuration this request stands for under `defaults`.
    fn resolve_with(&self, defaults: &LockDefaults) -> Result<LockConfig, ConfigError>;
}

impl LockRequest for LockConfig {
    fn resolve_with(&self, _: &LockDefaults) -> Result<LockConfig, ConfigError> {
        Ok(self.clone())
    }
}

impl LockRequest for LockSpec {
    fn resolve_with(&self, defaults: &LockDefaults) -> Result<LockConfig, ConfigError> {
        defaults.resolve(self)
    }
}

impl LockRequest for str {
    fn resolve_with(&self, defaults: &LockDefaults) -> Result<LockConfig, ConfigError> {
        defaults.resolve(&LockSpec::new(self))
    }
}

impl LockRequest for String {
    fn resolve_with(&self, defaults: &LockDefaults) -> Result<LockConfig, ConfigError> {
        self.as_str().resolve_with(defaults)
    }
}

impl<T: LockRequest + ?Sized> LockRequest for &T {
    fn resolve_with(&self, defaults: &LockDefaults) -> Result<LockConfig, ConfigError> {
        (**self).resolve_with(defaults)
    }
}

impl<T: LockRequest + ?Sized> LockRequest for Arc<T> {
    fn resolve_with(&self, defaults: &LockDefaults) -> Result<LockConfig, ConfigError> {
        (**self).resolve_with(defaults)
    }
}

//! [`S3LockProviderBuilder`]: the bucket, the key prefix and the shared settings, validated by
//! `build`.

use std::{fmt, sync::Mutex};

use aws_sdk_s3::Client;
use shedlock::{
    Result, TimeSource,
    store::{ProviderSettings, StoreProvider},
};

use crate::{
    BACKEND, ClockBuilder, MAX_PREFIX_LEN, ProviderBuilder, S3LockProvider, keys::delimited,
    store::S3Store,
};
use shedlock::Error;

/// Builds an [`S3LockProvider`].
///
/// The shared setters (`operation_timeout`, `locked_by`, `clock`) come from [`ProviderBuilder`]
/// (and [`ClockBuilder`]), in scope with `use shedlock_s3::ProviderBuilder;`. Here the time limit
/// includes the SDK's retries (`None`: the SDK's own timeouts only); the clock computes the lease
/// (client time is this provider's only mode).
#[must_use]
pub struct S3LockProviderBuilder {
    pub(crate) client: Client,
    pub(crate) bucket: String,
    pub(crate) prefix: String,
    pub(crate) settings: ProviderSettings,
}

impl fmt::Debug for S3LockProviderBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client is left out on purpose: its configuration holds the credentials provider.
        f.debug_struct("S3LockProviderBuilder")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ProviderBuilder for S3LockProviderBuilder {
    fn settings_mut(&mut self) -> &mut ProviderSettings {
        &mut self.settings
    }
}

impl ClockBuilder for S3LockProviderBuilder {}

impl S3LockProviderBuilder {
    /// The key prefix of the lock objects (default `shedlock/`): ASCII letters, digits, `-`,
    /// `_`, `.` and `/`, at most [`MAX_PREFIX_LEN`] bytes, no `..` or `//`, not starting with
    /// `/`.
    ///
    /// A non-empty prefix ends with `/` (or `.`): the builder appends a `/` when it ends with
    /// anything else (`app` is `app/`; `ops/locks/` and `locks.` stay as they are;
    /// [`S3LockProvider::prefix`] shows the prefix in use). [`key_for`] never produces `/` or
    /// `.`, so no key holds one after its prefix, and providers with different prefixes never
    /// share an object, whatever their lock names: prefix `app` with name `2x` is
    /// `app/2x`, prefix `app2` with name `x` is `app2/x`, and a nested `app/2/` cannot meet
    /// `app/` either. The empty prefix stays empty (objects at the top of the bucket).
    ///
    /// [`key_for`]: crate::key_for
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Validates the configuration and builds the provider. An invalid bucket name, prefix or
    /// `locked_by` gives [`Error::Setup`]. Does no I/O: a missing bucket
    /// is reported by the first lock call (or checked up front with
    /// [`S3LockProvider::check_bucket`]).
    ///
    /// [`Error::Setup`]: shedlock::Error::Setup
    pub fn build(self) -> Result<S3LockProvider> {
        let b = &self.bucket;
        let bucket_ok = (3..=63).contains(&b.len())
            && b.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
            && b.starts_with(|c: char| c.is_ascii_alphanumeric())
            && b.ends_with(|c: char| c.is_ascii_alphanumeric())
            && !b.contains("..");
        if !bucket_ok {
            return Err(Error::setup(
                BACKEND,
                format!(
                    "bucket name {b:?} is invalid: S3 bucket names are 3 to 63 lower-case letters, \
                 digits, '-' or '.', starting and ending with a letter or digit"
                ),
            ));
        }
        let prefix = delimited(self.prefix);
        let p = &prefix;
        let prefix_ok = p.len() <= MAX_PREFIX_LEN
            && p.bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'/'))
            && !p.starts_with('/')
            && !p.contains("..")
            && !p.contains("//");
        if !prefix_ok {
            return Err(Error::setup(
                BACKEND,
                format!(
                    "key prefix {p:?} is invalid: use at most {MAX_PREFIX_LEN} ASCII letters, digits, \
                 '-', '_', '.' or '/' (a final '/' included), without '..' or '//', not starting \
                 with '/'"
                ),
            ));
        }
        // S3 conditions cannot read a server clock: the lease is always client time.
        let mut settings = self.settings;
        let settings = settings.set_time_source(TimeSource::Client).clone().validate(BACKEND)?;
        let store =
            S3Store { client: self.client, bucket: self.bucket, prefix, seen: Mutex::default() };
        Ok(S3LockProvider { inner: StoreProvider::new(store, settings) })
    }
}

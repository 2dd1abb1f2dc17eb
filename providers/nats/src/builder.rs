//! [`NatsLockProviderBuilder`]: the bucket, the domain, the time source and the checks `build`
//! makes.

use std::{
    fmt,
    sync::{Arc, Mutex},
};

use async_nats::Client;
use shedlock::{ClockBuilder, Error, ProviderBuilder, Result, TimeSource, store::ProviderSettings};
use tokio::sync::OnceCell;

use crate::{
    BACKEND, DEFAULT_BUCKET, MAX_BUCKET_LEN, NatsLockProvider, PermissionWatch, inner::Inner,
};

/// Builds a [`NatsLockProvider`].
///
/// The shared setters (`operation_timeout`, `locked_by`, `clock`) come from [`ProviderBuilder`]
/// (and [`ClockBuilder`]), in scope with `use shedlock_nats::ProviderBuilder;`. Here with the time
/// limit `None` only the client's own request timeout applies; the clock is read only with
/// [`TimeSource::Client`].
#[must_use]
pub struct NatsLockProviderBuilder {
    client: Client,
    bucket: String,
    domain: Option<String>,
    watch: Option<PermissionWatch>,
    settings: ProviderSettings,
}

impl fmt::Debug for NatsLockProviderBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client is left out on purpose: its options may carry credentials.
        f.debug_struct("NatsLockProviderBuilder")
            .field("bucket", &self.bucket)
            .field("domain", &self.domain)
            .field("permission_watch", &self.watch.is_some())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ProviderBuilder for NatsLockProviderBuilder {
    fn settings_mut(&mut self) -> &mut ProviderSettings {
        &mut self.settings
    }
}

impl ClockBuilder for NatsLockProviderBuilder {}

impl NatsLockProviderBuilder {
    /// The key-value bucket (default `shedlock`): the stream `KV_<bucket>`. ASCII letters,
    /// digits, `-` and `_`, at most [`MAX_BUCKET_LEN`] bytes.
    pub fn bucket(mut self, bucket: impl Into<String>) -> Self {
        self.bucket = bucket.into();
        self
    }

    /// The JetStream domain, when the bucket lives in one (JetStream API subjects then start
    /// with `$JS.<domain>.API` instead of `$JS.API`). Default: none.
    pub fn domain(mut self, domain: impl Into<String>) -> Self {
        self.domain = Some(domain.into());
        self
    }

    /// The client's [`PermissionWatch`] (the one whose [`record`](PermissionWatch::record) its
    /// event callback calls): a request the server refuses for a missing permission then fails
    /// at once with [`Error::Setup`] naming the subject and the permission, instead of waiting
    /// out its time limit and failing as a request without an answer.
    /// [`NatsLockProvider::connect`] sets it.
    pub fn permission_watch(mut self, watch: PermissionWatch) -> Self {
        self.watch = Some(watch);
        self
    }

    /// Whose clock judges expiry (default [`TimeSource::Server`]: the server's per-message TTL).
    /// [`TimeSource::Client`] stores `lock_until` from this instance's [`clock`](Self::clock) in
    /// the message instead: for buckets without per-message TTL (servers before 2.11), and unsafe
    /// beyond the clock skew between nodes.
    pub fn time_source(mut self, source: TimeSource) -> Self {
        self.settings.set_time_source(source);
        self
    }

    /// Validates the configuration and builds the provider. An invalid bucket name, domain or
    /// `locked_by` gives [`Error::Setup`]. Does no I/O: a missing bucket
    /// is reported by the first lock call (or checked up front with
    /// [`NatsLockProvider::check_bucket`]).
    pub fn build(self) -> Result<NatsLockProvider> {
        let token_ok = |s: &str| {
            !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if !token_ok(&self.bucket) || self.bucket.len() > MAX_BUCKET_LEN {
            return Err(Error::setup(
                BACKEND,
                format!(
                    "bucket name {:?} is invalid: use 1 to {MAX_BUCKET_LEN} ASCII letters, digits, '-' or '_'",
                    self.bucket
                ),
            ));
        }
        if let Some(d) = self.domain.as_deref().filter(|d| !token_ok(d)) {
            return Err(Error::setup(
                BACKEND,
                format!("JetStream domain {d:?} is invalid: use ASCII letters, digits, '-' or '_'"),
            ));
        }
        let settings = self.settings.validate(BACKEND)?;
        let api = match &self.domain {
            Some(d) => format!("$JS.{d}.API"),
            None => "$JS.API".to_owned(),
        };
        let stream = format!("KV_{}", self.bucket);
        Ok(NatsLockProvider {
            inner: Arc::new(Inner {
                subject_prefix: format!("$KV.{}.", self.bucket),
                direct_get: format!("{api}.DIRECT.GET.{stream}"),
                purge: format!("{api}.STREAM.PURGE.{stream}"),
                info: format!("{api}.STREAM.INFO.{stream}"),
                create: format!("{api}.STREAM.CREATE.{stream}"),
                consumer_create: format!("{api}.CONSUMER.CREATE.{stream}"),
                consumer_delete: format!("{api}.CONSUMER.DELETE.{stream}"),
                // The client's inbox prefix (`_INBOX` unless a custom one was set): replies
                // come back on `<prefix>.…`.
                inbox_prefix: self
                    .client
                    .new_inbox()
                    .rsplit_once('.')
                    .map_or_else(|| "_INBOX".to_owned(), |(p, _)| p.to_owned()),
                client: self.client,
                watch: self.watch,
                bucket: self.bucket,
                stream,
                settings,
                seen: Mutex::default(),
                checked: OnceCell::new(),
            }),
        })
    }
}
impl NatsLockProvider {
    /// Starts a builder on the caller's client (bucket `shedlock`, server time, 10 s operation
    /// timeout).
    pub fn builder(client: Client) -> NatsLockProviderBuilder {
        NatsLockProviderBuilder {
            client,
            bucket: DEFAULT_BUCKET.to_owned(),
            domain: None,
            watch: None,
            settings: ProviderSettings::new(),
        }
    }
}

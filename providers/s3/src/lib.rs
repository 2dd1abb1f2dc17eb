//! Amazon S3 lock provider for [`shedlock`], on the caller's [`aws_sdk_s3::Client`] (or an
//! [`SdkConfig`](aws_types::SdkConfig)), with S3's conditional writes.
//!
//! One object per lock name, `<prefix><key_for(name)>`, whose small JSON body holds the lease
//! (`lock_until_ms`, client time), the owner (a random acquisition id) and the fencing token.
//! A non-empty prefix ends with `/` (or `.`), characters [`key_for`] never produces, so
//! providers with different prefixes never share an object (see
//! [`prefix`](S3LockProviderBuilder::prefix)).
//!
//!
//! - **Create**: `PutObject` with `If-None-Match: *` — only a missing object accepts it.
//! - **Take over** (the lease ended, or the lock was released), **extend** and **unlock**:
//!   `PutObject` with `If-Match: <ETag>` — only the object as it was read (or as this holder
//!   last wrote it) accepts it. Every body carries a fresh acquisition id, so every write has a
//!   new ETag, and a stale holder's `If-Match` fails (`412 Precondition Failed`): unlock and
//!   extend are owner-checked.
//! - **Client time**: S3 conditions cannot read a server clock, so the lease is milliseconds
//!   since the Unix epoch from the instance's [`Clock`](shedlock::Clock).
//! - **Fencing tokens**: the body's `fencing_token` + 1 on every takeover, seeded from the clock
//!   (in microseconds) when the object is created.
//! - **Inspection**: `inspect` is one `GetObject`; `list` is one `ListObjectsV2` under the
//!   escaped prefix and one `GetObject` per object of the page; `force_release` is one
//!   `DeleteObject` with `If-Match` on the ETag of the acquisition seen.
//!
//! ```no_run
//! # async fn demo(client: aws_sdk_s3::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_s3::S3LockProvider;
//!
//! let provider = S3LockProvider::builder(client, "my-locks-bucket").build()?;
//! let cfg = LockConfig::new("nightly-report", Duration::from_secs(600), Duration::from_secs(30))?;
//! if let Some(lock) = provider.try_lock(&cfg).await? {
//!     // ... run the task ...
//!     lock.unlock().await?;
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

use std::{
    collections::HashMap,
    fmt,
    sync::{Mutex, PoisonError},
    time::{Duration, SystemTime},
};

use aws_sdk_s3::{
    Client,
    error::{DisplayErrorContext, ProvideErrorMetadata, SdkError},
    primitives::ByteStream,
    types::{BucketLocationConstraint, CreateBucketConfiguration},
};
use serde_json::{Value, json};
use shedlock::{
    Capabilities, Error, ForceRelease, LockInfo, LockPage, LockProvider, Result, TimeSource,
    store::{
        DelegatingProvider, Extension, Granted, LeaseStore, ProviderSettings, Request, Settings,
        StoreProvider,
    },
    support::{duration_millis_ceil, from_unix_micros, unix_micros, unix_millis, with_timeout},
};

const BACKEND: &str = "s3";

/// The longest lock name, in bytes. An escaped name is at most three times as long
/// ([`key_for`]), which with the longest prefix stays inside S3's 1 024-byte key limit.
pub const MAX_NAME_LEN: usize = 256;

/// The longest key prefix, in bytes, its final `/` included.
pub const MAX_PREFIX_LEN: usize = 255;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "shedlock/";

/// The default time limit of each lock operation: 10 s, as for every provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT as DEFAULT_TIMEOUT;
/// The builder setters every provider shares (`operation_timeout`, `locked_by`, `clock`).
pub use shedlock::{ClockBuilder, ProviderBuilder};

/// Maps a lock name to its object key suffix, one-to-one: ASCII letters, digits, `-` and `_`
/// stay as they are; every other byte (`/`, `.`, `=`, spaces, control bytes and each byte of a
/// non-ASCII character) becomes `=` and two upper-case hex digits, so no key has path segments
/// such as `..` that an HTTP stack might rewrite.
///
/// ```
/// assert_eq!(shedlock_s3::key_for("nightly-report"), "nightly-report");
/// assert_eq!(shedlock_s3::key_for("a/../b"), "a=2F=2E=2E=2Fb");
/// ```
pub fn key_for(name: &str) -> String {
    let mut key = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_') {
            key.push(char::from(b));
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            key.push('=');
            key.push(char::from(HEX[usize::from(b >> 4)]));
            key.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
    key
}

/// The lock name an object key suffix stands for: the inverse of [`key_for`]. `None` for a
/// suffix [`key_for`] never makes (another character, a bad or lower-case escape, or bytes that
/// are not UTF-8).
///
/// ```
/// assert_eq!(shedlock_s3::name_for("a=2F=2E=2E=2Fb").as_deref(), Some("a/../b"));
/// assert_eq!(shedlock_s3::name_for("a/b"), None);
/// ```
pub fn name_for(key: &str) -> Option<String> {
    let hex = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    let (mut bytes, mut rest) = (Vec::with_capacity(key.len()), key.as_bytes());
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'=' {
            let [h, l, tail @ ..] = tail else { return None };
            let byte = hex(*h)? << 4 | hex(*l)?;
            // key_for escapes every other byte, and only those.
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_') {
                return None;
            }
            bytes.push(byte);
            rest = tail;
        } else if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_') {
            bytes.push(b);
            rest = tail;
        } else {
            return None;
        }
    }
    String::from_utf8(bytes).ok()
}

/// Why an S3 request failed: the [`source`](std::error::Error::source) of the
/// [`shedlock::Error`] a call returns. It never holds the request, the client or its
/// credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum S3Error {
    /// S3 asked to slow down (`SlowDown`, HTTP 503) after the SDK's own retries, or a
    /// conditional write met a concurrent one (`ConditionalRequestConflict`, HTTP 409). Nothing
    /// was written; the call's error is [`Error::Unavailable`] (retryable).
    #[error("{operation}: S3 answered {code} (HTTP {status}): {message}")]
    Throttled {
        /// The lock operation.
        operation: &'static str,
        /// S3's error code.
        code: String,
        /// The HTTP status.
        status: u16,
        /// S3's message.
        message: String,
    },
    /// S3 answered with another error.
    #[error("{operation}: S3 answered {code} (HTTP {status}): {message}")]
    Service {
        /// The lock operation.
        operation: &'static str,
        /// S3's error code.
        code: String,
        /// The HTTP status.
        status: u16,
        /// S3's message.
        message: String,
    },
    /// The request did not get an answer (connection refused or cut, a timeout of the SDK, an
    /// unreadable response): its effect is unknown.
    #[error("{operation}: {message}")]
    Transport {
        /// The lock operation.
        operation: &'static str,
        /// What the SDK reported.
        message: String,
    },
}

/// Builds an [`S3LockProvider`].
///
/// The shared setters (`operation_timeout`, `locked_by`, `clock`) come from [`ProviderBuilder`]
/// (and [`ClockBuilder`]), in scope with `use shedlock_s3::ProviderBuilder;`. Here the time limit
/// includes the SDK's retries (`None`: the SDK's own timeouts only); the clock computes the lease
/// (client time is this provider's only mode).
#[must_use]
pub struct S3LockProviderBuilder {
    client: Client,
    bucket: String,
    prefix: String,
    settings: ProviderSettings,
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
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Validates the configuration and builds the provider. An invalid bucket name, prefix or
    /// `locked_by` gives [`Error::Setup`]. Does no I/O: a missing bucket
    /// is reported by the first lock call (or checked up front with
    /// [`S3LockProvider::check_bucket`]).
    pub fn build(self) -> Result<S3LockProvider> {
        let b = &self.bucket;
        let bucket_ok = (3..=63).contains(&b.len())
            && b.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
            && b.starts_with(|c: char| c.is_ascii_alphanumeric())
            && b.ends_with(|c: char| c.is_ascii_alphanumeric())
            && !b.contains("..");
        if !bucket_ok {
            return Err(setup(format!(
                "bucket name {b:?} is invalid: S3 bucket names are 3 to 63 lower-case letters, \
                 digits, '-' or '.', starting and ending with a letter or digit"
            )));
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
            return Err(setup(format!(
                "key prefix {p:?} is invalid: use at most {MAX_PREFIX_LEN} ASCII letters, digits, \
                 '-', '_', '.' or '/' (a final '/' included), without '..' or '//', not starting \
                 with '/'"
            )));
        }
        // S3 conditions cannot read a server clock: the lease is always client time.
        let mut settings = self.settings;
        let settings = settings.set_time_source(TimeSource::Client).clone().validate(BACKEND)?;
        let store =
            S3Store { client: self.client, bucket: self.bucket, prefix, seen: Mutex::default() };
        Ok(S3LockProvider { inner: StoreProvider::new(store, settings) })
    }
}

/// `prefix`, ending with `/` or `.` (characters [`key_for`] never produces): as it is when it
/// does (or is empty), else with a `/` appended.
fn delimited(mut prefix: String) -> String {
    if !prefix.is_empty() && !prefix.ends_with(PREFIX_ENDS) {
        prefix.push('/');
    }
    prefix
}

/// The characters a non-empty prefix ends with, and that [`key_for`] never produces: a key
/// holds none of them after its prefix.
const PREFIX_ENDS: [char; 2] = ['/', '.'];

/// A [`LockProvider`] on an S3 bucket with conditional writes. Cheap to clone; clones share the
/// client and what the provider last saw of each object.
#[derive(Clone)]
pub struct S3LockProvider {
    inner: StoreProvider<S3Store>,
}

impl fmt::Debug for S3LockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No client: its configuration holds the credentials provider.
        let store = self.inner.store();
        f.debug_struct("S3LockProvider")
            .field("bucket", &store.bucket)
            .field("prefix", &store.prefix)
            .field("settings", self.inner.settings())
            .finish_non_exhaustive()
    }
}

/// How many objects [`Inner::seen`] remembers before it starts over.
const SEEN_CAPACITY: usize = 4096;

/// The state a lock object holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    /// The acquisition id of the writer (the owner check rests on the ETag it produces).
    acquisition: String,
    /// Until when it is held (ms since the epoch); `None`: released.
    until: Option<i64>,
    /// When it was taken or last extended (ms since the epoch).
    at: i64,
    fence: u64,
}

impl State {
    fn body(&self, locked_by: &str) -> Vec<u8> {
        json!({
            "v": 1,
            "acquisition_id": self.acquisition,
            "lock_until_ms": self.until,
            "locked_at_ms": self.at,
            "fencing_token": self.fence,
            "locked_by": locked_by,
        })
        .to_string()
        .into_bytes()
    }

    fn parse(body: &[u8]) -> Option<State> {
        let v: Value = serde_json::from_slice(body).ok()?;
        Some(State {
            acquisition: v.get("acquisition_id")?.as_str()?.to_owned(),
            until: match v.get("lock_until_ms")? {
                Value::Null => None,
                n => Some(n.as_i64()?),
            },
            at: v.get("locked_at_ms")?.as_i64()?,
            fence: v.get("fencing_token")?.as_u64()?,
        })
    }

    fn free_at(&self, now: i64) -> bool {
        self.until.is_none_or(|u| u <= now)
    }
}

/// The answer to a conditional write.
enum Put {
    /// Written, with this ETag.
    Stored(String),
    /// The condition failed: the object exists (`If-None-Match`), or changed or is gone
    /// (`If-Match`).
    Refused,
}

/// The lock objects in one bucket: the [`LeaseStore`] of [`S3LockProvider`].
struct S3Store {
    client: Client,
    bucket: String,
    prefix: String,
    /// Per key, the ETag and state this instance last read or wrote: a free object seen here is
    /// taken with one `If-Match` write, without reading it again.
    seen: Mutex<HashMap<String, (String, State)>>,
}

fn setup(message: impl Into<String>) -> Error {
    Error::Setup { backend: BACKEND, message: message.into() }
}

/// An S3 request the provider sends: what a refusal of it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    GetObject,
    PutObject,
    DeleteObject,
    ListObjectsV2,
    CreateBucket,
}

impl Call {
    /// The request's name in S3's API.
    fn name(self) -> &'static str {
        match self {
            Call::GetObject => "GetObject",
            Call::PutObject => "PutObject",
            Call::DeleteObject => "DeleteObject",
            Call::ListObjectsV2 => "ListObjectsV2",
            Call::CreateBucket => "CreateBucket",
        }
    }

    /// The IAM action that allows it.
    fn action(self) -> &'static str {
        match self {
            Call::GetObject => "s3:GetObject",
            Call::PutObject => "s3:PutObject",
            Call::DeleteObject => "s3:DeleteObject",
            Call::ListObjectsV2 => "s3:ListBucket",
            Call::CreateBucket => "s3:CreateBucket",
        }
    }
}

/// The action an access-denied message names (`… is not authorized to perform: <action> on
/// resource …`), if it names one.
fn named_action(message: &str) -> Option<&str> {
    let rest = &message[message.find("perform: ")? + "perform: ".len()..];
    let action = rest.split_whitespace().next()?.trim_end_matches(['.', ',']);
    action.contains(':').then_some(action)
}

/// The key [`check`](LeaseStore::check) reads and conditionally writes after the prefix: a `.`
/// ([`key_for`] never makes one, so no lock has this key), never written (see `check`).
const CHECK_KEY: &str = ".shedlock-check";

/// The ETag of `check`'s conditional write: no object has it (S3's ETags are hex digits).
const CHECK_ETAG: &str = "\"shedlock-check\"";

/// The HTTP status of a failed request's response, if there was one.
fn status<E, R: HasStatus>(e: &SdkError<E, R>) -> Option<u16> {
    e.raw_response().map(HasStatus::status)
}

/// The HTTP status of a raw response (a trait so that the classification is testable without
/// one).
trait HasStatus {
    fn status(&self) -> u16;
}

impl HasStatus for aws_sdk_s3::config::http::HttpResponse {
    fn status(&self) -> u16 {
        self.status().as_u16()
    }
}

/// This instance's clock, which judges expiry (the provider always runs in client time).
fn now(req: &Request<'_>) -> SystemTime {
    req.client_now().unwrap_or_else(|| req.settings().clock().now())
}

/// Forgets what this instance saw of a key unless disarmed: an acquire that failed or was
/// dropped mid-flight (a timeout, a cancelled task) may have changed the object.
struct ForgetOnDrop<'a> {
    store: &'a S3Store,
    key: &'a str,
    armed: bool,
}

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.store.forget(self.key);
        }
    }
}

impl S3Store {
    fn key(&self, name: &str) -> String {
        format!("{}{}", self.prefix, key_for(name))
    }

    fn remember(&self, key: &str, etag: String, state: State) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() >= SEEN_CAPACITY {
            seen.clear();
        }
        seen.insert(key.to_owned(), (etag, state));
    }

    fn seen(&self, key: &str) -> Option<(String, State)> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).get(key).cloned()
    }

    fn forget(&self, key: &str) {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
    }

    fn missing_bucket(&self) -> Error {
        setup(format!(
            "the bucket {b:?} does not exist: call create_bucket(), or create it with `aws s3api \
             create-bucket --bucket {b}` (conditional writes need S3 or a server that supports \
             If-None-Match and If-Match on PutObject)",
            b = self.bucket
        ))
    }

    /// What a failed `call` means for the caller.
    fn map_err<E, R>(&self, operation: &'static str, call: Call, e: SdkError<E, R>) -> Error
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: HasStatus + fmt::Debug,
    {
        let http = status(&e).unwrap_or(0);
        if let SdkError::ServiceError(s) = &e {
            let code = s.err().code().unwrap_or("unknown").to_owned();
            let message = s.err().message().unwrap_or("").to_owned();
            return match (code.as_str(), http) {
                ("NoSuchBucket", _) => self.missing_bucket(),
                ("SlowDown" | "ConditionalRequestConflict" | "RequestTimeout", _)
                | (_, 503 | 409) => Error::unavailable(
                    BACKEND,
                    S3Error::Throttled { operation, code, status: http, message },
                ),
                ("NotImplemented", _) | (_, 501) => setup(format!(
                    "the server does not support a request the provider needs ({operation}: \
                     {code}: {message}); the provider needs conditional writes (If-None-Match \
                     and If-Match on PutObject)"
                )),
                ("InternalError" | "ServiceUnavailable", _) | (_, 500..=599) => Error::unavailable(
                    BACKEND,
                    S3Error::Service { operation, code, status: http, message },
                ),
                (_, 401 | 403) => self.refused(operation, call, &code, &message),
                (
                    "AccessDenied"
                    | "InvalidAccessKeyId"
                    | "SignatureDoesNotMatch"
                    | "ExpiredToken"
                    | "InvalidToken"
                    | "TokenRefreshRequired"
                    | "RequestTimeTooSkewed",
                    _,
                ) => self.refused(operation, call, &code, &message),
                _ => Error::backend(
                    BACKEND,
                    S3Error::Service { operation, code, status: http, message },
                ),
            };
        }
        if let SdkError::ConstructionFailure(_) = &e {
            return setup(format!(
                "the request could not be built ({}): check the client's region, endpoint and \
                 credentials provider",
                DisplayErrorContext(&e)
            ));
        }
        Error::unavailable(
            BACKEND,
            S3Error::Transport { operation, message: DisplayErrorContext(&e).to_string() },
        )
    }

    /// A request S3 refused (HTTP 401 or 403): [`Error::Setup`] saying what to change — the
    /// credentials, the clock, or the permission `call` needs (S3's `AccessDenied` does not
    /// name it; the provider knows which request it sent). S3's code and message name neither
    /// the secret key nor the signature.
    fn refused(&self, operation: &'static str, call: Call, code: &str, message: &str) -> Error {
        let server = if message.is_empty() {
            format!("HTTP 403 {code}")
        } else {
            format!("{code}: {message}")
        };
        let why = match code {
            "InvalidAccessKeyId" => "S3 does not know the client's access key id (deleted, \
                 inactive, or of another account or endpoint): check the credentials the client \
                 was built with"
                .to_owned(),
            "SignatureDoesNotMatch" => "S3 refused the request's signature: the secret access \
                 key does not belong to the access key id (or something between the client and \
                 S3 changed the request)"
                .to_owned(),
            "ExpiredToken" | "InvalidToken" | "TokenRefreshRequired" => "the client's session \
                 token is expired or invalid: its credentials provider must refresh it"
                .to_owned(),
            "RequestTimeTooSkewed" => "this machine's clock differs from S3's by more than 15 \
                 minutes: synchronise it (the provider's leases are client time too)"
                .to_owned(),
            _ => {
                let ours = self.permission(call);
                // S3 names the action in its newer AccessDenied messages ("… is not authorized
                // to perform: s3:GetObject on resource …"), and it may be another one (a KMS
                // key's).
                let need = match named_action(message) {
                    Some(named) if named != call.action() => {
                        format!("{named} (which S3 names; {} itself needs {ours})", call.name())
                    }
                    _ => ours,
                };
                format!(
                    "the credentials need {need} (see \"Permissions\" in the shedlock-s3 README)"
                )
            }
        };
        setup(format!(
            "S3 refused {} on bucket {:?} in {operation} ({server}): {why}",
            call.name(),
            self.bucket
        ))
    }

    /// The permission `call` needs, on its resource.
    fn permission(&self, call: Call) -> String {
        let (bucket, prefix) = (&self.bucket, &self.prefix);
        match call {
            Call::GetObject => format!(
                "s3:GetObject on arn:aws:s3:::{bucket}/{prefix}*, and s3:ListBucket on \
                 arn:aws:s3:::{bucket} (without it S3 answers 403, not 404, for an object that \
                 does not exist)"
            ),
            Call::PutObject | Call::DeleteObject => {
                format!("{} on arn:aws:s3:::{bucket}/{prefix}*", call.action())
            }
            Call::ListObjectsV2 => format!(
                "s3:ListBucket on arn:aws:s3:::{bucket} (for the prefix {prefix:?}: an s3:prefix \
                 condition must allow \"{prefix}*\")"
            ),
            Call::CreateBucket => format!("s3:CreateBucket on arn:aws:s3:::{bucket}"),
        }
    }

    /// A conditional `PutObject`: `If-None-Match: *` when `etag` is `None`, else `If-Match`.
    async fn put(
        &self,
        req: &Request<'_>,
        key: &str,
        etag: Option<&str>,
        state: &State,
    ) -> Result<Put> {
        let operation = req.operation().label();
        let mut req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type("application/json")
            .body(ByteStream::from(state.body(req.owner().locked_by())));
        req = match etag {
            None => req.if_none_match("*"),
            Some(e) => req.if_match(e),
        };
        match req.send().await {
            Ok(out) => match out.e_tag {
                Some(tag) => Ok(Put::Stored(tag)),
                None => Err(Error::backend(
                    BACKEND,
                    format!("{operation}: the server stored the lock object but sent no ETag"),
                )),
            },
            // 412: the condition failed. 404 on If-Match: the object is gone.
            Err(e) if matches!(status(&e), Some(412)) => Ok(Put::Refused),
            Err(e) if etag.is_some() && matches!(status(&e), Some(404)) => {
                if e.as_service_error().and_then(ProvideErrorMetadata::code) == Some("NoSuchBucket")
                {
                    return Err(self.missing_bucket());
                }
                Ok(Put::Refused)
            }
            Err(e) => Err(self.map_err(operation, Call::PutObject, e)),
        }
    }

    /// The object's ETag and state; `None` if there is no object.
    async fn read(&self, operation: &'static str, key: &str) -> Result<Option<(String, State)>> {
        let Some((etag, body)) = self.fetch(operation, key).await? else { return Ok(None) };
        Ok(Some((etag, self.parse(key, &body)?)))
    }

    /// One `GetObject`: the object's ETag and body; `None` if there is no object.
    async fn fetch(&self, operation: &'static str, key: &str) -> Result<Option<(String, Vec<u8>)>> {
        let r = self.client.get_object().bucket(&self.bucket).key(key).send().await;
        let out = match r {
            Ok(out) => out,
            Err(e) if matches!(status(&e), Some(404)) => {
                if e.as_service_error().and_then(ProvideErrorMetadata::code) == Some("NoSuchBucket")
                {
                    return Err(self.missing_bucket());
                }
                return Ok(None);
            }
            Err(e) => return Err(self.map_err(operation, Call::GetObject, e)),
        };
        let etag = out.e_tag.clone().ok_or_else(|| {
            Error::backend(BACKEND, format!("{operation}: the lock object {key:?} has no ETag"))
        })?;
        let body = out.body.collect().await.map_err(|e| {
            Error::unavailable(
                BACKEND,
                S3Error::Transport { operation, message: format!("reading the lock object: {e}") },
            )
        })?;
        Ok(Some((etag, body.into_bytes().to_vec())))
    }

    /// The state in the body of the object at `key`: [`Error::Backend`] when it is not a lock
    /// object's.
    fn parse(&self, key: &str, body: &[u8]) -> Result<State> {
        State::parse(body).ok_or_else(|| {
            Error::backend(
                BACKEND,
                format!(
                    "the object {key:?} in bucket {:?} is not a lock object written by this \
                     provider; delete it or use another prefix",
                    self.bucket
                ),
            )
        })
    }

    /// The acquire: `Some((etag, state))` of the object this caller wrote, `None` when held.
    async fn take(
        &self,
        req: &Request<'_>,
        key: &str,
        mine: &State,
    ) -> Result<Option<(String, State)>> {
        let now = mine.at;
        let next = |prev: &State| State { fence: prev.fence.saturating_add(1), ..mine.clone() };
        // 1. The object as this instance last saw it, if that was free: one If-Match write.
        //    Otherwise, or without a record of it: one If-None-Match write (a missing object).
        let first = match self.seen(key) {
            Some((etag, prev)) if prev.free_at(now) => {
                let s = next(&prev);
                (self.put(req, key, Some(&etag), &s).await?, s)
            }
            Some(_) => (Put::Refused, mine.clone()),
            None => (self.put(req, key, None, mine).await?, mine.clone()),
        };
        if let (Put::Stored(etag), s) = first {
            return Ok(Some((etag, s)));
        }
        // 2. It exists (or changed): read it. Free (released, or its lease ended by this
        //    instance's clock): take it over, conditioned on what was read.
        match self.read("try_lock", key).await? {
            None => match self.put(req, key, None, mine).await? {
                Put::Stored(etag) => Ok(Some((etag, mine.clone()))),
                Put::Refused => Ok(None),
            },
            Some((etag, prev)) if prev.free_at(now) => {
                let s = next(&prev);
                match self.put(req, key, Some(&etag), &s).await? {
                    Put::Stored(new) => Ok(Some((new, s))),
                    Put::Refused => Ok(None),
                }
            }
            Some((etag, prev)) => {
                self.remember(key, etag, prev);
                Ok(None)
            }
        }
    }

    /// Writes `next` over the holder's object; `false` when it is no longer the holder's.
    async fn write(&self, req: &Request<'_>, held: &mut Held, next: State) -> Result<bool> {
        match self.put(req, &held.key, Some(&held.etag), &next).await {
            Ok(Put::Stored(etag)) => {
                self.remember(&held.key, etag.clone(), next.clone());
                held.etag = etag;
                held.state = next;
                Ok(true)
            }
            Ok(Put::Refused) => {
                self.forget(&held.key);
                Ok(false)
            }
            Err(e) => {
                self.forget(&held.key);
                Err(e)
            }
        }
    }
}

/// How many times [`force_release`](LeaseStore::force_release) reads the object again and
/// retries its conditional delete when the object's ETag changed but its acquisition did not
/// (the holder extended it in between).
const FORCE_RELEASE_ATTEMPTS: usize = 3;

/// The `locked_by` a lock object's body holds (informational; `None` when it has none).
fn body_locked_by(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    Some(v.get("locked_by")?.as_str()?.to_owned())
}

impl S3Store {
    /// The name a key of this store stands for (`<prefix><key_for(name)>`).
    fn name_of(&self, key: &str) -> Result<String> {
        key.strip_prefix(self.prefix.as_str()).and_then(name_for).ok_or_else(|| {
            Error::backend(
                BACKEND,
                format!(
                    "the object {key:?} in bucket {:?} is not a lock object of this provider \
                     (its key is not the prefix and an escaped lock name); delete it or use \
                     another prefix",
                    self.bucket
                ),
            )
        })
    }

    /// One `GetObject`: the object's ETag, state and `locked_by`; `None` if there is none.
    async fn read_record(
        &self,
        operation: &'static str,
        name: &str,
        settings: &Settings,
    ) -> Result<Option<(String, LockInfo)>> {
        let key = self.key(name);
        let Some((etag, body)) = self.fetch(operation, &key).await? else { return Ok(None) };
        let state = self.parse(&key, &body)?;
        Ok(Some((etag, info(name, &state, body_locked_by(&body), settings))))
    }
}

/// An object as an operator sees it: held while its lease is after this instance's clock (the
/// provider's leases are client time); a released object (no lease) is free.
fn info(name: &str, s: &State, locked_by: Option<String>, settings: &Settings) -> LockInfo {
    let now = unix_millis(settings.client_now().unwrap_or_else(|| settings.clock().now()));
    let time = |ms: i64| from_unix_micros(ms.saturating_mul(1000));
    let mut info = LockInfo::new(name, s.acquisition.clone(), !s.free_at(now), TimeSource::Client)
        .with_locked_at(time(s.at))
        .with_fencing_token(Some(s.fence));
    if let Some(until) = s.until {
        info = info.with_lock_until(time(until));
    }
    if let Some(by) = locked_by {
        info = info.with_locked_by(by);
    }
    info
}

/// One held lock: its key, the ETag this holder last wrote (the owner check) and its state.
struct Held {
    key: String,
    etag: String,
    state: State,
}

#[async_trait::async_trait]
impl LeaseStore for S3Store {
    type Held = Held;

    fn capabilities(&self, _: &Settings) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(true)
            // S3 conditions cannot read a server clock: the lease is client time.
            .with_server_time(false)
            .with_owner_checked(true)
            .with_granularity(Duration::from_millis(1))
            .with_max_name_len(Some(MAX_NAME_LEN))
            .with_check(true)
            .with_inspect(true)
            .with_list(true)
            .with_force_release(true)
    }

    /// Proves what locking needs, writing nothing; otherwise [`Error::Setup`] says what to
    /// change. Three requests:
    ///
    /// 1. `ListObjectsV2` under the prefix, one key at most: the bucket exists, S3 accepts the
    ///    credentials, and they hold `s3:ListBucket` for the prefix.
    /// 2. `GetObject` of `<prefix>.shedlock-check` (no lock has that key): `404` proves
    ///    `s3:GetObject` on the prefix, and that a missing object reads as missing (S3 answers
    ///    `403` instead to a caller without `s3:ListBucket`).
    /// 3. `PutObject` of that key with `If-Match` on an ETag no object has: S3 checks
    ///    `s3:PutObject`, then refuses the write (`404`, or `412` if the object exists). A
    ///    server that stores it anyway ignores `If-Match`: no conditional writes,
    ///    [`Error::Setup`].
    async fn check(&self, _: &Settings) -> Result<()> {
        let listed = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(&self.prefix)
            .max_keys(1)
            .send()
            .await;
        match listed {
            Ok(_) => {}
            Err(e) if matches!(status(&e), Some(404)) => return Err(self.missing_bucket()),
            Err(e) => return Err(self.map_err("check", Call::ListObjectsV2, e)),
        }
        let key = format!("{}{CHECK_KEY}", self.prefix);
        self.fetch("check", &key).await?;
        let r = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(&key)
            .body(ByteStream::from_static(b""))
            .if_match(CHECK_ETAG)
            .send()
            .await;
        match r {
            Err(e)
                if e.as_service_error().and_then(ProvideErrorMetadata::code)
                    == Some("NoSuchBucket") =>
            {
                Err(self.missing_bucket())
            }
            Err(e) if matches!(status(&e), Some(404 | 412)) => Ok(()),
            Err(e) => Err(self.map_err("check", Call::PutObject, e)),
            Ok(_) => Err(setup(format!(
                "the server stored the object {key:?} in bucket {:?} although its If-Match \
                 matched no object: it ignores conditional writes, which the provider needs \
                 (If-None-Match and If-Match on PutObject); delete that object",
                self.bucket
            ))),
        }
    }

    /// One `GetObject`.
    async fn inspect(&self, name: &str, settings: &Settings) -> Result<Option<LockInfo>> {
        Ok(self.read_record("inspect", name, settings).await?.map(|(_, info)| info))
    }

    /// One `ListObjectsV2` of the keys under `<prefix><key_for(prefix)>` after
    /// `<prefix><cursor>` (`StartAfter`), at most one more than the page (a name is under the
    /// prefix exactly when its key is under the escaped prefix: [`key_for`] escapes byte by
    /// byte), then one `GetObject` per key of the page, one after the other. The page is in key
    /// order; the cursor is the key (after the provider's prefix) of the last object of the
    /// page. Keys with a `/` or `.` after the provider's prefix belong to a longer prefix
    /// (another provider's: [`key_for`] makes neither) and are passed over; an object deleted
    /// between the listing and its read is left out.
    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
        settings: &Settings,
    ) -> Result<LockPage> {
        let out = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(self.key(prefix))
            .set_start_after(cursor.map(|c| format!("{}{c}", self.prefix)))
            .max_keys(i32::try_from(limit.saturating_add(1)).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(|e| self.map_err("list", Call::ListObjectsV2, e))?;
        let keys: Vec<&str> = out.contents().iter().filter_map(|o| o.key()).collect();
        let more = keys.len() > limit || out.is_truncated() == Some(true);
        let mut records = Vec::with_capacity(keys.len().min(limit));
        let mut last = None;
        for key in keys.into_iter().take(limit) {
            let suffix = key.strip_prefix(self.prefix.as_str()).unwrap_or(key);
            last = Some(suffix.to_owned());
            if suffix.contains(PREFIX_ENDS) {
                continue;
            }
            let name = self.name_of(key)?;
            if let Some((_, body)) = self.fetch("list", key).await? {
                let state = self.parse(key, &body)?;
                records.push(info(&name, &state, body_locked_by(&body), settings));
            }
        }
        Ok(LockPage::new(records, if more { last } else { None }))
    }

    /// One `GetObject`, then, if the object is still the acquisition seen, one `DeleteObject`
    /// with `If-Match: <the ETag read>`. A failed condition (`412`: the object was written in
    /// between) reads it again: another acquisition is `Changed`; the same one (its holder
    /// extended it) is tried again, at most [`FORCE_RELEASE_ATTEMPTS`] times in all.
    async fn force_release(&self, seen: &LockInfo, settings: &Settings) -> Result<ForceRelease> {
        let name = seen.name.as_str();
        let key = self.key(name);
        let mut attempts = 0;
        loop {
            let Some((etag, current)) = self.read_record("force_release", name, settings).await?
            else {
                return Ok(ForceRelease::Changed(None));
            };
            if current.acquisition != seen.acquisition || attempts == FORCE_RELEASE_ATTEMPTS {
                return Ok(ForceRelease::Changed(Some(current)));
            }
            attempts += 1;
            let r = self
                .client
                .delete_object()
                .bucket(&self.bucket)
                .key(&key)
                .if_match(etag)
                .send()
                .await;
            match r {
                Ok(_) => {
                    self.forget(&key);
                    return Ok(ForceRelease::Released(current));
                }
                // 412: written since it was read. 404: deleted since.
                Err(e) if matches!(status(&e), Some(412 | 404)) => {
                    if e.as_service_error().and_then(ProvideErrorMetadata::code)
                        == Some("NoSuchBucket")
                    {
                        return Err(self.missing_bucket());
                    }
                }
                Err(e) => return Err(self.map_err("force_release", Call::DeleteObject, e)),
            }
        }
    }

    async fn acquire(&self, req: &Request<'_>) -> Result<Option<Granted<Held>>> {
        let key = self.key(req.name());
        let wall = now(req);
        let at = unix_millis(wall);
        let mine = State {
            acquisition: req.owner().hex(),
            until: Some(at.saturating_add(duration_millis_ceil(req.lock_at_most_for()))),
            at,
            // A new object's counter starts at the clock in microseconds, so tokens keep rising
            // when an object is deleted and created again.
            fence: u64::try_from(unix_micros(wall)).unwrap_or(0).saturating_add(1),
        };
        let won = {
            let mut guard = ForgetOnDrop { store: self, key: &key, armed: true };
            let won = self.take(req, &key, &mine).await?;
            guard.armed = false;
            won
        };
        let Some((etag, state)) = won else { return Ok(None) };
        self.remember(&key, etag.clone(), state.clone());
        let fence = state.fence;
        Ok(Some(Granted::new(Held { key, etag, state }).with_fencing_token(fence)))
    }

    async fn release(&self, req: &Request<'_>, held: &mut Held) -> Result<()> {
        // Held at least until lockedAt + lock_at_least_for (at-least <= at-most, so never past
        // the current lease); after that, released. Owner-checked by If-Match either way.
        let keep = held.state.at.saturating_add(duration_millis_ceil(req.lock_at_least_for()));
        let now = unix_millis(now(req));
        let next = State {
            until: (keep > now).then(|| keep.min(held.state.until.unwrap_or(keep))),
            ..held.state.clone()
        };
        if !self.write(req, held, next).await? {
            tracing::debug!(key = %held.key, "unlock: no longer the holder; nothing changed");
        }
        Ok(())
    }

    async fn extend(&self, req: &Request<'_>, held: &mut Held) -> Result<Extension> {
        let now = unix_millis(now(req));
        // An expired lock is not revived, by the same clock that judges expiry.
        if held.state.until.is_none_or(|u| u <= now) {
            return Ok(Extension::Lost);
        }
        let next = State {
            until: Some(now.saturating_add(duration_millis_ceil(req.lock_at_most_for()))),
            at: now,
            ..held.state.clone()
        };
        Ok(if self.write(req, held, next).await? { Extension::Extended } else { Extension::Lost })
    }
}

impl DelegatingProvider for S3LockProvider {
    fn delegate(&self) -> &dyn LockProvider {
        &self.inner
    }
}

impl S3LockProvider {
    /// Starts a builder on the caller's client and bucket (prefix `shedlock/`, 10 s operation
    /// timeout, the system clock). The client brings its HTTP stack, credentials, region,
    /// addressing style, retries and timeouts.
    pub fn builder(client: Client, bucket: impl Into<String>) -> S3LockProviderBuilder {
        S3LockProviderBuilder {
            client,
            bucket: bucket.into(),
            prefix: DEFAULT_PREFIX.to_owned(),
            settings: ProviderSettings::new(),
        }
    }

    /// Starts a builder on a client made from the caller's shared AWS configuration (what
    /// `aws_config::load_from_env()` returns).
    pub fn builder_from_config(
        config: &aws_types::SdkConfig,
        bucket: impl Into<String>,
    ) -> S3LockProviderBuilder {
        Self::builder(Client::new(config), bucket)
    }

    /// The bucket name.
    pub fn bucket(&self) -> &str {
        &self.inner.store().bucket
    }

    /// The key prefix in use: the configured one, with the `/` the builder appended if it did
    /// not end with `/` or `.` (empty when configured empty).
    pub fn prefix(&self) -> &str {
        &self.inner.store().prefix
    }

    /// The object key a lock name maps to: `<prefix><key_for(name)>`.
    pub fn key_for(&self, name: &str) -> String {
        self.inner.store().key(name)
    }

    /// Creates the bucket (in the client's region), or accepts it if this account already owns
    /// it. Idempotent.
    pub async fn create_bucket(&self) -> Result<()> {
        let i = self.inner.store();
        with_timeout("create_bucket", self.inner.settings().timeout(), async {
            let mut req = i.client.create_bucket().bucket(&i.bucket);
            if let Some(region) =
                i.client.config().region().map(|r| r.as_ref()).filter(|r| *r != "us-east-1")
            {
                req = req.create_bucket_configuration(
                    CreateBucketConfiguration::builder()
                        .location_constraint(BucketLocationConstraint::from(region))
                        .build(),
                );
            }
            match req.send().await {
                Ok(_) => Ok(()),
                Err(e)
                    if e.as_service_error().and_then(ProvideErrorMetadata::code)
                        == Some("BucketAlreadyOwnedByYou") =>
                {
                    Ok(())
                }
                Err(e) => Err(i.map_err("create_bucket", Call::CreateBucket, e)),
            }
        })
        .await
    }

    /// Checks that the bucket exists and that this client may lock in it, writing nothing:
    /// `ListObjectsV2` under the prefix, `GetObject` and a refused conditional `PutObject` of
    /// a key no lock has (`s3:ListBucket`, `s3:GetObject`, `s3:PutObject`; see "Permissions" in
    /// the README). Otherwise [`Error::Setup`] says what to change. The same as
    /// [`LockProvider::check`].
    pub async fn check_bucket(&self) -> Result<()> {
        self.inner.check().await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    use aws_sdk_s3::{
        config::BehaviorVersion, error::ErrorMetadata, operation::put_object::PutObjectError,
    };

    #[derive(Debug)]
    struct Raw(u16);

    impl HasStatus for Raw {
        fn status(&self) -> u16 {
            self.0
        }
    }

    fn inner() -> S3Store {
        let conf =
            aws_sdk_s3::Config::builder().behavior_version(BehaviorVersion::latest()).build();
        S3Store {
            client: Client::from_conf(conf),
            bucket: "locks".into(),
            prefix: DEFAULT_PREFIX.into(),
            seen: Mutex::default(),
        }
    }

    fn answered(code: &str, status: u16) -> SdkError<PutObjectError, Raw> {
        answered_with(code, status, "m")
    }

    fn answered_with(code: &str, status: u16, message: &str) -> SdkError<PutObjectError, Raw> {
        let meta = ErrorMetadata::builder().code(code).message(message).build();
        SdkError::service_error(PutObjectError::generic(meta), Raw(status))
    }

    #[test]
    fn errors_are_classified_for_retries_and_setup() {
        let i = inner();
        let put = Call::PutObject;
        for (code, http) in [("SlowDown", 503), ("ConditionalRequestConflict", 409)] {
            let e = i.map_err("try_lock", put, answered(code, http));
            assert!(e.is_retryable(), "{e:?}");
            let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<S3Error>());
            assert!(matches!(source, Some(S3Error::Throttled { status, .. }) if *status == http));
        }
        assert!(i.map_err("unlock", put, answered("InternalError", 500)).is_retryable());
        for (code, http) in [("NoSuchBucket", 404), ("AccessDenied", 403), ("NotImplemented", 501)]
        {
            let e = i.map_err("try_lock", put, answered(code, http));
            assert!(matches!(e, Error::Setup { .. }), "{code}: {e:?}");
        }
        let e = i.map_err("try_lock", put, answered("InvalidArgument", 400));
        assert!(matches!(e, Error::Backend { .. }) && !e.is_retryable(), "{e:?}");
    }

    fn setup_message(e: Error) -> String {
        match e {
            Error::Setup { message, .. } => message,
            other => panic!("expected Setup, got {other:?}"),
        }
    }

    #[test]
    fn a_refusal_names_the_request_its_permission_and_the_readme() {
        let i = inner();
        for (call, operation, needs) in [
            (Call::PutObject, "try_lock", "s3:PutObject on arn:aws:s3:::locks/shedlock/*"),
            (Call::GetObject, "inspect", "s3:GetObject on arn:aws:s3:::locks/shedlock/*"),
            (
                Call::DeleteObject,
                "force_release",
                "s3:DeleteObject on arn:aws:s3:::locks/shedlock/*",
            ),
            (Call::ListObjectsV2, "list", "s3:ListBucket on arn:aws:s3:::locks"),
            (Call::CreateBucket, "create_bucket", "s3:CreateBucket on arn:aws:s3:::locks"),
        ] {
            // S3's AccessDenied, and a HEAD's 403 without a body (no code, no message).
            for (code, http) in [("AccessDenied", 403), ("unknown", 403)] {
                let m = setup_message(i.map_err(operation, call, answered(code, http)));
                for part in [call.name(), operation, needs, "\"Permissions\""] {
                    assert!(m.contains(part), "{part:?} missing: {m}");
                }
            }
        }
        let m = setup_message(i.map_err("inspect", Call::GetObject, answered("AccessDenied", 403)));
        assert!(m.contains("s3:ListBucket on arn:aws:s3:::locks"), "{m}");
        let kms = "User: arn:aws:iam::1:user/app is not authorized to perform: kms:Decrypt on \
                   resource: arn:aws:kms:us-east-1:1:key/k";
        let m = setup_message(i.map_err(
            "inspect",
            Call::GetObject,
            answered_with("AccessDenied", 403, kms),
        ));
        assert!(m.contains("need kms:Decrypt") && m.contains("s3:GetObject on"), "{m}");
        assert_eq!(named_action(kms), Some("kms:Decrypt"));
        assert_eq!(named_action("Access Denied"), None);
        for (code, says) in [
            ("InvalidAccessKeyId", "access key id"),
            ("SignatureDoesNotMatch", "secret access key"),
            ("ExpiredToken", "session token"),
            ("RequestTimeTooSkewed", "clock"),
        ] {
            let m = setup_message(i.map_err("try_lock", Call::PutObject, answered(code, 403)));
            assert!(m.contains(says) && m.contains(code), "{m}");
        }
    }

    #[test]
    fn keys_are_one_to_one_and_path_safe() {
        let names = ["a", "a/b", "a=2Fb", "..", ".", "a b", "ü", "a\0", "=", "%2F", "A"];
        let keys: std::collections::HashSet<_> = names.iter().map(|n| key_for(n)).collect();
        assert_eq!(keys.len(), names.len());
        for k in &keys {
            assert!(k.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_=".contains(&b)), "{k}");
        }
        // The longest name, all escaped, under the longest prefix, fits S3's 1 024-byte keys.
        assert!(MAX_PREFIX_LEN + key_for(&"\u{7f}".repeat(MAX_NAME_LEN)).len() <= 1024);
    }

    #[test]
    fn keys_map_back_to_their_names_and_no_other_key_does() {
        for name in ["a", "a/b", "a=2Fb", "..", "a b", "ü", "a\0", "=", "%2F", "", "\u{1f512}"] {
            assert_eq!(name_for(&key_for(name)).as_deref(), Some(name), "{name:?}");
        }
        // Not made by key_for: other characters, lower-case or cut escapes, an escaped byte
        // that key_for keeps as it is, bytes that are not UTF-8.
        for key in ["a/b", "a.b", "a=2f", "a=2", "a=", "=41", "=2D", "=FF", "=C3"] {
            assert_eq!(name_for(key), None, "{key:?}");
        }
    }

    #[test]
    fn prefixes_are_delimited_so_tenants_never_share_a_key() {
        assert_eq!(delimited("app".into()), "app/");
        assert_eq!(delimited("app/".into()), "app/");
        assert_eq!(delimited("locks.".into()), "locks.");
        assert_eq!(delimited("a/b-".into()), "a/b-/");
        assert_eq!(delimited(String::new()), "");
        assert_eq!(delimited(DEFAULT_PREFIX.into()), DEFAULT_PREFIX);
        let store = |prefix: &str| S3Store { prefix: delimited(prefix.into()), ..inner() };
        // The tenants of the issue: `app` + `2x` was `app2` + `x`.
        assert_eq!(store("app").key("2x"), "app/2x");
        assert_eq!(store("app2").key("x"), "app2/x");
        // Every pair of prefix and name, nested prefixes included, is a key of its own, and no
        // key holds a delimiter after its prefix.
        let prefixes = ["", "app", "app2", "app/2", "app/2x", "app.", "app.2.", "app2x"];
        let names = ["x", "2x", "2/x", "2.x", "/", ".", "", "2", "app/2x", "=2F"];
        let mut seen = HashMap::new();
        for p in prefixes {
            let s = store(p);
            for n in names {
                let key = s.key(n);
                assert!(!key[s.prefix.len()..].contains(PREFIX_ENDS), "{p:?} {n:?}");
                if let Some(other) = seen.insert(key.clone(), (s.prefix.clone(), n)) {
                    panic!("{p:?} + {n:?} and {other:?} share {key:?}");
                }
            }
        }
    }

    #[test]
    fn a_body_round_trips_and_released_is_free() {
        let s = State { acquisition: "00ff".into(), until: Some(10), at: 5, fence: 7 };
        assert_eq!(State::parse(&s.body("me")), Some(s.clone()));
        assert!(!s.free_at(9) && s.free_at(10));
        let released = State { until: None, ..s };
        assert_eq!(State::parse(&released.body("me")), Some(released.clone()));
        assert!(released.free_at(i64::MIN));
        assert_eq!(State::parse(b"not json"), None);
    }
}

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

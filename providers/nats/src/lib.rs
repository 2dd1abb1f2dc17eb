//! NATS JetStream lock provider for [`shedlock`], on the caller's [`async_nats::Client`].
//!
//! Locks live in a key-value bucket (the JetStream stream `KV_<bucket>`, subjects
//! `$KV.<bucket>.>`): one message per held lock, on the subject of the lock's key.
//!
//! - **Acquire is one round trip** whenever the key is free: a publish to the key's subject with
//!   `Nats-Expected-Last-Subject-Sequence: 0` (only an empty subject accepts it; a second writer
//!   gets error 10071) and `Nats-TTL: <lock_at_most_for>` (the server removes the message when it
//!   expires). Unlock purges the message, so a fresh key, a released one and an expired one are
//!   all an empty subject. A key held elsewhere costs one more round trip the first time this
//!   instance meets that holder (a direct get tells a live lock from a tombstone an operator left
//!   with `nats kv del`; taking the key over a tombstone is one more publish).
//! - **Server time**: expiry is judged by the NATS server's per-message TTL (nats-server 2.11 or
//!   newer, stream option `allow_msg_ttl`), so client clock skew cannot break exclusion.
//!   [`TimeSource::Client`] keeps `lock_until` in the message instead, judged by each instance's
//!   own [`Clock`](shedlock::Clock), for servers or buckets without per-message TTL.
//! - **Owner-checked** unlock and extend by sequence: unlock purges the subject only up to this
//!   acquisition's message (`STREAM.PURGE` with `filter` and `seq`), extend republishes with
//!   `Nats-Expected-Last-Subject-Sequence` = this holder's last sequence. A stale holder changes
//!   nothing.
//! - **Fencing tokens**: the stream sequence of the acquiring message, strictly increasing per
//!   name (stream sequences never repeat while the stream exists; see the README for restarts).
//!
//!
//! **Production posture.** TLS and credentials are async-nats's
//! [`ConnectOptions`](async_nats::ConnectOptions) (a CA file with `add_root_certificates`, a CA as
//! PEM text with [`tls::client_config`], user and password, token);
//! [`NatsLockProvider::connect`] connects with them, reports refused credentials and failed TLS
//! handshakes as [`Error::Setup`] (never quoting a secret) and installs a [`PermissionWatch`], so
//! that a request the server refuses for a missing subject permission fails at once with
//! [`Error::Setup`] naming it. The README's "Permissions" section lists every subject each call
//! publishes to and the nats-server `permissions` blocks for locking, inspection,
//! `force_release` and set-up.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_nats::NatsLockProvider;
//!
//! let client = async_nats::connect("nats://127.0.0.1:4222").await?;
//! let provider = NatsLockProvider::builder(client).bucket("shedlock").build()?;
//! provider.create_bucket().await?; // or create it with provider.bucket_config()
//!
//! let cfg = LockConfig::new("nightly-report", Duration::from_secs(600), Duration::from_secs(30))?;
//! if let Some(lock) = provider.try_lock(&cfg).await? {
//!     // ... run the task ...
//!     lock.unlock().await?;
//! }
//! # Ok(()) }
//! ```

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use async_nats::{Client, HeaderMap, connection::State as ConnState};
use futures_core::Stream as _;
use serde_json::{Value, json};
use shedlock::{
    Acquisition, Capabilities, Error, ForceRelease, Lock, LockConfig, LockHandle, LockInfo,
    LockPage, LockProvider, Result,
    inspect::page_limit,
    store::{Operation, ProviderSettings, Settings, log_forced_release},
    support::{
        MAX_DURATION, check_lock_name, duration_micros, duration_secs_ceil, from_unix_micros,
        unix_micros,
    },
};
use tokio::{sync::OnceCell, time::Instant};

mod connect;
mod error;
mod permissions;
mod request;
pub mod tls;

use error::{api_error, json_err, setup};
pub use permissions::PermissionWatch;
use permissions::{Refused, Violation};
use request::run;
pub use shedlock::TimeSource;

const BACKEND: &str = "nats";

/// The longest lock name, in bytes. An escaped name is at most three times as long (see
/// [key mapping](crate#key-mapping)), which keeps the subject of the longest name, with a
/// 64-byte bucket name, well inside nats-server's default 4 KiB protocol control line.
pub const MAX_NAME_LEN: usize = 1024;

/// The longest bucket name accepted, in bytes.
pub const MAX_BUCKET_LEN: usize = 64;

/// The default time limit of each lock operation: 10 s, as for every provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT as DEFAULT_TIMEOUT;
/// The builder setters every provider shares (`operation_timeout`, `locked_by`, `clock`).
pub use shedlock::{ClockBuilder, ProviderBuilder};

/// The default bucket name.
pub const DEFAULT_BUCKET: &str = "shedlock";

/// The JetStream error code for "wrong last sequence" (a failed compare-and-set).
const ERR_WRONG_LAST_SEQUENCE: u64 = 10071;
/// "stream not found".
const ERR_STREAM_NOT_FOUND: u64 = 10059;
/// "stream name already in use with a different configuration".
const ERR_STREAM_NAME_IN_USE: u64 = 10058;
/// "per-message TTL is disabled".
const ERR_TTL_DISABLED: u64 = 10166;

const H_EXPECTED: &str = "Nats-Expected-Last-Subject-Sequence";
const H_TTL: &str = "Nats-TTL";
const H_SEQUENCE: &str = "Nats-Sequence";
const H_KV_OPERATION: &str = "KV-Operation";
const H_MARKER_REASON: &str = "Nats-Marker-Reason";
const H_TIMESTAMP: &str = "Nats-Time-Stamp";
const H_CONSUMER_STALLED: &str = "Nats-Consumer-Stalled";

/// The field of a lock message that holds the acquisition's fencing token, in every message but
/// the acquiring one (whose stream sequence is the token).
const F_TOKEN: &str = "token";

/// How often a forced release reads the lock and purges its message when the holder's
/// extension keeps replacing that message in between.
const FORCE_RELEASE_ATTEMPTS: usize = 5;

/// Maps a lock name to its key in the bucket, one-to-one: ASCII letters, digits, `-`, `_` and
/// `/` stay as they are; every other byte (including `.`, which separates subject tokens, `=`
/// itself, spaces, `*`, `>` and every byte of a non-ASCII character) becomes `=` followed by
/// two upper-case hex digits. Two different names never share a key.
///
/// ```
/// assert_eq!(shedlock_nats::key_for("nightly-report"), "nightly-report");
/// assert_eq!(shedlock_nats::key_for("a.b c"), "a=2Eb=20c");
/// assert_eq!(shedlock_nats::key_for("=2E"), "=3D2E");
/// ```
pub fn key_for(name: &str) -> String {
    let mut key = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'/') {
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

/// The lock name of a key, the inverse of [`key_for`]: `None` for a key that [`key_for`] makes
/// of no name (a key written by other tools, e.g. with a `.` or a lower-case escape).
fn name_for(key: &str) -> Option<String> {
    let hex = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    };
    let (mut bytes, mut rest) = (Vec::with_capacity(key.len()), key.as_bytes());
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'=' {
            let [hi, lo, tail @ ..] = tail else { return None };
            bytes.push(hex(*hi)? << 4 | hex(*lo)?);
            rest = tail;
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    let name = String::from_utf8(bytes).ok()?;
    // One key per name: a key with an escape key_for would not write is no lock's.
    (key_for(&name) == key).then_some(name)
}

/// Deletes the list's ephemeral consumer when the listing ends (or is dropped), in the
/// background; its inactivity threshold (10 s) removes it anyway.
struct DeleteConsumer {
    inner: Arc<Inner>,
    subject: String,
}

impl Drop for DeleteConsumer {
    fn drop(&mut self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let (inner, subject) = (Arc::clone(&self.inner), std::mem::take(&mut self.subject));
        rt.spawn(async move {
            let delete = inner.request("list", subject, None, Vec::new());
            let timeout = inner.settings.timeout();
            if let Err(error) = request::run_labelled("list", timeout, delete).await {
                tracing::debug!(%error, "nats: deleting the list consumer failed; it expires by itself");
            }
        });
    }
}

/// The stream sequence, the time (the server's) and the number of messages still pending of
/// a message a consumer delivered, from its reply subject:
/// `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ns>.<pending>`, or
/// with `<domain>.<account hash>.` before the stream and a token after the pending count.
fn ack_metadata(reply: &str) -> Option<(u64, SystemTime, u64)> {
    let t: Vec<&str> = reply.split('.').collect();
    let at = match t.len() {
        9 => 5,
        n if n >= 12 => 7,
        _ => return None,
    };
    if t[0] != "$JS" || t[1] != "ACK" {
        return None;
    }
    let seq = t[at].parse().ok()?;
    let nanos: u64 = t[at + 2].parse().ok()?;
    let pending = t[at + 3].parse().ok()?;
    Some((seq, UNIX_EPOCH.checked_add(Duration::from_nanos(nanos))?, pending))
}

/// A `Nats-TTL` header as this provider writes it: whole seconds (`"30"`, or `"30s"`).
fn parse_ttl(ttl: &str) -> Option<Duration> {
    ttl.strip_suffix('s').unwrap_or(ttl).parse().ok().map(Duration::from_secs)
}

/// A UTC time as the server writes it (`Nats-Time-Stamp`, RFC 3339 with up to nine fractional
/// digits and `Z`: `2025-05-01T10:00:00.123456789Z`).
fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let d = b.get(r)?;
        d.iter()
            .all(u8::is_ascii_digit)
            .then(|| d.iter().fold(0i64, |n, c| n * 10 + i64::from(c - b'0')))
    };
    let seps = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
    if seps.iter().any(|&(i, c)| b.get(i) != Some(&c)) {
        return None;
    }
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let rest = s.get(19..)?.strip_suffix('Z')?;
    let nanos = match rest.strip_prefix('.') {
        None if rest.is_empty() => 0,
        Some(f) if (1..=9).contains(&f.len()) && f.bytes().all(|c| c.is_ascii_digit()) => {
            f.parse::<u32>().ok()? * 10u32.pow(9 - u32::try_from(f.len()).ok()?)
        }
        _ => return None,
    };
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days since the epoch of a proleptic Gregorian date (H. Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

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
        let setup = |message: String| Error::Setup { backend: BACKEND, message };
        let token_ok = |s: &str| {
            !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if !token_ok(&self.bucket) || self.bucket.len() > MAX_BUCKET_LEN {
            return Err(setup(format!(
                "bucket name {:?} is invalid: use 1 to {MAX_BUCKET_LEN} ASCII letters, digits, '-' or '_'",
                self.bucket
            )));
        }
        if let Some(d) = self.domain.as_deref().filter(|d| !token_ok(d)) {
            return Err(setup(format!(
                "JetStream domain {d:?} is invalid: use ASCII letters, digits, '-' or '_'"
            )));
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

/// A [`LockProvider`] on a NATS JetStream key-value bucket. Cheap to clone; clones share the
/// client.
#[derive(Clone)]
pub struct NatsLockProvider {
    inner: Arc<Inner>,
}

impl fmt::Debug for NatsLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No client, no server URL: URLs may carry user:password or a token.
        f.debug_struct("NatsLockProvider")
            .field("bucket", &self.inner.bucket)
            .field("stream", &self.inner.stream)
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

struct Inner {
    client: Client,
    /// The client's permission violations, if the application routes its events here.
    watch: Option<PermissionWatch>,
    /// The client's inbox prefix: replies come back on `<inbox_prefix>.…`.
    inbox_prefix: String,
    bucket: String,
    stream: String,
    subject_prefix: String,
    direct_get: String,
    purge: String,
    info: String,
    create: String,
    consumer_create: String,
    consumer_delete: String,
    /// `locked_by`, the time limit, whose clock judges expiry and this instance's clock.
    settings: Settings,
    /// Per subject, the sequence of the last lock message a direct get found there (and its
    /// `lock_until` in client time): a publish that trips over it again is answered "held"
    /// without a second look.
    seen: Mutex<HashMap<String, (u64, Option<i64>)>>,
    /// Set once the bucket was found fit for locks.
    checked: OnceCell<()>,
}

/// How many subjects [`Inner::seen`] remembers before it starts over.
const SEEN_CAPACITY: usize = 4096;

/// The answer to a conditional publish.
enum Publish {
    /// Stored at this stream sequence.
    Stored(u64),
    /// The subject's last sequence was not the expected one; it is this one (0: empty).
    WrongLast(u64),
}

/// The last message on a lock's subject, as a direct get returned it.
struct LastMessage {
    seq: u64,
    /// A tombstone (`KV-Operation: DEL`/`PURGE`, or a server marker): the key is free.
    tombstone: bool,
    /// `lock_until` stored by a client-time provider, in µs since the epoch.
    lock_until_us: Option<i64>,
}

impl Inner {
    /// `Some(lock_until)` when message `seq` of `subject` was seen to be a lock message (not a
    /// tombstone). Stream sequences are never reused, so while `seq` is still the subject's last
    /// message, it is that same lock message.
    fn known_lock(&self, subject: &str, seq: u64) -> Option<Option<i64>> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.get(subject).filter(|(s, _)| *s == seq).map(|(_, until)| *until)
    }

    fn remember_lock(&self, subject: &str, seq: u64, until: Option<i64>) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() >= SEEN_CAPACITY {
            seen.clear();
        }
        seen.insert(subject.to_owned(), (seq, until));
    }

    fn subject(&self, name: &str) -> String {
        let mut s = String::with_capacity(self.subject_prefix.len() + name.len());
        s.push_str(&self.subject_prefix);
        s.push_str(&key_for(name));
        s
    }

    fn missing_bucket(&self) -> Error {
        setup(format!(
            "the key-value bucket {:?} (stream {}) does not exist: call create_bucket(), or create \
             it from bucket_config() (per-message TTL needs nats-server 2.11 or newer)",
            self.bucket, self.stream
        ))
    }

    fn no_ttl(&self) -> Error {
        setup(format!(
            "the stream {} does not allow per-message TTL (allow_msg_ttl): enable it on the \
             stream (nats-server 2.11 or newer), recreate the bucket with create_bucket() (after \
             deleting it), or use TimeSource::Client",
            self.stream
        ))
    }

    /// The stream's info, or `None` when it does not exist.
    async fn stream_info(&self, operation: &'static str) -> Result<Option<Value>> {
        let m = self.request(operation, self.info.clone(), None, Vec::new()).await?;
        let v: Value =
            serde_json::from_slice(&m.payload).map_err(|_| json_err("stream info", &m.payload))?;
        match api_error(&v) {
            None => Ok(Some(v)),
            Some((ERR_STREAM_NOT_FOUND, _)) => Ok(None),
            Some((code, desc)) => {
                Err(Error::backend(BACKEND, format!("stream info: {desc} (err_code {code})")))
            }
        }
    }

    fn now_us(&self) -> Option<i64> {
        self.settings.client_now().map(unix_micros)
    }

    /// The message of a held lock: `locked_by`, the acquisition's fencing token when the
    /// message is not the acquiring one (an extension, the at-least remainder: the acquiring
    /// message's sequence is its token), and in client time `lock_until` and `locked_at` (µs
    /// since the epoch).
    fn record(&self, token: Option<u64>, until_us: Option<i64>, at_us: Option<i64>) -> Vec<u8> {
        let mut v = json!({ "locked_by": self.settings.locked_by() });
        if let Some(token) = token {
            v[F_TOKEN] = json!(token);
        }
        if let (Some(until), Some(at)) = (until_us, at_us) {
            v["lock_until_us"] = json!(until);
            v["locked_at_us"] = json!(at);
        }
        v.to_string().into_bytes()
    }

    /// A conditional publish of a lock message held for `hold` (server TTL, or `lock_until` in
    /// the message in client time); `token`: the acquisition's, when this is not the acquiring
    /// message.
    async fn publish(
        &self,
        operation: &'static str,
        subject: &str,
        expected: u64,
        hold: Duration,
        at_us: Option<i64>,
        token: Option<u64>,
    ) -> Result<Publish> {
        let mut h = HeaderMap::new();
        h.insert(H_EXPECTED, expected.to_string().as_str());
        let payload = match at_us {
            None => {
                // Whole seconds, rounded up: the server truncates a fractional TTL (measured:
                // "1500ms" expired after 1.25 s), which could end a lock before its lease.
                let secs = duration_secs_ceil(hold.min(MAX_DURATION)).max(1);
                h.insert(H_TTL, secs.to_string().as_str());
                self.record(token, None, None)
            }
            Some(at) => {
                let until = at.saturating_add(duration_micros(hold));
                self.record(token, Some(until), Some(at))
            }
        };
        let m = match self.request(operation, subject.to_owned(), Some(h), payload).await {
            Ok(m) => m,
            Err(e) => return Err(self.classify_no_responders(operation, e).await),
        };
        let v: Value =
            serde_json::from_slice(&m.payload).map_err(|_| json_err("publish", &m.payload))?;
        match api_error(&v) {
            None => v
                .get("seq")
                .and_then(Value::as_u64)
                .map(Publish::Stored)
                .ok_or_else(|| json_err("publish", &m.payload)),
            Some((ERR_WRONG_LAST_SEQUENCE, desc)) => {
                let last = desc.rsplit(':').next().and_then(|s| s.trim().parse().ok());
                last.map(Publish::WrongLast).ok_or_else(|| json_err("publish", &m.payload))
            }
            Some((ERR_TTL_DISABLED, _)) => Err(self.no_ttl()),
            Some((code, desc)) => {
                Err(Error::backend(BACKEND, format!("publish: {desc} (err_code {code})")))
            }
        }
    }

    /// The last message on `subject`, or `None` when there is none.
    async fn last(&self, subject: &str) -> Result<Option<LastMessage>> {
        let m = self
            .request("try_lock", format!("{}.{subject}", self.direct_get), None, Vec::new())
            .await?;
        if let Some(status) = m.status {
            if status.as_u16() == 404 {
                return Ok(None);
            }
            return Err(Error::backend(
                BACKEND,
                format!("direct get: status {status} {}", m.description.unwrap_or_default()),
            ));
        }
        let h = m.headers.as_ref();
        let get = |name: &str| h.and_then(|h| h.get(name)).map(|v| v.as_str().to_owned());
        let seq = get(H_SEQUENCE)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| json_err("direct get", b"(no Nats-Sequence header)"))?;
        let tombstone = get(H_MARKER_REASON).is_some()
            || get(H_KV_OPERATION).is_some_and(|op| op == "DEL" || op == "PURGE");
        let lock_until_us = serde_json::from_slice::<Value>(&m.payload)
            .ok()
            .and_then(|v| v.get("lock_until_us").and_then(Value::as_i64));
        Ok(Some(LastMessage { seq, tombstone, lock_until_us }))
    }

    /// Whether `last` leaves the key free for a new holder.
    fn is_free(&self, last: &LastMessage) -> bool {
        if last.tombstone {
            return true;
        }
        match (self.now_us(), last.lock_until_us) {
            (Some(now), Some(until)) => until <= now,
            _ => false,
        }
    }

    /// Removes the lock message `seq` from `subject` if it is still the subject's last message:
    /// a purge of the subject up to and including `seq`, so a newer holder's message stays.
    async fn purge_up_to(&self, operation: &'static str, subject: &str, seq: u64) -> Result<u64> {
        let body = json!({ "filter": subject, "seq": seq.saturating_add(1) }).to_string();
        let m = self.request(operation, self.purge.clone(), None, body.into_bytes()).await?;
        let v: Value =
            serde_json::from_slice(&m.payload).map_err(|_| json_err("purge", &m.payload))?;
        match api_error(&v) {
            None => Ok(v.get("purged").and_then(Value::as_u64).unwrap_or(0)),
            Some((ERR_STREAM_NOT_FOUND, _)) => Err(self.missing_bucket()),
            Some((code, desc)) => {
                Err(Error::backend(BACKEND, format!("purge: {desc} (err_code {code})")))
            }
        }
    }

    /// Checks the bucket (see [`NatsLockProvider::check_bucket`]).
    async fn check_bucket(&self, operation: &'static str) -> Result<()> {
        match self.stream_info(operation).await? {
            None => Err(self.missing_bucket()),
            Some(v) => self.validate(&v),
        }
    }

    fn validate(&self, info: &Value) -> Result<()> {
        let i = self;
        let c = info.get("config").ok_or_else(|| json_err("stream info", b"(no config)"))?;
        let flag = |k: &str| c.get(k).and_then(Value::as_bool).unwrap_or(false);
        let wildcard = format!("{}>", i.subject_prefix);
        let covers = c
            .get("subjects")
            .and_then(Value::as_array)
            .is_some_and(|s| s.iter().any(|s| s.as_str() == Some(wildcard.as_str())));
        let mut wrong = Vec::new();
        if !covers {
            wrong.push(format!("its subjects do not include {wildcard}"));
        }
        if !flag("allow_direct") {
            wrong.push("direct get is not allowed (allow_direct)".to_owned());
        }
        if flag("deny_purge") {
            wrong.push("purge is denied (deny_purge), and unlock purges".to_owned());
        }
        if flag("sealed") {
            wrong.push("it is sealed".to_owned());
        }
        // The server removes a message at the stream's max_age even when its own TTL is longer
        // (measured on 2.15: a 5 s TTL was gone after 2.5 s under max_age 1 s): a lock would
        // end early.
        if c.get("max_age").and_then(Value::as_u64).is_some_and(|a| a > 0) {
            wrong.push(
                "it has a max_age, which removes lock messages before their lock_at_most_for \
                 (set max_age to 0)"
                    .to_owned(),
            );
        }
        if i.settings.time_source().is_server() && !flag("allow_msg_ttl") {
            return Err(i.no_ttl());
        }
        if wrong.is_empty() {
            return Ok(());
        }
        Err(setup(format!(
            "the stream {} cannot hold locks: {}; recreate it with create_bucket() or from \
             bucket_config()",
            i.stream,
            wrong.join(", ")
        )))
    }

    /// The record of lock `name` in the last message of its key (`None`: a tombstone, no
    /// record): stream sequence `seq`, stored at `time` by the server's clock.
    fn info(
        &self,
        name: &str,
        seq: u64,
        time: Option<SystemTime>,
        headers: Option<&HeaderMap>,
        payload: &[u8],
    ) -> Option<LockInfo> {
        let header = |h: &str| headers.and_then(|m| m.get(h)).map(|v| v.as_str());
        if header(H_MARKER_REASON).is_some()
            || header(H_KV_OPERATION).is_some_and(|op| op == "DEL" || op == "PURGE")
        {
            return None;
        }
        // A lock message is `{"locked_by": …}`; anything else (a value put by hand) holds the
        // name as well (as try_lock judges it), with no holder, acquisition its sequence.
        let v = serde_json::from_slice::<Value>(payload).ok();
        let field = |f: &str| v.as_ref().and_then(|v| v.get(f));
        let locked_by = field("locked_by").and_then(Value::as_str);
        let token = locked_by.map(|_| field(F_TOKEN).and_then(Value::as_u64).unwrap_or(seq));
        let until_us = field("lock_until_us").and_then(Value::as_i64);
        let (held, locked_at, lock_until) = match (self.now_us(), until_us) {
            // Client time: the stored lease, by this instance's clock (as try_lock judges it).
            (Some(now), Some(until)) => (
                until > now,
                field("locked_at_us").and_then(Value::as_i64).map(from_unix_micros),
                Some(from_unix_micros(until)),
            ),
            // Server time: stored means held (the server removes the message at its TTL); the
            // message's time and TTL, both the server's.
            _ => {
                let ttl = header(H_TTL).and_then(parse_ttl);
                (true, time, time.zip(ttl).and_then(|(t, d)| t.checked_add(d)))
            }
        };
        let acquisition = token.unwrap_or(seq).to_string();
        let mut info = LockInfo::new(name, acquisition, held, self.settings.time_source())
            .with_fencing_token(token);
        if let Some(by) = locked_by {
            info = info.with_locked_by(by);
        }
        if let Some(at) = locked_at {
            info = info.with_locked_at(at);
        }
        if let Some(until) = lock_until {
            info = info.with_lock_until(until);
        }
        Some(info)
    }

    /// One direct get of `subject`'s last message: its sequence and the record of lock `name`
    /// (`None`: no message, or a tombstone).
    async fn read(
        &self,
        operation: &'static str,
        name: &str,
        subject: &str,
    ) -> Result<Option<(u64, LockInfo)>> {
        let get = format!("{}.{subject}", self.direct_get);
        let m = match self.request(operation, get, None, Vec::new()).await {
            Ok(m) => m,
            Err(e) => return Err(self.classify_no_responders(operation, e).await),
        };
        if let Some(status) = m.status {
            if status.as_u16() == 404 {
                return Ok(None);
            }
            return Err(Error::backend(
                BACKEND,
                format!("direct get: status {status} {}", m.description.unwrap_or_default()),
            ));
        }
        let h = m.headers.as_ref();
        let header = |name: &str| h.and_then(|h| h.get(name)).map(|v| v.as_str());
        let seq = header(H_SEQUENCE)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| json_err("direct get", b"(no Nats-Sequence header)"))?;
        let time = header(H_TIMESTAMP).and_then(parse_rfc3339);
        Ok(self.info(name, seq, time, h, &m.payload).map(|info| (seq, info)))
    }

    /// One page of [`LockProvider::list`]: an ephemeral consumer (in memory, no acks, flow
    /// controlled) delivers the last message of every key; the smallest `limit` + 1 names after
    /// `cursor` under `prefix` are kept.
    async fn list(
        self: &Arc<Self>,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LockPage> {
        if self.client.connection_state() != ConnState::Connected {
            return Err(Inner::not_connected());
        }
        let since = self.watch.as_ref().map(PermissionWatch::mark);
        let inbox = self.client.new_inbox();
        let mut sub = self
            .client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| Error::unavailable(BACKEND, e))?;
        let body = json!({
            "stream_name": self.stream,
            "config": {
                "description": "shedlock list",
                "deliver_subject": inbox,
                "deliver_policy": "last_per_subject",
                "filter_subject": format!("{}>", self.subject_prefix),
                "ack_policy": "none",
                "replay_policy": "instant",
                "flow_control": true,
                "idle_heartbeat": 1_000_000_000u64,
                "inactive_threshold": 10_000_000_000u64,
                "mem_storage": true,
                "num_replicas": 1,
            }
        });
        let m = match self
            .request("list", self.consumer_create.clone(), None, body.to_string().into_bytes())
            .await
        {
            Ok(m) => m,
            Err(e) => return Err(self.classify_no_responders("list", e).await),
        };
        let v: Value = serde_json::from_slice(&m.payload)
            .map_err(|_| json_err("consumer create", &m.payload))?;
        match api_error(&v) {
            None => {}
            Some((ERR_STREAM_NOT_FOUND, _)) => return Err(self.missing_bucket()),
            Some((code, desc)) => {
                return Err(Error::backend(
                    BACKEND,
                    format!("consumer create: {desc} (err_code {code})"),
                ));
            }
        }
        let consumer = v
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| json_err("consumer create", &m.payload))?;
        let _delete = DeleteConsumer {
            inner: Arc::clone(self),
            subject: format!("{}.{consumer}", self.consumer_delete),
        };
        let mut pending = v.get("num_pending").and_then(Value::as_u64).unwrap_or(0);
        // The smallest names seen so far, at most one more than the page (which tells whether
        // another page follows).
        let mut page: BTreeMap<String, LockInfo> = BTreeMap::new();
        // The deliveries come to `inbox`, flow control answers go to `$JS.FC.<stream>.…`: a
        // violation of either stalls the listing, and fails it once the watch sees it.
        let flow_control = format!("$JS.FC.{}.", self.stream);
        let concerns = |v: &Violation| {
            self.concerns(v, "")
                || (v.refused == Refused::Publish && v.subject.starts_with(&flow_control))
        };
        while pending > 0 {
            let next = std::future::poll_fn(|cx| Pin::new(&mut sub).poll_next(cx));
            let msg = tokio::select! {
                msg = next => msg.ok_or_else(|| {
                    Error::unavailable(BACKEND, "the list subscription was closed")
                })?,
                e = self.guard("list", since, &concerns) => return Err(e),
            };
            if let Some(status) = msg.status {
                if status.as_u16() != 100 {
                    return Err(Error::unavailable(
                        BACKEND,
                        format!(
                            "the list consumer stopped: status {status} {}",
                            msg.description.unwrap_or_default()
                        ),
                    ));
                }
                // Flow control asks for an answer on its reply subject; a heartbeat may name
                // a stalled flow control to answer.
                let stalled = msg.headers.as_ref().and_then(|h| h.get(H_CONSUMER_STALLED));
                let answer = match (&msg.reply, stalled) {
                    (Some(reply), _) => Some(reply.to_string()),
                    (None, Some(s)) => Some(s.as_str().to_owned()),
                    (None, None) => None,
                };
                if let Some(to) = answer {
                    self.client
                        .publish(to, Vec::new().into())
                        .await
                        .map_err(|e| Error::unavailable(BACKEND, e))?;
                }
                continue;
            }
            let Some((seq, time, left)) = msg.reply.as_deref().and_then(ack_metadata) else {
                return Err(Error::backend(
                    BACKEND,
                    format!("a listed message without its metadata (reply {:?})", msg.reply),
                ));
            };
            pending = left;
            let key = msg.subject.as_str().strip_prefix(self.subject_prefix.as_str());
            // A key no lock name maps to (put by other tools) holds no lock: not listed.
            let Some(name) = key.and_then(name_for) else {
                tracing::debug!(subject = %msg.subject, "nats list: a key that is no lock's, skipped");
                continue;
            };
            if !name.starts_with(prefix) || cursor.is_some_and(|c| name.as_str() <= c) {
                continue;
            }
            if page.len() > limit && page.last_key_value().is_some_and(|(last, _)| name > *last) {
                continue;
            }
            let headers = msg.headers.as_ref();
            if let Some(info) = self.info(&name, seq, Some(time), headers, &msg.payload) {
                page.insert(name, info);
                if page.len() > limit + 1 {
                    page.pop_last();
                }
            }
        }
        let more = page.len() > limit;
        let records: Vec<LockInfo> = page.into_values().take(limit).collect();
        let next = if more { records.last().map(|r| r.name.clone()) } else { None };
        Ok(LockPage::new(records, next))
    }

    /// [`LockProvider::force_release`] after the name check, without the time limit.
    async fn force_release(&self, seen: &LockInfo) -> Result<ForceRelease> {
        let subject = self.subject(&seen.name);
        for _ in 0..FORCE_RELEASE_ATTEMPTS {
            let Some((seq, info)) = self.read("force_release", &seen.name, &subject).await? else {
                return Ok(ForceRelease::Changed(None));
            };
            if info.acquisition != seen.acquisition {
                return Ok(ForceRelease::Changed(Some(info)));
            }
            if self.purge_up_to("force_release", &subject, seq).await? > 0 {
                return Ok(ForceRelease::Released(info));
            }
            // A newer message (the holder's extension, or a release) replaced it: look again.
        }
        Err(Error::unavailable(
            BACKEND,
            "the lock's message was replaced under every attempt to release it; try again",
        ))
    }

    async fn try_lock(self: &Arc<Self>, config: &LockConfig) -> Result<Option<Lock>> {
        check_lock_name(BACKEND, config.name(), Some(MAX_NAME_LEN), false)?;
        let subject = self.subject(config.name());
        let at_most = config.lock_at_most_for();
        let acquisition = Acquisition::begin(config); // the default clock step, as declared
        let at_us = self.now_us();
        let won = run(Operation::TryLock, config.name(), self.settings.timeout(), async {
            // Once per provider: the bucket exists and is fit for locks (one request, on the
            // first call only; a failure is not remembered, so the next call checks again).
            self.checked.get_or_try_init(|| self.check_bucket("try_lock")).await?;
            // One publish that only an empty subject accepts: a fresh key, one whose lock was
            // released (purged) or expired (the server removed it).
            let last_seq = match self.publish("try_lock", &subject, 0, at_most, at_us, None).await?
            {
                Publish::Stored(seq) => return Ok(Some(seq)),
                Publish::WrongLast(n) => n,
            };
            // The subject holds message `last_seq`. Known to be a live lock: held, and no
            // second round trip.
            if let Some(until) = self.known_lock(&subject, last_seq) {
                let expired = matches!((until, self.now_us()), (Some(u), Some(now)) if u <= now);
                if !expired {
                    return Ok(None);
                }
                // Client time: a lock seen before whose lock_until has passed. Take it over.
                return match self
                    .publish("try_lock", &subject, last_seq, at_most, at_us, None)
                    .await?
                {
                    Publish::Stored(seq) => Ok(Some(seq)),
                    Publish::WrongLast(_) => Ok(None),
                };
            }
            // Otherwise look at it: a live lock is held (and remembered); a tombstone left by
            // an operator (`nats kv del`), a server marker, or in client time an expired lock,
            // leaves the key free: take it over, owner-checked by its sequence.
            match self.last(&subject).await? {
                Some(m) if self.is_free(&m) => {
                    tracing::debug!(
                        subject,
                        seq = m.seq,
                        "taking a free lock key over its last message"
                    );
                    match self.publish("try_lock", &subject, m.seq, at_most, at_us, None).await? {
                        Publish::Stored(seq) => Ok(Some(seq)),
                        Publish::WrongLast(_) => Ok(None),
                    }
                }
                Some(m) => {
                    self.remember_lock(&subject, m.seq, m.lock_until_us);
                    Ok(None)
                }
                // Removed in between (expired or released): free again.
                None => match self.publish("try_lock", &subject, 0, at_most, at_us, None).await? {
                    Publish::Stored(seq) => Ok(Some(seq)),
                    Publish::WrongLast(_) => Ok(None),
                },
            }
        })
        .await?;
        let Some(seq) = won else { return Ok(None) };
        let handle = NatsHandle {
            inner: self.clone(),
            subject,
            token: seq,
            rev: seq,
            since: Instant::now(),
            at_us,
            until_us: at_us.map(|at| at.saturating_add(duration_micros(at_most))),
        };
        acquisition.grant(handle).await.map(Some)
    }
}

/// One held lock: the sequence of its current message (owner check) and of the acquiring one
/// (fencing token).
struct NatsHandle {
    inner: Arc<Inner>,
    subject: String,
    token: u64,
    rev: u64,
    /// When the answer of the acquire (or last extension) arrived: `lock_at_least_for` counts
    /// from here, which keeps the lock at least as long as asked.
    since: Instant,
    /// Client time only: `locked_at` of the current message.
    at_us: Option<i64>,
    /// Client time only: `lock_until` of the current message.
    until_us: Option<i64>,
}

#[async_trait::async_trait]
impl LockHandle for NatsHandle {
    async fn unlock(&mut self, config: &LockConfig) -> Result<()> {
        let inner = &self.inner;
        run(Operation::Unlock, config.name(), inner.settings.timeout(), async {
            let at_least = config.lock_at_least_for();
            // While lock_at_least_for lasts, republish (owner-checked) to hold the key until it
            // ends; after it, remove the message. A stale holder's republish fails the sequence
            // check and its purge finds a newer message: nothing changes either way.
            let keep = match self.at_us {
                // Client time: `lock_until` = the stored locked_at + lock_at_least_for.
                Some(at) => {
                    let until = at.saturating_add(duration_micros(at_least));
                    (until > inner.now_us().unwrap_or(i64::MAX)).then_some((at_least, Some(at)))
                }
                // Server time: a TTL of what remains, counted from the acquire's answer.
                None => at_least
                    .checked_sub(self.since.elapsed())
                    .filter(|d| !d.is_zero())
                    .map(|d| (d, None)),
            };
            match keep {
                Some((hold, at_us)) => {
                    let token = Some(self.token);
                    inner.publish("unlock", &self.subject, self.rev, hold, at_us, token).await?;
                }
                None => {
                    inner.purge_up_to("unlock", &self.subject, self.rev).await?;
                }
            }
            Ok(())
        })
        .await
    }

    async fn extend(&mut self, config: &LockConfig) -> Result<()> {
        let inner = &self.inner;
        let at_us = inner.now_us();
        // Client time: an expired lock is not revived, even if nobody took it since (the
        // sequence check alone would let it through); by the same clock that judges expiry.
        if let (Some(until), Some(now)) = (self.until_us, at_us)
            && until <= now
        {
            return Err(Error::LockLost { name: config.name().to_owned() });
        }
        run(Operation::Extend, config.name(), inner.settings.timeout(), async {
            match inner
                .publish(
                    "extend",
                    &self.subject,
                    self.rev,
                    config.lock_at_most_for(),
                    at_us,
                    Some(self.token),
                )
                .await?
            {
                Publish::Stored(seq) => {
                    self.rev = seq;
                    self.since = Instant::now();
                    self.at_us = at_us;
                    self.until_us = at_us
                        .map(|at| at.saturating_add(duration_micros(config.lock_at_most_for())));
                    Ok(())
                }
                Publish::WrongLast(_) => Err(Error::LockLost { name: config.name().to_owned() }),
            }
        })
        .await
    }

    fn fencing_token(&self) -> Option<u64> {
        Some(self.token)
    }
}

#[async_trait::async_trait]
impl LockProvider for NatsLockProvider {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        self.inner.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(true)
            .with_server_time(self.inner.settings.time_source().is_server())
            .with_owner_checked(true)
            // Nats-TTL takes whole seconds (the server truncates fractions; the minimum is 1 s),
            // and the server's expiry timer adds up to about a quarter second.
            .with_granularity(if self.inner.settings.time_source().is_server() {
                Duration::from_secs(1)
            } else {
                Duration::from_millis(1)
            })
            .with_max_name_len(Some(MAX_NAME_LEN))
            .with_check(true)
            .with_inspect(true)
            .with_list(true)
            .with_force_release(true)
    }

    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    /// [`check_bucket`](NatsLockProvider::check_bucket).
    async fn check(&self) -> Result<()> {
        run(Operation::Check, "", self.inner.settings.timeout(), self.inner.check_bucket("check"))
            .await
    }

    /// One direct get of the key's last message. A lock message is held while it is stored (the
    /// server removes it at its TTL) in server time, while its stored `lock_until` is ahead of
    /// this instance's clock in client time; a tombstone is no record. The acquisition is the
    /// fencing token (the acquiring message's stream sequence, kept in every later message).
    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>> {
        check_lock_name(BACKEND, name, Some(MAX_NAME_LEN), false)?;
        let inner = &self.inner;
        let read = async {
            let last = inner.read("inspect", name, &inner.subject(name)).await?;
            Ok(last.map(|(_, info)| info))
        };
        run(Operation::Inspect, name, inner.settings.timeout(), read).await
    }

    /// The bucket's keys are not ordered by the server: an ephemeral consumer delivers the last
    /// message of every key once, and the page keeps the `limit` smallest names after the
    /// cursor that start with `prefix` (memory: one page). Each page reads every key of the
    /// bucket; the cursor is the last name of the page.
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<LockPage> {
        if !prefix.is_empty() {
            check_lock_name(BACKEND, prefix, Some(MAX_NAME_LEN), false)?;
        }
        let inner = &self.inner;
        let list = inner.list(prefix, cursor, page_limit(limit));
        run(Operation::List, prefix, inner.settings.timeout(), list).await
    }

    /// A direct get, then a purge of the key up to the message read if it is still the
    /// acquisition seen: the purge removes nothing once a newer message replaced it, so a lock
    /// released and taken again is never touched. When the holder's extension replaced the
    /// message in between, it reads again (up to 5 times).
    async fn force_release(&self, seen: &LockInfo) -> Result<ForceRelease> {
        let name = seen.name.as_str();
        check_lock_name(BACKEND, name, Some(MAX_NAME_LEN), false)?;
        let inner = &self.inner;
        let release = inner.force_release(seen);
        let released =
            run(Operation::ForceRelease, name, inner.settings.timeout(), release).await?;
        log_forced_release(BACKEND, seen, &released);
        Ok(released)
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

    /// The bucket name.
    pub fn bucket(&self) -> &str {
        &self.inner.bucket
    }

    /// The JetStream stream behind the bucket, `KV_<bucket>`.
    pub fn stream(&self) -> &str {
        &self.inner.stream
    }

    /// The subject a lock name maps to: `$KV.<bucket>.<key_for(name)>`.
    pub fn subject_for(&self, name: &str) -> String {
        self.inner.subject(name)
    }

    /// The stream configuration [`create_bucket`](Self::create_bucket) sends (JSON, the
    /// JetStream `STREAM.CREATE` request): a key-value bucket keeping one message per key, file
    /// storage, one replica, direct get allowed, purge allowed, and (in server time) per-message
    /// TTL. Use it to create the bucket with your own tooling, e.g. with more replicas.
    pub fn bucket_config(&self) -> String {
        let i = &self.inner;
        let mut v = json!({
            "name": i.stream,
            "description": "shedlock locks",
            "subjects": [format!("{}>", i.subject_prefix)],
            "retention": "limits",
            "max_consumers": -1,
            "max_msgs_per_subject": 1,
            "max_msgs": -1,
            "max_bytes": -1,
            "max_age": 0,
            "max_msg_size": -1,
            "storage": "file",
            "discard": "new",
            "num_replicas": 1,
            "duplicate_window": 120_000_000_000u64,
            "allow_rollup_hdrs": true,
            "deny_delete": true,
            "deny_purge": false,
            "allow_direct": true,
        });
        if i.settings.time_source().is_server() {
            v["allow_msg_ttl"] = json!(true);
        }
        v.to_string()
    }

    /// Creates the bucket (stream `KV_<bucket>`, see [`bucket_config`](Self::bucket_config)),
    /// or, when a stream of that name already exists, checks that it can hold locks
    /// ([`check_bucket`](Self::check_bucket)). Idempotent.
    pub async fn create_bucket(&self) -> Result<()> {
        let i = &self.inner;
        request::run_labelled("create_bucket", i.settings.timeout(), async {
            let m = i
                .request("create_bucket", i.create.clone(), None, self.bucket_config().into_bytes())
                .await?;
            let v: Value = serde_json::from_slice(&m.payload)
                .map_err(|_| json_err("stream create", &m.payload))?;
            match api_error(&v) {
                None => i.validate(&v),
                Some((ERR_STREAM_NAME_IN_USE, _)) => i.check_bucket("create_bucket").await,
                Some((code, desc)) => Err(setup(format!(
                    "creating the stream {} failed: {desc} (err_code {code})",
                    i.stream
                ))),
            }
        })
        .await
    }

    /// Checks that the bucket exists and can hold locks: its subjects cover `$KV.<bucket>.>`,
    /// direct get and purge are allowed, and (in server time) per-message TTL is enabled (which
    /// needs nats-server 2.11 or newer). Otherwise [`Error::Setup`]
    /// says what to change. The same as [`LockProvider::check`].
    pub async fn check_bucket(&self) -> Result<()> {
        LockProvider::check(self).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keys_no_name_maps_to_are_not_names() {
        for key in ["a.b", "=2e", "=2D", "=", "=4", "=FF", "a b"] {
            assert_eq!(name_for(key), None, "{key:?}");
        }
        assert_eq!(name_for("c30_=25/0").as_deref(), Some("c30_%/0"));
    }

    #[test]
    fn server_times_and_reply_subjects_are_read() {
        let t = |s: &str| parse_rfc3339(s).map(|t| t.duration_since(UNIX_EPOCH).unwrap());
        assert_eq!(t("1970-01-01T00:00:00Z"), Some(Duration::ZERO));
        assert_eq!(t("2000-03-01T00:00:01.5Z"), Some(Duration::new(951_868_801, 500_000_000)));
        assert_eq!(
            t("2025-05-01T10:00:00.123456789Z"),
            Some(Duration::new(1_746_093_600, 123_456_789))
        );
        for bad in ["2025-05-01T10:00:00", "2025-05-01 10:00:00Z", "2025-13-01T10:00:00Z", ""] {
            assert_eq!(t(bad), None, "{bad:?}");
        }
        let (seq, time, pending) =
            ack_metadata("$JS.ACK.KV_b.c.1.42.1.1746093600000000000.7").unwrap();
        assert_eq!((seq, pending), (42, 7));
        assert_eq!(time.duration_since(UNIX_EPOCH).unwrap(), Duration::from_secs(1_746_093_600));
        let v2 = ack_metadata("$JS.ACK.hub.ACC.KV_b.c.1.43.2.1746093600000000000.0.xyz").unwrap();
        assert_eq!((v2.0, v2.2), (43, 0));
        assert_eq!(ack_metadata("_INBOX.x"), None);
        assert_eq!(parse_ttl("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_ttl("never"), None);
    }

    #[test]
    fn keys_are_valid_subject_tokens_and_one_to_one() {
        let names = ["a", "a.b", "a=2Eb", "a b", "*", ">", "..", "ü", "a/b", "a\0", "=", "%2E"];
        let keys: std::collections::HashSet<_> = names.iter().map(|n| key_for(n)).collect();
        assert_eq!(keys.len(), names.len());
        for k in &keys {
            assert!(k.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_/=".contains(&b)), "{k}");
        }
        assert_eq!(key_for("ü"), "=C3=BC");
        for n in names {
            assert_eq!(name_for(&key_for(n)).as_deref(), Some(n), "{n:?}");
        }
        assert_eq!(key_for(&"\u{7f}".repeat(MAX_NAME_LEN)).len(), 3 * MAX_NAME_LEN);
    }
}

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

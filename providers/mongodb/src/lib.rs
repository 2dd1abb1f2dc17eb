//! MongoDB lock provider for [`shedlock`], on the caller's [`mongodb::Database`] (driver 3).
//!
//! One document per lock name in a collection (default `shedLock`, ShedLock's name):
//! `{_id: <name>, lockUntil: Date, lockedAt: Date, lockedBy: String, owner: Int64, token: Int64}`.
//!
//! - **Acquire is one request**: `findAndModify` with `upsert`, returning the stored `owner` and
//!   `token`. In server time the filter is `{_id: name}` and the update pipeline itself gives
//!   the document to this acquisition's fresh `owner` id only where `lockUntil <= $$NOW` (or the
//!   document is new), leaving a live lock untouched. In client time the filter is
//!   `{_id: name, lockUntil: {$lte: now}}`: a held name makes the upsert collide with the
//!   existing `_id` (duplicate key error 11000, "held elsewhere").
//! - **Server time** ([`TimeSource::Server`], the default): `now` is the server's `$$NOW`, and
//!   `lockUntil` is computed on the server by an update pipeline, so client clock skew cannot
//!   break exclusion. Needs MongoDB 4.2 or newer. [`TimeSource::Client`] computes `lockUntil`
//!   from each instance's [`Clock`](shedlock::Clock) instead, as ShedLock does by default.
//! - **Owner-checked** unlock and extend: each filters on this acquisition's `owner` id, so a
//!   stale holder changes nothing. Unlock deletes the document once `lock_at_least_for` has
//!   passed (before, it moves `lockUntil` back to `lockedAt + lock_at_least_for`); extend only
//!   moves a lock that is still live by the clock that judges expiry.
//! - **Fencing tokens** in the same update: `token = max(token + 1, server time in µs)`, so they
//!   increase per name even across a deleted document.
//! - **Write concern** `majority` by default ([`MongoLockProviderBuilder::write_concern`]).
//! - **Inspection**: `inspect` and `list` are one `aggregate` each, which reads the server's
//!   clock with the documents (`list` pages by `_id`, the prefix a range of values, never a
//!   regular expression); `force_release` is one `delete_one` filtered on the acquisition seen.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_mongodb::MongoLockProvider;
//!
//! let client = mongodb::Client::with_uri_str("mongodb://127.0.0.1:27017").await?;
//! let provider = MongoLockProvider::builder(client.database("app")).build()?;
//!
//! let cfg = LockConfig::new("nightly-report", Duration::from_secs(600), Duration::from_secs(30))?;
//! if let Some(lock) = provider.try_lock(&cfg).await? {
//!     // ... run the task ...
//!     lock.unlock().await?;
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

use std::{fmt, time::Duration};

use tokio::time::Instant;

use mongodb::{
    Collection, Database,
    bson::{Bson, DateTime, Document, doc},
    error::{ErrorKind, WriteFailure},
    options::{Acknowledgment, ReturnDocument, WriteConcern},
};
use shedlock::{
    Capabilities, Error, ForceRelease, LockInfo, LockPage, LockProvider, Result,
    store::{
        DelegatingProvider, Extension, Granted, LeaseStore, ProviderSettings, Request, Settings,
        StoreProvider,
    },
    support::{
        ACQUISITION_SUFFIX_LEN, acquisition_id, duration_millis_ceil, unix_millis, with_timeout,
    },
};

pub use shedlock::TimeSource;

const BACKEND: &str = "mongodb";

/// The longest lock name, in bytes (the document's `_id`).
pub const MAX_NAME_LEN: usize = 1024;

/// The default collection name (ShedLock's).
pub const DEFAULT_COLLECTION: &str = "shedLock";

/// The default time limit of each lock operation: 10 s, as for every provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT as DEFAULT_TIMEOUT;
/// The builder setters every provider shares (`operation_timeout`, `locked_by`, `clock`).
pub use shedlock::{ClockBuilder, ProviderBuilder};

/// The longest namespace (`<database>.<collection>`) MongoDB accepts, in bytes.
pub const MAX_NAMESPACE_LEN: usize = 255;

// Server error codes.
const DUPLICATE_KEY: i32 = 11000;
const UNAUTHORIZED: i32 = 13;
const AUTHENTICATION_FAILED: i32 = 18;
const NAMESPACE_EXISTS: i32 = 48;
const UNSATISFIABLE_WRITE_CONCERN: i32 = 100;
const INVALID_NAMESPACE: i32 = 73;
/// Errors after which the operation may or may not have taken effect and trying again later
/// may help: a primary stepping down, a node shutting down, a network problem on the server's
/// side, a write concern that timed out.
const TRANSIENT: &[i32] = &[
    6,     // HostUnreachable
    7,     // HostNotFound
    64,    // WriteConcernFailed (wtimeout)
    89,    // NetworkTimeout
    91,    // ShutdownInProgress
    189,   // PrimarySteppedDown
    262,   // ExceededTimeLimit
    9001,  // SocketException
    10107, // NotWritablePrimary
    11600, // InterruptedAtShutdown
    11602, // InterruptedDueToReplStateChange
    13435, // NotPrimaryNoSecondaryOk
    13436, // NotPrimaryOrSecondary
];

/// The server's current time as a BSON date, for comparisons with stored dates:
/// `{$toDate: {$toLong: "$$NOW"}}`. On MongoDB this is exactly `$$NOW`; the round trip through
/// epoch milliseconds makes it comparable on wire-compatible servers that compare `$$NOW`
/// itself wrongly with stored dates (SecantusDB 0.7 answers `{$lte: [<a date 30 s ahead>,
/// "$$NOW"]}` with true). Stored values (`lockUntil: {$add: ["$$NOW", ms]}`) use `$$NOW`
/// directly.
fn server_now() -> Bson {
    Bson::Document(doc! { "$toDate": { "$toLong": "$$NOW" } })
}

/// The fencing token of a write: one more than the document's last token, and at least the
/// server's time in microseconds (milliseconds × 1000), so a token issued after the document
/// was deleted still exceeds every earlier one (unless more than 1 000 acquisitions of one
/// name happened within a millisecond, or the server clock went back).
fn next_token() -> Document {
    doc! {
        "$max": [
            { "$add": [{ "$ifNull": ["$token", 0_i64] }, 1_i64] },
            { "$multiply": [{ "$toLong": "$$NOW" }, 1000_i64] },
        ]
    }
}

/// Whether `name` is a collection name MongoDB accepts in database `db`: not empty, no `$` or
/// NUL, not starting with `system.` (reserved) or `.`, and a namespace `<db>.<collection>` of at
/// most [`MAX_NAMESPACE_LEN`] bytes.
fn check_collection_name(db: &str, name: &str) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err("the collection name is empty".to_owned());
    }
    if name.contains('$') || name.contains('\0') {
        return Err(format!("collection name {name:?} contains '$' or NUL"));
    }
    if name.starts_with("system.") || name.starts_with('.') {
        return Err(format!(
            "collection name {name:?} starts with \"system.\" or '.', which MongoDB reserves"
        ));
    }
    let ns = db.len() + 1 + name.len();
    if ns > MAX_NAMESPACE_LEN {
        return Err(format!(
            "the namespace {db}.{name} is {ns} bytes long; MongoDB allows at most \
             {MAX_NAMESPACE_LEN}"
        ));
    }
    Ok(())
}

/// Builds a [`MongoLockProvider`].
///
/// The shared setters (`operation_timeout`, `locked_by`, `clock`) come from [`ProviderBuilder`]
/// (and [`ClockBuilder`]), in scope with `use shedlock_mongodb::ProviderBuilder;`. Here with the
/// time limit `None` only the driver's own limits apply (e.g. 30 s of server selection); the clock
/// is read only with [`TimeSource::Client`]; `locked_by` is stored as `lockedBy`.
#[must_use]
pub struct MongoLockProviderBuilder {
    database: Database,
    collection: String,
    write_concern: WriteConcern,
    settings: ProviderSettings,
}

impl fmt::Debug for MongoLockProviderBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The database handle is left out on purpose: its client options may carry
        // credentials.
        f.debug_struct("MongoLockProviderBuilder")
            .field("database", &self.database.name())
            .field("collection", &self.collection)
            .field("write_concern", &self.write_concern)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ProviderBuilder for MongoLockProviderBuilder {
    fn settings_mut(&mut self) -> &mut ProviderSettings {
        &mut self.settings
    }
}

impl ClockBuilder for MongoLockProviderBuilder {}

impl MongoLockProviderBuilder {
    /// The collection holding the locks (default [`DEFAULT_COLLECTION`], `shedLock`). MongoDB
    /// creates it on the first lock; see [`MongoLockProvider::create_collection`].
    pub fn collection(mut self, name: impl Into<String>) -> Self {
        self.collection = name.into();
        self
    }

    /// The write concern of every lock write (default `majority`: a lock survives the failover
    /// of a replica set's primary once acquired). `w: 0` (unacknowledged) is refused by
    /// [`build`](Self::build): a lock needs the server's answer.
    pub fn write_concern(mut self, write_concern: WriteConcern) -> Self {
        self.write_concern = write_concern;
        self
    }

    /// Whose clock judges expiry (default [`TimeSource::Server`]: the server's `$$NOW`, MongoDB
    /// 4.2 or newer). [`TimeSource::Client`] computes `lockUntil` from this instance's
    /// [`clock`](Self::clock): unsafe beyond the clock skew between nodes.
    pub fn time_source(mut self, source: TimeSource) -> Self {
        self.settings.set_time_source(source);
        self
    }

    /// ShedLock-compatible mode: exactly the documents of ShedLock's `MongoLockProvider` (`_id`,
    /// `lockUntil`, `lockedAt`, `lockedBy`; no `owner` or `token`), so that this provider and
    /// Java ShedLock nodes lock the same jobs in the same collection. See the README's "Joining
    /// a ShedLock fleet".
    ///
    /// - Each acquisition writes `lockedBy` = the configured value, ` #` and its own 16 hex
    ///   digits (so `locked_by` may be at most 237 bytes); the acquire knows it won by that
    ///   value, and unlock and extend match it.
    /// - No fencing: [`Lock::fencing_token`](shedlock::Lock::fencing_token) is `None`.
    /// - The time source is unchanged: server time (`$$NOW`) by default, where ShedLock judges
    ///   by each JVM's clock, which must then agree with the server's.
    pub fn shedlock_compatible(mut self) -> Self {
        self.settings.set_shedlock_compatible(true);
        self
    }

    /// Validates the configuration and builds the provider. An invalid collection name, an
    /// unacknowledged write concern or a too long `locked_by` gives
    /// [`Error::Setup`]. Does no I/O.
    pub fn build(self) -> Result<MongoLockProvider> {
        check_collection_name(self.database.name(), &self.collection).map_err(setup)?;
        if self.write_concern.w == Some(Acknowledgment::Nodes(0))
            && self.write_concern.journal != Some(true)
        {
            return Err(setup(
                "write concern w: 0 is unacknowledged: a lock needs the server's answer (use \
                 majority, the default, or w: 1)",
            ));
        }
        let settings = self.settings.validate(BACKEND)?;
        let collection = self.database.collection::<Document>(&self.collection);
        let store = MongoStore {
            database: self.database,
            collection,
            write_concern: self.write_concern,
            compat: settings.is_shedlock_compatible(),
        };
        Ok(MongoLockProvider { inner: StoreProvider::new(store, settings) })
    }
}

/// A [`LockProvider`] on a MongoDB collection. Cheap to clone; clones share the driver's
/// client (and its connection pool).
#[derive(Clone)]
pub struct MongoLockProvider {
    inner: StoreProvider<MongoStore>,
}

impl fmt::Debug for MongoLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No client and no connection string: it may carry user:password.
        let i = self.inner.store();
        f.debug_struct("MongoLockProvider")
            .field("database", &i.database.name())
            .field("collection", &i.collection.name())
            .field("write_concern", &i.write_concern)
            .field("settings", self.inner.settings())
            .finish_non_exhaustive()
    }
}

/// The lock documents of one collection: the [`LeaseStore`] of [`MongoLockProvider`].
struct MongoStore {
    database: Database,
    collection: Collection<Document>,
    write_concern: WriteConcern,
    /// ShedLock's document: no `owner` or `token`, the owner in `lockedBy`.
    compat: bool,
}

fn setup(message: impl Into<String>) -> Error {
    Error::Setup { backend: BACKEND, message: message.into() }
}

/// The server error code of a driver error, if it is a command or write error.
fn server_code(e: &mongodb::error::Error) -> Option<i32> {
    match e.kind.as_ref() {
        ErrorKind::Command(c) => Some(c.code),
        ErrorKind::Write(WriteFailure::WriteError(w)) => Some(w.code),
        ErrorKind::Write(WriteFailure::WriteConcernError(w)) => Some(w.code),
        _ => None,
    }
}

/// A command the provider sends: what a refusal of it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmd {
    /// The acquire: `findAndModify` with `upsert`.
    FindAndModify,
    /// `update` (extend, an unlock within `lock_at_least_for`, `check`).
    Update,
    /// `delete` (unlock, `force_release`, `check`).
    Delete,
    /// `aggregate` (inspect, list, force_release's read).
    Aggregate,
    /// `find` (`check`).
    Find,
    /// `create` (`create_collection`).
    Create,
}

impl Cmd {
    /// The command's name on the wire.
    fn name(self) -> &'static str {
        match self {
            Cmd::FindAndModify => "findAndModify",
            Cmd::Update => "update",
            Cmd::Delete => "delete",
            Cmd::Aggregate => "aggregate",
            Cmd::Find => "find",
            Cmd::Create => "create",
        }
    }

    /// The privilege actions MongoDB asks for it on the collection.
    fn actions(self) -> &'static str {
        match self {
            Cmd::FindAndModify => "find, insert, update",
            Cmd::Update => "update",
            Cmd::Delete => "remove",
            Cmd::Aggregate | Cmd::Find => "find",
            Cmd::Create => "createCollection",
        }
    }
}

/// The server's message of a command or write error.
fn server_message(e: &mongodb::error::Error) -> Option<&str> {
    match e.kind.as_ref() {
        ErrorKind::Command(c) => Some(&c.message),
        ErrorKind::Write(WriteFailure::WriteError(w)) => Some(&w.message),
        ErrorKind::Write(WriteFailure::WriteConcernError(w)) => Some(&w.message),
        _ => None,
    }
}

/// The action a refusal names, where the server names one (SecantusDB: `… (action: update)`;
/// MongoDB names the command instead).
fn named_action(message: &str) -> Option<&str> {
    let rest = &message[message.find("(action: ")? + "(action: ".len()..];
    Some(&rest[..rest.find(')')?]).filter(|a| !a.is_empty())
}

/// Whether a server selection error describes a server the driver gave up on because it
/// refused the login (`Kind: SCRAM failure: …`, `AuthenticationFailed`).
fn login_refused(message: &str) -> bool {
    ["AuthenticationFailed", "SCRAM failure", "Authentication failed", "authentication failed"]
        .iter()
        .any(|s| message.contains(s))
}

/// A refused login ([`ErrorKind::Authentication`], or code 18): [`Error::Setup`] saying what to
/// check. The driver's message names the mechanism, never the password.
fn refused_login(operation: &'static str, e: &mongodb::error::Error) -> Error {
    setup(format!(
        "MongoDB refused the client's credentials in {operation} ({e}): check the user name, \
         password, authSource and mechanism of the connection string (see \"Authentication\" in \
         the shedlock-mongodb README)"
    ))
}

/// The driver error as a shedlock error: unreachable servers and transient server states are
/// retryable [`Error::Unavailable`]; refused credentials, missing privileges (naming the
/// command and the actions it needs) and unsatisfiable write concerns are [`Error::Setup`]
/// saying what to change; anything else is [`Error::Backend`]. The driver's errors name hosts,
/// never the password of the connection string.
fn map_err(
    inner: &MongoStore,
    operation: &'static str,
    cmd: Cmd,
    e: mongodb::error::Error,
) -> Error {
    let ns = || format!("{}.{}", inner.database.name(), inner.collection.name());
    match e.kind.as_ref() {
        // The pool's login failed, and server selection gave up on the server it marked
        // unknown with that error: the credentials, not the network.
        ErrorKind::ServerSelection { message, .. } if login_refused(message) => {
            return refused_login(operation, &e);
        }
        ErrorKind::ServerSelection { .. }
        | ErrorKind::Io(_)
        | ErrorKind::ConnectionPoolCleared { .. }
        | ErrorKind::Shutdown => return Error::unavailable(BACKEND, e),
        ErrorKind::Authentication { .. } => return refused_login(operation, &e),
        _ => {}
    }
    match server_code(&e) {
        Some(UNAUTHORIZED)
            if server_message(&e).is_some_and(|m| m.contains("requires authentication")) =>
        {
            setup(format!(
                "MongoDB refused {} in {operation}: the connection is not authenticated and the \
                 server requires it: give the connection string a user and password (see \
                 \"Authentication\" in the shedlock-mongodb README)",
                cmd.name()
            ))
        }
        Some(UNAUTHORIZED) => {
            let message = server_message(&e).unwrap_or("");
            let named = match named_action(message) {
                Some(a) => format!("; the server names the action {a}"),
                None => String::new(),
            };
            setup(format!(
                "MongoDB refused {} on {} in {operation} (Unauthorized: {message}): the user needs \
                 the privilege actions {} on the collection{named} (the built-in role readWrite \
                 on database {:?} has them; see \"Permissions\" in the shedlock-mongodb README)",
                cmd.name(),
                ns(),
                cmd.actions(),
                inner.database.name(),
            ))
        }
        Some(AUTHENTICATION_FAILED) => refused_login(operation, &e),
        Some(UNSATISFIABLE_WRITE_CONCERN) => setup(format!(
            "{operation}: the write concern {:?} cannot be satisfied by this deployment \
             (majority needs a replica set or a standalone server; give the provider a \
             write_concern the deployment can meet): {e}",
            inner.write_concern
        )),
        Some(INVALID_NAMESPACE) => setup(format!("{operation}: invalid namespace {}: {e}", ns())),
        Some(code) if TRANSIENT.contains(&code) => Error::unavailable(BACKEND, e),
        _ if e.contains_label("RetryableWriteError") => Error::unavailable(BACKEND, e),
        _ => Error::backend(BACKEND, e),
    }
}

/// A lock name as the document's `_id`.
fn id(name: &str) -> Bson {
    Bson::String(name.to_owned())
}

/// An acquisition id as stored (BSON has no unsigned 64-bit integer: the same bits, signed).
fn owner_value(owner: u64) -> i64 {
    i64::from_ne_bytes(owner.to_ne_bytes())
}

fn duration_ms(d: Duration) -> i64 {
    duration_millis_ceil(d)
}

/// The field a read adds to each document it returns in server time: the server's clock
/// ([`server_now`]), read in the same `aggregate`.
const NOW_FIELD: &str = "__shedlockNow";

/// The smallest string after every string that starts with `prefix` (its last character that
/// has a successor, moved to it, and the rest dropped; `None` when there is none, as for `""`):
/// `_id >= prefix AND _id < prefix_end(prefix)` holds exactly the names under `prefix`, in the
/// code point order MongoDB compares strings in (UTF-8 bytes, without a collation).
fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(c) = chars.pop() {
        if let Some(next) = (u32::from(c) + 1..=u32::from(char::MAX)).find_map(char::from_u32) {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// Whether `locked_by` ends with what an acquisition of ours appends to it in the
/// ShedLock-compatible mode: ` #` and 16 lower-case hex digits.
fn has_acquisition_suffix(locked_by: &str) -> bool {
    let b = locked_by.as_bytes();
    b.len() >= ACQUISITION_SUFFIX_LEN && {
        let tail = &b[b.len() - ACQUISITION_SUFFIX_LEN..];
        tail.starts_with(b" #") && tail[2..].iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
    }
}

/// A lock document that cannot be read as one: [`Error::Backend`] naming the field.
fn bad_document(name: &str, what: &str) -> Error {
    Error::backend(BACKEND, format!("the lock document {name:?} {what}"))
}

/// A date field of a lock document (`None` when absent; an error when it is not a date).
fn date_field(doc: &Document, name: &str, field: &str) -> Result<Option<DateTime>> {
    match doc.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::DateTime(d)) => Ok(Some(*d)),
        Some(other) => {
            Err(bad_document(name, &format!("has a {field} that is not a date: {other}")))
        }
    }
}

/// A 64-bit integer field of a lock document (`None` when absent).
fn long_field(doc: &Document, name: &str, field: &str) -> Result<Option<i64>> {
    match doc.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Int64(v)) => Ok(Some(*v)),
        Some(Bson::Int32(v)) => Ok(Some(i64::from(*v))),
        Some(other) => {
            Err(bad_document(name, &format!("has a {field} that is not an integer: {other}")))
        }
    }
}

/// What an operator sees of one lock document: its fields, and whether it is held.
struct Record {
    name: String,
    lock_until: DateTime,
    locked_at: Option<DateTime>,
    locked_by: Option<String>,
    owner: Option<i64>,
    token: Option<i64>,
    /// The server's clock, read with the document (server time only).
    server_now: Option<DateTime>,
}

impl Record {
    fn parse(doc: &Document) -> Result<Self> {
        let name = match doc.get("_id") {
            Some(Bson::String(s)) => s.clone(),
            other => {
                return Err(Error::backend(
                    BACKEND,
                    format!("a lock document has an _id that is not a string: {other:?}"),
                ));
            }
        };
        let lock_until = date_field(doc, &name, "lockUntil")?
            .ok_or_else(|| bad_document(&name, "has no lockUntil"))?;
        let locked_by = match doc.get("lockedBy") {
            None | Some(Bson::Null) => None,
            Some(Bson::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(bad_document(
                    &name,
                    &format!("has a lockedBy that is not a string: {other}"),
                ));
            }
        };
        Ok(Self {
            lock_until,
            locked_at: date_field(doc, &name, "lockedAt")?,
            locked_by,
            owner: long_field(doc, &name, "owner")?,
            token: long_field(doc, &name, "token")?,
            server_now: date_field(doc, &name, NOW_FIELD)?,
            name,
        })
    }
}

impl MongoStore {
    /// The documents matching `filter`, in `_id` order, at most `limit`, each with the server's
    /// clock in server time: one `aggregate` (`$match`, `$sort`, `$limit`, then `$addFields` of
    /// [`server_now`]). Reads only.
    async fn read(
        &self,
        operation: &'static str,
        filter: Document,
        limit: usize,
        settings: &Settings,
    ) -> Result<Vec<Record>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut pipeline = vec![
            doc! { "$match": filter },
            doc! { "$sort": { "_id": 1 } },
            doc! { "$limit": limit },
        ];
        if settings.client_now().is_none() {
            pipeline.push(doc! { "$addFields": { NOW_FIELD: server_now() } });
        }
        let mut cursor = self
            .collection
            .aggregate(pipeline)
            .await
            .map_err(|e| map_err(self, operation, Cmd::Aggregate, e))?;
        let mut records = Vec::new();
        while cursor.advance().await.map_err(|e| map_err(self, operation, Cmd::Aggregate, e))? {
            let doc = cursor
                .deserialize_current()
                .map_err(|e| map_err(self, operation, Cmd::Aggregate, e))?;
            records.push(Record::parse(&doc)?);
        }
        Ok(records)
    }

    /// The document of `name`, if any.
    async fn read_one(
        &self,
        operation: &'static str,
        name: &str,
        settings: &Settings,
    ) -> Result<Option<LockInfo>> {
        let mut records = self.read(operation, doc! { "_id": id(name) }, 1, settings).await?;
        records.pop().map(|r| self.info(r, settings)).transpose()
    }

    /// A document as an operator sees it: held while `lockUntil` is after the server's clock
    /// read with it (in client time, after this instance's clock).
    fn info(&self, r: Record, settings: &Settings) -> Result<LockInfo> {
        let now = match settings.client_now() {
            Some(t) => unix_millis(t),
            None => r
                .server_now
                .ok_or_else(|| bad_document(&r.name, "was read without the server's clock"))?
                .timestamp_millis(),
        };
        let held = r.lock_until.timestamp_millis() > now;
        let acquisition = self.acquisition(&r)?;
        let token = if self.compat { None } else { r.token.map(|t| u64::try_from(t).unwrap_or(0)) };
        let mut info = LockInfo::new(r.name, acquisition, held, settings.time_source())
            .with_lock_until(r.lock_until.to_system_time())
            .with_fencing_token(token);
        if let Some(at) = r.locked_at {
            info = info.with_locked_at(at.to_system_time());
        }
        if let Some(by) = r.locked_by {
            info = info.with_locked_by(by);
        }
        Ok(info)
    }

    /// The `owner` that identifies the acquisition of a document: in the native mode, where
    /// every acquisition writes one. `None` in the compatible mode (whose acquire leaves a native
    /// document's `owner` as it was) and on a document without one (a compatible mode's or a
    /// ShedLock node's, which the native mode honours).
    fn owner_of(&self, r: &Record) -> Option<i64> {
        r.owner.filter(|_| !self.compat)
    }

    /// The acquisition of a document: its `owner` id (16 hex digits); in the ShedLock-compatible
    /// mode (or without an `owner`) `by:<lockedBy>`, which is unique per acquisition when one of
    /// ours wrote it, or `at:<lockedAt in µs>:by:<lockedBy>` when a ShedLock node did (whose
    /// `lockedBy` is its host's, the same for each of its acquisitions; ShedLock's extend leaves
    /// `lockedAt` as it is).
    fn acquisition(&self, r: &Record) -> Result<String> {
        if let Some(owner) = self.owner_of(r) {
            return Ok(format!("{:016x}", u64::from_ne_bytes(owner.to_ne_bytes())));
        }
        let by = r.locked_by.as_deref().ok_or_else(|| bad_document(&r.name, "has no lockedBy"))?;
        if has_acquisition_suffix(by) {
            return Ok(format!("by:{by}"));
        }
        let at = r.locked_at.ok_or_else(|| bad_document(&r.name, "has no lockedAt"))?;
        Ok(format!("at:{}:by:{by}", at.timestamp_millis().saturating_mul(1000)))
    }

    /// The filter matching a document only while it is still the acquisition `r` read: its
    /// `owner` (see [`acquisition`](Self::acquisition)); else its `lockedBy`, and a ShedLock
    /// node's `lockedAt` too.
    fn seen_filter(&self, r: &Record) -> Document {
        if let Some(owner) = self.owner_of(r) {
            return doc! { "_id": id(&r.name), "owner": owner };
        }
        let by = r.locked_by.as_deref().unwrap_or_default();
        let mut filter = doc! { "_id": id(&r.name), "lockedBy": by };
        if !has_acquisition_suffix(by)
            && let Some(at) = r.locked_at
        {
            filter.insert("lockedAt", at);
        }
        filter
    }
}

impl MongoStore {
    /// `now` for a filter: the server's (see [`server_now`]) or this instance's clock, as a
    /// literal date.
    fn now_expr(req: &Request<'_>) -> (Bson, Option<i64>) {
        match req.client_now() {
            None => (server_now(), None),
            Some(t) => {
                let ms = unix_millis(t);
                (Bson::DateTime(DateTime::from_millis(ms)), Some(ms))
            }
        }
    }

    /// `lockUntil` and `lockedAt` of a write holding the lock for `hold`: computed by the
    /// server from `$$NOW`, or from this instance's clock.
    fn lease_fields(&self, client_now_ms: Option<i64>, hold: Duration) -> (Bson, Bson) {
        let ms = duration_ms(hold);
        match client_now_ms {
            None => (Bson::Document(doc! { "$add": ["$$NOW", ms] }), Bson::String("$$NOW".into())),
            Some(now) => (
                Bson::Document(doc! {
                    "$literal": DateTime::from_millis(now.saturating_add(ms))
                }),
                Bson::Document(doc! { "$literal": DateTime::from_millis(now) }),
            ),
        }
    }

    /// One `findAndModify`: takes the name if it is free, as acquisition `owner`. `Some(token)`
    /// when taken, `None` when held elsewhere.
    ///
    /// - Client time: the filter `{_id, lockUntil: {$lte: now}}` matches a free document; when
    ///   it matches none, the upsert inserts one, which collides with a live document's `_id`:
    ///   duplicate key 11000, held elsewhere.
    /// - Server time: `$$NOW` can only enter a query through `$expr`, so the filter is `{_id}`
    ///   and the update pipeline itself decides: every field becomes the new holder's when the
    ///   stored `lockUntil` has passed by the server's clock (or is missing: a new document),
    ///   and stays as it is otherwise (a no-op). The returned owner tells which happened.
    async fn take(&self, req: &Request<'_>) -> Result<Option<u64>> {
        let (name, owner) = (req.name(), req.owner().id());
        let (now, client_now) = Self::now_expr(req);
        let (lock_until, locked_at) = self.lease_fields(client_now, req.lock_at_most_for());
        let by = req.owner().locked_by();
        let new = if self.compat {
            doc! { "lockUntil": lock_until, "lockedAt": locked_at, "lockedBy": { "$literal": by } }
        } else {
            doc! {
                "lockUntil": lock_until,
                "lockedAt": locked_at,
                "lockedBy": { "$literal": by },
                "owner": owner_value(owner),
                "token": next_token(),
            }
        };
        let (filter, update) = match client_now {
            // ShedLock's own filter and upsert.
            Some(_) => (doc! { "_id": id(name), "lockUntil": { "$lte": now } }, new),
            None => {
                // Compatible mode: also "free" for this very acquisition (a retry after a lost
                // answer), told by its own `lockedBy`.
                let free = if self.compat {
                    doc! { "$or": [
                        { "$lte": ["$lockUntil", now.clone()] },
                        { "$eq": ["$lockedBy", { "$literal": by }] },
                    ] }
                } else {
                    doc! { "$lte": ["$lockUntil", now] }
                };
                let mut set = Document::new();
                for (field, value) in new {
                    let keep = format!("${field}");
                    set.insert(field, doc! { "$cond": [free.clone(), value, keep] });
                }
                (doc! { "_id": id(name) }, set)
            }
        };
        let r = self
            .collection
            .find_one_and_update(filter, vec![doc! { "$set": update }])
            .upsert(true)
            .return_document(ReturnDocument::After)
            .projection(doc! { "owner": 1, "token": 1, "lockedBy": 1 })
            .write_concern(self.write_concern.clone())
            .await;
        let doc = match r {
            Ok(Some(d)) => d,
            // The upsert collided with a live document (or, in server time, with another
            // caller's insert of the same new name).
            Err(e) if server_code(&e) == Some(DUPLICATE_KEY) => return Ok(None),
            Err(e) => return Err(map_err(self, "try_lock", Cmd::FindAndModify, e)),
            // Nothing was written (a wire-compatible server answers so when a concurrent writer
            // changed the document between its match and its update).
            Ok(None) => return Ok(None),
        };
        if self.compat {
            return Ok((doc.get_str("lockedBy").ok() == Some(by)).then_some(0));
        }
        if doc.get("owner").and_then(Bson::as_i64) != Some(owner_value(owner)) {
            return Ok(None);
        }
        match doc.get("token") {
            Some(Bson::Int64(t)) => Ok(Some(u64::try_from(*t).unwrap_or(0))),
            other => Err(Error::backend(
                BACKEND,
                format!("findAndModify returned no Int64 token: {other:?}"),
            )),
        }
    }

    /// Owner-checked extend of a live lock: `true` when this owner still held it (by the clock
    /// that judges expiry).
    ///
    /// - Client time: `updateOne({_id, owner, lockUntil: {$gt: now}}, ...)`, matched or not.
    /// - Server time: `updateOne({_id, owner}, ...)` whose pipeline moves `lockUntil` and writes
    ///   a fresh `lease` nonce only while `lockUntil` is ahead of `$$NOW`; an expired lock is
    ///   left as it is, which the server reports as not modified.
    async fn prolong(&self, req: &Request<'_>) -> Result<bool> {
        if self.compat {
            return self.prolong_compat(req).await;
        }
        let (name, owner) = (req.name(), req.owner().id());
        let (now, client_now) = Self::now_expr(req);
        let (lock_until, locked_at) = self.lease_fields(client_now, req.lock_at_most_for());
        let new = doc! {
            "lockUntil": lock_until,
            "lockedAt": locked_at,
            "lease": owner_value(acquisition_id()),
        };
        let (filter, update) = match client_now {
            Some(_) => (
                doc! {
                    "_id": id(name),
                    "owner": owner_value(owner),
                    "lockUntil": { "$gt": now },
                },
                new,
            ),
            None => {
                let live = doc! { "$gt": ["$lockUntil", now] };
                let mut set = Document::new();
                for (field, value) in new {
                    let keep = format!("${field}");
                    set.insert(field, doc! { "$cond": [live.clone(), value, keep] });
                }
                (doc! { "_id": id(name), "owner": owner_value(owner) }, set)
            }
        };
        let r = self
            .collection
            .update_one(filter, vec![doc! { "$set": update }])
            .write_concern(self.write_concern.clone())
            .await
            .map_err(|e| map_err(self, "extend", Cmd::Update, e))?;
        Ok(match client_now {
            Some(_) => r.matched_count == 1,
            None => r.modified_count == 1,
        })
    }

    /// The compatible mode's extend: ShedLock's (`{_id, lockedBy, lockUntil: {$gt: now}}`),
    /// with this acquisition's `lockedBy`; in server time the liveness test is an `$expr` on
    /// [`server_now`], so the match alone says whether the lock was still held.
    async fn prolong_compat(&self, req: &Request<'_>) -> Result<bool> {
        let name = req.name();
        let (now, client_now) = Self::now_expr(req);
        let (lock_until, locked_at) = self.lease_fields(client_now, req.lock_at_most_for());
        let by = req.owner().locked_by();
        let filter = match client_now {
            Some(_) => doc! { "_id": id(name), "lockedBy": by, "lockUntil": { "$gt": now } },
            None => doc! {
                "_id": id(name),
                "lockedBy": by,
                "$expr": { "$gt": ["$lockUntil", now] },
            },
        };
        let update = vec![doc! { "$set": { "lockUntil": lock_until, "lockedAt": locked_at } }];
        let r = self
            .collection
            .update_one(filter, update)
            .write_concern(self.write_concern.clone())
            .await
            .map_err(|e| map_err(self, "extend", Cmd::Update, e))?;
        Ok(r.matched_count == 1)
    }

    /// The filter matching the document while this request's acquisition holds it.
    fn owned(&self, req: &Request<'_>) -> Document {
        if self.compat {
            doc! { "_id": id(req.name()), "lockedBy": req.owner().locked_by() }
        } else {
            doc! { "_id": id(req.name()), "owner": req.owner().id_i64() }
        }
    }

    /// Owner-checked release. Once `lock_at_least_for` has passed (`elapsed`, measured from the
    /// answer of the acquire or last extend, which came after the server stored `lockedAt`), the
    /// document is deleted; before, `lockUntil` becomes `lockedAt + lock_at_least_for` when
    /// that is earlier, so the name frees when it passes, judged by the same clock as expiry.
    /// `false` when this owner no longer held it.
    async fn free(&self, req: &Request<'_>, elapsed: Duration) -> Result<bool> {
        let at_least = req.lock_at_least_for();
        let filter = self.owned(req);
        if elapsed >= at_least {
            let r = self
                .collection
                .delete_one(filter)
                .write_concern(self.write_concern.clone())
                .await
                .map_err(|e| map_err(self, "unlock", Cmd::Delete, e))?;
            return Ok(r.deleted_count == 1);
        }
        let update = vec![doc! {
            "$set": {
                "lockUntil": {
                    "$min": ["$lockUntil", { "$add": ["$lockedAt", duration_ms(at_least)] }]
                }
            }
        }];
        let r = self
            .collection
            .update_one(filter, update)
            .write_concern(self.write_concern.clone())
            .await
            .map_err(|e| map_err(self, "unlock", Cmd::Update, e))?;
        Ok(r.matched_count == 1)
    }
}

/// One held lock: when the answer of the acquire (or last extension) arrived, after the server
/// stored `lockedAt`: `lock_at_least_for` has surely passed on the server once it has passed
/// here.
struct Held {
    since: Instant,
}

#[async_trait::async_trait]
impl LeaseStore for MongoStore {
    type Held = Held;

    fn capabilities(&self, settings: &Settings) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(!self.compat)
            .with_server_time(settings.time_source().is_server())
            .with_owner_checked(true)
            // BSON dates are milliseconds.
            .with_granularity(Duration::from_millis(1))
            .with_max_name_len(Some(MAX_NAME_LEN))
            .with_check(true)
            .with_inspect(true)
            .with_list(true)
            .with_force_release(true)
    }

    /// Three commands on documents no lock can be (`_id` in `[]`), writing nothing: a `find`,
    /// an `update` and a `delete`. The deployment is reachable, the user authenticates, holds
    /// the `find`, `update` and `remove` actions on the collection, and the write concern can be
    /// met. Not proven: `insert` (an acquire's upsert of a new name), which no command can
    /// prove without writing. A missing collection is fine: MongoDB creates it on the first
    /// lock write (or see [`MongoLockProvider::create_collection`]).
    async fn check(&self, _: &Settings) -> Result<()> {
        let none = || doc! { "_id": { "$in": [] } };
        self.collection.find_one(none()).await.map_err(|e| map_err(self, "check", Cmd::Find, e))?;
        self.collection
            .update_one(none(), doc! { "$set": { "owner": 0_i64 } })
            .write_concern(self.write_concern.clone())
            .await
            .map_err(|e| map_err(self, "check", Cmd::Update, e))?;
        self.collection
            .delete_one(none())
            .write_concern(self.write_concern.clone())
            .await
            .map_err(|e| map_err(self, "check", Cmd::Delete, e))?;
        Ok(())
    }

    /// One `aggregate` on `_id` (`$match`, `$limit`, and the server's clock in server time).
    async fn inspect(&self, name: &str, settings: &Settings) -> Result<Option<LockInfo>> {
        self.read_one("inspect", name, settings).await
    }

    /// One `aggregate`: `_id` in `[prefix, prefix_end)` and after the cursor (the last name of
    /// the page before), by `_id`, one document more than the page.
    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
        settings: &Settings,
    ) -> Result<LockPage> {
        let mut range = doc! { "$gte": prefix };
        if let Some(after) = cursor {
            range.insert("$gt", after);
        }
        if let Some(end) = prefix_end(prefix) {
            range.insert("$lt", end);
        }
        let rows =
            self.read("list", doc! { "_id": range }, limit.saturating_add(1), settings).await?;
        let more = rows.len() > limit;
        let records = rows
            .into_iter()
            .take(limit)
            // The range holds only names under the prefix; a collection with a non-binary
            // default collation could order them otherwise, so the prefix is checked again.
            .filter(|r| r.name.starts_with(prefix))
            .map(|r| self.info(r, settings))
            .collect::<Result<Vec<_>>>()?;
        let next = if more { records.last().map(|r| r.name.clone()) } else { None };
        Ok(LockPage::new(records, next))
    }

    /// Reads the document, and deletes it only if it is still the acquisition seen: one
    /// `delete_one` filtered on `_id` and the acquisition's own fields.
    async fn force_release(&self, seen: &LockInfo, settings: &Settings) -> Result<ForceRelease> {
        let name = seen.name.as_str();
        let mut read = self.read("force_release", doc! { "_id": id(name) }, 1, settings).await?;
        let Some(record) = read.pop() else { return Ok(ForceRelease::Changed(None)) };
        let filter = self.seen_filter(&record);
        let current = self.info(record, settings)?;
        if current.acquisition != seen.acquisition {
            return Ok(ForceRelease::Changed(Some(current)));
        }
        let r = self
            .collection
            .delete_one(filter)
            .write_concern(self.write_concern.clone())
            .await
            .map_err(|e| map_err(self, "force_release", Cmd::Delete, e))?;
        if r.deleted_count == 1 {
            return Ok(ForceRelease::Released(current));
        }
        Ok(ForceRelease::Changed(self.read_one("force_release", name, settings).await?))
    }

    async fn acquire(&self, req: &Request<'_>) -> Result<Option<Granted<Held>>> {
        let Some(token) = self.take(req).await? else {
            tracing::debug!(lock = req.name(), "mongodb lock held elsewhere");
            return Ok(None);
        };
        let granted = Granted::new(Held { since: Instant::now() });
        Ok(Some(if self.compat { granted } else { granted.with_fencing_token(token) }))
    }

    async fn release(&self, req: &Request<'_>, held: &mut Held) -> Result<()> {
        if !self.free(req, held.since.elapsed()).await? {
            // Taken over (or deleted) since it expired: the new holder's document is untouched.
            tracing::debug!(lock = req.name(), "unlock: the lock was no longer held by this owner");
        }
        Ok(())
    }

    async fn extend(&self, req: &Request<'_>, held: &mut Held) -> Result<Extension> {
        if !self.prolong(req).await? {
            return Ok(Extension::Lost);
        }
        held.since = Instant::now();
        Ok(Extension::Extended)
    }
}

impl DelegatingProvider for MongoLockProvider {
    fn delegate(&self) -> &dyn LockProvider {
        &self.inner
    }
}

impl MongoLockProvider {
    /// Starts a builder on the caller's database (collection `shedLock`, server time, majority
    /// write concern, 10 s operation timeout).
    pub fn builder(database: Database) -> MongoLockProviderBuilder {
        MongoLockProviderBuilder {
            database,
            collection: DEFAULT_COLLECTION.to_owned(),
            write_concern: WriteConcern::majority(),
            settings: ProviderSettings::new(),
        }
    }

    /// The collection holding the locks, on the caller's client (for inspection and tests; the
    /// lock documents are described in the [crate docs](crate)).
    pub fn collection(&self) -> &Collection<Document> {
        &self.inner.store().collection
    }

    /// Creates the lock collection if it does not exist yet (idempotent). Optional: MongoDB
    /// creates a missing collection on the first lock write, with its unique index on `_id`,
    /// the only index the locks need. Call it where the application's user may not create
    /// collections implicitly, or create the collection yourself
    /// (`db.createCollection("shedLock")` in mongosh).
    pub async fn create_collection(&self) -> Result<()> {
        let i = self.inner.store();
        with_timeout("create_collection", self.inner.settings().timeout(), async {
            match i
                .database
                .create_collection(i.collection.name())
                .write_concern(i.write_concern.clone())
                .await
            {
                Ok(()) => Ok(()),
                Err(e) if server_code(&e) == Some(NAMESPACE_EXISTS) => Ok(()),
                Err(e) => Err(map_err(i, "create_collection", Cmd::Create, e)),
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn collection_names_are_checked() {
        assert!(check_collection_name("app", "shedLock").is_ok());
        assert!(check_collection_name("app", "locks.jobs").is_ok());
        for bad in ["", "a$b", "a\0b", "system.locks", ".x"] {
            assert!(check_collection_name("app", bad).is_err(), "{bad:?}");
        }
        let longest = "c".repeat(MAX_NAMESPACE_LEN - 4);
        assert!(check_collection_name("app", &longest).is_ok());
        assert!(check_collection_name("app", &format!("{longest}c")).is_err());
    }

    #[test]
    fn prefix_end_bounds_exactly_the_names_under_a_prefix() {
        assert_eq!(prefix_end(""), None);
        assert_eq!(prefix_end("job_%/").as_deref(), Some("job_%0"));
        assert_eq!(prefix_end("a\u{d7ff}").as_deref(), Some("a\u{e000}"));
        assert_eq!(prefix_end("a\u{10ffff}").as_deref(), Some("b"));
        assert_eq!(prefix_end("\u{10ffff}"), None);
        for (prefix, name) in [("ab", "ab"), ("ab", "ab\u{10ffff}x"), ("a\u{7f}", "a\u{7f}\u{80}")]
        {
            let end = prefix_end(prefix).unwrap();
            assert!(name >= prefix && name < end.as_str(), "{name:?} in [{prefix:?}, {end:?})");
        }
        assert!("ac" >= prefix_end("ab").unwrap().as_str());
    }

    #[test]
    fn only_our_compatible_locked_by_identifies_an_acquisition_alone() {
        assert!(has_acquisition_suffix("host/1 #0123456789abcdef"));
        assert!(!has_acquisition_suffix("host/1 #0123456789ABCDEF"));
        assert!(!has_acquisition_suffix("java-host"));
        assert!(!has_acquisition_suffix(""));
    }

    #[test]
    fn refusals_are_read_from_the_servers_words() {
        assert_eq!(
            named_action("not authorized on app to execute command (action: update)"),
            Some("update")
        );
        assert_eq!(named_action("not authorized on app to execute command { find: \"x\" }"), None);
        assert!(login_refused("Error: Kind: SCRAM failure: authentication failed, labels: {}"));
        assert!(login_refused(
            "Command(CommandError { code: 18, code_name: \"AuthenticationFailed\""
        ));
        assert!(!login_refused(
            "Server selection timeout: No available servers. Connection refused"
        ));
    }

    #[test]
    fn owner_ids_keep_every_bit() {
        for id in [0, 1, u64::MAX, 1 << 63, 0x0123_4567_89ab_cdef] {
            let stored = owner_value(id);
            assert_eq!(u64::from_ne_bytes(stored.to_ne_bytes()), id);
        }
        assert_ne!(owner_value(1 << 63), owner_value(0));
    }
}

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

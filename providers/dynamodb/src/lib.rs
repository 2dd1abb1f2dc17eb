//! Amazon DynamoDB lock provider for [`shedlock`], on the caller's [`aws_sdk_dynamodb::Client`]
//! (or an [`SdkConfig`](aws_types::SdkConfig)).
//!
//! One item per lock name in a table whose partition key is `_id` (a string):
//!
//! - **Acquire is one request**: a conditional `UpdateItem` that creates the item when it is
//!   missing and takes it over when its lease has passed
//!   (`attribute_not_exists(lockUntil) OR lockUntil <= :now`). A held lock fails the condition
//!   (`ConditionalCheckFailedException`): `Ok(None)`.
//! - **Client time**: DynamoDB has no server clock in condition expressions, so `lockUntil` and
//!   `lockedAt` are numbers, milliseconds since the Unix epoch, from the instance's
//!   [`Clock`](shedlock::Clock). Exclusion holds while the clocks of the instances differ by less
//!   than the margin the README documents (measured by the conformance kit). Expiry never rests
//!   on DynamoDB's TTL feature (which deletes items up to days late).
//! - **Owner-checked** unlock and extend: both are conditioned on this acquisition's random
//!   `acquisitionId`, so a stale holder changes nothing.
//! - **Fencing tokens**: `fencingToken` is incremented in the acquiring update itself, and
//!   seeded from the clock (in microseconds) when the item is created, so tokens keep rising when
//!   an operator deletes an item (see the README for the bound).
//!
//! ```no_run
//! # async fn demo(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_dynamodb::DynamoDbLockProvider;
//!
//! // client = aws_sdk_dynamodb::Client::new(&aws_config::load_from_env().await);
//! let provider = DynamoDbLockProvider::builder(client).table("shedlock").build()?;
//! provider.create_table().await?; // once, or create it yourself (see the README)
//!
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
    time::{Duration, SystemTime},
};

use aws_sdk_dynamodb::{
    Client,
    error::{DisplayErrorContext, ProvideErrorMetadata, SdkError},
    types::{
        AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnValue,
        ScalarAttributeType, TableStatus,
    },
};
use shedlock::{
    Capabilities, Error, LockProvider, Result, TimeSource,
    store::{
        DelegatingProvider, Extension, Granted, LeaseStore, ProviderSettings, Request, Settings,
        StoreProvider,
    },
    support::{
        duration_millis_ceil, from_unix_micros, iso8601_millis, unix_micros, unix_millis,
        with_timeout,
    },
};

const BACKEND: &str = "dynamodb";

/// The longest lock name, in bytes: DynamoDB's limit for a partition key value.
pub const MAX_NAME_LEN: usize = 2048;

/// The default table name.
pub const DEFAULT_TABLE: &str = "shedlock";

/// The default time limit of each lock operation: 10 s, as for every provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT as DEFAULT_TIMEOUT;
/// The builder setters every provider shares (`operation_timeout`, `locked_by`, `clock`).
pub use shedlock::{ClockBuilder, ProviderBuilder};

/// How long [`DynamoDbLockProvider::create_table`] waits for a new table to become active.
pub const CREATE_TABLE_TIMEOUT: Duration = Duration::from_secs(120);

/// The partition key attribute (a string): the lock name.
pub const ATTR_ID: &str = "_id";
/// Until when the lock is held: a number, milliseconds since the Unix epoch (client time).
/// Missing on a released lock.
pub const ATTR_LOCK_UNTIL: &str = "lockUntil";
/// When the lock was taken or last extended: a number, milliseconds since the Unix epoch.
pub const ATTR_LOCKED_AT: &str = "lockedAt";
/// Who took it (informational): a string, `hostname/pid` by default.
pub const ATTR_LOCKED_BY: &str = "lockedBy";
/// The owner check: a random id of the acquisition (a string of 16 hex digits). Removed by
/// unlock.
pub const ATTR_ACQUISITION_ID: &str = "acquisitionId";
/// The fencing token: a number, incremented by every acquisition.
pub const ATTR_FENCING_TOKEN: &str = "fencingToken";

// The expressions, with every attribute behind a placeholder (no reserved-word surprises).
// DynamoDB refuses placeholders an expression does not use, so each request names its own.
const N_UNTIL: (&str, &str) = ("#u", ATTR_LOCK_UNTIL);
const N_AT: (&str, &str) = ("#a", ATTR_LOCKED_AT);
const N_BY: (&str, &str) = ("#b", ATTR_LOCKED_BY);
const N_ACQ: (&str, &str) = ("#q", ATTR_ACQUISITION_ID);
const N_FENCE: (&str, &str) = ("#f", ATTR_FENCING_TOKEN);

/// One conditional update: its expressions and the attribute names they use.
struct Expr {
    update: &'static str,
    condition: &'static str,
    names: &'static [(&'static str, &'static str)],
}

const ACQUIRE: Expr = Expr {
    update: "SET #u = :until, #a = :now, #b = :by, #q = :acq, #f = if_not_exists(#f, :seed) + :one",
    condition: "attribute_not_exists(#u) OR #u <= :now",
    names: &[N_UNTIL, N_AT, N_BY, N_ACQ, N_FENCE],
};
const EXTEND: Expr = Expr {
    update: "SET #u = :until, #a = :now",
    condition: "#q = :acq AND #u > :now",
    names: &[N_UNTIL, N_AT, N_ACQ],
};
/// Unlock within `lock_at_least_for`: keep the lease until it ends.
const KEEP: Expr =
    Expr { update: "SET #u = :until", condition: "#q = :acq", names: &[N_UNTIL, N_ACQ] };
/// Unlock after it: no lease, no owner.
const RELEASE: Expr =
    Expr { update: "REMOVE #u, #q", condition: "#q = :acq", names: &[N_UNTIL, N_ACQ] };

// The ShedLock-compatible mode: ShedLock's three attributes, times as its ISO strings (compared
// as strings, which sort as the times do thanks to the fixed width), the owner in `lockedBy`
// (`:acq` is this acquisition's `lockedBy` there).
/// ShedLock's acquire (`lockUntil <= :lockedAt or attribute_not_exists(lockUntil)`), also taken
/// when the item already carries this acquisition's `lockedBy` (a retry after a lost answer).
const ACQUIRE_COMPAT: Expr = Expr {
    update: "SET #u = :until, #a = :now, #b = :acq",
    condition: "attribute_not_exists(#u) OR #u <= :now OR #b = :acq",
    names: &[N_UNTIL, N_AT, N_BY],
};
const EXTEND_COMPAT: Expr = Expr {
    update: "SET #u = :until, #a = :now",
    condition: "#b = :acq AND #u > :now",
    names: &[N_UNTIL, N_AT, N_BY],
};
const KEEP_COMPAT: Expr =
    Expr { update: "SET #u = :until", condition: "#b = :acq", names: &[N_UNTIL, N_BY] };
/// No `lockUntil`: free for every node whatever its clock (ShedLock's condition accepts a
/// missing `lockUntil`).
const RELEASE_COMPAT: Expr =
    Expr { update: "REMOVE #u", condition: "#b = :acq", names: &[N_UNTIL, N_BY] };

/// Why a DynamoDB request failed: the [`source`](std::error::Error::source) of the
/// [`shedlock::Error`] a call returns. Downcast to it to tell throttling from other failures:
///
/// ```
/// # fn f(e: shedlock::Error) {
/// use shedlock_dynamodb::DynamoDbError;
/// let throttled = std::error::Error::source(&e)
///     .and_then(|s| s.downcast_ref::<DynamoDbError>())
///     .is_some_and(|d| matches!(d, DynamoDbError::Throttled { .. }));
/// # }
/// ```
///
/// It never holds the request, the client or its credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DynamoDbError {
    /// DynamoDB refused the request for capacity (`ProvisionedThroughputExceededException`,
    /// `ThrottlingException`, `RequestLimitExceeded`), after the SDK's own retries. Nothing was
    /// changed; the call's error is [`Error::Unavailable`] (retryable): try again later.
    #[error("{operation}: throttled by DynamoDB ({code}): {message}")]
    Throttled {
        /// The lock operation.
        operation: &'static str,
        /// DynamoDB's error code.
        code: String,
        /// DynamoDB's message.
        message: String,
    },
    /// DynamoDB answered with another error.
    #[error("{operation}: DynamoDB answered {code}: {message}")]
    Service {
        /// The lock operation.
        operation: &'static str,
        /// DynamoDB's error code.
        code: String,
        /// DynamoDB's message.
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

/// Builds a [`DynamoDbLockProvider`].
///
/// The shared setters (`operation_timeout`, `locked_by`, `clock`) come from [`ProviderBuilder`]
/// (and [`ClockBuilder`]), in scope with `use shedlock_dynamodb::ProviderBuilder;`. Here the time
/// limit includes the SDK's retries (`None`: the SDK's own timeouts only); the clock computes
/// `lockUntil` (client time is this provider's only mode); `locked_by` is stored as `lockedBy`.
#[must_use]
pub struct DynamoDbLockProviderBuilder {
    client: Client,
    table: String,
    settings: ProviderSettings,
}

impl fmt::Debug for DynamoDbLockProviderBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client is left out on purpose: its configuration holds the credentials provider.
        f.debug_struct("DynamoDbLockProviderBuilder")
            .field("table", &self.table)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ProviderBuilder for DynamoDbLockProviderBuilder {
    fn settings_mut(&mut self) -> &mut ProviderSettings {
        &mut self.settings
    }
}

impl ClockBuilder for DynamoDbLockProviderBuilder {}

impl DynamoDbLockProviderBuilder {
    /// The table (default `shedlock`): 3 to 255 ASCII letters, digits, `_`, `-` or `.`, with the
    /// string partition key `_id`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// ShedLock-compatible mode: exactly the items of ShedLock's `DynamoDBLockProvider` (SDK v2):
    /// partition key `_id`, and `lockUntil`, `lockedAt`, `lockedBy` as strings, the times in
    /// ShedLock's ISO form (`2018-12-07T12:30:37.810Z`, compared as strings as ShedLock compares
    /// them), so that this provider and Java ShedLock nodes lock the same jobs in the same
    /// table. See the README's "Joining a ShedLock fleet".
    ///
    /// - Each acquisition writes `lockedBy` = the configured value, ` #` and its own 16 hex
    ///   digits (so `locked_by` may be at most 237 bytes); unlock and extend are conditioned on
    ///   it. No `acquisitionId` or `fencingToken`: no fencing.
    /// - Client time, as in the native mode and in ShedLock.
    /// - A released lock has no `lockUntil` (ShedLock's acquire condition accepts that).
    pub fn shedlock_compatible(mut self) -> Self {
        self.settings.set_shedlock_compatible(true);
        self
    }

    /// Validates the configuration and builds the provider. An invalid table name or
    /// `locked_by` gives [`Error::Setup`]. Does no I/O: a missing table is
    /// reported by the first lock call (or checked up front with
    /// [`DynamoDbLockProvider::check_table`]).
    pub fn build(self) -> Result<DynamoDbLockProvider> {
        let t = &self.table;
        let valid = (3..=255).contains(&t.len())
            && t.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !valid {
            return Err(setup(format!(
                "table name {t:?} is invalid: DynamoDB table names are 3 to 255 ASCII letters, \
                 digits, '_', '-' or '.'"
            )));
        }
        // DynamoDB conditions cannot read a server clock: lockUntil is always client time.
        let mut settings = self.settings;
        let settings = settings.set_time_source(TimeSource::Client).clone().validate(BACKEND)?;
        let store = DynamoStore {
            client: self.client,
            table: self.table,
            locked_by: AttributeValue::S(settings.locked_by().to_owned()),
            compat: settings.is_shedlock_compatible(),
        };
        Ok(DynamoDbLockProvider { inner: StoreProvider::new(store, settings) })
    }
}

/// A [`LockProvider`] on a DynamoDB table. Cheap to clone; clones share the client.
#[derive(Clone)]
pub struct DynamoDbLockProvider {
    inner: StoreProvider<DynamoStore>,
}

impl fmt::Debug for DynamoDbLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No client: its configuration holds the credentials provider.
        f.debug_struct("DynamoDbLockProvider")
            .field("table", &self.inner.store().table)
            .field("settings", self.inner.settings())
            .finish_non_exhaustive()
    }
}

/// The lock items of one table: the [`LeaseStore`] of [`DynamoDbLockProvider`].
struct DynamoStore {
    client: Client,
    table: String,
    /// The configured `lockedBy`, as stored in the native mode.
    locked_by: AttributeValue,
    /// ShedLock's item layout.
    compat: bool,
}

/// This instance's clock, which judges expiry (the provider always runs in client time).
fn wall(req: &Request<'_>) -> SystemTime {
    req.client_now().unwrap_or_else(|| req.settings().clock().now())
}

/// [`wall`] in ms since the epoch.
fn now_ms(req: &Request<'_>) -> i64 {
    unix_millis(wall(req))
}

fn setup(message: impl Into<String>) -> Error {
    Error::Setup { backend: BACKEND, message: message.into() }
}

fn num(n: impl fmt::Display) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

/// Whether a failed request failed its condition expression.
fn condition_failed<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    e.as_service_error().and_then(ProvideErrorMetadata::code)
        == Some("ConditionalCheckFailedException")
}

impl DynamoStore {
    /// A time (ms since the epoch) as stored: a number, or ShedLock's ISO string.
    fn time(&self, ms: i64) -> AttributeValue {
        if self.compat {
            AttributeValue::S(iso8601_millis(from_unix_micros(ms.saturating_mul(1000))))
        } else {
            num(ms)
        }
    }

    /// The table's status after checking its key schema; `None` while it is being created.
    async fn describe(&self) -> Result<Option<TableStatus>> {
        let i = self;
        let out = i
            .client
            .describe_table()
            .table_name(&i.table)
            .send()
            .await
            .map_err(|e| i.map_err("describe_table", e))?;
        let Some(t) = out.table else { return Ok(None) };
        let keys = t.key_schema();
        let attr_type = t
            .attribute_definitions()
            .iter()
            .find(|a| a.attribute_name() == ATTR_ID)
            .map(|a| a.attribute_type().clone());
        let key_ok = keys.len() == 1
            && keys[0].attribute_name() == ATTR_ID
            && keys[0].key_type() == &KeyType::Hash
            && attr_type == Some(ScalarAttributeType::S);
        if !key_ok {
            return Err(setup(format!(
                "the table {:?} cannot hold locks: its key must be the string partition key \
                 {ATTR_ID:?} alone, but it is {:?}",
                i.table,
                keys.iter()
                    .map(|k| format!("{} {:?}", k.attribute_name(), k.key_type()))
                    .collect::<Vec<_>>()
            )));
        }
        Ok(match t.table_status {
            Some(TableStatus::Creating) | None => None,
            Some(s) => Some(s),
        })
    }

    fn missing_table(&self) -> Error {
        setup(format!(
            "the table {t:?} does not exist (or is not active yet): call create_table(), or create \
             it with the string partition key {ATTR_ID:?}: `aws dynamodb create-table --table-name \
             {t} --attribute-definitions AttributeName={ATTR_ID},AttributeType=S --key-schema \
             AttributeName={ATTR_ID},KeyType=HASH --billing-mode PAY_PER_REQUEST`",
            t = self.table
        ))
    }

    /// What a failed request means for the caller. Throttling and server-side faults are
    /// retryable ([`Error::Unavailable`]); a missing table or a wrong key schema is
    /// [`Error::Setup`]; credentials or permission problems are [`Error::Setup`] too. The
    /// [`DynamoDbError`] source keeps DynamoDB's code and message, never the request.
    fn map_err<E, R>(&self, operation: &'static str, e: SdkError<E, R>) -> Error
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: fmt::Debug,
    {
        let service = |code: &str, message: &str| DynamoDbError::Service {
            operation,
            code: code.to_owned(),
            message: message.to_owned(),
        };
        match &e {
            SdkError::ServiceError(s) => {
                let code = s.err().code().unwrap_or("unknown");
                let message = s.err().message().unwrap_or("");
                match code {
                    "ResourceNotFoundException" => self.missing_table(),
                    "ProvisionedThroughputExceededException"
                    | "ThrottlingException"
                    | "RequestLimitExceeded"
                    | "Throttling" => Error::unavailable(
                        BACKEND,
                        DynamoDbError::Throttled {
                            operation,
                            code: code.to_owned(),
                            message: message.to_owned(),
                        },
                    ),
                    "InternalServerError" | "InternalFailure" | "ServiceUnavailable" => {
                        Error::unavailable(BACKEND, service(code, message))
                    }
                    "ValidationException" if message.contains("key element does not match") => {
                        setup(format!(
                            "the table {:?} does not have the string partition key {ATTR_ID:?} \
                             (and no sort key) that the provider needs ({message})",
                            self.table
                        ))
                    }
                    "AccessDeniedException"
                    | "UnrecognizedClientException"
                    | "MissingAuthenticationToken"
                    | "InvalidSignatureException"
                    | "IncompleteSignature"
                    | "ExpiredTokenException" => setup(format!(
                        "DynamoDB refused the client's credentials or permissions for {operation} \
                         on table {:?}: {code}: {message} (the provider needs \
                         dynamodb:UpdateItem; create_table also dynamodb:CreateTable and \
                         dynamodb:DescribeTable)",
                        self.table
                    )),
                    _ => Error::backend(BACKEND, service(code, message)),
                }
            }
            SdkError::ConstructionFailure(_) => setup(format!(
                "the request could not be built ({}): check the client's region, endpoint and \
                 credentials provider",
                DisplayErrorContext(&e)
            )),
            _ => Error::unavailable(
                BACKEND,
                DynamoDbError::Transport {
                    operation,
                    message: DisplayErrorContext(&e).to_string(),
                },
            ),
        }
    }

    /// One conditional `UpdateItem` on the lock's item: `Ok(None)` when the condition failed.
    async fn update(
        &self,
        operation: &'static str,
        name: &str,
        expr: &Expr,
        values: HashMap<String, AttributeValue>,
        returned: ReturnValue,
    ) -> Result<Option<HashMap<String, AttributeValue>>> {
        let r = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(ATTR_ID, AttributeValue::S(name.to_owned()))
            .update_expression(expr.update)
            .condition_expression(expr.condition)
            .set_expression_attribute_names(Some(
                expr.names.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            ))
            .set_expression_attribute_values(Some(values))
            .return_values(returned)
            .send()
            .await;
        match r {
            Ok(out) => Ok(Some(out.attributes.unwrap_or_default())),
            Err(e) if condition_failed(&e) => Ok(None),
            Err(e) => Err(self.map_err(operation, e)),
        }
    }

    /// The acquire's values and expression: ShedLock's three attributes in the compatible mode
    /// (the owner in `lockedBy`), else the native five with the fencing counter.
    fn acquire_request(
        &self,
        req: &Request<'_>,
        wall: SystemTime,
        until: i64,
    ) -> (&'static Expr, HashMap<String, AttributeValue>, ReturnValue) {
        let now = unix_millis(wall);
        if self.compat {
            let values = HashMap::from([
                (":until".to_owned(), self.time(until)),
                (":now".to_owned(), self.time(now)),
                (":acq".to_owned(), AttributeValue::S(req.owner().locked_by().to_owned())),
            ]);
            return (&ACQUIRE_COMPAT, values, ReturnValue::None);
        }
        // A new item's counter starts at the clock in microseconds, so tokens keep rising when
        // an item is deleted and created again.
        let seed = unix_micros(wall).max(0);
        let values = HashMap::from([
            (":until".to_owned(), num(until)),
            (":now".to_owned(), num(now)),
            (":by".to_owned(), self.locked_by.clone()),
            (":acq".to_owned(), AttributeValue::S(req.owner().hex())),
            (":seed".to_owned(), num(seed)),
            (":one".to_owned(), num(1)),
        ]);
        (&ACQUIRE, values, ReturnValue::UpdatedNew)
    }

    /// The owner check's value: the acquisition id, or its `lockedBy` in the compatible mode.
    fn owner_value(&self, req: &Request<'_>) -> AttributeValue {
        if self.compat {
            AttributeValue::S(req.owner().locked_by().to_owned())
        } else {
            AttributeValue::S(req.owner().hex())
        }
    }
}

/// One held lock: the current lease, by this instance's clock (ms since the epoch).
struct Held {
    /// `lockedAt` of the current lease.
    locked_at: i64,
    /// `lockUntil` of the current lease.
    until: i64,
}

#[async_trait::async_trait]
impl LeaseStore for DynamoStore {
    type Held = Held;

    fn capabilities(&self, _: &Settings) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(!self.compat)
            // DynamoDB conditions cannot read a server clock: lockUntil is client time.
            .with_server_time(false)
            .with_owner_checked(true)
            .with_granularity(Duration::from_millis(1))
            .with_max_name_len(Some(MAX_NAME_LEN))
            .with_check(true)
    }

    /// One `DescribeTable`: the table exists, is active and has the string partition key
    /// `_id` and no sort key; otherwise [`Error::Setup`] says what to change.
    async fn check(&self, _: &Settings) -> Result<()> {
        match self.describe().await? {
            Some(TableStatus::Active) | Some(TableStatus::Updating) => Ok(()),
            Some(status) => {
                Err(setup(format!("the table {:?} is {status:?}, not active yet", self.table)))
            }
            None => Err(self.missing_table()),
        }
    }

    async fn acquire(&self, req: &Request<'_>) -> Result<Option<Granted<Held>>> {
        let name = req.name();
        let wall = wall(req);
        let now = unix_millis(wall);
        let until = now.saturating_add(duration_millis_ceil(req.lock_at_most_for()));
        let (expr, values, returned) = self.acquire_request(req, wall, until);
        let Some(attrs) = self.update("try_lock", name, expr, values, returned).await? else {
            tracing::trace!(lock = %name, "held elsewhere");
            return Ok(None);
        };
        let held = Held { locked_at: now, until };
        if self.compat {
            return Ok(Some(Granted::new(held)));
        }
        let fence = match attrs.get(ATTR_FENCING_TOKEN) {
            Some(AttributeValue::N(n)) => n.parse::<u64>().ok(),
            _ => None,
        };
        match fence {
            Some(fence) => Ok(Some(Granted::new(held).with_fencing_token(fence))),
            None => {
                let other = attrs.get(ATTR_FENCING_TOKEN);
                // Someone stored a fencing token that is not a u64: give the lock back.
                let values = HashMap::from([(":acq".to_owned(), self.owner_value(req))]);
                let _ = self.update("unlock", name, &RELEASE, values, ReturnValue::None).await;
                Err(Error::backend(
                    BACKEND,
                    format!(
                        "the item of lock {name:?} holds a {ATTR_FENCING_TOKEN} that is not an \
                         unsigned 64-bit integer: {other:?}"
                    ),
                ))
            }
        }
    }

    async fn release(&self, req: &Request<'_>, held: &mut Held) -> Result<()> {
        // Held at least until lockedAt + lock_at_least_for (never past the current lockUntil,
        // since at-least <= at-most); after that, lockUntil and the owner id are removed, which
        // frees the name for every instance whatever its clock. Owner-checked either way: a
        // stale holder's condition fails and nothing changes.
        let keep = held.locked_at.saturating_add(duration_millis_ceil(req.lock_at_least_for()));
        let (keep_expr, release_expr) =
            if self.compat { (&KEEP_COMPAT, &RELEASE_COMPAT) } else { (&KEEP, &RELEASE) };
        let (expr, mut values) = if keep > now_ms(req) {
            (keep_expr, HashMap::from([(":until".to_owned(), self.time(keep.min(held.until)))]))
        } else {
            (release_expr, HashMap::new())
        };
        values.insert(":acq".to_owned(), self.owner_value(req));
        let r = self.update("unlock", req.name(), expr, values, ReturnValue::None).await?;
        if r.is_none() {
            tracing::debug!(lock = %req.name(), "unlock: no longer the holder; nothing changed");
        }
        Ok(())
    }

    async fn extend(&self, req: &Request<'_>, held: &mut Held) -> Result<Extension> {
        let now = now_ms(req);
        // An expired lock is not revived, by the same clock that judges expiry.
        if held.until <= now {
            return Ok(Extension::Lost);
        }
        let until = now.saturating_add(duration_millis_ceil(req.lock_at_most_for()));
        let values = HashMap::from([
            (":until".to_owned(), self.time(until)),
            (":now".to_owned(), self.time(now)),
            (":acq".to_owned(), self.owner_value(req)),
        ]);
        let expr = if self.compat { &EXTEND_COMPAT } else { &EXTEND };
        match self.update("extend", req.name(), expr, values, ReturnValue::None).await? {
            Some(_) => {
                held.locked_at = now;
                held.until = until;
                Ok(Extension::Extended)
            }
            None => Ok(Extension::Lost),
        }
    }
}

impl DelegatingProvider for DynamoDbLockProvider {
    fn delegate(&self) -> &dyn LockProvider {
        &self.inner
    }
}

impl DynamoDbLockProvider {
    /// Starts a builder on the caller's client (table `shedlock`, 10 s operation timeout, the
    /// system clock). The client brings its HTTP stack, credentials, region, retries and
    /// timeouts.
    pub fn builder(client: Client) -> DynamoDbLockProviderBuilder {
        DynamoDbLockProviderBuilder {
            client,
            table: DEFAULT_TABLE.to_owned(),
            settings: ProviderSettings::new(),
        }
    }

    /// Starts a builder on a client made from the caller's shared AWS configuration (what
    /// `aws_config::load_from_env()` returns).
    pub fn builder_from_config(config: &aws_types::SdkConfig) -> DynamoDbLockProviderBuilder {
        Self::builder(Client::new(config))
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.inner.store().table
    }

    /// The client the provider sends its requests through.
    pub fn client(&self) -> &Client {
        &self.inner.store().client
    }

    /// Creates the table (string partition key `_id`, on-demand capacity) and waits until it is
    /// active, or, when a table of that name exists, checks it ([`check_table`]). Idempotent.
    /// Bounded by [`CREATE_TABLE_TIMEOUT`].
    ///
    /// [`check_table`]: Self::check_table
    pub async fn create_table(&self) -> Result<()> {
        let i = self.inner.store();
        with_timeout("create_table", Some(CREATE_TABLE_TIMEOUT), async {
            let build = |e: aws_sdk_dynamodb::error::BuildError| Error::backend(BACKEND, e);
            let r = i
                .client
                .create_table()
                .table_name(&i.table)
                .attribute_definitions(
                    AttributeDefinition::builder()
                        .attribute_name(ATTR_ID)
                        .attribute_type(ScalarAttributeType::S)
                        .build()
                        .map_err(build)?,
                )
                .key_schema(
                    KeySchemaElement::builder()
                        .attribute_name(ATTR_ID)
                        .key_type(KeyType::Hash)
                        .build()
                        .map_err(build)?,
                )
                .billing_mode(BillingMode::PayPerRequest)
                .send()
                .await;
            match r {
                Ok(_) => {}
                Err(e)
                    if e.as_service_error().and_then(ProvideErrorMetadata::code)
                        == Some("ResourceInUseException") => {}
                Err(e) => return Err(i.map_err("create_table", e)),
            }
            loop {
                match i.describe().await? {
                    Some(TableStatus::Active) | Some(TableStatus::Updating) => return Ok(()),
                    _ => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        })
        .await
    }

    /// Checks that the table exists, is active and has the string partition key `_id` and no
    /// sort key. Otherwise [`Error::Setup`] says what to change. One
    /// `DescribeTable` request: the same as [`LockProvider::check`].
    pub async fn check_table(&self) -> Result<()> {
        self.inner.check().await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use aws_sdk_dynamodb::{
        config::BehaviorVersion, error::ErrorMetadata, operation::update_item::UpdateItemError,
    };

    use super::*;

    fn inner() -> DynamoStore {
        let conf =
            aws_sdk_dynamodb::Config::builder().behavior_version(BehaviorVersion::latest()).build();
        DynamoStore {
            client: Client::from_conf(conf),
            table: DEFAULT_TABLE.into(),
            locked_by: AttributeValue::S("me".into()),
            compat: false,
        }
    }

    fn answered(code: &str, message: &str) -> SdkError<UpdateItemError, ()> {
        let meta = ErrorMetadata::builder().code(code).message(message).build();
        SdkError::service_error(UpdateItemError::generic(meta), ())
    }

    #[test]
    fn throttling_is_a_retryable_typed_error() {
        let i = inner();
        for code in [
            "ProvisionedThroughputExceededException",
            "ThrottlingException",
            "RequestLimitExceeded",
        ] {
            let e = i.map_err("try_lock", answered(code, "slow down"));
            assert!(matches!(e, Error::Unavailable { .. }) && e.is_retryable(), "{e:?}");
            let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref());
            assert_eq!(
                source,
                Some(&DynamoDbError::Throttled {
                    operation: "try_lock",
                    code: code.to_owned(),
                    message: "slow down".to_owned()
                })
            );
        }
    }

    #[test]
    fn server_faults_are_retryable_and_refusals_are_setup_errors() {
        let i = inner();
        let e = i.map_err("unlock", answered("InternalServerError", "oops"));
        assert!(e.is_retryable(), "{e:?}");
        for code in ["AccessDeniedException", "UnrecognizedClientException"] {
            let e = i.map_err("try_lock", answered(code, "no"));
            assert!(matches!(e, Error::Setup { .. }), "{e:?}");
        }
        let e = i.map_err("try_lock", answered("ResourceNotFoundException", "gone"));
        assert!(
            matches!(e, Error::Setup { ref message, .. } if message.contains("create_table()"))
        );
        let e = i.map_err("try_lock", answered("SomethingElse", "?"));
        assert!(matches!(e, Error::Backend { .. }) && !e.is_retryable(), "{e:?}");
    }

    #[test]
    fn a_failed_condition_is_recognised() {
        assert!(condition_failed(&answered("ConditionalCheckFailedException", "")));
        assert!(!condition_failed(&answered("ValidationException", "")));
    }
}

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

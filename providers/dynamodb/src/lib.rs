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
//! - **Inspection**: `inspect` is one strongly consistent `GetItem`, `list` pages through
//!   `Scan`s filtered by `begins_with(_id, :prefix)`, and `force_release` is one `DeleteItem`
//!   conditioned on the acquisition seen.
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
    Capabilities, Error, ForceRelease, LockInfo, LockPage, LockProvider, Result, TimeSource,
    inspect::MAX_PAGE,
    store::{
        DelegatingProvider, Extension, Granted, LeaseStore, ProviderSettings, Request, Settings,
        StoreProvider,
    },
    support::{
        ACQUISITION_SUFFIX_LEN, duration_millis_ceil, from_unix_micros, iso8601_millis,
        unix_micros, unix_millis, with_timeout,
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
/// [`check`](LeaseStore::check)'s probe: an update whose condition never holds, so that
/// DynamoDB checks the permission and writes nothing.
const PROBE: Expr = Expr {
    update: "SET #q = :acq",
    condition: "attribute_exists(#q) AND attribute_not_exists(#q)",
    names: &[N_ACQ],
};

/// The item [`check`](LeaseStore::check)'s probe addresses (and never writes, whatever the
/// table holds).
pub const CHECK_NAME: &str = ".shedlock-check";

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

/// A DynamoDB request the provider sends: what a refusal of it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    UpdateItem,
    GetItem,
    Scan,
    DeleteItem,
    DescribeTable,
    CreateTable,
}

impl Call {
    /// The request's name in DynamoDB's API.
    fn name(self) -> &'static str {
        match self {
            Call::UpdateItem => "UpdateItem",
            Call::GetItem => "GetItem",
            Call::Scan => "Scan",
            Call::DeleteItem => "DeleteItem",
            Call::DescribeTable => "DescribeTable",
            Call::CreateTable => "CreateTable",
        }
    }

    /// The IAM action that allows it.
    fn action(self) -> &'static str {
        match self {
            Call::UpdateItem => "dynamodb:UpdateItem",
            Call::GetItem => "dynamodb:GetItem",
            Call::Scan => "dynamodb:Scan",
            Call::DeleteItem => "dynamodb:DeleteItem",
            Call::DescribeTable => "dynamodb:DescribeTable",
            Call::CreateTable => "dynamodb:CreateTable",
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

/// The HTTP status of a raw response (a trait so that the classification is testable without
/// one).
trait HasStatus {
    fn status(&self) -> u16;
}

impl HasStatus for aws_sdk_dynamodb::config::http::HttpResponse {
    fn status(&self) -> u16 {
        self.status().as_u16()
    }
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
    async fn describe(&self, operation: &'static str) -> Result<Option<TableStatus>> {
        let i = self;
        let out = i
            .client
            .describe_table()
            .table_name(&i.table)
            .send()
            .await
            .map_err(|e| i.map_err(operation, Call::DescribeTable, e))?;
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

    /// What a failed `call` means for the caller. Throttling and server-side faults are
    /// retryable ([`Error::Unavailable`]); a missing table or a wrong key schema is
    /// [`Error::Setup`]; refused credentials or permissions are [`Error::Setup`] too
    /// ([`refused`](Self::refused)). The [`DynamoDbError`] source keeps DynamoDB's code and
    /// message, never the request.
    fn map_err<E, R>(&self, operation: &'static str, call: Call, e: SdkError<E, R>) -> Error
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: HasStatus + fmt::Debug,
    {
        let service = |code: &str, message: &str| DynamoDbError::Service {
            operation,
            code: code.to_owned(),
            message: message.to_owned(),
        };
        let http = e.raw_response().map_or(0, HasStatus::status);
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
                    | "AccessDenied"
                    | "UnrecognizedClientException"
                    | "InvalidClientTokenId"
                    | "MissingAuthenticationToken"
                    | "InvalidSignatureException"
                    | "SignatureDoesNotMatch"
                    | "IncompleteSignature"
                    | "ExpiredTokenException"
                    | "ExpiredToken" => self.refused(operation, call, code, message),
                    _ if matches!(http, 401 | 403) => self.refused(operation, call, code, message),
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

    /// A request DynamoDB refused for its credentials or permissions: [`Error::Setup`] saying
    /// what to change — the credentials, the clock, or the IAM action `call` needs (or the one
    /// DynamoDB names, such as a KMS key's). DynamoDB's code and message name neither the secret
    /// key nor the signature.
    fn refused(&self, operation: &'static str, call: Call, code: &str, message: &str) -> Error {
        let server = match (code, message) {
            ("unknown", "") => "HTTP 403 without an error code".to_owned(),
            (code, "") => code.to_owned(),
            (code, message) => format!("{code}: {message}"),
        };
        let why = match code {
            "UnrecognizedClientException" | "InvalidClientTokenId" => "DynamoDB does not know \
                 the client's access key id or session token (deleted, inactive, or of another \
                 account or endpoint): check the credentials the client was built with"
                .to_owned(),
            "InvalidSignatureException" | "SignatureDoesNotMatch" | "IncompleteSignature"
                if message.contains("Signature expired") =>
            {
                "this machine's clock differs from AWS's by more than 5 minutes: synchronise it \
                 (the provider's leases are client time too)"
                    .to_owned()
            }
            "InvalidSignatureException" | "SignatureDoesNotMatch" | "IncompleteSignature" => {
                "DynamoDB refused the request's signature: the secret access key does not belong \
                 to the access key id (or something between the client and DynamoDB changed \
                 the request)"
                    .to_owned()
            }
            "MissingAuthenticationToken" => "the request was not signed: give the client a \
                 credentials provider"
                .to_owned(),
            "ExpiredTokenException" | "ExpiredToken" => "the client's session token has expired: \
                 its credentials provider must refresh it"
                .to_owned(),
            _ => {
                let ours = format!(
                    "{} on the table's ARN, arn:aws:dynamodb:<region>:<account>:table/{}",
                    call.action(),
                    self.table
                );
                let need = match named_action(message) {
                    Some(named) if named != call.action() => {
                        format!(
                            "{named} (which DynamoDB names; {} itself needs {ours})",
                            call.name()
                        )
                    }
                    _ => ours,
                };
                // Without a code, the refusal may as well be of the credentials themselves.
                let whose = if code == "unknown" {
                    "the credentials were refused, or they"
                } else {
                    "the credentials"
                };
                format!("{whose} need {need} (see \"Permissions\" in the shedlock-dynamodb README)")
            }
        };
        setup(format!(
            "DynamoDB refused {} on table {:?} in {operation} ({server}): {why}",
            call.name(),
            self.table
        ))
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
            Err(e) => Err(self.map_err(operation, Call::UpdateItem, e)),
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

/// The most `Scan` requests one [`list`](LeaseStore::list) call sends before it answers a page
/// (possibly shorter than asked, with a cursor at the scan's position) so that a sparse prefix in
/// a large table cannot keep one call scanning: each request reads at most
/// [`MAX_PAGE`]` + 1` items.
const MAX_SCANS_PER_PAGE: usize = 16;

/// Whether `locked_by` ends with what an acquisition of ours appends to it in the
/// ShedLock-compatible mode: ` #` and 16 lower-case hex digits.
fn has_acquisition_suffix(locked_by: &str) -> bool {
    let b = locked_by.as_bytes();
    b.len() >= ACQUISITION_SUFFIX_LEN && {
        let tail = &b[b.len() - ACQUISITION_SUFFIX_LEN..];
        tail.starts_with(b" #") && tail[2..].iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
    }
}

/// Days from 1970-01-01 to the proleptic Gregorian date `y-m-d` (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Milliseconds since the epoch of a time as ShedLock writes it
/// (`2018-12-07T12:30:37.810Z`: UTC, any number of fractional digits, truncated to
/// milliseconds); `None` for anything else.
fn parse_iso_millis(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(r)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0_i64, |n, d| n * 10 + i64::from(d - b'0')))
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    if b[16] != b':' || b.last() != Some(&b'Z') {
        return None;
    }
    let (y, mo, d) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (h, mi, sec) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let fraction = &b[19..b.len() - 1];
    let millis = match fraction.split_first() {
        None => 0,
        Some((b'.', f)) if !f.is_empty() && f.iter().all(u8::is_ascii_digit) => {
            (0..3).fold(0_i64, |n, i| n * 10 + f.get(i).map_or(0, |d| i64::from(d - b'0')))
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec;
    Some(secs * 1000 + millis)
}

/// A lock item that cannot be read as one: [`Error::Backend`] naming the attribute.
fn bad_item(name: &str, what: impl fmt::Display) -> Error {
    Error::backend(BACKEND, format!("the item of lock {name:?} {what}"))
}

/// One lock item as stored, read for an operator.
struct Item {
    name: String,
    /// `lockUntil` in ms since the epoch; `None` on a released lock.
    lock_until: Option<i64>,
    /// `lockedAt` in ms since the epoch.
    locked_at: Option<i64>,
    /// `lockedAt` as stored (a number, or ShedLock's ISO string), for a forced release's
    /// condition.
    locked_at_value: Option<AttributeValue>,
    locked_by: Option<String>,
    acquisition_id: Option<String>,
    /// `fencingToken` as stored.
    token_value: Option<AttributeValue>,
    token: Option<u64>,
}

impl Item {
    fn parse(attrs: &HashMap<String, AttributeValue>) -> Result<Self> {
        let name = match attrs.get(ATTR_ID) {
            Some(AttributeValue::S(s)) => s.clone(),
            other => {
                return Err(Error::backend(
                    BACKEND,
                    format!("a lock item has a {ATTR_ID} that is not a string: {other:?}"),
                ));
            }
        };
        let time = |attr: &str| -> Result<Option<i64>> {
            match attrs.get(attr) {
                None | Some(AttributeValue::Null(_)) => Ok(None),
                Some(AttributeValue::N(n)) => n
                    .parse::<i64>()
                    .map(Some)
                    .map_err(|_| bad_item(&name, format_args!("has a {attr} that is not ms: {n}"))),
                Some(AttributeValue::S(s)) => parse_iso_millis(s).map(Some).ok_or_else(|| {
                    bad_item(&name, format_args!("has a {attr} that is not an ISO time: {s:?}"))
                }),
                Some(other) => {
                    Err(bad_item(&name, format_args!("has a {attr} of another type: {other:?}")))
                }
            }
        };
        let string = |attr: &str| -> Result<Option<String>> {
            match attrs.get(attr) {
                None | Some(AttributeValue::Null(_)) => Ok(None),
                Some(AttributeValue::S(s)) => Ok(Some(s.clone())),
                Some(other) => Err(bad_item(
                    &name,
                    format_args!("has a {attr} that is not a string: {other:?}"),
                )),
            }
        };
        let token_value = attrs.get(ATTR_FENCING_TOKEN).cloned();
        let token = match &token_value {
            None => None,
            Some(AttributeValue::N(n)) => Some(n.parse::<u64>().map_err(|_| {
                bad_item(&name, format_args!("has a {ATTR_FENCING_TOKEN} that is not a u64: {n}"))
            })?),
            Some(other) => {
                return Err(bad_item(
                    &name,
                    format_args!("has a {ATTR_FENCING_TOKEN} that is not a number: {other:?}"),
                ));
            }
        };
        Ok(Self {
            lock_until: time(ATTR_LOCK_UNTIL)?,
            locked_at: time(ATTR_LOCKED_AT)?,
            locked_at_value: attrs.get(ATTR_LOCKED_AT).cloned(),
            locked_by: string(ATTR_LOCKED_BY)?,
            acquisition_id: string(ATTR_ACQUISITION_ID)?,
            token_value,
            token,
            name,
        })
    }
}

impl DynamoStore {
    /// The acquisition of an item: its `acquisitionId` (`free:<fencingToken>` once unlock has
    /// removed it); in the ShedLock-compatible mode `by:<lockedBy>`, which is unique per
    /// acquisition when one of ours wrote it, or `at:<lockedAt in µs>:by:<lockedBy>` when a
    /// ShedLock node did (whose `lockedBy` is its host's, the same for each of its
    /// acquisitions).
    fn acquisition(&self, i: &Item) -> Result<String> {
        if !self.compat {
            return Ok(match (&i.acquisition_id, i.token) {
                (Some(id), _) => id.clone(),
                (None, Some(token)) => format!("free:{token}"),
                (None, None) => "free".to_owned(),
            });
        }
        let by = i.locked_by.as_deref().ok_or_else(|| bad_item(&i.name, "has no lockedBy"))?;
        if has_acquisition_suffix(by) {
            return Ok(format!("by:{by}"));
        }
        let at = i.locked_at.ok_or_else(|| bad_item(&i.name, "has no lockedAt"))?;
        Ok(format!("at:{}:by:{by}", at.saturating_mul(1000)))
    }

    /// An item as an operator sees it: held while its `lockUntil` is after this instance's
    /// clock (the provider's leases are client time).
    fn info(&self, i: Item, settings: &Settings) -> Result<LockInfo> {
        let now = unix_millis(settings.client_now().unwrap_or_else(|| settings.clock().now()));
        let held = i.lock_until.is_some_and(|until| until > now);
        let acquisition = self.acquisition(&i)?;
        let time = |ms: i64| from_unix_micros(ms.saturating_mul(1000));
        let token = if self.compat { None } else { i.token };
        let mut info =
            LockInfo::new(i.name, acquisition, held, TimeSource::Client).with_fencing_token(token);
        if let Some(until) = i.lock_until {
            info = info.with_lock_until(time(until));
        }
        if let Some(at) = i.locked_at {
            info = info.with_locked_at(time(at));
        }
        if let Some(by) = i.locked_by {
            info = info.with_locked_by(by);
        }
        Ok(info)
    }

    /// One strongly consistent `GetItem` of the lock's item.
    async fn get(&self, operation: &'static str, name: &str) -> Result<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(ATTR_ID, AttributeValue::S(name.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.map_err(operation, Call::GetItem, e))?;
        out.item.as_ref().map(Item::parse).transpose()
    }

    /// The condition of a forced release of `i`: the item is still that acquisition (its
    /// `acquisitionId`, or with none its `fencingToken`; in the compatible mode its `lockedBy`,
    /// and a ShedLock node's `lockedAt` too).
    fn seen_condition(
        &self,
        i: &Item,
    ) -> (&'static str, HashMap<String, String>, HashMap<String, AttributeValue>) {
        let names = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };
        let string = |v: &Option<String>| AttributeValue::S(v.clone().unwrap_or_default());
        if self.compat {
            let by = i.locked_by.as_deref().unwrap_or_default();
            return match &i.locked_at_value {
                Some(at) if !has_acquisition_suffix(by) => (
                    "#b = :by AND #a = :at",
                    names(&[N_BY, N_AT]),
                    HashMap::from([
                        (":by".to_owned(), string(&i.locked_by)),
                        (":at".to_owned(), at.clone()),
                    ]),
                ),
                _ => (
                    "#b = :by",
                    names(&[N_BY]),
                    HashMap::from([(":by".to_owned(), string(&i.locked_by))]),
                ),
            };
        }
        match (&i.acquisition_id, &i.token_value) {
            (Some(_), _) => (
                "#q = :acq",
                names(&[N_ACQ]),
                HashMap::from([(":acq".to_owned(), string(&i.acquisition_id))]),
            ),
            (None, Some(token)) => (
                "attribute_not_exists(#q) AND #f = :f",
                names(&[N_ACQ, N_FENCE]),
                HashMap::from([(":f".to_owned(), token.clone())]),
            ),
            (None, None) => (
                "attribute_exists(#i) AND attribute_not_exists(#q) AND attribute_not_exists(#f)",
                names(&[("#i", ATTR_ID), N_ACQ, N_FENCE]),
                HashMap::new(),
            ),
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
            .with_inspect(true)
            .with_list(true)
            .with_force_release(true)
    }

    /// Two requests, writing nothing; otherwise [`Error::Setup`] says what to change:
    ///
    /// 1. `DescribeTable`: the table exists, is active and has the string partition key `_id`
    ///    and no sort key (`dynamodb:DescribeTable`).
    /// 2. `UpdateItem` of the item [`CHECK_NAME`] with a condition that never holds
    ///    (`attribute_exists(acquisitionId) AND attribute_not_exists(acquisitionId)`): DynamoDB
    ///    checks `dynamodb:UpdateItem`, the locking action, and the credentials, then refuses
    ///    the write (`ConditionalCheckFailedException`).
    async fn check(&self, _: &Settings) -> Result<()> {
        match self.describe("check").await? {
            Some(TableStatus::Active) | Some(TableStatus::Updating) => {}
            Some(status) => {
                return Err(setup(format!(
                    "the table {:?} is {status:?}, not active yet",
                    self.table
                )));
            }
            None => return Err(self.missing_table()),
        }
        let values = HashMap::from([(":acq".to_owned(), AttributeValue::S(CHECK_NAME.to_owned()))]);
        match self.update("check", CHECK_NAME, &PROBE, values, ReturnValue::None).await? {
            None => Ok(()),
            Some(_) => Err(setup(format!(
                "the server applied an UpdateItem to the item {CHECK_NAME:?} of table {:?} whose \
                 condition can never hold: it does not honour condition expressions, which the \
                 provider needs",
                self.table
            ))),
        }
    }

    /// One strongly consistent `GetItem`.
    async fn inspect(&self, name: &str, settings: &Settings) -> Result<Option<LockInfo>> {
        self.get("inspect", name).await?.map(|i| self.info(i, settings)).transpose()
    }

    /// Strongly consistent `Scan`s from the cursor (a name: the scan resumes after its item)
    /// with the filter `begins_with(_id, :prefix)`, until one item more than the page has
    /// matched or the table ends. Each request reads at most as many items as are still
    /// wanted, doubling while the prefix is sparse (at most [`MAX_PAGE`]` + 1`); after
    /// [`MAX_SCANS_PER_PAGE`] requests the page is answered as it is, its cursor at the scan's
    /// position. The scan's order is DynamoDB's (by hash), not by name.
    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
        settings: &Settings,
    ) -> Result<LockPage> {
        let want = limit.saturating_add(1);
        let mut start = cursor.map(str::to_owned);
        let mut batch = want;
        let mut items: Vec<Item> = Vec::new();
        let mut scans = 0;
        let ended = loop {
            let mut scan = self
                .client
                .scan()
                .table_name(&self.table)
                .consistent_read(true)
                .limit(i32::try_from(batch).unwrap_or(i32::MAX))
                .set_exclusive_start_key(
                    start
                        .take()
                        .map(|s| HashMap::from([(ATTR_ID.to_owned(), AttributeValue::S(s))])),
                );
            // DynamoDB refuses an empty string as an expression value: no filter for "".
            if !prefix.is_empty() {
                scan = scan
                    .filter_expression("begins_with(#i, :p)")
                    .expression_attribute_names("#i", ATTR_ID)
                    .expression_attribute_values(":p", AttributeValue::S(prefix.to_owned()));
            }
            let out = scan.send().await.map_err(|e| self.map_err("list", Call::Scan, e))?;
            scans += 1;
            for attrs in out.items() {
                if items.len() < want {
                    let item = Item::parse(attrs)?;
                    // The filter already holds only names under the prefix.
                    if item.name.starts_with(prefix) {
                        items.push(item);
                    }
                }
            }
            let next = match out.last_evaluated_key().and_then(|k| k.get(ATTR_ID)) {
                Some(AttributeValue::S(s)) => s.clone(),
                Some(other) => {
                    return Err(Error::backend(
                        BACKEND,
                        format!("Scan answered a LastEvaluatedKey that is not a name: {other:?}"),
                    ));
                }
                None => break true,
            };
            if items.len() >= want {
                break false;
            }
            if scans >= MAX_SCANS_PER_PAGE {
                start = Some(next);
                break false;
            }
            start = Some(next);
            batch = batch.saturating_mul(2).max(want - items.len()).min(MAX_PAGE + 1);
        };
        let more = items.len() > limit;
        let records = items
            .into_iter()
            .take(limit)
            .map(|i| self.info(i, settings))
            .collect::<Result<Vec<_>>>()?;
        let next = if more {
            // Resume right after the last record answered (the scan reads the rest again).
            records.last().map(|r| r.name.clone())
        } else if ended {
            None
        } else {
            // The request budget ran out: resume where the scan stopped.
            start
        };
        Ok(LockPage::new(records, next))
    }

    /// One strongly consistent `GetItem`, then, if the item is still the acquisition seen, one
    /// `DeleteItem` conditioned on that acquisition (`ConditionalCheckFailedException`: it
    /// changed in between, and the item is read again).
    async fn force_release(&self, seen: &LockInfo, settings: &Settings) -> Result<ForceRelease> {
        let name = seen.name.as_str();
        let Some(item) = self.get("force_release", name).await? else {
            return Ok(ForceRelease::Changed(None));
        };
        let (condition, names, values) = self.seen_condition(&item);
        let current = self.info(item, settings)?;
        if current.acquisition != seen.acquisition {
            return Ok(ForceRelease::Changed(Some(current)));
        }
        let r = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(ATTR_ID, AttributeValue::S(name.to_owned()))
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values((!values.is_empty()).then_some(values))
            .send()
            .await;
        match r {
            Ok(_) => Ok(ForceRelease::Released(current)),
            Err(e) if condition_failed(&e) => {
                let now = self.get("force_release", name).await?;
                Ok(ForceRelease::Changed(now.map(|i| self.info(i, settings)).transpose()?))
            }
            Err(e) => Err(self.map_err("force_release", Call::DeleteItem, e)),
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
                Err(e) => return Err(i.map_err("create_table", Call::CreateTable, e)),
            }
            loop {
                match i.describe("create_table").await? {
                    Some(TableStatus::Active) | Some(TableStatus::Updating) => return Ok(()),
                    _ => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        })
        .await
    }

    /// Checks that the table exists, is active and has the string partition key `_id` and no
    /// sort key (`DescribeTable`), and that this client may lock in it: an `UpdateItem` of
    /// [`CHECK_NAME`] whose condition never holds, which proves `dynamodb:UpdateItem` and writes
    /// nothing. Otherwise [`Error::Setup`] says what to change. The same as
    /// [`LockProvider::check`].
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

    impl HasStatus for () {
        fn status(&self) -> u16 {
            400
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
            let e = i.map_err("try_lock", Call::UpdateItem, answered(code, "slow down"));
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
        let e = i.map_err("unlock", Call::UpdateItem, answered("InternalServerError", "oops"));
        assert!(e.is_retryable(), "{e:?}");
        for code in ["AccessDeniedException", "UnrecognizedClientException"] {
            let e = i.map_err("try_lock", Call::UpdateItem, answered(code, "no"));
            assert!(matches!(e, Error::Setup { .. }), "{e:?}");
        }
        let e =
            i.map_err("try_lock", Call::UpdateItem, answered("ResourceNotFoundException", "gone"));
        assert!(
            matches!(e, Error::Setup { ref message, .. } if message.contains("create_table()"))
        );
        let e = i.map_err("try_lock", Call::UpdateItem, answered("SomethingElse", "?"));
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
        let aws = "User: arn:aws:iam::123456789012:user/app is not authorized to perform: \
                   dynamodb:GetItem on resource: arn:aws:dynamodb:us-east-1:123456789012:table/\
                   shedlock because no identity-based policy allows the dynamodb:GetItem action";
        for (call, operation, needs, message) in [
            (Call::UpdateItem, "try_lock", "need dynamodb:UpdateItem on the table's ARN", "no"),
            (Call::GetItem, "inspect", "need dynamodb:GetItem on the table's ARN", aws),
            (Call::Scan, "list", "need dynamodb:Scan", ""),
            (Call::DeleteItem, "force_release", "need dynamodb:DeleteItem", "no"),
            (Call::DescribeTable, "check", "need dynamodb:DescribeTable", "no"),
            (Call::CreateTable, "create_table", "need dynamodb:CreateTable", "no"),
        ] {
            for code in ["AccessDeniedException", "AccessDenied"] {
                let m = setup_message(i.map_err(operation, call, answered(code, message)));
                for part in [call.name(), operation, needs, "\"Permissions\"", "table/shedlock"] {
                    assert!(m.contains(part), "{part:?} missing: {m}");
                }
            }
        }
        // An action DynamoDB names that is not the request's own (a KMS key's) is named too.
        let kms = "User: arn:aws:iam::1:user/app is not authorized to perform: kms:Decrypt on \
                   resource: arn:aws:kms:us-east-1:1:key/k";
        let m = setup_message(i.map_err(
            "try_lock",
            Call::UpdateItem,
            answered("AccessDeniedException", kms),
        ));
        assert!(m.contains("need kms:Decrypt") && m.contains("dynamodb:UpdateItem"), "{m}");
        for (code, message, says) in [
            (
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
                "access key id",
            ),
            (
                "InvalidSignatureException",
                "The request signature we calculated does not match",
                "secret access key",
            ),
            (
                "InvalidSignatureException",
                "Signature expired: 20260101T000000Z is now earlier than",
                "clock",
            ),
            (
                "ExpiredTokenException",
                "The security token included in the request is expired",
                "session token",
            ),
            ("MissingAuthenticationToken", "Request is missing Authentication Token", "not signed"),
        ] {
            let m = setup_message(i.map_err("try_lock", Call::UpdateItem, answered(code, message)));
            assert!(m.contains(says) && m.contains(code), "{m}");
        }
        assert_eq!(named_action(aws), Some("dynamodb:GetItem"));
        assert_eq!(named_action("Access Denied"), None);
    }

    #[test]
    fn shedlock_iso_times_read_back_as_written() {
        for ms in [0_i64, 1, 999, 1_544_185_837_810, 951_782_400_000, 4_102_444_799_999, -1_000] {
            let t = from_unix_micros(ms * 1000);
            assert_eq!(parse_iso_millis(&iso8601_millis(t)), Some(ms), "{ms}");
        }
        assert_eq!(parse_iso_millis("2018-12-07T12:30:37Z"), Some(1_544_185_837_000));
        assert_eq!(parse_iso_millis("2018-12-07T12:30:37.8109Z"), Some(1_544_185_837_810));
        assert_eq!(parse_iso_millis("2018-12-07T12:30:37.8Z"), Some(1_544_185_837_800));
        for bad in [
            "",
            "2018-12-07T12:30:37.810",
            "2018-13-07T12:30:37.810Z",
            "2018-12-07 12:30:37Z",
            "2018-12-07T12:30:37.Z",
            "2018-12-07T12:30:37,810Z",
            "2018-12-07T12:3a:37.810Z",
            "é018-12-07T12:30:37.810Z",
        ] {
            assert_eq!(parse_iso_millis(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_our_compatible_locked_by_identifies_an_acquisition_alone() {
        assert!(has_acquisition_suffix("host/1 #0123456789abcdef"));
        assert!(!has_acquisition_suffix("host/1 #0123456789ABCDEF"));
        assert!(!has_acquisition_suffix("java-host"));
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

//! [`DynamoStore`], the [`LeaseStore`] of [`DynamoDbLockProvider`](crate::DynamoDbLockProvider):
//! acquire, release and extend as conditional `UpdateItem`s, and the checks.

use std::{
    collections::HashMap,
    time::{Duration, SystemTime},
};

use aws_sdk_dynamodb::{
    Client,
    types::{AttributeValue, ReturnValue, TableStatus},
};
use shedlock::{
    Capabilities, Error, ForceRelease, LockInfo, LockPage, Result,
    store::{Extension, Granted, LeaseStore, Request, Settings},
    support::{duration_millis_ceil, unix_micros, unix_millis},
};

use crate::{
    ATTR_FENCING_TOKEN, ATTR_ID, BACKEND, CHECK_NAME, MAX_NAME_LEN,
    compat::{ACQUIRE_COMPAT, EXTEND_COMPAT, KEEP_COMPAT, RELEASE_COMPAT},
    conditions::{ACQUIRE, EXTEND, Expr, KEEP, PROBE, RELEASE},
    error::condition_failed,
    item::num,
    refusal::Call,
};

/// The lock items of one table: the [`LeaseStore`] of [`DynamoDbLockProvider`].
///
/// [`DynamoDbLockProvider`]: crate::DynamoDbLockProvider
pub(crate) struct DynamoStore {
    pub(crate) client: Client,
    pub(crate) table: String,
    /// The configured `lockedBy`, as stored in the native mode.
    pub(crate) locked_by: AttributeValue,
    /// ShedLock's item layout.
    pub(crate) compat: bool,
}

/// This instance's clock, which judges expiry (the provider always runs in client time).
fn wall(req: &Request<'_>) -> SystemTime {
    req.client_now().unwrap_or_else(|| req.settings().clock().now())
}

/// [`wall`] in ms since the epoch.
fn now_ms(req: &Request<'_>) -> i64 {
    unix_millis(wall(req))
}

impl DynamoStore {
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

/// One held lock: the current lease, by this instance's clock (ms since the epoch).
pub(crate) struct Held {
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
                return Err(Error::setup(
                    BACKEND,
                    format!("the table {:?} is {status:?}, not active yet", self.table),
                ));
            }
            None => return Err(self.missing_table()),
        }
        let values = HashMap::from([(":acq".to_owned(), AttributeValue::S(CHECK_NAME.to_owned()))]);
        match self.update("check", CHECK_NAME, &PROBE, values, ReturnValue::None).await? {
            None => Ok(()),
            Some(_) => Err(Error::setup(
                BACKEND,
                format!(
                    "the server applied an UpdateItem to the item {CHECK_NAME:?} of table {:?} whose \
                 condition can never hold: it does not honour condition expressions, which the \
                 provider needs",
                    self.table
                ),
            )),
        }
    }

    /// One strongly consistent `GetItem`.
    async fn inspect(&self, name: &str, settings: &Settings) -> Result<Option<LockInfo>> {
        self.get("inspect", name).await?.map(|i| self.info(i, settings)).transpose()
    }

    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
        settings: &Settings,
    ) -> Result<LockPage> {
        self.list_page(prefix, cursor, limit, settings).await
    }

    async fn force_release(&self, seen: &LockInfo, settings: &Settings) -> Result<ForceRelease> {
        self.force_release_seen(seen, settings).await
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

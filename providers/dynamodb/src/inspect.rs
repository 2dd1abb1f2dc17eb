//! What an operator reads and releases: `inspect`, `list` (paged `Scan`s) and `force_release`
//! (a `DeleteItem` conditioned on the acquisition seen).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use shedlock::{
    Error, ForceRelease, LockInfo, LockPage, Result, TimeSource,
    inspect::MAX_PAGE,
    store::Settings,
    support::{from_unix_micros, unix_millis},
};

use crate::{
    ATTR_ID, BACKEND,
    compat::has_acquisition_suffix,
    conditions::{N_ACQ, N_AT, N_BY, N_FENCE},
    error::condition_failed,
    item::{Item, bad_item},
    refusal::Call,
    store::DynamoStore,
};

/// The most `Scan` requests one [`list`](shedlock::store::LeaseStore::list) call sends before it
/// answers a page (possibly shorter than asked, with a cursor at the scan's position) so that a
/// sparse prefix in a large table cannot keep one call scanning: each request reads at most
/// [`MAX_PAGE`]` + 1` items.
const MAX_SCANS_PER_PAGE: usize = 16;

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
    pub(crate) fn info(&self, i: Item, settings: &Settings) -> Result<LockInfo> {
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
    pub(crate) async fn get(&self, operation: &'static str, name: &str) -> Result<Option<Item>> {
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

    /// Strongly consistent `Scan`s from the cursor (a name: the scan resumes after its item)
    /// with the filter `begins_with(_id, :prefix)`, until one item more than the page has
    /// matched or the table ends. Each request reads at most as many items as are still
    /// wanted, doubling while the prefix is sparse (at most [`MAX_PAGE`]` + 1`); after
    /// [`MAX_SCANS_PER_PAGE`] requests the page is answered as it is, its cursor at the scan's
    /// position. The scan's order is DynamoDB's (by hash), not by name.
    pub(crate) async fn list_page(
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
    pub(crate) async fn force_release_seen(
        &self,
        seen: &LockInfo,
        settings: &Settings,
    ) -> Result<ForceRelease> {
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
}

//! What an operator reads and releases: `inspect` and `list` (one `aggregate` each, with the
//! server's clock) and `force_release` (a `delete_one` filtered on the acquisition seen).

use mongodb::bson::{Document, doc};
use shedlock::{ForceRelease, LockInfo, LockPage, Result, store::Settings, support::unix_millis};

use crate::{
    compat::has_acquisition_suffix,
    documents::{id, server_now},
    error::map_err,
    record::{NOW_FIELD, Record, bad_document},
    refusal::Cmd,
    store::MongoStore,
};

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
    pub(crate) async fn read_one(
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
    pub(crate) fn info(&self, r: Record, settings: &Settings) -> Result<LockInfo> {
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

    /// One `aggregate`: `_id` in `[prefix, prefix_end)` and after the cursor (the last name of
    /// the page before), by `_id`, one document more than the page.
    pub(crate) async fn list_page(
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
    pub(crate) async fn force_release_seen(
        &self,
        seen: &LockInfo,
        settings: &Settings,
    ) -> Result<ForceRelease> {
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
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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
}

//! What an operator reads and releases: `inspect`'s read, `list` (one `ListObjectsV2` and a
//! `GetObject` per object) and `force_release` (a `DeleteObject` with `If-Match`).

use aws_sdk_s3::error::ProvideErrorMetadata;
use shedlock::{
    ForceRelease, LockInfo, LockPage, Result, TimeSource,
    store::Settings,
    support::{from_unix_micros, unix_millis},
};

use crate::{
    error::status,
    keys::PREFIX_ENDS,
    object::{State, body_locked_by},
    refusal::Call,
    store::S3Store,
};

/// How many times [`force_release`](shedlock::store::LeaseStore::force_release) reads the object
/// again and retries its conditional delete when the object's ETag changed but its acquisition
/// did not (the holder extended it in between).
const FORCE_RELEASE_ATTEMPTS: usize = 3;

/// An object as an operator sees it: held while its lease is after this instance's clock (the
/// provider's leases are client time); a released object (no lease) is free.
pub(crate) fn info(
    name: &str,
    s: &State,
    locked_by: Option<String>,
    settings: &Settings,
) -> LockInfo {
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

impl S3Store {
    /// One `GetObject`: the object's ETag, state and `locked_by`; `None` if there is none.
    pub(crate) async fn read_record(
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

    /// One `ListObjectsV2` of the keys under `<prefix><key_for(prefix)>` after
    /// `<prefix><cursor>` (`StartAfter`), at most one more than the page (a name is under the
    /// prefix exactly when its key is under the escaped prefix: [`key_for`] escapes byte by
    /// byte), then one `GetObject` per key of the page, one after the other. The page is in key
    /// order; the cursor is the key (after the provider's prefix) of the last object of the
    /// page. Keys with a `/` or `.` after the provider's prefix belong to a longer prefix
    /// (another provider's: [`key_for`] makes neither) and are passed over; an object deleted
    /// between the listing and its read is left out.
    ///
    /// [`key_for`]: crate::key_for
    pub(crate) async fn list_page(
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
    pub(crate) async fn force_release_seen(
        &self,
        seen: &LockInfo,
        settings: &Settings,
    ) -> Result<ForceRelease> {
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
}

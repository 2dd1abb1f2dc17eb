//! What an operator reads and releases: `inspect`, `list` and `force_release`, and the record
//! of a lock's key.

use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse,
};
use shedlock::{
    Error, ForceRelease, LockInfo, LockPage, Result, TimeSource,
    inspect::page_limit,
    store::{Operation, log_forced_release},
    support::check_lock_name,
};

use crate::{
    BACKEND, EtcdLockProvider, MAX_NAME_LEN,
    error::{Access, Failure, Permission},
    keys,
};

#[cfg(doc)]
use shedlock::LockProvider;

/// The record of lock `name` held in `kv`: held (a key lives only while its lease does), the
/// acquisition and fencing token its `create_revision`, `locked_by` its value. etcd keeps the
/// lease as a relative TTL, so no `locked_at` or `lock_until` is reported.
fn record(name: &str, kv: &KeyValue) -> Result<LockInfo> {
    let revision = kv.create_revision();
    if revision <= 0 {
        return Err(Error::backend(
            BACKEND,
            format!("the key of lock {name:?} has no create_revision ({revision})"),
        ));
    }
    let locked_by = std::str::from_utf8(kv.value()).map_err(|_| {
        Error::backend(BACKEND, format!("the value of lock {name:?}'s key is not UTF-8"))
    })?;
    Ok(LockInfo::new(name, revision.to_string(), true, TimeSource::Server)
        .with_locked_by(locked_by)
        .with_fencing_token(u64::try_from(revision).ok()))
}

impl EtcdLockProvider {
    /// The body of [`LockProvider::inspect`].
    pub(crate) async fn inspect_record(&self, name: &str) -> Result<Option<LockInfo>> {
        check_lock_name(BACKEND, name, Some(MAX_NAME_LEN), false)?;
        let key = self.key(name);
        let read = async {
            let on = self.inner.on("inspect()'s read", &key, Permission::Read);
            let mut resp = self.inner.get(on, None).await.map_err(Failure::into_error)?;
            resp.take_kvs().first().map(|kv| record(name, kv)).transpose()
        };
        Operation::Inspect.run(BACKEND, name, self.inner.timeout, read).await
    }

    /// The body of [`LockProvider::list`].
    pub(crate) async fn list_records(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LockPage> {
        if !prefix.is_empty() {
            check_lock_name(BACKEND, prefix, Some(MAX_NAME_LEN), false)?;
        }
        let limit = page_limit(limit);
        let from = self.key(prefix);
        let end = keys::prefix_end(&from);
        // After the cursor's key: the smallest key greater than it is the key with a 0 byte
        // appended.
        let mut start = match cursor {
            Some(after) => {
                let mut k = self.key(after);
                k.push(0);
                k.max(from.clone())
            }
            None => from.clone(),
        };
        let read = async {
            let mut records = Vec::with_capacity(limit);
            loop {
                if end != [0] && start >= end {
                    return Ok(LockPage::new(records, None));
                }
                let on = Access {
                    what: "list()'s range read",
                    from: &start,
                    to: Some(&end),
                    permission: Permission::Read,
                    prefix: &self.inner.prefix,
                };
                let want = i64::try_from(limit - records.len()).unwrap_or(i64::MAX);
                let options = GetOptions::new().with_range(end.clone()).with_limit(want);
                let mut resp =
                    self.inner.get(on, Some(options)).await.map_err(Failure::into_error)?;
                let more = resp.more();
                let kvs = resp.take_kvs();
                let mut next = None;
                for (i, kv) in kvs.iter().enumerate() {
                    if kv.key() < next.as_deref().unwrap_or_default() {
                        continue;
                    }
                    match keys::parse(&self.inner.prefix, kv.key())? {
                        keys::Found::Nested(after) => next = Some(after),
                        keys::Found::Lock(name) => {
                            records.push(record(&name, kv)?);
                            if records.len() == limit {
                                let rest = more || i + 1 < kvs.len();
                                return Ok(LockPage::new(records, rest.then_some(name)));
                            }
                        }
                    }
                }
                if !more {
                    return Ok(LockPage::new(records, None));
                }
                // The page was cut short by the skipped keys: read on after them.
                let last = kvs.last().map(|kv| {
                    let mut k = kv.key().to_vec();
                    k.push(0);
                    k
                });
                start = match (next, last) {
                    (Some(n), Some(l)) => n.max(l),
                    (n, l) => n.or(l).unwrap_or_else(|| end.clone()),
                };
            }
        };
        Operation::List.run(BACKEND, prefix, self.inner.timeout, read).await
    }

    /// The body of [`LockProvider::force_release`].
    pub(crate) async fn release_if_seen(&self, seen: &LockInfo) -> Result<ForceRelease> {
        let name = seen.name.as_str();
        check_lock_name(BACKEND, name, Some(MAX_NAME_LEN), false)?;
        let key = self.key(name);
        // An acquisition that is not a revision was never this provider's: it matches no key
        // (create_revision is 0 for a missing key, positive otherwise).
        let revision = seen.acquisition.parse::<i64>().unwrap_or(-1);
        let release = async {
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, revision)])
                .and_then([TxnOp::delete(key.clone(), Some(DeleteOptions::new().with_prev_key()))])
                .or_else([TxnOp::get(key.clone(), None)]);
            let resp = self
                .inner
                .txn(
                    txn,
                    self.inner.on("force_release()'s transaction", &key, Permission::ReadWrite),
                )
                .await
                .map_err(Failure::into_error)?;
            let answer = resp.op_responses().into_iter().next();
            if resp.succeeded() {
                let Some(TxnOpResponse::Delete(d)) = answer else {
                    return Err(Error::backend(
                        BACKEND,
                        "a release transaction without its delete",
                    ));
                };
                let Some(kv) = d.prev_kvs().first() else {
                    return Err(Error::backend(BACKEND, "a delete without the deleted key"));
                };
                return Ok(ForceRelease::Released(record(name, kv)?));
            }
            let Some(TxnOpResponse::Get(g)) = answer else {
                return Err(Error::backend(BACKEND, "a release transaction without its read"));
            };
            g.kvs().first().map(|kv| record(name, kv)).transpose().map(ForceRelease::Changed)
        };
        let released =
            Operation::ForceRelease.run(BACKEND, name, self.inner.timeout, release).await?;
        log_forced_release(BACKEND, seen, &released);
        Ok(released)
    }
}

//! [`MongoStore`], the [`LeaseStore`] of [`MongoLockProvider`](crate::MongoLockProvider):
//! acquire (`findAndModify` with `upsert`; a batch in `batch.rs`), release and extend, and the
//! checks.

use std::time::Duration;

use mongodb::{
    Collection, Database,
    bson::{Bson, Document, doc},
    options::{ReturnDocument, WriteConcern},
};
use shedlock::{
    Capabilities, Error, ForceRelease, LockInfo, LockPage, Result,
    store::{Extension, Granted, LeaseStore, Request, Settings},
    support::acquisition_id,
};
use tokio::time::Instant;

use crate::{
    BACKEND, MAX_NAME_LEN,
    documents::{duration_ms, id, next_token, owner_value},
    error::{DUPLICATE_KEY, map_err, server_code},
    refusal::Cmd,
};

/// The lock documents of one collection: the [`LeaseStore`] of [`MongoLockProvider`].
///
/// [`MongoLockProvider`]: crate::MongoLockProvider
pub(crate) struct MongoStore {
    pub(crate) database: Database,
    pub(crate) collection: Collection<Document>,
    pub(crate) write_concern: WriteConcern,
    /// ShedLock's document: no `owner` or `token`, the owner in `lockedBy`.
    pub(crate) compat: bool,
}

impl MongoStore {
    /// The acquire's filter and `$set` stage for `req`: takes the name if it is free, as the
    /// request's acquisition, in the clock of the settings.
    ///
    /// - Client time: the filter `{_id, lockUntil: {$lte: now}}` matches a free document; when
    ///   it matches none, the upsert inserts one, which collides with a live document's `_id`:
    ///   duplicate key 11000, held elsewhere.
    /// - Server time: `$$NOW` can only enter a query through `$expr`, so the filter is `{_id}`
    ///   and the update pipeline itself decides: every field becomes the new holder's when the
    ///   stored `lockUntil` has passed by the server's clock (or is missing: a new document),
    ///   and stays as it is otherwise (a no-op). Reading the owner back tells which happened.
    pub(crate) fn take_statement(&self, req: &Request<'_>) -> (Document, Document) {
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
        match client_now {
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
        }
    }

    /// Whether the document `doc` (its `owner`, `token` and `lockedBy`), read after an acquire,
    /// is `req`'s acquisition: `Some(token)` when it is (0 in the compatible mode, which has no
    /// token), `None` when another holder's.
    pub(crate) fn taken_by(&self, req: &Request<'_>, doc: &Document) -> Result<Option<u64>> {
        if self.compat {
            return Ok((doc.get_str("lockedBy").ok() == Some(req.owner().locked_by())).then_some(0));
        }
        if doc.get("owner").and_then(Bson::as_i64) != Some(owner_value(req.owner().id())) {
            return Ok(None);
        }
        match doc.get("token") {
            Some(Bson::Int64(t)) => Ok(Some(u64::try_from(*t).unwrap_or(0))),
            other => {
                Err(Error::backend(BACKEND, format!("the acquire left no Int64 token: {other:?}")))
            }
        }
    }

    /// One `findAndModify` of [`take_statement`](Self::take_statement), returning the document
    /// after it: `Some(token)` when taken, `None` when held elsewhere.
    async fn take(&self, req: &Request<'_>) -> Result<Option<u64>> {
        let (filter, update) = self.take_statement(req);
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
        self.taken_by(req, &doc)
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
pub(crate) struct Held {
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
            .with_native_batch(true)
    }

    /// Three commands on documents no lock can be (`_id` in `[]`), writing nothing: a `find`,
    /// an `update` and a `delete`. The deployment is reachable, the user authenticates, holds
    /// the `find`, `update` and `remove` actions on the collection, and the write concern can be
    /// met. Not proven: `insert` (an acquire's upsert of a new name), which no command can
    /// prove without writing. A missing collection is fine: MongoDB creates it on the first
    /// lock write (or see [`MongoLockProvider::create_collection`]).
    ///
    /// [`MongoLockProvider::create_collection`]: crate::MongoLockProvider::create_collection
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
        let Some(token) = self.take(req).await? else {
            tracing::debug!(lock = req.name(), "mongodb lock held elsewhere");
            return Ok(None);
        };
        let granted = Granted::new(Held { since: Instant::now() });
        Ok(Some(if self.compat { granted } else { granted.with_fencing_token(token) }))
    }

    /// One unordered `update` of every name, then one `find` of them
    /// ([`take_many`](MongoStore::take_many)).
    async fn acquire_many(&self, reqs: &[Request<'_>]) -> Result<Vec<Option<Granted<Held>>>> {
        let tokens = self.take_many(reqs).await?;
        Ok(tokens
            .into_iter()
            .map(|token| {
                token.map(|token| {
                    let granted = Granted::new(Held { since: Instant::now() });
                    if self.compat { granted } else { granted.with_fencing_token(token) }
                })
            })
            .collect())
    }

    fn batch_limit(&self) -> usize {
        crate::batch::BATCH_LIMIT
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

//! [`S3Store`], the [`LeaseStore`] of [`S3LockProvider`](crate::S3LockProvider): acquire,
//! release and extend as conditional `PutObject`s, and the checks.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, SystemTime},
};

use aws_sdk_s3::{Client, error::ProvideErrorMetadata, primitives::ByteStream};
use shedlock::{
    Capabilities, ForceRelease, LockInfo, LockPage, Result,
    store::{Extension, Granted, LeaseStore, Request, Settings},
    support::{duration_millis_ceil, unix_micros, unix_millis},
};

use crate::BACKEND;
use crate::{
    MAX_NAME_LEN,
    error::status,
    object::{Put, State},
    refusal::Call,
    seen::ForgetOnDrop,
};
use shedlock::Error;

/// The lock objects in one bucket: the [`LeaseStore`] of [`S3LockProvider`].
///
/// [`S3LockProvider`]: crate::S3LockProvider
pub(crate) struct S3Store {
    pub(crate) client: Client,
    pub(crate) bucket: String,
    pub(crate) prefix: String,
    /// Per key, the ETag and state this instance last read or wrote: a free object seen here is
    /// taken with one `If-Match` write, without reading it again.
    pub(crate) seen: Mutex<HashMap<String, (String, State)>>,
}

/// This instance's clock, which judges expiry (the provider always runs in client time).
fn now(req: &Request<'_>) -> SystemTime {
    req.client_now().unwrap_or_else(|| req.settings().clock().now())
}

/// The key [`check`](LeaseStore::check) reads and conditionally writes after the prefix: a `.`
/// ([`key_for`] never makes one, so no lock has this key), never written (see `check`).
///
/// [`key_for`]: crate::key_for
const CHECK_KEY: &str = ".shedlock-check";

/// The ETag of `check`'s conditional write: no object has it (S3's ETags are hex digits).
const CHECK_ETAG: &str = "\"shedlock-check\"";

impl S3Store {
    /// The acquire: `Some((etag, state))` of the object this caller wrote, `None` when held.
    async fn take(
        &self,
        req: &Request<'_>,
        key: &str,
        mine: &State,
    ) -> Result<Option<(String, State)>> {
        let now = mine.at;
        let next = |prev: &State| State { fence: prev.fence.saturating_add(1), ..mine.clone() };
        // 1. The object as this instance last saw it, if that was free: one If-Match write.
        //    Otherwise, or without a record of it: one If-None-Match write (a missing object).
        let first = match self.seen(key) {
            Some((etag, prev)) if prev.free_at(now) => {
                let s = next(&prev);
                (self.put(req, key, Some(&etag), &s).await?, s)
            }
            Some(_) => (Put::Refused, mine.clone()),
            None => (self.put(req, key, None, mine).await?, mine.clone()),
        };
        if let (Put::Stored(etag), s) = first {
            return Ok(Some((etag, s)));
        }
        // 2. It exists (or changed): read it. Free (released, or its lease ended by this
        //    instance's clock): take it over, conditioned on what was read.
        match self.read("try_lock", key).await? {
            None => match self.put(req, key, None, mine).await? {
                Put::Stored(etag) => Ok(Some((etag, mine.clone()))),
                Put::Refused => Ok(None),
            },
            Some((etag, prev)) if prev.free_at(now) => {
                let s = next(&prev);
                match self.put(req, key, Some(&etag), &s).await? {
                    Put::Stored(new) => Ok(Some((new, s))),
                    Put::Refused => Ok(None),
                }
            }
            Some((etag, prev)) => {
                self.remember(key, etag, prev);
                Ok(None)
            }
        }
    }

    /// Writes `next` over the holder's object; `false` when it is no longer the holder's.
    async fn write(&self, req: &Request<'_>, held: &mut Held, next: State) -> Result<bool> {
        match self.put(req, &held.key, Some(&held.etag), &next).await {
            Ok(Put::Stored(etag)) => {
                self.remember(&held.key, etag.clone(), next.clone());
                held.etag = etag;
                held.state = next;
                Ok(true)
            }
            Ok(Put::Refused) => {
                self.forget(&held.key);
                Ok(false)
            }
            Err(e) => {
                self.forget(&held.key);
                Err(e)
            }
        }
    }
}

/// One held lock: its key, the ETag this holder last wrote (the owner check) and its state.
pub(crate) struct Held {
    key: String,
    etag: String,
    state: State,
}

#[async_trait::async_trait]
impl LeaseStore for S3Store {
    type Held = Held;

    fn capabilities(&self, _: &Settings) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(true)
            // S3 conditions cannot read a server clock: the lease is client time.
            .with_server_time(false)
            .with_owner_checked(true)
            .with_granularity(Duration::from_millis(1))
            .with_max_name_len(Some(MAX_NAME_LEN))
            .with_check(true)
            .with_inspect(true)
            .with_list(true)
            .with_force_release(true)
    }

    /// Proves what locking needs, writing nothing; otherwise [`Error::Setup`] says what to
    /// change. Three requests:
    ///
    /// 1. `ListObjectsV2` under the prefix, one key at most: the bucket exists, S3 accepts the
    ///    credentials, and they hold `s3:ListBucket` for the prefix.
    /// 2. `GetObject` of `<prefix>.shedlock-check` (no lock has that key): `404` proves
    ///    `s3:GetObject` on the prefix, and that a missing object reads as missing (S3 answers
    ///    `403` instead to a caller without `s3:ListBucket`).
    /// 3. `PutObject` of that key with `If-Match` on an ETag no object has: S3 checks
    ///    `s3:PutObject`, then refuses the write (`404`, or `412` if the object exists). A
    ///    server that stores it anyway ignores `If-Match`: no conditional writes,
    ///    [`Error::Setup`].
    ///
    /// [`Error::Setup`]: shedlock::Error::Setup
    async fn check(&self, _: &Settings) -> Result<()> {
        let listed = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(&self.prefix)
            .max_keys(1)
            .send()
            .await;
        match listed {
            Ok(_) => {}
            Err(e) if matches!(status(&e), Some(404)) => return Err(self.missing_bucket()),
            Err(e) => return Err(self.map_err("check", Call::ListObjectsV2, e)),
        }
        let key = format!("{}{CHECK_KEY}", self.prefix);
        self.fetch("check", &key).await?;
        let r = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(&key)
            .body(ByteStream::from_static(b""))
            .if_match(CHECK_ETAG)
            .send()
            .await;
        match r {
            Err(e)
                if e.as_service_error().and_then(ProvideErrorMetadata::code)
                    == Some("NoSuchBucket") =>
            {
                Err(self.missing_bucket())
            }
            Err(e) if matches!(status(&e), Some(404 | 412)) => Ok(()),
            Err(e) => Err(self.map_err("check", Call::PutObject, e)),
            Ok(_) => Err(Error::setup(
                BACKEND,
                format!(
                    "the server stored the object {key:?} in bucket {:?} although its If-Match \
                 matched no object: it ignores conditional writes, which the provider needs \
                 (If-None-Match and If-Match on PutObject); delete that object",
                    self.bucket
                ),
            )),
        }
    }

    /// One `GetObject`.
    async fn inspect(&self, name: &str, settings: &Settings) -> Result<Option<LockInfo>> {
        Ok(self.read_record("inspect", name, settings).await?.map(|(_, info)| info))
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
        let key = self.key(req.name());
        let wall = now(req);
        let at = unix_millis(wall);
        let mine = State {
            acquisition: req.owner().hex(),
            until: Some(at.saturating_add(duration_millis_ceil(req.lock_at_most_for()))),
            at,
            // A new object's counter starts at the clock in microseconds, so tokens keep rising
            // when an object is deleted and created again.
            fence: u64::try_from(unix_micros(wall)).unwrap_or(0).saturating_add(1),
        };
        let won = {
            let mut guard = ForgetOnDrop { store: self, key: &key, armed: true };
            let won = self.take(req, &key, &mine).await?;
            guard.armed = false;
            won
        };
        let Some((etag, state)) = won else { return Ok(None) };
        self.remember(&key, etag.clone(), state.clone());
        let fence = state.fence;
        Ok(Some(Granted::new(Held { key, etag, state }).with_fencing_token(fence)))
    }

    async fn release(&self, req: &Request<'_>, held: &mut Held) -> Result<()> {
        // Held at least until lockedAt + lock_at_least_for (at-least <= at-most, so never past
        // the current lease); after that, released. Owner-checked by If-Match either way.
        let keep = held.state.at.saturating_add(duration_millis_ceil(req.lock_at_least_for()));
        let now = unix_millis(now(req));
        let next = State {
            until: (keep > now).then(|| keep.min(held.state.until.unwrap_or(keep))),
            ..held.state.clone()
        };
        if !self.write(req, held, next).await? {
            tracing::debug!(key = %held.key, "unlock: no longer the holder; nothing changed");
        }
        Ok(())
    }

    async fn extend(&self, req: &Request<'_>, held: &mut Held) -> Result<Extension> {
        let now = unix_millis(now(req));
        // An expired lock is not revived, by the same clock that judges expiry.
        if held.state.until.is_none_or(|u| u <= now) {
            return Ok(Extension::Lost);
        }
        let next = State {
            until: Some(now.saturating_add(duration_millis_ceil(req.lock_at_most_for()))),
            at: now,
            ..held.state.clone()
        };
        Ok(if self.write(req, held, next).await? { Extension::Extended } else { Extension::Lost })
    }
}

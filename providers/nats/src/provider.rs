//! [`NatsLockProvider`], the public type, and its [`LockProvider`] implementation: each call
//! checked, bounded by its time limit and handed to [`Inner`].

use std::{fmt, sync::Arc, time::Duration};

use shedlock::{
    Capabilities, ForceRelease, Lock, LockConfig, LockInfo, LockPage, LockProvider, Result,
    inspect::page_limit,
    store::{Operation, log_forced_release},
    support::check_lock_name,
};

use crate::{BACKEND, MAX_NAME_LEN, inner::Inner, request::run};

/// A [`LockProvider`] on a NATS JetStream key-value bucket. Cheap to clone; clones share the
/// client.
#[derive(Clone)]
pub struct NatsLockProvider {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for NatsLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No client, no server URL: URLs may carry user:password or a token.
        f.debug_struct("NatsLockProvider")
            .field("bucket", &self.inner.bucket)
            .field("stream", &self.inner.stream)
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}
#[async_trait::async_trait]
impl LockProvider for NatsLockProvider {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        self.inner.try_lock(config).await
    }

    /// Each name's `try_lock`, pipelined: up to
    /// [`PIPELINED_REQUESTS`](shedlock::batch::PIPELINED_REQUESTS) in flight at once on
    /// the client's one connection ([`try_lock_pipelined`](shedlock::batch::try_lock_pipelined)).
    async fn try_lock_many(
        &self,
        configs: &[LockConfig],
        options: shedlock::BatchOptions,
    ) -> Result<shedlock::BatchOutcome> {
        shedlock::batch::try_lock_pipelined(self, configs, options).await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(true)
            .with_server_time(self.inner.settings.time_source().is_server())
            .with_owner_checked(true)
            // Nats-TTL takes whole seconds (the server truncates fractions; the minimum is 1 s),
            // and the server's expiry timer adds up to about a quarter second.
            .with_granularity(if self.inner.settings.time_source().is_server() {
                Duration::from_secs(1)
            } else {
                Duration::from_millis(1)
            })
            .with_max_name_len(Some(MAX_NAME_LEN))
            .with_check(true)
            .with_inspect(true)
            .with_list(true)
            .with_force_release(true)
    }

    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    /// [`check_bucket`](NatsLockProvider::check_bucket).
    async fn check(&self) -> Result<()> {
        run(Operation::Check, "", self.inner.settings.timeout(), self.inner.check_bucket("check"))
            .await
    }

    /// One direct get of the key's last message. A lock message is held while it is stored (the
    /// server removes it at its TTL) in server time, while its stored `lock_until` is ahead of
    /// this instance's clock in client time; a tombstone is no record. The acquisition is the
    /// fencing token (the acquiring message's stream sequence, kept in every later message).
    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>> {
        check_lock_name(BACKEND, name, Some(MAX_NAME_LEN), false)?;
        let inner = &self.inner;
        let read = async {
            let last = inner.read("inspect", name, &inner.subject(name)).await?;
            Ok(last.map(|(_, info)| info))
        };
        run(Operation::Inspect, name, inner.settings.timeout(), read).await
    }

    /// The bucket's keys are not ordered by the server: an ephemeral consumer delivers the last
    /// message of every key once, and the page keeps the `limit` smallest names after the
    /// cursor that start with `prefix` (memory: one page). Each page reads every key of the
    /// bucket; the cursor is the last name of the page.
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<LockPage> {
        if !prefix.is_empty() {
            check_lock_name(BACKEND, prefix, Some(MAX_NAME_LEN), false)?;
        }
        let inner = &self.inner;
        let list = inner.list(prefix, cursor, page_limit(limit));
        run(Operation::List, prefix, inner.settings.timeout(), list).await
    }

    /// A direct get, then a purge of the key up to the message read if it is still the
    /// acquisition seen: the purge removes nothing once a newer message replaced it, so a lock
    /// released and taken again is never touched. When the holder's extension replaced the
    /// message in between, it reads again (up to 5 times).
    async fn force_release(&self, seen: &LockInfo) -> Result<ForceRelease> {
        let name = seen.name.as_str();
        check_lock_name(BACKEND, name, Some(MAX_NAME_LEN), false)?;
        let inner = &self.inner;
        let release = inner.force_release(seen);
        let released =
            run(Operation::ForceRelease, name, inner.settings.timeout(), release).await?;
        log_forced_release(BACKEND, seen, &released);
        Ok(released)
    }
}
impl NatsLockProvider {
    /// The bucket name.
    pub fn bucket(&self) -> &str {
        &self.inner.bucket
    }

    /// The JetStream stream behind the bucket, `KV_<bucket>`.
    pub fn stream(&self) -> &str {
        &self.inner.stream
    }

    /// The subject a lock name maps to: `$KV.<bucket>.<key_for(name)>`.
    pub fn subject_for(&self, name: &str) -> String {
        self.inner.subject(name)
    }
}

//! [`RedisLockProviderBuilder`]: the key layout, the modes and the checks run by `build`.

use std::{fmt, time::Duration};

use shedlock::{
    Error, LockProvider, ProviderBuilder, Result,
    store::{ProviderSettings, StoreProvider},
};

use crate::{
    BACKEND, DEFAULT_PREFIX, RedisConnection, RedisLockProvider, SHEDLOCK_ENVIRONMENT,
    SHEDLOCK_PREFIX, scripts::Scripts, store::RedisStore,
};

/// Builds a [`RedisLockProvider`]; see [`RedisLockProvider::builder`].
///
/// The shared setters (`operation_timeout`, `locked_by`) come from [`ProviderBuilder`], in scope
/// with `use shedlock_redis::ProviderBuilder;`. Here `locked_by` is stored for people reading the
/// key; ownership rests on a random per-acquisition id.
#[must_use]
pub struct RedisLockProviderBuilder<C> {
    conn: C,
    prefix: Option<String>,
    environment: Option<String>,
    settings: ProviderSettings,
    compat: bool,
    wait: Option<(u32, Duration)>,
}

impl<C> fmt::Debug for RedisLockProviderBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLockProviderBuilder")
            .field("prefix", &self.prefix)
            .field("environment", &self.environment)
            .field("settings", &self.settings)
            .field("shedlock_compatible", &self.compat)
            .field("wait_for_replicas", &self.wait)
            .finish_non_exhaustive()
    }
}

/// A key segment (prefix or environment) must keep the name's braces the key's hash tag.
fn check_segment(what: &str, s: &str) -> Result<()> {
    if let Some(c) = s.chars().find(|c| matches!(c, '{' | '}') || c.is_control()) {
        return Err(Error::setup(
            BACKEND,
            format!(
                "the {what} {s:?} contains {c:?}: braces and control characters are not allowed \
             (the braces around the lock name are its Redis Cluster hash tag)"
            ),
        ));
    }
    Ok(())
}

impl<C> ProviderBuilder for RedisLockProviderBuilder<C> {
    fn settings_mut(&mut self) -> &mut ProviderSettings {
        &mut self.settings
    }
}

impl<C: RedisConnection> RedisLockProviderBuilder<C> {
    /// The key prefix (default [`DEFAULT_PREFIX`], `shedlock:`). No braces or control
    /// characters. In the [ShedLock-compatible mode](Self::shedlock_compatible) this is
    /// ShedLock's `keyPrefix` (default [`SHEDLOCK_PREFIX`], `job-lock`), and any text.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// An environment segment after the prefix (`shedlock:<environment>:{name}`), so that
    /// several environments can share one Redis. Non-empty; no braces or control characters.
    /// In the [ShedLock-compatible mode](Self::shedlock_compatible) this is ShedLock's
    /// environment (default [`SHEDLOCK_ENVIRONMENT`], `default`), and any text.
    pub fn environment(mut self, environment: impl Into<String>) -> Self {
        self.environment = Some(environment.into());
        self
    }

    /// ShedLock-compatible mode: the keys and values of ShedLock's Redis providers
    /// (`RedisLockProvider` for Spring, `JedisLockProvider`, `LettuceLockProvider`), so that this
    /// provider and Java ShedLock nodes lock the same jobs on the same Redis. See the README's
    /// "Joining a ShedLock fleet".
    ///
    /// - A lock named `N` is the key `<key_prefix>:<environment>:N`, by default
    ///   `job-lock:default:N`: the name as it is, without the native mode's escaping and hash
    ///   tag. No second key (so no fencing: [`Lock::fencing_token`](shedlock::Lock::fencing_token) is `None`).
    /// - The value is ShedLock's (since 6.7): `ADDED:<time>@<locked_by>:<uuid>`, the time in
    ///   ShedLock's ISO form from this instance's clock (informational, as in ShedLock), the
    ///   UUID random per acquisition. Unlock and extend compare the whole value, as ShedLock's
    ///   `safeUpdate` mode does; expiry is the server's `PX`.
    /// - `lock_at_least_for` is judged by the server too: unlock keeps the key for what is left
    ///   of it since the holder's last write, as the key's own TTL measures it.
    pub fn shedlock_compatible(mut self) -> Self {
        self.compat = true;
        self
    }

    /// Counts an acquisition only once `replicas` replicas acknowledged it (Redis `WAIT`),
    /// waiting at most `timeout` (at least 1 ms) for them. Replication is asynchronous: a lock
    /// granted by a master that fails before the grant reaches a replica is lost on fail-over,
    /// and the promoted replica grants it again. With this setting `try_lock` sends `WAIT
    /// replicas timeout` after a successful acquire (one more round trip), and when fewer
    /// replicas acknowledged it in time it releases the lock (owner-checked) and answers
    /// [`Error::Unavailable`], saying how many did. Off by default.
    ///
    /// What remains: `WAIT` makes the grant durable on `replicas` replicas, not a consensus.
    /// A fail-over that promotes a replica which had not acknowledged it can still lose it
    /// (pick `replicas` = all replicas of a master to close that), and a master cut off from
    /// the majority keeps accepting writes for up to `cluster-node-timeout` unless the server
    /// runs with `min-replicas-to-write` (see the README). On Redis Cluster the client routes
    /// `WAIT` to every master and answers the smallest count, so every master must have
    /// `replicas` replicas connected.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait = Some((replicas, timeout.max(Duration::from_millis(1))));
        self
    }

    /// Checks the settings, loads the scripts into the server (every master on a cluster) and
    /// runs one of them, so that a server without Lua, or a user whom an ACL denies `EVALSHA`,
    /// `SCRIPT LOAD`, `GET` or the key pattern, is an [`Error::Setup`] now instead of at the
    /// first lock. The README's "Permissions" gives the ACL rules each call needs; a call
    /// denied a command it alone runs is an [`Error::Setup`] naming it.
    pub async fn build(self) -> Result<RedisLockProvider<C>> {
        let prefix = if self.compat {
            // ShedLock's `String.format("%s:%s:%s", keyPrefix, env, lockName)`.
            let prefix = self.prefix.unwrap_or_else(|| SHEDLOCK_PREFIX.to_owned());
            let env = self.environment.unwrap_or_else(|| SHEDLOCK_ENVIRONMENT.to_owned());
            format!("{prefix}:{env}:")
        } else {
            let mut prefix = self.prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
            check_segment("key prefix", &prefix)?;
            if let Some(env) = self.environment {
                if env.is_empty() {
                    return Err(Error::setup(BACKEND, "the environment is empty"));
                }
                check_segment("environment", &env)?;
                prefix.push_str(&env);
                prefix.push(':');
            }
            prefix
        };
        // ShedLock's value carries its own UUID, so `locked_by` needs no room for a suffix: the
        // settings' compatible mode (a `locked_by` unique to each acquisition) stays off.
        let settings = self.settings.validate(BACKEND)?;
        let store = RedisStore {
            conn: self.conn,
            prefix,
            scripts: Scripts::new(self.compat),
            compat: self.compat,
            wait: self.wait,
            slot_grouped: std::sync::atomic::AtomicBool::new(false),
        };
        let provider = RedisLockProvider { inner: StoreProvider::new(store, settings) };
        // Loads the scripts and proves the connection answers (LeaseStore::check).
        provider.inner.check().await?;
        Ok(provider)
    }
}
impl RedisLockProvider<redis::aio::ConnectionManager> {
    /// A builder over `conn`; see [`RedisLockProviderBuilder`].
    pub fn builder<C: RedisConnection>(conn: C) -> RedisLockProviderBuilder<C> {
        RedisLockProviderBuilder {
            conn,
            prefix: None,
            environment: None,
            settings: ProviderSettings::new(),
            compat: false,
            wait: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use shedlock::Error;

    use super::*;

    #[test]
    fn segments_with_braces_or_control_characters_are_rejected() {
        assert!(check_segment("key prefix", "app:").is_ok());
        for bad in ["a{", "}b", "x\ny"] {
            assert!(
                matches!(check_segment("key prefix", bad), Err(Error::Setup { .. })),
                "{bad:?}"
            );
        }
    }
}

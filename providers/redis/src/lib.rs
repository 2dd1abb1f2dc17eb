//! Redis lock provider for [`shedlock`], on the caller's own `redis` connection: a
//! [`ConnectionManager`](redis::aio::ConnectionManager) (recommended: it reconnects), a
//! [`MultiplexedConnection`](redis::aio::MultiplexedConnection), or a Redis Cluster connection
//! (feature `cluster`, on by default). Works unchanged on Redis ≥ 6.2, Valkey and Redis Cluster.
//!
//! - **One round trip per acquire**: one Lua script (`EVALSHA`) checks the key, reads the server
//!   clock (`TIME`), issues the fencing token and sets the key with a relative expiry (`PX`).
//! - **Server time**: the key expires by the server's own clock, relative to when the server ran
//!   the script, so client clock skew cannot break exclusion. `lock_at_least_for` is counted from
//!   the server time stored at acquisition (or at the last extension).
//! - **Owner-checked** unlock and extend: compare-and-`DEL` / compare-and-`PEXPIRE` in Lua
//!   against a value unique to the acquisition, so a stale holder changes nothing.
//! - **Fencing tokens**: `max(previous + 1, server time in µs)`, kept under a second key in the
//!   same hash slot, so tokens keep increasing across unlocks, expiries, deletion of the lock key
//!   and — through the clock term — restarts that lost the data.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_redis::RedisLockProvider;
//!
//! let client = redis::Client::open("redis://127.0.0.1:6379")?;
//! let conn = redis::aio::ConnectionManager::new(client).await?;
//! let provider = RedisLockProvider::builder(conn).environment("prod").build().await?;
//!
//! let cfg = LockConfig::new("nightly-report", Duration::from_secs(600), Duration::from_secs(30))?;
//! if let Some(lock) = provider.try_lock(&cfg).await? {
//!     // ... run the task ...
//!     lock.unlock().await?;
//! }
//! # Ok(()) }
//! ```
//!
//! # Keys
//!
//! A lock named `N` lives under `<prefix>[<environment>:]{N'}`, where `N'` is `N` with `%`, `{`
//! and `}` percent-encoded (`%25`, `%7B`, `%7D`), so every name maps to its own key and the braces
//! are always the key's hash tag. Its fencing counter is the same key plus `:fence`: both share a
//! hash slot, which is what lets one script touch both on Redis Cluster. The default prefix is
//! `shedlock:`. The value is `<acquisition id>|<locked_by>|<token>|<server µs>`.
//!
//! # Redis Cluster and replication
//!
//! Writes are acknowledged by the master before they reach its replicas. If a master fails
//! after granting a lock and before replicating it, the promoted replica does not know the lock
//! and may grant it again: a lock can be lost on fail-over (see the README for what was measured).
//! Fencing tokens are not safe across such a fail-over either, unless `WAIT` is used; the clock
//! term keeps them increasing as long as the new master's clock is not behind.

use std::{fmt, time::Duration};

use async_trait::async_trait;
use redis::{ErrorKind, FromRedisValue, RedisError, Script, ServerErrorKind, aio::ConnectionLike};
use shedlock::{
    Capabilities, Error, LockProvider, Result,
    store::{
        DelegatingProvider, Extension, Granted, LeaseStore, ProviderSettings, Request, Settings,
        StoreProvider,
    },
    support::{acquisition_id, duration_micros, duration_millis_ceil, iso8601_millis},
};

const BACKEND: &str = "redis";

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "shedlock:";

/// The builder setters every provider shares (`operation_timeout`, `locked_by`).
pub use shedlock::ProviderBuilder;
/// The default time limit of one operation (acquire, unlock, extend): 10 s, as for every
/// provider.
pub use shedlock::store::DEFAULT_OPERATION_TIMEOUT;

/// The largest lock name accepted, in bytes (names are keys; Redis allows far more, but a name
/// this long is a bug, not a job).
pub const MAX_NAME_LEN: usize = 4096;

/// Acquire. KEYS: lock, fence. ARGV: owner (`<acquisition id>|<locked_by>`), PX in ms.
/// Returns `{token, locked_at_µs}` when the caller holds the lock (also when this very
/// acquisition is retried after its answer was lost), `false` (nil) when someone else does.
const ACQUIRE: &str = r"
local v = redis.call('GET', KEYS[1])
if v then
  local n = string.len(ARGV[1])
  if string.sub(v, 1, n + 1) == ARGV[1] .. '|' then
    local tok, at = string.match(string.sub(v, n + 2), '^(%d+)|(%d+)$')
    if tok then return {tok, at} end
  end
  return false
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local tok = string.format('%.0f', math.max(last + 1, now))
local at = string.format('%.0f', now)
redis.call('SET', KEYS[2], tok)
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. tok .. '|' .. at, 'PX', ARGV[2])
return {tok, at}
";

/// Unlock. KEYS: lock. ARGV: the holder's value, lock_at_least_for in µs. Returns 1 when the
/// caller held it (deleted, or kept until at-least has passed), 0 otherwise.
const UNLOCK: &str = r"
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local at = tonumber(string.match(v, '|(%d+)$'))
local keep = at + tonumber(ARGV[2]) - now
if keep > 0 then
  local ms = math.ceil(keep / 1000)
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 or ms < pttl then redis.call('PEXPIRE', KEYS[1], ms) end
  return 1
end
redis.call('DEL', KEYS[1])
return 1
";

/// Extend. KEYS: lock. ARGV: the holder's value, new PX in ms. Returns the new server time in
/// µs (the value's last field, from which at-least now counts), or nil when the caller no longer
/// holds the lock.
const EXTEND: &str = r"
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then return false end
local t = redis.call('TIME')
local at = string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
local head = string.match(v, '^(.*|)%d+$')
redis.call('SET', KEYS[1], head .. at, 'PX', ARGV[2])
return at
";

/// ShedLock-compatible acquire. KEYS: lock. ARGV: the acquisition's value, PX in ms. ShedLock's
/// `SET NX PX`, and 1 also when the key already holds this very acquisition's value (a retry
/// after a lost answer); 0 when someone else holds it.
const ACQUIRE_COMPAT: &str = r"
local v = redis.call('GET', KEYS[1])
if v then
  if v == ARGV[1] then return 1 end
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
";

/// ShedLock-compatible unlock. KEYS: lock. ARGV: the holder's value, lock_at_least_for in ms,
/// the PX of the holder's last write (acquire or extend) in ms. The time since that write is
/// what the server's own expiry says has passed (PX - PTTL), so at-least is judged by the
/// server's clock without a timestamp in the value. Returns 1 when the caller held it, else 0.
const UNLOCK_COMPAT: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local pttl = redis.call('PTTL', KEYS[1])
local keep = tonumber(ARGV[2])
if pttl >= 0 then keep = keep - (tonumber(ARGV[3]) - pttl) end
if keep > 0 then
  if pttl < 0 or keep < pttl then redis.call('PEXPIRE', KEYS[1], keep) end
  return 1
end
redis.call('DEL', KEYS[1])
return 1
";

/// ShedLock-compatible extend: ShedLock's own `safeUpdate` script. KEYS: lock. ARGV: the
/// holder's value, new PX in ms. Returns 1 when extended, 0 when no longer held.
const EXTEND_COMPAT: &str = r"
if redis.call('get', KEYS[1]) == ARGV[1] then
   return redis.call('pexpire', KEYS[1], ARGV[2])
else
   return 0
end
";

/// ShedLock's default key prefix (`job-lock:<environment>:<name>`).
pub const SHEDLOCK_PREFIX: &str = "job-lock";

/// ShedLock's default environment.
pub const SHEDLOCK_ENVIRONMENT: &str = "default";

/// One Lua script and its SHA1.
struct Lua {
    source: &'static str,
    script: Script,
}

impl Lua {
    fn new(source: &'static str) -> Self {
        Self { source, script: Script::new(source) }
    }

    /// `EVALSHA`, and on `NOSCRIPT` (a node that restarted, or a replica promoted since the
    /// scripts were loaded) `EVAL` with the source, which also caches it there: one extra round
    /// trip on that node, once. Routed by the first key on a cluster.
    async fn run<T: FromRedisValue, C: ConnectionLike>(
        &self,
        conn: &mut C,
        keys: &[&str],
        args: &[&str],
    ) -> redis::RedisResult<T> {
        let call = |command: &str, script: &str| {
            let mut cmd = redis::cmd(command);
            cmd.arg(script).arg(keys.len()).arg(keys).arg(args);
            cmd
        };
        match call("EVALSHA", self.script.get_hash()).query_async(conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                call("EVAL", self.source).query_async(conn).await
            }
            other => other,
        }
    }
}

/// The three scripts of the mode, hashed once.
struct Scripts {
    acquire: Lua,
    unlock: Lua,
    extend: Lua,
}

impl Scripts {
    fn new(compat: bool) -> Self {
        if compat {
            Self {
                acquire: Lua::new(ACQUIRE_COMPAT),
                unlock: Lua::new(UNLOCK_COMPAT),
                extend: Lua::new(EXTEND_COMPAT),
            }
        } else {
            Self { acquire: Lua::new(ACQUIRE), unlock: Lua::new(UNLOCK), extend: Lua::new(EXTEND) }
        }
    }
}

/// A `redis` connection this provider can use: any async connection that can be cloned cheaply
/// and shared between tasks, such as [`ConnectionManager`](redis::aio::ConnectionManager),
/// [`MultiplexedConnection`](redis::aio::MultiplexedConnection) or (feature `cluster`)
/// `redis::cluster_async::ClusterConnection`.
pub trait RedisConnection: ConnectionLike + Clone + Send + Sync + 'static {}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> RedisConnection for C {}

/// The lock keys on one Redis (or cluster): the [`LeaseStore`] of [`RedisLockProvider`].
struct RedisStore<C> {
    conn: C,
    prefix: String,
    scripts: Scripts,
    /// ShedLock's key layout and value format, no fencing.
    compat: bool,
}

/// Locks in Redis, Valkey or Redis Cluster. Cheap to clone; clones share the connection.
pub struct RedisLockProvider<C = redis::aio::ConnectionManager> {
    inner: StoreProvider<RedisStore<C>>,
}

impl<C> Clone for RedisLockProvider<C> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone() }
    }
}

impl<C> fmt::Debug for RedisLockProvider<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The connection (which may carry credentials) is deliberately left out.
        let store = self.inner.store();
        f.debug_struct("RedisLockProvider")
            .field("prefix", &store.prefix)
            .field("shedlock_compatible", &store.compat)
            .field("settings", self.inner.settings())
            .finish_non_exhaustive()
    }
}

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
}

impl<C> fmt::Debug for RedisLockProviderBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLockProviderBuilder")
            .field("prefix", &self.prefix)
            .field("environment", &self.environment)
            .field("settings", &self.settings)
            .field("shedlock_compatible", &self.compat)
            .finish_non_exhaustive()
    }
}

fn setup(message: impl Into<String>) -> Error {
    Error::Setup { backend: BACKEND, message: message.into() }
}

/// A key segment (prefix or environment) must keep the name's braces the key's hash tag.
fn check_segment(what: &str, s: &str) -> Result<()> {
    if let Some(c) = s.chars().find(|c| matches!(c, '{' | '}') || c.is_control()) {
        return Err(setup(format!(
            "the {what} {s:?} contains {c:?}: braces and control characters are not allowed \
             (the braces around the lock name are its Redis Cluster hash tag)"
        )));
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

    /// Checks the settings, loads the scripts into the server (every master on a cluster) and
    /// runs one of them, so that a server without Lua, or a user whom an ACL denies `EVALSHA`
    /// or the key pattern, is an [`Error::Setup`] now instead of at the first lock.
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
                    return Err(setup("the environment is empty"));
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
        };
        let provider = RedisLockProvider { inner: StoreProvider::new(store, settings) };
        // Loads the scripts and proves the connection answers (LeaseStore::check).
        provider.inner.check().await?;
        Ok(provider)
    }
}

/// What a Redis error means for the caller: a connection or fail-over problem is
/// [`Error::Unavailable`] (try again later), a missing permission or Lua is [`Error::Setup`].
fn map_err(e: RedisError) -> Error {
    let text = e.to_string();
    let unavailable = e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::BusyLoading
                    | ServerErrorKind::ReadOnly
            )
        );
    if unavailable {
        return Error::Unavailable { backend: BACKEND, source: Box::new(e) };
    }
    if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) {
        return setup(format!(
            "the connection's user may not run the provider's Lua scripts (EVALSHA, EVAL, SCRIPT \
             LOAD) on its keys: grant them in the ACL ({text})"
        ));
    }
    if text.contains("unknown command") || text.contains("scripting is disabled") {
        return setup(format!(
            "this server does not run Lua scripts (EVALSHA), which the provider needs ({text})"
        ));
    }
    Error::Backend { backend: BACKEND, source: Box::new(e) }
}

fn bad_reply(what: &str, detail: impl fmt::Debug) -> Error {
    Error::Backend {
        backend: BACKEND,
        source: format!("unexpected reply to {what}: {detail:?}").into(),
    }
}

fn parse_u64(what: &str, s: &str) -> Result<u64> {
    s.parse().map_err(|_| bad_reply(what, s))
}

/// `%`, `{` and `}` percent-encoded: injective, and leaves no brace in the name.
fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
    out
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
        }
    }
}

impl<C: RedisConnection> RedisLockProvider<C> {
    /// The key that holds lock `name`.
    pub fn key(&self, name: &str) -> String {
        self.inner.store().key(name)
    }

    /// Whether this provider runs in the [ShedLock-compatible mode](RedisLockProviderBuilder::shedlock_compatible).
    pub fn is_shedlock_compatible(&self) -> bool {
        self.inner.store().compat
    }

    /// The key that holds the fencing counter of lock `name` (same hash slot as [`key`](Self::key);
    /// not used in the ShedLock-compatible mode).
    pub fn fence_key(&self, name: &str) -> String {
        self.inner.store().fence_key(name)
    }

    /// The `locked_by` this provider writes.
    pub fn locked_by(&self) -> &str {
        self.inner.settings().locked_by()
    }

    /// A clone of the connection, for reading the keys (e.g. in tests or tools).
    pub fn connection(&self) -> C {
        self.inner.store().conn.clone()
    }
}

impl<C: RedisConnection> RedisStore<C> {
    fn key(&self, name: &str) -> String {
        if self.compat {
            format!("{}{name}", self.prefix)
        } else {
            format!("{}{{{}}}", self.prefix, escape(name))
        }
    }

    fn fence_key(&self, name: &str) -> String {
        format!("{}:fence", self.key(name))
    }

    /// The native acquire: `Some((token, locked_at_µs))` when `owner` now holds the key.
    async fn take(&self, req: &Request<'_>, owner: &str) -> Result<Option<(u64, u64)>> {
        let key = self.key(req.name());
        let fence = self.fence_key(req.name());
        let px = duration_millis_ceil(req.lock_at_most_for()).max(1).to_string();
        // The script is idempotent for one acquisition (a retry finds its own value), so a
        // request whose answer was lost with the connection can be sent once more.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut conn = self.conn.clone();
            let r: RedisResult =
                self.scripts.acquire.run(&mut conn, &[&key, &fence], &[owner, &px]).await;
            match r {
                Ok(None) => return Ok(None),
                Ok(Some((tok, at))) => {
                    return Ok(Some((parse_u64("acquire", &tok)?, parse_u64("acquire", &at)?)));
                }
                Err(e) if attempt < 2 && (e.is_connection_dropped() || e.is_io_error()) => {
                    tracing::debug!(lock = %req.name(), error = %e, "redis acquire: connection lost, retrying once");
                }
                Err(e) => return Err(map_err(e)),
            }
        }
    }

    /// The ShedLock-compatible acquire: true iff `value` is now the key's.
    async fn take_compat(&self, req: &Request<'_>, value: &str) -> Result<bool> {
        let key = self.key(req.name());
        let px = duration_millis_ceil(req.lock_at_most_for()).max(1).to_string();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut conn = self.conn.clone();
            let r: redis::RedisResult<i64> =
                self.scripts.acquire.run(&mut conn, &[&key], &[value, &px]).await;
            match r {
                Ok(won) => return Ok(won == 1),
                // Idempotent like the native script: a retry finds its own value.
                Err(e) if attempt < 2 && (e.is_connection_dropped() || e.is_io_error()) => {
                    tracing::debug!(lock = %req.name(), error = %e, "redis acquire: connection lost, retrying once");
                }
                Err(e) => return Err(map_err(e)),
            }
        }
    }
}

/// ShedLock's value (since 6.7): `ADDED:<ISO time>@<locked_by>:<UUID>`, the UUID random (v4
/// layout) and unique to the acquisition.
fn shedlock_value(locked_by: &str) -> String {
    let (a, b) = (acquisition_id(), acquisition_id());
    let a = (a & !0xF000) | 0x4000; // version 4
    let b = (b & !(0b11 << 62)) | (0b10 << 62); // RFC 4122 variant
    format!(
        "ADDED:{}@{locked_by}:{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        iso8601_millis(std::time::SystemTime::now()),
        a >> 32,
        (a >> 16) & 0xFFFF,
        a & 0xFFFF,
        b >> 48,
        b & 0xFFFF_FFFF_FFFF
    )
}

/// A held lock: its key, the value this acquisition wrote (the owner check) and, in the
/// compatible mode, the PX it last set (at-least is judged by the key's own TTL).
struct Held {
    key: String,
    value: String,
    px: i64,
}

#[async_trait]
impl<C: RedisConnection> LeaseStore for RedisStore<C> {
    type Held = Held;

    fn capabilities(&self, _: &Settings) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(!self.compat)
            .with_server_time(true)
            .with_owner_checked(true)
            .with_granularity(Duration::from_millis(1))
            .with_max_name_len(Some(MAX_NAME_LEN))
            .with_check(true)
    }

    /// Loads the three scripts (so a server that refuses scripts fails here), then runs the
    /// unlock script on a key no one holds: 0, and nothing written.
    async fn check(&self, _: &Settings) -> Result<()> {
        let mut conn = self.conn.clone();
        let s = &self.scripts;
        for lua in [&s.acquire, &s.unlock, &s.extend] {
            lua.script.load_async(&mut conn).await.map_err(map_err)?;
        }
        let probe = self.key("shedlock-setup-probe");
        let r: i64 =
            s.unlock.run(&mut conn, &[&probe], &["no one", "0", "0"]).await.map_err(map_err)?;
        if r != 0 {
            return Err(bad_reply("the setup probe", r));
        }
        Ok(())
    }

    async fn acquire(&self, req: &Request<'_>) -> Result<Option<Granted<Held>>> {
        let key = self.key(req.name());
        if self.compat {
            let value = shedlock_value(req.owner().locked_by());
            if !self.take_compat(req, &value).await? {
                return Ok(None);
            }
            let px = duration_millis_ceil(req.lock_at_most_for()).max(1);
            return Ok(Some(Granted::new(Held { key, value, px })));
        }
        let owner = format!("{}|{}", req.owner().hex(), req.owner().locked_by());
        let Some((token, at)) = self.take(req, &owner).await? else {
            return Ok(None);
        };
        let held = Held { key, value: format!("{owner}|{token}|{at}"), px: 0 };
        Ok(Some(Granted::new(held).with_fencing_token(token)))
    }

    async fn release(&self, req: &Request<'_>, held: &mut Held) -> Result<()> {
        let at_least = if self.compat {
            duration_millis_ceil(req.lock_at_least_for()).to_string()
        } else {
            duration_micros(req.lock_at_least_for()).to_string()
        };
        let px = held.px.to_string();
        let mut conn = self.conn.clone();
        let args: &[&str] =
            if self.compat { &[&held.value, &at_least, &px] } else { &[&held.value, &at_least] };
        let r: i64 =
            self.scripts.unlock.run(&mut conn, &[&held.key], args).await.map_err(map_err)?;
        if r == 0 {
            tracing::debug!(lock = %req.name(), "redis unlock: no longer the holder; nothing changed");
        }
        Ok(())
    }

    async fn extend(&self, req: &Request<'_>, held: &mut Held) -> Result<Extension> {
        let px_ms = duration_millis_ceil(req.lock_at_most_for()).max(1);
        let px = px_ms.to_string();
        let mut conn = self.conn.clone();
        if self.compat {
            let r: i64 = self
                .scripts
                .extend
                .run(&mut conn, &[&held.key], &[&held.value, &px])
                .await
                .map_err(map_err)?;
            if r != 1 {
                return Ok(Extension::Lost);
            }
            held.px = px_ms;
            return Ok(Extension::Extended);
        }
        let r: Option<String> = self
            .scripts
            .extend
            .run(&mut conn, &[&held.key], &[&held.value, &px])
            .await
            .map_err(map_err)?;
        let Some(at) = r else { return Ok(Extension::Lost) };
        parse_u64("extend", &at)?;
        let head = held.value.rsplit_once('|').map_or("", |(h, _)| h);
        held.value = format!("{head}|{at}");
        Ok(Extension::Extended)
    }
}

type RedisResult = redis::RedisResult<Option<(String, String)>>;

impl<C: RedisConnection> DelegatingProvider for RedisLockProvider<C> {
    fn delegate(&self) -> &dyn LockProvider {
        &self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_is_injective_and_leaves_no_braces() {
        let names = ["a", "{a}", "%7Ba%7D", "a%", "}", "{", "%", "%25", "a}b{c"];
        let escaped: Vec<String> = names.iter().map(|n| escape(n)).collect();
        for (i, e) in escaped.iter().enumerate() {
            assert!(!e.contains('{') && !e.contains('}'), "{e}");
            for (j, f) in escaped.iter().enumerate() {
                assert_eq!(i == j, e == f, "{} and {} collide", names[i], names[j]);
            }
        }
        assert_eq!(escape("{a}%"), "%7Ba%7D%25");
    }

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

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

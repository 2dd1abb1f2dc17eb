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
//! # Permissions
//!
//! The README's "Permissions" lists every command the provider sends and the exact ACL rules
//! (`ACL SETUSER … ~<prefix>* -@all +evalsha …`) for locking, `list`, `wait_for_replicas` and
//! Redis Cluster. A denied command or key, or a refused login, is an [`Error::Setup`] naming
//! what to grant.
//!
//! # Redis Cluster and replication
//!
//! Writes are acknowledged by the master before they reach its replicas. If a master fails
//! after granting a lock and before replicating it, the promoted replica does not know the lock
//! and may grant it again: a lock can be lost on fail-over (see the README for what was measured).
//! Fencing tokens are not safe across such a fail-over either, unless `WAIT` is used; the clock
//! term keeps them increasing as long as the new master's clock is not behind.

mod error;

use std::{
    fmt,
    time::{Duration, SystemTime},
};

use async_trait::async_trait;
use redis::{
    ErrorKind, FromRedisValue, RedisError, Script, ServerErrorKind, Value, aio::ConnectionLike,
};
use shedlock::{
    Capabilities, Error, LockProvider, Result, TimeSource,
    inspect::{ForceRelease, LockInfo, LockPage},
    store::{
        DelegatingProvider, Extension, Granted, LeaseStore, ProviderSettings, Request, Settings,
        StoreProvider,
    },
    support::{
        acquisition_id, duration_micros, duration_millis_ceil, from_unix_micros, iso8601_millis,
    },
};

use crate::error::{Sent, bad_reply, map_err, setup};

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
/// Returns `{token, locked_at_µs, owner}` when the caller holds the lock (also when this very
/// acquisition is retried after its answer was lost), `false` (nil) when someone else does.
/// The owner is echoed so that the client can tell the answer is to *this* request: a reply
/// delivered to the wrong request (a connection that lost its place in a fail-over) must never
/// read as a grant.
///
/// The token is the server clock in µs (`TIME`, as digits: no number formatting), written to the
/// fence key with `SET … GET`, which returns the last token in the same call; only when that is
/// not below the clock (two grants within one µs, or a clock stepped back) is the token the last
/// one plus 1, in a second write. Digit strings of equal length compare as their numbers.
const ACQUIRE: &str = r"
local v = redis.call('GET', KEYS[1])
if v then
  local n = string.len(ARGV[1])
  if string.sub(v, 1, n + 1) == ARGV[1] .. '|' then
    local tok, at = string.match(string.sub(v, n + 2), '^(%d+)|(%d+)$')
    if tok then return {tok, at, ARGV[1]} end
  end
  return false
end
local t = redis.call('TIME')
local at = t[1] .. string.sub('00000' .. t[2], -6)
local tok = at
local last = redis.call('SET', KEYS[2], at, 'GET')
if last and (#last > #at or (#last == #at and last >= at)) then
  local n = tonumber(last)
  if n then
    tok = string.format('%.0f', math.max(n + 1, tonumber(at)))
    redis.call('SET', KEYS[2], tok)
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. tok .. '|' .. at, 'PX', ARGV[2])
return {tok, at, ARGV[1]}
";

/// Unlock. KEYS: lock. ARGV: the holder's value, lock_at_least_for in µs. Returns 1 when the
/// caller held it (deleted, or kept until at-least has passed), 0 otherwise. Without
/// at-least (`0`) the server clock is not read.
const UNLOCK: &str = r"
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then return 0 end
if ARGV[2] ~= '0' then
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
end
redis.call('DEL', KEYS[1])
return 1
";

/// Extend. KEYS: lock. ARGV: the holder's value, new PX in ms. Returns `{µs, value}`: the new
/// server time in µs (the value's last field, from which at-least now counts) and the holder's
/// value it was given (echoed, as by the acquire), or nil when the caller no longer holds the
/// lock.
const EXTEND: &str = r"
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then return false end
local t = redis.call('TIME')
local at = string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
local head = string.match(v, '^(.*|)%d+$')
redis.call('SET', KEYS[1], head .. at, 'PX', ARGV[2])
return {at, ARGV[1]}
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

/// Inspect. KEYS: lock. Reads only: the value, its PTTL and the server clock (`TIME`), or nil
/// when there is no key (Redis never returns an expired one).
const INSPECT: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return false end
local t = redis.call('TIME')
return {v, redis.call('PTTL', KEYS[1]), t[1], t[2]}
";

/// Forced release. KEYS: lock. ARGV: the acquisition seen, `1` when it is the native value's
/// first field (the owner id), `0` when it is the whole value (compatible mode). Deletes the key
/// only if it still holds that acquisition, and returns what was there before, as `INSPECT`
/// does, with 1 (deleted) or 0 (another acquisition: nothing changed) last; nil when no key.
const FORCE_RELEASE: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return false end
local t = redis.call('TIME')
local pttl = redis.call('PTTL', KEYS[1])
local same
if ARGV[2] == '1' then
  same = string.sub(v, 1, string.len(ARGV[1]) + 1) == ARGV[1] .. '|'
else
  same = v == ARGV[1]
end
if same then
  redis.call('DEL', KEYS[1])
  return {v, pttl, t[1], t[2], 1}
end
return {v, pttl, t[1], t[2], 0}
";

/// One `SCAN` step on the node that serves KEYS[1] (a key under the prefix, only used to route
/// the script to a master of a cluster; never read). ARGV: the scan cursor, the `MATCH`
/// pattern, `COUNT`, `1` to keep only native lock keys (ending in `}`: not their `:fence`
/// counters). Reads only. Returns
/// the next scan cursor, the server clock (`TIME`), then key, value and PTTL of every string key
/// found (a key that expired in between is left out).
const LIST: &str = r"
local r = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])
local t = redis.call('TIME')
local out = {r[1], t[1], t[2]}
for _, k in ipairs(r[2]) do
  if (ARGV[4] == '0' or string.sub(k, -1) == '}') and redis.call('TYPE', k).ok == 'string' then
    local v = redis.call('GET', k)
    if v then
      table.insert(out, k)
      table.insert(out, v)
      table.insert(out, redis.call('PTTL', k))
    end
  end
end
return out
";

/// ShedLock's default key prefix (`job-lock:<environment>:<name>`).
pub const SHEDLOCK_PREFIX: &str = "job-lock";

/// ShedLock's default environment.
pub const SHEDLOCK_ENVIRONMENT: &str = "default";

/// One Lua script and its SHA1.
struct Lua {
    /// What it is, for errors: `the acquire script`.
    what: &'static str,
    source: &'static str,
    script: Script,
}

impl Lua {
    fn new(what: &'static str, source: &'static str) -> Self {
        Self { what, source, script: Script::new(source) }
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

/// The scripts of the mode, hashed once.
struct Scripts {
    acquire: Lua,
    unlock: Lua,
    extend: Lua,
    inspect: Lua,
    force_release: Lua,
    list: Lua,
}

impl Scripts {
    fn new(compat: bool) -> Self {
        let (acquire, unlock, extend) = if compat {
            (ACQUIRE_COMPAT, UNLOCK_COMPAT, EXTEND_COMPAT)
        } else {
            (ACQUIRE, UNLOCK, EXTEND)
        };
        Self {
            acquire: Lua::new("the acquire script (try_lock)", acquire),
            unlock: Lua::new("the unlock script (unlock, and build's check)", unlock),
            extend: Lua::new("the extend script (extend)", extend),
            inspect: Lua::new("the inspect script (inspect)", INSPECT),
            force_release: Lua::new("the force_release script (force_release)", FORCE_RELEASE),
            list: Lua::new("the list script (list)", LIST),
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
    /// [`RedisLockProviderBuilder::wait_for_replicas`]: the replicas that must acknowledge an
    /// acquisition, and how long to wait for them.
    wait: Option<(u32, Duration)>,
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
            wait: self.wait,
        };
        let provider = RedisLockProvider { inner: StoreProvider::new(store, settings) };
        // Loads the scripts and proves the connection answers (LeaseStore::check).
        provider.inner.check().await?;
        Ok(provider)
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
            wait: None,
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
    /// Runs `lua` on a clone of the connection; its errors mapped ([`RedisStore::script_err`]).
    async fn run<T: FromRedisValue>(&self, lua: &Lua, keys: &[&str], args: &[&str]) -> Result<T> {
        let mut conn = self.conn.clone();
        lua.run(&mut conn, keys, args).await.map_err(|e| self.script_err(lua, keys, e))
    }

    /// The [`Error`] for a failure of `lua` run on `keys`: an ACL denial names the command (read
    /// from the script's source when the server does not name it) or the key pattern.
    fn script_err(&self, lua: &Lua, keys: &[&str], e: RedisError) -> Error {
        map_err(e, &Sent { what: lua.what, source: Some(lua.source), keys, prefix: &self.prefix })
    }

    /// The [`Error`] for a failure of a command that is not a script and names no key.
    fn command_err(&self, what: &str, e: RedisError) -> Error {
        map_err(e, &Sent::command(what, &self.prefix))
    }

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

    /// The lock name a key holds, if it is a lock key of this provider.
    fn name_of(&self, key: &str) -> Option<String> {
        let rest = key.strip_prefix(&self.prefix)?;
        if self.compat {
            return Some(rest.to_owned());
        }
        unescape(rest.strip_prefix('{')?.strip_suffix('}')?)
    }

    /// The `SCAN` pattern of the lock keys whose names start with `prefix`.
    fn pattern(&self, prefix: &str) -> String {
        let start = if self.compat {
            format!("{}{prefix}", self.prefix)
        } else {
            format!("{}{{{}", self.prefix, escape(prefix))
        };
        glob_escape(&start) + "*"
    }

    /// What an operator sees of a key: its value, PTTL (ms; `-1`: no expiry) and the server's
    /// clock when it was read. The key exists, so it is held (Redis expires it by its own
    /// clock).
    fn info(&self, name: &str, value: String, pttl: i64, now: SystemTime) -> Result<LockInfo> {
        let until =
            u64::try_from(pttl).ok().and_then(|ms| now.checked_add(Duration::from_millis(ms)));
        let mut info = if self.compat {
            let by = compat_locked_by(&value).map(str::to_owned);
            let mut info = LockInfo::new(name, value, true, TimeSource::Server);
            if let Some(by) = by {
                info = info.with_locked_by(by);
            }
            info
        } else {
            let parsed = (|| {
                let (head, at) = value.rsplit_once('|')?;
                let (head, token) = head.rsplit_once('|')?;
                let (owner, by) = head.split_once('|')?;
                Some((owner, by, token.parse::<u64>().ok()?, at.parse::<i64>().ok()?))
            })();
            let Some((owner, by, token, at)) = parsed else {
                return Err(bad_reply("GET of a lock key", &value));
            };
            LockInfo::new(name, owner, true, TimeSource::Server)
                .with_locked_by(by)
                .with_locked_at(from_unix_micros(at))
                .with_fencing_token(Some(token))
        };
        if let Some(until) = until {
            info = info.with_lock_until(until);
        }
        Ok(info)
    }

    /// The reply of one `LIST` step: the next scan cursor, the server clock, and the name,
    /// value and PTTL of each lock key under `prefix` it found.
    #[allow(clippy::type_complexity)]
    fn listed(
        &self,
        reply: Vec<Value>,
        prefix: &str,
    ) -> Result<(String, SystemTime, Vec<(String, String, i64)>)> {
        let text = |v: Value| String::from_redis_value(v).map_err(|e| bad_reply("list", e));
        let mut items = reply.into_iter();
        let (Some(scan), Some(s), Some(us)) = (items.next(), items.next(), items.next()) else {
            return Err(bad_reply("list", "fewer than three fields"));
        };
        let (scan, now) = (text(scan)?, server_time(&text(s)?, &text(us)?)?);
        let mut found = Vec::new();
        while let (Some(key), Some(value), Some(pttl)) = (items.next(), items.next(), items.next())
        {
            let pttl = i64::from_redis_value(pttl).map_err(|e| bad_reply("list", e))?;
            let (key, value) = (text(key)?, text(value)?);
            // The pattern already selects these; the prefix is compared as a value once more.
            if let Some(name) = self.name_of(&key).filter(|n| n.starts_with(prefix)) {
                found.push((name, value, pttl));
            }
        }
        Ok((scan, now, found))
    }

    /// The masters to list, each by its lowest slot range, in slot order: from `CLUSTER SLOTS`,
    /// or the one server (`[(0, 16383)]`) when it is not a cluster.
    async fn masters(&self) -> Result<Vec<(u16, u16)>> {
        let mut conn = self.conn.clone();
        let reply: redis::RedisResult<Vec<Vec<Value>>> =
            redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut conn).await;
        let ranges = match reply {
            Ok(ranges) => ranges,
            Err(e) if e.to_string().contains("cluster support disabled") => {
                return Ok(vec![(0, 16383)]);
            }
            Err(e) => return Err(self.command_err("list (CLUSTER SLOTS, to find the masters)", e)),
        };
        let mut lowest: Vec<(String, (u16, u16))> = Vec::new();
        for range in ranges {
            let mut fields = range.into_iter();
            let (Some(start), Some(end), Some(node)) =
                (fields.next(), fields.next(), fields.next())
            else {
                return Err(bad_reply("CLUSTER SLOTS", "a range without a master"));
            };
            let slot =
                |v: Value| u16::from_redis_value(v).map_err(|e| bad_reply("CLUSTER SLOTS", e));
            let range = (slot(start)?, slot(end)?);
            let node: Vec<Value> =
                Vec::from_redis_value(node).map_err(|e| bad_reply("CLUSTER SLOTS", e))?;
            let id = format!("{node:?}");
            match lowest.iter_mut().find(|(n, _)| *n == id) {
                Some((_, r)) if range.0 < r.0 => *r = range,
                Some(_) => {}
                None => lowest.push((id, range)),
            }
        }
        let mut masters: Vec<(u16, u16)> = lowest.into_iter().map(|(_, r)| r).collect();
        masters.sort_unstable();
        if masters.is_empty() {
            return Err(Error::Unavailable {
                backend: BACKEND,
                source: "the cluster serves no slots (CLUSTER SLOTS is empty)".into(),
            });
        }
        Ok(masters)
    }

    /// The native acquire: `Some((token, locked_at_µs))` when `owner` now holds the key.
    async fn take(&self, req: &Request<'_>, key: &str, owner: &str) -> Result<Option<(u64, u64)>> {
        let fence = self.fence_key(req.name());
        let px = duration_millis_ceil(req.lock_at_most_for()).max(1).to_string();
        // The script is idempotent for one acquisition (a retry finds its own value), so a
        // request whose answer was lost with the connection can be sent once more.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut conn = self.conn.clone();
            let r: redis::RedisResult<Option<(String, String, String)>> =
                self.scripts.acquire.run(&mut conn, &[key, &fence], &[owner, &px]).await;
            match r {
                Ok(None) => return Ok(None),
                Ok(Some((tok, at, echoed))) => {
                    answer_is_ours("acquire", owner, &echoed)?;
                    return Ok(Some((parse_u64("acquire", &tok)?, parse_u64("acquire", &at)?)));
                }
                Err(e) if attempt < 2 && (e.is_connection_dropped() || e.is_io_error()) => {
                    tracing::debug!(lock = %req.name(), error = %e, "redis acquire: connection lost, retrying once");
                }
                Err(e) => return Err(self.script_err(&self.scripts.acquire, &[key, &fence], e)),
            }
        }
    }

    /// The ShedLock-compatible acquire: true iff `value` is now the key's.
    async fn take_compat(&self, req: &Request<'_>, key: &str, value: &str) -> Result<bool> {
        let px = duration_millis_ceil(req.lock_at_most_for()).max(1).to_string();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut conn = self.conn.clone();
            let r: redis::RedisResult<i64> =
                self.scripts.acquire.run(&mut conn, &[key], &[value, &px]).await;
            match r {
                Ok(won) => return Ok(won == 1),
                // Idempotent like the native script: a retry finds its own value.
                Err(e) if attempt < 2 && (e.is_connection_dropped() || e.is_io_error()) => {
                    tracing::debug!(lock = %req.name(), error = %e, "redis acquire: connection lost, retrying once");
                }
                Err(e) => return Err(self.script_err(&self.scripts.acquire, &[key], e)),
            }
        }
    }
}

/// Checks that a script's answer echoes what this request sent (`sent`): an answer that
/// belongs to another request (a reply delivered to the wrong caller by a connection that lost
/// its place, as a fault scenario on Redis Cluster caught: a grant carrying an older
/// acquisition's token) is [`Error::Unavailable`], never a grant or an extension.
fn answer_is_ours(operation: &str, sent: &str, echoed: &str) -> Result<()> {
    if echoed == sent {
        return Ok(());
    }
    tracing::warn!(%operation, "redis: an answer that belongs to another request; not trusted");
    Err(Error::Unavailable {
        backend: BACKEND,
        source: format!(
            "redis {operation}: the answer belongs to another request (the connection lost its \
             place); nothing is assumed held"
        )
        .into(),
    })
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
            .with_inspect(true)
            .with_list(true)
            .with_force_release(true)
    }

    /// Loads the three scripts (so a server that refuses scripts fails here), then runs the
    /// unlock script on a key no one holds: 0, and nothing written.
    async fn check(&self, _: &Settings) -> Result<()> {
        let mut conn = self.conn.clone();
        let s = &self.scripts;
        for lua in [&s.acquire, &s.unlock, &s.extend] {
            lua.script
                .load_async(&mut conn)
                .await
                .map_err(|e| self.command_err("build's check (SCRIPT LOAD of the scripts)", e))?;
        }
        let probe = self.key("shedlock-setup-probe");
        let r: i64 = self.run(&s.unlock, &[&probe], &["no one", "0", "0"]).await?;
        if r != 0 {
            return Err(bad_reply("the setup probe", r));
        }
        Ok(())
    }

    async fn acquire(&self, req: &Request<'_>) -> Result<Option<Granted<Held>>> {
        let Some((held, token)) = self.grant(req).await? else { return Ok(None) };
        if let Some((replicas, timeout)) = self.wait {
            self.replicated(req, &held, replicas, timeout).await?;
        }
        let granted = Granted::new(held);
        Ok(Some(match token {
            Some(t) => granted.with_fencing_token(t),
            None => granted,
        }))
    }

    async fn release(&self, req: &Request<'_>, held: &mut Held) -> Result<()> {
        let at_least = if self.compat {
            duration_millis_ceil(req.lock_at_least_for()).to_string()
        } else {
            duration_micros(req.lock_at_least_for()).to_string()
        };
        let px = held.px.to_string();
        let args: &[&str] =
            if self.compat { &[&held.value, &at_least, &px] } else { &[&held.value, &at_least] };
        let r: i64 = self.run(&self.scripts.unlock, &[&held.key], args).await?;
        if r == 0 {
            tracing::debug!(lock = %req.name(), "redis unlock: no longer the holder; nothing changed");
        }
        Ok(())
    }

    async fn extend(&self, req: &Request<'_>, held: &mut Held) -> Result<Extension> {
        let px_ms = duration_millis_ceil(req.lock_at_most_for()).max(1);
        let px = px_ms.to_string();
        if self.compat {
            let r: i64 = self.run(&self.scripts.extend, &[&held.key], &[&held.value, &px]).await?;
            if r != 1 {
                return Ok(Extension::Lost);
            }
            held.px = px_ms;
            return Ok(Extension::Extended);
        }
        let r: Option<(String, String)> =
            self.run(&self.scripts.extend, &[&held.key], &[&held.value, &px]).await?;
        let Some((at, echoed)) = r else { return Ok(Extension::Lost) };
        answer_is_ours("extend", &held.value, &echoed)?;
        parse_u64("extend", &at)?;
        let head = held.value.rsplit_once('|').map_or("", |(h, _)| h);
        held.value = format!("{head}|{at}");
        Ok(Extension::Extended)
    }

    /// One script (`GET`, `PTTL`, `TIME`) on the key: held while the key exists, since Redis
    /// expires it by its own clock.
    async fn inspect(&self, name: &str, _: &Settings) -> Result<Option<LockInfo>> {
        let key = self.key(name);
        let r: Option<(String, i64, String, String)> =
            self.run(&self.scripts.inspect, &[&key], &[]).await?;
        r.map(|(value, pttl, s, us)| self.info(name, value, pttl, server_time(&s, &us)?))
            .transpose()
    }

    /// `SCAN … MATCH` in a script on each master in turn (one master unless it is a cluster),
    /// never more than one `SCAN` batch in memory; see [`ListCursor`].
    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
        _: &Settings,
    ) -> Result<LockPage> {
        // Each master with the key under the prefix that routes the script there; a master no
        // key under the prefix can reach holds none of its locks.
        let (masters, routes): (Vec<(u16, u16)>, Vec<String>) = self
            .masters()
            .await?
            .into_iter()
            .filter_map(|m| routing_key(&self.prefix, m).map(|route| (m, route)))
            .unzip();
        if masters.is_empty() {
            return Ok(LockPage::new(Vec::new(), None));
        }
        let mut at = match cursor {
            None => ListCursor { master: 0, scan: "0".to_owned(), after: None },
            Some(c) => ListCursor::parse(c, &masters)?,
        };
        let pattern = self.pattern(prefix);
        let count = (limit + 1).clamp(100, MAX_SCAN_COUNT).to_string();
        let native = if self.compat { "0" } else { "1" };
        let mut records: Vec<LockInfo> = Vec::with_capacity(limit);
        for _ in 0..MAX_SCAN_STEPS {
            let route = routes[at.master].as_str();
            let reply: Vec<Value> = self
                .run(&self.scripts.list, &[route], &[&at.scan, &pattern, &count, native])
                .await?;
            let (next_scan, now, found) = self.listed(reply, prefix)?;
            let mut batch: Vec<LockInfo> = found
                .into_iter()
                .filter(|(name, ..)| at.after.as_ref().is_none_or(|after| name > after))
                .map(|(name, value, pttl)| self.info(&name, value, pttl, now))
                .collect::<Result<_>>()?;
            batch.sort_by(|a, b| a.name.cmp(&b.name));
            let room = limit - records.len();
            if batch.len() > room {
                // The rest of this batch is the next page: the same SCAN step, after the last
                // name given.
                records.extend(batch.into_iter().take(room));
                let after = records.last().map(|r| r.name.clone());
                let next = ListCursor { after, ..at }.render(&masters);
                return Ok(LockPage::new(records, Some(next)));
            }
            records.extend(batch);
            at.after = None;
            at.scan = next_scan;
            if at.scan == "0" {
                at.master += 1;
                if at.master == masters.len() {
                    return Ok(LockPage::new(records, None));
                }
            }
            if records.len() == limit {
                break;
            }
        }
        Ok(LockPage::new(records, Some(at.render(&masters))))
    }

    /// One script: compare the acquisition, `DEL` if it is the one seen, and answer what was
    /// there before either way.
    async fn force_release(&self, seen: &LockInfo, _: &Settings) -> Result<ForceRelease> {
        let key = self.key(&seen.name);
        let native = if self.compat { "0" } else { "1" };
        let r: Option<(String, i64, String, String, i64)> =
            self.run(&self.scripts.force_release, &[&key], &[&seen.acquisition, native]).await?;
        let Some((value, pttl, s, us, deleted)) = r else {
            return Ok(ForceRelease::Changed(None));
        };
        let info = self.info(&seen.name, value, pttl, server_time(&s, &us)?)?;
        Ok(if deleted == 1 {
            ForceRelease::Released(info)
        } else {
            ForceRelease::Changed(Some(info))
        })
    }
}

/// The most `SCAN` steps one `list` call takes before it answers a short page (with a cursor):
/// bounds the time of a call on a keyspace where few keys match.
const MAX_SCAN_STEPS: usize = 64;

/// The `COUNT` hint of one `SCAN` step at most: how much of the keyspace one step walks.
const MAX_SCAN_COUNT: usize = 1000;

/// The Redis Cluster hash slot of a key's hash part (CRC16/XMODEM modulo 16 384).
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

/// The Redis Cluster hash slot of a key: of its hash tag (the text between the first `{` and
/// the first `}` after it, when not empty), else of the whole key.
fn key_slot(key: &[u8]) -> u16 {
    let tag = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter().position(|&b| b == b'}').filter(|&len| len > 0).map(|len| &rest[..len])
    });
    crc16(tag.unwrap_or(key)) % 16384
}

/// Whether every key that starts with `prefix` has the prefix's own hash tag (a `{…}` in the
/// prefix; only a ShedLock-compatible prefix may have braces), so lives in one slot.
fn prefix_pins_slot(prefix: &str) -> bool {
    prefix.find('{').is_some_and(|open| prefix[open + 1..].find('}').is_some_and(|len| len > 0))
}

/// A key under the provider's `prefix` whose hash slot lies in `slots` (a master's range), only
/// used to route the `LIST` script to that master, never read or written: `<prefix>scan{<n>}`
/// for the first `n` that hashes there. Under the prefix, so that the ACL key pattern that
/// covers the locks covers it too. `None` when no key under the prefix lives there (a prefix
/// that pins its keys to a slot of another master).
fn routing_key(prefix: &str, slots: (u16, u16)) -> Option<String> {
    let there = |key: &String| (slots.0..=slots.1).contains(&key_slot(key.as_bytes()));
    if prefix_pins_slot(prefix) {
        return Some(format!("{prefix}scan")).filter(there);
    }
    (0u32..1 << 20).map(|n| format!("{prefix}scan{{{n}}}")).find(there)
}

/// The server's `TIME` (seconds, microseconds) as a time.
fn server_time(secs: &str, micros: &str) -> Result<SystemTime> {
    let (s, us) = (parse_u64("TIME", secs)?, parse_u64("TIME", micros)?);
    let total = s
        .checked_mul(1_000_000)
        .and_then(|s| s.checked_add(us.min(999_999)))
        .and_then(|t| i64::try_from(t).ok())
        .ok_or_else(|| bad_reply("TIME", (secs, micros)))?;
    Ok(from_unix_micros(total))
}

/// Where a `list` page starts: a master (by the first slot of its range; `0` when not a
/// cluster), the `SCAN` cursor of the step to run there, and the last name already given from
/// that step. Rendered as `<slot>:<scan cursor>:<name>` (the name may contain `:`).
///
/// A `SCAN` step answers the same keys when run again at the same cursor (while the keyspace
/// does not change), so a step with more keys than the page has room for is run again for the
/// next page, which skips the names up to the last one given. Across steps `SCAN`'s own
/// guarantee holds: every key present for the whole listing is listed; a key written or
/// deleted meanwhile may or may not be, and a resize of the server's table may list a key twice.
struct ListCursor {
    master: usize,
    scan: String,
    after: Option<String>,
}

impl ListCursor {
    fn render(&self, masters: &[(u16, u16)]) -> String {
        let slot = masters.get(self.master).map_or(0, |m| m.0);
        format!("{slot}:{}:{}", self.scan, self.after.as_deref().unwrap_or(""))
    }

    fn parse(cursor: &str, masters: &[(u16, u16)]) -> Result<Self> {
        let bad = |why: &str| {
            setup(format!("the list cursor {cursor:?} is not one this provider gave: {why}"))
        };
        let mut parts = cursor.splitn(3, ':');
        let (Some(slot), Some(scan), Some(after)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("not <slot>:<scan>:<name>"));
        };
        let slot: u16 = slot.parse().map_err(|_| bad("no slot"))?;
        if scan.is_empty() || !scan.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("no scan cursor"));
        }
        let master = masters.iter().position(|m| m.0 == slot).ok_or_else(|| {
            bad("no master's slots start there now (the cluster changed): list again from the start")
        })?;
        let after = (!after.is_empty()).then(|| after.to_owned());
        Ok(Self { master, scan: scan.to_owned(), after })
    }
}

/// The ShedLock value's `locked_by`: `ADDED:<time>@<locked_by>[:<UUID>]` (the UUID since 6.7).
fn compat_locked_by(value: &str) -> Option<&str> {
    let (_, by) = value.strip_prefix("ADDED:")?.split_once('@')?;
    match by.rsplit_once(':') {
        Some((head, uuid))
            if uuid.len() == 36 && uuid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') =>
        {
            Some(head)
        }
        _ => Some(by),
    }
}

/// `*`, `?`, `[`, `]` and `\` escaped for a `SCAN … MATCH` pattern: the text matches itself.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The inverse of [`escape`]; `None` for text [`escape`] cannot have produced.
fn unescape(escaped: &str) -> Option<String> {
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let c = match rest.get(i..i + 3)? {
            "%25" => '%',
            "%7B" => '{',
            "%7D" => '}',
            _ => return None,
        };
        out.push(c);
        rest = &rest[i + 3..];
    }
    if rest.contains(['{', '}']) {
        return None;
    }
    out.push_str(rest);
    Some(out)
}

impl<C: RedisConnection> RedisStore<C> {
    /// The acquire itself (one script): the lock granted to this owner, or `None`.
    async fn grant(&self, req: &Request<'_>) -> Result<Option<(Held, Option<u64>)>> {
        let key = self.key(req.name());
        if self.compat {
            let value = shedlock_value(req.owner().locked_by());
            if !self.take_compat(req, &key, &value).await? {
                return Ok(None);
            }
            let px = duration_millis_ceil(req.lock_at_most_for()).max(1);
            return Ok(Some((Held { key, value, px }, None)));
        }
        let owner = format!("{}|{}", req.owner().hex(), req.owner().locked_by());
        let Some((token, at)) = self.take(req, &key, &owner).await? else {
            return Ok(None);
        };
        let held = Held { key, value: format!("{owner}|{token}|{at}"), px: 0 };
        Ok(Some((held, Some(token))))
    }

    /// `WAIT replicas timeout` after a grant ([`RedisLockProviderBuilder::wait_for_replicas`]):
    /// `Ok` when enough replicas acknowledged it; otherwise the lock is released
    /// (owner-checked) and the answer is [`Error::Unavailable`], saying how many did.
    async fn replicated(
        &self,
        req: &Request<'_>,
        held: &Held,
        replicas: u32,
        timeout: Duration,
    ) -> Result<()> {
        // On the connection that wrote the lock: the replicas that have every write it sent so
        // far, this grant included.
        let mut conn = self.conn.clone();
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let acked: redis::RedisResult<i64> =
            redis::cmd("WAIT").arg(replicas).arg(ms).query_async(&mut conn).await;
        // A `WAIT` the ACL denies is a setup error (after the release), not an outage.
        let mut denied = None;
        let why = match acked {
            Ok(n) if n >= i64::from(replicas) => return Ok(()),
            Ok(n) => format!("{n} of {replicas} replica(s) acknowledged it within {ms} ms"),
            Err(e) => {
                let why = format!("WAIT failed ({e})");
                let mapped = self.command_err("wait_for_replicas (WAIT after each grant)", e);
                denied = matches!(mapped, Error::Setup { .. }).then_some(mapped);
                why
            }
        };
        // Released at once (no lock_at_least_for: the lock was never the caller's).
        let args: &[&str] = if self.compat {
            &[&held.value, "0", &held.px.to_string()]
        } else {
            &[&held.value, "0"]
        };
        let released: redis::RedisResult<i64> =
            self.scripts.unlock.run(&mut conn, &[&held.key], args).await;
        tracing::debug!(lock = %req.name(), %why, released = released.is_ok(), "redis acquire not replicated");
        let after = match released {
            Ok(_) => "released".to_owned(),
            Err(e) => format!("its release failed too ({e}): it expires after lock_at_most_for"),
        };
        if let Some(denied) = denied {
            return Err(denied);
        }
        Err(Error::Unavailable {
            backend: BACKEND,
            source: format!("the lock was granted, but {why} (wait_for_replicas); {after}").into(),
        })
    }
}

impl<C: RedisConnection> DelegatingProvider for RedisLockProvider<C> {
    fn delegate(&self) -> &dyn LockProvider {
        &self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_echoing_another_request_is_never_a_grant() {
        assert!(answer_is_ours("acquire", "17|host/1", "17|host/1").is_ok());
        let e = answer_is_ours("acquire", "17|host/1", "18|host/1").unwrap_err();
        assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
        assert!(e.to_string().contains("another request"), "{e}");
    }

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
    fn unescape_inverts_escape_and_refuses_what_escape_cannot_produce() {
        for name in ["a", "{a}", "%7Ba%7D", "a%", "}", "{", "%", "%25", "a}b{c", "π%_*"] {
            assert_eq!(unescape(&escape(name)).as_deref(), Some(name));
        }
        for foreign in ["%", "%2", "%41", "a{b", "}", "%7b"] {
            assert_eq!(unescape(foreign), None, "{foreign:?}");
        }
    }

    #[test]
    fn crc16_gives_the_redis_cluster_slots() {
        // The reference value of CRC16/XMODEM, and slots from the Redis Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b"foo") % 16384, 12182);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"a{foo}b"), 12182);
        assert_eq!(key_slot(b"a{}foo"), crc16(b"a{}foo") % 16384, "an empty tag is no tag");
        assert_eq!(key_slot(b"a{foo"), crc16(b"a{foo") % 16384, "an open tag is no tag");
    }

    #[test]
    fn routing_keys_are_under_the_prefix_and_reach_their_master() {
        for prefix in ["shedlock:", "app:prod:", "job-lock:{", "job-lock:{}:"] {
            let key = routing_key(prefix, (5461, 10922)).unwrap();
            assert!(key.starts_with(prefix), "{key}");
            assert!((5461..=10922).contains(&key_slot(key.as_bytes())), "{key}");
        }
        // A prefix with its own hash tag pins every key under it to one slot: only the master
        // serving that slot has a routing key.
        let pinned = "job-lock:{foo}:";
        assert_eq!(routing_key(pinned, (12182, 12182)).as_deref(), Some("job-lock:{foo}:scan"));
        assert_eq!(routing_key(pinned, (0, 12181)), None);
    }

    #[test]
    fn a_scan_pattern_matches_its_text_literally() {
        assert_eq!(glob_escape(r"a*b?c[d]e\f%_"), r"a\*b\?c\[d\]e\\f%_");
    }

    #[test]
    fn list_cursors_round_trip_and_foreign_ones_are_refused() {
        let masters = [(0, 5460), (5461, 10922), (10923, 16383)];
        let c = ListCursor { master: 1, scan: "42".into(), after: Some("a:b".into()) };
        let text = c.render(&masters);
        assert_eq!(text, "5461:42:a:b");
        let back = ListCursor::parse(&text, &masters).unwrap();
        assert_eq!(
            (back.master, back.scan.as_str(), back.after.as_deref()),
            (1, "42", Some("a:b"))
        );
        let fresh = ListCursor::parse("0:7:", &masters).unwrap();
        assert_eq!((fresh.master, fresh.after), (0, None));
        for bad in ["", "x", "1:2", "1:x:", "99:0:", ":0:a"] {
            assert!(
                matches!(ListCursor::parse(bad, &masters), Err(Error::Setup { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn shedlock_values_give_their_locked_by() {
        let v = "ADDED:2026-01-01T00:00:00.000Z@host:a:0a1b2c3d-0000-4000-8000-00000000abcd";
        assert_eq!(compat_locked_by(v), Some("host:a"));
        assert_eq!(compat_locked_by("ADDED:2026-01-01T00:00:00.000Z@host"), Some("host"));
        assert_eq!(compat_locked_by(&shedlock_value("me")), Some("me"));
        assert_eq!(compat_locked_by("something else"), None);
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

//! The Lua scripts, one per operation and mode, and how they are run: `EVALSHA`, with `EVAL`
//! as the fallback on a node that lost its script cache.

use redis::{ErrorKind, FromRedisValue, Script, ServerErrorKind, aio::ConnectionLike};

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
/// One Lua script and its SHA1.
pub(crate) struct Lua {
    /// What it is, for errors: `the acquire script`.
    pub(crate) what: &'static str,
    pub(crate) source: &'static str,
    pub(crate) script: Script,
}

impl Lua {
    fn new(what: &'static str, source: &'static str) -> Self {
        Self { what, source, script: Script::new(source) }
    }

    /// `EVALSHA`, and on `NOSCRIPT` (a node that restarted, or a replica promoted since the
    /// scripts were loaded) `EVAL` with the source, which also caches it there: one extra round
    /// trip on that node, once. Routed by the first key on a cluster.
    pub(crate) async fn run<T: FromRedisValue, C: ConnectionLike>(
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
pub(crate) struct Scripts {
    pub(crate) acquire: Lua,
    pub(crate) unlock: Lua,
    pub(crate) extend: Lua,
    pub(crate) inspect: Lua,
    pub(crate) force_release: Lua,
    pub(crate) list: Lua,
}

impl Scripts {
    pub(crate) fn new(compat: bool) -> Self {
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

//! [`RedisStore`], the lock keys on one Redis or cluster, and its [`LeaseStore`] implementation:
//! what each of the provider's calls sends.

use std::time::Duration;

use async_trait::async_trait;
use redis::{FromRedisValue, RedisError, Value};
use shedlock::{
    Capabilities, Error, Result,
    inspect::{ForceRelease, LockInfo, LockPage},
    store::{Extension, Granted, LeaseStore, Request, Settings},
    support::{duration_micros, duration_millis_ceil},
};

use crate::{
    MAX_NAME_LEN, RedisConnection,
    acquire::answer_is_ours,
    cluster::routing_key,
    error::{Sent, bad_reply, map_err},
    inspect::{ListCursor, MAX_SCAN_COUNT, MAX_SCAN_STEPS, server_time},
    scripts::{Lua, Scripts},
};

// Named only in doc links.
#[cfg(doc)]
use crate::{RedisLockProvider, RedisLockProviderBuilder};

/// The lock keys on one Redis (or cluster): the [`LeaseStore`] of [`RedisLockProvider`].
pub(crate) struct RedisStore<C> {
    pub(crate) conn: C,
    pub(crate) prefix: String,
    pub(crate) scripts: Scripts,
    /// ShedLock's key layout and value format, no fencing.
    pub(crate) compat: bool,
    /// [`RedisLockProviderBuilder::wait_for_replicas`]: the replicas that must acknowledge an
    /// acquisition, and how long to wait for them.
    pub(crate) wait: Option<(u32, Duration)>,
    /// Whether batches are pipelined per hash slot: set once a cluster client refused a
    /// pipeline across slots.
    pub(crate) slot_grouped: std::sync::atomic::AtomicBool,
}
impl<C: RedisConnection> RedisStore<C> {
    /// Runs `lua` on a clone of the connection; its errors mapped ([`RedisStore::script_err`]).
    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        lua: &Lua,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T> {
        let mut conn = self.conn.clone();
        lua.run(&mut conn, keys, args).await.map_err(|e| self.script_err(lua, keys, e))
    }

    /// The [`Error`] for a failure of `lua` run on `keys`: an ACL denial names the command (read
    /// from the script's source when the server does not name it) or the key pattern.
    pub(crate) fn script_err(&self, lua: &Lua, keys: &[&str], e: RedisError) -> Error {
        map_err(e, &Sent { what: lua.what, source: Some(lua.source), keys, prefix: &self.prefix })
    }

    /// The [`Error`] for a failure of a command that is not a script and names no key.
    pub(crate) fn command_err(&self, what: &str, e: RedisError) -> Error {
        map_err(e, &Sent::command(what, &self.prefix))
    }
}

pub(crate) fn parse_u64(what: &str, s: &str) -> Result<u64> {
    s.parse().map_err(|_| bad_reply(what, s))
}
/// A held lock: its key, the value this acquisition wrote (the owner check) and, in the
/// compatible mode, the PX it last set (at-least is judged by the key's own TTL).
pub(crate) struct Held {
    pub(crate) key: String,
    pub(crate) value: String,
    pub(crate) px: i64,
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
            // With `wait_for_replicas`, each grant waits on its own connection: one by one.
            .with_native_batch(self.wait.is_none())
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

    /// One pipeline of the acquire script ([`RedisStore::grant_many`]).
    async fn acquire_many(&self, reqs: &[Request<'_>]) -> Result<Vec<Option<Granted<Held>>>> {
        let granted = self.grant_many(reqs).await?;
        Ok(granted
            .into_iter()
            .map(|g| {
                g.map(|(held, token)| match token {
                    Some(t) => Granted::new(held).with_fencing_token(t),
                    None => Granted::new(held),
                })
            })
            .collect())
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

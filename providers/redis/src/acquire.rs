//! The acquire: the script that grants the lock and its fencing token (or, in the
//! ShedLock-compatible mode, ShedLock's value), the one retry after a lost connection, the check
//! that an answer is this request's, and `WAIT` for replicas.

use std::{sync::atomic::Ordering, time::Duration};

use shedlock::{Error, Result, store::Request, support::duration_millis_ceil};

use crate::{
    BACKEND, RedisConnection,
    compat::shedlock_value,
    store::{Held, RedisStore, parse_u64},
};

// Named only in doc links.
#[cfg(doc)]
use crate::RedisLockProviderBuilder;

impl<C: RedisConnection> RedisStore<C> {
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

impl<C: RedisConnection> RedisStore<C> {
    /// The acquire itself (one script): the lock granted to this owner, or `None`.
    pub(crate) async fn grant(&self, req: &Request<'_>) -> Result<Option<(Held, Option<u64>)>> {
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

    /// The acquires of a batch in one pipeline of the acquire script, one call per name (one
    /// round trip to each node; on a cluster the client routes each call by its key). Each
    /// answer is what [`grant`](Self::grant) would give for that name. A node that lost its
    /// scripts (`NOSCRIPT`) gets the batch again one name at a time (the script is idempotent
    /// for one acquisition: a name it already took is found taken by this owner).
    pub(crate) async fn grant_many(
        &self,
        reqs: &[Request<'_>],
    ) -> Result<Vec<Option<(Held, Option<u64>)>>> {
        struct Entry {
            key: String,
            fence: String,
            value: String,
            px: i64,
        }
        let entries: Vec<Entry> = reqs
            .iter()
            .map(|req| {
                let key = self.key(req.name());
                let px = duration_millis_ceil(req.lock_at_most_for()).max(1);
                let value = if self.compat {
                    shedlock_value(req.owner().locked_by())
                } else {
                    format!("{}|{}", req.owner().hex(), req.owner().locked_by())
                };
                Entry { fence: self.fence_key(req.name()), key, value, px }
            })
            .collect();
        let lua = &self.scripts.acquire;
        let first = entries.first().map(|e| e.key.as_str()).unwrap_or_default();
        // One pipeline, or on a cluster (whose client refuses a pipeline across hash slots)
        // one per slot, two at a time.
        let pipeline = |group: Vec<usize>| {
            let mut pipe = redis::pipe();
            for i in &group {
                let e = &entries[*i];
                let cmd = pipe.cmd("EVALSHA").arg(lua.script.get_hash());
                if self.compat {
                    cmd.arg(1).arg(&e.key).arg(&e.value).arg(e.px);
                } else {
                    cmd.arg(2).arg(&e.key).arg(&e.fence).arg(&e.value).arg(e.px);
                }
            }
            let mut conn = self.conn.clone();
            async move {
                let answers: redis::RedisResult<Vec<redis::Value>> =
                    pipe.query_async(&mut conn).await;
                answers.map(|a| (group, a))
            }
        };
        let all: Vec<usize> = (0..entries.len()).collect();
        let mut grouped = self.slot_grouped.load(Ordering::Relaxed);
        let mut answers: Vec<Option<redis::Value>> = (0..entries.len()).map(|_| None).collect();
        if !grouped {
            match pipeline(all).await {
                Ok((_, values)) => {
                    for (slot, v) in answers.iter_mut().zip(values) {
                        *slot = Some(v);
                    }
                }
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::CrossSlot) =>
                {
                    // Refused by the cluster client before anything was sent.
                    self.slot_grouped.store(true, Ordering::Relaxed);
                    grouped = true;
                }
                Err(e) => return Err(self.script_err(lua, &[first], e)),
            }
        }
        if grouped {
            let mut by_slot: std::collections::BTreeMap<u16, Vec<usize>> = Default::default();
            for (i, e) in entries.iter().enumerate() {
                by_slot.entry(crate::cluster::key_slot(e.key.as_bytes())).or_default().push(i);
            }
            let calls: Vec<_> = by_slot.into_values().map(pipeline).collect();
            for done in shedlock::batch::in_order(calls, 2).await {
                let (group, values) = done.map_err(|e| self.script_err(lua, &[first], e))?;
                for (i, v) in group.into_iter().zip(values) {
                    answers[i] = Some(v);
                }
            }
        }
        let answers: Vec<redis::Value> = answers.into_iter().flatten().collect();
        if answers.len() != entries.len() {
            return Err(Error::Backend {
                backend: BACKEND,
                source: format!(
                    "a pipeline of {} acquires was answered with {} replies",
                    entries.len(),
                    answers.len()
                )
                .into(),
            });
        }
        let no_script = answers.iter().any(|v| {
            matches!(v, redis::Value::ServerError(e) if e.kind() == Some(redis::ServerErrorKind::NoScript))
        });
        if no_script {
            let mut out = Vec::with_capacity(reqs.len());
            for req in reqs {
                out.push(self.grant(req).await?);
            }
            return Ok(out);
        }
        let mut out = Vec::with_capacity(entries.len());
        for (e, answer) in entries.into_iter().zip(answers) {
            let keys: &[&str] = &[&e.key];
            let fail = |err: redis::RedisError| self.script_err(lua, keys, err);
            if let redis::Value::ServerError(err) = answer {
                return Err(fail(err.into()));
            }
            if self.compat {
                let won: i64 = redis::from_redis_value(answer).map_err(|p| fail(p.into()))?;
                out.push(
                    (won == 1).then_some((Held { key: e.key, value: e.value, px: e.px }, None)),
                );
                continue;
            }
            let granted: Option<(String, String, String)> =
                redis::from_redis_value(answer).map_err(|p| fail(p.into()))?;
            let Some((tok, at, echoed)) = granted else {
                out.push(None);
                continue;
            };
            answer_is_ours("acquire", &e.value, &echoed)?;
            let token = parse_u64("acquire", &tok)?;
            let at = parse_u64("acquire", &at)?;
            let held = Held { key: e.key, value: format!("{}|{token}|{at}", e.value), px: 0 };
            out.push(Some((held, Some(token))));
        }
        Ok(out)
    }

    /// `WAIT replicas timeout` after a grant ([`RedisLockProviderBuilder::wait_for_replicas`]):
    /// `Ok` when enough replicas acknowledged it; otherwise the lock is released
    /// (owner-checked) and the answer is [`Error::Unavailable`], saying how many did.
    pub(crate) async fn replicated(
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

/// Checks that a script's answer echoes what this request sent (`sent`): an answer that
/// belongs to another request (a reply delivered to the wrong caller by a connection that lost
/// its place, as a fault scenario on Redis Cluster caught: a grant carrying an older
/// acquisition's token) is [`Error::Unavailable`], never a grant or an extension.
pub(crate) fn answer_is_ours(operation: &str, sent: &str, echoed: &str) -> Result<()> {
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
}

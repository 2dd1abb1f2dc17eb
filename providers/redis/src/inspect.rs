//! What `inspect`, `list` and `force_release` read: a key's record as an operator sees it, the
//! masters to scan and the cursor of a `list` page.

use std::time::{Duration, SystemTime};

use redis::{FromRedisValue, Value};
use shedlock::{Error, Result, TimeSource, inspect::LockInfo, support::from_unix_micros};

use crate::{
    BACKEND, RedisConnection,
    compat::compat_locked_by,
    error::bad_reply,
    store::{RedisStore, parse_u64},
};

impl<C: RedisConnection> RedisStore<C> {
    /// What an operator sees of a key: its value, PTTL (ms; `-1`: no expiry) and the server's
    /// clock when it was read. The key exists, so it is held (Redis expires it by its own
    /// clock).
    pub(crate) fn info(
        &self,
        name: &str,
        value: String,
        pttl: i64,
        now: SystemTime,
    ) -> Result<LockInfo> {
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
    pub(crate) fn listed(
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
    pub(crate) async fn masters(&self) -> Result<Vec<(u16, u16)>> {
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
}

/// The most `SCAN` steps one `list` call takes before it answers a short page (with a cursor):
/// bounds the time of a call on a keyspace where few keys match.
pub(crate) const MAX_SCAN_STEPS: usize = 64;

/// The `COUNT` hint of one `SCAN` step at most: how much of the keyspace one step walks.
pub(crate) const MAX_SCAN_COUNT: usize = 1000;
/// The server's `TIME` (seconds, microseconds) as a time.
pub(crate) fn server_time(secs: &str, micros: &str) -> Result<SystemTime> {
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
pub(crate) struct ListCursor {
    pub(crate) master: usize,
    pub(crate) scan: String,
    pub(crate) after: Option<String>,
}

impl ListCursor {
    pub(crate) fn render(&self, masters: &[(u16, u16)]) -> String {
        let slot = masters.get(self.master).map_or(0, |m| m.0);
        format!("{slot}:{}:{}", self.scan, self.after.as_deref().unwrap_or(""))
    }

    pub(crate) fn parse(cursor: &str, masters: &[(u16, u16)]) -> Result<Self> {
        let bad = |why: &str| {
            Error::setup(
                BACKEND,
                format!("the list cursor {cursor:?} is not one this provider gave: {why}"),
            )
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

#[cfg(test)]
mod tests {
    use super::*;

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
}

//! What an operator reads and releases: a lock's record from its key's last message
//! (`inspect`), and `force_release`.

use std::time::SystemTime;

use async_nats::HeaderMap;
use serde_json::Value;
use shedlock::{Error, ForceRelease, LockInfo, Result, support::from_unix_micros};

use crate::{
    BACKEND,
    error::json_err,
    inner::Inner,
    jetstream::{F_TOKEN, H_KV_OPERATION, H_MARKER_REASON, H_SEQUENCE, H_TIMESTAMP, H_TTL},
    parse::parse_ttl,
};

// Named only in doc links.
#[cfg(doc)]
use shedlock::LockProvider;

/// How often a forced release reads the lock and purges its message when the holder's
/// extension keeps replacing that message in between.
pub(crate) const FORCE_RELEASE_ATTEMPTS: usize = 5;
impl Inner {
    /// The record of lock `name` in the last message of its key (`None`: a tombstone, no
    /// record): stream sequence `seq`, stored at `time` by the server's clock.
    pub(crate) fn info(
        &self,
        name: &str,
        seq: u64,
        time: Option<SystemTime>,
        headers: Option<&HeaderMap>,
        payload: &[u8],
    ) -> Option<LockInfo> {
        let header = |h: &str| headers.and_then(|m| m.get(h)).map(|v| v.as_str());
        if header(H_MARKER_REASON).is_some()
            || header(H_KV_OPERATION).is_some_and(|op| op == "DEL" || op == "PURGE")
        {
            return None;
        }
        // A lock message is `{"locked_by": …}`; anything else (a value put by hand) holds the
        // name as well (as try_lock judges it), with no holder, acquisition its sequence.
        let v = serde_json::from_slice::<Value>(payload).ok();
        let field = |f: &str| v.as_ref().and_then(|v| v.get(f));
        let locked_by = field("locked_by").and_then(Value::as_str);
        let token = locked_by.map(|_| field(F_TOKEN).and_then(Value::as_u64).unwrap_or(seq));
        let until_us = field("lock_until_us").and_then(Value::as_i64);
        let (held, locked_at, lock_until) = match (self.now_us(), until_us) {
            // Client time: the stored lease, by this instance's clock (as try_lock judges it).
            (Some(now), Some(until)) => (
                until > now,
                field("locked_at_us").and_then(Value::as_i64).map(from_unix_micros),
                Some(from_unix_micros(until)),
            ),
            // Server time: stored means held (the server removes the message at its TTL); the
            // message's time and TTL, both the server's.
            _ => {
                let ttl = header(H_TTL).and_then(parse_ttl);
                (true, time, time.zip(ttl).and_then(|(t, d)| t.checked_add(d)))
            }
        };
        let acquisition = token.unwrap_or(seq).to_string();
        let mut info = LockInfo::new(name, acquisition, held, self.settings.time_source())
            .with_fencing_token(token);
        if let Some(by) = locked_by {
            info = info.with_locked_by(by);
        }
        if let Some(at) = locked_at {
            info = info.with_locked_at(at);
        }
        if let Some(until) = lock_until {
            info = info.with_lock_until(until);
        }
        Some(info)
    }

    /// One direct get of `subject`'s last message: its sequence and the record of lock `name`
    /// (`None`: no message, or a tombstone).
    pub(crate) async fn read(
        &self,
        operation: &'static str,
        name: &str,
        subject: &str,
    ) -> Result<Option<(u64, LockInfo)>> {
        let get = format!("{}.{subject}", self.direct_get);
        let m = match self.request(operation, get, None, Vec::new()).await {
            Ok(m) => m,
            Err(e) => return Err(self.classify_no_responders(operation, e).await),
        };
        if let Some(status) = m.status {
            if status.as_u16() == 404 {
                return Ok(None);
            }
            return Err(Error::backend(
                BACKEND,
                format!("direct get: status {status} {}", m.description.unwrap_or_default()),
            ));
        }
        let h = m.headers.as_ref();
        let header = |name: &str| h.and_then(|h| h.get(name)).map(|v| v.as_str());
        let seq = header(H_SEQUENCE)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| json_err("direct get", b"(no Nats-Sequence header)"))?;
        let time = header(H_TIMESTAMP).and_then(shedlock::support::parse_iso8601_utc);
        Ok(self.info(name, seq, time, h, &m.payload).map(|info| (seq, info)))
    }

    /// [`LockProvider::force_release`] after the name check, without the time limit.
    pub(crate) async fn force_release(&self, seen: &LockInfo) -> Result<ForceRelease> {
        let subject = self.subject(&seen.name);
        for _ in 0..FORCE_RELEASE_ATTEMPTS {
            let Some((seq, info)) = self.read("force_release", &seen.name, &subject).await? else {
                return Ok(ForceRelease::Changed(None));
            };
            if info.acquisition != seen.acquisition {
                return Ok(ForceRelease::Changed(Some(info)));
            }
            if self.purge_up_to("force_release", &subject, seq).await? > 0 {
                return Ok(ForceRelease::Released(info));
            }
            // A newer message (the holder's extension, or a release) replaced it: look again.
        }
        Err(Error::unavailable(
            BACKEND,
            "the lock's message was replaced under every attempt to release it; try again",
        ))
    }
}

//! The JetStream messages of a lock: the conditional publish that takes, extends or keeps a
//! lock, the direct get of a key's last message and the purge that removes it.

use std::time::Duration;

use async_nats::HeaderMap;
use serde_json::{Value, json};
use shedlock::{
    Error, Result,
    support::{MAX_DURATION, duration_micros, duration_secs_ceil},
};

use crate::{
    BACKEND,
    error::{api_error, json_err},
    inner::Inner,
};

/// The JetStream error code for "wrong last sequence" (a failed compare-and-set).
pub(crate) const ERR_WRONG_LAST_SEQUENCE: u64 = 10071;
/// "stream not found".
pub(crate) const ERR_STREAM_NOT_FOUND: u64 = 10059;
/// "stream name already in use with a different configuration".
pub(crate) const ERR_STREAM_NAME_IN_USE: u64 = 10058;
/// "per-message TTL is disabled".
pub(crate) const ERR_TTL_DISABLED: u64 = 10166;

pub(crate) const H_EXPECTED: &str = "Nats-Expected-Last-Subject-Sequence";
pub(crate) const H_TTL: &str = "Nats-TTL";
pub(crate) const H_SEQUENCE: &str = "Nats-Sequence";
pub(crate) const H_KV_OPERATION: &str = "KV-Operation";
pub(crate) const H_MARKER_REASON: &str = "Nats-Marker-Reason";
pub(crate) const H_TIMESTAMP: &str = "Nats-Time-Stamp";
pub(crate) const H_CONSUMER_STALLED: &str = "Nats-Consumer-Stalled";

/// The field of a lock message that holds the acquisition's fencing token, in every message but
/// the acquiring one (whose stream sequence is the token).
pub(crate) const F_TOKEN: &str = "token";
/// The answer to a conditional publish.
pub(crate) enum Publish {
    /// Stored at this stream sequence.
    Stored(u64),
    /// The subject's last sequence was not the expected one; it is this one (0: empty).
    WrongLast(u64),
}

/// The last message on a lock's subject, as a direct get returned it.
pub(crate) struct LastMessage {
    pub(crate) seq: u64,
    /// A tombstone (`KV-Operation: DEL`/`PURGE`, or a server marker): the key is free.
    pub(crate) tombstone: bool,
    /// `lock_until` stored by a client-time provider, in µs since the epoch.
    pub(crate) lock_until_us: Option<i64>,
}
impl Inner {
    /// The message of a held lock: `locked_by`, the acquisition's fencing token when the
    /// message is not the acquiring one (an extension, the at-least remainder: the acquiring
    /// message's sequence is its token), and in client time `lock_until` and `locked_at` (µs
    /// since the epoch).
    pub(crate) fn record(
        &self,
        token: Option<u64>,
        until_us: Option<i64>,
        at_us: Option<i64>,
    ) -> Vec<u8> {
        let mut v = json!({ "locked_by": self.settings.locked_by() });
        if let Some(token) = token {
            v[F_TOKEN] = json!(token);
        }
        if let (Some(until), Some(at)) = (until_us, at_us) {
            v["lock_until_us"] = json!(until);
            v["locked_at_us"] = json!(at);
        }
        v.to_string().into_bytes()
    }

    /// A conditional publish of a lock message held for `hold` (server TTL, or `lock_until` in
    /// the message in client time); `token`: the acquisition's, when this is not the acquiring
    /// message.
    pub(crate) async fn publish(
        &self,
        operation: &'static str,
        subject: &str,
        expected: u64,
        hold: Duration,
        at_us: Option<i64>,
        token: Option<u64>,
    ) -> Result<Publish> {
        let mut h = HeaderMap::new();
        h.insert(H_EXPECTED, expected.to_string().as_str());
        let payload = match at_us {
            None => {
                // Whole seconds, rounded up: the server truncates a fractional TTL (measured:
                // "1500ms" expired after 1.25 s), which could end a lock before its lease.
                let secs = duration_secs_ceil(hold.min(MAX_DURATION)).max(1);
                h.insert(H_TTL, secs.to_string().as_str());
                self.record(token, None, None)
            }
            Some(at) => {
                let until = at.saturating_add(duration_micros(hold));
                self.record(token, Some(until), Some(at))
            }
        };
        let m = match self.request(operation, subject.to_owned(), Some(h), payload).await {
            Ok(m) => m,
            Err(e) => return Err(self.classify_no_responders(operation, e).await),
        };
        let v: Value =
            serde_json::from_slice(&m.payload).map_err(|_| json_err("publish", &m.payload))?;
        match api_error(&v) {
            None => v
                .get("seq")
                .and_then(Value::as_u64)
                .map(Publish::Stored)
                .ok_or_else(|| json_err("publish", &m.payload)),
            Some((ERR_WRONG_LAST_SEQUENCE, desc)) => {
                let last = desc.rsplit(':').next().and_then(|s| s.trim().parse().ok());
                last.map(Publish::WrongLast).ok_or_else(|| json_err("publish", &m.payload))
            }
            Some((ERR_TTL_DISABLED, _)) => Err(self.no_ttl()),
            Some((code, desc)) => {
                Err(Error::backend(BACKEND, format!("publish: {desc} (err_code {code})")))
            }
        }
    }

    /// The last message on `subject`, or `None` when there is none.
    pub(crate) async fn last(&self, subject: &str) -> Result<Option<LastMessage>> {
        let m = self
            .request("try_lock", format!("{}.{subject}", self.direct_get), None, Vec::new())
            .await?;
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
        let get = |name: &str| h.and_then(|h| h.get(name)).map(|v| v.as_str().to_owned());
        let seq = get(H_SEQUENCE)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| json_err("direct get", b"(no Nats-Sequence header)"))?;
        let tombstone = get(H_MARKER_REASON).is_some()
            || get(H_KV_OPERATION).is_some_and(|op| op == "DEL" || op == "PURGE");
        let lock_until_us = serde_json::from_slice::<Value>(&m.payload)
            .ok()
            .and_then(|v| v.get("lock_until_us").and_then(Value::as_i64));
        Ok(Some(LastMessage { seq, tombstone, lock_until_us }))
    }

    /// Whether `last` leaves the key free for a new holder.
    pub(crate) fn is_free(&self, last: &LastMessage) -> bool {
        if last.tombstone {
            return true;
        }
        match (self.now_us(), last.lock_until_us) {
            (Some(now), Some(until)) => until <= now,
            _ => false,
        }
    }

    /// Removes the lock message `seq` from `subject` if it is still the subject's last message:
    /// a purge of the subject up to and including `seq`, so a newer holder's message stays.
    pub(crate) async fn purge_up_to(
        &self,
        operation: &'static str,
        subject: &str,
        seq: u64,
    ) -> Result<u64> {
        let body = json!({ "filter": subject, "seq": seq.saturating_add(1) }).to_string();
        let m = self.request(operation, self.purge.clone(), None, body.into_bytes()).await?;
        let v: Value =
            serde_json::from_slice(&m.payload).map_err(|_| json_err("purge", &m.payload))?;
        match api_error(&v) {
            None => Ok(v.get("purged").and_then(Value::as_u64).unwrap_or(0)),
            Some((ERR_STREAM_NOT_FOUND, _)) => Err(self.missing_bucket()),
            Some((code, desc)) => {
                Err(Error::backend(BACKEND, format!("purge: {desc} (err_code {code})")))
            }
        }
    }
}

//! The lock object: its JSON body, and the conditional writes and reads of it.

use aws_sdk_s3::{error::ProvideErrorMetadata, primitives::ByteStream};
use serde_json::{Value, json};
use shedlock::{Error, Result, store::Request};

use crate::{
    BACKEND,
    error::{S3Error, status},
    refusal::Call,
    store::S3Store,
};

/// The state a lock object holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct State {
    /// The acquisition id of the writer (the owner check rests on the ETag it produces).
    pub(crate) acquisition: String,
    /// Until when it is held (ms since the epoch); `None`: released.
    pub(crate) until: Option<i64>,
    /// When it was taken or last extended (ms since the epoch).
    pub(crate) at: i64,
    pub(crate) fence: u64,
}

impl State {
    pub(crate) fn body(&self, locked_by: &str) -> Vec<u8> {
        json!({
            "v": 1,
            "acquisition_id": self.acquisition,
            "lock_until_ms": self.until,
            "locked_at_ms": self.at,
            "fencing_token": self.fence,
            "locked_by": locked_by,
        })
        .to_string()
        .into_bytes()
    }

    pub(crate) fn parse(body: &[u8]) -> Option<State> {
        let v: Value = serde_json::from_slice(body).ok()?;
        Some(State {
            acquisition: v.get("acquisition_id")?.as_str()?.to_owned(),
            until: match v.get("lock_until_ms")? {
                Value::Null => None,
                n => Some(n.as_i64()?),
            },
            at: v.get("locked_at_ms")?.as_i64()?,
            fence: v.get("fencing_token")?.as_u64()?,
        })
    }

    pub(crate) fn free_at(&self, now: i64) -> bool {
        self.until.is_none_or(|u| u <= now)
    }
}

/// The answer to a conditional write.
pub(crate) enum Put {
    /// Written, with this ETag.
    Stored(String),
    /// The condition failed: the object exists (`If-None-Match`), or changed or is gone
    /// (`If-Match`).
    Refused,
}

/// The `locked_by` a lock object's body holds (informational; `None` when it has none).
pub(crate) fn body_locked_by(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    Some(v.get("locked_by")?.as_str()?.to_owned())
}

impl S3Store {
    /// A conditional `PutObject`: `If-None-Match: *` when `etag` is `None`, else `If-Match`.
    pub(crate) async fn put(
        &self,
        req: &Request<'_>,
        key: &str,
        etag: Option<&str>,
        state: &State,
    ) -> Result<Put> {
        let operation = req.operation().label();
        let mut req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type("application/json")
            .body(ByteStream::from(state.body(req.owner().locked_by())));
        req = match etag {
            None => req.if_none_match("*"),
            Some(e) => req.if_match(e),
        };
        match req.send().await {
            Ok(out) => match out.e_tag {
                Some(tag) => Ok(Put::Stored(tag)),
                None => Err(Error::backend(
                    BACKEND,
                    format!("{operation}: the server stored the lock object but sent no ETag"),
                )),
            },
            // 412: the condition failed. 404 on If-Match: the object is gone.
            Err(e) if matches!(status(&e), Some(412)) => Ok(Put::Refused),
            Err(e) if etag.is_some() && matches!(status(&e), Some(404)) => {
                if e.as_service_error().and_then(ProvideErrorMetadata::code) == Some("NoSuchBucket")
                {
                    return Err(self.missing_bucket());
                }
                Ok(Put::Refused)
            }
            Err(e) => Err(self.map_err(operation, Call::PutObject, e)),
        }
    }

    /// The object's ETag and state; `None` if there is no object.
    pub(crate) async fn read(
        &self,
        operation: &'static str,
        key: &str,
    ) -> Result<Option<(String, State)>> {
        let Some((etag, body)) = self.fetch(operation, key).await? else { return Ok(None) };
        Ok(Some((etag, self.parse(key, &body)?)))
    }

    /// One `GetObject`: the object's ETag and body; `None` if there is no object.
    pub(crate) async fn fetch(
        &self,
        operation: &'static str,
        key: &str,
    ) -> Result<Option<(String, Vec<u8>)>> {
        let r = self.client.get_object().bucket(&self.bucket).key(key).send().await;
        let out = match r {
            Ok(out) => out,
            Err(e) if matches!(status(&e), Some(404)) => {
                if e.as_service_error().and_then(ProvideErrorMetadata::code) == Some("NoSuchBucket")
                {
                    return Err(self.missing_bucket());
                }
                return Ok(None);
            }
            Err(e) => return Err(self.map_err(operation, Call::GetObject, e)),
        };
        let etag = out.e_tag.clone().ok_or_else(|| {
            Error::backend(BACKEND, format!("{operation}: the lock object {key:?} has no ETag"))
        })?;
        let body = out.body.collect().await.map_err(|e| {
            Error::unavailable(
                BACKEND,
                S3Error::Transport { operation, message: format!("reading the lock object: {e}") },
            )
        })?;
        Ok(Some((etag, body.into_bytes().to_vec())))
    }

    /// The state in the body of the object at `key`: [`Error::Backend`] when it is not a lock
    /// object's.
    pub(crate) fn parse(&self, key: &str, body: &[u8]) -> Result<State> {
        State::parse(body).ok_or_else(|| {
            Error::backend(
                BACKEND,
                format!(
                    "the object {key:?} in bucket {:?} is not a lock object written by this \
                     provider; delete it or use another prefix",
                    self.bucket
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_round_trips_and_released_is_free() {
        let s = State { acquisition: "00ff".into(), until: Some(10), at: 5, fence: 7 };
        assert_eq!(State::parse(&s.body("me")), Some(s.clone()));
        assert!(!s.free_at(9) && s.free_at(10));
        let released = State { until: None, ..s };
        assert_eq!(State::parse(&released.body("me")), Some(released.clone()));
        assert!(released.free_at(i64::MIN));
        assert_eq!(State::parse(b"not json"), None);
    }
}

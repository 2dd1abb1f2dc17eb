//! `list`: an ephemeral consumer delivers the last message of every key; a page keeps the
//! smallest names after the cursor.

use std::{collections::BTreeMap, pin::Pin, sync::Arc};

use async_nats::connection::State as ConnState;
use futures_core::Stream as _;
use serde_json::{Value, json};
use shedlock::{Error, LockInfo, LockPage, Result, store::Operation};

use crate::{
    BACKEND, PermissionWatch,
    error::{api_error, json_err},
    inner::Inner,
    jetstream::{ERR_STREAM_NOT_FOUND, H_CONSUMER_STALLED},
    keys::name_for,
    parse::ack_metadata,
    permissions::{Refused, Violation},
    request,
};

// Named only in doc links.
#[cfg(doc)]
use shedlock::LockProvider;

/// Deletes the list's ephemeral consumer when the listing ends (or is dropped), in the
/// background; its inactivity threshold (10 s) removes it anyway.
pub(crate) struct DeleteConsumer {
    inner: Arc<Inner>,
    subject: String,
}

impl Drop for DeleteConsumer {
    fn drop(&mut self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let (inner, subject) = (Arc::clone(&self.inner), std::mem::take(&mut self.subject));
        rt.spawn(async move {
            let delete = inner.request("list", subject, None, Vec::new());
            let timeout = inner.settings.timeout();
            if let Err(error) = request::run_labelled(Operation::List, timeout, delete).await {
                tracing::debug!(%error, "nats: deleting the list consumer failed; it expires by itself");
            }
        });
    }
}
impl Inner {
    /// One page of [`LockProvider::list`]: an ephemeral consumer (in memory, no acks, flow
    /// controlled) delivers the last message of every key; the smallest `limit` + 1 names after
    /// `cursor` under `prefix` are kept.
    pub(crate) async fn list(
        self: &Arc<Self>,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LockPage> {
        if self.client.connection_state() != ConnState::Connected {
            return Err(Inner::not_connected());
        }
        let since = self.watch.as_ref().map(PermissionWatch::mark);
        let inbox = self.client.new_inbox();
        let mut sub = self
            .client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| Error::unavailable(BACKEND, e))?;
        let body = json!({
            "stream_name": self.stream,
            "config": {
                "description": "shedlock list",
                "deliver_subject": inbox,
                "deliver_policy": "last_per_subject",
                "filter_subject": format!("{}>", self.subject_prefix),
                "ack_policy": "none",
                "replay_policy": "instant",
                "flow_control": true,
                "idle_heartbeat": 1_000_000_000u64,
                "inactive_threshold": 10_000_000_000u64,
                "mem_storage": true,
                "num_replicas": 1,
            }
        });
        let m = match self
            .request("list", self.consumer_create.clone(), None, body.to_string().into_bytes())
            .await
        {
            Ok(m) => m,
            Err(e) => return Err(self.classify_no_responders("list", e).await),
        };
        let v: Value = serde_json::from_slice(&m.payload)
            .map_err(|_| json_err("consumer create", &m.payload))?;
        match api_error(&v) {
            None => {}
            Some((ERR_STREAM_NOT_FOUND, _)) => return Err(self.missing_bucket()),
            Some((code, desc)) => {
                return Err(Error::backend(
                    BACKEND,
                    format!("consumer create: {desc} (err_code {code})"),
                ));
            }
        }
        let consumer = v
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| json_err("consumer create", &m.payload))?;
        let _delete = DeleteConsumer {
            inner: Arc::clone(self),
            subject: format!("{}.{consumer}", self.consumer_delete),
        };
        let mut pending = v.get("num_pending").and_then(Value::as_u64).unwrap_or(0);
        // The smallest names seen so far, at most one more than the page (which tells whether
        // another page follows).
        let mut page: BTreeMap<String, LockInfo> = BTreeMap::new();
        // The deliveries come to `inbox`, flow control answers go to `$JS.FC.<stream>.…`: a
        // violation of either stalls the listing, and fails it once the watch sees it.
        let flow_control = format!("$JS.FC.{}.", self.stream);
        let concerns = |v: &Violation| {
            self.concerns(v, "")
                || (v.refused == Refused::Publish && v.subject.starts_with(&flow_control))
        };
        while pending > 0 {
            let next = std::future::poll_fn(|cx| Pin::new(&mut sub).poll_next(cx));
            let msg = tokio::select! {
                msg = next => msg.ok_or_else(|| {
                    Error::unavailable(BACKEND, "the list subscription was closed")
                })?,
                e = self.guard("list", since, &concerns) => return Err(e),
            };
            if let Some(status) = msg.status {
                if status.as_u16() != 100 {
                    return Err(Error::unavailable(
                        BACKEND,
                        format!(
                            "the list consumer stopped: status {status} {}",
                            msg.description.unwrap_or_default()
                        ),
                    ));
                }
                // Flow control asks for an answer on its reply subject; a heartbeat may name
                // a stalled flow control to answer.
                let stalled = msg.headers.as_ref().and_then(|h| h.get(H_CONSUMER_STALLED));
                let answer = match (&msg.reply, stalled) {
                    (Some(reply), _) => Some(reply.to_string()),
                    (None, Some(s)) => Some(s.as_str().to_owned()),
                    (None, None) => None,
                };
                if let Some(to) = answer {
                    self.client
                        .publish(to, Vec::new().into())
                        .await
                        .map_err(|e| Error::unavailable(BACKEND, e))?;
                }
                continue;
            }
            let Some((seq, time, left)) = msg.reply.as_deref().and_then(ack_metadata) else {
                return Err(Error::backend(
                    BACKEND,
                    format!("a listed message without its metadata (reply {:?})", msg.reply),
                ));
            };
            pending = left;
            let key = msg.subject.as_str().strip_prefix(self.subject_prefix.as_str());
            // A key no lock name maps to (put by other tools) holds no lock: not listed.
            let Some(name) = key.and_then(name_for) else {
                tracing::debug!(subject = %msg.subject, "nats list: a key that is no lock's, skipped");
                continue;
            };
            if !name.starts_with(prefix) || cursor.is_some_and(|c| name.as_str() <= c) {
                continue;
            }
            if page.len() > limit && page.last_key_value().is_some_and(|(last, _)| name > *last) {
                continue;
            }
            let headers = msg.headers.as_ref();
            if let Some(info) = self.info(&name, seq, Some(time), headers, &msg.payload) {
                page.insert(name, info);
                if page.len() > limit + 1 {
                    page.pop_last();
                }
            }
        }
        let more = page.len() > limit;
        let records: Vec<LockInfo> = page.into_values().take(limit).collect();
        let next = if more { records.last().map(|r| r.name.clone()) } else { None };
        Ok(LockPage::new(records, next))
    }
}

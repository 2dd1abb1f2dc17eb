//! The key-value bucket: its stream's configuration, creating it, and checking that a stream
//! can hold locks.

use serde_json::{Value, json};
use shedlock::{Error, LockProvider, Result, store::Operation};

use crate::{
    BACKEND, NatsLockProvider,
    error::{api_error, json_err},
    inner::Inner,
    jetstream::{ERR_STREAM_NAME_IN_USE, ERR_STREAM_NOT_FOUND},
    request,
};

impl Inner {
    pub(crate) fn missing_bucket(&self) -> Error {
        Error::setup(
            BACKEND,
            format!(
                "the key-value bucket {:?} (stream {}) does not exist: call create_bucket(), or create \
             it from bucket_config() (per-message TTL needs nats-server 2.11 or newer)",
                self.bucket, self.stream
            ),
        )
    }

    pub(crate) fn no_ttl(&self) -> Error {
        Error::setup(
            BACKEND,
            format!(
                "the stream {} does not allow per-message TTL (allow_msg_ttl): enable it on the \
             stream (nats-server 2.11 or newer), recreate the bucket with create_bucket() (after \
             deleting it), or use TimeSource::Client",
                self.stream
            ),
        )
    }

    /// The stream's info, or `None` when it does not exist.
    pub(crate) async fn stream_info(&self, operation: &'static str) -> Result<Option<Value>> {
        let m = self.request(operation, self.info.clone(), None, Vec::new()).await?;
        let v: Value =
            serde_json::from_slice(&m.payload).map_err(|_| json_err("stream info", &m.payload))?;
        match api_error(&v) {
            None => Ok(Some(v)),
            Some((ERR_STREAM_NOT_FOUND, _)) => Ok(None),
            Some((code, desc)) => {
                Err(Error::backend(BACKEND, format!("stream info: {desc} (err_code {code})")))
            }
        }
    }

    /// Checks the bucket (see [`NatsLockProvider::check_bucket`]).
    pub(crate) async fn check_bucket(&self, operation: &'static str) -> Result<()> {
        match self.stream_info(operation).await? {
            None => Err(self.missing_bucket()),
            Some(v) => self.validate(&v),
        }
    }

    pub(crate) fn validate(&self, info: &Value) -> Result<()> {
        let i = self;
        let c = info.get("config").ok_or_else(|| json_err("stream info", b"(no config)"))?;
        let flag = |k: &str| c.get(k).and_then(Value::as_bool).unwrap_or(false);
        let wildcard = format!("{}>", i.subject_prefix);
        let covers = c
            .get("subjects")
            .and_then(Value::as_array)
            .is_some_and(|s| s.iter().any(|s| s.as_str() == Some(wildcard.as_str())));
        let mut wrong = Vec::new();
        if !covers {
            wrong.push(format!("its subjects do not include {wildcard}"));
        }
        if !flag("allow_direct") {
            wrong.push("direct get is not allowed (allow_direct)".to_owned());
        }
        if flag("deny_purge") {
            wrong.push("purge is denied (deny_purge), and unlock purges".to_owned());
        }
        if flag("sealed") {
            wrong.push("it is sealed".to_owned());
        }
        // The server removes a message at the stream's max_age even when its own TTL is longer
        // (measured on 2.15: a 5 s TTL was gone after 2.5 s under max_age 1 s): a lock would
        // end early.
        if c.get("max_age").and_then(Value::as_u64).is_some_and(|a| a > 0) {
            wrong.push(
                "it has a max_age, which removes lock messages before their lock_at_most_for \
                 (set max_age to 0)"
                    .to_owned(),
            );
        }
        if i.settings.time_source().is_server() && !flag("allow_msg_ttl") {
            return Err(i.no_ttl());
        }
        if wrong.is_empty() {
            return Ok(());
        }
        Err(Error::setup(
            BACKEND,
            format!(
                "the stream {} cannot hold locks: {}; recreate it with create_bucket() or from \
             bucket_config()",
                i.stream,
                wrong.join(", ")
            ),
        ))
    }
}

impl NatsLockProvider {
    /// The stream configuration [`create_bucket`](Self::create_bucket) sends (JSON, the
    /// JetStream `STREAM.CREATE` request): a key-value bucket keeping one message per key, file
    /// storage, one replica, direct get allowed, purge allowed, and (in server time) per-message
    /// TTL. Use it to create the bucket with your own tooling, e.g. with more replicas.
    pub fn bucket_config(&self) -> String {
        let i = &self.inner;
        let mut v = json!({
            "name": i.stream,
            "description": "shedlock locks",
            "subjects": [format!("{}>", i.subject_prefix)],
            "retention": "limits",
            "max_consumers": -1,
            "max_msgs_per_subject": 1,
            "max_msgs": -1,
            "max_bytes": -1,
            "max_age": 0,
            "max_msg_size": -1,
            "storage": "file",
            "discard": "new",
            "num_replicas": 1,
            "duplicate_window": 120_000_000_000u64,
            "allow_rollup_hdrs": true,
            "deny_delete": true,
            "deny_purge": false,
            "allow_direct": true,
        });
        if i.settings.time_source().is_server() {
            v["allow_msg_ttl"] = json!(true);
        }
        v.to_string()
    }

    /// Creates the bucket (stream `KV_<bucket>`, see [`bucket_config`](Self::bucket_config)),
    /// or, when a stream of that name already exists, checks that it can hold locks
    /// ([`check_bucket`](Self::check_bucket)). Idempotent.
    pub async fn create_bucket(&self) -> Result<()> {
        let i = &self.inner;
        request::run_labelled(Operation::CreateTable, i.settings.timeout(), async {
            let m = i
                .request("create_bucket", i.create.clone(), None, self.bucket_config().into_bytes())
                .await?;
            let v: Value = serde_json::from_slice(&m.payload)
                .map_err(|_| json_err("stream create", &m.payload))?;
            match api_error(&v) {
                None => i.validate(&v),
                Some((ERR_STREAM_NAME_IN_USE, _)) => i.check_bucket("create_bucket").await,
                Some((code, desc)) => Err(Error::setup(
                    BACKEND,
                    format!("creating the stream {} failed: {desc} (err_code {code})", i.stream),
                )),
            }
        })
        .await
    }

    /// Checks that the bucket exists and can hold locks: its subjects cover `$KV.<bucket>.>`,
    /// direct get and purge are allowed, and (in server time) per-message TTL is enabled (which
    /// needs nats-server 2.11 or newer). Otherwise [`Error::Setup`]
    /// says what to change. The same as [`LockProvider::check`].
    pub async fn check_bucket(&self) -> Result<()> {
        LockProvider::check(self).await
    }
}

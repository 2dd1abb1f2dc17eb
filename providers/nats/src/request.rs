//! One request to the server, as every call sends it: refused while the client is not
//! connected, failed fast when the connection drops or the server reports a permission
//! violation for it, and bounded by the deadline of the call it belongs to.

use std::{future::Future, time::Duration};

use async_nats::{
    HeaderMap, Message, Request, RequestError, RequestErrorKind, connection::State as ConnState,
};
use shedlock::{Error, Result, store::Operation, support::with_timeout};
use tokio::time::Instant;

use crate::{
    BACKEND,
    error::{NoAnswer, NoResponders, permission_denied},
    inner::Inner,
    permissions::{Refused, Violation},
};

/// How often a request in flight checks that the client is still connected and that the server
/// reported no permission violation for it.
const POLL: Duration = Duration::from_millis(20);

tokio::task_local! {
    /// The deadline of the call the current task runs (its `operation_timeout` from its start).
    static DEADLINE: Instant;
}

/// `fut` with its requests bounded by a deadline `timeout` from now (none: no bound).
pub(crate) async fn scoped<T>(
    timeout: Option<Duration>,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    match timeout.and_then(|t| Instant::now().checked_add(t)) {
        Some(deadline) => DEADLINE.scope(deadline, fut).await,
        None => fut.await,
    }
}

/// [`Operation::run`] (the call's time limit, span and [`Error::Timeout`]), its requests
/// bounded by the same deadline: a request still unanswered when it comes fails with the
/// subject it was sent to (see [`NoAnswer`]), the call's own limit covering everything else.
pub(crate) async fn run<T>(
    operation: Operation,
    name: &str,
    timeout: Option<Duration>,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    // The deadline is taken before `run`'s own, so the request's expires first.
    operation.run(BACKEND, name, timeout, scoped(timeout, fut)).await
}

/// [`with_timeout`] for an administrative call (`create_bucket` is [`Operation::CreateTable`]),
/// without a span of its own.
pub(crate) async fn run_labelled<T>(
    operation: Operation,
    timeout: Option<Duration>,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    with_timeout(operation, timeout, scoped(timeout, fut)).await
}

fn deadline() -> Option<Instant> {
    DEADLINE.try_with(|d| *d).ok()
}

impl Inner {
    /// The permission, as the README grants it, that covers a subject this provider sends to.
    pub(crate) fn pattern_for(&self, v: &Violation) -> String {
        let s = v.subject.as_str();
        if v.refused != Refused::Publish {
            return format!("{}.>", self.inbox_prefix);
        }
        let prefixes = [
            self.subject_prefix.clone(),
            format!("{}.", self.direct_get),
            format!("{}.", self.consumer_delete),
            format!("$JS.FC.{}.", self.stream),
        ];
        if let Some(prefix) = prefixes.iter().find(|p| s.starts_with(p.as_str())) {
            return format!("{prefix}>");
        }
        s.to_owned()
    }

    /// Whether violation `v` refused a request on `subject`: a publish to the subject, or a
    /// subscription on this client's inbox (where every reply comes back).
    pub(crate) fn concerns(&self, v: &Violation, subject: &str) -> bool {
        match v.refused {
            Refused::Publish => v.subject == subject,
            Refused::Subscribe | Refused::Reply => v
                .subject
                .strip_prefix(self.inbox_prefix.as_str())
                .is_some_and(|rest| rest.starts_with('.')),
        }
    }

    /// Fails once the connection is lost, or once the watch (if any) sees a violation after
    /// `since` that `concerns` accepts; never ends otherwise.
    pub(crate) async fn guard(
        &self,
        operation: &'static str,
        since: Option<u64>,
        concerns: impl Fn(&Violation) -> bool,
    ) -> Error {
        loop {
            tokio::time::sleep(POLL).await;
            if self.client.connection_state() != ConnState::Connected {
                return Error::unavailable(
                    BACKEND,
                    "the connection to the NATS server was lost while the request was out \
                     (its effect is unknown)",
                );
            }
            if let (Some(watch), Some(since)) = (&self.watch, since)
                && let Some(v) = watch.find(since, &concerns)
            {
                return permission_denied(operation, &v, &self.pattern_for(&v));
            }
        }
    }

    pub(crate) fn not_connected() -> Error {
        Error::unavailable(
            BACKEND,
            "not connected to the NATS server (the client reconnects in the background)",
        )
    }

    /// One request, failing fast while the client is not connected: async-nats queues requests
    /// made during a reconnection and sends them once it is back, which could take a lock long
    /// after the caller gave up.
    pub(crate) async fn request(
        &self,
        operation: &'static str,
        subject: String,
        headers: Option<HeaderMap>,
        payload: Vec<u8>,
    ) -> Result<Message> {
        if self.client.connection_state() != ConnState::Connected {
            return Err(Self::not_connected());
        }
        let since = self.watch.as_ref().map(crate::PermissionWatch::mark);
        let deadline = deadline();
        let mut req = Request::new().payload(payload.into());
        if let Some(h) = headers {
            req = req.headers(h);
        }
        // The call's deadline bounds the wait (below); without one, the provider's time limit,
        // or else the client's own request timeout.
        if deadline.is_some() {
            req = req.timeout(None);
        } else if let Some(t) = self.settings.timeout() {
            req = req.timeout(Some(t));
        }
        let send = self.client.send_request(subject.clone(), req);
        let answer = async {
            match deadline {
                Some(d) => tokio::time::timeout_at(d, send)
                    .await
                    .unwrap_or_else(|_| Err(RequestError::new(RequestErrorKind::TimedOut))),
                None => send.await,
            }
        };
        // A lost connection or a refused permission fails the call within a poll interval
        // instead of waiting for an answer until the time limit.
        tokio::select! {
            r = answer => r.map_err(|e| self.request_error(operation, &subject, e)),
            e = self.guard(operation, since, |v| self.concerns(v, &subject)) => Err(e),
        }
    }

    /// A request's failure: no answer in time is [`NoAnswer`], naming the subject and the
    /// permissions that would explain it.
    fn request_error(&self, operation: &'static str, subject: &str, e: RequestError) -> Error {
        match e.kind() {
            RequestErrorKind::TimedOut => {
                let publish = Violation { refused: Refused::Publish, subject: subject.to_owned() };
                Error::unavailable(
                    BACKEND,
                    NoAnswer {
                        operation,
                        subject: subject.to_owned(),
                        pattern: self.pattern_for(&publish),
                        inbox: format!("{}.>", self.inbox_prefix),
                        after: self.settings.timeout().or_else(|| self.client.timeout()),
                        watched: self.watch.is_some(),
                    },
                )
            }
            // No stream listens on the subject: the bucket is missing, or JetStream is not
            // (yet) available. `classify_no_responders` tells them apart where it matters.
            RequestErrorKind::NoResponders => Error::unavailable(BACKEND, NoResponders),
            _ => Error::unavailable(BACKEND, e),
        }
    }

    /// After "no responders" on a publish: a missing stream is a setup error; anything else
    /// (JetStream starting up, a restart) stays retryable.
    pub(crate) async fn classify_no_responders(&self, operation: &'static str, e: Error) -> Error {
        if !matches!(&e, Error::Unavailable { source, .. } if source.is::<NoResponders>()) {
            return e;
        }
        match self.stream_info(operation).await {
            Ok(None) => self.missing_bucket(),
            _ => e,
        }
    }
}

//! [`PermissionWatch`]: the server's permission violations, which async-nats reports only to the
//! client's event callback, made visible to the requests they refused.

use std::{
    collections::VecDeque,
    fmt,
    sync::{Arc, Mutex, PoisonError},
};

use async_nats::{ConnectOptions, Event, ServerError};

/// How many violations a watch keeps.
const KEPT: usize = 64;

/// Watches one NATS connection for the server's permission violations, so that a request the
/// server refused fails at once with [`Error::Setup`](shedlock::Error::Setup) naming the subject
/// and the permission to grant, instead of waiting out its time limit.
///
/// A NATS server does not answer a message the user may not publish: it drops it and sends the
/// connection an asynchronous `-ERR 'Permissions Violation for Publish to "…"'` (likewise for a
/// subscription it refuses, such as the reply inbox), which async-nats hands only to the
/// client's event callback. [`NatsLockProvider::connect`](crate::NatsLockProvider::connect)
/// installs a watch for you. To keep an event callback of your own, call
/// [`record`](Self::record) from it and give the watch to the builder
/// ([`permission_watch`](crate::NatsLockProviderBuilder::permission_watch)):
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use shedlock_nats::{NatsLockProvider, PermissionWatch};
///
/// let watch = PermissionWatch::new();
/// let seen = watch.clone();
/// let client = async_nats::ConnectOptions::new()
///     .event_callback(move |event| {
///         let seen = seen.clone();
///         async move {
///             seen.record(&event);
///             tracing::info!(%event, "nats event");
///         }
///     })
///     .connect("tls://nats.internal:4222")
///     .await?;
/// let provider = NatsLockProvider::builder(client).permission_watch(watch).build()?;
/// # Ok(()) }
/// ```
///
/// One watch belongs to one client (a violation concerns the connection it happened on); clones
/// share it. Its `Debug` shows how many violations it holds.
#[derive(Clone, Default)]
pub struct PermissionWatch {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// The number of violations recorded so far; each gets the next number.
    count: u64,
    /// The latest violations with their numbers, oldest first.
    recent: VecDeque<(u64, Violation)>,
    /// Subscriptions the server refused since the client last connected: async-nats does not
    /// retry them, so every request answered on one stays unanswered until a reconnect.
    refused_subscriptions: Vec<String>,
}

/// What the server refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Publishing to the subject.
    Publish,
    /// Subscribing to the subject.
    Subscribe,
    /// Publishing with the subject as the reply subject.
    Reply,
}

/// One permission violation the server reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Violation {
    pub(crate) refused: Refused,
    pub(crate) subject: String,
}

impl Violation {
    /// A violation from the text of a server's `-ERR` (as async-nats passes it, without the
    /// quotes): `Permissions Violation for Publish to "s"`, `… for Subscription to "s"` (maybe
    /// followed by ` using queue "q"`), `… for Publish with Reply of "s"`.
    pub(crate) fn parse(text: &str) -> Option<Violation> {
        let rest = text.trim().strip_prefix("Permissions Violation for ")?;
        let (refused, rest) = if let Some(r) = rest.strip_prefix("Publish with Reply of ") {
            (Refused::Reply, r)
        } else if let Some(r) = rest.strip_prefix("Publish to ") {
            (Refused::Publish, r)
        } else if let Some(r) = rest.strip_prefix("Subscription to ") {
            (Refused::Subscribe, r)
        } else {
            return None;
        };
        let quoted = rest.strip_prefix('"')?;
        let subject = &quoted[..quoted.find('"')?];
        Some(Violation { refused, subject: subject.to_owned() })
    }
}

impl fmt::Debug for PermissionWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("PermissionWatch").field("violations", &state.count).finish()
    }
}

impl PermissionWatch {
    /// A watch that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes note of one event of the client's event callback: a permission violation is kept;
    /// a (re)connection forgets the subscriptions refused before it (the client subscribes
    /// again). Every other event is ignored.
    pub fn record(&self, event: &Event) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match event {
            Event::ServerError(ServerError::Other(text)) => {
                let Some(v) = Violation::parse(text) else { return };
                tracing::debug!(?v, "nats: permission violation");
                state.count += 1;
                let n = state.count;
                if v.refused == Refused::Subscribe && state.refused_subscriptions.len() < KEPT {
                    state.refused_subscriptions.push(v.subject.clone());
                }
                if state.recent.len() >= KEPT {
                    state.recent.pop_front();
                }
                state.recent.push_back((n, v));
            }
            Event::Connected => state.refused_subscriptions.clear(),
            _ => {}
        }
    }

    /// `options` with an event callback that [`record`](Self::record)s every event into this
    /// watch (replacing any callback set before: async-nats keeps one). async-nats logs every
    /// event itself (`tracing`, info level).
    pub fn install(&self, options: ConnectOptions) -> ConnectOptions {
        let watch = self.clone();
        options.event_callback(move |event| {
            let watch = watch.clone();
            async move { watch.record(&event) }
        })
    }

    /// The number of violations seen so far: a request notes it before it is sent, and only
    /// later violations concern it.
    pub(crate) fn mark(&self) -> u64 {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).count
    }

    /// The first violation after `since` that `concerns` accepts, or a subscription refused
    /// since the last connection (whenever it happened) that `concerns` accepts.
    pub(crate) fn find(
        &self,
        since: u64,
        concerns: impl Fn(&Violation) -> bool,
    ) -> Option<Violation> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let newer = state.recent.iter().filter(|(n, _)| *n > since).map(|(_, v)| v);
        if let Some(v) = newer.into_iter().find(|v| concerns(v)) {
            return Some(v.clone());
        }
        state
            .refused_subscriptions
            .iter()
            .map(|s| Violation { refused: Refused::Subscribe, subject: s.clone() })
            .find(|v| concerns(v))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn event(text: &str) -> Event {
        Event::ServerError(ServerError::Other(text.to_owned()))
    }

    #[test]
    fn violations_are_read_from_the_servers_error_text() {
        let v = Violation::parse(r#"Permissions Violation for Publish to "$KV.b.k""#).unwrap();
        assert_eq!((v.refused, v.subject.as_str()), (Refused::Publish, "$KV.b.k"));
        let v = Violation::parse(
            r#"Permissions Violation for Subscription to "_INBOX.x.*" using queue "q""#,
        )
        .unwrap();
        assert_eq!((v.refused, v.subject.as_str()), (Refused::Subscribe, "_INBOX.x.*"));
        let v = Violation::parse(r#"Permissions Violation for Publish with Reply of "_INBOX.a""#)
            .unwrap();
        assert_eq!(v.refused, Refused::Reply);
        assert_eq!(Violation::parse("Authorization Violation"), None);
        assert_eq!(Violation::parse("Permissions Violation for Publish to x"), None);
    }

    #[test]
    fn a_request_sees_later_violations_and_refused_subscriptions_until_a_reconnect() {
        let w = PermissionWatch::new();
        w.record(&event(r#"Permissions Violation for Publish to "a""#));
        let since = w.mark();
        assert_eq!(w.find(since, |v| v.subject == "a"), None, "before the request");
        w.record(&event(r#"Permissions Violation for Publish to "a""#));
        assert!(w.find(since, |v| v.subject == "a").is_some());
        w.record(&event(r#"Permissions Violation for Subscription to "_INBOX.m.*""#));
        let later = w.mark();
        let inbox = |v: &Violation| v.subject.starts_with("_INBOX.");
        assert!(w.find(later, inbox).is_some(), "a refused subscription stays");
        w.record(&Event::Connected);
        assert!(w.find(later, inbox).is_none(), "until the client connects again");
        assert!(format!("{w:?}").contains("violations: 3"));
    }
}

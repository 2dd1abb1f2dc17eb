//! The provider's errors: JetStream API answers, requests without an answer, permission
//! violations and connection failures, each mapped to shedlock's [`Error`].

use std::{fmt, time::Duration};

use async_nats::{ConnectError, ConnectErrorKind, rustls};
use serde_json::Value;
use shedlock::Error;

use crate::{
    BACKEND,
    permissions::{Refused, Violation},
};

pub(crate) fn json_err(context: &str, body: &[u8]) -> Error {
    Error::backend(
        BACKEND,
        format!("unexpected {context} answer: {}", String::from_utf8_lossy(body)),
    )
}

/// `(err_code, description)` of a JetStream API error answer.
pub(crate) fn api_error(v: &Value) -> Option<(u64, String)> {
    let e = v.get("error")?;
    let code = e.get("err_code").and_then(Value::as_u64).unwrap_or(0);
    let desc = e.get("description").and_then(Value::as_str).unwrap_or("").to_owned();
    Some((code, desc))
}

/// Nothing answered a request: no stream listens on the subject (the bucket is missing), or
/// JetStream is not available (starting, restarting).
#[derive(Debug)]
pub(crate) struct NoResponders;

impl fmt::Display for NoResponders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no responders (JetStream unavailable, or no stream for the subject)")
    }
}

impl std::error::Error for NoResponders {}

/// A request the server did not answer in time. A NATS server drops a message the user may not
/// publish (and a reply it may not receive) and says so only in an asynchronous `-ERR`, which
/// reaches the client's event callback, not the request: without a
/// [`PermissionWatch`](crate::PermissionWatch) a missing permission looks exactly like this.
#[derive(Debug)]
pub(crate) struct NoAnswer {
    pub(crate) operation: &'static str,
    pub(crate) subject: String,
    /// The permission pattern that covers `subject` (README, "Permissions").
    pub(crate) pattern: String,
    /// The subscription the replies come back on, `<inbox prefix>.>`.
    pub(crate) inbox: String,
    pub(crate) after: Option<Duration>,
    /// Whether a permission watch was attached (and saw nothing: then the message leaves
    /// permissions out).
    pub(crate) watched: bool,
}

impl fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { operation, subject, pattern, inbox, after, watched } = self;
        write!(f, "no answer to a request on {subject:?} ({operation})")?;
        if let Some(after) = after {
            write!(f, " within {after:?}")?;
        }
        if *watched {
            // The watch reports a refused publish as it happens, and a refused reply inbox
            // until the client reconnects: a silence is no permission's.
            return f.write_str(
                ", effect unknown: the server or JetStream is slow or unreachable (no permission \
                 violation was reported for it)",
            );
        }
        write!(
            f,
            ", effect unknown: the server or JetStream is slow or unreachable, or this user lacks \
             permission to publish to {pattern:?} or to subscribe to {inbox:?} (NATS reports a \
             permission violation only to the client's event callback and the server log: \
             connect with NatsLockProvider::connect, or give the builder a PermissionWatch, to \
             get Error::Setup naming the permission instead)"
        )
    }
}

impl std::error::Error for NoAnswer {}

/// The [`Error::Setup`] of a permission violation the server reported for a request of
/// `operation`. `pattern` is the permission that covers the refused subject (README,
/// "Permissions").
pub(crate) fn permission_denied(operation: &str, v: &Violation, pattern: &str) -> Error {
    let subject = &v.subject;
    Error::setup(
        BACKEND,
        match v.refused {
            Refused::Publish => format!(
                "the NATS server refused this user permission to publish to {subject:?} \
             ({operation}): allow publish on {pattern:?} (see the README's Permissions section)"
            ),
            Refused::Subscribe => format!(
                "the NATS server refused this user permission to subscribe to {subject:?}, where the \
             replies of {operation} come back: allow subscribe on {pattern:?} (see the README's \
             Permissions section), then reconnect (a refused subscription is not retried)"
            ),
            Refused::Reply => format!(
                "the NATS server refused this user's request with the reply subject {subject:?} \
             ({operation}): allow subscribe on {pattern:?}, and do not deny publishing with \
             replies (see the README's Permissions section)"
            ),
        },
    )
}

/// The user, password or token in `url`s (a comma-separated list of `scheme://user:pw@host`),
/// which no message may show.
fn url_secrets(urls: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    for url in urls.split(',') {
        let rest = url.trim().split_once("://").map_or(url, |(_, r)| r);
        let Some((userinfo, _)) = rest.rsplit_once('@') else { continue };
        match userinfo.split_once(':') {
            Some((_, password)) => secrets.push(password.to_owned()),
            // `nats://TOKEN@host`
            None => secrets.push(userinfo.to_owned()),
        }
    }
    secrets.retain(|s| !s.is_empty());
    secrets
}

/// `text` with every secret replaced by `***`.
fn redact(mut text: String, secrets: &[String]) -> String {
    for s in secrets {
        text = text.replace(s.as_str(), "***");
    }
    text
}

/// A failed connect as shedlock's [`Error`], without the credentials of `urls` (or of the
/// options: async-nats never prints those): refused credentials and TLS failures are
/// [`Error::Setup`], saying what to check; an unreachable server is [`Error::Unavailable`].
pub(crate) fn connect_error(e: &ConnectError, urls: &str) -> Error {
    let secrets = url_secrets(urls);
    let cause = || {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            let line = s.to_string();
            if !text.contains(&line) {
                text.push_str(": ");
                text.push_str(&line);
            }
            source = s.source();
        }
        redact(text, &secrets)
    };
    // async-nats reports a failed handshake (an unknown issuer, a name mismatch) as an I/O
    // error around rustls's.
    let tls = e.kind() == ConnectErrorKind::Tls || is_tls(e);
    match e.kind() {
        _ if tls => Error::setup(
            BACKEND,
            format!(
                "the TLS connection to the NATS server failed ({}): trust the CA that signed the \
             server's certificate (ConnectOptions::add_root_certificates, or tls_client_config \
             with shedlock_nats::tls::client_config), and connect to a host name or address the \
             certificate names",
                cause()
            ),
        ),
        ConnectErrorKind::AuthorizationViolation => Error::setup(
            BACKEND,
            "the NATS server refused the credentials (authorization violation): check the user \
             and password, or the token, the connection gives",
        ),
        ConnectErrorKind::Authentication => Error::setup(
            BACKEND,
            format!(
                "authenticating to the NATS server failed ({}): check the nkey or credentials file",
                cause()
            ),
        ),
        // The parser's message may quote the URL, credentials included.
        ConnectErrorKind::ServerParse => Error::setup(
            BACKEND,
            "the NATS server URL is not valid (expected nats:// or tls:// URLs)",
        ),
        _ => Error::unavailable(BACKEND, format!("cannot connect to NATS: {}", cause())),
    }
}

/// Whether a rustls error is among the causes of `e` (also inside an I/O error).
fn is_tls(e: &ConnectError) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let inner = s.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref);
        if s.is::<rustls::Error>() || inner.is_some_and(|i| i.is::<rustls::Error>()) {
            return true;
        }
        source = s.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_of_urls_are_found_and_hidden() {
        let s = url_secrets("tls://app:pw1@h:4222, nats://tok3n@h2:4222,nats://h3:4222");
        assert_eq!(s, ["pw1", "tok3n"]);
        assert_eq!(redact("x pw1 tok3n y".to_owned(), &s), "x *** *** y");
        assert!(url_secrets("h:4222").is_empty());
    }

    #[test]
    fn no_answer_names_the_permissions_only_when_no_watch_could_have_seen_them() {
        let mut e = NoAnswer {
            operation: "unlock",
            subject: "$JS.API.STREAM.PURGE.KV_b".to_owned(),
            pattern: "$JS.API.STREAM.PURGE.KV_b".to_owned(),
            inbox: "_INBOX.>".to_owned(),
            after: Some(Duration::from_secs(3)),
            watched: false,
        };
        let text = e.to_string();
        assert!(
            text.starts_with(
                r#"no answer to a request on "$JS.API.STREAM.PURGE.KV_b" (unlock) within 3s"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"permission to publish to "$JS.API.STREAM.PURGE.KV_b" or to subscribe to "_INBOX.>""#), "{text}");
        e.watched = true;
        let text = e.to_string();
        assert!(text.contains("no permission violation was reported"), "{text}");
        assert!(!text.contains("_INBOX"), "{text}");
    }
}

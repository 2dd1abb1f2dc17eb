//! What etcd's errors mean here: retryable (`Unavailable`), a request that never left (sent
//! again), a lease that is gone, or a set-up problem (`Setup`: a refused login, a missing
//! permission, a certificate not accepted) that names what to change.

use std::time::Duration;

use shedlock::Error;

use crate::BACKEND;

/// Where the README says what a role needs.
const SEE_PERMISSIONS: &str = "see \"Permissions\" in the shedlock-etcd README";

/// What an etcd error means here.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The lease named in the request does not exist (expired or revoked).
    LeaseGone,
    /// The request had no effect: it never left (the connection to the chosen endpoint could
    /// not be opened: a node that is down), or etcd refused it before applying it because the
    /// auth store changed while it was in flight ("revision of auth store is old": a role or
    /// user was changed, anyone's). Safe to send again; the client may pick another endpoint.
    NotSent(Error),
    /// The server refused the request: the user's roles do not grant what it needs. The
    /// server's words; [`Access::denied`] names the permission.
    Denied(String),
    /// Anything else, mapped.
    Other(Error),
}

impl Failure {
    pub(crate) fn into_error(self) -> Error {
        match self {
            Failure::LeaseGone => Error::backend(BACKEND, "etcdserver: requested lease not found"),
            Failure::Denied(msg) => Error::setup(
                BACKEND,
                format!(
                    "etcd refused a request ({msg}): the client's etcd user needs read and write \
                 permission on the provider's key prefix ({SEE_PERMISSIONS})"
                ),
            ),
            Failure::NotSent(e) | Failure::Other(e) => e,
        }
    }
}

/// The permission a kind of request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Permission {
    /// Range (and watch): `read` or `readwrite`.
    Read,
    /// A transaction that compares and writes, or a revoke of a lease a key is attached to:
    /// `readwrite`.
    ReadWrite,
    /// A lease grant or keep-alive: etcd 3.4 checks no permission.
    Lease,
}

/// What a request was, for the message of a refusal: which call sent it, on which keys, needing
/// which permission, under which prefix (the range a role should be granted).
pub(crate) struct Access<'a> {
    pub(crate) what: &'static str,
    pub(crate) from: &'a [u8],
    /// The end of a range read (`None`: the one key `from`).
    pub(crate) to: Option<&'a [u8]>,
    pub(crate) permission: Permission,
    pub(crate) prefix: &'a [u8],
}

impl Access<'_> {
    /// `failure`, with a refusal turned into `Error::Setup` naming the keys and the permission.
    pub(crate) fn map(&self, failure: Failure) -> Failure {
        match failure {
            Failure::Denied(msg) => Failure::Other(self.denied(&msg)),
            other => other,
        }
    }

    fn denied(&self, server: &str) -> Error {
        let prefix = String::from_utf8_lossy(self.prefix);
        let keys = match self.to {
            Some(to) => format!(
                "the key range [{:?}, {:?})",
                String::from_utf8_lossy(self.from),
                String::from_utf8_lossy(to)
            ),
            None => format!("the key {:?}", String::from_utf8_lossy(self.from)),
        };
        let (need, grant) = match self.permission {
            Permission::Read => ("read permission (read or readwrite)", "read"),
            Permission::ReadWrite => ("read and write permission (readwrite)", "readwrite"),
            Permission::Lease => {
                return Error::setup(
                    BACKEND,
                    format!(
                        "etcd refused {} ({server}): etcd 3.4 asks no permission for leases; a proxy \
                     or server in front of etcd may ({SEE_PERMISSIONS})",
                        self.what
                    ),
                );
            }
        };
        Error::setup(
            BACKEND,
            format!(
                "etcd refused {} on {keys} ({server}): the client's etcd user needs {need} on it; \
             grant its role the provider's whole key prefix: `etcdctl role grant-permission \
             <role> --prefix=true {grant} {prefix}` (locking needs readwrite; {SEE_PERMISSIONS})",
                self.what,
            ),
        )
    }
}

/// The server's words of a status, with its code: never the request (which may carry a token).
fn status_text(s: &tonic::Status) -> String {
    format!("{:?}: {}", s.code(), s.message())
}

/// The whole chain of an error's causes, for recognising TLS failures that a transport error
/// wraps.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// A TLS failure in `text` (an error chain), as the `Error::Setup` that says what to change and
/// quotes `shown`; `None` when it is no TLS failure.
fn tls_failure(text: &str, shown: &str) -> Option<Error> {
    let what = if text.contains("invalid peer certificate") {
        "etcd's certificate was not accepted: give the CA that signed it \
         (`EtcdClientBuilder::tls_ca_pem`), and connect to a host name or address the \
         certificate names (or set `tls_domain` to one)"
    } else if text.contains("received fatal alert") {
        "etcd refused the TLS handshake: if it asks for client certificates \
         (`--client-cert-auth`), give one its `--trusted-ca-file` signed \
         (`EtcdClientBuilder::tls_identity`)"
    } else if text.contains("InvalidContentType") || text.contains("corrupt message") {
        "the endpoint does not answer TLS: it serves plaintext (`http://`), or is no etcd client \
         port"
    } else if text.contains("HTTP/2 was not negotiated") {
        "the endpoint did not negotiate HTTP/2 over TLS (ALPN `h2`): is it etcd's client port?"
    } else if text.contains("Error parsing TLS") {
        "a TLS certificate or key could not be read: give PEM text (`-----BEGIN CERTIFICATE-----`, \
         `-----BEGIN PRIVATE KEY-----`)"
    } else {
        return None;
    };
    Some(Error::setup(BACKEND, format!("TLS: {what} ({shown})")))
}

pub(crate) fn classify(e: etcd_client::Error) -> Failure {
    use etcd_client::Error as E;
    use tonic::Code;
    match e {
        E::GRpcStatus(s) => {
            let msg = s.message();
            if s.code() == Code::NotFound && msg.contains("lease not found") {
                return Failure::LeaseGone;
            }
            if s.code() == Code::Unavailable
                && let Some(tls) = tls_failure(&chain(&s), msg)
            {
                return Failure::Other(tls);
            }
            if s.code() == Code::Unavailable && msg.contains("connect error") {
                return Failure::NotSent(Error::unavailable(BACKEND, s));
            }
            // Refused unapplied (etcd checks the permissions when it applies a request, against
            // the auth revision the request arrived with); sent again, it is judged by the
            // current roles.
            if s.code() == Code::InvalidArgument && msg.contains("revision of auth store is old") {
                return Failure::NotSent(Error::unavailable(BACKEND, s));
            }
            if s.code() == Code::PermissionDenied {
                return Failure::Denied(msg.to_owned());
            }
            let err = match s.code() {
                Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Cancelled
                | Code::Aborted
                | Code::ResourceExhausted => Error::unavailable(BACKEND, s),
                // A connection that broke mid-request surfaces as Unknown with a transport cause;
                // an overloaded server (its applied index more than 5 000 entries behind the
                // committed one, as a herd of thousands of concurrent acquires made it) answers
                // Unknown "etcdserver: too many requests", refusing the request before raft.
                Code::Unknown
                    if msg.contains("transport")
                        || msg.contains("connection")
                        || msg.contains("too many requests") =>
                {
                    Error::unavailable(BACKEND, s)
                }
                _ => login_failure(&s).unwrap_or_else(|| Error::backend(BACKEND, s)),
            };
            Failure::Other(err)
        }
        E::LeaseKeepAliveError(m) if m.contains("lease not found") => Failure::LeaseGone,
        E::TransportError(t) => {
            let text = chain(&t);
            if let Some(tls) = tls_failure(&text, &text) {
                Failure::Other(tls)
            } else if text.contains("connect") {
                Failure::NotSent(Error::unavailable(BACKEND, t))
            } else {
                Failure::Other(Error::unavailable(BACKEND, t))
            }
        }
        E::IoError(io) => Failure::Other(Error::unavailable(BACKEND, io)),
        E::LeaseKeepAliveError(m) => Failure::Other(Error::unavailable(BACKEND, m)),
        other => Failure::Other(Error::backend(BACKEND, other)),
    }
}

/// A refused login or token as `Error::Setup` (the server's words never quote the password);
/// `None` for any other status.
pub(crate) fn login_failure(s: &tonic::Status) -> Option<Error> {
    use tonic::Code;
    let msg = s.message();
    let what = match s.code() {
        Code::InvalidArgument if msg.contains("authentication failed") => {
            "etcd refused the client's login: no such user, or the wrong password"
        }
        Code::InvalidArgument if msg.contains("user name is empty") => {
            "etcd has authentication enabled and the client gave no user: connect with a user and \
             password (`EtcdClientBuilder::user`)"
        }
        Code::FailedPrecondition if msg.contains("authentication is not enabled") => {
            "the client gave a user, but etcd has authentication disabled (`etcdctl auth enable` \
             turns it on): give no user, or enable authentication"
        }
        Code::Unauthenticated => {
            "etcd refused the client's auth token (it expired after etcd's `--auth-token-ttl` \
             unused, or the user's password changed) and the client does not log in again: \
             connect with `EtcdClientBuilder` (which does) or with \
             `ConnectOptions::with_auto_token_refresh(true)`"
        }
        _ => return None,
    };
    Some(Error::setup(BACKEND, format!("{what} ({})", status_text(s))))
}

/// How often a request that had no effect (its endpoint refused the connection, or etcd refused
/// it for a stale auth revision) is sent again, with pauses of 5, 10, 20, 40, 80, 100, 100 ms: about 0.35 s before a cluster whose
/// every endpoint refuses is reported [`Error::Unavailable`].
const SEND_ATTEMPTS: u32 = 8;

/// Runs `call` until it is sent: etcd-client's balanced channel keeps a dead endpoint in its
/// rotation, and a request routed there fails at once, never sent, so sending it again (to
/// another endpoint) is safe; so is sending again a request etcd refused unapplied because the
/// auth store changed meanwhile.
pub(crate) async fn sent<T, Fut>(mut call: impl FnMut() -> Fut) -> std::result::Result<T, Failure>
where
    Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let mut pause = Duration::from_millis(5);
    let mut attempt = 1;
    loop {
        match call().await.map_err(classify) {
            Err(Failure::NotSent(e)) if attempt < SEND_ATTEMPTS => {
                tracing::trace!(error = %e, attempt, "etcd: endpoint refused the connection; sending again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
                attempt += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use tonic::{Code, Status};

    #[test]
    fn an_overloaded_server_is_unavailable_not_a_backend_error() {
        let overloaded = Status::new(Code::Unknown, "etcdserver: too many requests");
        let f = classify(etcd_client::Error::GRpcStatus(overloaded));
        assert!(matches!(f, Failure::Other(Error::Unavailable { .. })), "{f:?}");
        let other = Status::new(Code::Unknown, "etcdserver: something else");
        let f = classify(etcd_client::Error::GRpcStatus(other));
        assert!(matches!(f, Failure::Other(Error::Backend { .. })), "{f:?}");
    }

    #[test]
    fn a_refusal_names_the_keys_the_permission_and_the_grant() {
        let denied = Status::new(Code::PermissionDenied, "etcdserver: permission denied");
        let f = classify(etcd_client::Error::GRpcStatus(denied));
        let access = Access {
            what: "the acquire transaction",
            from: b"app/job",
            to: None,
            permission: Permission::ReadWrite,
            prefix: b"app/",
        };
        let Failure::Other(Error::Setup { message, .. }) = access.map(f) else { panic!() };
        assert!(message.contains("\"app/job\""), "{message}");
        assert!(message.contains("readwrite"), "{message}");
        assert!(message.contains("--prefix=true readwrite app/"), "{message}");
        assert!(message.contains("etcdserver: permission denied"), "{message}");
    }

    #[test]
    fn refused_logins_and_stale_auth_revisions_are_told_apart() {
        let failed = Status::new(
            Code::InvalidArgument,
            "etcdserver: authentication failed, invalid user ID or password",
        );
        let f = classify(etcd_client::Error::GRpcStatus(failed));
        assert!(matches!(f, Failure::Other(Error::Setup { .. })), "{f:?}");
        let token = Status::new(Code::Unauthenticated, "etcdserver: invalid auth token");
        let f = classify(etcd_client::Error::GRpcStatus(token));
        assert!(matches!(f, Failure::Other(Error::Setup { .. })), "{f:?}");
        let old = Status::new(Code::InvalidArgument, "etcdserver: revision of auth store is old");
        let f = classify(etcd_client::Error::GRpcStatus(old));
        assert!(matches!(f, Failure::NotSent(Error::Unavailable { .. })), "{f:?}");
    }
}

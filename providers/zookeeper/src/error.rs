//! ZooKeeper's errors as [`shedlock::Error`]: connection problems, refusals (rights,
//! credentials, ACLs) and hosts that could not be reached.

use std::{fmt, time::Duration};

use shedlock::Error;
use zookeeper_client::MultiWriteError;

use crate::{
    BACKEND,
    auth::{self, Op},
    session::Inner,
};

/// The client found no host to connect to ("no available hosts", its only words for it), and
/// what a plain TCP connect to each host of the connect string says (refused, not resolved):
/// the cause the client does not keep.
#[derive(Debug)]
pub(crate) struct HostsFailed {
    error: zookeeper_client::Error,
    hosts: Vec<(String, std::io::Error)>,
    /// Whether the provider speaks TLS (else a TLS-only server is a likely cause).
    tls: bool,
}

impl HostsFailed {
    /// How long each host's connect may take: a host that neither answers nor refuses is
    /// reported as not answering.
    const PROBE: Duration = Duration::from_millis(500);

    pub(crate) async fn probe(
        error: zookeeper_client::Error,
        connect_string: &str,
        tls: bool,
    ) -> Self {
        let hosts = connect_string.split('/').next().unwrap_or("");
        let mut failed = Vec::new();
        for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
            let why = match tokio::time::timeout(Self::PROBE, tokio::net::TcpStream::connect(host))
                .await
            {
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => e,
                Err(_) => std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {:?}", Self::PROBE),
                ),
            };
            failed.push((host.to_owned(), why));
        }
        Self { error, hosts: failed, tls }
    }
}

impl fmt::Display for HostsFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.error)?;
        for (i, (host, why)) in self.hosts.iter().enumerate() {
            write!(f, "{}{host}: {why}", if i == 0 { " (" } else { "; " })?;
        }
        if !self.hosts.is_empty() {
            f.write_str(")")?;
        } else if !self.tls {
            f.write_str(
                " (every host accepts TCP connections, but none completed the ZooKeeper \
                 handshake: a server that takes TLS only (secureClientPort) needs tls_ca_pem, \
                 feature `tls`; or the servers are not serving yet)",
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for HostsFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Maps a client error: connection problems are retryable [`Error::Unavailable`], permission
/// problems [`Error::Setup`], the rest [`Error::Backend`].
fn map_err(root: &str, e: zookeeper_client::Error) -> Error {
    use zookeeper_client::Error as Z;
    match e {
        Z::ConnectionLoss
        | Z::Timeout
        | Z::NoHosts
        | Z::SessionExpired
        | Z::SessionMoved
        | Z::ClientClosed
        | Z::Throttled
        | Z::NotReadOnly
        // The client's own connection failures: I/O errors and "no response from connection"
        // (a silent server past the connection timeout).
        | Z::Custom(_) => Error::unavailable(BACKEND, e),
        Z::NoAuth | Z::AuthFailed | Z::InvalidAcl => Error::setup(BACKEND, format!(
            "no permission on {root} ({e}): the session needs create, write, read and delete \
             rights on the root and its children (see the README's \"Permissions\" section)"
        )),
        other => Error::backend(BACKEND, other),
    }
}

impl Inner {
    /// Maps the server's answer to `op`: a refusal for want of a permission, credentials or a
    /// valid ACL is [`Error::Setup`] naming what is missing; the rest as [`Inner::map`].
    pub(crate) fn refused(&self, op: Op<'_>, e: zookeeper_client::Error) -> Error {
        match auth::refusal(op, &e, &self.identity, &self.node_acl) {
            Some(message) => Error::setup(BACKEND, message),
            None => self.map(e),
        }
    }

    /// [`Inner::refused`] for a failed transaction whose requests are `ops`, in order.
    pub(crate) fn refused_multi(&self, ops: &[Op<'_>], e: MultiWriteError) -> Error {
        match e {
            MultiWriteError::OperationFailed { index, source } => match ops.get(index) {
                Some(op) => self.refused(*op, source),
                None => self.map(source),
            },
            MultiWriteError::RequestFailed { source } => self.map(source),
        }
    }

    /// [`map_err`]; rejected credentials (or none, where the server requires them) are said
    /// as [`Inner::refused`] says them.
    pub(crate) fn map(&self, e: zookeeper_client::Error) -> Error {
        match e {
            zookeeper_client::Error::AuthFailed => self.refused(Op::Request, e),
            e => map_err(&self.root, e),
        }
    }
}

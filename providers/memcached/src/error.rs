//! What a failed exchange means for the caller: connection and protocol errors mapped to
//! shedlock's [`Error`], an expired deadline to the call's [`Error::Timeout`].

use shedlock::{
    Error, LockConfig,
    store::{Operation, Request, Settings},
};

use crate::{BACKEND, MAX_LOCK_DURATION, conn::ConnError, proto::Reply};

pub(crate) fn map_err(e: ConnError) -> Error {
    match e {
        ConnError::Io(e) => Error::unavailable(BACKEND, e),
        // A certificate not accepted, a server that does not speak TLS: the settings (or the
        // server's) must change; a retry would fail the same way.
        ConnError::Tls(what) => Error::setup(BACKEND, what),
        e @ (ConnError::Server(_)
        | ConnError::Protocol(_)
        | ConnError::Oversized(_)
        | ConnError::TimedOut) => Error::backend(BACKEND, e),
    }
}

/// [`map_err`], with an expired deadline as the request's [`Error::Timeout`]. The store
/// enforces the deadline with the connection's own re-armed timer (see `conn::Conn::request`).
pub(crate) fn call_error(req: &Request<'_>, e: ConnError) -> Error {
    match e {
        ConnError::TimedOut => req.timed_out(),
        e => map_err(e),
    }
}

pub(crate) fn unexpected(what: &str, reply: &Reply) -> Error {
    Error::backend(
        BACKEND,
        ConnError::Protocol(format!("{what}: {} {}", reply.code_str(), reply.flags.join(" "))),
    )
}

pub(crate) fn too_long(config: &LockConfig) -> Error {
    tracing::debug!(
        lock = config.name(),
        lock_at_most_for = ?config.lock_at_most_for(),
        max = ?MAX_LOCK_DURATION,
        "lock_at_most_for too long for memcached"
    );
    Error::Unsupported {
        backend: BACKEND,
        operation: "a lock_at_most_for over 30 days less 2 s (MAX_LOCK_DURATION): memcached reads \
                    such a TTL as an absolute time",
    }
}
/// [`map_err`], with an expired deadline as `operation`'s [`Error::Timeout`].
pub(crate) fn read_error(operation: Operation, settings: &Settings, e: ConnError) -> Error {
    match (e, settings.timeout()) {
        (ConnError::TimedOut, Some(after)) => operation.timed_out(after),
        (e, _) => map_err(e),
    }
}

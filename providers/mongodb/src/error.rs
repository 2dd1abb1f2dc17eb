//! Mapping driver errors to [`shedlock::Error`]: the server's error codes, and what a failed
//! command means for the caller.

use mongodb::error::{ErrorKind, WriteFailure};
use shedlock::Error;

use crate::{
    BACKEND,
    refusal::{Cmd, login_refused, named_action, refused_login},
    store::MongoStore,
};

// Server error codes.
pub(crate) const DUPLICATE_KEY: i32 = 11000;
pub(crate) const UNAUTHORIZED: i32 = 13;
pub(crate) const AUTHENTICATION_FAILED: i32 = 18;
pub(crate) const NAMESPACE_EXISTS: i32 = 48;
pub(crate) const UNSATISFIABLE_WRITE_CONCERN: i32 = 100;
pub(crate) const INVALID_NAMESPACE: i32 = 73;
/// Errors after which the operation may or may not have taken effect and trying again later
/// may help: a primary stepping down, a node shutting down, a network problem on the server's
/// side, a write concern that timed out.
pub(crate) const TRANSIENT: &[i32] = &[
    6,     // HostUnreachable
    7,     // HostNotFound
    64,    // WriteConcernFailed (wtimeout)
    89,    // NetworkTimeout
    91,    // ShutdownInProgress
    189,   // PrimarySteppedDown
    262,   // ExceededTimeLimit
    9001,  // SocketException
    10107, // NotWritablePrimary
    11600, // InterruptedAtShutdown
    11602, // InterruptedDueToReplStateChange
    13435, // NotPrimaryNoSecondaryOk
    13436, // NotPrimaryOrSecondary
];

/// The server error code of a driver error, if it is a command or write error.
pub(crate) fn server_code(e: &mongodb::error::Error) -> Option<i32> {
    match e.kind.as_ref() {
        ErrorKind::Command(c) => Some(c.code),
        ErrorKind::Write(WriteFailure::WriteError(w)) => Some(w.code),
        ErrorKind::Write(WriteFailure::WriteConcernError(w)) => Some(w.code),
        _ => None,
    }
}

/// The server's message of a command or write error.
fn server_message(e: &mongodb::error::Error) -> Option<&str> {
    match e.kind.as_ref() {
        ErrorKind::Command(c) => Some(&c.message),
        ErrorKind::Write(WriteFailure::WriteError(w)) => Some(&w.message),
        ErrorKind::Write(WriteFailure::WriteConcernError(w)) => Some(&w.message),
        _ => None,
    }
}

/// The driver error as a shedlock error: unreachable servers and transient server states are
/// retryable [`Error::Unavailable`]; refused credentials, missing privileges (naming the
/// command and the actions it needs) and unsatisfiable write concerns are [`Error::Setup`]
/// saying what to change; anything else is [`Error::Backend`]. The driver's errors name hosts,
/// never the password of the connection string.
pub(crate) fn map_err(
    inner: &MongoStore,
    operation: &'static str,
    cmd: Cmd,
    e: mongodb::error::Error,
) -> Error {
    let ns = || format!("{}.{}", inner.database.name(), inner.collection.name());
    match e.kind.as_ref() {
        // The pool's login failed, and server selection gave up on the server it marked
        // unknown with that error: the credentials, not the network.
        ErrorKind::ServerSelection { message, .. } if login_refused(message) => {
            return refused_login(operation, &e);
        }
        ErrorKind::ServerSelection { .. }
        | ErrorKind::Io(_)
        | ErrorKind::ConnectionPoolCleared { .. }
        | ErrorKind::Shutdown => return Error::unavailable(BACKEND, e),
        ErrorKind::Authentication { .. } => return refused_login(operation, &e),
        _ => {}
    }
    match server_code(&e) {
        Some(UNAUTHORIZED)
            if server_message(&e).is_some_and(|m| m.contains("requires authentication")) =>
        {
            Error::setup(
                BACKEND,
                format!(
                    "MongoDB refused {} in {operation}: the connection is not authenticated and the \
                 server requires it: give the connection string a user and password (see \
                 \"Authentication\" in the shedlock-mongodb README)",
                    cmd.name()
                ),
            )
        }
        Some(UNAUTHORIZED) => {
            let message = server_message(&e).unwrap_or("");
            let named = match named_action(message) {
                Some(a) => format!("; the server names the action {a}"),
                None => String::new(),
            };
            Error::setup(
                BACKEND,
                format!(
                    "MongoDB refused {} on {} in {operation} (Unauthorized: {message}): the user needs \
                 the privilege actions {} on the collection{named} (the built-in role readWrite \
                 on database {:?} has them; see \"Permissions\" in the shedlock-mongodb README)",
                    cmd.name(),
                    ns(),
                    cmd.actions(),
                    inner.database.name(),
                ),
            )
        }
        Some(AUTHENTICATION_FAILED) => refused_login(operation, &e),
        Some(UNSATISFIABLE_WRITE_CONCERN) => Error::setup(
            BACKEND,
            format!(
                "{operation}: the write concern {:?} cannot be satisfied by this deployment \
             (majority needs a replica set or a standalone server; give the provider a \
             write_concern the deployment can meet): {e}",
                inner.write_concern
            ),
        ),
        Some(INVALID_NAMESPACE) => {
            Error::setup(BACKEND, format!("{operation}: invalid namespace {}: {e}", ns()))
        }
        Some(code) if TRANSIENT.contains(&code) => Error::unavailable(BACKEND, e),
        _ if e.contains_label("RetryableWriteError") => Error::unavailable(BACKEND, e),
        _ => Error::backend(BACKEND, e),
    }
}

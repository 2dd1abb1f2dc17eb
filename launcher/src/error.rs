//! The launcher's error type.

use std::{path::PathBuf, sync::Arc, time::Duration};

/// Why a backend could not be launched, restarted or stopped.
///
/// Every message says what is missing or what failed, and how to fix it: a missing server names
/// the paths searched and the command that installs it; a server that failed to start shows the
/// command that was run and the tail of its log.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The server's programs are not installed.
    #[error("{backend} binaries not found ({looked_for}): {hint}")]
    NotInstalled {
        /// The backend's name.
        backend: &'static str,
        /// What was searched for, e.g. `/usr/lib/postgresql/*/bin/initdb`.
        looked_for: String,
        /// How to install it.
        hint: String,
    },
    /// An installed server is too old (or otherwise unusable) for shedlock's providers.
    #[error("{backend}: {program} is unusable: {reason}: {hint}")]
    Unusable {
        /// The backend's name.
        backend: &'static str,
        /// The program that was found.
        program: PathBuf,
        /// What is wrong with it.
        reason: String,
        /// How to get a usable one.
        hint: String,
    },
    /// Docker mode was asked for but no Docker engine answers.
    #[error(
        "{backend}: docker mode needs a running Docker engine and `docker compose`: {reason} \
         (use --via native, or set {env_var} to a running server's URL)"
    )]
    DockerUnavailable {
        /// The backend's name.
        backend: &'static str,
        /// What the Docker client said.
        reason: String,
        /// The URL variable that bypasses starting anything.
        env_var: &'static str,
    },
    /// Neither a native install nor Docker is available (auto mode).
    #[error("{backend}: no way to start it: {native}; and docker: {docker}")]
    NoWayToStart {
        /// The backend's name.
        backend: &'static str,
        /// Why native mode is impossible (with the install hint).
        native: Box<LaunchError>,
        /// Why docker mode is impossible.
        docker: String,
    },
    /// A preparation step (initdb, mariadb-install-db, ...) failed.
    #[error("{backend}: `{command}` failed ({status}):\n{output}")]
    CommandFailed {
        /// The backend's name.
        backend: &'static str,
        /// The command line that was run.
        command: String,
        /// Its exit status.
        status: String,
        /// The tail of its output.
        output: String,
    },
    /// The server process exited before it was ready.
    #[error("{backend} failed to start: {reason}{output}")]
    StartFailed {
        /// The backend's name.
        backend: &'static str,
        /// What happened (exit status).
        reason: String,
        /// The command that was run and the tail of its log.
        output: Box<ServerOutput>,
    },
    /// The server kept running but never answered the readiness probe.
    #[error("{backend} not ready after {waited:?}: last probe: {last_probe}{output}")]
    NotReady {
        /// The backend's name.
        backend: &'static str,
        /// How long the launcher waited.
        waited: Duration,
        /// The last readiness probe's error.
        last_probe: String,
        /// The command that was run and the tail of its log.
        output: Box<ServerOutput>,
    },
    /// No free loopback port could be found, or the server kept losing its port to others.
    #[error("{backend}: no usable loopback ports after {attempts} attempts: {last}")]
    NoFreePort {
        /// The backend's name.
        backend: &'static str,
        /// How many attempts were made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// A file-system or process operation failed.
    #[error("{backend}: {step}: {source}")]
    Io {
        /// The backend's name.
        backend: &'static str,
        /// What was being done.
        step: String,
        /// The underlying error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The operation needs a server the launcher owns, but this one was given by URL.
    #[error(
        "cannot {action} {backend} at {url}: it was given by URL ({env_var} or --url), not started by the launcher \
         (use LaunchOptions::ignore_env(true) to get a private server)"
    )]
    NotOwned {
        /// The backend's name.
        backend: &'static str,
        /// What was attempted (`restart`).
        action: &'static str,
        /// The URL in use.
        url: String,
        /// The variable that provided it.
        env_var: &'static str,
    },
    /// The backend is listed in `SHEDLOCK_SKIP_BACKENDS`.
    #[error(
        "{backend} skipped on request: SHEDLOCK_SKIP_BACKENDS={list} (remove it from the list to test it)"
    )]
    Skipped {
        /// The backend's name.
        backend: &'static str,
        /// The variable's value.
        list: String,
    },
    /// A backend name that is not in the zoo.
    #[error(
        "unknown backend {name:?}: expected one of postgres, mariadb (mysql), sqlite, redis, valkey, redis-cluster, memcached, \
         nats, mongodb, dynamodb, s3, etcd, etcd-cluster, zookeeper, zookeeper-ensemble"
    )]
    UnknownBackend {
        /// The name as given.
        name: String,
    },
    /// A `--via` or `SHEDLOCK_VIA` value that is not `auto`, `native` or `docker`.
    #[error("unknown launch mode {value:?}: expected auto, native or docker")]
    UnknownVia {
        /// The value as given.
        value: String,
    },
    /// The operation is not possible for this backend in this mode.
    #[error("{backend}: {what}")]
    Unsupported {
        /// The backend's name.
        backend: &'static str,
        /// What is not supported, and why.
        what: String,
    },
}

/// The command line of a server that failed, and the end of its log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerOutput {
    /// The command line that was run (shell-quoted).
    pub command: String,
    /// The server's log file.
    pub log: PathBuf,
    /// The last lines of the log.
    pub log_tail: String,
}

impl ServerOutput {
    pub(crate) fn new(command: String, log: PathBuf, log_tail: String) -> Box<Self> {
        Box::new(ServerOutput { command, log, log_tail })
    }
}

impl std::fmt::Display for ServerOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "\ncommand: {}\nlog {} (tail):\n{}",
            self.command,
            self.log.display(),
            self.log_tail
        )
    }
}

impl LaunchError {
    pub(crate) fn io(
        backend: &'static str,
        step: impl Into<String>,
        source: std::io::Error,
    ) -> Self {
        LaunchError::Io { backend, step: step.into(), source: Arc::new(source) }
    }

    /// True when the error means "not installed here" (as opposed to a failure of an installed
    /// server); `cargo xtask` uses it to decide what provisioning could fix.
    pub fn is_not_installed(&self) -> bool {
        match self {
            LaunchError::NotInstalled { .. } | LaunchError::Unusable { .. } => true,
            LaunchError::NoWayToStart { native, .. } => native.is_not_installed(),
            _ => false,
        }
    }
}

//! # shedlock-launcher
//!
//! Starts the real backends of shedlock's test zoo — PostgreSQL, MariaDB, SQLite (a temp file),
//! Redis, Valkey, memcached, NATS JetStream, a MongoDB wire-protocol server, a DynamoDB API
//! server, an S3 API server, etcd (one node or a 3-node cluster) and ZooKeeper (one server or a
//! 3-node ensemble) — so that providers are tested against real servers, never mocks.
//!
//! * **Native** ([`Via::Native`]): each server runs as a process in a fresh temp dir on free
//!   loopback ports (a taken port makes the launcher pick others; two test runs at once never
//!   share a port or a dir), and is ready only when it answers a request of its own protocol.
//! * **Docker** ([`Via::Docker`]): the services of `docker-compose.yml` on their fixed ports, or
//!   with the `docker` cargo feature, private containers through testcontainers.
//! * **URL**: a backend's [`Backend::env_var`] (e.g. `SHEDLOCK_POSTGRES_URL`) always wins; nothing
//!   is started then.
//!
//! Servers never outlive the process that started them: each runs in its own process group,
//! [`Service`]'s `Drop` stops the group, and a small watchdog process stops it (and removes the
//! temp dir) when the starting process is gone — also after Ctrl-C, an abort, or for the
//! `static`s behind [`shared`].
//!
//! What is missing is said precisely: a missing server gives [`LaunchError::NotInstalled`] with
//! the paths searched and the install command (`cargo xtask provision` installs everything on
//! Debian/Ubuntu). Skipping a backend is only by explicit request, `SHEDLOCK_SKIP_BACKENDS`.
//!
//! ```no_run
//! use shedlock_launcher::{Backend, shared};
//! let pg = shared(Backend::Postgres)?; // started once per process, or $SHEDLOCK_POSTGRES_URL
//! println!("{}", pg.url()); // postgres://postgres@127.0.0.1:PORT/postgres
//! # Ok::<(), shedlock_launcher::LaunchError>(())
//! ```

mod backend;
mod docker;
mod error;
mod locate;
mod native;
mod options;
mod ports;
mod probe;
mod process;
mod roles;
mod secure;
mod service;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock, PoisonError},
};

pub use backend::Backend;
pub use error::{LaunchError, ServerOutput};
pub use locate::{backends_dir, which, workspace_root};
pub use native::PG_PASSWORD_ROLE;
pub use options::{LaunchOptions, Placement, Via};
pub use secure::{APP_USER, Secure};
pub use service::{DetachedService, Mode, Service};

/// The backends listed in `SHEDLOCK_SKIP_BACKENDS` (comma or space separated names, or `all`).
pub fn skip_list() -> Vec<String> {
    std::env::var("SHEDLOCK_SKIP_BACKENDS")
        .unwrap_or_default()
        .split([',', ' '])
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

/// True if `SHEDLOCK_SKIP_BACKENDS` names this backend (or `all`); prints a loud notice to
/// stderr the first time per backend and process.
pub fn skip_requested(backend: Backend) -> bool {
    let list = skip_list();
    let skipped = list.iter().any(|n| n == "all" || Backend::from_name(n) == Some(backend));
    if skipped {
        static NOTICED: Mutex<Vec<Backend>> = Mutex::new(Vec::new());
        let mut noticed = NOTICED.lock().unwrap_or_else(PoisonError::into_inner);
        if !noticed.contains(&backend) {
            noticed.push(backend);
            eprintln!(
                "\n!!!!! SHEDLOCK: {} TESTS ARE SKIPPED: SHEDLOCK_SKIP_BACKENDS={} !!!!!\n",
                backend.name().to_ascii_uppercase(),
                list.join(",")
            );
        }
    }
    skipped
}

type SharedCell = Arc<OnceLock<Result<&'static Service, LaunchError>>>;

/// The cell of each backend's process-wide instance.
fn cells() -> std::sync::MutexGuard<'static, HashMap<Backend, SharedCell>> {
    static CELLS: OnceLock<Mutex<HashMap<Backend, SharedCell>>> = OnceLock::new();
    CELLS.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner)
}

/// The process-wide instance of `backend` if [`shared`] has started it already; never starts
/// anything (and never blocks on a start in progress).
pub fn started(backend: Backend) -> Option<&'static Service> {
    let cell = cells().get(&backend)?.clone();
    cell.get()?.as_ref().ok().copied()
}

/// The process-wide instance of `backend`, started on first use with
/// [`LaunchOptions::default`] (so `$SHEDLOCK_*_URL` wins, and `SHEDLOCK_VIA` picks the mode) and
/// kept for the life of the process; concurrent first callers wait for the one start. A failed
/// start is remembered and returned to every caller.
///
/// Returns [`LaunchError::Skipped`] if `SHEDLOCK_SKIP_BACKENDS` names the backend (see
/// [`shared_or_skip`]).
///
/// Blocking: from async tests call it in `spawn_blocking`, or before building the runtime.
pub fn shared(backend: Backend) -> Result<&'static Service, LaunchError> {
    if skip_requested(backend) {
        return Err(LaunchError::Skipped { backend: backend.name(), list: skip_list().join(",") });
    }
    let cell = cells().entry(backend).or_default().clone();
    cell.get_or_init(|| {
        Service::start(backend, &LaunchOptions::default()).map(|s| &*Box::leak(Box::new(s)))
    })
    .clone()
}

/// The process-wide *secure* instance of `backend` ([`LaunchOptions::secure`]): started on
/// first use (native, private: `$SHEDLOCK_*_URL` is not used) and kept for the life of the
/// process, beside [`shared`]'s plaintext one. In a process started with the variable of
/// [`Service::secure_env`] (a conformance node process), the server it names is used instead,
/// as an external one.
///
/// Blocking: from async tests call it in `spawn_blocking`.
pub fn shared_secure(backend: Backend) -> Result<&'static Service, LaunchError> {
    if skip_requested(backend) {
        return Err(LaunchError::Skipped { backend: backend.name(), list: skip_list().join(",") });
    }
    static CELLS: OnceLock<Mutex<HashMap<Backend, SharedCell>>> = OnceLock::new();
    let cell = CELLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(backend)
        .or_default()
        .clone();
    cell.get_or_init(|| {
        let service = match Service::from_secure_env(backend) {
            Some(s) => s,
            None => {
                Service::start(backend, &LaunchOptions::default().ignore_env(true).secure(true))?
            }
        };
        Ok(&*Box::leak(Box::new(service)))
    })
    .clone()
}

/// Like [`shared`], but `Ok(None)` when the backend is skipped on request
/// (`SHEDLOCK_SKIP_BACKENDS`, announced loudly on stderr). Any other failure — a missing server
/// included — is an error, so a test cannot pass silently without its backend.
pub fn shared_or_skip(backend: Backend) -> Result<Option<&'static Service>, LaunchError> {
    match shared(backend) {
        Ok(s) => Ok(Some(s)),
        Err(LaunchError::Skipped { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Checks whether the programs for a native launch of `backend` are installed, without starting
/// anything; the error says what is missing and how to install it.
pub fn check_installed(backend: Backend) -> Result<(), LaunchError> {
    locate::programs(backend, &backends_dir()).map(|_| ())
}

/// True if a Docker engine answers `docker info`.
pub fn docker_available() -> bool {
    docker::engine().is_ok()
}

//! How to launch: native, docker or whichever works.

use std::{fmt, str::FromStr, time::Duration};

use crate::LaunchError;

/// Where a backend runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Via {
    /// Native if the server is installed, else docker if an engine answers.
    #[default]
    Auto,
    /// A native process in a temp dir on free loopback ports.
    Native,
    /// Docker: the services of `docker-compose.yml` on their fixed ports (or, with the `docker`
    /// cargo feature, a private container through testcontainers).
    Docker,
}

impl Via {
    /// The mode from `SHEDLOCK_VIA` (`auto`, `native`, `docker`), `Auto` when unset.
    pub fn from_env() -> Result<Via, LaunchError> {
        match std::env::var("SHEDLOCK_VIA") {
            Ok(v) if !v.trim().is_empty() => v.parse(),
            _ => Ok(Via::Auto),
        }
    }
}

impl FromStr for Via {
    type Err = LaunchError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Via::Auto),
            "native" => Ok(Via::Native),
            "docker" => Ok(Via::Docker),
            _ => Err(LaunchError::UnknownVia { value: s.to_owned() }),
        }
    }
}

impl fmt::Display for Via {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Via::Auto => "auto",
            Via::Native => "native",
            Via::Docker => "docker",
        })
    }
}

/// Options of [`Service::start`](crate::Service::start). Build with [`LaunchOptions::new`] and
/// the chained setters.
///
/// ```
/// use std::time::Duration;
/// use shedlock_launcher::{LaunchOptions, Via};
/// let opts = LaunchOptions::new().via(Via::Native).ignore_env(true).ready_timeout(Duration::from_secs(30));
/// assert_eq!(opts.get_via(), Via::Native);
/// ```
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    via: Via,
    url: Option<String>,
    ignore_env: bool,
    ready_timeout: Duration,
    watchdog: bool,
    preferred_ports: Vec<u16>,
    backends_dir: Option<std::path::PathBuf>,
    placement: Vec<Placement>,
    durable: bool,
    secure: bool,
}

/// Where one server process of a native launch runs: in the network namespace `netns` (a name
/// under `/run/netns`, as `ip netns add` makes it), listening on `ip` instead of 127.0.0.1. The
/// fault harness of `shedlock-conformance` places each node of a cluster in a namespace of its
/// own, so that it can cut the network between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The namespace's name (`ip netns exec <netns> ...`).
    pub netns: String,
    /// The address the server listens on, reachable from the other namespaces.
    pub ip: std::net::Ipv4Addr,
}

impl Placement {
    /// A server in namespace `netns`, listening on `ip`.
    pub fn new(netns: impl Into<String>, ip: std::net::Ipv4Addr) -> Self {
        Placement { netns: netns.into(), ip }
    }
}

impl Default for LaunchOptions {
    fn default() -> Self {
        LaunchOptions {
            via: Via::from_env().unwrap_or_default(),
            url: None,
            ignore_env: false,
            ready_timeout: std::env::var("SHEDLOCK_READY_TIMEOUT_SECS")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .map(Duration::from_secs)
                .unwrap_or(Duration::from_secs(120)),
            watchdog: true,
            preferred_ports: Vec::new(),
            backends_dir: None,
            placement: Vec::new(),
            durable: false,
            secure: false,
        }
    }
}

impl LaunchOptions {
    /// The defaults: mode from `SHEDLOCK_VIA` (else auto), the backend's URL variable honoured,
    /// a 120 s readiness limit (`SHEDLOCK_READY_TIMEOUT_SECS`), the watchdog on.
    pub fn new() -> Self {
        Self::default()
    }

    /// Native, docker or auto.
    pub fn via(mut self, via: Via) -> Self {
        self.via = via;
        self
    }

    /// Use this URL instead of starting anything (wins over the environment variable).
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// When true, the backend's `SHEDLOCK_*_URL` variable is ignored and a private server is
    /// started (e.g. to test restarts when the suite otherwise shares one given by URL).
    pub fn ignore_env(mut self, ignore: bool) -> Self {
        self.ignore_env = ignore;
        self
    }

    /// How long to wait for a server to answer its readiness probe.
    pub fn ready_timeout(mut self, limit: Duration) -> Self {
        self.ready_timeout = limit;
        self
    }

    /// Whether a watchdog process stops the server when this process is gone (default true).
    /// `cargo xtask services up` turns it off to leave servers running.
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self
    }

    /// Ports to try first (native mode). A preferred port that is taken makes the server's bind
    /// fail; the launcher then retries on free ports.
    pub fn preferred_ports(mut self, ports: impl IntoIterator<Item = u16>) -> Self {
        self.preferred_ports = ports.into_iter().collect();
        self
    }

    /// Where to look for the servers installed from PyPI and npm, instead of
    /// [`backends_dir`](crate::backends_dir) (`$SHEDLOCK_BACKENDS_DIR` or
    /// `<workspace>/target/backends`).
    pub fn backends_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.backends_dir = Some(dir.into());
        self
    }

    /// Runs node `i` of a native launch as `placement[i]` says (its own network namespace and
    /// address; the nodes past the end run on 127.0.0.1 in this namespace). Native only: a
    /// Docker launch with a placement fails with [`LaunchError::Unsupported`](crate::LaunchError).
    pub fn placement(mut self, placement: Vec<Placement>) -> Self {
        self.placement = placement;
        self
    }

    /// Whether the server keeps its own durability defaults (default `false`).
    ///
    /// The launcher's native PostgreSQL runs, for speed, with `fsync=off`,
    /// `synchronous_commit=off` and `full_page_writes=off`: no commit waits for a disk, and a
    /// server or machine crash may lose or corrupt data. `durable(true)` drops those three
    /// settings, so the server runs with PostgreSQL's defaults (all three on): each commit
    /// waits for its WAL to be flushed, as on a production server (e.g. to measure what a
    /// commit costs there). Native ZooKeeper likewise runs with `forceSync=no` unless
    /// `durable`. Every other backend ignores it, and a
    /// Docker launch of PostgreSQL with it fails with
    /// [`LaunchError::Unsupported`](crate::LaunchError) (`docker-compose.yml`'s server runs
    /// with `fsync=off`). Like every option, it has no effect when a URL is used instead of
    /// starting a server (see [`ignore_env`](Self::ignore_env)).
    pub fn durable(mut self, durable: bool) -> Self {
        self.durable = durable;
        self
    }

    /// Whether the server requires TLS and authentication (default `false`).
    ///
    /// A secure launch makes a throwaway certificate authority and server certificate
    /// (`127.0.0.1`, `::1`, `localhost`) and random passwords, and starts the server with TLS
    /// as the only way in and every client authenticated: an administrator, and an application
    /// user with no privilege on lock data, for the test to grant exactly what its provider
    /// needs. [`Service::secure`](crate::Service::secure) gives the CA and the credentials, and
    /// [`Service::url`](crate::Service::url) is then the application user's URL over TLS.
    /// Native PostgreSQL, MariaDB, Redis, Valkey, the Redis Cluster (six nodes, TLS also on the
    /// cluster bus and replication), etcd (one node), NATS, ZooKeeper (one node) and memcached
    /// (TLS only) only: any other backend, a Docker launch or a placement fails with
    /// [`LaunchError::Unsupported`](crate::LaunchError).
    /// [`Secure`](crate::Secure) lists what each server gets.
    pub fn secure(mut self, secure: bool) -> Self {
        self.secure = secure;
        self
    }

    /// The launch mode.
    pub fn get_via(&self) -> Via {
        self.via
    }

    pub(crate) fn get_url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    pub(crate) fn get_ignore_env(&self) -> bool {
        self.ignore_env
    }

    pub(crate) fn get_ready_timeout(&self) -> Duration {
        self.ready_timeout
    }

    pub(crate) fn get_watchdog(&self) -> bool {
        self.watchdog
    }

    pub(crate) fn get_backends_dir(&self) -> std::path::PathBuf {
        self.backends_dir.clone().unwrap_or_else(crate::backends_dir)
    }

    pub(crate) fn get_placement(&self) -> &[Placement] {
        &self.placement
    }

    pub(crate) fn get_durable(&self) -> bool {
        self.durable
    }

    pub(crate) fn get_secure(&self) -> bool {
        self.secure
    }

    pub(crate) fn get_preferred_ports(&self) -> &[u16] {
        &self.preferred_ports
    }
}

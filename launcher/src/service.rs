//! A launched (or URL-given) backend.

use std::{
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    sync::{
        Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use nix::sys::signal::Signal;

use crate::{
    Backend, LaunchError, LaunchOptions, Secure, Via,
    docker::{self, Compose},
    error::ServerOutput,
    locate::{self, Programs},
    native,
    ports::{self, PortLease},
    process::{self, NodeSpec, Running, Watchdog, log_tail},
};

/// How a [`Service`] is provided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// Given by URL (`SHEDLOCK_*_URL` or [`LaunchOptions::url`]); not owned.
    External,
    /// Native processes owned by this launcher.
    Native,
    /// Docker (compose services or a private container).
    Docker,
}

/// A running backend: its URL and, when the launcher started it, the processes behind it.
///
/// Dropping it (or [`stop`](Self::stop)) stops the servers and removes their temp dir. A
/// watchdog process also stops them if this process dies without dropping it (a panic with
/// `panic = "abort"`, a signal, or a `static` such as [`shared`](crate::shared)).
///
/// Its `Debug` output hides a password in the URL (a URL given by the environment may carry one).
pub struct Service {
    backend: Backend,
    url: String,
    server: String,
    addrs: Vec<SocketAddr>,
    mode: Mode,
    ready_timeout: Duration,
    started_in: Duration,
    secure: Option<Secure>,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("backend", &self.backend)
            .field("url", &redact_url(&self.url))
            .field("server", &self.server)
            .field("addrs", &self.addrs)
            .field("mode", &self.mode)
            .field("ready_timeout", &self.ready_timeout)
            .field("started_in", &self.started_in)
            .field("secure", &self.secure)
            .field("inner", &self.inner)
            .finish()
    }
}

/// `scheme://user:secret@host/...` as `scheme://user:***@host/...`; other URLs unchanged.
pub(crate) fn redact_url(url: &str) -> String {
    // A cluster's URL is its nodes' URLs joined by commas (a secure Redis Cluster's each carry
    // the password).
    url.split(',').map(redact_one).collect::<Vec<_>>().join(",")
}

fn redact_one(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else { return url.to_owned() };
    match userinfo.split_once(':') {
        Some((user, _secret)) => format!("{scheme}://{user}:***@{host}{tail}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod redact_tests {
    use super::redact_url;

    #[test]
    fn passwords_in_urls_are_hidden() {
        assert_eq!(
            redact_url("postgres://app:s3cr3t@db:5432/x?sslmode=disable"),
            "postgres://app:***@db:5432/x?sslmode=disable"
        );
        assert_eq!(
            redact_url("mysql://root@127.0.0.1:3306/shedlock"),
            "mysql://root@127.0.0.1:3306/shedlock"
        );
        assert_eq!(redact_url("redis://:pw@h:6379"), "redis://:***@h:6379");
        assert_eq!(redact_url("127.0.0.1:2181"), "127.0.0.1:2181");
        assert_eq!(redact_url("http://h:1/p@q"), "http://h:1/p@q");
        assert_eq!(
            redact_url("rediss://app:pw@h:1,rediss://app:pw@h:2,rediss://app:pw@h:3"),
            "rediss://app:***@h:1,rediss://app:***@h:2,rediss://app:***@h:3"
        );
        assert_eq!(redact_url("mongodb://u:pw@h1:1,h2:2/db"), "mongodb://u:***@h1:1,h2:2/db");
    }
}

#[derive(Debug)]
enum Inner {
    External,
    Sqlite {
        dir: PathBuf,
        _watchdog: Option<Watchdog>,
    },
    Native(Native),
    Compose(Compose),
    #[cfg(feature = "docker")]
    Container(Box<docker::containers::Running>),
    Stopped,
}

#[derive(Debug)]
struct Native {
    dir: PathBuf,
    specs: Vec<NodeSpec>,
    nodes: Vec<Option<Running>>,
    watchdog: Option<Watchdog>,
    use_watchdog: bool,
    lease: Option<PortLease>,
}

/// What `cargo xtask services up` records about a server left running after the launcher exits
/// (see [`Service::detach`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DetachedService {
    /// The backend.
    pub backend: Backend,
    /// Its URL.
    pub url: String,
    /// The process groups of its nodes, with the signal number that stops each gracefully.
    pub process_groups: Vec<(i32, i32)>,
    /// Its temp dir, removed by [`stop`](Self::stop).
    pub dir: Option<PathBuf>,
    /// For docker mode: the compose file, profile and services, if this launch started them.
    pub compose: Option<(PathBuf, String, Vec<String>)>,
}

impl DetachedService {
    /// Rebuilds a record (as read back from a state file).
    pub fn new(
        backend: Backend,
        url: String,
        process_groups: Vec<(i32, i32)>,
        dir: Option<PathBuf>,
        compose: Option<(PathBuf, String, Vec<String>)>,
    ) -> Self {
        DetachedService { backend, url, process_groups, dir, compose }
    }

    /// True while any of its processes is alive; for SQLite (no process), while its dir exists;
    /// for docker mode, always (compose keeps the services).
    pub fn is_running(&self) -> bool {
        if self.compose.is_some() {
            return true;
        }
        if self.process_groups.is_empty() {
            return self.dir.as_ref().is_some_and(|d| d.exists());
        }
        self.process_groups.iter().any(|(g, _)| process::group_alive(*g))
    }

    /// Stops its processes (graceful signal, SIGKILL after 10 s), or its compose services, and
    /// removes its temp dir.
    pub fn stop(&self) {
        for (g, sig) in &self.process_groups {
            let sig = Signal::try_from(*sig).unwrap_or(Signal::SIGTERM);
            process::signal_group(*g, Some(sig));
        }
        for (g, sig) in &self.process_groups {
            let sig = Signal::try_from(*sig).unwrap_or(Signal::SIGTERM);
            process::stop_group(*g, sig, Duration::from_secs(10), None);
        }
        if let Some((file, profile, services)) = &self.compose {
            let _ = docker::run_with_timeout(
                std::process::Command::new("docker")
                    .arg("compose")
                    .arg("-f")
                    .arg(file)
                    .args(["--profile", profile, "stop"])
                    .args(services),
                Duration::from_secs(120),
            );
        }
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

static RUN_COUNTER: AtomicU32 = AtomicU32::new(0);

/// A fresh directory for one launch: `<tmp>/shedlock-<backend>-<pid>-<n>-<nanos>`, mode 0755 so
/// that servers running as their system user can reach their subdirectory.
fn run_dir(backend: Backend) -> Result<PathBuf, LaunchError> {
    use std::os::unix::fs::PermissionsExt;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "shedlock-{}-{}-{}-{}",
        backend.name(),
        std::process::id(),
        RUN_COUNTER.fetch_add(1, Ordering::Relaxed),
        nanos
    ));
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)))
        .map_err(|e| LaunchError::io(backend.name(), format!("creating {}", dir.display()), e))?;
    Ok(dir)
}

fn port_conflict(log: &str) -> bool {
    let l = log.to_ascii_lowercase();
    l.contains("address already in use") || l.contains("eaddrinuse") || l.contains("address in use")
}

enum WaitError {
    PortConflict(String),
    Fatal(LaunchError),
}

/// Waits until every node answers its probe; fails fast if one exits.
fn wait_native(
    backend: Backend,
    nodes: &mut [Option<Running>],
    limit: Duration,
) -> Result<(), WaitError> {
    let start = Instant::now();
    let mut delay = Duration::from_millis(10);
    loop {
        for node in nodes.iter_mut().flatten() {
            if let Some(status) = node.exited() {
                let tail = log_tail(&node.spec.log, 40);
                if port_conflict(&tail) {
                    return Err(WaitError::PortConflict(tail));
                }
                return Err(WaitError::Fatal(LaunchError::StartFailed {
                    backend: backend.name(),
                    reason: format!("it exited ({status}) before it was ready"),
                    output: ServerOutput::new(
                        node.spec.command_line(),
                        node.spec.log.clone(),
                        tail,
                    ),
                }));
            }
        }
        let failing =
            nodes.iter().flatten().find_map(|n| n.spec.probe.check().err().map(|e| (n, e)));
        let Some((node, last_probe)) = failing else {
            return Ok(());
        };
        if start.elapsed() > limit {
            let tail = log_tail(&node.spec.log, 40);
            if port_conflict(&tail) {
                return Err(WaitError::PortConflict(tail));
            }
            return Err(WaitError::Fatal(LaunchError::NotReady {
                backend: backend.name(),
                waited: start.elapsed(),
                last_probe,
                output: ServerOutput::new(node.spec.command_line(), node.spec.log.clone(), tail),
            }));
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(100));
    }
}

/// Stops every node: all graceful signals first, then waits for each group.
///
/// An etcd cluster is stopped one node at a time: a leader stopping at the same moment as its
/// followers waits ~6 s for a leadership transfer that cannot succeed.
fn stop_nodes(nodes: &mut [Option<Running>]) {
    let one_by_one =
        nodes.iter().flatten().any(|n| matches!(n.spec.probe, crate::probe::Probe::Etcd(_)));
    if !one_by_one {
        for node in nodes.iter().flatten() {
            process::signal_group(node.pgid(), Some(node.spec.stop_signal));
        }
    }
    for node in nodes.iter_mut() {
        if let Some(mut n) = node.take() {
            let pgid = n.pgid();
            process::stop_group(
                pgid,
                n.spec.stop_signal,
                Duration::from_secs(15),
                Some(&mut n.child),
            );
        }
    }
}

fn spawn_nodes(backend: Backend, specs: &[NodeSpec]) -> Result<Vec<Option<Running>>, LaunchError> {
    let mut nodes = Vec::with_capacity(specs.len());
    for spec in specs {
        match process::spawn(backend.name(), spec) {
            Ok(r) => nodes.push(Some(r)),
            Err(e) => {
                stop_nodes(&mut nodes);
                return Err(e);
            }
        }
    }
    Ok(nodes)
}

fn pgids(nodes: &[Option<Running>]) -> Vec<i32> {
    nodes.iter().flatten().map(Running::pgid).collect()
}

impl Native {
    fn arm(&mut self, backend: Backend) -> Result<(), LaunchError> {
        if let Some(w) = self.watchdog.take() {
            w.disarm();
        }
        if self.use_watchdog {
            self.watchdog = Some(Watchdog::spawn(
                backend.name(),
                &pgids(&self.nodes),
                Some(&self.dir),
                self.lease.as_ref().map_or(&[], |l| l.files()),
            )?);
        }
        Ok(())
    }

    fn start(
        backend: Backend,
        programs: &Programs,
        dir: &Path,
        opts: &LaunchOptions,
        secure: Option<&Secure>,
    ) -> Result<Native, LaunchError> {
        native::prepare(backend, programs, dir, secure)?;
        let needed = native::ports_needed(backend);
        let mut last = String::new();
        const ATTEMPTS: u32 = 5;
        for attempt in 0..ATTEMPTS {
            let lease = if attempt == 0 {
                ports::lease_with(opts.get_preferred_ports(), needed)
            } else {
                ports::lease(needed)
            }
            .map_err(|e| LaunchError::io(backend.name(), "finding free loopback ports", e))?;
            let specs = native::nodes(
                backend,
                programs,
                dir,
                lease.ports(),
                opts.get_placement(),
                opts.get_durable(),
                secure,
            )?;
            let nodes = spawn_nodes(backend, &specs)?;
            let mut native = Native {
                dir: dir.to_path_buf(),
                specs,
                nodes,
                watchdog: None,
                use_watchdog: opts.get_watchdog(),
                lease: Some(lease),
            };
            if let Err(e) = native.arm(backend) {
                native.shutdown();
                return Err(e);
            }
            match wait_native(backend, &mut native.nodes, opts.get_ready_timeout()) {
                Ok(()) => {
                    let formed =
                        native::after_first_start(backend, programs, dir, &native.specs, secure)
                            .and_then(|()| {
                                native::settle(backend, &native.specs, opts.get_ready_timeout())
                            });
                    if let Err(e) = formed {
                        native.shutdown();
                        return Err(e);
                    }
                    return Ok(native);
                }
                Err(WaitError::PortConflict(tail)) => {
                    native.shutdown();
                    last = format!("port taken: {}", tail.lines().last().unwrap_or_default());
                }
                Err(WaitError::Fatal(e)) => {
                    native.shutdown();
                    return Err(e);
                }
            }
        }
        Err(LaunchError::NoFreePort { backend: backend.name(), attempts: ATTEMPTS, last })
    }

    /// Stops the processes (not the dir).
    fn shutdown(&mut self) {
        if let Some(w) = self.watchdog.take() {
            w.disarm();
        }
        stop_nodes(&mut self.nodes);
    }
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The first `host:port` of a URL or connect string, if its host is an IP or `localhost`.
fn parse_addr(url: &str) -> Option<SocketAddr> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let hostport = rest.split(['/', '?', ',']).next()?;
    if let Ok(a) = hostport.parse::<SocketAddr>() {
        return Some(a);
    }
    let (host, port) = hostport.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    match host {
        "localhost" => Some(SocketAddr::from((Ipv4Addr::LOCALHOST, port))),
        _ => None,
    }
}

impl Service {
    /// Starts `backend` as `options` say — or, when a URL is given ([`LaunchOptions::url`], or
    /// the backend's [`env_var`](Backend::env_var) unless [`LaunchOptions::ignore_env`]), uses
    /// that URL and starts nothing.
    ///
    /// Blocking: call it from a plain thread, `spawn_blocking`, or before building a runtime.
    pub fn start(backend: Backend, options: &LaunchOptions) -> Result<Service, LaunchError> {
        let began = Instant::now();
        if let Some(url) = options.get_url() {
            return Ok(Service::external(backend, url.to_owned()));
        }
        if !options.get_ignore_env()
            && let Ok(url) = std::env::var(backend.env_var())
            && !url.trim().is_empty()
        {
            return Ok(Service::external(backend, url.trim().to_owned()));
        }
        let mut service = match options.get_via() {
            Via::Native => Service::start_native(backend, options),
            Via::Docker => Service::start_docker(backend, options),
            Via::Auto => match Service::start_native(backend, options) {
                Err(e) if e.is_not_installed() => match docker::engine() {
                    Ok(()) => Service::start_docker(backend, options),
                    Err(reason) => Err(LaunchError::NoWayToStart {
                        backend: backend.name(),
                        native: Box::new(e),
                        docker: reason,
                    }),
                },
                other => other,
            },
        }?;
        service.started_in = began.elapsed();
        Ok(service)
    }

    fn external(backend: Backend, url: String) -> Service {
        Service {
            backend,
            addrs: parse_addr(&url).into_iter().collect(),
            url,
            server: format!(
                "the server at ${} (started elsewhere; not probed for its version)",
                backend.env_var()
            ),
            mode: Mode::External,
            ready_timeout: Duration::ZERO,
            started_in: Duration::ZERO,
            secure: None,
            inner: Mutex::new(Inner::External),
        }
    }

    fn start_native(backend: Backend, options: &LaunchOptions) -> Result<Service, LaunchError> {
        let programs = locate::programs(backend, &options.get_backends_dir())?;
        let server = locate::describe(backend, &programs, &options.get_backends_dir());
        let dir = run_dir(backend)?;
        if let Programs::Sqlite = programs {
            // No process to stop, but the dir goes when this process does.
            let watchdog = if options.get_watchdog() {
                Some(Watchdog::spawn(backend.name(), &[], Some(&dir), &[])?)
            } else {
                None
            };
            return Ok(Service {
                backend,
                url: format!("sqlite://{}?mode=rwc", dir.join("shedlock.db").display()),
                server,
                addrs: Vec::new(),
                mode: Mode::Native,
                ready_timeout: options.get_ready_timeout(),
                started_in: Duration::ZERO,
                secure: None,
                inner: Mutex::new(Inner::Sqlite { dir, _watchdog: watchdog }),
            });
        }
        let secure = if options.get_secure() {
            let cluster = backend.node_count() > 1 && backend != Backend::RedisCluster;
            if !options.get_placement().is_empty() || cluster {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(LaunchError::Unsupported {
                    backend: backend.name(),
                    what: "a secure launch of a cluster (other than the Redis Cluster) or with a \
                           placement: servers on loopback only"
                        .to_owned(),
                });
            }
            match Secure::generate(backend, &dir) {
                Ok(s) => Some(s),
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(e);
                }
            }
        } else {
            None
        };
        match Native::start(backend, &programs, &dir, options, secure.as_ref()) {
            Ok(native) => {
                let clients: Vec<SocketAddr> = native
                    .specs
                    .iter()
                    .take(backend.node_count())
                    .map(|s| s.probe.addr())
                    .collect();
                let url = match &secure {
                    Some(s) if !clients.is_empty() => s.service_url(&clients),
                    _ => backend.url_for_addrs(&clients),
                };
                Ok(Service {
                    backend,
                    url,
                    server,
                    addrs: native.specs.iter().map(|s| s.probe.addr()).collect(),
                    mode: Mode::Native,
                    ready_timeout: options.get_ready_timeout(),
                    started_in: Duration::ZERO,
                    secure,
                    inner: Mutex::new(Inner::Native(native)),
                })
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    fn start_docker(backend: Backend, options: &LaunchOptions) -> Result<Service, LaunchError> {
        if options.get_secure() {
            return Err(LaunchError::Unsupported {
                backend: backend.name(),
                what: "a secure launch with Docker: docker-compose.yml's servers run without \
                       authentication or TLS; a secure launch needs a native server"
                    .to_owned(),
            });
        }
        if !options.get_placement().is_empty() {
            return Err(LaunchError::Unsupported {
                backend: backend.name(),
                what: "a placement (network namespaces) with Docker: it needs native servers"
                    .to_owned(),
            });
        }
        if backend == Backend::Sqlite {
            return Service::start_native(backend, options);
        }
        if options.get_durable() && backend == Backend::Postgres {
            return Err(LaunchError::Unsupported {
                backend: backend.name(),
                what: "a durable server with Docker: it needs a native one (docker-compose.yml's \
                       runs with fsync=off)"
                    .to_owned(),
            });
        }
        #[cfg(feature = "docker")]
        if let Some(started) = docker::containers::start(backend, options.get_ready_timeout()) {
            let (running, url) = started?;
            return Ok(Service {
                backend,
                addrs: running.probes.iter().map(|p| p.addr()).collect(),
                url,
                server: docker::describe(backend, "a private container"),
                mode: Mode::Docker,
                ready_timeout: options.get_ready_timeout(),
                started_in: Duration::ZERO,
                secure: None,
                inner: Mutex::new(Inner::Container(Box::new(running))),
            });
        }
        let compose = Compose::up(backend, options.get_ready_timeout())?;
        Ok(Service {
            backend,
            url: backend.url_for_ports(backend.compose_ports()),
            server: docker::describe(backend, "docker-compose.yml"),
            addrs: compose.probes.iter().map(|p| p.addr()).collect(),
            mode: Mode::Docker,
            ready_timeout: options.get_ready_timeout(),
            started_in: Duration::ZERO,
            secure: None,
            inner: Mutex::new(Inner::Compose(compose)),
        })
    }

    /// What a secure launch made ([`LaunchOptions::secure`]): the CA and the credentials.
    /// `None` for every other launch.
    pub fn secure(&self) -> Option<&Secure> {
        self.secure.as_ref()
    }

    /// Asks every server process to reload its configuration (SIGHUP), e.g. NATS after a
    /// test rewrote [`Secure::app_permissions_path`]. Native services only; returns once the
    /// signal is sent (NATS applies it within milliseconds: probe for the change).
    pub fn reload(&self) -> Result<(), LaunchError> {
        let inner = lock(&self.inner);
        match &*inner {
            Inner::Native(n) => {
                for node in n.nodes.iter().flatten() {
                    let pid = nix::unistd::Pid::from_raw(node.pgid());
                    let _ = nix::sys::signal::kill(pid, Signal::SIGHUP);
                }
                Ok(())
            }
            _ => Err(LaunchError::Unsupported {
                backend: self.backend.name(),
                what: "a configuration reload of a server this launcher did not start".to_owned(),
            }),
        }
    }

    /// For a secure service: the environment variable (`SHEDLOCK_SECURE_<BACKEND>`) that makes
    /// [`shared_secure`](crate::shared_secure) in a child process use this very server (its
    /// address, credentials and CA), as the conformance kit's node processes must. It carries
    /// the passwords: give it to child processes only, never print it.
    pub fn secure_env(&self) -> Option<(String, String)> {
        let s = self.secure.as_ref()?;
        let addrs = self.addrs();
        if addrs.is_empty() {
            return None;
        }
        Some((Secure::env_var(self.backend), s.encode(&addrs)))
    }

    /// The service a [`secure_env`](Self::secure_env) variable names, if this process has one.
    pub(crate) fn from_secure_env(backend: Backend) -> Option<Service> {
        let value = std::env::var(Secure::env_var(backend)).ok()?;
        let (secure, addrs) = Secure::decode(backend, &value)?;
        let mut service = Service::external(backend, secure.service_url(&addrs));
        let first = addrs.first().map(ToString::to_string).unwrap_or_default();
        service.server = format!("the secure server of the parent process at {first}");
        service.addrs = addrs;
        service.secure = Some(secure);
        Some(service)
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// What runs as this backend, for reports: the product and its version, and whether it is
    /// a stand-in (`dynalite 4.0.1, a DynamoDB stand-in (not DynamoDB), native processes on
    /// loopback`; `PostgreSQL 15.14, native processes on loopback`; the image of a docker run).
    /// Never the URL (it may hold credentials).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The URL to connect to (see [`Backend`] for each backend's form; a secure launch's is the
    /// application user's, over TLS, with its password).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The client address of the first node (`None` for SQLite, or a URL whose host is a name).
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addrs.first().copied()
    }

    /// The client addresses of every node (one per node of a cluster).
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.addrs.iter().copied().take(self.backend.node_count().max(1)).collect()
    }

    /// The nodes that lead right now, by index into [`addrs`](Self::addrs): the Redis
    /// Cluster's masters, the etcd cluster's leader, the ZooKeeper ensemble's leader. Each node
    /// is asked with a 300 ms limit, so one that is paused or cut off is left out. Empty for
    /// other backends.
    pub fn primaries(&self) -> Vec<usize> {
        crate::roles::primaries(self.backend, &self.addrs())
    }

    /// How it is provided.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// How long [`start`](Self::start) took, readiness included.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// The temp dir holding its data and logs (native mode and SQLite).
    pub fn dir(&self) -> Option<PathBuf> {
        match &*lock(&self.inner) {
            Inner::Native(n) => Some(n.dir.clone()),
            Inner::Sqlite { dir, .. } => Some(dir.clone()),
            _ => None,
        }
    }

    /// The pids of the running server processes (native mode), `None` for a stopped node.
    pub fn pids(&self) -> Vec<Option<u32>> {
        match &*lock(&self.inner) {
            Inner::Native(n) => n.nodes.iter().map(|r| r.as_ref().map(|r| r.child.id())).collect(),
            _ => Vec::new(),
        }
    }

    /// The server log files (native mode).
    pub fn logs(&self) -> Vec<PathBuf> {
        match &*lock(&self.inner) {
            Inner::Native(n) => n.specs.iter().map(|s| s.log.clone()).collect(),
            _ => Vec::new(),
        }
    }

    fn not_owned(&self, action: &'static str) -> LaunchError {
        LaunchError::NotOwned {
            backend: self.backend.name(),
            action,
            url: redact_url(&self.url),
            env_var: self.backend.env_var(),
        }
    }

    /// Restarts every node on the same ports with the same data (a graceful stop, then a start
    /// and the readiness wait). memcached and the S3 server (moto) keep no data across it.
    pub fn restart(&self) -> Result<(), LaunchError> {
        let mut inner = lock(&self.inner);
        match &mut *inner {
            Inner::External => Err(self.not_owned("restart")),
            Inner::Sqlite { .. } => Ok(()),
            Inner::Native(n) => {
                if let Some(w) = n.watchdog.take() {
                    w.disarm();
                }
                stop_nodes(&mut n.nodes);
                n.nodes = spawn_nodes(self.backend, &n.specs)?;
                n.arm(self.backend)?;
                wait_native(self.backend, &mut n.nodes, self.ready_timeout).map_err(
                    |e| match e {
                        WaitError::Fatal(e) => e,
                        WaitError::PortConflict(tail) => LaunchError::NoFreePort {
                            backend: self.backend.name(),
                            attempts: 1,
                            last: format!("its port was taken while it was down: {tail}"),
                        },
                    },
                )?;
                native::settle(self.backend, &n.specs, self.ready_timeout)
            }
            Inner::Compose(c) => c.restart(self.backend, self.ready_timeout),
            #[cfg(feature = "docker")]
            Inner::Container(c) => c.restart(self.backend, self.ready_timeout),
            Inner::Stopped => Err(LaunchError::Unsupported {
                backend: self.backend.name(),
                what: "restart of a stopped service".to_owned(),
            }),
        }
    }

    /// Stops node `index` of a native cluster (SIGTERM-equivalent, then SIGKILL after 15 s), e.g.
    /// to test fail-over. [`start_node`](Self::start_node) brings it back.
    pub fn stop_node(&self, index: usize) -> Result<(), LaunchError> {
        let mut inner = lock(&self.inner);
        match &mut *inner {
            Inner::Native(n) if index < n.nodes.len() => {
                stop_nodes(&mut n.nodes[index..=index]);
                Ok(())
            }
            _ => Err(LaunchError::Unsupported {
                backend: self.backend.name(),
                what: format!("stop_node({index}) needs a native service with that many nodes"),
            }),
        }
    }

    /// Kills node `index` of a native cluster at once (SIGKILL: no shutdown, no hand-over to
    /// replicas), as a crash would, and waits until it is gone.
    /// [`start_node`](Self::start_node) brings it back.
    pub fn kill_node(&self, index: usize) -> Result<(), LaunchError> {
        let mut inner = lock(&self.inner);
        match &mut *inner {
            Inner::Native(n) if index < n.nodes.len() => {
                if let Some(mut node) = n.nodes[index].take() {
                    let pgid = node.pgid();
                    process::stop_group(
                        pgid,
                        Signal::SIGKILL,
                        Duration::from_secs(15),
                        Some(&mut node.child),
                    );
                }
                Ok(())
            }
            _ => Err(LaunchError::Unsupported {
                backend: self.backend.name(),
                what: format!("kill_node({index}) needs a native service with that many nodes"),
            }),
        }
    }

    /// Starts node `index` again (same port and data) and waits until it is ready (for a Redis
    /// Cluster: until every node reports `cluster_state:ok` and every replica has synced).
    pub fn start_node(&self, index: usize) -> Result<(), LaunchError> {
        let mut inner = lock(&self.inner);
        match &mut *inner {
            Inner::Native(n) if index < n.nodes.len() => {
                if n.nodes[index].is_none() {
                    n.nodes[index] = Some(process::spawn(self.backend.name(), &n.specs[index])?);
                    n.arm(self.backend)?;
                }
                wait_native(self.backend, &mut n.nodes[index..=index], self.ready_timeout)
                    .map_err(|e| match e {
                        WaitError::Fatal(e) => e,
                        WaitError::PortConflict(tail) => LaunchError::NoFreePort {
                            backend: self.backend.name(),
                            attempts: 1,
                            last: tail,
                        },
                    })?;
                // A Redis Cluster node is ready once it has re-joined and, as a replica, synced
                // (a replica stopped mid-sync ignores SIGTERM until the sync ends).
                native::settle(self.backend, &n.specs, self.ready_timeout)
            }
            _ => Err(LaunchError::Unsupported {
                backend: self.backend.name(),
                what: format!("start_node({index}) needs a native service with that many nodes"),
            }),
        }
    }

    /// Stops the servers and removes their temp dir (idempotent; a URL-given service is left
    /// alone). Dropping the service does the same.
    pub fn stop(&self) -> Result<(), LaunchError> {
        let taken = std::mem::replace(&mut *lock(&self.inner), Inner::Stopped);
        match taken {
            Inner::External => *lock(&self.inner) = Inner::External,
            Inner::Sqlite { dir, _watchdog } => {
                if let Some(w) = _watchdog {
                    w.disarm();
                }
                let _ = std::fs::remove_dir_all(dir);
            }
            Inner::Native(mut n) => {
                n.shutdown();
                let _ = std::fs::remove_dir_all(&n.dir);
            }
            Inner::Compose(c) => c.stop(),
            #[cfg(feature = "docker")]
            Inner::Container(c) => drop(c),
            Inner::Stopped => {}
        }
        Ok(())
    }

    /// Leaves the servers running after this process exits (no watchdog) and returns what is
    /// needed to stop them later with [`DetachedService::stop`].
    pub fn detach(self) -> DetachedService {
        let taken = std::mem::replace(&mut *lock(&self.inner), Inner::Stopped);
        let mut record = DetachedService {
            backend: self.backend,
            url: self.url.clone(),
            process_groups: Vec::new(),
            dir: None,
            compose: None,
        };
        match taken {
            Inner::Native(mut n) => {
                if let Some(w) = n.watchdog.take() {
                    w.disarm();
                }
                // From now on the servers' own binds protect their ports.
                drop(n.lease.take());
                record.process_groups = n
                    .nodes
                    .iter()
                    .flatten()
                    .map(|r| (r.pgid(), r.spec.stop_signal as i32))
                    .collect();
                record.dir = Some(n.dir.clone());
                // Dropping a std Child neither kills nor waits for it.
                n.nodes.clear();
            }
            Inner::Sqlite { dir, _watchdog } => {
                if let Some(w) = _watchdog {
                    w.disarm();
                }
                record.dir = Some(dir);
            }
            Inner::Compose(c) => {
                if c.owned {
                    record.compose = Some((c.file.clone(), c.profile.clone(), c.services.clone()));
                }
            }
            #[cfg(feature = "docker")]
            Inner::Container(c) => {
                // A testcontainers container is removed on drop; keep it alive for good.
                std::mem::forget(c);
            }
            Inner::External | Inner::Stopped => {}
        }
        record
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_parsed_from_urls() {
        assert_eq!(
            parse_addr("postgres://u:p@127.0.0.1:5432/db"),
            Some("127.0.0.1:5432".parse().unwrap())
        );
        assert_eq!(
            parse_addr("127.0.0.1:2181,127.0.0.1:2182"),
            Some("127.0.0.1:2181".parse().unwrap())
        );
        assert_eq!(parse_addr("redis://localhost:6379"), Some("127.0.0.1:6379".parse().unwrap()));
        assert_eq!(parse_addr("http://db.example:80"), None);
        assert_eq!(parse_addr("mongodb://[::1]:27017/?x=y"), Some("[::1]:27017".parse().unwrap()));
    }

    #[test]
    fn port_conflicts_are_recognised() {
        assert!(port_conflict("bind: Address already in use"));
        assert!(port_conflict("Error: listen EADDRINUSE: address already in use 127.0.0.1:1"));
        assert!(!port_conflict("FATAL: data directory has wrong ownership"));
    }
}

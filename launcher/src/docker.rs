//! Docker mode: the services of `docker-compose.yml` (through the `docker compose` CLI), or, with
//! the `docker` cargo feature, private containers through testcontainers.

use std::{
    net::{Ipv4Addr, SocketAddr, SocketAddrV4},
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::{Backend, LaunchError, locate::workspace_root, probe::Probe};

fn local(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
}

/// Runs a command with a time limit; returns (success, combined output tail).
pub(crate) fn run_with_timeout(
    cmd: &mut Command,
    limit: Duration,
) -> Result<(bool, String), String> {
    let out_path = std::env::temp_dir().join(format!(
        "shedlock-launcher-cmd-{}-{}.log",
        std::process::id(),
        Instant::now().elapsed().as_nanos() ^ u128::from(rand_u32())
    ));
    let file = std::fs::File::create(&out_path)
        .map_err(|e| format!("creating {}: {e}", out_path.display()))?;
    let file2 = file.try_clone().map_err(|e| e.to_string())?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(file2)
        .spawn()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(e.to_string()),
        }
    };
    let text = std::fs::read_to_string(&out_path).unwrap_or_default();
    let _ = std::fs::remove_file(&out_path);
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(20)..].join("\n");
    match status {
        Some(s) => Ok((s.success(), tail)),
        None => Err(format!("timed out after {limit:?}: {tail}")),
    }
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u8(0);
    h.finish() as u32
}

/// `Ok` when a Docker engine answers `docker info`.
pub(crate) fn engine() -> Result<(), String> {
    match run_with_timeout(
        Command::new("docker").args(["info", "--format", "{{.ServerVersion}}"]),
        Duration::from_secs(20),
    ) {
        Ok((true, _)) => Ok(()),
        Ok((false, out)) => Err(format!("`docker info` failed: {}", out.trim())),
        Err(e) => Err(format!("`docker info`: {e}")),
    }
}

/// The compose command: `docker compose` (Compose v2). The old `docker-compose` (v1) cannot
/// read `docker-compose.yml` (its top-level `name:`, `depends_on` conditions), so it is not
/// tried.
fn compose_command() -> Result<Command, String> {
    match run_with_timeout(
        Command::new("docker").args(["compose", "version"]),
        Duration::from_secs(20),
    ) {
        Ok((true, _)) => {
            let mut c = Command::new("docker");
            c.arg("compose");
            Ok(c)
        }
        _ => Err("`docker compose` (Compose v2) is not installed".to_owned()),
    }
}

/// `$SHEDLOCK_COMPOSE_FILE`, else `<workspace>/docker-compose.yml`.
pub(crate) fn compose_file() -> Result<PathBuf, String> {
    let file = std::env::var_os("SHEDLOCK_COMPOSE_FILE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| workspace_root().map(|r| r.join("docker-compose.yml")))
        .ok_or("no workspace root found for docker-compose.yml (set SHEDLOCK_COMPOSE_FILE)")?;
    if file.is_file() { Ok(file) } else { Err(format!("{} does not exist", file.display())) }
}

/// The readiness probes of a backend whose client ports are `ports` (docker images).
pub(crate) fn probes(backend: Backend, ports: &[u16], nats_monitor: u16) -> Vec<Probe> {
    ports
        .iter()
        .map(|p| {
            let a = local(*p);
            match backend {
                Backend::Postgres => Probe::Postgres(a),
                Backend::MariaDb => Probe::MySql(a),
                Backend::Redis | Backend::Valkey | Backend::RedisCluster => Probe::Redis(a),
                Backend::Memcached => Probe::Memcached(a),
                Backend::Nats => Probe::Nats { client: a, monitor: local(nats_monitor) },
                Backend::MongoDb => Probe::MongoDb(a),
                Backend::DynamoDb => Probe::DynamoDb(a),
                Backend::S3 => Probe::HttpOk { addr: a, path: "/minio/health/ready" },
                Backend::Etcd | Backend::EtcdCluster => Probe::Etcd(a),
                Backend::ZooKeeper | Backend::ZooKeeperEnsemble | Backend::Sqlite => {
                    Probe::ZooKeeper(a)
                }
            }
        })
        .collect()
}

/// (image, tag, container client port, env, cmd).
pub(crate) type ImageSpec =
    (&'static str, &'static str, u16, Vec<(&'static str, &'static str)>, Vec<&'static str>);

/// The image of a backend: the same images as docker-compose.yml.
pub(crate) fn image(backend: Backend) -> Option<ImageSpec> {
    Some(match backend {
        Backend::Postgres => {
            ("postgres", "15.10", 5432, vec![("POSTGRES_HOST_AUTH_METHOD", "trust")], vec![])
        }
        Backend::MariaDb => (
            "mariadb",
            "10.11.10",
            3306,
            vec![("MARIADB_ALLOW_EMPTY_ROOT_PASSWORD", "1"), ("MARIADB_DATABASE", "shedlock")],
            vec![],
        ),
        Backend::Redis => {
            ("redis", "7.4.1", 6379, vec![], vec!["redis-server", "--appendonly", "yes"])
        }
        Backend::Valkey => {
            ("valkey/valkey", "8.0.1", 6379, vec![], vec!["valkey-server", "--appendonly", "yes"])
        }
        Backend::Memcached => ("memcached", "1.6.32", 11211, vec![], vec![]),
        Backend::Nats => {
            ("nats", "2.11.0-alpine", 4222, vec![], vec!["-js", "-sd", "/data", "-m", "8222"])
        }
        Backend::MongoDb => ("mongo", "7.0.16", 27017, vec![], vec![]),
        Backend::DynamoDb => (
            "amazon/dynamodb-local",
            "2.5.3",
            8000,
            vec![],
            vec!["-jar", "DynamoDBLocal.jar", "-sharedDb", "-dbPath", "/tmp"],
        ),
        Backend::S3 => (
            "minio/minio",
            "RELEASE.2024-11-07T00-52-20Z",
            9000,
            vec![
                ("MINIO_ROOT_USER", "shedlock"),
                ("MINIO_ROOT_PASSWORD", "shedlock-test-secret-key-0123456789"),
            ],
            vec!["server", "/data"],
        ),
        Backend::Etcd => (
            "quay.io/coreos/etcd",
            "v3.5.17",
            2379,
            vec![],
            vec![
                "etcd",
                "--listen-client-urls",
                "http://0.0.0.0:2379",
                "--advertise-client-urls",
                "http://127.0.0.1:2379",
                "--data-dir",
                "/tmp/etcd",
            ],
        ),
        Backend::ZooKeeper => ("zookeeper", "3.8.4", 2181, vec![], vec![]),
        Backend::Sqlite
        | Backend::EtcdCluster
        | Backend::ZooKeeperEnsemble
        | Backend::RedisCluster => return None,
    })
}

/// What a docker launch of `backend` runs, for reports: its image (from the table the
/// launcher's containers use, which an xtask test keeps equal to docker-compose.yml's), and
/// `where` it runs.
pub(crate) fn describe(backend: Backend, r#where: &str) -> String {
    match image(backend) {
        Some((image, tag, ..)) => format!("{image}:{tag} ({where})"),
        None => format!("docker-compose.yml's {} services ({where})", backend.name()),
    }
}

/// The NATS monitoring port published by docker-compose.yml.
pub(crate) const COMPOSE_NATS_MONITOR: u16 = 18222;

/// Waits until every probe passes.
pub(crate) fn wait_ready(
    backend: Backend,
    probes: &[Probe],
    limit: Duration,
    what: &str,
) -> Result<(), LaunchError> {
    let start = Instant::now();
    loop {
        let failure = probes.iter().find_map(|p| p.check().err());
        match failure {
            None => return Ok(()),
            Some(last) if start.elapsed() > limit => {
                return Err(LaunchError::NotReady {
                    backend: backend.name(),
                    waited: start.elapsed(),
                    last_probe: last,
                    output: crate::error::ServerOutput::new(
                        what.to_owned(),
                        PathBuf::from("(see `docker compose logs`)"),
                        String::new(),
                    ),
                });
            }
            Some(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Services of docker-compose.yml used by one launch.
#[derive(Debug)]
pub(crate) struct Compose {
    pub(crate) file: PathBuf,
    pub(crate) profile: String,
    pub(crate) services: Vec<String>,
    /// True if this launch brought them up (and so takes them down).
    pub(crate) owned: bool,
    pub(crate) probes: Vec<Probe>,
}

fn docker_err(backend: Backend, reason: String) -> LaunchError {
    LaunchError::DockerUnavailable { backend: backend.name(), reason, env_var: backend.env_var() }
}

impl Compose {
    fn command(&self, args: &[&str]) -> Result<Command, String> {
        let mut c = compose_command()?;
        c.arg("-f").arg(&self.file).args(["--profile", &self.profile]).args(args);
        c.args(&self.services);
        Ok(c)
    }

    fn describe(&self, args: &[&str]) -> String {
        format!(
            "docker compose -f {} --profile {} {} {}",
            self.file.display(),
            self.profile,
            args.join(" "),
            self.services.join(" ")
        )
    }

    /// Uses the compose services of `backend`, bringing them up unless they already answer.
    pub(crate) fn up(backend: Backend, ready_timeout: Duration) -> Result<Compose, LaunchError> {
        let file = compose_file().map_err(|e| docker_err(backend, e))?;
        let mut compose = Compose {
            file,
            profile: backend.name().to_owned(),
            services: backend.compose_services().iter().map(|s| (*s).to_owned()).collect(),
            owned: false,
            probes: probes(backend, backend.compose_ports(), COMPOSE_NATS_MONITOR),
        };
        if compose.probes.iter().all(|p| p.check().is_ok()) {
            return Ok(compose);
        }
        engine().map_err(|e| docker_err(backend, e))?;
        let args = ["up", "-d", "--wait"];
        let mut cmd = compose.command(&args).map_err(|e| docker_err(backend, e))?;
        match run_with_timeout(&mut cmd, Duration::from_secs(600)) {
            Ok((true, _)) => {}
            Ok((false, out)) | Err(out) => {
                return Err(LaunchError::CommandFailed {
                    backend: backend.name(),
                    command: compose.describe(&args),
                    status: "failed".to_owned(),
                    output: out,
                });
            }
        }
        compose.owned = true;
        if let Some(init) = backend.compose_init() {
            compose.run_init(backend, init)?;
        }
        wait_ready(backend, &compose.probes, ready_timeout, &compose.describe(&args))?;
        Ok(compose)
    }

    /// `docker compose run --rm <init>`: the one-shot service that completes the backend.
    fn run_init(&self, backend: Backend, init: &str) -> Result<(), LaunchError> {
        let describe = format!(
            "docker compose -f {} --profile {} run --rm {init}",
            self.file.display(),
            self.profile
        );
        let mut cmd = compose_command().map_err(|e| docker_err(backend, e))?;
        cmd.arg("-f").arg(&self.file).args(["--profile", &self.profile, "run", "--rm", init]);
        match run_with_timeout(&mut cmd, Duration::from_secs(300)) {
            Ok((true, _)) => Ok(()),
            Ok((false, out)) | Err(out) => Err(LaunchError::CommandFailed {
                backend: backend.name(),
                command: describe,
                status: "failed".to_owned(),
                output: out,
            }),
        }
    }

    /// `docker compose restart` (same ports, the container's data kept), then waits for readiness.
    pub(crate) fn restart(
        &self,
        backend: Backend,
        ready_timeout: Duration,
    ) -> Result<(), LaunchError> {
        let args = ["restart"];
        let mut cmd = self.command(&args).map_err(|e| docker_err(backend, e))?;
        match run_with_timeout(&mut cmd, Duration::from_secs(120)) {
            Ok((true, _)) => {
                wait_ready(backend, &self.probes, ready_timeout, &self.describe(&args))
            }
            Ok((false, out)) | Err(out) => Err(LaunchError::CommandFailed {
                backend: backend.name(),
                command: self.describe(&args),
                status: "failed".to_owned(),
                output: out,
            }),
        }
    }

    /// `docker compose stop` if this launch brought the services up.
    pub(crate) fn stop(&self) {
        if self.owned
            && let Ok(mut cmd) = self.command(&["stop"])
        {
            let _ = run_with_timeout(&mut cmd, Duration::from_secs(120));
        }
    }
}

/// Private containers through testcontainers (cargo feature `docker`).
#[cfg(feature = "docker")]
pub(crate) mod containers {
    use std::time::Duration;

    use testcontainers::{
        Container, GenericImage, ImageExt,
        core::{IntoContainerPort, WaitFor},
        runners::SyncRunner,
    };

    use super::{image, local, probes};
    use crate::{Backend, LaunchError, ports::PortLease, probe::Probe};

    /// A running container with fixed host ports (so a restart keeps them).
    pub(crate) struct Running {
        pub(crate) container: Container<GenericImage>,
        pub(crate) probes: Vec<Probe>,
        pub(crate) _lease: PortLease,
    }

    impl std::fmt::Debug for Running {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Running").field("id", &self.container.id()).finish()
        }
    }

    fn tc_err(backend: Backend, e: impl std::fmt::Display) -> LaunchError {
        LaunchError::DockerUnavailable {
            backend: backend.name(),
            reason: e.to_string(),
            env_var: backend.env_var(),
        }
    }

    /// Starts a private container; `None` for backends that only compose provides (clusters).
    pub(crate) fn start(
        backend: Backend,
        ready_timeout: Duration,
    ) -> Option<Result<(Running, String), LaunchError>> {
        let (name, tag, port, env, cmd) = image(backend)?;
        Some((|| {
            let lease = crate::ports::lease(2)
                .map_err(|e| LaunchError::io(backend.name(), "leasing ports", e))?;
            let host = lease.ports()[0];
            let monitor = lease.ports()[1];
            let mut req = GenericImage::new(name, tag)
                .with_wait_for(WaitFor::Nothing)
                .with_mapped_port(host, port.tcp())
                .with_startup_timeout(ready_timeout);
            if backend == Backend::Nats {
                req = req.with_mapped_port(monitor, 8222.tcp());
            }
            for (k, v) in env {
                req = req.with_env_var(k, v);
            }
            if !cmd.is_empty() {
                req = req.with_cmd(cmd);
            }
            let container = req.start().map_err(|e| tc_err(backend, e))?;
            let probes = match backend {
                Backend::S3 => {
                    vec![Probe::HttpOk { addr: local(host), path: "/minio/health/ready" }]
                }
                _ => probes(backend, &[host], monitor),
            };
            super::wait_ready(
                backend,
                &probes,
                ready_timeout,
                &format!("testcontainers {name}:{tag}"),
            )?;
            Ok((Running { container, probes, _lease: lease }, backend.url_for_ports(&[host])))
        })())
    }

    impl Running {
        pub(crate) fn restart(
            &self,
            backend: Backend,
            ready_timeout: Duration,
        ) -> Result<(), LaunchError> {
            self.container.stop().map_err(|e| tc_err(backend, e))?;
            self.container.start().map_err(|e| tc_err(backend, e))?;
            super::wait_ready(backend, &self.probes, ready_timeout, "testcontainers restart")
        }
    }
}
